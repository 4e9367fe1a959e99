"""Validate the reward scaling law on finished runs: how well does it forecast a run's final
reward from its first 30% (alone, zero-shot from the joint law, and law-refined), and what
would early stopping have cost and saved?

    python experiments/scaling_law_validate.py RUN_DIR [RUN_DIR ...] \
        [--fit-runs NAME ...] [--observe-fraction 0.3] [--metric reward_mean]
    python experiments/scaling_law_validate.py --synthetic     # dry run on generated runs

With --fit-runs the joint law is fitted on those runs and the others are forecast;
without, every run is forecast by a law fitted on all the other runs (leave-one-out).
Writes OUT/scaling_law.md and OUT/scaling_law.json (`_synthetic` suffix for --synthetic).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from sgpo_jax.scaling_law import EarlyStopper, fit_joint_law
from sgpo_jax.scaling_law.runs import (ACTUAL_FINAL_WINDOW, METRICS, RunRecord, evaluate_run,
                                       fit_runs_for_joint_law, load_run, plot_forecast,
                                       write_synthetic_run)

DEFAULT_OUT = Path(__file__).resolve().parent / 'results'
# Matches configs/default.py train.early_stop.
EARLY_STOP = {'enabled': True, 'epsilon': 0.01, 'min_fraction': 0.2, 'confidence': 0.9}


def write_synthetic_runs(folder: Path, total_steps: int = 200) -> list[Path]:
  """Five runs whose plateau gain and timescale follow a known law, one logistic."""
  sizes = [0.5e9, 1.5e9, 3e9, 7e9, 14e9]
  run_dirs = []
  for i, size in enumerate(sizes):
    r0 = 0.15 + 0.05 * i
    r_inf = r0 + 0.3 * (size / 1e9) ** 0.15 * (1 - r0)
    timescale = (size / 1e9) ** -0.2
    if i == 2:
      form, params = 'logistic', {'r0': r0, 'r_inf': r_inf, 't_mid': 0.25 * timescale,
                                  'width': 0.06 * timescale}
    else:
      form, params = 'exponential', {'r0': r0, 'r_inf': r_inf, 'tau': 0.12 * timescale}
    run_dirs.append(write_synthetic_run(folder / f'synthetic_{size / 1e9:g}b', form, params,
                                        total_steps, params_nonembed=size,
                                        model_name=f'synthetic-{size / 1e9:g}b', noise=0.03,
                                        seed=i, flops_per_step=2e12 * size / 1e9))
  return run_dirs


def replay_early_stop(run: RunRecord) -> dict[str, object]:
  """Feeds the run to EarlyStopper step by step; where would it have stopped?"""
  stopper = EarlyStopper(EARLY_STOP, run.total_steps)
  for step, value, flops in zip(run.steps, run.values, run.flops_total):
    decision = stopper.update(int(step), float(value), float(flops))
    if decision is not None and decision.should_stop:
      # Centred window: a trailing mean would lag a rising curve and overstate the loss.
      window = np.abs(run.steps - step) <= ACTUAL_FINAL_WINDOW * run.total_steps / 2
      reward_at_stop = float(np.mean(run.values[window]))
      return {'early_stop_step': int(step), 'reward_at_stop': round(reward_at_stop, 6),
              'reward_lost': round(run.actual_final - reward_at_stop, 6),
              'flops_saved_estimate': decision.flops_saved_estimate,
              'steps_saved_fraction': round(1 - step / run.total_steps, 4),
              'early_stop_reason': decision.reason}
  return {'early_stop_step': None, 'reward_at_stop': None, 'reward_lost': None,
          'flops_saved_estimate': 0.0, 'steps_saved_fraction': 0.0,
          'early_stop_reason': 'never stopped'}


def _cell(value: object, digits: int = 3) -> str:
  if value is None:
    return '—'
  if isinstance(value, float):
    return f'{value:.{digits}g}' if abs(value) >= 1e4 else f'{value:.{digits}f}'
  return str(value)


def _mean(rows: list[dict], key: str) -> float | None:
  values = [row[key] for row in rows if row.get(key) is not None]
  return float(np.mean(values)) if values else None


def write_report(rows: list[dict], laws: dict, settings: dict, out: Path, stem: str) -> Path:
  out.mkdir(parents=True, exist_ok=True)
  (out / f'{stem}.json').write_text(json.dumps(
      {'settings': settings, 'joint_laws': laws, 'runs': rows}, indent=2, default=str))
  columns = [('run', 'run'), ('model', 'model'), ('params', 'N'), ('form', 'form'),
             ('actual_final_reward', 'actual final'),
             ('predicted_final_reward', 'prefix forecast'), ('abs_error', '|err|'),
             ('zero_shot_final_reward', 'zero-shot'), ('zero_shot_abs_error', '|err|'),
             ('refined_final_reward', 'law-refined'), ('refined_abs_error', '|err|'),
             ('predicted_plateau_step', 'plateau step'),
             ('recommended_stop_step', 'rec. stop'), ('early_stop_step', 'early stop'),
             ('reward_lost', 'reward lost'), ('steps_saved_fraction', 'steps saved')]
  lines = [
      f"# Scaling-law validation ({settings['source']})", '',
      f"Metric `{settings['metric']}`; forecasts see the first "
      f"{settings['observe_fraction']:.0%} of each run; joint law: {settings['law_mode']}. "
      'Actual final = mean over the last 5% of planned steps. Early stop = EarlyStopper '
      f"replayed with {EARLY_STOP}.", '',
      '| ' + ' | '.join(title for _, title in columns) + ' |',
      '|' + '---|' * len(columns),
  ]
  for row in rows:
    lines.append('| ' + ' | '.join(_cell(row.get(key)) for key, _ in columns) + ' |')
  lines += ['', 'Mean absolute error of the final-reward forecast:', '']
  for key, label in [('abs_error', 'prefix only'), ('zero_shot_abs_error', 'zero-shot'),
                     ('refined_abs_error', 'prefix + joint-law prior')]:
    lines.append(f'- {label}: {_cell(_mean(rows, key), 4)}')
  lines.append(f"- mean reward lost by stopping early: {_cell(_mean(rows, 'reward_lost'), 4)}; "
               f"mean share of steps saved: {_cell(_mean(rows, 'steps_saved_fraction'), 3)}")
  errors = [f"- {row['run']}: {row['error']}" for row in rows if row.get('error')]
  if errors:
    lines += ['', 'Runs that could not be forecast:', ''] + errors
  path = out / f'{stem}.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='*', type=Path, metavar='RUN_DIR')
  parser.add_argument('--synthetic', action='store_true', help='generate runs and use those')
  parser.add_argument('--fit-runs', nargs='*', default=None, metavar='NAME',
                      help='run directory names the joint law is fitted on (default: '
                           'leave-one-out)')
  parser.add_argument('--observe-fraction', type=float, default=0.3)
  parser.add_argument('--metric', choices=METRICS, default='reward_mean')
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--no-plots', action='store_true')
  args = parser.parse_args(argv)

  scratch = None
  run_dirs = list(args.run_dirs)
  if args.synthetic:
    scratch = tempfile.TemporaryDirectory(prefix='scaling_law_synthetic_')
    run_dirs += write_synthetic_runs(Path(scratch.name))
  if not run_dirs:
    parser.error('pass RUN_DIRs or --synthetic')
  runs = [load_run(run_dir, args.metric) for run_dir in run_dirs]
  sized = [run for run in runs if run.params_nonembed is not None]
  if args.fit_runs:
    unknown = set(args.fit_runs) - {run.name for run in runs}
    if unknown:
      parser.error(f'--fit-runs names {sorted(unknown)} are not among the runs given')
  _, fits = fit_runs_for_joint_law(sized)
  fitted = {run.name: (run.params_nonembed, fit) for run, fit in zip(sized, fits)
            if fit is not None}

  def law_for(target: RunRecord):
    names = args.fit_runs if args.fit_runs else [name for name in fitted if name != target.name]
    chosen = [fitted[name] for name in names if name in fitted]
    if not chosen or target.params_nonembed is None:
      return None
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      return fit_joint_law([size for size, _ in chosen], [fit for _, fit in chosen])

  stem = 'scaling_law_synthetic' if args.synthetic else 'scaling_law'
  targets = [run for run in runs if not args.fit_runs or run.name not in args.fit_runs]
  rows, laws = [], {}
  for run in targets:
    law = law_for(run)
    row, result = evaluate_run(run, args.observe_fraction, law=law)
    row.update(replay_early_stop(run))
    if law is not None:
      laws[run.name] = law.to_dict()
    if result is not None and not args.no_plots:
      plot_forecast(run, result, args.out / 'plots' / stem / f'{run.name}.png')
    rows.append(row)
    print(json.dumps({key: row.get(key) for key in ('run', 'abs_error', 'zero_shot_abs_error',
                                                     'refined_abs_error', 'early_stop_step')}))
  settings = {'source': 'synthetic runs' if args.synthetic else 'training runs',
              'metric': args.metric, 'observe_fraction': args.observe_fraction,
              'law_mode': f'fitted on {args.fit_runs}' if args.fit_runs else 'leave-one-out',
              'run_dirs': [str(path) for path in run_dirs]}
  path = write_report(rows, laws, settings, args.out, stem)
  print(f'wrote {path} and {path.with_suffix(".json")}', file=sys.stderr)
  if scratch is not None:
    scratch.cleanup()
  return 0


if __name__ == '__main__':
  sys.exit(main())
