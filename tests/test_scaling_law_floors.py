"""studies/scaling_law/floors.py: a zero-loss stop's measured loss at each plateau reading,
the worst case it shows on a test of n runs, the reward forecast's error beside its noise
floor, and the committed report against its JSON and the pooled report it reads."""

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from sgpo_jax.scaling_law.runs import RunRecord

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / 'experiments' / 'results' / 'scaling_law_floors'


def _script():
  sys.path.insert(0, os.path.join(REPO, 'experiments'))
  return importlib.import_module('scaling_law_floors')


def _eval(steps, values, total_steps=100):
  steps = np.asarray(steps, float)
  return RunRecord(run_dir=Path('.'), name='r', model='m', params_nonembed=None,
                   total_steps=total_steps, metric='eval_accuracy', steps=steps,
                   values=np.asarray(values, float), flops_total=steps * 10.0)


def test_plateau_losses_by_hand():
  floors = _script()
  # The last 5% of 100 steps starts at step 95: readings 0.70, 0.72, 0.74. Each against the
  # mean of the other two: 0.73 - 0.70, 0.72 - 0.72, 0.71 - 0.74, in points.
  record = _eval([0, 50, 90, 96, 98, 100], [0.5, 0.6, 0.9, 0.70, 0.72, 0.74])
  np.testing.assert_allclose(floors.plateau_losses(record), [3.0, 0.0, -3.0], atol=1e-9)
  # Two readings in the window hold no spread to measure.
  assert floors.plateau_losses(_eval([0, 50, 98, 100], [0.5, 0.6, 0.7, 0.74])) is None


def test_guarded_plateau_losses_keep_only_readings_near_the_best_so_far():
  floors = _script()
  # Best so far at steps > 0: 0.75 (step 50), then 0.76 at step 98. Within 1 point of it:
  # 0.745 (step 96, best 0.75) and 0.76 (step 98); 0.70 (step 100) is 6 points below 0.76.
  record = _eval([0, 50, 96, 98, 100], [0.9, 0.75, 0.745, 0.76, 0.70])
  # Unguarded: 0.73 - 0.745, 0.7225 - 0.76, 0.7525 - 0.70 (points).
  np.testing.assert_allclose(floors.plateau_losses(record), [-1.5, -3.75, 5.25], atol=1e-9)
  np.testing.assert_allclose(floors.plateau_losses(record, 0.01), [-1.5, -3.75], atol=1e-9)
  # Step 0's reading (the initial policy) sets no peak: 0.9 there does not block the rest.
  # No reading the guard allows: None.
  dips = _eval([0, 50, 96, 98, 100], [0.5, 0.9, 0.7, 0.71, 0.72])
  assert floors.plateau_losses(dips, 0.01) is None


def test_worst_of_n_on_constant_and_rare_losses():
  floors = _script()
  rng = np.random.default_rng(0)
  constant = [np.full(4, 3.5), np.full(2, 3.5)]
  result = floors.worst_of_n(constant, n=10, draws=200, rng=rng)
  assert result['worst_median'] == pytest.approx(3.5)
  assert result['p_worst_over'] == 1.0 and result['mean_over'] == pytest.approx(10.0)
  below = floors.worst_of_n([np.full(3, 2.0)], n=50, draws=200, rng=rng)
  assert below['p_worst_over'] == 0.0 and below['mean_over'] == 0.0
  # Each run: one reading in 100 loses 5 points, the rest 0. Over 80 runs the worst passes 3
  # with probability 1 - 0.99^80 = 0.5525, and 0.8 runs pass it on average.
  rare = [np.r_[np.zeros(99), 5.0] for _ in range(7)]
  result = floors.worst_of_n(rare, n=80, draws=4000, rng=rng)
  assert result['p_worst_over'] == pytest.approx(1 - 0.99 ** 80, abs=0.03)
  assert result['mean_over'] == pytest.approx(0.8, abs=0.06)
  with pytest.raises(ValueError, match='at least one run'):
    floors.worst_of_n([], n=80, draws=10, rng=rng)
  with pytest.raises(ValueError, match='n=0'):
    floors.worst_of_n(rare, n=0, draws=10, rng=rng)


def _row(err, flat, floor, rho=0.0, seed='seed1'):
  return {'err': err, 'flat_err': flat, 'floor': floor, 'rho': rho, 'seed': seed}


