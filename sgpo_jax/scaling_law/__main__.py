"""CLI: `python -m sgpo_jax.scaling_law {fit,calibrate-set} ...`.

    python -m sgpo_jax.scaling_law fit RUN_DIR [RUN_DIR ...]
    python -m sgpo_jax.scaling_law calibrate-set RUN_DIR_OR_JSON ... --out CAL.json \
        [--kind forecast|stop] [--base CAL.json [--carry-records PREFIX]] [--dump-trajectories J]

`fit`:
With no flags it forecasts, from the first 30% of the steps the run takes (its steps taken
once finished; under `train.flops_budget` the step the budget will be reached), the metric
that is meaningful for the run (`--metric auto`: held-out eval_accuracy; for curriculum
runs without evals the reward above the profiled solve rate) and says which it chose and
why on stderr and in `metric_reason`. The point forecast and its 90% interval are
calibrated on finished runs (`--calibration`: by default the validation runs shipped in
sgpo_jax/scaling_law/calibration_runs.json.xz; or a JSON file written by `calibrate-set`, or
finished run folders like yours; `none` for the curve alone with its uncalibrated
parameter-noise interval).

Prints one JSON line per run to stdout (model, params, metric, form,
predicted_final_reward, interval_low/high, calibration_set (with the config group whose
seeds were used), actual_final_reward, abs_error, curve_final_reward,
predicted_plateau_step, recommended_stop_step, and zero-shot fields when >= 2 runs report a
model size); the joint law goes to stderr as one JSON line and to
OUT/joint_law.json. One PNG per run goes to RUN_DIR/plots/ or --out. Exit status 1 when no
run could be forecast.

`calibrate-set`: the calibration set of finished runs (run folders, or trajectories files
written by --dump-trajectories), as the shipped sets are made: kind `forecast` (the CLI's
calibration_runs.json.xz: eval and reward prefixes at 0.2, 0.3, 0.5) or `stop` (the trainer's
early-stop stop_calibration_runs.json.xz: eval prefixes every 0.05 from 0.3 to 0.8). --base
keeps an existing set's records next to the new ones (a run in both is refused; with
--carry-records only the base's runs whose name starts with PREFIX are kept, and the new
runs replace them). A set or trajectories file named `*.xz` is read and written
xz-compressed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from sgpo_jax.scaling_law import calibration_set
from sgpo_jax.scaling_law.calibration import (
  DEFAULT_PREDICTOR,
  PREDICTORS,
  CalibrationSet,
  read_json_text,
)
from sgpo_jax.scaling_law.runs import (
  AUTO_METRIC,
  METRICS,
  calibration_from_runs,
  evaluate_runs,
  load_run,
  plot_forecast,
)
from sgpo_jax.scaling_law.trajectory import DEFAULT_FORMS, FORMS

DEFAULT_CALIBRATION = Path(__file__).resolve().parent / 'calibration_runs.json.xz'


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog='python -m sgpo_jax.scaling_law',
                                   description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest='command', required=True)
  fit = commands.add_parser('fit', help='forecast runs from their prefix and score the forecast')
  fit.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
  fit.add_argument('--observe-fraction', type=float, default=0.3,
                   help='fraction of the steps the run takes (or will take under its FLOPs '
                        'budget) the forecast may see (default 0.3)')
  fit.add_argument('--metric', choices=(AUTO_METRIC,) + METRICS, default=AUTO_METRIC,
                   help='auto (default): held-out eval_accuracy when logged, else the '
                        'reward meaningful for the method')
  fit.add_argument('--calibration', nargs='+', default=[str(DEFAULT_CALIBRATION)],
                   metavar='JSON_OR_RUN_DIR',
                   help='calibration set: a JSON file, finished run folders, or none '
                        f'(default {DEFAULT_CALIBRATION.name})')
  fit.add_argument('--predictor', choices=sorted(PREDICTORS), default=DEFAULT_PREDICTOR,
                   help=f'point forecast learnt on the calibration set (default '
                        f'{DEFAULT_PREDICTOR})')
  fit.add_argument('--config-group', default='auto', metavar='GROUP',
                   help="the runs' config group in the calibration set, whose other seeds "
                        "the forecast takes its offset from: auto (default: '<parent "
                        "folder>/<run folder without _seed<k>>', the sweeps' naming), none "
                        '(use the offset of the method\'s runs), or a group name')
  fit.add_argument('--out', type=Path, default=None,
                   help='folder for plots and joint_law.json (default RUN_DIR/plots/)')
  fit.add_argument('--epsilon', type=float, default=0.01,
                   help='remaining gain below which the reward counts as plateaued')
  fit.add_argument('--confidence', type=float, default=0.9)
  fit.add_argument('--forms', default=','.join(DEFAULT_FORMS),
                   help=f'comma-separated subset of {sorted(FORMS)}')
  fit.add_argument('--smoothing', type=int, default=0,
                   help='centred moving-average window applied before fitting (0 = none)')
  fit.add_argument('--unbounded', action='store_true',
                   help='the metric is not confined to [0, 1]')
  fit.add_argument('--no-plots', action='store_true')
  cal = commands.add_parser(
      'calibrate-set', help='write a calibration set from finished runs (the shipped sets are '
                            'made this way)')
  cal.add_argument('sources', nargs='+', type=Path, metavar='RUN_DIR_OR_JSON',
                   help='finished run folders and/or trajectories files (--dump-trajectories)')
  cal.add_argument('--out', type=Path, required=True,
                   help='the set to write; the shipped ones are ' + ', '.join(
                       f'{kind}: {spec.shipped.name}' for kind, spec in
                       calibration_set.KINDS.items()) + ' in sgpo_jax/scaling_law/')
  cal.add_argument('--kind', choices=sorted(calibration_set.KINDS), default='forecast',
                   help='forecast (default): for `fit`; stop: for the early stop rule bound')
  cal.add_argument('--base', type=Path, default=None, metavar='CAL_JSON',
                   help="keep this set's records next to the new runs' (extend it)")
  cal.add_argument('--carry-records', default=None, metavar='PREFIX',
                   help='with --base: keep only its runs whose name starts with PREFIX (the '
                        'new runs replace the rest)')
  cal.add_argument('--config-scores-min', type=int, default=None, metavar='K',
                   help="intervals from the config's own runs when it has >= K scores (0: the "
                        "whole pool; default: --base's, else 0)")
  cal.add_argument('--source', default='', help="the set's source line (default: the inputs)")
  cal.add_argument('--dump-trajectories', type=Path, default=None, metavar='JSON',
                   help="also write the runs' trajectories here (to rebuild without the folders)")
  return parser


def read_calibration(sources: Sequence[str], runs, observe_fraction: float,
                     forms: Sequence[str]) -> CalibrationSet | None:
  """The calibration set named on the command line (see the module docstring)."""
  if [source.lower() for source in sources] == ['none']:
    return None
  if len(sources) == 1 and sources[0].endswith(('.json', '.json.xz')):
    if sources[0] == str(DEFAULT_CALIBRATION) and not DEFAULT_CALIBRATION.exists():
      print(f'[scaling_law] no {DEFAULT_CALIBRATION.name}: curve forecast with an '
            'uncalibrated interval', file=sys.stderr)
      return None
    return CalibrationSet.load(sources[0])
  missing = [source for source in sources if not (Path(source) / 'metrics.jsonl').exists()]
  if missing:
    raise ValueError(f'--calibration {missing} are not run folders (no metrics.jsonl); pass '
                     'one JSON file, finished run folders, or none')
  records = []
  for metric in sorted({run.metric for run in runs}):
    records += calibration_from_runs(sources, metric, observe_fraction, forms=forms).records
  return CalibrationSet(records, f'{len(sources)} run folders given with --calibration')


def config_group_arg(value: str) -> str | None:
  """--config-group as `evaluate_run`'s group: None for auto, '' for none."""
  if value.lower() == 'auto':
    return None
  if value.lower() == 'none':
    return ''
  return value


