"""Runs that nothing can corrupt: the workdir lock, the resume config check, checkpoint
fallback, disk-full saves and the command's one-line errors (issue 44).

Unit tests drive the modules directly; the end-to-end ones run `python -m sgpo_jax.main`
(through tests/fault_main.py for SIGTERM and a full disk) on the tiny config of
tests/test_train.py and compare with an uninterrupted run.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from sgpo_jax import configs, errors, train
from sgpo_jax.config import check as config_check
from sgpo_jax.config import resume as resume_lib
from sgpo_jax.outputs import checkpoint as checkpoint_lib
from sgpo_jax.outputs import lock as lock_lib
from tests.test_train import tiny_run_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORRUPTIONS = ('truncate', 'flip', 'metadata', 'delete')


# ----------------------------------------------------------------------------------------
# Checkpoints: corrupted newest -> fallback; full disk -> previous intact


def _state(offset: float):
  return {'params': {'w': jnp.arange(4000, dtype=jnp.float32) * 0.001 + offset,
                     'b': jnp.full((3,), offset, jnp.bfloat16)},
          'count': jnp.asarray(int(offset), jnp.int32)}


def corrupt(step_dir: str, how: str) -> None:
  """Damages a checkpoint directory as a bad disk or a careless user would."""
  state_dir = os.path.join(step_dir, 'state')
  if how == 'delete':
    shutil.rmtree(state_dir)
    return
  if how == 'metadata':
    with open(os.path.join(state_dir, '_METADATA'), 'w') as f:
      f.write('garbage{')
    return
  data = max(glob.glob(os.path.join(state_dir, '**', 'd', '*'), recursive=True),
             key=os.path.getsize)
  with open(data, 'rb') as f:
    raw = bytearray(f.read())
  if how == 'truncate':
    raw = raw[:len(raw) // 2]
  else:  # flip: 16 bytes spread over the middle half of the largest data file
    for i in np.linspace(len(raw) // 4, 3 * len(raw) // 4, 16).astype(int):
      raw[i] ^= 0x5A
  with open(data, 'wb') as f:
    f.write(bytes(raw))


def _saved_pair(directory: str, keep: int = 2) -> checkpoint_lib.Checkpointer:
  ckpt = checkpoint_lib.Checkpointer(directory, keep=keep)
  ckpt.save(2, _state(2.0), {'step': 2})
  ckpt.save(4, _state(4.0), {'step': 4})
  ckpt.close()
  return checkpoint_lib.Checkpointer(directory, keep=keep)


def _equal(a, b) -> bool:
  return all(jax.tree.leaves(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a, b)))


@pytest.mark.parametrize('how', CORRUPTIONS)
def test_corrupted_newest_checkpoint_is_moved_aside_and_older_restored(tmp_path, how, caplog):
  directory = str(tmp_path / 'checkpoints')
  ckpt = _saved_pair(directory)
  corrupt(os.path.join(directory, '4'), how)
  step, state, meta = ckpt.restore_latest(_state(0.0))
  assert step == 2 and meta['step'] == 2
  assert _equal(state, _state(2.0))
  assert not os.path.exists(os.path.join(directory, '4'))
  aside = glob.glob(os.path.join(directory, '4.corrupt-*'))
  assert len(aside) == 1 and os.listdir(aside[0])  # kept, not deleted
  reports = [r.getMessage() for r in caplog.records if 'cannot be restored' in r.getMessage()]
  assert len(reports) == 1 and '\n' not in reports[0]
  assert reports[0].startswith('checkpoint step 4 cannot be restored (')
  assert checkpoint_lib.Checkpointer(directory).all_steps() == [2]  # a rerun sees step 2


def test_flipped_bytes_restore_silently_without_the_checksum(tmp_path):
  """Why the checksum exists: orbax reads the flipped file back without an error."""
  directory = str(tmp_path / 'checkpoints')
  ckpt = _saved_pair(directory)
  corrupt(os.path.join(directory, '4'), 'flip')
  state, meta = ckpt.restore(4, _state(0.0))  # no error from orbax ...
  assert not _equal(state, _state(4.0))  # ... but other numbers
  with pytest.raises(ValueError, match='checksum mismatch'):
    ckpt.verify(state, meta)


def test_checksum_is_independent_of_sharding():
  state = _state(3.0)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ('x',))
  moved = jax.device_put(state, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
  assert checkpoint_lib.state_checksum(state) == checkpoint_lib.state_checksum(moved)
  words = np.asarray(state['params']['w']).view(np.uint32).astype(np.uint64).sum() % 2**32
  assert checkpoint_lib.state_checksum(state)["['params']['w']"] == int(words)


def test_no_intact_checkpoint_says_how_to_start_fresh(tmp_path):
  directory = str(tmp_path / 'checkpoints')
  ckpt = _saved_pair(directory)
  corrupt(os.path.join(directory, '4'), 'truncate')
  corrupt(os.path.join(directory, '2'), 'delete')
  with pytest.raises(checkpoint_lib.NoIntactCheckpoint) as info:
    ckpt.restore_latest(_state(0.0))
  message = errors.describe(info.value)[1]
  assert '\n' not in message and 'no checkpoint in' in message
  assert '2.corrupt-' in message and '4.corrupt-' in message and 'new --workdir' in message
  assert checkpoint_lib.Checkpointer(directory).restore_latest(_state(0.0)) is None


def _fail_meta_write_with_enospc(monkeypatch, step: int) -> None:
  real = ocp.JsonCheckpointHandler._save_fn

  async def save_fn(self, x, directory):
    if not os.path.basename(os.path.dirname(str(directory))).startswith(f'{step}.'):
      return await real(self, x, directory)
    path = os.path.join(str(directory), self._filename)
    with open(path, 'w') as f:
      f.write('{"step": ')
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
  monkeypatch.setattr(ocp.JsonCheckpointHandler, '_save_fn', save_fn)


@pytest.mark.parametrize('keep', [1, 2])
def test_disk_full_save_keeps_previous_checkpoint(tmp_path, monkeypatch, keep):
  directory = str(tmp_path / 'checkpoints')
  ckpt = checkpoint_lib.Checkpointer(directory, keep=keep)
  ckpt.save(2, _state(2.0), {'step': 2})
  _fail_meta_write_with_enospc(monkeypatch, 4)
  with pytest.raises(errors.DiskFullError) as info:
    ckpt.save(4, _state(4.0), {'step': 4})
  code, message = errors.describe(info.value)
  assert code == 1 and '\n' not in message
  assert message.startswith('disk full at ') and 'the run resumes from step 2' in message
  monkeypatch.undo()
  step, state, meta = checkpoint_lib.Checkpointer(directory, keep=keep).restore_latest(
      _state(0.0))
  assert step == 2 and _equal(state, _state(2.0))


# ----------------------------------------------------------------------------------------
# Config: non-finite floats; resume against config.json


@pytest.mark.parametrize('field,value', [
    ('train.learning_rate', float('inf')), ('train.learning_rate', float('nan')),
    ('train.kl_coef', float('inf')), ('train.clip_eps_high', float('nan')),
    ('sampling.temperature', float('inf')), ('profile.temperature', float('-inf')),
    ('train.early_stop.epsilon', float('nan')),
    ('eval.at_budget_fractions', (0.5, float('nan')))])
def test_non_finite_floats_are_rejected_naming_the_field(field, value):
  config = tiny_run_config('grpo')
  section, name = field.rsplit('.', 1)
  holder = config
  for part in section.split('.'):
    holder = holder[part]
  holder[name] = value
  with pytest.raises(ValueError, match=f'config.{field}=.* is not finite'):
    config_check.check_config(config)


def test_inf_peak_tolerance_stays_a_setting():
  config = tiny_run_config('grpo')
  config.train.early_stop.peak_tolerance = float('inf')
  config_check.check_config(config)


def _workdir_of(config, tmp_path, with_results: bool = True) -> str:
  """A workdir that ran `config` (config.json and a results file), without running it."""
  workdir = str(tmp_path / 'run')
  os.makedirs(os.path.join(workdir, 'checkpoints', '4'))
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump(resume_lib.as_json(config), f)
  if not with_results:
    shutil.rmtree(os.path.join(workdir, 'checkpoints'))
  return workdir


def test_changed_learning_rate_is_refused_before_anything_is_written(tmp_path):
  config = tiny_run_config('grpo')
  workdir = _workdir_of(config, tmp_path)
  with open(os.path.join(workdir, 'config.json')) as f:
    before = f.read()
  config.train.learning_rate = 1e-2
  config.seed = 1
  config.eval.every_steps = 7  # output-only: not in the refusal
  with pytest.raises(errors.ConfigError) as info:
    train.run(config, workdir, show_progress=False)
  message = str(info.value)
  assert 'seed: 0 -> 1' in message and 'new --workdir' in message  # structural first
  config.seed = 0
  with pytest.raises(errors.ConfigError) as info:
    train.run(config, workdir, show_progress=False)
  message = str(info.value)
  assert '\n' not in message and info.value.exit_code == 2
  assert 'train.learning_rate: 0.0002 -> 0.01' in message and 'eval' not in message
  assert '--allow_config_change=train.learning_rate' in message
  with open(os.path.join(workdir, 'config.json')) as f:
    assert f.read() == before  # never overwritten by a refused run
  assert sorted(os.listdir(workdir)) == ['checkpoints', 'config.json', 'run.lock']
  with open(os.path.join(workdir, 'run.lock')) as f:
    assert f.read() == ''  # released on the error


def test_output_only_changes_are_allowed_and_structural_ones_never():
  old = resume_lib.as_json(tiny_run_config('grpo'))
  new_config = tiny_run_config('grpo')
  new_config.eval.every_steps = 5
  new_config.checkpoint.every_steps = 3
  new_config.checkpoint.keep = 4
  new_config.train.num_steps = 10  # larger, constant schedule, no early stop
  new_config.data.math_workers = 4
  new_config.logging.wandb_project = 'runs'  # W&B mirrors metrics.jsonl: output-only
  new_flat = resume_lib.flatten(resume_lib.as_json(new_config))
  old_flat = resume_lib.flatten(old)
  for field, (a, b) in resume_lib.differences(old_flat, new_flat).items():
    assert resume_lib._allowed(field, a, b, new_flat), field
  assert not resume_lib._allowed('train.num_steps', 4, 3, new_flat)  # shorter: another run
  cosine = dict(new_flat, **{'train.schedule': 'cosine'})
  assert not resume_lib._allowed('train.num_steps', 4, 10, cosine)  # decays over num_steps
  stopping = dict(new_flat, **{'train.early_stop.enabled': True})
  assert not resume_lib._allowed('eval.every_steps', 2, 5, stopping)  # the stopper reads evals
  assert not resume_lib._allowed('train.flops_budget', 0.0, 1e12, new_flat)  # a cut, not a raise
  assert resume_lib._structural('model.d_model') and resume_lib._structural('seed')
  assert not resume_lib._structural('data.math_workers')


def test_allowed_changes_are_recorded_and_flag_cannot_unlock_structure(tmp_path):
  config = tiny_run_config('grpo')
  workdir = _workdir_of(config, tmp_path)
  config.train.learning_rate = 1e-3
  config.eval.every_steps = 5
  changes = resume_lib.check_resume(config, workdir, ('train.learning_rate',))
  assert changes == {
      'eval.every_steps': {'old': 2, 'new': 5, 'allowed_by': 'output-only'},
      'train.learning_rate': {'old': 2e-4, 'new': 1e-3, 'allowed_by': '--allow_config_change'}}
  resume_lib.record_changes(workdir, changes, 4)
  with open(os.path.join(workdir, resume_lib.HISTORY_FILE)) as f:
    rows = [json.loads(line) for line in f]
  assert len(rows) == 1 and rows[0]['resumed_from_step'] == 4 and rows[0]['changes'] == changes
  config.model.d_model = 64
  with pytest.raises(errors.ConfigError, match='model.d_model: 32 -> 64.*cannot change'):
    resume_lib.check_resume(config, workdir, ('model.d_model',))
  with pytest.raises(errors.ConfigError, match=r"names \['train.learnin_rate'\]"):
    resume_lib.check_resume(config, workdir, ('train.learnin_rate',))


def test_workdir_without_results_is_not_checked(tmp_path):
  """A run that failed in setup computed nothing under its config.json: fix and rerun."""
  config = tiny_run_config('grpo')
  workdir = _workdir_of(config, tmp_path, with_results=False)
  config.data.num_train = 64
  assert resume_lib.check_resume(config, workdir) == {}


# ----------------------------------------------------------------------------------------
# The workdir lock


def _dead_pid() -> int:
  proc = subprocess.Popen([sys.executable, '-c', 'pass'])
  proc.wait()
  return proc.pid


def _write_record(workdir: str, **record) -> str:
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, lock_lib.LOCK_FILE)
  with open(path, 'w') as f:
    json.dump(record, f)
  return path


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
  workdir = str(tmp_path)
  path = _write_record(workdir, pid=_dead_pid(), host=socket.gethostname(),
                       started='2026-01-01T00:00:00Z')
  with lock_lib.WorkdirLock(workdir):
    with open(path) as f:
      assert json.load(f)['pid'] == os.getpid()
    with pytest.raises(lock_lib.WorkdirLocked, match=f'in use by pid {os.getpid()} on host '):
      lock_lib.WorkdirLock(workdir).acquire()  # held: a second lock in any process fails
  with open(path) as f:
    assert f.read() == ''  # released


def test_lock_of_another_host_is_not_judged_by_pid(tmp_path):
  workdir = str(tmp_path)
  path = _write_record(workdir, pid=os.getpid(), host='other-host',
                       started='2026-01-01T00:00:00Z')
  with pytest.raises(lock_lib.WorkdirLocked) as info:
    lock_lib.WorkdirLock(workdir).acquire()
  message = str(info.value)
  assert 'pid' in message and 'other-host' in message and 'cannot be judged stale' in message
  assert f'delete {path}' in message
  with open(path) as f:
    assert json.load(f)['host'] == 'other-host'  # untouched


_RACER = """
import sys, time
from sgpo_jax.outputs import lock
start_at = float(sys.argv[2])
while time.time() < start_at:
  time.sleep(0.001)
