"""Validate the reward scaling law on finished runs: how well does it forecast a run's final
reward from its first 30% (alone, zero-shot from the joint law, and law-refined), and what
would early stopping have cost and saved?

    python -m studies.scaling_law.validate RUN_DIR [RUN_DIR ...] \
        [--fit-runs NAME ...] [--observe-fraction 0.3] [--metric reward_mean]
    python -m studies.scaling_law.validate --synthetic     # dry run on generated runs

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

from sgpo_jax.scaling_law import EarlyStopper, fit_joint_law, forecast, select_form
from sgpo_jax.scaling_law.runs import (
  ACTUAL_FINAL_WINDOW,
  METRICS,
  RunRecord,
  evaluate_run,
  fit_runs_for_joint_law,
  load_run,
  plot_forecast,
  write_synthetic_run,
)
from sgpo_jax.scaling_law.trajectory import DEFAULT_FORMS, FORMS

DEFAULT_OUT = Path(__file__).resolve().parent / 'results'
# The reward-forecast stopper (train.early_stop.rule='forecast') as first shipped; the
# eval-accuracy 'trend' rule is validated in scaling_law_calibrate.py.
EARLY_STOP = {'enabled': True, 'rule': 'forecast', 'epsilon': 0.01, 'min_fraction': 0.2,
              'confidence': 0.9}


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
  if isinstance(value, (list, tuple)):
    return '–'.join(_cell(float(item), digits) for item in value)
  return str(value)


def _mean(rows: list[dict], key: str) -> float | None:
  values = [row[key] for row in rows if row.get(key) is not None]
  return float(np.mean(values)) if values else None


def _form_tally(rows: list[dict], key: str) -> str:
  counts: dict[str, int] = {}
  for row in rows:
    if row.get(key):
      counts[row[key]] = counts.get(row[key], 0) + 1
  return ', '.join(f'{name} {count}/{len(rows)}' for name, count in sorted(counts.items())) or '—'


def write_report(rows: list[dict], laws: dict, settings: dict, out: Path, stem: str,
                 discussion: str = '') -> Path:
  out.mkdir(parents=True, exist_ok=True)
  (out / f'{stem}.json').write_text(json.dumps(
      {'settings': settings, 'joint_laws': laws, 'runs': rows}, indent=2, default=str))
  columns = [('run', 'run'), ('method', 'method'), ('params', 'N'), ('r0', 'R0'),
             ('form', 'form (prefix)'), ('predicted_final_reward', 'predicted final'),
             ('predicted_final_reward_ci', '90% CI'),
             ('actual_final_reward', 'actual final'), ('abs_error', '|err|'),
             ('exponential_abs_error', '|err| exp only'),
             ('logistic_abs_error', '|err| logistic only'),
             ('power_abs_error', '|err| power only'),
             ('zero_shot_final_reward', 'zero-shot'), ('zero_shot_abs_error', '|err|'),
             ('refined_final_reward', 'prefix+law'), ('refined_abs_error', '|err|'),
             ('predicted_plateau_step', 'plateau step'),
             ('recommended_stop_step', 'rec. stop'), ('whole_run_form', 'form (whole run)'),
             ('early_stop_step', 'early stop'), ('reward_lost', 'reward lost'),
             ('steps_saved_fraction', 'steps saved')]
  lines = [
      f"# Scaling-law validation ({settings['source']})", '',
      f"Metric `{settings['metric']}`; forecasts see the first "
      f"{settings['observe_fraction']:.0%} of each run; forms chosen among "
      f"{settings['forms']}; joint law: {settings['law_mode']} "
      '(a run is never forecast by a law fitted on itself). Actual final = mean over the '
      'last 5% of planned steps. R0 = median of the first 3 logged values. '
      '`form (prefix)` = the form chosen on the prefix by holdout error; `|err| exp only` / '
      '`|err| logistic only` = the prefix forecast with that form forced; `form (whole '
      "run)` = the form that best forecasts the run's last 30% from its first 70%. Early "
      f'stop = EarlyStopper replayed with {EARLY_STOP}.', '',
      '| ' + ' | '.join(title for _, title in columns) + ' |',
      '|' + '---|' * len(columns),
  ]
  for row in rows:
    lines.append('| ' + ' | '.join(_cell(row.get(key)) for key, _ in columns) + ' |')
  groups = [('all runs', rows)]
  methods = sorted({row.get('method') for row in rows if row.get('method')})
  if len(methods) > 1:
    groups += [(method, [row for row in rows if row.get('method') == method])
               for method in methods]
  lines += ['', 'Mean absolute error of the final-reward forecast:', '',
            '| runs | n | prefix (form chosen) | exp only | logistic only | power only | '
            'zero-shot | prefix + law prior | reward lost by early stop | steps saved |',
            '|---|---|---|---|---|---|---|---|---|---|']
  for label, members in groups:
    cells = [_cell(_mean(members, key), 4) for key in (
        'abs_error', 'exponential_abs_error', 'logistic_abs_error', 'power_abs_error',
        'zero_shot_abs_error',
        'refined_abs_error', 'reward_lost', 'steps_saved_fraction')]
    lines.append(f'| {label} | {len(members)} | ' + ' | '.join(cells) + ' |')
  covered = [row['actual_in_ci'] for row in rows if row.get('actual_in_ci') is not None]
  if covered:
    lines += ['', f'Actual final inside the prefix forecast\'s {EARLY_STOP["confidence"]:.0%} CI: '
              f'{sum(covered)}/{len(covered)} runs.']
  lines += ['', f"Forms chosen on the prefix: {_form_tally(rows, 'form')}; "
            f"on the whole run: {_form_tally(rows, 'whole_run_form')}."]
  errors = [f"- {row['run']}: {row['error']}" for row in rows if row.get('error')]
  if errors:
    lines += ['', 'Runs that could not be forecast:', ''] + errors
  plots = [f"- [{row['run']}]({row['plot']})" for row in rows if row.get('plot')]
  if plots:
    lines += ['', 'Forecast plots (prefix fit, forecast band, actual tail, stop step):', '']
    lines += plots
  if discussion:
    lines += ['', discussion.rstrip()]
  path = out / f'{stem}.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


def law_runs_for(target: RunRecord, runs: list[RunRecord], fit_runs: list[str] | None,
                 group_by: str, holdout: str) -> list[RunRecord]:
  """The runs the joint law for `target` is fitted on: never `target` itself; with
  holdout='size' no run of its model size; with group_by='method' only its method."""
  chosen = []
  for run in runs:
    if run.name == target.name or run.params_nonembed is None:
      continue
    if fit_runs and run.name not in fit_runs:
      continue
    if holdout == 'size' and run.params_nonembed == target.params_nonembed:
      continue
    if group_by == 'method' and run.method != target.method:
      continue
    chosen.append(run)
  return chosen


def form_errors(run: RunRecord, observe_fraction: float,
                forms: tuple[str, ...] = DEFAULT_FORMS) -> dict[str, object]:
  """Each known form forced in turn: prefix forecast error; and which of `forms` forecasts
  the last 30% of the whole run best when fitted on its first 70% ('which form won')."""
  out: dict[str, object] = {}
  for form in FORMS:
    try:
      result = forecast(run.steps, run.values, run.total_steps, observe_fraction, forms=(form,))
      out[f'{form}_abs_error'] = round(abs(result.predicted_final_reward - run.actual_final), 6)
    except ValueError:
      out[f'{form}_abs_error'] = None
  try:
    selection = select_form(run.steps / run.total_steps, run.values, forms)
    out['whole_run_form'] = selection.fit.form
    out['whole_run_scores'] = {name: round(value, 5) for name, value in selection.scores.items()}
    out['whole_run_params'] = {name: round(value, 5)
                               for name, value in selection.fit.params.items()}
    out['noise_sigma'] = round(selection.fit.noise_sigma, 5)
  except ValueError as error:
    out['whole_run_form'] = None
    out['whole_run_error'] = str(error)
  return out


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='*', type=Path, metavar='RUN_DIR')
  parser.add_argument('--synthetic', action='store_true', help='generate runs and use those')
  parser.add_argument('--fit-runs', nargs='*', default=None, metavar='NAME',
                      help='run directory names the joint law is fitted on (default: '
                           'leave-one-out)')
  parser.add_argument('--group-by', choices=('none', 'method'), default='method',
                      help="'method': a run's joint law only uses runs of its own method")
  parser.add_argument('--holdout', choices=('run', 'size'), default='size',
                      help="'size': a run's joint law never sees a run of its model size "
                           "(other seeds included); 'run': only the run itself is left out")
  parser.add_argument('--observe-fraction', type=float, default=0.3)
  parser.add_argument('--forms', default=','.join(DEFAULT_FORMS),
                      help=f'comma-separated forms to choose among, of {sorted(FORMS)}')
  parser.add_argument('--metric', choices=METRICS, default='reward_mean')
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--stem', default=None,
                      help='output file stem (default scaling_law[_synthetic])')
  parser.add_argument('--discussion', type=Path, default=None,
                      help='Markdown file appended to the report')
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
  forms = tuple(name.strip() for name in args.forms.split(',') if name.strip())
  if args.fit_runs:
    unknown = set(args.fit_runs) - {run.name for run in runs}
    if unknown:
      parser.error(f'--fit-runs names {sorted(unknown)} are not among the runs given')

  def law_for(target: RunRecord):
    if target.params_nonembed is None:
      return None, []
    chosen = law_runs_for(target, runs, args.fit_runs, args.group_by, args.holdout)
    if not chosen:
      return None, []
    _, fits = fit_runs_for_joint_law(chosen, forms)
    pairs = [(run, fit) for run, fit in zip(chosen, fits) if fit is not None]
    if not pairs:
      return None, []
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      law = fit_joint_law([run.params_nonembed for run, _ in pairs], [fit for _, fit in pairs])
    return law, [run.name for run, _ in pairs]

  stem = args.stem or ('scaling_law_synthetic' if args.synthetic else 'scaling_law')
  targets = [run for run in runs if not args.fit_runs or run.name not in args.fit_runs]
  rows, laws = [], {}
  for run in targets:
    law, law_names = law_for(run)
    row, result = evaluate_run(run, args.observe_fraction, law=law, forms=forms)
    row.update(replay_early_stop(run))
    row.update(form_errors(run, args.observe_fraction, forms))
    row['law_runs'] = law_names
    if law is not None:
      laws[run.name] = dict(law.to_dict(), fitted_on=law_names)
    if result is not None and not args.no_plots:
      plot_path = args.out / 'plots' / stem / f'{run.name}.png'
      plot_forecast(run, result, plot_path)
      row['plot'] = str(plot_path.relative_to(args.out))
    rows.append(row)
    print(json.dumps({key: row.get(key) for key in ('run', 'abs_error', 'zero_shot_abs_error',
                                                     'refined_abs_error', 'early_stop_step')}))
  settings = {'source': 'synthetic runs' if args.synthetic else 'training runs',
              'metric': args.metric, 'observe_fraction': args.observe_fraction,
              'forms': list(forms),
              'law_mode': (f'fitted on {args.fit_runs}' if args.fit_runs else
                           f'held out by {args.holdout}') + f', grouped by {args.group_by}',
              'run_dirs': [str(path) for path in run_dirs]}
  discussion = args.discussion.read_text() if args.discussion else ''
  path = write_report(rows, laws, settings, args.out, stem, discussion)
  print(f'wrote {path} and {path.with_suffix(".json")}', file=sys.stderr)
  if scratch is not None:
    scratch.cleanup()
  return 0


if __name__ == '__main__':
  sys.exit(main())
