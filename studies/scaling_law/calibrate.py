"""Calibrated scaling-law forecasts, early stopping and trajectory forms, validated on many
finished runs (leave-one-run-out: no forecast is scored on a run it was fitted on).

    python -m studies.scaling_law.calibrate RUN_DIR [RUN_DIR ...] \
        [--observe-fraction 0.3] [--out studies/] [--write-calibration]

RUN_DIRs without summary.json (unfinished) are skipped. Regime, config group and seed group
of a run: see `sgpo_jax.scaling_law.calibration_set.regime_and_group`. Writes OUT/scaling_law_calibrated.{md,json} and plots
under OUT/plots/scaling_law_calibrated/; with --write-calibration also the calibration set
the CLI uses by default (sgpo_jax/scaling_law/calibration_runs.json.xz).

Per metric (held-out eval_accuracy; training reward: reward_mean for GRPO/DAPO,
reward_over_profile for curriculum sGPO), every run is forecast from its first 30% by each
predictor of `sgpo_jax.scaling_law.calibration`, fitted on the other runs, with a 90%
jackknife interval from the other runs' leave-one-out errors; the default predictor
also with its config group left out (scores leave-group-out too) and with its seed group
left out. The 'trend' early-stop rule (with its confirmation and peak-tolerance options) is
scored on every run for a grid of settings, and out of sample: for each config group (and
each seed group), the setting is chosen on the other groups and scored on the held-out one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from sgpo_jax.config import defaults as default_config
from sgpo_jax.scaling_law.calibration import (
  DEFAULT_PREDICTOR,
  PREDICTORS,
  CalibrationSet,
  calibrated_forecast,
  calibrated_forecasts,
  metric_is_bounded,
  prefix_features,
)
from sgpo_jax.scaling_law.calibration_set import (  # noqa: F401 (the studies use them as cal.*)
  KINDS,
  dump_trajectories,
  load_runs,
  load_trajectories,
  run_features,
)
from sgpo_jax.scaling_law.conformal import interval_contains
from sgpo_jax.scaling_law.early_stop import bound_stop_index, trend_stop_step
from sgpo_jax.scaling_law.runs import (
  RunRecord,
  load_run,
  run_key,
)
from sgpo_jax.scaling_law.trajectory import FORMS, fit_trajectory, select_form
from studies import compact_png

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path(__file__).resolve().parent / 'results'
CALIBRATION_PATH = KINDS['forecast'].shipped
STEM = 'scaling_law_calibrated'
CONFIDENCE = 0.9
# Fractions stored in the CLI's calibration set (a CLI forecast uses the nearest one).
CALIBRATION_FRACTIONS = KINDS['forecast'].fractions
# Early-stop targets of issue 18: saved >= 30% of steps, mean loss <= 1 point, worst <= 3.
TARGET_SAVED, TARGET_MEAN_LOSS, TARGET_MAX_LOSS = 0.30, 0.01, 0.03
TREND_GRID = [dict(min_fraction=m, window_fraction=w, epsilon=e, confirm_evals=k,
                   peak_tolerance=t)
              for m in (0.3, 0.4, 0.5, 0.6) for w in (0.3, 0.5) for e in (0.01, 0.02, 0.04)
              for k in (1, 2) for t in (None, 0.01, 0.02, 0.03, 0.05)]
# Rule 'bound' (early_stop.bound_stop_index): checkpoint fractions, confidence of the
# conformal upper bound, the loss bound delta and the peak guard.
BOUND_GRID = [dict(fractions=fractions, confidence=confidence, delta=delta, peak_tolerance=t)
              for fractions in ((0.4, 0.5, 0.6, 0.7), (0.5, 0.6, 0.7), (0.6, 0.7))
              for confidence in (0.8, 0.9) for delta in (0.01, 0.02, 0.03, 0.04)
              for t in (None, 0.01)]
BOUND_FRACTIONS = tuple(sorted({f for setting in BOUND_GRID for f in setting['fractions']}))
BOUND_CONFIDENCES = tuple(sorted({setting['confidence'] for setting in BOUND_GRID}))
# The relaxed guarantee a setting is also chosen for: mean loss <= 1 point and at most this
# share of runs losing more than 3 points.
TARGET_SHARE_OVER_MAX = 0.05
# Final-value windows compared in the definition check (fractions of the run's steps).
FINAL_WINDOWS = (0.05, 0.10)
# What the trainer uses by default (read from the config's train.early_stop, so the two
# cannot drift apart); scored in sample too.
DEFAULT_TREND = {key: default_config.get_config().train.early_stop[key]
                 for key in ('min_fraction', 'window_fraction', 'epsilon', 'confirm_evals',
                             'peak_tolerance')}
# Eval spacings (fractions of the run between readings) the default rule is also replayed
# at, on each run's readings thinned to that cadence: the README run evaluates every 25 of
# its 300 steps (1/12); the comparison runs every 5% past the first 20%.
CADENCES = (0.05, 1 / 12, 0.1)


def seed_number(name: str) -> int | None:
  """k of a run named `<config>_seed<k>`; None for a run without a seed."""
  seed = re.search(r'_seed(\d+)$', name)
  return int(seed.group(1)) if seed else None


def seed_range(names: Iterable[str]) -> str:
  """'0-4' (or '0-4, 7') for the seeds in run names `<config>_seed<k>`."""
  seeds = sorted({k for name in names if (k := seed_number(name)) is not None})
  spans: list[list[int]] = []
  for seed in seeds:
    if spans and seed == spans[-1][1] + 1:
      spans[-1][1] = seed
    else:
      spans.append([seed, seed])
  return ', '.join(f'{a}-{b}' if b > a else f'{a}' for a, b in spans) or 'none'


def reading_noise(run: RunRecord) -> float | None:
  """Per-reading noise sd of a run's metric, from second differences: with a locally
  straight trend, y_i - (y_(i-1) + y_(i+1))/2 has variance 1.5 sigma^2 (robust MAD)."""
  if run.values.size < 5:
    return None
  second = run.values[1:-1] - (run.values[:-2] + run.values[2:]) / 2
  mad = float(np.median(np.abs(second - np.median(second))))
  return 1.4826 * mad / np.sqrt(1.5)


def noise_floor(run: RunRecord) -> float | None:
  """sigma·sqrt(2/pi)/sqrt(k) = E|mean of k N(0, sigma^2)|, k the readings in the final
  window: what even a forecaster that knew the smooth trend would miss the final value by,
  from the readings' own noise (independent readings assumed: a lower bound when the last
  readings are a few steps apart)."""
  sigma = reading_noise(run)
  if sigma is None:
    return None
  return sigma * np.sqrt(2 / np.pi) / np.sqrt(max(int(run.final_readings.size), 1))


def above_late_level(run: RunRecord) -> float | None:
  """final - mean of the readings from 50% of the run to the final window (None: no such
  readings)."""
  # The final window's first reading (RunRecord.final_readings' window, read where it is set).
  start = run.steps[run.steps.size - run.final_readings.size]
  late = (run.steps >= 0.5 * run.total_steps) & (run.steps < start)
  if not late.any():
    return None
  return run.actual_final - float(np.mean(run.values[late]))


def oracle_error(run: RunRecord) -> float | None:
  """|final - the run's late level| (`above_late_level`): the error of a forecaster that knew
  the run's own late level (it saw 60% more of the run than a forecast from 30% does). What
  is left is the final value's own scatter (and any late drift)."""
  above = above_late_level(run)
  return None if above is None else abs(above)