try:
  held = lock.WorkdirLock(sys.argv[1])
  held.acquire()
  print('won', flush=True)
  time.sleep(3.0)  # hold it while the others try
  held.release()
except lock.WorkdirLocked:
  print('lost', flush=True)
"""


def test_racing_runs_on_a_stale_lock_exactly_one_wins(tmp_path):
  workdir = str(tmp_path)
  _write_record(workdir, pid=_dead_pid(), host=socket.gethostname(), started='?')
  start_at = str(time.time() + 3.0)  # after every racer has imported
  procs = [subprocess.Popen([sys.executable, '-c', _RACER, workdir, start_at], cwd=REPO,
                            stdout=subprocess.PIPE, text=True) for _ in range(6)]
  outcomes = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
  assert outcomes == ['lost'] * 5 + ['won']


# ----------------------------------------------------------------------------------------
# End to end: the command


MAIN_ARGS = ('--config', 'default:runlocal=1', '--config.train.num_steps=6',
             '--config.checkpoint.every_steps=2', '--config.eval.every_steps=3',
             '--config.data.num_train=96', '--config.data.num_eval=32',
             '--config.train.rows_per_batch=16', '--config.method=grpo',
             '--config.grpo.group_size=4', '--config.warm_start.steps=20',
             '--config.model.n_layers=2', '--config.model.d_model=32',
             '--config.model.d_ff=64', '--config.model.head_dim=8')


def run_main(workdir: str, *extra: str, entry: str = 'sgpo_jax.main', cache: str = '',
             env: dict | None = None) -> subprocess.CompletedProcess:
  cmd = [sys.executable, '-m', entry, *MAIN_ARGS, '--workdir', workdir, *extra]
  if cache:
    cmd.append(f'--config.warm_start.cache_dir={cache}')
  return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                        env={**os.environ, **(env or {})})


_LOG_LINE = re.compile(r'^[IWD]\d{4} \d')  # absl INFO / WARNING / DEBUG records


def error_lines(stderr: str) -> list[str]:
  """stderr without absl's info and warning log records and tqdm progress bars."""
  return [line for line in stderr.replace('\r', '\n').splitlines()
          if line.strip() and not _LOG_LINE.match(line) and '%|' not in line]


