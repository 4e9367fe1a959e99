"""Tests for the calibrated forecasts of issue 18: conformal quantile and intervals, the
cross-run predictors, the 'trend' early-stop rule on hand-made curves, run length under a
FLOPs budget, the metric chosen for a run, and the CLI on a budget-stopped run."""

import dataclasses
import json
import math

import numpy as np
import pytest

from sgpo_jax.scaling_law import __main__ as scaling_law_cli
from sgpo_jax.scaling_law import forecast, load_run, write_synthetic_run
from sgpo_jax.scaling_law.calibration import (
  CalibrationSet,
  PrefixFeatures,
  blend_coefficients,
  calibrated_forecast,
  flat_level,
  loo_residuals,
  offset_shrinkage,
  predict_drift,
  predict_pooled,
  prefix_features,
  scaled_drift,
  shrinkage_line,
)
from sgpo_jax.scaling_law.conformal import (
  conformal_interval,
  conformal_quantile,
  conformal_rank,
  coverage,
  interval_contains,
)
from sgpo_jax.scaling_law.early_stop import trend_gain, trend_stop_step
from sgpo_jax.scaling_law.runs import choose_metric, run_length

SCORES_9 = [0.1, 0.5, 0.2, 0.4, 0.3, 0.9, 0.8, 0.7, 0.6]


def test_conformal_rank_and_quantile_by_hand():
  assert conformal_rank(9, 0.9) == 9  # ceil(10 * 0.9), not 10 from float rounding
  assert conformal_rank(19, 0.9) == 18
  assert conformal_rank(8, 0.9) == 9  # > n: no finite interval
  assert conformal_quantile(SCORES_9, 0.9) == 0.9
  assert conformal_quantile(SCORES_9, 0.8) == 0.8  # ceil(10 * 0.8) = 8th smallest
  assert conformal_quantile([-0.3, 0.1, float('nan')] + [0.2] * 17, 0.9) == 0.2  # |.|, NaN out
  assert conformal_quantile(SCORES_9[:8], 0.9) == math.inf
  with pytest.raises(ValueError, match='confidence=1.5'):
    conformal_quantile(SCORES_9, 1.5)


def test_conformal_interval_is_cut_to_bounds_and_keeps_its_point():
  assert conformal_interval(0.5, SCORES_9, 0.8) == pytest.approx((-0.3, 1.3))
  assert conformal_interval(0.5, SCORES_9, 0.8, (0.0, 1.0)) == (0.0, 1.0)
  low, high = conformal_interval(0.95, [0.1] * 19, 0.9, (0.0, 1.0))
  assert (low, high) == (pytest.approx(0.85), 1.0)
  # Too few scores: as wide as the metric's range, still holding the point.
  assert conformal_interval(0.3, [0.01], 0.9, (0.0, 1.0)) == (0.0, 1.0)
  # A point outside the bounds (a curve overshooting) is still inside its own interval.
  low, high = conformal_interval(1.02, [0.0] * 19, 0.9, (0.0, 1.0))
  assert low <= 1.02 <= high
  with pytest.raises(ValueError, match='point=nan'):
    conformal_interval(float('nan'), SCORES_9, 0.9)


def test_interval_containment_and_coverage():
  assert interval_contains((0.2, 0.4), 0.2) and interval_contains((0.2, 0.4), 0.4)
  assert not interval_contains((0.2, 0.4), 0.41)
  assert coverage([(0, 1), (0.2, 0.4), (0.5, 0.6)], [0.5, 0.5, 0.55]) == pytest.approx(2 / 3)
  with pytest.raises(ValueError, match='2 intervals but 1 values'):
    coverage([(0, 1), (0, 1)], [0.5])


def _record(run, flat, actual, curve=None, metric='eval_accuracy', method='grpo', group='',
            regime=''):
  return PrefixFeatures(run=run, metric=metric, method=method, observe_fraction=0.3,
                        total_steps=100, observed_until_step=30, n_observed=4, flat=flat,
                        curve=curve, form=None, actual=actual, group=group, regime=regime)


def test_flat_level_is_the_mean_of_the_last_third():
  assert flat_level([1, 2, 3, 4, 5, 6]) == 5.5
  assert flat_level([1, 2, 3, 4]) == 3.5  # ceil(4/3) = 2 points
  assert flat_level([0.7]) == 0.7


def test_drift_predictor_and_its_leave_one_out_residuals_by_hand():
  records = [_record('a', 0.5, 0.55), _record('b', 0.6, 0.62), _record('c', 0.7, 0.78)]
  # Moves 0.05, 0.02, 0.08: median 0.05.
  assert predict_drift(_record('t', 0.4, None), records) == pytest.approx(0.45)
  # a: others move 0.02, 0.08 -> 0.05 -> 0.55 (0); b: 0.05, 0.08 -> 0.065 -> 0.665;
  # c: 0.05, 0.02 -> 0.035 -> 0.735.
  assert loo_residuals(records, 'drift') == pytest.approx([0.0, -0.045, 0.045])


def test_drift_prefers_the_other_seeds_of_the_runs_config():
  records = [_record('a', 0.5, 0.60, group='x'), _record('b', 0.5, 0.62, group='x'),
             _record('c', 0.5, 0.50, group='y'), _record('d', 0.5, 0.50, group='y'),
             _record('e', 0.5, 0.50, group='y')]
  assert predict_drift(_record('t', 0.4, None, group='x'), records) == pytest.approx(0.51)
  assert predict_drift(_record('t', 0.4, None, group='z'), records) == pytest.approx(0.4)
  # One sibling is too few: the pool's median move (0.0) is used.
  assert predict_drift(_record('t', 0.4, None, group='x'), records[1:]) == pytest.approx(0.4)


def test_blend_recovers_a_known_shrinkage():
  # final - flat = 0.01 + 0.5 (curve - flat) exactly.
  records = [_record(str(i), 0.5, 0.5 + 0.01 + 0.5 * lead, curve=0.5 + lead)
             for i, lead in enumerate([0.0, 0.1, 0.2, 0.3])]
  assert blend_coefficients(records) == pytest.approx((0.01, 0.5))
  # A negative fitted slope is clipped to 0 (a curve that predicts backwards gets no say).
  flipped = [_record(str(i), 0.5, 0.5 - lead, curve=0.5 + lead) for i, lead in
             enumerate([0.0, 0.1, 0.2])]
  a, b = blend_coefficients(flipped)
  assert b == 0.0 and a == pytest.approx(-0.1)


def test_calibrated_forecast_never_uses_its_own_run_or_group():
  records = [_record(f'r{i}', 0.5, 0.5 + 0.01 * (i % 3), group=f'g{i % 5}') for i in range(20)]
  # The target's own record says it moved by +0.4: leaving it in would drag the interval.
  target = _record('r0', 0.5, 0.9, group='')
  calibration = CalibrationSet(records + [target], 'hand-made')
  result = calibrated_forecast(target, calibration, predictor='drift', confidence=0.9)
  assert result.n_calibration == 19  # r0 (in records and as target) left out
  assert result.predicted_final == pytest.approx(0.51)
  assert result.interval[0] <= result.predicted_final <= result.interval[1]
  assert result.interval[1] < 0.6
  grouped = calibrated_forecast(_record('r0', 0.5, None, group='g0'), calibration,
                                leave_out_group=True)
  assert grouped.n_calibration == 16  # r0, r5, r10, r15 of group g0 left out
  # Too few calibration runs: the interval spans the metric's range, with a finite point.
  few = calibrated_forecast(target, CalibrationSet(records[:4]), confidence=0.9)
  assert few.interval == (0.0, 1.0) and math.isinf(few.half_width)