def forecast_table(runs: list[dict[str, Any]], key: str, fraction: float,
                   features: dict[tuple[str, str, float], Any]) -> list[dict[str, Any]]:
  """Leave-one-run-out forecasts of every predictor for every run with metric `key`."""
  records = [features[(run['name'], key, fraction)] for run in runs
             if (run['name'], key, fraction) in features]
  calibration = CalibrationSet(records, 'validation runs')
  seed_groups = {run['name']: run['seed_group'] for run in runs}
  by_seed = CalibrationSet([dataclasses.replace(record, group=seed_groups[record.run])
                            for record in records], calibration.source)
  rows = []
  for run, record in ((run, features[(run['name'], key, fraction)]) for run in runs
                      if (run['name'], key, fraction) in features):
    source = run['eval'] if key == 'eval' else run['reward']
    row = {'run': record.run, 'regime': run['regime'], 'group': run['group'],
           'noise_floor': noise_floor(source),
           'metric': record.metric, 'method': record.method, 'total_steps': record.total_steps,
           'flat': record.flat, 'curve': record.curve, 'form': record.form,
           'actual': record.actual}
    for name in PREDICTORS:  # only the run itself is left out
      result = calibrated_forecast(record, calibration, predictor=name, confidence=CONFIDENCE)
      row[f'{name}_pred'] = result.predicted_final
      row[f'{name}_err'] = abs(result.predicted_final - record.actual)
      row[f'{name}_interval'] = list(result.interval)
      row[f'{name}_covered'] = interval_contains(result.interval, record.actual)
      row[f'{name}_n_cal'] = result.n_calibration
    # Stricter: every seed of the run's config group left out of its calibration set.
    held = calibrated_forecast(record, calibration, predictor=DEFAULT_PREDICTOR,
                               confidence=CONFIDENCE, leave_out_group=True)
    row['group_out_err'] = abs(held.predicted_final - record.actual)
    row['group_out_covered'] = interval_contains(held.interval, record.actual)
    # Seed group out: every run of the run's regime with its seed (arms sharing its start),
    # its conformal scores seed-group-out too (the groups relabelled by seed).
    held = calibrated_forecast(dataclasses.replace(record, group=run['seed_group']),
                               by_seed, predictor=DEFAULT_PREDICTOR, confidence=CONFIDENCE,
                               leave_out_group=True)
    row['seed_out_err'] = abs(held.predicted_final - record.actual)
    row['seed_out_covered'] = interval_contains(held.interval, record.actual)
    row['oracle_err'] = oracle_error(source)
    rows.append(row)
  return rows


def transfer_table(run_dirs: list[Path], fraction: float,
                   features: dict[tuple[str, str, float], Any]) -> list[dict[str, Any]]:
  """Eval forecasts of finished `run_dirs` from the validation runs' features only (flat
  and the default predictor), each run's regime from its config.json (as in the CLI)."""
  calibration = CalibrationSet([record for (_, key, at), record in features.items()
                                if key == 'eval' and at == fraction], 'validation runs')
  rows = []
  for run_dir in run_dirs:
    if not (run_dir / 'summary.json').exists():
      continue
    run = load_run(run_dir, 'eval_accuracy')
    # Named with the folder above too: a retuned sweep reuses the old runs' names.
    run.name = f'{run_dir.resolve().parent.parent.name}/{run_key(run_dir)}'
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      record = prefix_features(run, fraction)
    result = calibrated_forecast(record, calibration, confidence=CONFIDENCE)
    rows.append({'run': record.run, 'regime': record.regime, 'initial': record.initial,
                 'flat': record.flat, 'predicted': result.predicted_final,
                 'interval': list(result.interval), 'actual': record.actual,
                 'flat_err': abs(record.flat - record.actual),
                 'err': abs(result.predicted_final - record.actual),
                 'covered': interval_contains(result.interval, record.actual),
                 'calibration': result.calibration})
  return rows


def final_value(run: RunRecord, window: float) -> float:
  """Mean of the readings in the last `window` of the run's steps."""
  start = run.steps[-1] - window * run.total_steps
  return float(np.mean(run.values[run.steps >= start]))


def definition_check(runs: list[dict[str, Any]], fraction: float,
                     features: dict[tuple[str, str, float], Any]) -> list[dict[str, Any]]:
  """Eval forecasts (flat and the default predictor, leave-one-run-out) scored against the
  final value over each window of FINAL_WINDOWS, with how many readings each window holds."""
  out = []
  members = [run for run in runs if (run['name'], 'eval', fraction) in features]
  for window in FINAL_WINDOWS:
    finals = {run['name']: final_value(run['eval'], window) for run in members}
    counts = [int(np.sum(run['eval'].steps >= run['eval'].steps[-1]
                         - window * run['eval'].total_steps)) for run in members]
    records = [dataclasses.replace(features[(run['name'], 'eval', fraction)],
                                   actual=finals[run['name']]) for run in members]
    calibration = CalibrationSet(records, 'validation runs')
    errors = {'flat': [], DEFAULT_PREDICTOR: []}
    covered = []
    for record in records:
      for name in errors:
        result = calibrated_forecast(record, calibration, predictor=name,
                                     confidence=CONFIDENCE)
        errors[name].append(abs(result.predicted_final - record.actual))
        if name == DEFAULT_PREDICTOR:
          covered.append(interval_contains(result.interval, record.actual))
    out.append({'window': window, 'n': len(records), 'readings_min': min(counts),
                'readings_max': max(counts),
                'runs_with_one_reading': sum(count == 1 for count in counts),
                'flat_mae': float(np.mean(errors['flat'])),
                'pred_mae': float(np.mean(errors[DEFAULT_PREDICTOR])),
                'pred_coverage': float(np.mean(covered))})
  return out


def stop_outcome(run: RunRecord, setting: dict[str, float],
                 readings: RunRecord | None = None) -> dict[str, Any]:
  """The rule replayed on `readings` (default: the run's own evals), scored against the
  run's actual final value (from all its readings)."""
  seen = run if readings is None else readings
  stop = trend_stop_step(seen.steps, seen.values, seen.total_steps, **setting)
  if stop is None:
    return {'stop_step': None, 'saved': 0.0, 'loss': 0.0}
  at_stop = float(seen.values[seen.steps == stop][-1])
  return {'stop_step': stop, 'saved': 1 - stop / run.total_steps,
          'loss': run.actual_final - at_stop}


