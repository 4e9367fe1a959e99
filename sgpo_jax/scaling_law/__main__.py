"""CLI: `python -m sgpo_jax.scaling_law fit RUN_DIR [RUN_DIR ...]`.

Prints one JSON line per run to stdout (model, params, form, predicted_final_reward,
actual_final_reward, abs_error, predicted_plateau_step, recommended_stop_step, CIs, and
zero-shot fields when >= 2 runs report a model size); the joint law goes to stderr as one
JSON line and to OUT/joint_law.json. One PNG per run goes to RUN_DIR/plots/ or --out.
Exit status 1 when no run could be forecast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from sgpo_jax.scaling_law.runs import METRICS, evaluate_runs, load_run, plot_forecast
from sgpo_jax.scaling_law.trajectory import DEFAULT_FORMS, FORMS


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog='python -m sgpo_jax.scaling_law',
                                   description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest='command', required=True)
  fit = commands.add_parser('fit', help='forecast runs from their prefix and score the forecast')
  fit.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
  fit.add_argument('--observe-fraction', type=float, default=0.3,
                   help='fraction of planned steps the forecast may see (default 0.3)')
  fit.add_argument('--metric', choices=METRICS, default='reward_mean')
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
  return parser


def run_fit(args: argparse.Namespace) -> int:
  forms = tuple(name.strip() for name in args.forms.split(',') if name.strip())
  runs = [load_run(run_dir, args.metric) for run_dir in args.run_dirs]
  rows, forecasts, law = evaluate_runs(
      runs, args.observe_fraction, forms=forms, epsilon=args.epsilon,
      confidence=args.confidence, smoothing=args.smoothing, bounded=not args.unbounded)
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
  return 0 if any(result is not None for result in forecasts) else 1


def main(argv: Sequence[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    return run_fit(args)
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    return 2


if __name__ == '__main__':
  sys.exit(main())