def test_reward_summary_and_verdicts_by_hand():
  floors = _script()
  rng = np.random.default_rng(0)
  summary = floors.reward_summary([_row(0.04, 0.10, 0.035), _row(0.02, 0.06, 0.025)], rng)
  assert summary['err'] == pytest.approx(0.03) and summary['flat'] == pytest.approx(0.08)
  assert summary['floor'] == pytest.approx(0.03)
  assert summary['err_over_floor'] == pytest.approx(1.0)
  assert summary['ratio'] == pytest.approx(0.375) and summary['oracle_ratio'] == pytest.approx(0.375)
  # One seed: every bootstrap draw is the whole set.
  assert summary['floor_ci95'] == pytest.approx([0.03, 0.03])
  assert floors.verdict(summary, 'error') == 'met' and floors.verdict(summary, 'ratio') == 'met'
  # Error 0.045 over a floor of 0.04 on every seed: even the late-level oracle misses 0.03.
  noisy = floors.reward_summary([_row(0.045, 0.07, 0.04, seed=f'seed{k}') for k in range(4)],
                                rng)
  assert floors.verdict(noisy, 'error') == 'missed, floor above it'
  assert floors.verdict(noisy, 'ratio') == 'missed, floor above it'  # 0.64x, oracle 0.57x
  # A floor over 0.03 on average whose seeds straddle it rules nothing out.
  straddle = floors.reward_summary([_row(0.045, 0.07, 0.02, seed='seed1'),
                                    _row(0.045, 0.07, 0.05, seed='seed2')], rng)
  assert straddle['floor'] == pytest.approx(0.035) and straddle['floor_ci95'][0] < 0.03
  assert floors.verdict(straddle, 'error') == 'missed'
  # Autocorrelated late readings: the floor rules nothing out.
  correlated = floors.reward_summary([_row(0.045, 0.07, 0.04, rho=0.5)], rng)
  assert not correlated['floor_holds']
  assert floors.verdict(correlated, 'error') == 'missed'
  # Without intervals there is no out-of-reach verdict.
  assert floors.verdict(floors.reward_summary([_row(0.045, 0.07, 0.04)]), 'error') == 'missed'


def test_reward_rows_join_each_forecast_to_its_runs_floor_and_name_a_missing_record():
  floors = _script()
  values = np.tile([0.45, 0.55], 10)
  steps = np.arange(1, 21, dtype=float)
  record = RunRecord(run_dir=Path('.'), name='default/grpo_seed30', model='m',
                     params_nonembed=None, total_steps=20, metric='reward_mean', steps=steps,
                     values=values, flops_total=steps)
  row = {'run': 'default/grpo_seed30', 'metric': 'reward_mean', 'method': 'grpo',
         'regime': 'default', 'flat_err': 0.08, 'group': {'err': 0.05}}
  accuracy_row = dict(row, metric='eval_accuracy')
  (joined,) = floors.reward_rows([row, accuracy_row], {'default/grpo_seed30': record})
  # sigma = 0.1 / sqrt(2); the last 5% of 20 steps holds 2 readings (steps 19, 20).
  assert joined['floor'] == pytest.approx(np.sqrt(2 / np.pi) * 0.1 / np.sqrt(2) / np.sqrt(2))
  assert joined['err'] == 0.05 and joined['method'] == 'grpo'
  with pytest.raises(ValueError, match='default/grpo_seed30.*reward_over_profile'):
    floors.reward_rows([dict(row, metric='reward_over_profile')], {'default/grpo_seed30': record})


def test_committed_report_matches_its_json_and_the_pooled_report():
  """The committed report says what its JSON holds, and its reward errors are the pooled
  report's (the same rows, read back)."""
  result = json.loads((OUT / 'results.json').read_text())
  report = (OUT / 'results.md').read_text()
  assert result['command'] in report
  pooled = json.loads((REPO / 'experiments' / 'results' / 'scaling_law_pooled' /
                       'results.json').read_text())
  for metric in ('reward_mean', 'reward_over_profile'):
    ours = next(s for s in result['reward'] if s['metric'] == metric and s['label'] == 'all')
    theirs = next(s for s in pooled['cli']['summaries']
                  if s['metric'] == metric and s['label'] == 'all')
    assert ours['runs'] == theirs['n'] and ours['err'] == pytest.approx(theirs['group_err'])
    assert ours['flat'] == pytest.approx(theirs['flat_err'])
    assert f"**{ours['err']:.4f}**" in report
  for kind, rows in result['plateau']['worst_of_n'].items():
    for row in rows:
      assert f"| {kind} | {row['n']} | {row['worst_median']:.2f} [" in report
  # The guard only drops readings: never more guarded readings than plateau readings.
  for group in result['plateau']['groups']:
    if group['guarded']:
      assert group['guarded']['readings'] <= group['unguarded']['readings']
  balanced = result['rule']['pooled balanced runs']
  assert balanced['runs'] == pooled['stop']['n_balanced']
  assert balanced['worst'] == pytest.approx(100 * pooled['stop']['bound_balanced']['all']['loss_max'])