def bound_checkpoints(evals: list[dict[str, Any]], leave_out: str = ''
                      ) -> list[dict[float, dict[str, Any]]]:
  """Per run and BOUND_FRACTIONS fraction f: the last reading at or before f of the run, the
  best reading so far and, per BOUND_CONFIDENCES, the upper end of the calibrated interval
  of the final value forecast from that prefix (pooled predictor and conformal scores from
  the other runs' prefixes at f; never the run itself, and with `leave_out` 'group' or
  'seed_group' no run of its config or of its regime and seed either)."""
  if leave_out not in ('', 'group', 'seed_group'):
    raise ValueError(f"leave_out={leave_out!r}: use '', 'group' or 'seed_group'")
  features = {f: [prefix_features(run['eval'], f, forms=(), group=run[leave_out or 'group'],
                                  regime=run['regime']) for run in evals]
              for f in BOUND_FRACTIONS}
  leave_out_group = bool(leave_out)
  sets = {f: CalibrationSet(records, 'validation runs') for f, records in features.items()}
  points = []
  for i, run in enumerate(evals):
    record, row = run['eval'], {}
    for f in BOUND_FRACTIONS:
      row[f] = checkpoint(record, features[f][i], sets[f], BOUND_CONFIDENCES, leave_out_group)
    points.append(row)
  return points


def checkpoint(record: RunRecord, target: Any, pool: CalibrationSet,
               confidences: tuple[float, ...], leave_out_group: bool = False
               ) -> dict[str, Any]:
  """One checkpoint of rule 'bound': the step and reading the prefix `target` ends at, the best
  reading after step 0 so far, and the upper end of the calibrated interval of the final value
  per confidence (forecast from `pool`)."""
  seen = record.steps <= target.observed_until_step + 1e-9
  trained = seen & (record.steps > 0)
  return {'step': target.observed_until_step, 'reading': float(record.values[seen][-1]),
          'best': float(np.max(record.values[trained])) if trained.any()
          else float(record.values[seen][-1]),
          'upper': {result.confidence: result.interval[1] for result in
                    calibrated_forecasts(target, pool, confidences=confidences,
                                         leave_out_group=leave_out_group)}}


def bound_outcome(run: RunRecord, points: dict[float, dict[str, Any]],
                  setting: dict[str, Any]) -> dict[str, Any]:
  """Rule 'bound' with `setting` on one run's checkpoints, scored as `stop_outcome`."""
  rows = [points[f] for f in setting['fractions']]
  index = bound_stop_index([r['reading'] for r in rows],
                           [r['upper'][setting['confidence']] for r in rows],
                           delta=setting['delta'], bests=[r['best'] for r in rows],
                           peak_tolerance=setting['peak_tolerance'])
  if index is None:
    return {'stop_step': None, 'saved': 0.0, 'loss': 0.0}
  stop = rows[index]
  return {'stop_step': stop['step'], 'saved': 1 - stop['step'] / run.total_steps,
          'loss': run.actual_final - stop['reading']}


def bound_study(evals: list[dict[str, Any]]) -> dict[str, Any]:
  """Rule 'bound' on every run for BOUND_GRID (leave-one-run-out forecasts), and out of
  sample as for 'trend': the setting chosen on the other config groups or seed groups, and
  scored on the held-out one, with forecasts that leave the same group out."""
  grids = {}
  for leave_out in ('', 'group', 'seed_group'):
    points = bound_checkpoints(evals, leave_out)
    grids[leave_out] = [
        {'setting': setting, 'outcomes': [bound_outcome(run['eval'], row, setting)
                                          for run, row in zip(evals, points)]}
        for setting in BOUND_GRID]
    for entry in grids[leave_out]:
      entry.update(summarise_stops(entry['outcomes']))
  held_out = choose_out_of_sample(evals, grids['group'], meets)
  held_out_seed = choose_out_of_sample(evals, grids['seed_group'], meets, key='seed_group')
  relaxed = {key: choose_out_of_sample(evals, grids[key], meets_relaxed, key=key)
             for key in ('group', 'seed_group')}
  def jsonable(setting):
    return {**setting, 'fractions': list(setting['fractions'])}
  def clean(rows):
    return [{**row, 'setting': jsonable(row['setting']) if row['setting'] else None}
            for row in rows]
  return {'grid': [{**{k: v for k, v in entry.items() if k != 'outcomes'},
                    'setting': jsonable(entry['setting'])} for entry in grids['']],
          'held_out': clean(held_out), 'held_out_summary': summarise_stops(held_out),
          'held_out_seed': clean(held_out_seed),
          'held_out_seed_summary': summarise_stops(held_out_seed),
          'held_out_relaxed': {key: clean(rows) for key, rows in relaxed.items()},
          'held_out_relaxed_summary': {key: summarise_stops(rows)
                                       for key, rows in relaxed.items() if rows}}


def thin_readings(run: RunRecord, spacing: float) -> RunRecord:
  """The run as if it had been evaluated every `spacing` of its steps: its first reading,
  then at each multiple of spacing·total_steps the first reading at or after it (each reading
  used once), as a trainer with `eval.every_steps` = spacing·total_steps would log them."""
  if not 0 < spacing < 1:
    raise ValueError(f'spacing={spacing} must be a fraction of the run in (0, 1)')
  keep = [0]
  for k in range(1, int(np.floor(1 / spacing + 1e-9)) + 1):
    after = np.flatnonzero(run.steps >= k * spacing * run.total_steps - 1e-9)
    if after.size and after[0] > keep[-1]:
      keep.append(int(after[0]))
  idx = np.array(keep)
  return dataclasses.replace(run, steps=run.steps[idx], values=run.values[idx],
                             flops_total=run.flops_total[idx])


