"""studies/scaling_law/dense_final.py: thinning a densely evaluated run back to the
comparison schedule, and the final value's noise it reports."""

import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from sgpo_jax.config import defaults as default_config
from sgpo_jax.scaling_law.runs import RunRecord
from sgpo_jax.train import eval_due

REPO = Path(__file__).resolve().parent.parent


def _script():
  sys.path.insert(0, os.path.join(REPO, 'experiments'))
  return importlib.import_module('scaling_law_dense_final')


def _record(steps, flops, values=None, total_steps=None):
  steps = np.asarray(steps, float)
  values = np.linspace(0.5, 0.7, steps.size) if values is None else np.asarray(values, float)
  return RunRecord(run_dir=Path('.'), name='r', model='m', params_nonembed=None,
                   total_steps=int(total_steps or steps[-1]), metric='eval_accuracy',
                   steps=steps, values=values, flops_total=np.asarray(flops, float))


def test_keeps_step_zero_the_first_reading_past_each_fraction_and_the_last():
  dense_final = _script()
  # A reading every step, 10 FLOPs per step, budget 100, schedule 1/4, 1/2, 1: the first
  # readings with >= 25, 50, 100 FLOPs are steps 3, 5, 10.
  steps = np.arange(11)
  record = dense_final.thinned_record(_record(steps, steps * 10.0), 100.0, (0.25, 0.5, 1.0))
  np.testing.assert_array_equal(record.steps, [0, 3, 5, 10])
  np.testing.assert_allclose(record.values, np.linspace(0.5, 0.7, 11)[[0, 3, 5, 10]])
  # Steps without a reading (a DAPO step with no valid rows): the next reading is the one.
  steps = np.array([0, 2, 3, 6, 7, 8, 9, 10])
  record = dense_final.thinned_record(_record(steps, steps * 10.0), 100.0, (0.25, 0.5, 1.0))
  np.testing.assert_array_equal(record.steps, [0, 3, 6, 10])


def test_thinning_a_dense_schedule_gives_the_trainers_standard_schedule():
  """The trainer's own eval_due on uneven FLOPs per step (DAPO's rounds, sGPO's profile
  before step 1): the dense run's readings thinned = the standard run's readings."""
  dense_final = _script()
  rng = np.random.default_rng(0)
  standard = default_config.REGIME_EVAL_FRACTIONS
  dense = tuple(sorted(set(standard) | {round(0.955 + 0.005 * i, 3) for i in range(9)}))
  budget = 1.5e12
  for trial in range(20):
    flops = [float(rng.uniform(0, 0.03) * budget) if trial % 2 else 0.0]  # profile, or none
    while flops[-1] < budget:
      flops.append(flops[-1] + float(rng.uniform(0.3, 3.0)) * 1e10)
    def schedule(fractions):
      return [0] + [s for s in range(1, len(flops))
                    if eval_due(s, 100000, fractions, budget, flops[s - 1], flops[s])
                    or s == len(flops) - 1]
    dense_steps, standard_steps = schedule(dense), schedule(standard)
    assert len(dense_steps) > len(standard_steps)
    record = _record(dense_steps, [flops[s] for s in dense_steps])
    np.testing.assert_array_equal(dense_final.thinned_record(record, budget).steps,
                                  standard_steps)


def test_runs_made_with_the_standard_schedule_come_back_unchanged():
  dense_final = _script()
  calibrate = importlib.import_module('scaling_law_calibrate')
  path = (REPO / 'experiments' / 'results' / 'scaling_law_fresh_seeds25-34' /
          'all_seeds25-29_candidate' / 'trajectories.json')
  runs = calibrate.load_trajectories(path)
  assert len(runs) == 80
  for run, thin in zip(runs, dense_final.thinned_runs(runs)):
    np.testing.assert_array_equal(thin['eval'].steps, run['eval'].steps, err_msg=run['name'])
    assert thin['reward'] is run['reward']


def test_bad_inputs_are_named():
  dense_final = _script()
  record = _record([0, 1, 2], [0.0, 5.0, 3.0])
  with pytest.raises(ValueError, match='non-decreasing'):
    dense_final.thinned_record(record, 10.0)
  with pytest.raises(ValueError, match=r'budget=0\.0'):
    dense_final.thinned_record(_record([0, 1], [0.0, 1.0]), 0.0)