def read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def assert_same_run(full_dir: str, resumed_dir: str) -> None:
  """Same metrics rows (timing aside) and bit-identical final params (their checksums)."""
  a = read_jsonl(os.path.join(full_dir, 'metrics.jsonl'))
  b = read_jsonl(os.path.join(resumed_dir, 'metrics.jsonl'))
  assert [r['step'] for r in a] == [r['step'] for r in b]
  skip = {'tokens_per_second', 'seconds'}
  for ra, rb in zip(a, b):
    assert {k: v for k, v in ra.items() if k not in skip} == \
        {k: v for k, v in rb.items() if k not in skip}
  metas = [checkpoint_lib.Checkpointer(os.path.join(d, 'checkpoints')).restore_meta(6)
           for d in (full_dir, resumed_dir)]
  assert metas[0][checkpoint_lib.CHECKSUM_KEY] == metas[1][checkpoint_lib.CHECKSUM_KEY]


@pytest.fixture(scope='module')
def e2e(tmp_path_factory):
  """An uninterrupted run, and one stopped by SIGTERM after step 5 (checkpoints 2 and 4)."""
  root = tmp_path_factory.mktemp('e2e')
  cache = str(root / 'warm_start_cache')
  full = run_main(str(root / 'full'), cache=cache)
  assert full.returncode == 0, full.stderr[-3000:]
  (root / 'full_stdout.txt').write_text(full.stdout)
  (root / 'full_stderr.txt').write_text(full.stderr)
  termed = run_main(str(root / 'termed'), '--sigterm_after_step=5', entry='tests.fault_main',
                    cache=cache)
  return root, cache, termed