def test_scores_are_normalised_by_each_runs_level():
  from sgpo_jax.scaling_law.calibration import normalised_scores, residual_scale
  assert residual_scale(_record('a', 0.5, None)) == pytest.approx(0.5)
  assert residual_scale(_record('a', 0.9, None)) == pytest.approx(0.3)
  assert residual_scale(_record('a', 0.0, None)) == 0.1  # floor
  assert residual_scale(_record('a', -0.2, None, metric='reward_over_profile')) == 1.0
  # Residuals by hand (see the drift test): 0, -0.045, 0.045 at flats 0.5, 0.6, 0.7.
  records = [_record('a', 0.5, 0.55), _record('b', 0.6, 0.62), _record('c', 0.7, 0.78)]
  scales = [0.5, math.sqrt(0.24), math.sqrt(0.21)]
  assert normalised_scores(records, 'drift') == pytest.approx(
      [0.0, -0.045 / scales[1], 0.045 / scales[2]])
  # One pool, two targets: the interval scales with the target's own level.
  pool = CalibrationSet([_record(f'r{i}', 0.5, 0.5 + 0.02 * (i % 4)) for i in range(20)])
  mid = calibrated_forecast(_record('t', 0.5, None), pool)
  high = calibrated_forecast(_record('t', 0.9, None), pool)
  width = lambda result: result.interval[1] - result.interval[0]  # noqa: E731
  assert width(high) == pytest.approx(width(mid) * 0.3 / 0.5)


def test_calibration_set_round_trips_json_and_picks_nearest_fraction(tmp_path):
  records = [_record('a', 0.5, 0.6), dataclass_replace(_record('b', 0.4, 0.5), 0.5)]
  path = tmp_path / 'cal.json'
  path.write_text(CalibrationSet(records, 'src').to_json())
  loaded = CalibrationSet.load(path)
  assert loaded.records == records
  chosen, description = loaded.select('eval_accuracy', 0.45)
  assert [r.run for r in chosen] == ['b'] and 'first 0.5' in description
  with pytest.raises(ValueError, match='does not exist'):
    CalibrationSet.load(tmp_path / 'missing.json')


def test_shrinkage_line_by_hand():
  # flats 0.2, 0.4, 0.6; finals 0.3, 0.4, 0.5: slope 0.04 / 0.08 = 0.5, a = 0.4 - 0.5 * 0.4.
  records = [_record('a', 0.2, 0.3), _record('b', 0.4, 0.4), _record('c', 0.6, 0.5)]
  assert shrinkage_line(records) == pytest.approx((0.2, 0.5))
  # Slope (0.06 + 0.10) / 0.08 = 2 is clipped to 1; a = mean(final - flat) = 0.2 / 3.
  steep = [_record('a', 0.2, 0.1), _record('b', 0.4, 0.4), _record('c', 0.6, 0.9)]
  assert shrinkage_line(steep) == pytest.approx((0.2 / 3, 1.0))
  # No spread in flat: the mean final, slope 0.
  assert shrinkage_line([_record('a', 0.5, 0.6), _record('b', 0.5, 0.7)]) == pytest.approx(
      (0.65, 0.0))


def test_scaled_drift_rescales_moves_to_the_targets_level():
  # Scales sqrt(p(1 - p)): 0.3 at 0.1 and 0.9, 0.5 at 0.5. Moves 0.09, 0.03, 0.05 scale to
  # 0.3, 0.1, 0.1: median 0.1, times the target's scale 0.5.
  records = [_record('a', 0.1, 0.19), _record('b', 0.9, 0.93), _record('c', 0.5, 0.55)]
  assert scaled_drift(_record('t', 0.5, None), records) == pytest.approx(0.55)
  # A run at 0.01 (scale floored at 0.1) gets a tenth of that move.
  assert scaled_drift(_record('t', 0.01, None), records) == pytest.approx(0.02)


def test_pooled_predictor_by_hand(monkeypatch):
  from sgpo_jax.scaling_law import calibration
  monkeypatch.setattr(calibration, 'MIN_REGRESSION_RECORDS', 3)
  monkeypatch.setattr(calibration, 'METHOD_SHRINKAGE', 1.0)
  records = [_record('a', 0.2, 0.4, method='m', regime='r'),
             _record('b', 0.4, 0.4, method='g', regime='r'),
             _record('c', 0.6, 0.5, method='g', regime='r'),
             _record('x', 0.5, 0.9, method='m', regime='other')]
  # Regime r: finals 0.4, 0.4, 0.5 on flats 0.2, 0.4, 0.6: slope 0.02 / 0.08 = 0.25,
  # a = 0.4333 - 0.1 -> 0.3333 + 0.25 * 0.5 = 0.4583 at flat 0.5. Method m's offset: a's
  # residual from the line through b and c (0.2 + 0.5 flat): 0.4 - 0.3 = 0.1, shrunk by
  # 1 / (1 + 1) -> 0.05. The other regime's run plays no part.
  target = _record('t', 0.5, None, method='m', regime='r')
  assert predict_pooled(target, records) == pytest.approx(0.2 / 0.6 + 0.125 + 0.05)
  # Method g: b's residual from the line through a and c (0.35 + 0.25 flat) is -0.05, c's
  # from the line through a and b (0.4) is 0.1: mean 0.025, shrunk by 2 / (2 + 1).
  other = _record('t', 0.5, None, method='g', regime='r')
  assert predict_pooled(other, records) == pytest.approx(0.2 / 0.6 + 0.125 + 0.025 * 2 / 3)
  # A method without runs in the regime: no offset.
  new = _record('t', 0.5, None, method='n', regime='r')
  assert predict_pooled(new, records) == pytest.approx(0.2 / 0.6 + 0.125)
  # Too few runs of its regime (one, < MIN_REGIME_DRIFT_RECORDS): the scaled median move
  # over every run.
  lone = _record('t', 0.5, None, method='m', regime='other')
  assert predict_pooled(lone, records) == pytest.approx(scaled_drift(lone, records))


def test_offset_shrinkage_is_the_random_effects_variance_ratio():
  # Labels A: 1, 3 and B: 5, 7: within variance (1 + 1 + 1 + 1) / 2 = 2; label means 2, 6
  # vary by 8 (ddof 1), of which 2 / 2 is their own noise: tau^2 = 7, lambda = 2 / 7.
  assert offset_shrinkage([1, 3, 5, 7], ['A', 'A', 'B', 'B']) == pytest.approx(2 / 7)
  # A label with one offset says nothing about the within variance: ignored.
  assert offset_shrinkage([1, 3, 5, 7, 100], ['A', 'A', 'B', 'B', 'C']) == pytest.approx(2 / 7)
  # Means 2 and 2: no between-label variance, full shrinkage.
  assert offset_shrinkage([1, 3, 3, 1], ['A', 'A', 'B', 'B']) == math.inf
  assert offset_shrinkage([1, 3, 5], ['A', 'A', 'B']) is None  # one label of two


