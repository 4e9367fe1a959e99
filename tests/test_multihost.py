"""The same run across processes: `sgpo_jax.launch` with jax.distributed on loopback CPU.

2 processes x 2 fake devices must reproduce 1 process x 4 fake devices (same seed): the same
metrics and final params, on the default path (sgpo_bayes, packed train step split over
the data axis) and with the continuous sampler (one slot schedule per data shard) behind
the paper's sGPO profile. Killing one process stops the other and the launcher fails;
restarting resumes to the uninterrupted result. Only process 0 writes run files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING_KEYS = {'seconds', 'tokens_per_second'}
DISTRIBUTED_ENV = ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID',
                   'SGPO_DISTRIBUTED')



def _main_args(workdir, cache_dir, **extra) -> list[str]:
  """A tiny run on the default path (sgpo_bayes, packed train step) whose policy solves some
  problems, so RL steps move the params; `extra`: more `--config.` overrides."""
  overrides = dict(
      **{'model.d_model': 32, 'model.n_layers': 2, 'model.d_ff': 64, 'model.n_heads': 4,
         'model.n_kv_heads': 2, 'model.head_dim': 8},
      **{'data.num_train': 64, 'data.num_eval': 32, 'data.max_digits': 2,
         'data.format_reward': 0.1},
      **{'warm_start.steps': 80, 'warm_start.cache_dir': str(cache_dir)},
      **{'train.rows_per_batch': 16, 'train.num_steps': 4, 'eval.every_steps': 2,
         'checkpoint.every_steps': 2, 'train.pack_rows': 2}, **extra)
  return (['--config', 'default:runlocal=1', '--workdir', str(workdir)]
          + [f'--config.{k}={v}' for k, v in overrides.items()])


def _clean_env(**extra) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
  env.update(extra)
  return env


def _single_process(args, devices=4):
  env = _clean_env(XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
                   JAX_PLATFORMS='cpu', SGPO_DISTRIBUTED='0')
  return subprocess.run([sys.executable, '-m', 'sgpo_jax.main', *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)


def _launch(args, processes=2, devices=2, module='sgpo_jax.main', **env):
  cmd = [sys.executable, '-m', 'sgpo_jax.launch', '--num-processes', str(processes),
         '--devices-per-process', str(devices), '--grace-seconds', '5', '--module', module,
         '--', *args]
  return subprocess.run(cmd, cwd=REPO, env=_clean_env(**env), capture_output=True, text=True,
                        timeout=900)


def _ok(proc) -> None:
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def _jsonl(path) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _final_params(workdir) -> list[np.ndarray]:
  import orbax.checkpoint as ocp
  ckpt = os.path.join(workdir, 'checkpoints')
  step = max(int(d) for d in os.listdir(ckpt) if d.isdigit())
  path = os.path.join(ckpt, str(step), 'state')
  checkpointer = ocp.PyTreeCheckpointer()
  meta = checkpointer.metadata(path)
  tree = getattr(meta, 'item_metadata', meta)
  tree = getattr(tree, 'tree', tree)
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
  state = checkpointer.restore(path, restore_args=restore_args)
  return [np.asarray(x) for x in jax.tree.leaves(state['params'])]


def _assert_same_metrics(a_rows, b_rows) -> None:
  assert [r['step'] for r in a_rows] == [r['step'] for r in b_rows]
  for ra, rb in zip(a_rows, b_rows):
    assert set(ra) == set(rb), (ra['step'], set(ra) ^ set(rb))
    for key in set(ra) - TIMING_KEYS:
      if isinstance(ra[key], float):
        assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-6), (ra['step'], key)
      else:
        assert rb[key] == ra[key], (ra['step'], key)


def _assert_same_params(a_dir, b_dir) -> None:
  a, b = _final_params(a_dir), _final_params(b_dir)
  assert len(a) == len(b) and a
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


WORKER = """
import os, sys, time
me = int(os.environ['JAX_PROCESS_ID'])
print('hello from', me, os.environ['JAX_NUM_PROCESSES'], os.environ['XLA_FLAGS'], flush=True)
open(os.path.join(os.environ['OUT'], f'pid{me}'), 'w').write(str(os.getpid()))
if me == 1:
  time.sleep(1.0)
  sys.exit(3)
