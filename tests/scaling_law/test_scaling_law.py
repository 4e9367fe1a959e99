"""Tests for sgpo_jax.scaling_law: fits recover known curves, form selection, degenerate
inputs, the joint law, early stopping and the CLI on a synthetic run directory."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sgpo_jax.scaling_law import (
  EarlyStopper,
  FormPrior,
  exponential_curve,
  fit_joint_law,
  fit_trajectory,
  forecast,
  forecast_zero_shot,
  load_run,
  logistic_curve,
  select_form,
  simulate_trajectory,
  write_synthetic_run,
)
from sgpo_jax.scaling_law import __main__ as scaling_law_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
TOTAL = 300
EXPONENTIAL = {'r0': 0.2, 'r_inf': 0.7, 'tau': 0.15}
LOGISTIC = {'r0': 0.1, 'r_inf': 0.8, 't_mid': 0.35, 'width': 0.07}


def _progress(form, params, noise=0.02, seed=0, total=TOTAL):
  steps, rewards = simulate_trajectory(form, params, total, noise=noise, seed=seed)
  return steps / total, rewards


def test_curves_start_at_r0_and_approach_plateau():
  t = np.array([0.0, 50.0])
  exp_values = exponential_curve(t, np.array([0.2, 0.7, 0.15]))
  log_values = logistic_curve(t, np.array([0.1, 0.8, 0.35, 0.07]))
  np.testing.assert_allclose(exp_values, [0.2, 0.7], atol=1e-9)
  np.testing.assert_allclose(log_values, [0.1, 0.8], atol=1e-9)


@pytest.mark.parametrize('form,truth,tolerance', [
    ('exponential', EXPONENTIAL, {'r0': 0.02, 'r_inf': 0.01, 'tau': 0.015}),
    ('logistic', LOGISTIC, {'r0': 0.02, 'r_inf': 0.01, 't_mid': 0.01, 'width': 0.01}),
])
def test_fit_recovers_known_parameters(form, truth, tolerance):
  t, rewards = _progress(form, truth, noise=0.02, seed=1)
  fit = fit_trajectory(t, rewards, form)
  for name, allowed in tolerance.items():
    assert abs(fit.params[name] - truth[name]) < allowed, (name, fit.params)
  assert fit.noise_sigma == pytest.approx(0.02, rel=0.3)


def test_fit_shrugs_off_outliers_with_robust_loss():
  t, rewards = _progress('exponential', EXPONENTIAL, noise=0.01, seed=2)
  rewards[::25] = 0.0  # a crashed eval every 25 steps
  fit = fit_trajectory(t, rewards, 'exponential', loss='soft_l1')
  assert abs(fit.params['r_inf'] - 0.7) < 0.01


@pytest.mark.parametrize('form,truth', [('exponential', EXPONENTIAL), ('logistic', LOGISTIC)])
def test_select_form_picks_generating_form(form, truth):
  for seed in range(2):
    t, rewards = _progress(form, truth, seed=seed)
    selection = select_form(t[:180], rewards[:180])
    assert selection.method == 'holdout'
    assert selection.fit.form == form, selection.scores


def test_select_form_falls_back_to_aic_with_few_points():
  t, rewards = _progress('logistic', LOGISTIC, noise=0.005)
  selection = select_form(t[::40], rewards[::40])
  assert selection.method == 'aic'
  assert any('AIC' in note for note in selection.fit.notes)


def test_forecast_from_prefix_predicts_final_and_plateau_step():
  steps, rewards = simulate_trajectory('exponential', EXPONENTIAL, TOTAL, seed=3)
  result = forecast(steps, rewards, TOTAL, observe_fraction=0.5)
  true_plateau_step = EXPONENTIAL['tau'] * math.log(0.5 / 0.01) * TOTAL  # 176
  assert result.form == 'exponential'
  assert abs(result.predicted_final_reward - 0.7) < 0.02
  low, high = result.final_reward_ci
  assert low <= result.predicted_final_reward <= high
  assert abs(result.predicted_plateau_step - true_plateau_step) < 25
  assert result.plateau_step_ci[0] <= true_plateau_step <= result.plateau_step_ci[1] + 10
  assert result.predicted_plateau_step <= result.recommended_stop_step <= TOTAL
  json.dumps(result.to_dict())


def test_bounded_plateau_never_exceeds_one():
  # A steep, still-linear rise: an unbounded fit would extrapolate far above 1.
  steps = np.arange(1, 61, dtype=float)
  rewards = np.clip(0.3 + 0.01 * steps, 0, 1)
  result = forecast(steps, rewards, 300, forms=('exponential',))
  assert result.predicted_plateau <= 1.0
  assert result.plateau_ci[1] <= 1.0
  assert result.predicted_final_reward <= 1.0


def test_rewards_outside_unit_interval_need_unbounded():
  with pytest.raises(ValueError, match='bounded=False'):
    fit_trajectory(np.linspace(0, 1, 20), np.linspace(-1, 3, 20))
  t = np.linspace(0, 1, 20)
  fit = fit_trajectory(t, -1 + 4 * (1 - np.exp(-t / 0.3)), bounded=False)
  assert fit.params['r_inf'] > 1.0


def test_flat_curve_forecasts_flat_with_note():
  steps = np.arange(1, 101, dtype=float)
  result = forecast(steps, np.full(100, 0.4), 200)
  assert result.predicted_final_reward == pytest.approx(0.4, abs=1e-3)
  assert result.predicted_plateau == pytest.approx(0.4, abs=1e-3)
  assert result.remaining_gain_upper < 0.01
  assert any('flat trajectory' in note for note in result.notes)


def test_too_few_points_raise_clear_error():
  with pytest.raises(ValueError, match='too few to fit the exponential form'):
    fit_trajectory([0.1, 0.2], [0.3, 0.4], 'exponential')
  with pytest.raises(ValueError, match='no form could be fitted'):
    forecast([1, 2, 3], [0.1, 0.2, 0.3], 100)


def test_nans_are_dropped_with_note():
  steps, rewards = simulate_trajectory('exponential', EXPONENTIAL, TOTAL, seed=4)
  rewards[::7] = np.nan
  result = forecast(steps, rewards, TOTAL, observe_fraction=0.6)
  assert math.isfinite(result.predicted_final_reward)
  assert any('non-finite' in note for note in result.notes)
  with pytest.raises(ValueError, match='too few'):
    fit_trajectory(np.linspace(0, 1, 10), np.full(10, np.nan))


def test_decreasing_curve_predicts_no_gain():
  steps, rewards = simulate_trajectory('exponential', {'r0': 0.6, 'r_inf': 0.3, 'tau': 0.2},
                                       TOTAL, seed=5)
  result = forecast(steps, rewards, TOTAL, observe_fraction=0.5)
  assert 0.0 <= result.predicted_plateau < 0.45
  assert result.remaining_gain_upper < 0.01
  assert any('decreases' in note for note in result.notes)


def test_bad_options_name_the_value():
  with pytest.raises(ValueError, match='observe_fraction=1.5'):
    forecast([1, 2, 3, 4, 5], [0.1] * 5, 10, observe_fraction=1.5)
  with pytest.raises(ValueError, match="unknown trajectory form 'cubic'"):
    fit_trajectory([0.1, 0.2, 0.3, 0.4], [0.1] * 4, 'cubic')


def _run_fits(sizes, seed=0):
  fits = []
  for i, size in enumerate(sizes):
    r0 = 0.1 + 0.05 * i
    gain = 0.3 * (size / 1e9) ** 0.2
    truth = {'r0': r0, 'r_inf': r0 + gain * (1 - r0), 'tau': 0.1 * (size / 1e9) ** -0.3}
    t, rewards = _progress('exponential', truth, noise=0.01, seed=seed + i)
    fits.append(fit_trajectory(t, rewards, 'exponential'))
  return fits


def test_joint_law_recovers_exponents_and_forecasts_zero_shot():
  sizes = [0.5e9, 1e9, 3e9, 7e9]
  law = fit_joint_law(sizes, _run_fits(sizes))
  assert law.gain_fraction.exponent == pytest.approx(0.2, abs=0.05)
  assert law.timescales['tau'].exponent == pytest.approx(-0.3, abs=0.08)
  predicted = law.predict_params(14e9, 0.2)
  expected_r_inf = 0.2 + 0.3 * 14**0.2 * 0.8
  assert predicted['r_inf'] == pytest.approx(expected_r_inf, abs=0.03)
  zero_shot = forecast_zero_shot(law.prior(14e9, 0.2), TOTAL)
  assert zero_shot.predicted_final_reward == pytest.approx(expected_r_inf, abs=0.03)
  assert zero_shot.plateau_ci[1] <= 1.0


def test_joint_law_prior_refines_a_short_prefix():
  sizes = [0.5e9, 1e9, 3e9, 7e9]
  law = fit_joint_law(sizes, _run_fits(sizes))
  truth = {'r0': 0.2, 'r_inf': 0.2 + 0.3 * 2**0.2 * 0.8, 'tau': 0.1 * 2**-0.3}
  steps, rewards = simulate_trajectory('exponential', truth, TOTAL, noise=0.03, seed=9)
  prior = law.prior(2e9, 0.2)
  refined = forecast(steps[:12], rewards[:12], TOTAL, prior=prior)
  assert abs(refined.predicted_final_reward - truth['r_inf']) < 0.04
  # Two points: too few alone, fine with the prior.
  assert forecast(steps[:2], rewards[:2], TOTAL, prior=prior).n_observed == 2


def test_joint_law_single_run_falls_back_with_warning():
  fits = _run_fits([1e9])
  with pytest.warns(UserWarning, match='b = d = 0'):
    law = fit_joint_law([1e9], fits)
  assert law.gain_fraction.exponent == 0.0 and law.timescales['tau'].exponent == 0.0
  assert law.predict_params(70e9, 0.1)['r_inf'] <= 1.0
  with pytest.raises(ValueError, match='params_nonembed=nan'):
    law.predict_params(float('nan'), 0.1)
  with pytest.raises(ValueError, match='at least one fitted run'):
    fit_joint_law([], [])


def test_form_prior_mismatch_is_an_error():
  prior = FormPrior('logistic', {'r_inf': (0.5, 0.1)})
  with pytest.raises(ValueError, match="prior is for form 'logistic'"):
    fit_trajectory([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.3], 'exponential', prior=prior)


def test_early_stopper_stops_in_expected_window_with_reason():
  config = {'enabled': True, 'epsilon': 0.01, 'min_fraction': 0.2, 'confidence': 0.9}
  stopper = EarlyStopper(config, TOTAL, refit_every=20)
  steps, rewards = simulate_trajectory('exponential', EXPONENTIAL, TOTAL, noise=0.02, seed=6)
  decisions = []
  for step, reward in zip(steps.astype(int), rewards):
    decision = stopper.update(int(step), float(reward), flops_total=1e9 + 1e12 * step)
    if step < 0.2 * TOTAL:
      assert decision is None
    if decision is not None:
      decisions.append(decision)
      if decision.should_stop:
        break
  stop = decisions[-1]
  assert stop.should_stop
  assert 170 <= stop.step <= 260  # true plateau step (remaining gain < 0.01) is 176
  assert 'stop at step' in stop.reason and 'R_inf=' in stop.reason
  assert 'upper bound' in stop.reason and '< epsilon 0.01' in stop.reason
  assert stop.flops_saved_estimate == pytest.approx(1e12 * (TOTAL - stop.step), rel=1e-6)
  assert not decisions[0].should_stop and 'continue at step' in decisions[0].reason


def test_early_stopper_resumed_from_its_log_refits_at_the_same_steps():
  """train.py replays metrics.jsonl with observe_row after a resume; the refits (and so the
  decisions) must fall on the steps of the uninterrupted run (they restarted at once)."""
  config = {'enabled': True, 'epsilon': 1e-6, 'min_fraction': 0.5, 'confidence': 0.9}
  rows = [{'step': s, 'reward_mean': 0.5 - 0.4 * math.exp(-s / 20), 'flops_total': 1e9 * s}
          for s in range(1, 81)]
  whole = EarlyStopper(config, 80, refit_every=5, n_samples=20)
  refits = [r['step'] for r in rows if whole.update_row(r) is not None]
  assert refits[:3] == [40, 45, 50]
  resumed = EarlyStopper(config, 80, refit_every=5, n_samples=20)
  for row in rows[:42]:  # resumed after step 42
    resumed.observe_row(row)
  assert [r['step'] for r in rows[42:] if resumed.update_row(r) is not None] == \
      [s for s in refits if s > 42]


def test_early_stopper_disabled_and_bad_config():
  config = {'enabled': False, 'epsilon': 0.01, 'min_fraction': 0.2, 'confidence': 0.9}
  assert EarlyStopper(config, 100).update(50, 0.5, 1e9) is None
  with pytest.raises(ValueError, match="lacks 'confidence'"):
    EarlyStopper({'enabled': True, 'epsilon': 0.01, 'min_fraction': 0.2}, 100)
  with pytest.raises(ValueError, match='confidence=1.5'):
    EarlyStopper(dict(config, confidence=1.5), 100)


def test_early_stopper_reports_unfittable_prefix():
  config = {'enabled': True, 'epsilon': 0.01, 'min_fraction': 0.0, 'confidence': 0.9}
  decision = EarlyStopper(config, 100).update(1, 0.5, 1e9)
  assert decision is not None and not decision.should_stop
  assert 'no trajectory fit yet' in decision.reason


def test_load_run_reads_lead_keys_and_fallbacks(tmp_path):
  run = write_synthetic_run(tmp_path / 'a', 'exponential', EXPONENTIAL, 100,
                            params_nonembed=1.5e9, model_name='tiny-1.5b')
  record = load_run(run)
  assert (record.model, record.params_nonembed, record.total_steps) == ('tiny-1.5b', 1.5e9, 100)
  evals = load_run(run, 'eval_accuracy')
  assert evals.steps[0] == 0 and evals.values[0] == pytest.approx(0.2)
  (run / 'summary.json').write_text(json.dumps({'model': {'name': 'm', 'params': 7e9},
                                                'steps': 100}))
  record = load_run(run)
  assert (record.model, record.params_nonembed) == ('m', 7e9)
  with pytest.raises(ValueError, match='does not exist'):
    load_run(tmp_path / 'missing')


def test_cli_prints_every_field_and_writes_plots(tmp_path):
  sizes = [0.5e9, 1.5e9, 4e9]
  run_dirs = []
  for i, size in enumerate(sizes):
    truth = {'r0': 0.2, 'r_inf': 0.2 + 0.8 * 0.3 * (size / 1e9) ** 0.2,
             'tau': 0.12 * (size / 1e9) ** -0.2}
    run_dirs.append(write_synthetic_run(tmp_path / f'run{i}', 'exponential', truth, 120,
                                        params_nonembed=size, model_name=f'm{i}', seed=i))
  out = tmp_path / 'out'
  completed = subprocess.run(
      [sys.executable, '-m', 'sgpo_jax.scaling_law', 'fit', *map(str, run_dirs),
       '--observe-fraction', '0.4', '--out', str(out), '--metric', 'reward_mean',
       '--calibration', 'none'],
      capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
  assert completed.returncode == 0, completed.stderr
  rows = [json.loads(line) for line in completed.stdout.splitlines()]
  assert len(rows) == 3
  fields = ['model', 'params', 'form', 'predicted_final_reward', 'actual_final_reward',
            'abs_error', 'predicted_plateau_step', 'recommended_stop_step',
            'zero_shot_final_reward', 'zero_shot_abs_error']
  for row, size in zip(rows, sizes):
    for field in fields:
      assert row[field] is not None, (field, row)
    assert row['params'] == size
    assert row['abs_error'] < 0.05
    assert row['zero_shot_mode'] == 'leave_one_out'
    assert Path(row['plot']).exists()
  assert (out / 'joint_law.json').exists()
  assert '"joint_law"' in completed.stderr


def test_cli_bad_run_dir_is_a_clear_error(tmp_path, capsys):
  # In-process: the subprocess path is covered above and costs a fresh interpreter.
  assert scaling_law_cli.main(['fit', str(tmp_path / 'nope')]) == 2
  assert 'metrics.jsonl does not exist' in capsys.readouterr().err


def test_power_form_fits_a_creeping_curve_and_stays_opt_in():
  truth = {'r0': 0.3, 'r_inf': 0.8, 'tau': 0.05, 'alpha': 0.7}
  steps, rewards = simulate_trajectory('power', truth, TOTAL, noise=0.01, seed=4)
  fit = fit_trajectory(steps / TOTAL, rewards, 'power')
  assert abs(fit.params['r_inf'] - 0.8) < 0.05 and abs(fit.params['r0'] - 0.3) < 0.03
  # Plateau progress inverts the curve: remaining gain there equals epsilon.
  from sgpo_jax.scaling_law.trajectory import DEFAULT_FORMS, FORMS
  vector = np.array([[0.3, 0.8, 0.05, 0.7]])
  t_plateau = FORMS['power'].plateau_progress(vector, 0.01)[0]
  assert 0.8 - FORMS['power'].curve(np.array([t_plateau]), vector)[0, 0] == pytest.approx(0.01)
  assert 'power' not in DEFAULT_FORMS


def test_aicc_gives_a_fit_with_too_few_points_no_support():
  t = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
  rewards = np.array([0.62, 0.66, 0.63, 0.60, 0.61])  # five noisy eval points
  assert fit_trajectory(t, rewards, 'logistic').aic == np.inf
  assert np.isfinite(fit_trajectory(t, rewards, 'exponential').aic)
  assert select_form(t, rewards).fit.form == 'exponential'


def test_load_run_skips_mostly_padded_reward_steps(tmp_path):
  run = write_synthetic_run(tmp_path / 'a', 'exponential', EXPONENTIAL, 50)
  lines = (run / 'metrics.jsonl').read_text().splitlines()
  rows = [json.loads(line) for line in lines]
  rows[10].update(padding_fraction=0.97, reward_mean=1.0)  # an sGPO phase's last batch
  rows[20].update(padding_fraction=0.5)
  (run / 'metrics.jsonl').write_text('\n'.join(json.dumps(row) for row in rows) + '\n')
  record = load_run(run)
  assert record.steps.size == 49 and 11.0 not in record.steps and 21.0 in record.steps
  assert any('padding_fraction' in note for note in record.notes)