def test_pooled_shrinks_sibling_offsets_by_the_estimated_ratio(monkeypatch):
  from sgpo_jax.scaling_law import calibration
  monkeypatch.setattr(calibration, 'MIN_REGRESSION_RECORDS', 3)
  # One flat level: the line is the mean final (0.66, slope 0), and a record's leave-one-out
  # offset is y - (sum - y) / 3 = (4 y - 2.64) / 3: -0.08, -0.16 / 3 for config g1 and
  # 0.16 / 3, 0.08 for g2: each 0.04 / 3 from its label's mean (-0.2 / 3, 0.2 / 3), so the
  # within variance is 2 * (0.04 / 3)^2 (1 dof per label).
  def regime(finals):
    return [_record(f'{g}_s{i}', 0.5, y, group=g, regime='r', method='m')
            for i, (g, y) in enumerate(zip(('g1', 'g1', 'g2', 'g2'), finals))]
  records = regime((0.60, 0.62, 0.70, 0.72))
  within = 2 * (0.04 / 3) ** 2
  tau2 = 2 * (0.2 / 3) ** 2 - within / 2
  lam = within / tau2
  target = _record('t', 0.5, None, group='g1', regime='r', method='m')
  expected = 0.66 - (0.2 / 3) * 2 / (2 + lam)
  assert predict_pooled(target, records) == pytest.approx(expected)
  # Seeds agree and configs differ: the offset is kept almost whole (the fixed
  # METHOD_SHRINKAGE = 4 would keep 2 / 6 of it).
  assert 2 / (2 + lam) > 0.95
  # Configs whose seeds scatter as much as the configs differ: no offset at all.
  mixed = regime((0.60, 0.72, 0.62, 0.70))
  assert predict_pooled(target, mixed) == pytest.approx(0.66)


def test_a_run_outside_its_regimes_levels_is_not_shrunk_towards_them():
  from sgpo_jax.scaling_law.calibration import matches_regime, within_range
  # Range 0.60-0.69: margin max(1.0 * 0.09, 0.02) = 0.09 -> 0.51-0.78.
  flats = [0.60 + 0.01 * i for i in range(10)]
  assert within_range(0.52, flats) and within_range(0.77, flats)
  assert not within_range(0.50, flats) and not within_range(0.79, flats)
  assert within_range(0.615, flats[:2]) and not within_range(0.635, flats[:2])  # 0.02 floor
  records = [dataclasses.replace(_record(f'r{i}', flat, 0.70, regime='r'), initial=0.63)
             for i, flat in enumerate(flats)]
  # Same flat level, but a different initial policy (0.78 vs 0.63 +- 0.02): not this regime.
  retuned = dataclasses.replace(_record('t', 0.65, None, regime='r'), initial=0.78)
  assert not matches_regime(retuned, records)
  assert matches_regime(dataclasses.replace(retuned, initial=0.64), records)
  assert matches_regime(dataclasses.replace(retuned, initial=None), records)  # old records
  # Not shrunk towards the regime's 0.70: the scaled median move of every run instead.
  assert predict_pooled(retuned, records) == pytest.approx(scaled_drift(retuned, records))
  calibration = CalibrationSet(records, 'set')
  _, description = calibration.select('eval_accuracy', 0.3, 'grpo', 'r', target=retuned)
  assert 'not of regime r' in description
  _, description = calibration.select('eval_accuracy', 0.3, 'grpo', 'r',
                                      target=dataclasses.replace(retuned, initial=0.63))
  assert description.startswith('10 runs of regime r')


def test_calibrated_forecast_with_pooled_never_sees_its_run():
  records = [_record(f'r{i}', 0.5 + 0.01 * i, 0.55 + 0.01 * i, regime='r') for i in range(12)]
  calibration = CalibrationSet(records + [_record('t', 0.5, 0.9, regime='r')])
  target = _record('t', 0.5, 0.9, regime='r')
  result = calibrated_forecast(target, calibration, predictor='pooled')
  # Every other run moved +0.05 on a slope-1 line: the target's own 0.9 is not learnt.
  assert result.predicted_final == pytest.approx(0.55)
  assert result.n_calibration == 12


def dataclass_replace(record, fraction):
  return dataclasses.replace(record, observe_fraction=fraction)


def test_trend_rule_on_hand_made_curves():
  steps = np.arange(0, 101, 10, dtype=float)
  # Saturating: stops at 70, where the line through 40..70 (slope 0.0003) gains 0.009.
  saturating = [0.1, 0.3, 0.5, 0.6, 0.65, 0.66, 0.66, 0.66, 0.66, 0.66, 0.66]
  gain, n = trend_gain(steps[:6], saturating[:6], 100, window_fraction=0.3)
  assert n == 4 and gain == pytest.approx(0.0053 * 50)  # slope 2.65/500 at step 50
  assert trend_gain(steps[:7], saturating[:7], 100, window_fraction=0.3)[0] == pytest.approx(
      0.0019 * 40)
  assert trend_stop_step(steps, saturating, 100, min_fraction=0.5, window_fraction=0.3,
                         epsilon=0.01) == 70
  # Still rising by 0.001/step: the line promises > 0.01 until the last step; never stops.
  rising = 0.5 + 0.0011 * steps
  assert trend_stop_step(steps, rising, 100, min_fraction=0.5, window_fraction=0.3,
                         epsilon=0.01) is None
  # Flat from the start: stops at min_fraction, not before.
  assert trend_stop_step(steps, np.full(11, 0.8), 100, min_fraction=0.5) == 50
  with pytest.raises(ValueError, match='window_fraction=0'):
    trend_stop_step(steps, rising, 100, window_fraction=0)


def test_trend_rule_confirmation_and_peak_tolerance_by_hand():
  steps = np.arange(0, 101, 10, dtype=float)
  # Flat at 0.5 with one dip to 0.45 at step 60.
  values = np.full(11, 0.5)
  values[6] = 0.45
  options = {'min_fraction': 0.5, 'window_fraction': 0.3, 'epsilon': 0.01}
  assert trend_stop_step(steps, values, 100, **options) == 50
  # Flat at 50 and at 60 (a falling line is flat): the second in a row is 60, the dip.
  assert trend_stop_step(steps, values, 100, confirm_evals=2, **options) == 60
  # A peak tolerance of 0.02 refuses 0.45 < 0.5 - 0.02; at 70 the reading 0.5 is the best so
  # far (the line through 40..70 still falls): stop there. A tolerance of 0.05 takes 60.
  assert trend_stop_step(steps, values, 100, confirm_evals=2, peak_tolerance=0.02,
                         **options) == 70
  assert trend_stop_step(steps, values, 100, confirm_evals=2, peak_tolerance=0.05,
                         **options) == 60
  assert trend_stop_step(steps, values, 100, confirm_evals=2, peak_tolerance=math.inf,
                         **options) == 60  # inf: no guard
  # The step-0 reading does not count as a peak: a run that starts high can still stop.
  start_high = np.r_[0.9, np.full(10, 0.5)]
  assert trend_stop_step(steps, start_high, 100, peak_tolerance=0.0, **options) == 50
  # A step up at 60 breaks the streak. Gains: 50 -> 0 (flat); 60 -> 0.003/step x 40 = 0.12;
  # 70 -> 0.004 x 30 = 0.12; 80 -> 0.003 x 20 = 0.06; 90 -> 0 (flat, first in a row); 100 is
  # the end. One flat eval stops at 50; two in a row never come.
  rising = np.full(11, 0.5)
  rising[6:] = 0.6
  assert trend_stop_step(steps, rising, 100, **options) == 50
  assert trend_stop_step(steps, rising, 100, confirm_evals=2, **options) is None
  with pytest.raises(ValueError, match='confirm_evals=0'):
    trend_stop_step(steps, values, 100, confirm_evals=0)
  with pytest.raises(ValueError, match='peak_tolerance=-0.01'):
    trend_stop_step(steps, values, 100, peak_tolerance=-0.01)


