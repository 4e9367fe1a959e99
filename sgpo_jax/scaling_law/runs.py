"""Run directories in and forecast reports out: reading metrics.jsonl/summary.json,
forecasting each run from its prefix (alone, zero-shot from the joint law, and refined by
the law), plotting, and writing synthetic runs for tests and dry runs.

Keys read (first present wins):
- model name: summary `model_name`, `model` (a string, or a dict's `name`), config.json
  `model.name`, else the directory name.
- model size N: summary `params_nonembed`, `model_params_nonembed`, `params`, or the same
  keys inside a `model` dict; None when absent (the run is left out of the joint law).
- method: summary `method`, else config.json `method`, else None.
- run length (see `run_length`): the steps the run actually took (summary `steps`) once it
  has finished; while it runs, config `train.num_steps`, cut to the step where
  `train.flops_budget` will be reached at the FLOPs per step logged so far; summary
  `num_steps` wins over both; else the last logged step.
- the metric from each metrics.jsonl line that has a finite value for it, with `step` and
  `flops_total`; for `eval_accuracy`, summary `eval_accuracy_initial` is added at step 0
  when no step-0 eval was logged. `reward_over_profile` is reward_mean - p_hat_mean: the
  batch's reward above the profiled solve rate of its own queries, which takes out the
  difficulty of each curriculum phase (sGPO's G2 batches sit near 0.7, its G8 ones near 0.3).
- metric 'auto' (`choose_metric`): held-out eval_accuracy when the run logs at least
  MIN_EVAL_POINTS evals, else reward_over_profile for curriculum runs (those that log
  p_hat_mean), else reward_mean.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sgpo_jax.scaling_law.calibration import (
  DEFAULT_PREDICTOR,
  CalibrationSet,
  calibrated_forecast,
  flat_level,
  metric_is_bounded,
  prefix_features,
)
from sgpo_jax.scaling_law.forecasting import Forecast, forecast, forecast_zero_shot
from sgpo_jax.scaling_law.joint_law import JointLaw, fit_joint_law
from sgpo_jax.scaling_law.trajectory import (
  DEFAULT_FORMS,
  TrajectoryFit,
  fit_trajectory,
  get_form,
  select_form,
)

METRICS = ('reward_mean', 'eval_accuracy', 'reward_over_profile')
AUTO_METRIC = 'auto'
# An eval curve with fewer points than this (step 0 included) is too sparse to forecast.
MIN_EVAL_POINTS = 5
# The noise-free forecast is compared with the mean of the last 5% of planned steps
# rather than one noisy last point.
ACTUAL_FINAL_WINDOW = 0.05
R0_HEAD_POINTS = 3
# reward_mean of a step whose batch is mostly padding (an sGPO phase's last batch: 4 valid
# rows of 128 scored 1.0 in a validation run) is far noisier than a full batch; such steps
# are skipped.
MAX_PADDING_FRACTION = 0.75


@dataclasses.dataclass
class RunRecord:
  """One run's metric trajectory and identity."""

  run_dir: Path
  name: str
  model: str
  params_nonembed: float | None
  total_steps: int
  metric: str
  steps: np.ndarray
  values: np.ndarray
  flops_total: np.ndarray
  method: str | None = None
  notes: list[str] = dataclasses.field(default_factory=list)
  length_source: str = 'planned'  # how total_steps was found (see run_length)
  metric_reason: str = ''  # why this metric (set when it was chosen automatically)
  finished: bool = False  # summary.json exists
  regime: str = ''  # config.json `regime` (the comparison protocol's named regimes), if any

  @property
  def r0(self) -> float:
    """Initial reward: median of the first few logged values."""
    return float(np.median(self.values[:R0_HEAD_POINTS]))

  @property
  def final_readings(self) -> np.ndarray:
    """The readings in the last ACTUAL_FINAL_WINDOW of the run's steps."""
    window_start = self.steps[-1] - ACTUAL_FINAL_WINDOW * self.total_steps
    return self.values[self.steps >= window_start]

  @property
  def actual_final(self) -> float:
    return float(np.mean(self.final_readings))


