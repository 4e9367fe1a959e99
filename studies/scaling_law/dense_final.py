"""Runs evaluated densely at the end, thinned back to the comparison schedule, and the final
value's own noise (the fifth fresh-seed test, studies/scaling_law/results/scaling_law_fresh_seeds35-39/
PLAN.md).

    python -m studies.scaling_law.dense_final --trajectories DENSE.json \
        --thinned-out THINNED.json [--report OUT]

The test's runs were evaluated at the comparison regimes' fractions of the FLOPs budget
(`default_config.REGIME_EVAL_FRACTIONS`) and at nine more, every 0.5% of it from 95.5% on, so
the final value (the mean of the readings in the last 5% of the steps,
`runs.ACTUAL_FINAL_WINDOW`) averages about one reading per step instead of one or two.

Thinning (`standard_mask`): the trainer evaluates at step 0, at the first step whose
cumulative FLOPs reach each fraction of the budget, and at the last step. In a run that was
evaluated at a superset of fractions, the first *reading* with cumulative FLOPs >= f * budget
is therefore the step the standard schedule would have evaluated for f: keeping those (and
step 0 and the last step) gives exactly the readings of the standard schedule, with no need
for the FLOPs of the steps between readings (which the trajectories do not always hold). A
run made with the standard schedule comes back unchanged (tested on the earlier tests' runs).

Report (OUT.md / OUT.json): per run the dense and the thinned final, how many readings each
averages, the sd of the readings in the dense final window; over runs the sd and the largest
|dense - thinned|.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sgpo_jax.config import defaults as default_config
from sgpo_jax.scaling_law.runs import RunRecord
from studies.scaling_law import calibrate as cal
from studies.scaling_law import stop_transfer as transfer


def standard_mask(record: RunRecord, budget: float,
                  fractions: Sequence[float] = default_config.REGIME_EVAL_FRACTIONS
                  ) -> np.ndarray:
  """Which of the record's readings the schedule `fractions` of `budget` would have taken:
  step 0, the first reading at or past each fraction's FLOPs, the last reading."""
  if budget <= 0:
    raise ValueError(f'budget={budget!r}: thinning to fractions of a FLOPs budget needs one > 0')
  flops = np.asarray(record.flops_total, float)
  if flops.size != record.steps.size or np.any(np.diff(flops) < 0):
    raise ValueError(f'{record.name}: flops_total must be one non-decreasing value per reading')
  keep = np.zeros(record.steps.size, bool)
  keep[0] = record.steps[0] == 0
  keep[-1] = True
  for fraction in fractions:
    at_or_past = np.flatnonzero(flops >= fraction * budget)
    if at_or_past.size:
      keep[at_or_past[0]] = True
  return keep


def thinned_record(record: RunRecord, budget: float,
                   fractions: Sequence[float] = default_config.REGIME_EVAL_FRACTIONS
                   ) -> RunRecord:
  keep = standard_mask(record, budget, fractions)
  return dataclasses.replace(record, steps=record.steps[keep], values=record.values[keep],
                             flops_total=record.flops_total[keep])