def test_trend_stopper_matches_the_pure_rule_with_confirmation_and_guard():
  from sgpo_jax.scaling_law.early_stop import TrendStopper
  values = [0.5] * 11
  values[6] = 0.45
  config = {'enabled': True, 'epsilon': 0.01, 'min_fraction': 0.5, 'window_fraction': 0.3,
            'confirm_evals': 2, 'peak_tolerance': 0.02}
  stopper = TrendStopper(config, 100)
  stop = None
  for step in range(101):
    row = {'step': step}
    if step % 10 == 0:
      row['eval_accuracy'] = values[step // 10]
    decision = stopper.update_row(row)
    if decision is not None and decision.should_stop:
      stop = step
      break
  assert stop == 70
  # Without the optional keys the stopper keeps the single-eval rule.
  plain = TrendStopper({k: v for k, v in config.items()
                        if k not in ('confirm_evals', 'peak_tolerance')}, 100)
  assert plain.confirm_evals == 1 and plain.peak_tolerance is None


def test_run_length_is_the_steps_taken_or_the_budget_step():
  config = {'train': {'num_steps': 1000, 'flops_budget': 100.0}}
  rows = [{'step': 0, 'flops_total': 10.0}] + [
      {'step': s, 'reward_mean': 0.5, 'flops_total': 10.0 + 2.0 * s} for s in range(1, 21)]
  # Still running: 2 FLOPs a step from 12 at step 1; 100 is reached at step 45.
  assert run_length({}, config, rows) == (45, run_length({}, config, rows)[1])
  assert 'flops_budget' in run_length({}, config, rows)[1]
  assert run_length({'steps': 44}, config, rows)[0] == 44  # finished: the steps it took
  assert run_length({}, {'train': {'num_steps': 30, 'flops_budget': 0.0}}, rows)[0] == 30
  assert run_length({}, {}, rows)[0] == 20


def test_metric_choice_per_run():
  evals = [{'step': s, 'eval_accuracy': 0.5} for s in range(5)]
  assert choose_metric(evals)[0] == 'eval_accuracy'
  curriculum = [{'step': s, 'reward_mean': 0.5, 'p_hat_mean': 0.4} for s in range(5)]
  assert choose_metric(curriculum + evals[:2])[0] == 'reward_over_profile'
  assert choose_metric([{'step': 1, 'reward_mean': 0.5}])[0] == 'reward_mean'


def test_reward_over_profile_takes_out_each_phase_level(tmp_path):
  run = write_synthetic_run(tmp_path / 'a', 'exponential', {'r0': 0.2, 'r_inf': 0.2,
                                                             'tau': 0.1}, 40, eval_every=0)
  rows = [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]
  for row in rows:  # phases alternate in difficulty: reward tracks p_hat + 0.1
    row['p_hat_mean'] = 0.7 if row['step'] % 2 else 0.3
    row['reward_mean'] = row['p_hat_mean'] + 0.1
  (run / 'metrics.jsonl').write_text('\n'.join(json.dumps(row) for row in rows) + '\n')
  record = load_run(run, 'auto')
  assert record.metric == 'reward_over_profile' and 'curriculum' in record.metric_reason
  assert record.values == pytest.approx(np.full(40, 0.1))


def test_curve_intervals_hold_their_point_estimate():
  # A flat noisy prefix fits tau at its bound; clipped samples used to skew the quantiles.
  rng = np.random.default_rng(3)
  for seed in range(4):
    steps = np.arange(1, 101, dtype=float)
    rewards = np.clip(0.6 + rng.normal(0, 0.05, 100), 0, 1)
    result = forecast(steps, rewards, 100, 0.3, seed=seed)
    for point, (low, high) in ((result.predicted_final_reward, result.final_reward_ci),
                               (result.predicted_plateau, result.plateau_ci),
                               (result.predicted_plateau_step, result.plateau_step_ci)):
      assert low <= point <= high


def _budget_stopped_run(tmp_path, name='run', eval_every=5):
  """A run planned for 1000 steps that its FLOPs budget stopped at step 90."""
  run = write_synthetic_run(tmp_path / name, 'exponential',
                            {'r0': 0.3, 'r_inf': 0.7, 'tau': 0.2}, 90, eval_every=eval_every)
  (run / 'config.json').write_text(json.dumps(
      {'method': 'grpo', 'train': {'num_steps': 1000, 'flops_budget': 9e13}}))
  summary = json.loads((run / 'summary.json').read_text())
  summary.update(stop_reason='flops budget 9e+13 reached at step 90')
  (run / 'summary.json').write_text(json.dumps(summary))
  return run


def test_cli_observes_a_fraction_of_the_steps_a_budget_stopped_run_took(tmp_path, capsys):
  run = _budget_stopped_run(tmp_path)
  code = scaling_law_cli.main(['fit', str(run), '--no-plots', '--calibration', 'none'])
  captured = capsys.readouterr()
  assert code == 0, captured.err
  row = json.loads(captured.out)
  assert row['metric'] == 'eval_accuracy' and 'held-out' in row['metric_reason']
  assert 'forecasting eval_accuracy' in captured.err
  assert row['total_steps'] == 90 and 'steps taken' in row['total_steps_source']
  assert row['observed_until_step'] <= 27  # 30% of 90 steps, not of the planned 1000
  for field in ('predicted_final_reward', 'actual_final_reward', 'abs_error',
                'predicted_plateau_step', 'recommended_stop_step', 'interval_low',
                'interval_high'):
    assert row[field] is not None, field
  assert row['interval_low'] <= row['predicted_final_reward'] <= row['interval_high']


def test_cli_calibrates_on_run_folders_and_leaves_the_target_out(tmp_path, capsys):
  # Evals every 10 steps: 3 points in the first 27 steps, too few for a curve; the
  # calibrated forecast falls back to the flat level plus the learnt drift.
  runs = [_budget_stopped_run(tmp_path, f'seed{i}', eval_every=10) for i in range(3)]
  code = scaling_law_cli.main(['fit', str(runs[0]), '--no-plots', '--calibration',
                               *map(str, runs)])
  captured = capsys.readouterr()
  assert code == 0, captured.err
  row = json.loads(captured.out)
  assert row['calibration_set']['runs'] == 2  # seed1, seed2: never the run itself
  assert row['interval_kind'].startswith('jackknife (leave-one-out)')
  assert row['interval_low'] <= row['predicted_final_reward'] <= row['interval_high']
  assert scaling_law_cli.main(['fit', str(runs[0]), '--calibration', str(tmp_path)]) == 2
  assert 'not run folders' in capsys.readouterr().err


def test_trend_stopper_in_the_trainer_projects_the_budget_and_stops_on_evals():
  from sgpo_jax.scaling_law.early_stop import EarlyStopper, TrendStopper, make_stopper
  config = {'enabled': True, 'rule': 'trend', 'epsilon': 0.01, 'min_fraction': 0.5,
            'window_fraction': 0.3, 'confidence': 0.9}
  # Planned 1000 steps; 10 FLOPs a step from 100 at step 1: a budget of 1090 ends at step 100.
  stopper = make_stopper(config, 1000, flops_budget=1090.0)
  assert isinstance(stopper, TrendStopper)
  saturating = [0.1, 0.3, 0.5, 0.6, 0.65, 0.66, 0.66, 0.66, 0.66, 0.66, 0.66]
  decisions = {}
  for step in range(1, 101):
    row = {'step': step, 'reward_mean': 0.5, 'flops_total': 90.0 + 10.0 * step}
    if step % 10 == 0:
      row['eval_accuracy'] = saturating[step // 10]
    decision = stopper.update_row(row)
    if decision is not None:
      decisions[step] = decision
    if decision is not None and decision.should_stop:
      break
  assert stopper.run_length() == 100
  assert set(decisions) == {10, 20, 30, 40, 50, 60, 70}  # evals only; the same stop as by hand
  assert decisions[70].should_stop and 'step 70/100' in decisions[70].reason
  assert decisions[70].flops_saved_estimate == pytest.approx(300.0)
  assert not decisions[60].should_stop
  assert isinstance(make_stopper(dict(config, rule='forecast'), 100), EarlyStopper)
  with pytest.raises(ValueError, match="rule='nope'"):
    make_stopper(dict(config, rule='nope'), 100)


def test_config_check_names_a_bad_early_stop_setting_before_compute():
  from sgpo_jax.config import check as config_check
  config = config_check.default_config()
  config.train.early_stop.update(enabled=True, rule='nope')
  with pytest.raises(ValueError, match='train.early_stop.rule'):
    config_check.check_config(config)
  config.train.early_stop.update(rule='trend', window_fraction=0.0)
  with pytest.raises(ValueError, match='train.early_stop.window_fraction=0.0'):
    config_check.check_config(config)
  config.train.early_stop.update(window_fraction=0.3, confirm_evals=0)
  with pytest.raises(ValueError, match='train.early_stop.confirm_evals=0 must be >= 1'):
    config_check.check_config(config)
  config.train.early_stop.update(confirm_evals=2, peak_tolerance=-0.01)
  with pytest.raises(ValueError, match='train.early_stop.peak_tolerance=-0.01 must be >= 0'):
    config_check.check_config(config)
  config.train.early_stop.update(peak_tolerance=0.02)
  config_check.check_config(config)  # the held-out-tuned setting is accepted



def test_shipped_calibration_set_gives_finite_intervals_for_each_metric():
  from sgpo_jax.scaling_law.__main__ import DEFAULT_CALIBRATION
  calibration = CalibrationSet.load(DEFAULT_CALIBRATION)
  for metric in ('eval_accuracy', 'reward_mean', 'reward_over_profile'):
    records, _ = calibration.select(metric, 0.3)
    assert len(records) >= 9, metric  # enough for a finite 90% conformal interval
    target = dataclasses.replace(records[0], regime='', method=None)  # pool: every run
    result = calibrated_forecast(target, calibration)
    assert result.n_calibration == len(records) - 1  # the run itself is left out
    assert math.isfinite(result.half_width)
    assert result.interval[0] <= result.predicted_final <= result.interval[1]
  # Shipped with intervals per config (tested on seeds 25-34): a comparison config with its
  # seeds in the set takes its quantile from them alone.
  assert calibration.config_scores_min == 9
  sgpo = next(r for r in calibration.records if r.run == 'default/sgpo_seed7'
              and r.metric == 'reward_over_profile' and r.observe_fraction == 0.3)
  result = calibrated_forecast(sgpo, calibration)
  assert 'interval from the 24 runs of config default/sgpo' in result.calibration


def _calibrate_script():
  from studies.scaling_law import calibrate
  return calibrate


def _experiment_script(name):
  """A scaling-law study script as a module: the replays the trainer's stoppers must equal."""
  import importlib
  return importlib.import_module('studies.scaling_law.' + name.removeprefix('scaling_law_'))


def _stop_set(runs, exclude_seed='', **kwargs):
  """The stop calibration set of `runs` without one seed group, as calibrate-set builds it."""
  from sgpo_jax.scaling_law.calibration_set import build_set
  kwargs.setdefault('source', 'design runs')
  return build_set([run for run in runs if run['seed_group'] != exclude_seed], 'stop', **kwargs)


def _run_record(steps, values, total_steps):
  from pathlib import Path

  from sgpo_jax.scaling_law.runs import RunRecord
  steps = np.asarray(steps, float)
  return RunRecord(run_dir=Path('.'), name='r', model='m', params_nonembed=None,
                   total_steps=total_steps, metric='eval_accuracy', steps=steps,
                   values=np.asarray(values, float), flops_total=steps * 10.0)


def test_loo_line_offsets_equal_refitting_the_line_without_each_record():
  from sgpo_jax.scaling_law.calibration import loo_line_offsets
  rng = np.random.default_rng(0)
  cases = [
      # slopes inside [0, 1], clipped at 0 (falling finals) and at 1 (steep finals)
      [(f, 0.3 + 0.5 * f + 0.02 * e) for f, e in zip(rng.uniform(0.4, 0.8, 12), rng.normal(size=12))],
      [(f, 0.9 - f) for f in rng.uniform(0.4, 0.8, 6)],
      [(f, 3 * f - 1) for f in rng.uniform(0.4, 0.8, 6)],
      # one flat level: the mean of the others; and two records, one of them alone at its level
      [(0.5, y) for y in (0.6, 0.62, 0.7)],
      [(0.5, 0.6), (0.5, 0.7), (0.6, 0.8)],
      [(0.5, 0.6), (0.6, 0.8)],
  ]
  for case in cases:
    records = [_record(f'r{i}', flat, actual) for i, (flat, actual) in enumerate(case)]
    refit = [r.actual - np.dot(shrinkage_line(records[:i] + records[i + 1:]), (1.0, r.flat))
             for i, r in enumerate(records)]
    np.testing.assert_allclose(loo_line_offsets(records), refit, atol=1e-12)


def test_bound_rule_by_hand():
  from sgpo_jax.scaling_law.early_stop import bound_stop_index
  readings = [0.60, 0.62, 0.61, 0.63]
  uppers = [0.66, 0.645, 0.63, 0.64]
  # upper - reading: 0.06, 0.025, 0.02, 0.01.
  assert bound_stop_index(readings, uppers, delta=0.03) == 1
  assert bound_stop_index(readings, uppers, delta=0.02) == 2
  assert bound_stop_index(readings, uppers, delta=0.005) is None
  # Peak guard: the best so far is 0.625 at checkpoints 1-2; a tolerance of 0.01 refuses 0.61
  # (checkpoint 2) and takes checkpoint 3 (0.63, the best).
  bests = [0.60, 0.625, 0.625, 0.63]
  assert bound_stop_index(readings, uppers, delta=0.02, bests=bests, peak_tolerance=0.01) == 3
  assert bound_stop_index(readings, uppers, delta=0.02, bests=bests, peak_tolerance=0.02) == 2
  # An infinite bound (too few calibration runs) never stops.
  assert bound_stop_index([0.5], [math.inf], delta=0.04) is None
  with pytest.raises(ValueError, match='2 readings but 1 upper bounds'):
    bound_stop_index([0.5, 0.6], [0.7], delta=0.01)
  with pytest.raises(ValueError, match='delta=-0.01'):
    bound_stop_index(readings, uppers, delta=-0.01)
  with pytest.raises(ValueError, match='peak_tolerance needs bests'):
    bound_stop_index(readings, uppers, delta=0.01, peak_tolerance=0.01)


def _bound_runs(late_final=0.66):
  """12 runs of one regime, 11 readings each: config 'flat' stays at its level, config
  'late' sits at the same level until step 60 and then rises to `late_final`."""
  steps = np.arange(0, 101, 10, dtype=float)
  evals = []
  for config in ('flat', 'late'):
    for seed in range(6):
      level = 0.60 + 0.002 * seed
      values = np.full(11, level)
      if config == 'late':
        values[7:] = late_final + 0.002 * seed
      record = dataclasses.replace(_run_record(steps, values, 100), name=f'{config}{seed}',
                                   method=config, finished=True)
      evals.append({'eval': record, 'name': record.name, 'regime': 'r', 'group': config,
                    'seed_group': f'r/seed{seed}'})
  return evals


def test_calibrated_forecasts_at_several_confidences_equal_one_call_each():
  from sgpo_jax.scaling_law.calibration import calibrated_forecasts
  records = [_record(f'r{i}', 0.5 + 0.01 * i, 0.55 + 0.013 * i, regime='r') for i in range(12)]
  calibration = CalibrationSet(records)
  target = _record('r3', 0.53, 0.6, regime='r')
  both = calibrated_forecasts(target, calibration, predictor='pooled', confidences=(0.8, 0.9))
  for result, confidence in zip(both, (0.8, 0.9)):
    assert result == calibrated_forecast(target, calibration, predictor='pooled',
                                         confidence=confidence)
  assert both[0].half_width < both[1].half_width


def test_run_record_round_trips_through_json(tmp_path):
  from sgpo_jax.scaling_law.runs import record_from_dict, record_to_dict
  run = load_run(_budget_stopped_run(tmp_path), 'eval_accuracy')
  assert np.isnan(run.flops_total[0])  # the step-0 eval from the summary has no FLOPs
  back = record_from_dict(json.loads(json.dumps(record_to_dict(run))))
  for field in ('run_dir', 'name', 'model', 'total_steps', 'metric', 'method', 'notes',
                'length_source', 'finished', 'regime'):
    assert getattr(back, field) == getattr(run, field), field
  for field in ('steps', 'values', 'flops_total'):
    np.testing.assert_array_equal(getattr(back, field), getattr(run, field))
  assert prefix_features(back, 0.3) == prefix_features(run, 0.3)
  with pytest.raises(ValueError, match=r"unknown fields \['colour'\], missing \['steps'\]"):
    record_from_dict({**{k: v for k, v in record_to_dict(run).items() if k != 'steps'},
                      'colour': 1})


def _regime_calibration(tmp_path, flat, finals_by_group):
  """A calibration file of one regime 'r', method 'm', every record at `flat`: per group
  'sweep/<g>' its runs' finals."""
  records = [_record(f'sweep/{g}_seed{i}', flat, y, method='m', group=f'sweep/{g}',
                     regime='r')
             for g, finals in finals_by_group.items() for i, y in enumerate(finals)]
  path = tmp_path / 'calibration.json'
  path.write_text(CalibrationSet(records, 'hand-made').to_json())
  return path


def test_cli_takes_the_offset_of_the_other_seeds_of_the_runs_config(tmp_path, monkeypatch,
                                                                    capsys):
  from sgpo_jax.scaling_law import calibration
  from sgpo_jax.scaling_law.runs import config_group
  monkeypatch.setattr(calibration, 'MIN_REGRESSION_RECORDS', 3)
  monkeypatch.setattr(calibration, 'MIN_POOL_RECORDS', 3)
  run = write_synthetic_run(tmp_path / 'sweep' / 'a_seed9', 'exponential',
                            {'r0': 0.5, 'r_inf': 0.6, 'tau': 0.2}, 100, eval_every=5)
  (run / 'config.json').write_text(json.dumps({'method': 'm', 'regime': 'r'}))
  summary = json.loads((run / 'summary.json').read_text())
  (run / 'summary.json').write_text(json.dumps({**summary, 'method': 'm'}))
  assert config_group(run) == 'sweep/a'
  flat = prefix_features(load_run(run, 'eval_accuracy'), 0.3).flat
  # As in test_pooled_shrinks_sibling_offsets_by_the_estimated_ratio: one flat level, line
  # = mean final 0.66; config a's offset -0.2 / 3 kept by 2 / (2 + lambda); the method's
  # (all four runs) is 0.
  path = _regime_calibration(tmp_path, flat, {'a': (0.60, 0.62), 'b': (0.70, 0.72)})
  within = 2 * (0.04 / 3) ** 2
  lam = within / (2 * (0.2 / 3) ** 2 - within / 2)
  rows = {}
  for group in ('auto', 'none', 'sweep/b'):
    assert scaling_law_cli.main(['fit', str(run), '--no-plots', '--metric', 'eval_accuracy',
                                 '--calibration', str(path), '--config-group', group]) == 0
    rows[group] = json.loads(capsys.readouterr().out)
  assert rows['auto']['predicted_final_reward'] == pytest.approx(
      0.66 - (0.2 / 3) * 2 / (2 + lam), abs=1e-6)
  assert rows['auto']['calibration_set']['config_group'] == 'sweep/a'
  assert rows['auto']['calibration_set']['config_group_runs'] == 2
  assert rows['none']['predicted_final_reward'] == pytest.approx(0.66, abs=1e-6)
  assert rows['none']['calibration_set']['config_group_runs'] == 0
  assert rows['sweep/b']['predicted_final_reward'] == pytest.approx(
      0.66 + (0.2 / 3) * 2 / (2 + lam), abs=1e-6)
  for row in rows.values():
    assert row['interval_low'] <= row['predicted_final_reward'] <= row['interval_high']


def _comparison_runs(tmp_path, seeds=(0, 1), arms=('grpo', 'dapo')):
  runs = []
  for seed in seeds:
    for k, arm in enumerate(arms):
      run = write_synthetic_run(tmp_path / 'default' / f'{arm}_seed{seed}', 'exponential',
                                {'r0': 0.5, 'r_inf': 0.6 + 0.02 * k + 0.01 * seed,
                                 'tau': 0.2}, 60, eval_every=3, seed=seed)
      (run / 'config.json').write_text(json.dumps({'method': arm, 'regime': 'default'}))
      runs.append(run)
  return runs


def _bound_config(**overrides):
  return {'enabled': True, 'rule': 'bound', 'bound_fractions': (0.5, 0.6, 0.7),
          'bound_confidence': 0.9, 'bound_delta': 0.04, 'peak_tolerance': None, **overrides}


def test_trainer_bound_stopper_equals_the_replay_when_evals_fall_on_the_fractions():
  from sgpo_jax.scaling_law.early_stop import BoundStopper
  transfer = _experiment_script('stop_transfer')
  calibrate = _calibrate_script()
  evals = _bound_runs()
  setting = dict(fractions=(0.5, 0.6, 0.7), confidence=0.9, delta=0.04, peak_tolerance=None)
  points = transfer.stop_points(evals, evals)
  for i in (0, 3, 6, 9):  # flat0, flat3, late0, late3
    run = evals[i]
    calibration = _stop_set(evals, exclude_seed=run['seed_group'])
    stopper = BoundStopper(_bound_config(), 100, calibration=calibration,
                           method=run['eval'].method, regime='r', group=run['group'])
    stop = None
    for step, value in zip(run['eval'].steps, run['eval'].values):
      decision = stopper.update_row({'step': int(step), 'eval_accuracy': float(value)})
      if step < 50:
        assert not decision.should_stop and 'no checkpoint due' in decision.reason
      elif decision.should_stop:
        stop = step
        break
    replay = calibrate.bound_outcome(run['eval'], points[i], setting)
    assert stop == replay['stop_step'] == (50 if run['group'] == 'flat' else 70)
    assert transfer.trainer_outcome(run, calibration, setting) == replay
  # The decision names the bound and the calibration runs it came from.
  assert 'checkpoint 0.7 of the run' in decision.reason and 'design runs' in decision.reason
  assert decision.plateau_ci[1] - float(run['eval'].values[7]) <= 0.04


def test_trainer_bound_stopper_decides_once_per_fraction_at_the_first_eval_past_it():
  from sgpo_jax.scaling_law.calibration import CalibrationSet
  from sgpo_jax.scaling_law.early_stop import BoundStopper, make_stopper
  evals = _bound_runs()
  calibration = _stop_set(evals[1:6] + evals[7:])
  # Evals every 15 steps: the first at or after 50 is 60 (deciding 0.5 and 0.6 at once, from
  # the prefix up to 0.6), then 75 for 0.7; 90 decides nothing.
  stopper = BoundStopper(_bound_config(bound_delta=0.0), 100, calibration=calibration,
                         method='flat', regime='r', group='flat')
  due, decisions = {}, {}
  for step in range(0, 101, 15):
    decision = decisions[step] = stopper.update_row(
        {'step': step, 'eval_accuracy': 0.66 if step == 75 else 0.6})
    if ': checkpoint ' in decision.reason:
      due[step] = decision.reason.split(': checkpoint ')[1].split(' ')[0]
  assert due == {60: '0.6', 75: '0.7'}
  # Each forecast sees every reading so far, the one compared included (75 is past 0.7).

  from sgpo_jax.scaling_law.calibration import calibrated_forecasts, prefix_features
  steps = np.arange(0, 76, 15, dtype=float)
  readings = np.where(steps == 75, 0.66, 0.6)
  seen = dataclasses.replace(_run_record(steps, readings, 100), method='flat', name='this run')
  expected = calibrated_forecasts(prefix_features(seen, 0.75, forms=(), group='flat',
                                                  regime='r'), calibration)[0]
  assert decisions[75].predicted_plateau == pytest.approx(expected.predicted_final)
  assert decisions[75].plateau_ci == pytest.approx(tuple(expected.interval))
  # A calibration record of the run itself (a design run retrained) is left out by name.
  own = BoundStopper(_bound_config(), 100, calibration=_stop_set(evals),
                     method='flat', regime='r', group='flat', run='flat0')
  other = BoundStopper(_bound_config(), 100, calibration=_stop_set(evals[1:]),
                       method='flat', regime='r', group='flat', run='flat0')
  for step in range(0, 61, 10):
    a, b = (x.update_row({'step': step, 'eval_accuracy': 0.6}) for x in (own, other))
  assert a.plateau_ci == b.plateau_ci
  # An empty calibration set gives an infinite bound (the metric's ceiling): never a stop.
  empty = BoundStopper(_bound_config(), 100, calibration=CalibrationSet([], 'none'),
                       method='flat', regime='r', group='flat')
  assert not any(empty.update_row({'step': s, 'eval_accuracy': 0.6}).should_stop
                 for s in range(0, 101, 10))
  # make_stopper loads the shipped set; a bad setting is named.
  shipped = make_stopper(_bound_config(bound_fractions=(0.3, 0.5)), 100, method='dapo',
                         regime='default', group='default/dapo')
  assert isinstance(shipped, BoundStopper) and len(shipped.calibration.records) == 80 * 11
  with pytest.raises(ValueError, match=r'bound_fractions=\(0.5, 0.3\) must be increasing'):
    make_stopper(_bound_config(bound_fractions=(0.5, 0.3)), 100)
  with pytest.raises(ValueError, match="calibration='/nope.json' is not a file"):
    make_stopper(_bound_config(calibration='/nope.json'), 100)


def _mixed_regime_runs():
  """20 runs of one regime, 10 seeds each of two configs: 'steady' ends where it is from step
  30 on; half the seeds of 'riser' gain 0.06 after step 70, the other half stay."""
  steps = np.arange(0, 101, 10, dtype=float)
  runs = []
  for config in ('steady', 'riser'):
    for seed in range(10):
      values = np.full(11, 0.6 + 0.001 * seed)
      values[0] = 0.5
      if config == 'riser' and seed % 2:
        values[8:] += 0.06
      record = dataclasses.replace(_run_record(steps, values, 100), name=f'r/{config}_seed{seed}',
                                   method='grpo', finished=True)
      runs.append({'eval': record, 'name': record.name, 'regime': 'r', 'group': f'r/{config}',
                   'seed_group': f'r/seed{seed}'})
  return runs


def test_bound_stopper_with_intervals_per_config_stops_a_steady_config_and_waits_on_a_riser():
  from sgpo_jax.scaling_law.calibration import CalibrationSet
  from sgpo_jax.scaling_law.early_stop import BoundStopper
  runs = _mixed_regime_runs()

  def stop_step(run, calibration):
    stopper = BoundStopper(_bound_config(bound_delta=0.02), 100, calibration=calibration,
                           method='grpo', regime='r', group=run['group'], run=run['name'])
    for step, value in zip(run['eval'].steps, run['eval'].values):
      decision = stopper.update_row({'step': int(step), 'eval_accuracy': float(value)})
      if decision.should_stop:
        return step, decision
    return None, decision

  steady, riser = runs[0], runs[11]  # seed 0 of each: neither rises
  others = [r for r in runs if r['seed_group'] != 'r/seed0']  # 9 seeds of each config
  pooled = _stop_set(others)
  per_config = _stop_set(others, config_scores_min=9, source='hand-made')
  assert per_config.config_scores_min == 9 and per_config.source == 'hand-made'
  assert per_config.records == pooled.records  # the same runs; only the interval rule differs
  # Pooled, the riser's late gains widen every interval: the steady run never stops.
  assert stop_step(steady, pooled)[0] is None
  # Per config, the steady run's interval is its own config's (within 0.02): it stops at the
  # first checkpoint; the riser config still waits (its own seeds gained 0.06).
  step, decision = stop_step(steady, per_config)
  assert step == 50 and 'interval from the 9 runs of config r/steady' in decision.reason
  assert stop_step(riser, per_config)[0] is None
  # With too few runs of its config (8 < 9) the pool's scores apply, as without the rule.
  fewer = _stop_set([r for r in others if r['name'] != 'r/steady_seed1'],
                                   config_scores_min=9)
  assert stop_step(steady, fewer)[0] is None
  # The rule travels in the set's file, as the trainer loads it.
  assert CalibrationSet.from_json(per_config.to_json()).config_scores_min == 9


def test_config_check_names_a_bad_bound_setting_before_compute():
  from sgpo_jax.config import check as config_check
  config = config_check.default_config()
  config.train.early_stop.update(enabled=True, rule='bound')
  config_check.check_config(config)  # the validated defaults and the shipped set
  config.train.early_stop.update(bound_delta=-0.01)
  with pytest.raises(ValueError, match='train.early_stop.bound_delta=-0.01 must be >= 0'):
    config_check.check_config(config)
  config.train.early_stop.update(bound_delta=0.035, calibration='/missing/runs.json')
  with pytest.raises(ValueError, match="calibration='/missing/runs.json' is not a file"):
    config_check.check_config(config)


def test_trainer_bound_stopper_resumed_from_its_log_decides_as_the_uninterrupted_one():
  from sgpo_jax.scaling_law.early_stop import BoundStopper
  evals = _bound_runs()
  calibration = _stop_set(evals[1:6] + evals[7:])
  run = evals[6]['eval']  # late0: continues at 0.5 and 0.6, stops at 0.7
  steps = np.arange(0, 101, 5)  # evals every 5 steps: most decide nothing
  rows = [{'step': int(s), 'eval_accuracy': float(v)}
          for s, v in zip(steps, np.interp(steps, run.steps, run.values))]
  def stopper():
    return BoundStopper(_bound_config(), 100, calibration=calibration, method='late',
                        regime='r', group='late')
  whole = stopper()
  live = [whole.update_row(row) for row in rows]
  for cut in (9, 11, 12, 13):  # resumed after the evals at 40, 50, 55, 60
    resumed = stopper()
    for row in rows[:cut]:
      resumed.observe_row(row)  # as train.py replays metrics.jsonl
    again = [resumed.update_row(row) for row in rows[cut:]]
    assert [(d.should_stop, d.reason) for d in again] == \
        [(d.should_stop, d.reason) for d in live[cut:]]
  assert [d.should_stop for d in live].index(True) == 14  # step 70


def test_trend_stopper_resumed_from_its_log_keeps_the_uninterrupted_streak():
  from sgpo_jax.scaling_law.early_stop import TrendStopper
  config = {'enabled': True, 'rule': 'trend', 'epsilon': 0.01, 'min_fraction': 0.3,
            'window_fraction': 0.3, 'confidence': 0.9, 'confirm_evals': 2}
  values = [0.1, 0.3, 0.5, 0.6, 0.65, 0.66, 0.66, 0.66, 0.66, 0.66, 0.66]
  rows = [{'step': 10 * i, 'eval_accuracy': v} for i, v in enumerate(values)]
  whole = TrendStopper(config, 100)
  live = [whole.update_row(row) for row in rows]
  stop = [d.should_stop for d in live].index(True)
  for cut in range(1, stop + 1):
    resumed = TrendStopper(config, 100)
    for row in rows[:cut]:
      resumed.observe_row(row)  # as train.py replays metrics.jsonl
    again = [resumed.update_row(row) for row in rows[cut:stop + 1]]
    assert [(d.should_stop, d.reason) for d in again] == \
        [(d.should_stop, d.reason) for d in live[cut:stop + 1]]
  assert 'evals in a row' in live[stop].reason
  # A NaN reading is no eval: no decision, the streak as it was.
  nan_row = TrendStopper(config, 100)
  assert nan_row.update_row({'step': 0, 'eval_accuracy': float('nan')}) is None


def test_config_own_scores_take_the_interval_from_the_configs_seeds_only():
  # Regime pool of two configs at one flat level: 'wide' ends spread by +-0.1, 'tight' by
  # +-0.01. Pooled scores give both one half-width; per config, each its own.
  wide = [_record(f'r/wide_seed{i}', 0.5, 0.6 + (0.1 if i % 2 else -0.1), group='r/wide',
                  regime='r') for i in range(10)]
  tight = [_record(f'r/tight_seed{i}', 0.5, 0.6 + (0.01 if i % 2 else -0.01),
                   group='r/tight', regime='r') for i in range(10)]
  calibration = CalibrationSet(wide + tight, 'hand-made')
  target = _record('r/tight_seed99', 0.5, 0.6, group='r/tight', regime='r')
  pooled = calibrated_forecast(target, calibration)
  own = calibrated_forecast(target, calibration, config_scores_min=9)
  assert own.predicted_final == pooled.predicted_final
  assert own.half_width < 0.05 < pooled.half_width
  assert 'interval from the 10 runs of config r/tight' in own.calibration
  # Too few of its own runs: the pool's scores, as without the option.
  few = calibrated_forecast(target, calibration, config_scores_min=11)
  assert few.half_width == pooled.half_width and few.calibration == pooled.calibration


def test_config_own_rule_travels_with_the_calibration_set(tmp_path):
  # The same pools as above; the rule stored in the set applies without the argument, an
  # explicit 0 switches it off, and it survives the file.
  wide = [_record(f'r/wide_seed{i}', 0.5, 0.6 + (0.1 if i % 2 else -0.1), group='r/wide',
                  regime='r') for i in range(10)]
  tight = [_record(f'r/tight_seed{i}', 0.5, 0.6 + (0.01 if i % 2 else -0.01),
                   group='r/tight', regime='r') for i in range(10)]
  target = _record('r/tight_seed99', 0.5, 0.6, group='r/tight', regime='r')
  ruled = CalibrationSet(wide + tight, 'hand-made', config_scores_min=9)
  plain = CalibrationSet(wide + tight, 'hand-made')
  assert calibrated_forecast(target, ruled).half_width == \
      calibrated_forecast(target, plain, config_scores_min=9).half_width
  assert calibrated_forecast(target, ruled, config_scores_min=0).half_width == \
      calibrated_forecast(target, plain).half_width
  assert ruled.without('r/wide_seed0').config_scores_min == 9
  path = tmp_path / 'set.json'
  path.write_text(ruled.to_json())
  assert CalibrationSet.load(path).config_scores_min == 9
  assert 'config_scores_min' not in json.loads(plain.to_json())  # old files stay as they were
  with pytest.raises(ValueError, match=r"config_scores_min=-1 must be an int >= 0"):
    CalibrationSet([], config_scores_min=-1)


def _budgeted_bound_runs():
  """`_bound_runs` in regime 'default', with training rows whose FLOPs reach the regime's
  budget at step 89.5 (the eval record still says 100 steps): the trainer projects 90."""
  trainer = _experiment_script('scaling_law_stop_trainer')
  budget = trainer.transfer._planned_length('default')[1]
  runs = []
  for run in _bound_runs():
    steps = np.arange(1, 101, dtype=float)
    reward = dataclasses.replace(_run_record(steps, np.full(100, 0.5), 100),
                                 metric='reward_mean', flops_total=steps * budget / 89.5)
    eval_record = dataclasses.replace(run['eval'], regime='default')
    runs.append({**run, 'regime': 'default', 'seed_group': 'default/' + run['seed_group'][2:],
                 'eval': eval_record, 'reward': reward})
  return runs


def test_trainer_table_replays_settings_as_the_bound_stopper_itself():
  trainer = _experiment_script('scaling_law_stop_trainer')
  runs = _budgeted_bound_runs()
  pools = trainer.seed_pools(runs)
  tables = trainer.design_tables(runs, pools)
  # The trainer's projected length (90), not the record's 100; rows from 30% of it on.
  assert {row['total'] for table in tables for row in table if row['step'] < 100} == {90}
  assert [row['step'] for row in tables[0]] == [30, 40, 50, 60, 70, 80, 90, 100]
  settings = trainer.GRID[::60] + [trainer.default_setting()]
  stops = set()
  for setting in settings:
    for run, table in zip(runs, tables):
      fast = trainer.table_outcome(run, table, setting)
      slow = trainer.transfer.trainer_outcome(run, pools[trainer._seed(run)], setting)
      assert fast == slow, (setting, run['name'])
      stops.add(fast['stop_step'])
  assert None in stops and len(stops) > 2  # some settings stop, at different steps
  # A setting the table did not record (a checkpoint before its first row) is refused.
  with pytest.raises(ValueError, match='outside what trainer_table recorded'):
    trainer.table_outcome(runs[0], tables[0], {**settings[0], 'fractions': (0.1, 0.5)})