def test_final_noise_by_hand():
  dense_final = _script()
  # 100-step runs: the final window is steps >= 95. Dense: readings at 95..100 of which the
  # standard schedule kept 95 and 100.
  steps = [0, 50, 95, 96, 97, 98, 99, 100]
  values = [0.5, 0.6, 0.70, 0.72, 0.74, 0.70, 0.72, 0.80]
  dense = {'name': 'a', 'eval': _record(steps, np.arange(8.0), values, 100)}
  keep = [0, 1, 2, 7]
  thin = {'name': 'a', 'eval': _record(np.array(steps)[keep], np.arange(4.0),
                                       np.array(values)[keep], 100)}
  noise = dense_final.final_noise([dense], [thin])
  row = noise['per_run'][0]
  assert row['dense_readings'] == 6 and row['thinned_readings'] == 2
  assert row['dense_final'] == pytest.approx(np.mean(values[2:]))
  assert row['thinned_final'] == pytest.approx(0.75)
  assert row['dense_window_sd'] == pytest.approx(np.std(values[2:], ddof=1))
  assert noise['difference_max_abs'] == pytest.approx(abs(np.mean(values[2:]) - 0.75))
  assert noise['runs_over_1_point'] == 1  # 0.7300 vs 0.75
  with pytest.raises(ValueError, match='out of order'):
    dense_final.final_noise([dense], [{**thin, 'name': 'b'}])


def test_main_refuses_to_overwrite_its_input(tmp_path):
  dense_final = _script()
  path = tmp_path / 'dense.json'
  path.write_text('{}')
  with pytest.raises(SystemExit, match='is the input'):
    dense_final.main(['--trajectories', str(path), '--thinned-out', str(path)])


def _stop_summary(saved, loss_mean, loss_max, over, n=4):
  return {'n': n, 'stopped': n - 1, 'saved_mean': saved, 'loss_mean': loss_mean,
          'loss_max': loss_max, 'share_over_max': over / n,
          'ci95': {'saved_mean': [saved - 0.01, saved + 0.01]},
          'worst_runs': [{'run': 'default/grpo_seed35', 'loss': loss_max}]}


def test_side_by_side_table_and_the_same_stops_check():
  dense_final = _script()
  rows = [{'run': f'default/grpo_seed3{i}', 'stop_step': 50.0 + i} for i in range(4)]
  def stop(loss_max, moved=None):
    changed = [dict(r, stop_step=99.0) if r['run'] == moved else r for r in rows]
    summaries = {key: _stop_summary(0.4, -0.005, loss_max, int(loss_max > 0.03))
                 for key, _ in dense_final.STOP_ROWS}
    return {'test': {**summaries, 'chosen_rows': changed, 'current_rows': rows}}
  def forecast(err):
    return {'summaries': [{'metric': 'eval_accuracy', 'label': 'all', 'n': 4, 'flat_err': 0.04,
                           'group_err': err, 'group_ratio': err / 0.04, 'group_coverage': 0.75,
                           'ci95': {'group_err': [err - 0.002, err + 0.002]}}]}
  lines = dense_final.side_by_side_lines(
      {'dense': stop(0.025), 'thinned': stop(0.0369, moved='default/grpo_seed32')},
      {'dense': forecast(0.015), 'thinned': forecast(0.016)})
  text = '\n'.join(lines)
  assert ('| chosen, calibration set of the design runs (a) | dense | 4 | 3 | 40.0% [39.0, 41.0] '
          '| -0.50 | 2.50 | 0 | default/grpo_seed35 2.5 |') in text
  assert '| thinned | 4 | 3 | 40.0% [39.0, 41.0] | -0.50 | 3.69 | 1 |' in text
  assert 'Rows (a): the stop step is the same on dense and thinned readings in 3 of 4 runs ' \
         '(differs: default/grpo_seed32).' in text
  assert 'Rows (c): the stop step is the same on dense and thinned readings in 4 of 4 runs.' in text
  assert ('| eval_accuracy | all | thinned | 4 | 0.040 | 0.016 [0.014, 0.018] | 0.40x | 75% |'
          in text)
  with pytest.raises(ValueError, match='different runs'):
    dense_final.same_stops(rows, rows[:3])
