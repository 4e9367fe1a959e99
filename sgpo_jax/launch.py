"""Runs one job as N cooperating processes on this machine, each with M fake CPU devices.

    python -m sgpo_jax.launch --num-processes 2 --devices-per-process 2 -- \
        --config default:runlocal=1 --workdir /tmp/run

This is how multi-host code is exercised without a pod: every process runs
`python -m sgpo_jax.main <args>` (or `--module`) with JAX_COORDINATOR_ADDRESS (a free port
on 127.0.0.1), JAX_NUM_PROCESSES, JAX_PROCESS_ID and
XLA_FLAGS=--xla_force_host_platform_device_count=M; `jax.distributed` connects them and CPU
collectives run over gloo. Output lines are prefixed with `[pI]`.

If any process fails, the others are stopped (SIGTERM, then SIGKILL) and the launcher exits
with that process's status (128 + signal number for a signal). Every child runs in its own
process group and, on Linux, dies with the launcher, so nothing is left behind.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time

DEVICE_COUNT_FLAG = '--xla_force_host_platform_device_count'


def free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def child_env(base: dict[str, str], process_id: int, num_processes: int, devices: int,
              coordinator: str) -> dict[str, str]:
  env = dict(base)
  flags = [f for f in env.get('XLA_FLAGS', '').split() if not f.startswith(DEVICE_COUNT_FLAG)]
  env.update(XLA_FLAGS=' '.join(flags + [f'{DEVICE_COUNT_FLAG}={devices}']),
             JAX_PLATFORMS='cpu', JAX_COORDINATOR_ADDRESS=coordinator,
             JAX_NUM_PROCESSES=str(num_processes), JAX_PROCESS_ID=str(process_id),
             PYTHONUNBUFFERED='1')
  return env


try:  # loaded here, not in the forked child, where dlopen could deadlock on another thread
  _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
  _PRCTL = None


def _die_with_parent() -> None:
  if _PRCTL is not None:  # Linux: SIGKILL this child when the launcher dies, even by SIGKILL
    _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _pump(stream, prefix: str, lock: threading.Lock) -> None:
  for line in iter(stream.readline, b''):
    with lock:
      sys.stdout.buffer.write(prefix.encode() + line)
      sys.stdout.buffer.flush()
  stream.close()


def _exit_code(returncode: int) -> int:
  return 128 - returncode if returncode < 0 else returncode


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
  for p in procs:
    if p.poll() is None:
      try:
        os.killpg(p.pid, signal.SIGTERM)
      except ProcessLookupError:
        pass
  deadline = time.time() + grace_s
  for p in procs:
    try:
      p.wait(timeout=max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
      pass
  for p in procs:
    try:  # the group too: whatever a child started (reward workers) goes with it
      os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
    p.wait()


def launch(args: list[str], num_processes: int, devices_per_process: int,
           module: str = 'sgpo_jax.main', grace_s: float = 10.0) -> int:
  """Starts the processes, relays their output, returns the launcher's exit status."""
  coordinator = f'127.0.0.1:{free_port()}'
  lock = threading.Lock()
  procs: list[subprocess.Popen] = []
  pumps: list[threading.Thread] = []

  def on_signal(signum, _frame):
    _stop(procs, grace_s)
    sys.exit(128 + signum)

  previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    for i in range(num_processes):
      env = child_env(os.environ, i, num_processes, devices_per_process, coordinator)
      p = subprocess.Popen([sys.executable, '-u', '-m', module, *args], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True, preexec_fn=_die_with_parent)
      procs.append(p)
      t = threading.Thread(target=_pump, args=(p.stdout, f'[p{i}] ', lock), daemon=True)
      t.start()
      pumps.append(t)
    status = 0
    while True:
      codes = [p.poll() for p in procs]
      failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
      if failed:
        i, code = failed[0]
        with lock:
          print(f'[launch] process {i} exited with status {code}; stopping the others',
                file=sys.stderr, flush=True)
        status = _exit_code(code)
        break
      if all(c == 0 for c in codes):
        break
      time.sleep(0.2)
    _stop(procs, grace_s)
    for t in pumps:
      t.join(timeout=5)
    return status
  finally:
    _stop(procs, 0.0)
    for s, handler in previous.items():
      signal.signal(s, handler)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(
      prog='python -m sgpo_jax.launch', description=__doc__.split('\n\n')[0],
      usage='%(prog)s [--num-processes N] [--devices-per-process M] -- <main args>')
  parser.add_argument('--num-processes', type=int, default=2)
  parser.add_argument('--devices-per-process', type=int, default=1)
  parser.add_argument('--module', default='sgpo_jax.main',
                      help='module each process runs with `python -m` (default sgpo_jax.main)')
  parser.add_argument('--grace-seconds', type=float, default=10.0,
                      help='how long a stopped process may take to exit before SIGKILL')
  argv = sys.argv[1:] if argv is None else argv
  rest: list[str] = []
  if '--' in argv:
    cut = argv.index('--')
    argv, rest = argv[:cut], argv[cut + 1:]
  opts = parser.parse_args(argv)
  if opts.num_processes < 1 or opts.devices_per_process < 1:
    parser.error('--num-processes and --devices-per-process must be >= 1')
  sys.exit(launch(rest, opts.num_processes, opts.devices_per_process, opts.module,
                  opts.grace_seconds))


if __name__ == '__main__':
  main()
