"""GRESO and Knapsack through the real loop on the tiny config: one train-step compile,
every rollout round in the FLOPs ledger, and a stopped run resumes to the same metrics."""

from __future__ import annotations

import os

import pytest

from sgpo_jax import tasks, train
from tests.test_train import coin_flip_reward, read_jsonl, tiny_run_config


def _config(method, num_steps):
  c = tiny_run_config(method, num_steps=num_steps)
  c.greso.group_size = 4
  c.knapsack.group_size, c.knapsack.min_group_size, c.knapsack.max_group_size = 4, 2, 8
  return c


def _rows(workdir):
  return [r for r in read_jsonl(os.path.join(workdir, 'metrics.jsonl')) if 'reward_mean' in r]


@pytest.mark.slow
@pytest.mark.parametrize('method', ['greso', 'knapsack'])
def test_adaptive_allocator_runs_and_resumes_exactly(method, tmp_path, monkeypatch):
  monkeypatch.setattr(tasks, 'get_reward_fn', coin_flip_reward)
  full = train.run(_config(method, 4), str(tmp_path / 'full'), show_progress=False)
  assert full['steps'] == 4 and full['compiles']['train_step'] == 1
  rows = _rows(str(tmp_path / 'full'))
  if method == 'greso':
    # Every generation round is paid for: rollout FLOPs grow with the rounds run.
    rounds = sum(r['rounds'] for r in rows)
    assert rounds >= 4 and all('greso_p_easy' in r for r in rows)
  else:
    assert {r['phase'] for r in rows} == {'knapsack'}
  # Stop at step 2 (a checkpoint), then continue to 4 in the same workdir.
  part = str(tmp_path / 'part')
  train.run(_config(method, 2), part, show_progress=False)
  os.remove(os.path.join(part, 'summary.json'))
  train.run(_config(method, 4), part, show_progress=False)
  skip = {'tokens_per_second', 'seconds'}
  a = [{k: v for k, v in r.items() if k not in skip} for r in _rows(str(tmp_path / 'full'))]
  b = [{k: v for k, v in r.items() if k not in skip} for r in _rows(part)]
  assert a == b