def thinned_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Each run with its eval readings thinned to its regime's standard schedule (the reward
  trajectory, logged every step, is left as it is)."""
  out = []
  for run in runs:
    _, budget = transfer._planned_length(run['regime'])
    out.append({**run, 'eval': thinned_record(run['eval'], budget)})
  return out


def _points(x: float) -> str:
  return f'{100 * x:.2f}'


def final_noise(dense: list[dict[str, Any]], thinned: list[dict[str, Any]]
                ) -> dict[str, Any]:
  """Per run: dense and thinned final, readings in each window, sd of the dense window's
  readings; over runs: sd, mean |.| and largest |dense - thinned|."""
  per_run = []
  for d, t in zip(dense, thinned):
    if d['name'] != t['name']:
      raise ValueError(f"runs out of order: {d['name']} vs {t['name']}")
    dense_window, thin_window = d['eval'].final_readings, t['eval'].final_readings
    per_run.append({
        'run': d['name'], 'dense_final': float(dense_window.mean()),
        'thinned_final': float(thin_window.mean()), 'dense_readings': int(dense_window.size),
        'thinned_readings': int(thin_window.size),
        'dense_window_sd': float(dense_window.std(ddof=1)) if dense_window.size > 1 else None})
  diff = np.array([r['dense_final'] - r['thinned_final'] for r in per_run])
  sds = [r['dense_window_sd'] for r in per_run if r['dense_window_sd'] is not None]
  worst = int(np.argmax(np.abs(diff))) if diff.size else None
  return {'runs': len(per_run),
          'difference_sd': float(diff.std(ddof=1)) if diff.size > 1 else None,
          'difference_mean_abs': float(np.abs(diff).mean()) if diff.size else None,
          'difference_max_abs': float(np.abs(diff).max()) if diff.size else None,
          'difference_max_run': per_run[worst]['run'] if worst is not None else None,
          'runs_over_1_point': int(np.sum(np.abs(diff) > 0.01)),
          'dense_window_sd_median': float(np.median(sds)) if sds else None,
          'dense_readings_median': float(np.median([r['dense_readings'] for r in per_run])),
          'thinned_readings_median': float(np.median([r['thinned_readings'] for r in per_run])),
          'per_run': per_run}


def report_lines(noise: dict[str, Any], command: str) -> list[str]:
  lines = ['# The final value with a dense final window against one or two readings', '',
           f'Generated by `{command}`. Final = mean of the eval readings in the last 5% of the '
           "run's steps; dense = every reading, thinned = the readings of the comparison "
           "regimes' standard schedule (`standard_mask`). Points = accuracy x 100.", '',
           f"- {noise['runs']} runs; readings in the final window (median): dense "
           f"{noise['dense_readings_median']:g}, thinned {noise['thinned_readings_median']:g}.",
           f"- dense - thinned final: sd {_points(noise['difference_sd'])} points, mean |.| "
           f"{_points(noise['difference_mean_abs'])}, largest "
           f"{_points(noise['difference_max_abs'])} "
           f"({noise['difference_max_run']}); {noise['runs_over_1_point']} runs differ by more "
           'than 1 point.',
           f"- sd of the readings inside the dense final window (median over runs): "
           f"{_points(noise['dense_window_sd_median'])} points.", '',
           '| run | dense final | readings | thinned final | readings | dense - thinned | '
           'sd in dense window |', '|---|---|---|---|---|---|---|']
  for r in noise['per_run']:
    sd = '' if r['dense_window_sd'] is None else _points(r['dense_window_sd'])
    lines.append(f"| {r['run']} | {r['dense_final']:.4f} | {r['dense_readings']} | "
                 f"{r['thinned_final']:.4f} | {r['thinned_readings']} | "
                 f"{_points(r['dense_final'] - r['thinned_final'])} | {sd} |")
  return lines


STOP_ROWS = (('chosen_summary', 'chosen, calibration set of the design runs (a)'),
             ('chosen_config_out_summary', "the same, the run's config left out (b)"),
             ('current_summary', "the trainer's current setting and set (c)"),
             ('trend_summary', 'trend, trainer default (d)'),
             ('current_design_set_summary', "the current setting with the design runs' set (e)"),
             ('least_worst_at_30_summary',
              'saving >= 30% with the least worst loss on the design runs (f)'))
FORECAST_ROWS = (('eval_accuracy', 'all'), ('eval_accuracy', 'default'),
                 ('eval_accuracy', 'paper_like'), ('reward_mean', 'all'),
                 ('reward_over_profile', 'all'))


def same_stops(dense_rows: list[dict[str, Any]], thinned_rows: list[dict[str, Any]]
               ) -> list[str]:
  """The runs whose stop step differs between the dense and the thinned replay."""
  thinned = {r['run']: r['stop_step'] for r in thinned_rows}
  if set(thinned) != {r['run'] for r in dense_rows}:
    raise ValueError('the dense and thinned stop tables hold different runs')
  return [r['run'] for r in dense_rows if r['stop_step'] != thinned[r['run']]]


def side_by_side_lines(stop: dict[str, dict[str, Any]], forecast: dict[str, dict[str, Any]]
                       ) -> list[str]:
  """The test's pre-registered measures with the dense and the thinned final side by side:
  `stop` and `forecast` map 'dense' / 'thinned' to the stop script's and the fresh script's
  results.json."""
  lines = ['## Early stop as the trainer runs it: the same stops, two finals', '',
           '| rule | final | runs | stopped | steps saved [95% over seeds] | mean loss | '
           'worst loss | runs over 3 | worst runs |', '|---|---|---|---|---|---|---|---|---|']
  for key, label in STOP_ROWS:
    if key not in stop['dense']['test']:  # a row added after the test
      continue
    for final in ('dense', 'thinned'):
      s = stop[final]['test'][key]
      ci = s['ci95']['saved_mean']
      worst = ', '.join(f"{r['run']} {100 * r['loss']:.1f}" for r in s.get('worst_runs', []))
      lines.append(f"| {label} | {final} | {s['n']} | {s['stopped']} | "
                   f"{100 * s['saved_mean']:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}] | "
                   f"{_points(s['loss_mean'])} | {_points(s['loss_max'])} | "
                   f"{round(s['share_over_max'] * s['n'])} | {worst} |")
  for key, label in (('chosen_rows', '(a)'), ('current_rows', '(c)')):
    differ = same_stops(stop['dense']['test'][key], stop['thinned']['test'][key])
    lines.append('')
    lines.append(f'Rows {label}: the stop step is the same on dense and thinned readings in '
                 f"{len(stop['dense']['test'][key]) - len(differ)} of "
                 f"{len(stop['dense']['test'][key])} runs"
                 + (f" (differs: {', '.join(differ)})." if differ else '.'))
  lines += ['', '## The CLI\'s forecast from 30% against each final', '',
            '| metric | runs | final | n | flat | error [95% over seeds] | ratio | coverage |',
            '|---|---|---|---|---|---|---|---|']
  for metric, label in FORECAST_ROWS:
    for final in ('dense', 'thinned'):
      rows = [s for s in forecast[final]['summaries']
              if s['metric'] == metric and s['label'] == label]
      if not rows:
        continue
      s = rows[0]
      ci = s['ci95']['group_err']
      lines.append(f"| {metric} | {label} | {final} | {s['n']} | {s['flat_err']:.3f} | "
                   f"{s['group_err']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | "
                   f"{s['group_ratio']:.2f}x | {100 * s['group_coverage']:.0f}% |")
  return lines


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--trajectories', type=Path, default=None, metavar='DENSE.json')
  parser.add_argument('--thinned-out', type=Path, default=None, metavar='THINNED.json')
  parser.add_argument('--report', type=Path, default=None, metavar='OUT',
                      help='writes OUT.md and OUT.json')
  parser.add_argument('--side-by-side', nargs=5, type=Path, default=None,
                      metavar=('STOP_DENSE', 'STOP_THINNED', 'FORECAST_DENSE',
                               'FORECAST_THINNED', 'OUT.md'),
                      help="the stop script's and the fresh script's results.json on the "
                           'dense and the thinned runs -> one table')
  args = parser.parse_args(argv)
  command = 'python -m studies.scaling_law.dense_final ' + ' '.join(
      sys.argv[1:] if argv is None else argv)
  if args.side_by_side:
    *inputs, out = args.side_by_side
    data = [json.loads(path.read_text()) for path in inputs]
    seeds = [seed.removeprefix('seed') for seed in data[0]['test']['seeds']]
    lines = [f'# Fresh seeds {seeds[0]}-{seeds[-1]}: the dense and the thinned final side by side',
             '',
             f'Generated by `{command}`.', '']
    lines += side_by_side_lines({'dense': data[0], 'thinned': data[1]},
                                {'dense': data[2], 'thinned': data[3]})
    out.write_text('\n'.join(lines) + '\n')
    return
  if args.trajectories is None or args.thinned_out is None:
    parser.error('--trajectories and --thinned-out are needed (or --side-by-side)')
  if args.thinned_out.resolve() == args.trajectories.resolve():
    raise SystemExit(f'--thinned-out {args.thinned_out} is the input: name another file')
  dense = cal.load_trajectories(args.trajectories)
  thinned = thinned_runs(dense)
  cal.dump_trajectories(thinned, args.thinned_out)
  removed = sum(d['eval'].steps.size - t['eval'].steps.size for d, t in zip(dense, thinned))
  print(f'[dense_final] {len(dense)} runs, {removed} readings outside the standard schedule '
        f'removed -> {args.thinned_out}')
  if args.report is not None:
    noise = final_noise(dense, thinned)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.with_suffix('.md').write_text('\n'.join(report_lines(noise, command)) + '\n')
    args.report.with_suffix('.json').write_text(json.dumps(noise, indent=1) + '\n')


if __name__ == '__main__':
  main()