@pytest.mark.slow
def test_a_finished_run_prints_its_result_line_and_no_library_info_records(e2e):
  root = e2e[0]
  with open(root / 'full' / 'summary.json') as f:
    summary = json.load(f)
  stdout = (root / 'full_stdout.txt').read_text()
  lines = [line for line in stdout.splitlines() if line.startswith('result: ')]
  assert lines == [
      f"result: held-out greedy accuracy {summary['eval_accuracy_initial']:.1%} -> "
      f"{summary['eval_accuracy_final']:.1%} (± {100 * summary['eval_accuracy_final_se']:.1f}) "
      f"on 32 problems; 6 RL steps, {summary['flops']['total']:.3g} FLOPs, "
      f"{summary['wall_seconds']:.0f} s wall; report: {root / 'full' / 'report.md'}"]
  stderr = (root / 'full_stderr.txt').read_text()
  # orbax logs ~10 INFO records per checkpoint save; the run saved 3 times.
  assert not [line for line in stderr.splitlines()
              if _LOG_LINE.match(line) and ('checkpoint' in line.split(']')[0]
                                            or 'xla_bridge' in line)]
  assert 'warm start' in stderr  # the package's own INFO records stay


@pytest.mark.slow
def test_sigterm_stops_with_one_line_releases_lock_and_resumes_exactly(e2e, tmp_path):
  root, cache, termed = e2e
  assert termed.returncode == 128 + signal.SIGTERM, termed.stderr[-3000:]
  assert error_lines(termed.stderr)[-1] == ('error: stopped by SIGTERM; rerun the same command '
                                            'to resume from the last checkpoint.')
  assert 'Traceback' not in termed.stderr
  workdir = str(tmp_path / 'run')
  shutil.copytree(str(root / 'termed'), workdir)
  with open(os.path.join(workdir, 'run.lock')) as f:
    assert f.read() == ''
  assert checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints')).all_steps() == [2, 4]
  resumed = run_main(workdir, cache=cache)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert_same_run(str(root / 'full'), workdir)
  with open(os.path.join(workdir, 'run.lock')) as f:
    assert f.read() == ''  # released on normal exit