def cadence_study(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The default setting replayed at each of CADENCES (readings thinned), on every run."""
  rows = []
  for spacing in CADENCES:
    outcomes = []
    for run in evals:
      thinned = thin_readings(run['eval'], spacing)
      outcomes.append(dict(stop_outcome(run['eval'], DEFAULT_TREND, thinned),
                           run=run['name'], readings=int(thinned.steps.size)))
    summary = summarise_stops(outcomes)
    rows.append({'spacing': spacing, **summary,
                 'readings_min': min(o['readings'] for o in outcomes),
                 'readings_max': max(o['readings'] for o in outcomes),
                 'meets': meets(summary) and summary['saved_mean'] >= TARGET_SAVED,
                 'outcomes': outcomes})
  return rows


def summarise_stops(outcomes: list[dict[str, Any]]) -> dict[str, float]:
  losses = np.array([o['loss'] for o in outcomes])
  return {'n': len(outcomes), 'saved_mean': float(np.mean([o['saved'] for o in outcomes])),
          'loss_mean': float(np.mean(losses)), 'loss_max': float(np.max(losses)),
          'share_over_max': float(np.mean(losses > TARGET_MAX_LOSS + 1e-12)),
          'stopped': sum(o['stop_step'] is not None for o in outcomes)}


def meets_relaxed(summary: dict[str, float]) -> bool:
  return (summary['loss_mean'] <= TARGET_MEAN_LOSS
          and summary['share_over_max'] <= TARGET_SHARE_OVER_MAX)


def meets(summary: dict[str, float]) -> bool:
  return (summary['loss_mean'] <= TARGET_MEAN_LOSS and summary['loss_max'] <= TARGET_MAX_LOSS)


def choose_out_of_sample(evals: list[dict[str, Any]], grid: list[dict[str, Any]],
                         accept, key: str = 'group') -> list[dict[str, Any]]:
  """For each group (`key`: config group or seed group): the grid setting that saves most on
  the other groups among those `accept` admits there (none: never stop), scored on the
  held-out group (its outcome in the grid entry: `outcomes[i]` is evals[i]'s)."""
  held_out = []
  for group in sorted({run[key] for run in evals}):
    inside = [i for i, run in enumerate(evals) if run[key] != group]
    best = None
    for entry in grid:
      summary = summarise_stops([entry['outcomes'][i] for i in inside])
      if accept(summary) and (best is None or summary['saved_mean'] > best[1]):
        best = (entry, summary['saved_mean'])
    for i, run in enumerate(evals):
      if run[key] == group:
        outcome = (best[0]['outcomes'][i] if best is not None
                   else {'stop_step': None, 'saved': 0.0, 'loss': 0.0})
        held_out.append({'run': run['name'], 'regime': run['regime'], 'group': group,
                         'setting': best[0]['setting'] if best else None, **outcome})
  return held_out


def trend_grid(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Rule 'trend' replayed on each run's eval readings and actual length (`stop_outcome`),
  for every setting of TREND_GRID: the setting, its summary and its per-run outcomes."""
  grid = []
  for setting in TREND_GRID:
    outcomes = [stop_outcome(run['eval'], setting) for run in runs]
    grid.append({'setting': setting, **summarise_stops(outcomes), 'outcomes': outcomes})
  return grid


def early_stop_study(runs: list[dict[str, Any]]) -> dict[str, Any]:
  evals = [run for run in runs if 'eval' in run and run['eval'].steps.size >= 4]
  grid = trend_grid(evals)
  held_out = choose_out_of_sample(evals, grid, meets)
  held_out_seed = choose_out_of_sample(evals, grid, meets, key='seed_group')
  # Oracle: the best checkpoint among the evals that save >= 30% of the run, per run.
  oracle = []
  for run in evals:
    record = run['eval']
    early = (record.steps > 0) & (record.steps <= (1 - TARGET_SAVED) * record.total_steps)
    if early.any():
      oracle.append(record.actual_final - float(np.max(record.values[early])))
  held_out_mean = choose_out_of_sample(
      evals, grid, lambda summary: summary['loss_mean'] <= TARGET_MEAN_LOSS)
  # Reference: a stop that kept a checkpoint exactly at the run's late level.
  late = [value for value in (above_late_level(run['eval']) for run in evals)
          if value is not None]
  relaxed = {key: choose_out_of_sample(evals, grid, meets_relaxed, key=key)
             for key in ('group', 'seed_group')}
  default_outcomes = [dict(stop_outcome(run['eval'], DEFAULT_TREND), run=run['name'],
                           regime=run['regime']) for run in evals]
  sigmas = [sigma for sigma in (reading_noise(run['eval']) for run in evals) if sigma is not None]
  # With no true loss at all, final - reading at stop is the difference of two noisy
  # readings (sd sigma·sqrt 2); its largest value over n runs is about that sd times the
  # normal quantile at n/(n + 1).
  from statistics import NormalDist
  sigma = float(np.median(sigmas)) if sigmas else float('nan')
  noise_worst = sigma * np.sqrt(2) * NormalDist().inv_cdf(len(evals) / (len(evals) + 1))
  return {'grid': [{k: v for k, v in entry.items() if k != 'outcomes'} for entry in grid],
          'held_out': held_out, 'held_out_summary': summarise_stops(held_out) if held_out else {},
          'held_out_seed': held_out_seed,
          'held_out_seed_summary': summarise_stops(held_out_seed) if held_out_seed else {},
          'oracle_worst_loss': float(np.max(oracle)) if oracle else None,
          'oracle_mean_loss': float(np.mean(oracle)) if oracle else None,
          'late_level_share_over_max': float(np.mean(np.array(late) > TARGET_MAX_LOSS)),
          'late_level_worst': float(np.max(late)),
          'held_out_relaxed': relaxed,
          'held_out_relaxed_summary': {key: summarise_stops(rows) for key, rows in
                                       relaxed.items() if rows},
          'held_out_mean_only': held_out_mean,
          'held_out_mean_only_summary': summarise_stops(held_out_mean) if held_out_mean else {},
          'default': DEFAULT_TREND, 'default_outcomes': default_outcomes,
          'cadences': cadence_study(evals),
          'default_summary': summarise_stops(default_outcomes) if default_outcomes else {},
          'reading_noise_median': sigma, 'noise_worst_loss': float(noise_worst),
          'bound': bound_study(evals)}


def form_study(runs: list[dict[str, Any]], plots: Path) -> list[dict[str, Any]]:
  """Whole-run AICc of each form and holdout error (fit the first 70%, score the last 30%)."""
  rows = []
  for run in runs:
    for key in ('eval', 'reward'):
      record: RunRecord | None = run.get(key)
      if record is None or record.steps.size < 8:
        continue
      t = record.steps / record.total_steps
      bounded = metric_is_bounded(record.metric)
      row = {'run': run['name'], 'regime': run['regime'], 'metric': record.metric}
      for form in FORMS:
        try:
          with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            row[f'{form}_aicc'] = fit_trajectory(t, record.values, form,
                                                 bounded=bounded).aic
        except ValueError:
          row[f'{form}_aicc'] = None
      try:
        selection = select_form(t, record.values, tuple(FORMS), bounded=bounded)
        row['holdout_scores'] = selection.scores
        row['holdout_winner'] = (min(selection.scores, key=selection.scores.get)
                                 if selection.method == 'holdout' else None)
      except ValueError:
        row['holdout_winner'] = None
      finite = {form: row[f'{form}_aicc'] for form in FORMS
                if row.get(f'{form}_aicc') is not None and np.isfinite(row[f'{form}_aicc'])}
      row['aicc_winner'] = min(finite, key=finite.get) if finite else None
      rows.append(row)
  plot_forms(runs, plots)
  return rows


def form_plot_name(regime: str, metric: str) -> str:
  return f'forms_{regime.replace("/", "_")}_{metric}.png'


def plot_forms(runs: list[dict[str, Any]], plots: Path) -> None:
  import matplotlib
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt

  plots.mkdir(parents=True, exist_ok=True)
  regimes = sorted({run['regime'] for run in runs})
  records = [(run['regime'], run[key]) for run in runs for key in ('eval', 'reward') if key in run]
  for metric in sorted({record.metric for _, record in records}):
    for regime in regimes:
      members = [record for where, record in records
                 if where == regime and record.metric == metric]
      if not members:
        continue
      figure, axes = plt.subplots(figsize=(7, 4.2))
      for i, record in enumerate(members):
        axes.plot(record.steps, record.values, color='0.7', linewidth=0.8,
                  label='runs' if i == 0 else None)
      # Pool every run on normalised progress and fit each form to the pooled points.
      t = np.concatenate([r.steps / r.total_steps for r in members])
      y = np.concatenate([r.values for r in members])
      grid = np.linspace(0, 1, 200)
      span = float(np.median([r.total_steps for r in members]))
      for j, form in enumerate(FORMS):
        try:
          with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            fit = fit_trajectory(t, y, form, bounded=metric_is_bounded(members[0].metric))
          axes.plot(grid * span, fit.predict(grid), color=f'C{j}',
                    label=f'{form} (pooled fit, AICc {fit.aic:.0f})')
        except ValueError:
          pass
      axes.set_xlabel('step')
      axes.set_ylabel(members[0].metric)
      axes.set_title(f'{regime}: {len(members)} runs, {metric}', fontsize=10)
      axes.legend(fontsize=7, loc='best')
      figure.tight_layout()
      compact_png.save(figure, str(plots / form_plot_name(regime, metric)), dpi=100)
      plt.close(figure)


def pareto_front(grid: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The grid entries with mean loss within target that no other such entry beats on both
  steps saved and worst loss, by worst loss."""
  admitted = [entry for entry in grid if entry['loss_mean'] <= TARGET_MEAN_LOSS]
  front = [entry for entry in admitted
           if not any(other['saved_mean'] >= entry['saved_mean']
                      and other['loss_max'] <= entry['loss_max']
                      and (other['saved_mean'], -other['loss_max'])
                      != (entry['saved_mean'], -entry['loss_max']) for other in admitted)]
  return sorted(front, key=lambda entry: entry['loss_max'])


def _stop_line(label: str, s: dict[str, Any]) -> str:
  return (f"- {label}: stopped {s['stopped']}/{s['n']}, saved {s['saved_mean']:.1%} of steps, "
          f"mean loss {s['loss_mean'] * 100:.2f} points, {s['share_over_max']:.1%} of runs lose "
          f"> {TARGET_MAX_LOSS * 100:.0f} points, worst {s['loss_max'] * 100:.2f} points.")


def bound_report(bound: dict[str, Any], trend: dict[str, Any]) -> list[str]:
  """The report's section on rule 'bound', next to the 'trend' rule's numbers."""
  lines = ['', '## Early stopping on a calibrated bound (rule `bound`, replay only)', '',
           'Rule: at each checkpoint fraction of the run (`fractions`), forecast the final '
           'value from the prefix with the pooled predictor and its conformal interval at '
           '`confidence`, fitted on the other runs\' prefixes at the same fraction; stop at the '
           'first checkpoint whose upper bound is at most `delta` above the reading there '
           '(with `peak_tolerance`, also no more than that below the best reading so far). '
           'The forecaster knows how the other runs of the regime (and the other seeds of the '
           'config) moved after that point, which a run\'s own trend cannot. Out of sample as '
           'for `trend`, with forecasts that leave the held-out group out too. '
           'Same losses, targets and runs as above.', '']
  for label, name in (('config groups', 'held_out_summary'),
                      ('seed groups', 'held_out_seed_summary')):
    if bound.get(name):
      lines.append(_stop_line(f'Out of sample (setting chosen on the other {label}, the loss '
                              'targets met there)', bound[name]))
  for label, key in (('config groups', 'group'), ('seed groups', 'seed_group')):
    s = bound['held_out_relaxed_summary'].get(key)
    if s:
      lines.append(_stop_line(f'Out of sample (setting chosen on the other {label} for mean '
                              f'loss <= {TARGET_MEAN_LOSS * 100:.0f} point and at most '
                              f'{TARGET_SHARE_OVER_MAX:.0%} of runs losing > '
                              f'{TARGET_MAX_LOSS * 100:.0f} points there)', s))
  best_trend = [entry for entry in pareto_front(trend['grid'])
                if entry['saved_mean'] >= TARGET_SAVED]
  best_bound = [entry for entry in pareto_front(bound['grid'])
                if entry['saved_mean'] >= TARGET_SAVED]
  if best_trend and best_bound:
    lines.append(f"- In sample, the least worst loss at >= {TARGET_SAVED:.0%} of steps saved: "
                 f"`bound` {best_bound[0]['loss_max'] * 100:.2f} points "
                 f"({best_bound[0]['saved_mean']:.1%} saved), `trend` "
                 f"{best_trend[0]['loss_max'] * 100:.2f} points "
                 f"({best_trend[0]['saved_mean']:.1%} saved).")
  lines += ['', f"In sample, every run: the `bound` settings of the {len(bound['grid'])}-setting "
            'grid that no other beats on both steps saved and worst loss (leave-one-run-out '
            'forecasts; mean loss <= 1 point):', '',
            '| fractions | confidence | delta | peak_tolerance | stopped | saved | mean loss (pt) '
            '| runs losing > 3 pt | worst loss (pt) | meets loss targets |',
            '|---|---|---|---|---|---|---|---|---|---|']
  for entry in pareto_front(bound['grid']):
    setting = entry['setting']
    lines.append(f"| {', '.join(f'{f:g}' for f in setting['fractions'])} | "
                 f"{setting['confidence']} | {setting['delta']} | "
                 f"{_fmt(setting['peak_tolerance'])} | {entry['stopped']}/{entry['n']} | "
                 f"{entry['saved_mean']:.1%} | {entry['loss_mean'] * 100:.2f} | "
                 f"{entry['share_over_max']:.1%} | {entry['loss_max'] * 100:.2f} | "
                 f"{_fmt(meets(entry))} |")
  return lines


def _fmt(value: Any, digits: int = 3) -> str:
  if value is None:
    return '—'
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, float):
    return f'{value:.{digits}f}'
  if isinstance(value, (list, tuple)):
    return '–'.join(_fmt(float(v), digits) for v in value)
  return str(value)


def forecast_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
  out = {'n': len(rows)}
  for name in PREDICTORS:
    out[f'{name}_mae'] = float(np.mean([row[f'{name}_err'] for row in rows]))
    out[f'{name}_coverage'] = float(np.mean([row[f'{name}_covered'] for row in rows]))
  out['group_out_mae'] = float(np.mean([row['group_out_err'] for row in rows]))
  out['seed_out_mae'] = float(np.mean([row['seed_out_err'] for row in rows]))
  out['seed_out_coverage'] = float(np.mean([row['seed_out_covered'] for row in rows]))
  oracle = [row['oracle_err'] for row in rows if row['oracle_err'] is not None]
  out['oracle_mae'] = float(np.mean(oracle)) if oracle else None
  floors = [row['noise_floor'] for row in rows if row['noise_floor'] is not None]
  out['noise_floor'] = float(np.mean(floors)) if floors else None
  out['group_out_coverage'] = float(np.mean([row['group_out_covered'] for row in rows]))
  return out


def write_report(result: dict[str, Any], out: Path, stem: str = STEM) -> Path:
  lines = [
      '# Calibrated scaling-law forecasts and early stopping (validation runs)', '',
      f"Generated by `studies/scaling_law/calibrate.py` from {result['n_runs']} finished "
      f"runs ({result['regimes_text']}). Forecasts see the first "
      f"{result['observe_fraction']:.0%} of the steps each run actually took. Every forecast "
      'is leave-one-run-out: the predictor and its conformal interval are fitted on the other '
      'runs only; "group out" leaves out every seed of the run\'s config; "seed out" every '
      'run of its regime with its seed (the comparison arms of one seed share their start and '
      'their curve until they diverge); their conformal scores leave the same groups out. '
      'Actual final = mean over the last 5% of the run (see '
      'the definition check below). Flat = mean of the last third of the observed points '
      '("stays where it is"). Noise floor = mean over runs of sigma·sqrt(2/pi)/sqrt(k), sigma '
      "the run's per-reading noise from second differences of its curve (a robust estimate: it "
      'ignores the rare deep dips), k the readings in the final window (taken as independent). '
      'Late-level oracle = mean |final - mean of the readings '
      "from 50% of the run to the final window|: the error of a forecaster that already knew "
      "the run's own late level, i.e. the scatter of the final value itself.", '',
      '## Forecast of the final value from the first '
      f"{result['observe_fraction']:.0%}", '',
      f'Mean |error| per predictor, and how often the nominal {CONFIDENCE:.0%} conformal '
      'interval held the actual final value. Targets: mean |error| <= 0.03 and <= half the '
      'flat baseline; coverage 85-95%.', '',
      '| metric | runs | n | ' + ' | '.join(f'{p} |err|' for p in PREDICTORS)
      + ' | ' + ' | '.join(f'{p} cover' for p in PREDICTORS) + ' | group-out |err| '
      f'({DEFAULT_PREDICTOR}) | group-out cover | seed-out |err| | seed-out cover | '
      'noise floor | late-level oracle |',
      '|' + '---|' * (3 + 2 * len(PREDICTORS) + 6),
  ]
  for (metric, label), summary in result['forecast_summaries'].items():
    lines.append(f'| {metric} | {label} | {summary["n"]} | '
                 + ' | '.join(_fmt(summary[f'{p}_mae']) for p in PREDICTORS) + ' | '
                 + ' | '.join(_fmt(summary[f'{p}_coverage'], 2) for p in PREDICTORS) + ' | '
                 + f"{_fmt(summary['group_out_mae'])} | {_fmt(summary['group_out_coverage'], 2)} | "
                 + f"{_fmt(summary['seed_out_mae'])} | {_fmt(summary['seed_out_coverage'], 2)} | "
                 + f"{_fmt(summary['noise_floor'])} | {_fmt(summary['oracle_mae'])} |")
  if result['transfer']:
    rows = result['transfer']
    lines += ['', '## Runs of a retuned regime (transfer, eval_accuracy)', '',
              f"{len(rows)} finished runs given with `--transfer`, forecast from the validation "
              'runs above only (none of them calibrates anything), their regime read from '
              f"config.json as the CLI does. Mean |error|: flat {np.mean([r['flat_err'] for r in rows]):.3f}, "
              f"`{DEFAULT_PREDICTOR}` {np.mean([r['err'] for r in rows]):.3f}; the "
              f"{CONFIDENCE:.0%} interval held {sum(r['covered'] for r in rows)}/{len(rows)}.", '',
              '| run | regime (config) | first reading | flat | predicted | interval | actual | '
              '|err| | calibrated on |', '|---|---|---|---|---|---|---|---|---|']
    for row in rows:
      lines.append(f"| {row['run']} | {row['regime']} | {_fmt(row['initial'])} | "
                   f"{_fmt(row['flat'])} | {_fmt(row['predicted'])} | {_fmt(row['interval'])} | "
                   f"{_fmt(row['actual'])} | {_fmt(row['err'])} | {row['calibration']} |")
  lines += ['', '## Definition of "final" (eval_accuracy)', '',
            'The final value is the mean of the readings in the last 5% of the run; how many '
            'readings that window holds depends on the run\'s eval cadence (counted below). '
            'The 5% and 10% windows are both scored here (flat and '
            f'`{DEFAULT_PREDICTOR}`, leave-one-run-out).', '',
            '| final window | runs | readings in window (min-max) | runs with one reading | '
            f'flat |err| | {DEFAULT_PREDICTOR} |err| | {DEFAULT_PREDICTOR} cover |',
            '|---|---|---|---|---|---|---|']
  for entry in result['definition_check']:
    lines.append(f"| last {entry['window']:.0%} | {entry['n']} | {entry['readings_min']}-"
                 f"{entry['readings_max']} | {entry['runs_with_one_reading']} | "
                 f"{_fmt(entry['flat_mae'])} | {_fmt(entry['pred_mae'])} | "
                 f"{_fmt(entry['pred_coverage'], 2)} |")
  lines += ['', f'Per run (predictor `{DEFAULT_PREDICTOR}`, the CLI default):', '',
            '| run | regime | metric | steps | flat | curve (form) | predicted | '
            f'{CONFIDENCE:.0%} interval | actual | |err| | inside |', '|' + '---|' * 11]
  for row in result['forecast_rows']:
    curve = '—' if row['curve'] is None else f"{row['curve']:.3f} ({row['form']})"
    lines.append(
        f"| {row['run']} | {row['regime']} | {row['metric']} | {row['total_steps']} | "
        f"{_fmt(row['flat'])} | {curve} | {_fmt(row[f'{DEFAULT_PREDICTOR}_pred'])} | "
        f"{_fmt(row[f'{DEFAULT_PREDICTOR}_interval'])} | {_fmt(row['actual'])} | "
        f"{_fmt(row[f'{DEFAULT_PREDICTOR}_err'])} | {_fmt(row[f'{DEFAULT_PREDICTOR}_covered'])} |")
  stop = result['early_stop']
  lines += ['', '## Early stopping on held-out accuracy (rule `trend`)', '',
            'Loss = actual final accuracy minus the eval accuracy at the stop step (what a '
            'user keeps); saved = fraction of the run\'s steps not taken. Targets: saved >= '
            f'{TARGET_SAVED:.0%}, mean loss <= {TARGET_MEAN_LOSS * 100:.0f} point, worst <= '
            f'{TARGET_MAX_LOSS * 100:.0f} points.', '']
  lines += ['Rule: at each eval after `min_fraction` of the run, a line through the evals of '
            'the last `window_fraction` gains less than `epsilon` by the end (flat); stop once '
            'it has been flat at `confirm_evals` evals in a row and, with `peak_tolerance`, '
            'only at an eval no more than that below the best eval so far. Each held-out line '
            'chooses, for every group, the grid setting that saves most on the other groups '
            'among those meeting a criterion there, and scores it on the held-out group.', '']
  for label, name in (('config groups', 'held_out_summary'),
                      ('seed groups', 'held_out_seed_summary')):
    if stop[name]:
      s = stop[name]
      lines += [f"- Out of sample (setting chosen on the other {label}, the loss targets met "
                f"there): {s['n']} runs, stopped {s['stopped']}, saved {s['saved_mean']:.1%} "
                f"of steps, mean loss {s['loss_mean'] * 100:.2f} points, "
                f"{s['share_over_max']:.1%} of runs lose > {TARGET_MAX_LOSS * 100:.0f} points, "
                f"worst {s['loss_max'] * 100:.2f} points."]
  for label, key in (('config groups', 'group'), ('seed groups', 'seed_group')):
    s = stop['held_out_relaxed_summary'].get(key)
    chosen: dict[str, int] = {}
    for row in stop['held_out_relaxed'].get(key, []):
      name = json.dumps(row['setting'], sort_keys=True)
      chosen[name] = chosen.get(name, 0) + 1
    if s:
      most = max(chosen, key=chosen.get) if chosen else None
      lines += [f"- Out of sample (setting chosen on the other {label} for mean loss <= "
                f"{TARGET_MEAN_LOSS * 100:.0f} point and at most "
                f"{TARGET_SHARE_OVER_MAX:.0%} of runs losing > {TARGET_MAX_LOSS * 100:.0f} "
                f"points there): stopped {s['stopped']}/{s['n']}, saved {s['saved_mean']:.1%} "
                f"of steps, mean loss {s['loss_mean'] * 100:.2f} points, "
                f"{s['share_over_max']:.1%} of runs lose > {TARGET_MAX_LOSS * 100:.0f} points, "
                f"worst {s['loss_max'] * 100:.2f} points. Chosen for "
                f"{chosen.get(most, 0)}/{s['n']} runs: `{most}`."]
  if stop['held_out_mean_only_summary']:
    s = stop['held_out_mean_only_summary']
    lines += [f"- Out of sample, setting chosen for mean loss <= {TARGET_MEAN_LOSS * 100:.0f} point "
              f"only: stopped {s['stopped']}/{s['n']}, saved {s['saved_mean']:.1%} of steps, "
              f"mean loss {s['loss_mean'] * 100:.2f} points, {s['share_over_max']:.1%} of runs "
              f"lose > {TARGET_MAX_LOSS * 100:.0f} points, worst {s['loss_max'] * 100:.2f} "
              'points.']
  if stop['default_summary']:
    s = stop['default_summary']
    lines += [f"- Default setting {stop['default']} on every run: stopped {s['stopped']}/"
              f"{s['n']}, saved {s['saved_mean']:.1%}, mean loss {s['loss_mean'] * 100:.2f} "
              f"points, {s['share_over_max']:.1%} of runs lose > "
              f"{TARGET_MAX_LOSS * 100:.0f} points, worst {s['loss_max'] * 100:.2f} points."]
  if stop.get('cadences'):
    lines += ['', 'The default setting at coarser eval cadences (each run\'s readings thinned to '
              'one every `spacing` of its steps, scored against the same actual final):', '',
              '| spacing | readings per run | stopped | saved | mean loss (pt) | '
              'runs losing > 3 pt | worst loss (pt) | meets targets |',
              '|---|---|---|---|---|---|---|---|']
    for row in stop['cadences']:
      lines.append(f"| {row['spacing']:.3f} | {row['readings_min']}-{row['readings_max']} | "
                   f"{row['stopped']}/{row['n']} | {row['saved_mean']:.1%} | "
                   f"{row['loss_mean'] * 100:.2f} | {row['share_over_max']:.1%} | "
                   f"{row['loss_max'] * 100:.2f} | {_fmt(row['meets'])} |")
    lines.append('')
  if stop['oracle_worst_loss'] is not None:
    lines += ['- Oracle that saves >= '
              f"{TARGET_SAVED:.0%} in every run by stopping at its best such eval (knowing the "
              f"future): mean loss {stop['oracle_mean_loss'] * 100:.2f} points, worst "
              f"{stop['oracle_worst_loss'] * 100:.2f} points."]
  lines += ['- Reference: a stop that kept a checkpoint exactly at its run\'s late level (the '
            'mean of the readings from 50% of the run to the final window) would lose > '
            f"{TARGET_MAX_LOSS * 100:.0f} points in {stop['late_level_share_over_max']:.1%} of "
            f"runs and {stop['late_level_worst'] * 100:.2f} points in the worst: the final "
            'value scatters that far above the level of the run\'s second half.']
  lines += [f"- Eval readings scatter with a median sd of {stop['reading_noise_median'] * 100:.2f} "
            'points around their trend (second differences). With no true loss at all, '
            'final minus the reading at the stop step would still reach about '
            f"{stop['noise_worst_loss'] * 100:.1f} points in the worst of "
            f"{stop['default_summary'].get('n', 0)} runs: the worst-case target is below the "
            'noise of a single eval reading.']
  pareto = pareto_front(stop['grid'])
  lines += ['', f"In sample, every run: the settings of the {len(stop['grid'])}-setting grid "
            'that no other setting beats on both steps saved and worst loss (mean loss <= '
            f'{TARGET_MEAN_LOSS * 100:.0f} point; the whole grid is in the JSON):', '',
            '| min_fraction | window_fraction | epsilon | confirm_evals | peak_tolerance | '
            'stopped | saved | mean loss (pt) | runs losing > 3 pt | worst loss (pt) | '
            'meets loss targets |',
            '|---|---|---|---|---|---|---|---|---|---|---|']
  for entry in pareto:
    setting = entry['setting']
    lines.append(f"| {setting['min_fraction']} | {setting['window_fraction']} | "
                 f"{setting['epsilon']} | {setting['confirm_evals']} | "
                 f"{_fmt(setting['peak_tolerance'])} | {entry['stopped']}/{entry['n']} | "
                 f"{entry['saved_mean']:.1%} | {entry['loss_mean'] * 100:.2f} | "
                 f"{entry['share_over_max']:.1%} | {entry['loss_max'] * 100:.2f} | "
                 f"{_fmt(meets(entry))} |")
  if stop.get('bound'):
    lines += bound_report(stop['bound'], stop)
  lines += ['', '## Which trajectory form wins where', '',
            'Per regime and metric: how often each form has the lowest whole-run AICc, and the '
            'lowest error forecasting the last 30% of the run from its first 70%; median over '
            'runs of AICc(form) - AICc(exponential) (negative: the form fits better; '
            'differences under ~2 are no evidence either way).', '',
            '| regime | metric | runs | AICc wins | holdout wins | median ΔAICc logistic | '
            'median ΔAICc power | plot |',
            '|---|---|---|---|---|---|---|---|']
  for entry in result['form_tally']:
    delta = entry['delta_aicc']
    lines.append(f"| {entry['regime']} | {entry['metric']} | {entry['n']} | {entry['aicc']} | "
                 f"{entry['holdout']} | {_fmt(delta['logistic'], 1)} | "
                 f"{_fmt(delta['power'], 1)} | [plot]({entry['plot']}) |")
  lines += ['', 'Runs per regime: ' + ', '.join(f'{k} {v}' for k, v in
                                                result['regime_counts'].items()) + '.']
  path = out / f'{stem}.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


def tally(rows: list[dict[str, Any]], key: str) -> str:
  counts: dict[str, int] = {}
  for row in rows:
    if row.get(key):
      counts[row[key]] = counts.get(row[key], 0) + 1
  return ', '.join(f'{name} {count}' for name, count in sorted(counts.items())) or '—'


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='*', type=Path, metavar='RUN_DIR')
  parser.add_argument('--trajectories', nargs='+', type=Path, default=[], metavar='JSON',
                      help='runs written by --dump-trajectories (instead of or next to '
                           'RUN_DIRs): the study replayed without the run folders')
  parser.add_argument('--dump-trajectories', type=Path, default=None, metavar='JSON',
                      help="write every loaded run's trajectories here")
  parser.add_argument('--dump-only', action='store_true',
                      help='with --dump-trajectories: write them and stop (no study)')
  parser.add_argument('--observe-fraction', type=float, default=0.3)
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--stem', default=STEM,
                      help='report name: OUT/STEM.{md,json}, plots under OUT/plots/STEM/')
  parser.add_argument('--write-calibration', action='store_true',
                      help=f'also write the CLI calibration set to {CALIBRATION_PATH}')
  parser.add_argument('--transfer', nargs='+', type=Path, default=[], metavar='RUN_DIR',
                      help='finished runs to forecast from the RUN_DIRs alone (none of them '
                           'calibrates anything), e.g. a regime retuned since: its regime is '
                           "read from each run's config.json, as the CLI does")
  parser.add_argument('--carry-records', default='', metavar='PREFIX',
                      help='with --write-calibration: keep the records of the current '
                           'calibration set whose run name starts with PREFIX (e.g. sl_runs/: '
                           'runs not rerun since), next to the new ones')
  args = parser.parse_args(argv)
  if args.carry_records and not args.write_calibration:
    parser.error('--carry-records needs --write-calibration')
  start = time.time()
  runs = load_runs([path for path in args.run_dirs if path.is_dir()])
  for path in args.trajectories:
    try:
      runs += load_trajectories(path)
    except (OSError, ValueError, KeyError) as error:
      parser.error(f'--trajectories {path}: {error}')
  if not runs:
    parser.error('no finished runs among RUN_DIRs or --trajectories')
  names = [run['name'] for run in runs]
  repeated = sorted({name for name in names if names.count(name) > 1})
  if repeated:
    parser.error(f'runs given twice (as RUN_DIR or in --trajectories): {repeated[:5]}; a run '
                 'must appear once, or leave-one-run-out would leak')
  if args.dump_only and args.dump_trajectories is None:
    parser.error('--dump-only needs --dump-trajectories')
  if args.dump_trajectories is not None:
    dump_trajectories(runs, args.dump_trajectories)
    if args.dump_only:
      print(f'wrote {args.dump_trajectories} ({len(runs)} runs)', file=sys.stderr)
      return 0
  fractions = sorted(set(CALIBRATION_FRACTIONS if args.write_calibration else ())
                     | {args.observe_fraction})
  features = run_features(runs, fractions)
  print(f'[calibrate] features of {len(runs)} runs in {time.time() - start:.0f}s',
        file=sys.stderr)
  forecast_rows = []
  summaries = {}
  for key in ('eval', 'reward'):
    rows = forecast_table(runs, key, args.observe_fraction, features)
    forecast_rows += rows
    for metric in sorted({row['metric'] for row in rows}):
      of_metric = [row for row in rows if row['metric'] == metric]
      summaries[(metric, 'all')] = forecast_summary(of_metric)
      for method in sorted({str(row['method']) for row in of_metric}):
        members = [row for row in of_metric if str(row['method']) == method]
        summaries[(metric, f'method {method}')] = forecast_summary(members)
      for regime in sorted({row['regime'] for row in of_metric}):
        members = [row for row in of_metric if row['regime'] == regime]
        summaries[(metric, regime)] = forecast_summary(members)
  plots = args.out / 'plots' / args.stem
  form_rows = form_study(runs, plots)
  form_tally = []
  for regime in sorted({row['regime'] for row in form_rows}):
    for metric in sorted({row['metric'] for row in form_rows if row['regime'] == regime}):
      members = [row for row in form_rows if row['regime'] == regime and row['metric'] == metric]
      deltas = {form: [row[f'{form}_aicc'] - row['exponential_aicc'] for row in members
                       if row.get(f'{form}_aicc') is not None
                       and row.get('exponential_aicc') is not None
                       and np.isfinite(row[f'{form}_aicc'] - row['exponential_aicc'])]
                for form in ('logistic', 'power')}
      form_tally.append({'regime': regime, 'metric': metric, 'n': len(members),
                         'delta_aicc': {form: float(np.median(values)) if values else None
                                        for form, values in deltas.items()},
                         'aicc': tally(members, 'aicc_winner'),
                         'holdout': tally(members, 'holdout_winner'),
                         'plot': f'plots/{args.stem}/{form_plot_name(regime, metric)}'})
  regime_counts: dict[str, int] = {}
  for run in runs:
    regime_counts[run['regime']] = regime_counts.get(run['regime'], 0) + 1
  result = {
      'n_runs': len(runs), 'observe_fraction': args.observe_fraction,
      'regimes_text': ', '.join(f'{k}: {v}' for k, v in sorted(regime_counts.items())),
      'regime_counts': dict(sorted(regime_counts.items())),
      'forecast_summaries': summaries, 'forecast_rows': forecast_rows,
      'early_stop': early_stop_study(runs), 'form_tally': form_tally, 'form_rows': form_rows,
      'definition_check': definition_check(runs, args.observe_fraction, features),
      'transfer': transfer_table(args.transfer, args.observe_fraction, features),
  }
  args.out.mkdir(parents=True, exist_ok=True)
  path = write_report(result, args.out, args.stem)
  serialisable = dict(result, forecast_summaries=[
      {'metric': m, 'runs': label, **s} for (m, label), s in summaries.items()])
  (args.out / f'{args.stem}.json').write_text(json.dumps(serialisable, indent=1, default=str))
  if args.write_calibration:
    records = [record for record in features.values() if record.actual is not None]
    source = f'{len(runs)} validation runs of studies/scaling_law/calibrate.py'
    if args.carry_records:
      new_runs = {record.run for record in records}
      carried = [record for record in CalibrationSet.load(CALIBRATION_PATH).records
                 if record.run.startswith(args.carry_records) and record.run not in new_runs]
      records += carried
      source += (f' and {len({r.run for r in carried})} runs ({args.carry_records}*) carried '
                 'from the previous calibration set')
    # The interval rule is part of what a set was tested with: a rebuilt set keeps it.
    rule = (CalibrationSet.load(CALIBRATION_PATH).config_scores_min
            if CALIBRATION_PATH.is_file() else 0)
    CalibrationSet(records, source, config_scores_min=rule).save(CALIBRATION_PATH)
    print(f'wrote {CALIBRATION_PATH} (intervals per config from >= {rule} scores; 0: pooled)',
          file=sys.stderr)
  print(f'wrote {path} in {time.time() - start:.0f}s', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
