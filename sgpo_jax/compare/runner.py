"""One comparison run at a time: runs (or resumes) a run of the sweep under a per-run lock, so
two sweep processes over one runs folder never write the same run."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from typing import Any

from sgpo_jax.compare import sweep
from sgpo_jax.compare.arms import config_arg

RUN_LOCK = '.compare.lock'


def run_one(entry: dict[str, Any], runs_dir: str, code_dir: str, log) -> bool | None:
  """Runs (or resumes) one run; True when it has a summary.json afterwards, None when another
  sweep process is running it right now (so two sweeps over one runs dir never write the same
  run: each holds an exclusive lock on the run's folder while it runs)."""
  workdir = os.path.join(runs_dir, entry['regime'], entry['name'])
  if os.path.exists(os.path.join(workdir, 'summary.json')):
    return True
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, RUN_LOCK), 'w') as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when this process ends
    except BlockingIOError:
      log(f"[compare] {entry['regime']}/{entry['name']}: another sweep process is running it; "
          'skipped')
      return None
    if os.path.exists(os.path.join(workdir, 'summary.json')):  # finished while we waited
      return True
    cmd = sweep.command_for(entry['overrides'], workdir, config_arg(entry['regime'], code_dir))
    log(f"[compare] {entry['regime']}/{entry['name']}: " + ' '.join(cmd[1:]))
    start = time.time()
    with open(os.path.join(workdir, 'stdout.log'), 'a') as fh:
      proc = subprocess.run(cmd, cwd=code_dir, stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=code_dir))
    log(f"[compare] {entry['regime']}/{entry['name']}: exit {proc.returncode} after "
        f'{time.time() - start:.0f} s')
    return proc.returncode == 0