time.sleep(120)
"""


def test_launcher_stops_all_processes_when_one_fails(tmp_path):
  (tmp_path / 'fake_worker.py').write_text(WORKER)
  start = time.time()
  proc = subprocess.run(
      [sys.executable, '-m', 'sgpo_jax.launch', '--num-processes', '2',
       '--devices-per-process', '3', '--module', 'fake_worker', '--grace-seconds', '2'],
      cwd=REPO, env=_clean_env(PYTHONPATH=f'{tmp_path}{os.pathsep}{REPO}', OUT=str(tmp_path)),
      capture_output=True, text=True, timeout=60)
  assert proc.returncode == 3, proc.stdout + proc.stderr
  assert time.time() - start < 30
  for i in range(2):
    assert f'[p{i}] hello from {i} 2 ' in proc.stdout
  assert '--xla_force_host_platform_device_count=3' in proc.stdout
  assert 'process 1 exited with status 3' in proc.stderr
  survivor = int((tmp_path / 'pid0').read_text())
  assert not os.path.exists(f'/proc/{survivor}') or \
      open(f'/proc/{survivor}/stat').read().split()[2] == 'Z'


def test_single_process_helpers_are_identity(monkeypatch):
  from sgpo_jax.parallel import processes, sharding
  for key in DISTRIBUTED_ENV:
    monkeypatch.delenv(key, raising=False)
  assert not processes.initialize_distributed()
  assert processes.broadcast_from_writer({'a': [1, 2]}) == {'a': [1, 2]}
  rewards = processes.score_across_processes(
      lambda completions, queries: [float(c == q) for c, q in zip(completions, queries)],
      ['1', '2', '3'], ['1', '0', '3'])
  assert rewards.dtype == np.float32 and rewards.tolist() == [1.0, 0.0, 1.0]
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ('data',))
  rows = sharding.process_local_rows(sharding.batch_sharding(mesh, 2), (6, 3))
  assert rows.tolist() == list(range(6))


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """One uninterrupted run on 1 process x 4 devices and one on 2 processes x 2 devices."""
  root = tmp_path_factory.mktemp('multihost')
  timings = {}
  start = time.time()
  _ok(_single_process(_main_args(root / 'one', root / 'cache_one')))
  timings['one'] = time.time() - start
  start = time.time()
  two = _launch(_main_args(root / 'two', root / 'cache_two'))
  timings['two'] = time.time() - start
  _ok(two)
  return root, two, timings


def _assert_same_run(one_dir, two_dir, two) -> None:
  assert '[p0] ' in two.stdout and '[p1] ' in two.stdout
  profiles = [d / 'profile.jsonl' for d in (one_dir, two_dir)]
  assert profiles[0].exists() == profiles[1].exists()
  if profiles[0].exists():
    assert profiles[0].read_text() == profiles[1].read_text()
  one_rows, two_rows = _jsonl(one_dir / 'metrics.jsonl'), _jsonl(two_dir / 'metrics.jsonl')
  assert max(r['step'] for r in two_rows) == 4
  assert any(r.get('grad_norm', 0) > 0 for r in two_rows)  # the RL steps did move params
  _assert_same_metrics(one_rows, two_rows)
  _assert_same_params(one_dir, two_dir)
  one_sum = json.loads((one_dir / 'summary.json').read_text())
  two_sum = json.loads((two_dir / 'summary.json').read_text())
  assert two_sum['flops'] == pytest.approx(one_sum['flops'])
  assert two_sum.get('profile') == one_sum.get('profile')
  assert two_sum['compiles'] == one_sum['compiles']


@pytest.mark.slow
def test_two_processes_reproduce_one_process(runs):
  root, two, _ = runs
  config = json.loads((root / 'two' / 'config.json').read_text())
  assert config['method'] == 'sgpo_bayes' and config['train']['packing']  # the default path
  _assert_same_run(root / 'one', root / 'two', two)


@pytest.mark.slow
def test_continuous_sampler_and_profile_across_processes(runs):
  """The paper's sGPO (a profiling pass) on the continuous sampler: 4 data shards of 2 decode
  slots each, in one process or two."""
  root, _, _ = runs
  extra = {'method': 'sgpo', 'sampling.engine': 'continuous', 'sampling.decode_slots': 2,
           'sampling.prefill_step': 4, 'sgpo.unsolved_keep_fraction': 1.0,
           'sgpo.trivial_threshold': 0.99}
  # The warm starts cached by the default-path runs (the method is not part of their key).
  _ok(_single_process(_main_args(root / 'c_one', root / 'cache_one', **extra)))
  two = _launch(_main_args(root / 'c_two', root / 'cache_two', **extra))
  _ok(two)
  config = json.loads((root / 'c_two' / 'config.json').read_text())
  assert config['sampling']['engine'] == 'continuous' and config['train']['packing']
  _assert_same_run(root / 'c_one', root / 'c_two', two)
  profile = _jsonl(root / 'c_two' / 'profile.jsonl')
  assert sorted(r['id'] for r in profile) == list(range(64))


@pytest.mark.slow
def test_only_process_zero_writes_run_files(runs):
  root, _, _ = runs
  workdir = root / 'two'
  names = []
  for dirpath, dirnames, filenames in os.walk(workdir):
    if os.path.relpath(dirpath, workdir).startswith('checkpoints'):
      continue  # orbax's own layout (one ocdbt store per process is by design)
    names += [os.path.relpath(os.path.join(dirpath, f), workdir) for f in filenames]
  for name in names:
    assert not name.endswith(('.tmp', '.1')), name
    assert 'process_1' not in name, name
  assert len([n for n in names if n.startswith('tensorboard/')]) == 1, names
  for name in ('config.json', 'summary.json', 'report.md', 'metrics.jsonl'):
    assert name in names
  rows = _jsonl(workdir / 'metrics.jsonl')  # every line parses: nothing torn or interleaved
  assert [r['step'] for r in rows] == sorted({r['step'] for r in rows})


def _processes_mentioning(text: str) -> list[int]:
  found = []
  for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == os.getpid():
      continue
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        if text.encode() in f.read():
          found.append(int(pid))
    except OSError:
      pass
  return found


@pytest.mark.slow
def test_killed_process_stops_the_run_and_resume_matches(runs, tmp_path):
  root, _, timings = runs
  workdir = tmp_path / 'killed'
  # The warm start cached by the uninterrupted 2-process run: this also restores it collectively.
  args = _main_args(workdir, root / 'cache_two')
  start = time.time()
  # tests/sigkill_main.py: process 1 SIGKILLs itself after step 3 (the fault hook is test code).
  killed = _launch(['--kill_after_step=3', '--kill_process=1', *args],
                   module='tests.sigkill_main')
  assert killed.returncode != 0
  assert 'process 1 exited with status -9' in killed.stderr, killed.stderr[-3000:]
  assert time.time() - start < timings['two'] + 120  # the survivor was stopped, not awaited
  assert _processes_mentioning(str(workdir)) == []
  assert max(int(d) for d in os.listdir(workdir / 'checkpoints') if d.isdigit()) == 2
  assert max(r['step'] for r in _jsonl(workdir / 'metrics.jsonl')) <= 3

  _ok(_launch(args))
  _assert_same_metrics(_jsonl(root / 'two' / 'metrics.jsonl'), _jsonl(workdir / 'metrics.jsonl'))
  _assert_same_params(root / 'two', workdir)