@pytest.mark.slow
@pytest.mark.parametrize('how', CORRUPTIONS)
def test_resume_falls_back_past_a_corrupted_checkpoint_exactly(e2e, tmp_path, how):
  root, cache, _ = e2e
  workdir = str(tmp_path / 'run')
  shutil.copytree(str(root / 'termed'), workdir)
  corrupt(os.path.join(workdir, 'checkpoints', '4'), how)
  resumed = run_main(workdir, cache=cache)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  reports = [line for line in resumed.stderr.splitlines() if 'cannot be restored' in line]
  assert len(reports) == 1 and 'checkpoint step 4 cannot be restored (' in reports[0]
  assert len(glob.glob(os.path.join(workdir, 'checkpoints', '4.corrupt-*'))) == 1
  assert_same_run(str(root / 'full'), workdir)


@pytest.mark.slow
def test_disk_full_checkpoint_stops_with_one_line_and_resumes_exactly(e2e, tmp_path):
  root, cache, _ = e2e
  workdir = str(tmp_path / 'run')
  shutil.copytree(str(root / 'termed'), workdir)
  full = run_main(workdir, '--enospc_at_checkpoint=6', entry='tests.fault_main', cache=cache)
  assert full.returncode == 1, full.stderr[-3000:]
  assert 'Traceback' not in full.stderr
  line = error_lines(full.stderr)[-1]
  assert line.startswith('error: disk full at ') and '/checkpoints/6.' in line
  assert line.endswith('free space and rerun the same command; the run resumes from step 4.')
  assert checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints')).all_steps() == [2, 4]
  resumed = run_main(workdir, cache=cache)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert_same_run(str(root / 'full'), workdir)


