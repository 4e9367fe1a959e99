"""The comparison's moving parts: DAPO's FLOPs accounting against GRPO, the FLOPs budget
stop, the embedded default learning end to end, and the comparison runner's smoke mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sgpo_jax import default_config
from sgpo_jax import train
from tests.test_train import read_jsonl, tiny_run_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _step_rows(workdir):
  return [r for r in read_jsonl(os.path.join(workdir, 'metrics.jsonl')) if 'reward_mean' in r]


@pytest.fixture(scope='module')
def grpo_and_dapo(tmp_path_factory):
  out = {}
  for method in ('grpo', 'dapo'):
    config = tiny_run_config(method, num_steps=4)
    config.grpo.group_size = config.dapo.group_size = 8
    config.dapo.max_rounds = 3
    workdir = str(tmp_path_factory.mktemp(method))
    out[method] = (workdir, train.run(config, workdir, show_progress=False))
  return out


@pytest.mark.slow
def test_dapo_counts_every_generation_round(grpo_and_dapo):
  grpo_dir, grpo = grpo_and_dapo['grpo']
  dapo_dir, dapo = grpo_and_dapo['dapo']
  assert grpo['steps'] == dapo['steps'] == 4
  rows = _step_rows(dapo_dir)
  rounds = [r['rounds'] for r in rows]
  assert all(1 <= k <= 3 for k in rounds)
  for r in rows:
    # Every valid generated row is either trained on or counted as discarded.
    assert r['dapo_discarded_rows'] + 16 * (1 - r['padding_fraction']) == \
        pytest.approx(16 * r['rounds'])
  # Same sampler, same rows per round: rollout FLOPs scale with the rounds run. The sampler
  # may stop decoding early when every row is done, so allow a little slack per round.
  per_round = grpo['flops']['rollout'] / grpo['steps']
  assert dapo['flops']['rollout'] == pytest.approx(per_round * sum(rounds), rel=0.3)
  if sum(rounds) > len(rounds):
    assert dapo['flops']['rollout'] > grpo['flops']['rollout']
  # Training FLOPs do not depend on the rounds: one [R, T] step per RL step.
  assert dapo['flops']['train'] == pytest.approx(grpo['flops']['train'])


@pytest.mark.slow
def test_flops_budget_stops_the_loop(tmp_path):
  config = tiny_run_config('grpo', num_steps=50)
  config.grpo.group_size = 4
  config.train.flops_budget = 2.5e8  # ~4.6 tiny steps of 5.5e7 FLOPs
  summary = train.run(config, str(tmp_path), show_progress=False)
  assert summary['steps'] < 50
  assert summary['stop_reason'].startswith('flops budget')
  rows = _step_rows(str(tmp_path))
  assert rows[-1]['flops_total'] >= 2.5e8 > rows[-2]['flops_total']
  assert 'eval_accuracy' in rows[-1]  # the stopping step is always evaluated
  assert summary['eval_accuracy_final'] == rows[-1]['eval_accuracy']


def default_learning_config(cache_dir: str):
  """The embedded default with its own warm start (cached: ~2 CPU minutes once), RL on a
  1024-query prefix of the pool for 40 steps: a few CPU minutes, and still learning."""
  c = default_config.get_config()
  c.warm_start.cache_dir = cache_dir
  c.data.rl_pool_size = 1024
  c.train.num_steps = 40
  c.eval.every_steps = 20
  c.checkpoint.every_steps = 100
  return c


@pytest.mark.slow
def test_default_config_learns_end_to_end(tmp_path):
  cache = os.path.join(os.environ.get('SGPO_TEST_CACHE', '/tmp'), 'sgpo_test_default_ws')
  summary = train.run(default_learning_config(cache), str(tmp_path), show_progress=False)
  assert summary['steps'] == 40
  assert summary['profile']['n_queries'] == 1024
  assert summary['padding_fraction'] < 0.05
  assert summary['eval_accuracy_final'] > summary['eval_accuracy_initial'] + 0.02, summary


@pytest.mark.slow
def test_compare_smoke_writes_every_field(tmp_path):
  cmd = [sys.executable, 'experiments/compare.py', '--smoke', '--results-dir',
         str(tmp_path / 'results'), '--runs-dir', str(tmp_path / 'runs'),
         '--cache-dir', os.path.join(os.environ.get('SGPO_TEST_CACHE', '/tmp'),
                                     'sgpo_test_warm_start')]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                        env=dict(os.environ, PYTHONPATH=REPO))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  results = tmp_path / 'results'
  with open(results / 'compare.json') as f:
    out = json.load(f)
  for key in ('flops_ratio_vs_grpo', 'flops_ratio_vs_dapo', 'final_accuracy', 'seeds',
              'flops_budget', 'command', 'target_accuracy', 'arms'):
    assert key in out, key
  assert set(out['final_accuracy']) == {'sgpo', 'grpo', 'dapo'}
  for stats in out['final_accuracy'].values():
    assert set(stats) == {'mean', 'std'}
  assert out['seeds'] == [0]
  for arm in out['arms'].values():
    assert arm['flops_total_mean'] >= out['flops_budget']  # every run spent the budget
  assert out['arms']['sgpo']['flops_profile_mean'] > 0
  assert (results / 'compare.md').exists()
  assert (results / 'plots' / 'compare_main.png').exists()
  assert (tmp_path / 'runs' / 'main' / 'sweep.csv').exists()


def test_bucket_settled_only_when_no_remaining_sample_can_change_the_bucket():
  from sgpo_jax import sgpo
  cfg = default_config.get_config().sgpo
  for n in range(1, 9):
    for c in range(n + 1):
      finals = {sgpo.profile_bucket(c + extra, 8, cfg) for extra in range(8 - n + 1)}
      expected = len(finals) == 1 and finals == {sgpo.profile_bucket(c, n, cfg)}
      assert sgpo.bucket_settled(c, n, 8, cfg) == expected, (c, n)
  assert not sgpo.bucket_settled(0, 7, 8, cfg)  # one more sample may still solve it
  assert sgpo.bucket_settled(3, 5, 8, cfg)  # 3..6 of 8 are all G=2
  assert sgpo.bucket_settled(7, 7, 8, cfg)  # 7/8 and 8/8 are both trivial


@pytest.mark.slow
def test_profile_early_stop_keeps_every_bucket_and_saves_flops(tmp_path):
  from sgpo_jax import sgpo
  out = {}
  for early in (False, True):
    config = tiny_run_config('sgpo')
    config.profile.early_stop = early
    config.sgpo.trivial_threshold = 0.75
    workdir = str(tmp_path / str(early))
    summary = train.run(config, workdir, stop_after='profile', show_progress=False)
    rows = {r['id']: r for r in read_jsonl(os.path.join(workdir, 'profile.jsonl'))}
    out[early] = rows
  assert out[True].keys() == out[False].keys()
  saved = 0
  for qi, full in out[False].items():
    part = out[True][qi]
    assert full['n_samples'] == 8 and 1 <= part['n_samples'] <= 8
    assert sgpo.profile_bucket(part['n_correct'], part['n_samples'], config.sgpo) == \
        sgpo.profile_bucket(full['n_correct'], 8, config.sgpo)
    saved += 8 - part['n_samples']
  del summary
  assert saved >= 0


def test_fill_phase_tail_tops_up_the_last_batch_of_a_phase():
  from sgpo_jax import allocators, sgpo
  profile = {'n_correct': [4] * 10 + [2] * 6 + [1] * 3, 'n_samples': [8] * 19}
  out = {}
  for fill in (False, True):
    cfg = {'fill_phase_tail': fill, 'unsolved_keep_fraction': 0.0}
    alloc = allocators.SGPOAllocator(sgpo.allocate(profile, cfg, 0), cfg, 16, 0, 19)
    plans = [alloc.next_plan() for _ in range(6)]
    out[fill] = [p.rows(16).padding_fraction for p in plans]
    if fill:  # a cycle is 10 x G2 + 6 x G4 + 3 x G8 = 68 rows: all 19 queries in 6 batches
      assert len({int(q) for p in plans for q in p.query_index}) == 19
  assert max(out[False]) > 0  # the G2 phase's 20 rows leave a half-empty second batch
  assert sum(out[True]) < sum(out[False])