def run_fit(args: argparse.Namespace) -> int:
  forms = tuple(name.strip() for name in args.forms.split(',') if name.strip())
  if not 0 < args.observe_fraction <= 1:
    raise ValueError(f'--observe-fraction={args.observe_fraction} must be in (0, 1], e.g. 0.3')
  runs = [load_run(run_dir, args.metric) for run_dir in args.run_dirs]
  for run in runs:
    print(f'[scaling_law] {run.name}: forecasting {run.metric}'
          + (f' ({run.metric_reason})' if run.metric_reason else '')
          + f' from the first {args.observe_fraction:g} of {run.total_steps} steps '
          f'({run.length_source})', file=sys.stderr)
  calibration = read_calibration(args.calibration, runs, args.observe_fraction, forms)
  rows, forecasts, law = evaluate_runs(
      runs, args.observe_fraction, forms=forms, epsilon=args.epsilon,
      confidence=args.confidence, smoothing=args.smoothing, bounded=not args.unbounded,
      calibration=calibration, predictor=args.predictor,
      groups=[config_group_arg(args.config_group)] * len(runs))
  for run, row, result in zip(runs, rows, forecasts):
    if result is not None and not args.no_plots:
      folder = args.out if args.out is not None else run.run_dir / 'plots'
      name = f'scaling_law_{run.name}.png' if args.out is not None else 'scaling_law.png'
      row['plot'] = str(plot_forecast(run, result, folder / name))
    print(json.dumps(row), flush=True)
  if law is not None:
    print(json.dumps({'joint_law': law.to_dict()}), file=sys.stderr)
    if args.out is not None:
      args.out.mkdir(parents=True, exist_ok=True)
      (args.out / 'joint_law.json').write_text(json.dumps(law.to_dict(), indent=2))
  return 0 if any(row['predicted_final_reward'] is not None for row in rows) else 1


def run_calibrate_set(args: argparse.Namespace) -> int:
  if args.carry_records is not None and args.base is None:
    raise ValueError('--carry-records needs --base (the set whose records it carries)')
  if args.base is not None and not args.base.is_file():
    raise ValueError(f'--base {args.base}: no such calibration file')
  runs = calibration_set.load_sources(args.sources)
  if not runs:
    raise ValueError(f'no finished runs among {[str(s) for s in args.sources]}')
  if args.dump_trajectories is not None:
    calibration_set.dump_trajectories(runs, args.dump_trajectories)
  base = (CalibrationSet.from_json(read_json_text(args.base)) if args.base is not None
          else None)
  source = args.source or (f'{len(runs)} runs of ' + ', '.join(map(str, args.sources))
                           + (f'; and the records of {args.base.name}' if base else ''))
  built = calibration_set.build_set(runs, args.kind, source=source, base=base,
                                    carry_prefix=args.carry_records,
                                    config_scores_min=args.config_scores_min)
  args.out.parent.mkdir(parents=True, exist_ok=True)
  built.save(args.out)
  print(f'[scaling_law] wrote {args.out}: {len({r.run for r in built.records})} runs, '
        f'{len(built.records)} records ({args.kind}; intervals per config from >= '
        f'{built.config_scores_min} scores, 0: pooled)', file=sys.stderr)
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    if args.command == 'calibrate-set':
      return run_calibrate_set(args)
    return run_fit(args)
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    return 2


if __name__ == '__main__':
  sys.exit(main())