@pytest.mark.slow
def test_allowed_learning_rate_change_resumes_and_is_recorded(e2e, tmp_path):
  root, cache, _ = e2e
  workdir = str(tmp_path / 'run')
  shutil.copytree(str(root / 'termed'), workdir)
  refused = run_main(workdir, '--config.train.learning_rate=0.01', cache=cache)
  assert refused.returncode == 2
  assert error_lines(refused.stderr) == [
      f'error: workdir {workdir} holds a run with another config: train.learning_rate: '
      '0.0002 -> 0.01. Rerun with the values in config.json, use a new --workdir, or pass '
      '--allow_config_change=train.learning_rate to change them from the last checkpoint on '
      '(recorded in config_history.jsonl).']
  allowed = run_main(workdir, '--config.train.learning_rate=0.01',
                     '--allow_config_change=train.learning_rate', cache=cache)
  assert allowed.returncode == 0, allowed.stderr[-3000:]
  history = read_jsonl(os.path.join(workdir, 'config_history.jsonl'))
  assert [row['changes'] for row in history] == [{'train.learning_rate': {
      'old': 2e-4, 'new': 0.01, 'allowed_by': '--allow_config_change'}}]
  assert history[0]['resumed_from_step'] == 4
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['train']['learning_rate'] == 0.01
  full = read_jsonl(str(root / 'full' / 'metrics.jsonl'))
  changed = read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  assert [r['step'] for r in changed] == [r['step'] for r in full] == list(range(7))
  timing = {'tokens_per_second', 'seconds'}
  strip = lambda row: {k: v for k, v in row.items() if k not in timing}  # noqa: E731
  # Rows up to step 5 come from the policy of step 4 and before, so the change leaves them
  # as they were. (Whether later rows differ is not checked: this tiny policy earns reward
  # 0 everywhere, so its updates are zero at any learning rate.)
  assert [strip(r) for r in changed[:6]] == [strip(r) for r in full[:6]]


@pytest.mark.slow
def test_second_run_on_a_locked_workdir_stops_at_once_naming_the_holder(tmp_path):
  workdir = str(tmp_path / 'run')
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time; from sgpo_jax.outputs import lock; '
       f'lock.WorkdirLock({workdir!r}).acquire(); print("held", flush=True); time.sleep(300)'],
      cwd=REPO, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    second = run_main(workdir, '--config.seed=1')
  finally:
    holder.kill()
    holder.wait()
  assert second.returncode == 1
  lines = error_lines(second.stderr)
  assert len(lines) == 1 and lines[0].startswith(
      f'error: workdir {workdir} is in use by pid {holder.pid} on host {socket.gethostname()} '
      'since 20')
  assert sorted(os.listdir(workdir)) == ['run.lock']  # nothing else written


@pytest.mark.slow
@pytest.mark.parametrize('args,expected', [
    (('--config.train.learning_rate=inf',),
     'error: config.train.learning_rate=inf is not finite; give a finite number.'),
    (('--config.train.rows_per_batch=18',),
     'error: train.rows_per_batch=18 is not a multiple of the group size 4; use a multiple '
     'of 4, e.g. 16.'),
    (('--config.train.learnin_rate=1',),
     'error: a --config.* override names no config field: \'learnin_rate\' Did you mean '
     '"learning_rate" instead of "learnin_rate"?'),
    (('--config.train.learning_rate=abc',),
     "error: flag --config.train.learning_rate=abc: could not convert string to float: 'abc' "
     '(see --helpshort)'),
    (('--config', 'my_configs/no_such_config.py'),
     "error: --config my_configs/no_such_config.py: no such file; give a shipped config name "
     "such as default, or a config file's path."),
    (('--config', 'no_such_config:runlocal=1'),
     'error: --config no_such_config: no shipped config of that name and no such file; '
     f'shipped: {", ".join(configs.names())} (or give a path to a config file)'),
    (('--config.data.source=jsonl', '--config.data.path=/no/such/file.jsonl'), None),
])
def test_command_errors_are_one_line(tmp_path, args, expected):
  result = run_main(str(tmp_path / 'run'), *args)
  lines = error_lines(result.stderr)
  assert len(lines) == 1, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert result.returncode == 2
  if expected is None:  # a missing data file: its path and the field to fix
    assert lines[0] == ("error: the run's inputs are not there (nothing was computed or "
                        "written): data.path='/no/such/file.jsonl' does not exist; set "
                        '--config.data.path=/local/dir to the jsonl file or directory of the '
                        'split.')
  else:
    assert lines[0] == expected
  verbose = run_main(str(tmp_path / 'run2'), *args, env={'SGPO_VERBOSE': '1'})
  assert 'Traceback' in verbose.stderr and verbose.returncode != 0