def _read_json(path: Path) -> dict[str, Any]:
  if not path.exists():
    return {}
  with path.open() as handle:
    return json.load(handle)


def _first_number(sources: Sequence[dict[str, Any]], keys: Sequence[str]) -> float | None:
  for source in sources:
    for key in keys:
      value = source.get(key)
      if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
  return None


def run_key(run_dir: str | Path) -> str:
  """'<parent folder>/<run folder>': how calibration sets name runs (to leave one out)."""
  path = Path(run_dir).resolve()
  return f'{path.parent.name}/{path.name}'


def config_group(run_dir: str | Path) -> str:
  """The run's config group as calibration sets name it: `run_key` without a trailing
  `_seed<k>` (sweeps name a config's seeds `<config>_seed<k>`), so a run's forecast can use
  the other seeds of its config."""
  return re.sub(r'_seed\d+$', '', run_key(run_dir))


def _read_rows(metrics_path: Path) -> list[dict[str, Any]]:
  rows = []
  with metrics_path.open() as handle:
    for number, line in enumerate(handle, 1):
      if not line.strip():
        continue
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError as error:
        raise ValueError(f'{metrics_path}:{number} is not JSON ({error}); fix or drop the '
                         'line') from error
  return rows


def _finite(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def choose_metric(rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
  """(metric, why) for metric='auto': what is meaningful to forecast for this run."""
  n_eval = sum(_finite(row.get('eval_accuracy')) for row in rows)
  if n_eval >= MIN_EVAL_POINTS:
    return 'eval_accuracy', (f'held-out eval_accuracy: the run logs {n_eval} evals, and it is '
                             'comparable across methods and curriculum phases')
  if any(_finite(row.get('p_hat_mean')) for row in rows):
    return 'reward_over_profile', (
        f'only {n_eval} evals logged; a curriculum run mixes phases of different difficulty, '
        'so reward_mean - p_hat_mean (reward above the profiled solve rate) is forecast')
  return 'reward_mean', f'only {n_eval} evals logged; reward_mean of the training batches'


def run_length(summary: dict[str, Any], config: dict[str, Any],
               rows: Sequence[dict[str, Any]]) -> tuple[int, str]:
  """(steps the run takes, where that number came from); see the module docstring.

  A run stopped by `train.flops_budget` (or early) takes fewer steps than the planned
  `train.num_steps`: a forecast "from 30% of the run" must mean 30% of those steps.
  """
  logged = [float(row['step']) for row in rows if _finite(row.get('step'))]
  last_step = max(logged) if logged else 0.0
  if _finite(summary.get('num_steps')):
    return int(summary['num_steps']), 'summary num_steps'
  if summary and _finite(summary.get('steps')):
    return int(summary['steps']), 'steps taken (finished run)'
  train = config.get('train') if isinstance(config.get('train'), dict) else {}
  planned = train.get('num_steps')
  if not _finite(planned):
    return int(last_step), 'last logged step (no summary or config)'
  budget = train.get('flops_budget')
  points = sorted((float(row['step']), float(row['flops_total'])) for row in rows
                  if _finite(row.get('step')) and _finite(row.get('flops_total'))
                  and row['step'] > 0 and 'reward_mean' in row)
  if _finite(budget) and budget > 0 and len(points) >= 2:
    (first_step, first_flops), (step, flops) = points[0], points[-1]
    if step > first_step:
      per_step = (flops - first_flops) / (step - first_step)
      if flops >= budget:
        return int(step), 'flops budget reached at the last logged step'
      if per_step > 0:
        until_budget = step + math.ceil((budget - flops) / per_step)
        if until_budget < planned:
          return int(until_budget), (f'flops_budget {budget:.3g} at {per_step:.3g} FLOPs/step '
                                     '(run still going)')
  return int(planned), 'planned train.num_steps (run still going)'


def load_run(run_dir: str | Path, metric: str = 'reward_mean') -> RunRecord:
  """Reads one run directory (see the module docstring for the keys used)."""
  if metric not in METRICS + (AUTO_METRIC,):
    raise ValueError(f'metric={metric!r} is not supported; use one of '
                     f'{METRICS + (AUTO_METRIC,)}')
  run_dir = Path(run_dir)
  metrics_path = run_dir / 'metrics.jsonl'
  if not metrics_path.exists():
    raise ValueError(f'{metrics_path} does not exist; pass a run directory written by the trainer')
  summary = _read_json(run_dir / 'summary.json')
  config = _read_json(run_dir / 'config.json')
  model_block = summary.get('model') if isinstance(summary.get('model'), dict) else {}
  config_model = config.get('model') if isinstance(config.get('model'), dict) else {}
  if isinstance(summary.get('model_name'), str):
    model = summary['model_name']
  elif isinstance(summary.get('model'), str):
    model = summary['model']
  else:
    model = model_block.get('name') or config_model.get('name') or run_dir.name
  size_keys = ('params_nonembed', 'model_params_nonembed', 'params')
  params_nonembed = _first_number([summary, model_block], size_keys)

  rows = _read_rows(metrics_path)
  reason = ''
  if metric == AUTO_METRIC:
    metric, reason = choose_metric(rows)
  steps, values, flops = [], [], []
  padded = 0
  for row in rows:
    if metric == 'reward_over_profile':
      value = (row['reward_mean'] - row['p_hat_mean']
               if _finite(row.get('reward_mean')) and _finite(row.get('p_hat_mean')) else None)
    else:
      value = row.get(metric)
    if 'step' not in row or not _finite(value):
      continue
    padding = row.get('padding_fraction')
    if (metric != 'eval_accuracy' and _finite(padding) and padding > MAX_PADDING_FRACTION):
      padded += 1
      continue
    steps.append(float(row['step']))
    values.append(float(value))
    flops.append(float(row.get('flops_total', float('nan'))))
  initial = summary.get('eval_accuracy_initial')
  if metric == 'eval_accuracy' and _finite(initial) and 0.0 not in steps:
    steps.insert(0, 0.0)
    values.insert(0, float(initial))
    flops.insert(0, float('nan'))
  if not steps:
    raise ValueError(f'{metrics_path} has no lines with a finite {metric!r}; pick another '
                     '--metric')
  order = np.argsort(steps, kind='stable')
  total_steps, length_source = run_length(summary, config, rows)
  total_steps = max(total_steps, 1)
  method = next((source['method'] for source in (summary, config)
                 if isinstance(source.get('method'), str)), None)
  return RunRecord(run_dir=run_dir, name=run_dir.name, model=str(model),
                   params_nonembed=params_nonembed, total_steps=int(total_steps), metric=metric,
                   steps=np.array(steps)[order], values=np.array(values)[order],
                   flops_total=np.array(flops)[order], method=method,
                   notes=[f'skipped {padded} steps with padding_fraction > '
                          f'{MAX_PADDING_FRACTION}'] if padded else [],
                   length_source=length_source, metric_reason=reason,
                   finished=bool(summary),
                   regime=config['regime'] if isinstance(config.get('regime'), str) else '')


def record_to_dict(run: RunRecord) -> dict[str, Any]:
  """A RunRecord as JSON-ready data (`record_from_dict` inverts it): what a study needs to be
  replayed without the run folder, e.g. once the runs are deleted."""
  out = {}
  for field in dataclasses.fields(RunRecord):
    value = getattr(run, field.name)
    if isinstance(value, np.ndarray):
      value = [None if not math.isfinite(x) else float(x) for x in value.tolist()]
    elif isinstance(value, Path):
      value = str(value)
    out[field.name] = value
  return out


def record_from_dict(data: dict[str, Any]) -> RunRecord:
  """The RunRecord `record_to_dict` wrote (missing values in arrays come back as NaN)."""
  names = {field.name for field in dataclasses.fields(RunRecord)}
  unknown = sorted(set(data) - names)
  missing = sorted(field.name for field in dataclasses.fields(RunRecord)
                   if field.name not in data and field.default is dataclasses.MISSING
                   and field.default_factory is dataclasses.MISSING)
  if unknown or missing:
    raise ValueError(f'run record {data.get("name")!r}: unknown fields {unknown}, missing '
                     f'{missing}; pass what record_to_dict wrote')
  fields = dict(data, run_dir=Path(data['run_dir']))
  for key in ('steps', 'values', 'flops_total'):
    fields[key] = np.array([float('nan') if x is None else x for x in data[key]], dtype=float)
  return RunRecord(**fields)


def _ci_list(interval: tuple[float, float]) -> list[float]:
  return [round(float(value), 6) for value in interval]


def evaluate_run(run: RunRecord, observe_fraction: float, *, law: JointLaw | None = None,
                 forms: Sequence[str] = DEFAULT_FORMS, epsilon: float = 0.01,
                 confidence: float = 0.9, smoothing: int = 0, bounded: bool = True,
                 calibration: CalibrationSet | None = None,
                 predictor: str = DEFAULT_PREDICTOR,
                 group: str | None = None) -> tuple[dict[str, Any], Forecast | None]:
  """Forecasts a run from its first `observe_fraction` (of `run.total_steps`, the steps it
  took or will take) and, when it has finished, scores the forecast on its end.

  With a `calibration` set, `predicted_final_reward` and its interval come from
  `calibration.calibrated_forecast` (a run never calibrates its own forecast); the curve's
  own extrapolation stays in `curve_final_reward`. Without one, they are the curve's, with
  its parameter-noise interval (not calibrated: it ignores form error and run-to-run
  variation). `group` is the run's config group in the calibration set (None:
  `config_group` of its folder; '': none), whose other seeds the default predictor takes its
  offset from (without one, from its method's runs). Returns the report row (every field present, None where not computable,
  `error` set when the prefix could not be fitted) and the curve forecast for plotting.
  With a `law` and a known model size the row also carries zero-shot and law-refined
  forecasts.
  """
  bounded = bounded and metric_is_bounded(run.metric)
  ended = run.finished or run.steps[-1] >= run.total_steps * (1 - ACTUAL_FINAL_WINDOW)
  actual = run.actual_final if ended else None
  row: dict[str, Any] = {
      'run': run.name, 'model': run.model, 'method': run.method,
      'params': run.params_nonembed, 'r0': round(run.r0, 6), 'metric': run.metric,
      'metric_reason': run.metric_reason or 'chosen with --metric',
      'total_steps': run.total_steps, 'total_steps_source': run.length_source,
      'observe_fraction': observe_fraction,
      'observed_until_step': None, 'form': None,
      'predicted_final_reward': None, 'predicted_final_reward_ci': None,
      'interval_low': None, 'interval_high': None, 'interval_confidence': confidence,
      'interval_kind': None, 'calibration_set': None,
      'curve_final_reward': None, 'curve_final_reward_ci': None,
      'actual_final_reward': None if actual is None else round(actual, 6), 'abs_error': None,
      'actual_in_ci': None, 'predicted_plateau': None,
      'predicted_plateau_ci': None, 'predicted_plateau_step': None,
      'recommended_stop_step': None, 'error': None, 'notes': list(run.notes),
  }
  if actual is None:
    row['notes'].append(f'run still going (step {run.steps[-1]:.0f} of {run.total_steps}): '
                        'no actual final value to score against')
  prefix = None
  try:
    prefix = forecast(run.steps, run.values, run.total_steps, observe_fraction, forms=forms,
                      epsilon=epsilon, confidence=confidence, smoothing=smoothing,
                      bounded=bounded)
    row.update({
        'form': prefix.form, 'observed_until_step': prefix.observed_until_step,
        'curve_final_reward': round(prefix.predicted_final_reward, 6),
        'curve_final_reward_ci': _ci_list(prefix.final_reward_ci),
        'predicted_final_reward': round(prefix.predicted_final_reward, 6),
        'predicted_final_reward_ci': _ci_list(prefix.final_reward_ci),
        'interval_kind': 'curve parameter noise (uncalibrated)',
        'predicted_plateau': round(prefix.predicted_plateau, 6),
        'predicted_plateau_ci': _ci_list(prefix.plateau_ci),
        'predicted_plateau_step': round(prefix.predicted_plateau_step, 1),
        'recommended_stop_step': prefix.recommended_stop_step,
        'selection_method': prefix.selection_method,
    })
    row['notes'].extend(prefix.notes)
  except ValueError as error:
    row['error'] = str(error)
    if calibration is None:
      seen = run.values[run.steps <= observe_fraction * run.total_steps + 1e-9]
      if seen.size:
        row['predicted_final_reward'] = round(flat_level(seen), 6)
        row['interval_kind'] = 'none: too few points for a curve, flat level'
        row['notes'].append(f'no curve fitted ({error}); predicted_final_reward is the flat '
                            'level; pass --calibration for an interval')
        row['error'] = None
  if calibration is not None:
    try:
      group = config_group(run.run_dir) if group is None else group
      features = prefix_features(dataclasses.replace(run, name=run_key(run.run_dir)),
                                 observe_fraction, forms=forms, bounded=bounded, group=group)
      result = calibrated_forecast(features, calibration, predictor=predictor,
                                   confidence=confidence)
      row.update({
          'predicted_final_reward': round(result.predicted_final, 6),
          'predicted_final_reward_ci': _ci_list(result.interval),
          'interval_kind': f'jackknife (leave-one-out) over {result.n_calibration} runs',
          'observed_until_step': features.observed_until_step,
          'calibration_set': {'source': calibration.source, 'runs': result.n_calibration,
                              'config_group': group,
                              'config_group_runs': len({
                                  record.run for record in calibration.records
                                  if group and record.group == group
                                  and record.metric == features.metric
                                  and record.run != features.run}),
                              'config_scores_min': calibration.config_scores_min,
                              'description': result.calibration, 'predictor': predictor,
                              'half_width': (round(result.half_width, 6)
                                             if math.isfinite(result.half_width) else None)},
      })
      row['error'] = None
      if result.n_calibration < 9:
        row['notes'].append(f'only {result.n_calibration} calibration runs: too few for a '
                            f'finite {confidence:.0%} interval')
    except ValueError as error:
      row['error'] = str(error)
  if row['predicted_final_reward_ci'] is not None:
    row['interval_low'], row['interval_high'] = row['predicted_final_reward_ci']
  if actual is not None and row['predicted_final_reward'] is not None:
    row['abs_error'] = round(abs(row['predicted_final_reward'] - actual), 6)
    row['actual_in_ci'] = bool(row['interval_low'] <= actual <= row['interval_high'])
  if law is not None and run.params_nonembed is not None:
    prior = law.prior(run.params_nonembed, run.r0)
    zero_shot = forecast_zero_shot(prior, run.total_steps, epsilon=epsilon,
                                   confidence=confidence, bounded=bounded)
    row['zero_shot_final_reward'] = round(zero_shot.predicted_final_reward, 6)
    row['zero_shot_abs_error'] = (None if actual is None else
                                  round(abs(zero_shot.predicted_final_reward - actual), 6))
    row['zero_shot_plateau_step'] = round(zero_shot.predicted_plateau_step, 1)
    try:
      refined = forecast(run.steps, run.values, run.total_steps, observe_fraction,
                         epsilon=epsilon, confidence=confidence, smoothing=smoothing,
                         bounded=bounded, prior=prior)
      row['refined_final_reward'] = round(refined.predicted_final_reward, 6)
      row['refined_abs_error'] = (None if actual is None else
                                  round(abs(refined.predicted_final_reward - actual), 6))
    except ValueError as error:
      row['refined_final_reward'] = row['refined_abs_error'] = None
      row['notes'].append(f'law-refined forecast failed: {error}')
  return row, prefix


def plot_forecast(run: RunRecord, result: Forecast, path: str | Path) -> Path:
  """PNG: observed points, fit on them, forecast band, actual tail, stop step."""
  # deferred: matplotlib (slow to import, headless backend set first) only for a plot
  import matplotlib
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt

  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  seen = run.steps <= result.observed_until_step
  grid = np.linspace(0, run.total_steps, 300)
  curve, lower, upper = result.band(grid)
  fitted_part = grid <= result.observed_until_step
  figure, axes = plt.subplots(figsize=(7, 4.2))
  axes.scatter(run.steps[seen], run.values[seen], s=8, color='C0', label='observed (fitted)')
  axes.scatter(run.steps[~seen], run.values[~seen], s=8, color='0.6', label='actual tail')
  axes.plot(grid[fitted_part], curve[fitted_part], color='C1', label=f'{result.form} fit')
  axes.plot(grid[~fitted_part], curve[~fitted_part], color='C1', linestyle='--',
            label='forecast')
  axes.fill_between(grid, lower, upper, color='C1', alpha=0.2,
                    label=f'{result.confidence:.0%} CI of curve')
  axes.axhline(result.predicted_plateau, color='C2', linewidth=0.8, linestyle=':',
               label=f'plateau {result.predicted_plateau:.3f}')
  axes.axvline(result.recommended_stop_step, color='C3', linewidth=0.8,
               label=f'stop step {result.recommended_stop_step}')
  axes.axvline(result.observed_until_step, color='0.3', linewidth=0.6, linestyle='-.')
  axes.set_xlabel('step')
  axes.set_ylabel(run.metric)
  axes.set_title(f'{run.name} ({run.model})', fontsize=10)
  axes.legend(fontsize=7, loc='lower right')
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)
  return path


def fit_runs_for_joint_law(runs: Sequence[RunRecord], forms: Sequence[str] = DEFAULT_FORMS, *,
                           bounded: bool = True) -> tuple[str, list[TrajectoryFit | None]]:
  """Whole-run fits of one form, the form most runs select (ties: the simpler form);
  None for a run too short to fit."""
  selections = []
  for run in runs:
    try:
      selections.append(select_form(run.steps / run.total_steps, run.values, forms,
                                    bounded=bounded).fit)
    except ValueError:
      selections.append(None)
  votes = {name: sum(fit is not None and fit.form == name for fit in selections)
           for name in forms}
  form = max(forms, key=lambda name: (votes[name], -len(get_form(name).param_names)))
  fits = []
  for run, fit in zip(runs, selections):
    if fit is None or fit.form != form:
      try:
        fit = fit_trajectory(run.steps / run.total_steps, run.values, form, bounded=bounded)
      except ValueError:
        fit = None
    fits.append(fit)
  return form, fits


def evaluate_runs(runs: Sequence[RunRecord], observe_fraction: float, *,
                  forms: Sequence[str] = DEFAULT_FORMS, epsilon: float = 0.01,
                  confidence: float = 0.9, smoothing: int = 0, bounded: bool = True,
                  calibration: CalibrationSet | None = None,
                  predictor: str = DEFAULT_PREDICTOR, groups: Sequence[str | None] = (),
                  ) -> tuple[list[dict[str, Any]], list[Forecast | None], JointLaw | None]:
  """Report rows for every run; with >= 2 sized runs also zero-shot forecasts from the joint
  law, fitted leave-one-out when there are >= 3 sized runs (in-sample with 2). `groups`:
  each run's config group (see `evaluate_run`; default None for every run)."""
  if groups and len(groups) != len(runs):
    raise ValueError(f'{len(groups)} groups for {len(runs)} runs: give one per run or none')
  sized = [i for i, run in enumerate(runs) if run.params_nonembed is not None]
  law = None
  laws: dict[int, JointLaw] = {}
  if len(sized) >= 2:
    _, fits = fit_runs_for_joint_law([runs[i] for i in sized], forms, bounded=bounded)
    sized = [i for i, fit in zip(sized, fits) if fit is not None]
    fits = [fit for fit in fits if fit is not None]
    sizes = [runs[i].params_nonembed for i in sized]
  if len(sized) >= 2:
    law = fit_joint_law(sizes, fits)
    for position, index in enumerate(sized):
      if len(sized) >= 3:
        keep = [j for j in range(len(sized)) if j != position]
        with warnings.catch_warnings():
          warnings.simplefilter('ignore')
          laws[index] = fit_joint_law([sizes[j] for j in keep], [fits[j] for j in keep])
      else:
        laws[index] = law
  rows, forecasts = [], []
  for index, run in enumerate(runs):
    row, result = evaluate_run(run, observe_fraction, law=laws.get(index), forms=forms,
                               epsilon=epsilon, confidence=confidence, smoothing=smoothing,
                               bounded=bounded, calibration=calibration, predictor=predictor,
                               group=groups[index] if groups else None)
    if index in laws:
      row['zero_shot_mode'] = 'leave_one_out' if len(sized) >= 3 else 'in_sample'
    rows.append(row)
    forecasts.append(result)
  return rows, forecasts, law


def simulate_trajectory(form: str, params: dict[str, float], total_steps: int, *,
                        noise: float = 0.02, seed: int = 0,
                        bounded: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """(steps 1..total_steps, noisy rewards) from a known curve, for tests and dry runs."""
  spec = get_form(form)
  vector = np.array([params[name] for name in spec.param_names], dtype=float)
  steps = np.arange(1, total_steps + 1, dtype=float)
  rewards = spec.curve(steps / total_steps, vector)
  rewards = rewards + np.random.default_rng(seed).normal(0.0, noise, size=steps.size)
  return steps, np.clip(rewards, 0.0, 1.0) if bounded else rewards


def write_synthetic_run(run_dir: str | Path, form: str, params: dict[str, float],
                        total_steps: int, *, params_nonembed: float | None = None,
                        model_name: str = 'synthetic', noise: float = 0.02, seed: int = 0,
                        flops_per_step: float = 1e12, eval_every: int = 25) -> Path:
  """Writes metrics.jsonl + summary.json shaped like the trainer's output contract."""
  run_dir = Path(run_dir)
  run_dir.mkdir(parents=True, exist_ok=True)
  steps, rewards = simulate_trajectory(form, params, total_steps, noise=noise, seed=seed)
  spec = get_form(form)
  clean = spec.curve(steps / total_steps, np.array([params[n] for n in spec.param_names]))
  with (run_dir / 'metrics.jsonl').open('w') as handle:
    for step, reward, expected in zip(steps, rewards, clean):
      row = {'step': int(step), 'phase': 0, 'reward_mean': float(reward),
             'flops_total': float(step * flops_per_step)}
      if eval_every and int(step) % eval_every == 0:
        row['eval_accuracy'] = float(expected)
      handle.write(json.dumps(row) + '\n')
  summary = {'method': 'grpo', 'steps': total_steps, 'model_name': model_name,
             'params_nonembed': params_nonembed,
             'eval_accuracy_initial': float(params['r0']),
             'flops': {'total': float(total_steps * flops_per_step)}}
  (run_dir / 'summary.json').write_text(json.dumps(summary, indent=2))
  return run_dir


def calibration_from_runs(run_dirs: Sequence[str | Path], metric: str, observe_fraction: float,
                          *, forms: Sequence[str] = DEFAULT_FORMS) -> CalibrationSet:
  """A calibration set from finished run folders (unfinished ones are skipped)."""
  records = []
  for run_dir in run_dirs:
    if not (Path(run_dir) / 'summary.json').exists():
      continue
    run = load_run(run_dir, metric)
    run.name = run_key(run_dir)
    try:
      with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        records.append(prefix_features(run, observe_fraction, forms=forms))
    except ValueError:
      continue
  return CalibrationSet(records, f'{len(records)} finished runs given with --calibration')
