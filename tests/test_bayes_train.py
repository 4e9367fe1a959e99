"""method=sgpo_bayes through the main job: profile/probe FLOPs in the ledger, SIGKILL-resume."""

import json
import os
import signal
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _run_main(workdir, kill_after_step=None, steps=6):
  entry = (['tests.sigkill_main', f'--kill_after_step={kill_after_step}']
           if kill_after_step is not None else ['sgpo_jax.main'])
  cmd = [sys.executable, '-m', *entry, '--config', 'configs/default.py:runlocal=1',
         '--workdir', workdir, f'--config.train.num_steps={steps}',
         '--config.checkpoint.every_steps=2', '--config.eval.every_steps=3',
         '--config.data.num_train=96', '--config.data.num_eval=32',
         '--config.train.rows_per_batch=16', '--config.method=sgpo_bayes',
         '--config.sgpo_bayes.window=4', '--config.warm_start.steps=20',
         '--config.model.n_layers=2', '--config.model.d_model=32', '--config.model.d_ff=64',
         '--config.model.head_dim=8']
  return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                        check=False)


@pytest.mark.slow
def test_sgpo_bayes_ledger_counts_probes_and_sigkill_resume_is_exact(tmp_path):
  full = _run_main(str(tmp_path / 'full'))
  assert full.returncode == 0, full.stderr[-3000:]
  with open(tmp_path / 'full' / 'summary.json') as f:
    summary = json.load(f)
  rows = [r for r in read_jsonl(str(tmp_path / 'full' / 'metrics.jsonl')) if 'reward_mean' in r]
  # Every generation-only probe round is charged to 'profile'; the summary's allocator
  # block counts the same samples.
  alloc = summary['allocator']
  assert sum(r['profile_rounds'] for r in rows) >= 1
  assert (summary['flops']['profile'] > 0) == (alloc['profile_samples'] +
                                               alloc['probe_samples'] > 0)
  flops = summary['flops']
  assert flops['total'] == pytest.approx(flops['profile'] + flops['rollout'] + flops['train'])
  assert summary['compiles']['train_step'] == 1

  killed = _run_main(str(tmp_path / 'killed'), kill_after_step=3)
  assert killed.returncode == -signal.SIGKILL
  resumed = _run_main(str(tmp_path / 'killed'))
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  a = read_jsonl(str(tmp_path / 'full' / 'metrics.jsonl'))
  b = read_jsonl(str(tmp_path / 'killed' / 'metrics.jsonl'))
  assert [r['step'] for r in a] == [r['step'] for r in b]
  skip = {'tokens_per_second', 'seconds'}
  for ra, rb in zip(a, b):
    assert {k: v for k, v in ra.items() if k not in skip} == \
        {k: v for k, v in rb.items() if k not in skip}
