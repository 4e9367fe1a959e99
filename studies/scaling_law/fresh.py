"""The shipped forecaster and early-stop rules on fresh runs: runs that no predictor, setting
or calibration record was chosen on (the test pre-registered in
studies/scaling_law/results/scaling_law_fresh/PLAN.md).

    python -m studies.scaling_law.fresh RUN_DIR [RUN_DIR ...] \
        [--trajectories JSON ...] [--out studies/scaling_law/results/scaling_law_fresh]

RUN_DIRs are comparison runs (RUNS/<regime>/<arm>_seed<s>); unfinished ones are skipped, and
only seeds with every (regime, arm) of the set finished are scored (a seed with a missing
run is left out whole). Writes OUT/results.{md,json} and OUT/trajectories.json (every scored
run's readings: the report can be regenerated from it with --trajectories alone).

Measured:
- the CLI's forecast from the first 30% (`runs.evaluate_run` with the shipped calibration
  set, as `python -m sgpo_jax.scaling_law fit RUN` runs it), with the run's config group
  (the CLI's default) and without (the CLI before that default), for held-out
  eval_accuracy and the method's reward metric: mean |error| against the flat baseline and
  the coverage of the 90% interval, with bootstrap intervals over seeds;
- early stop replayed on the eval readings: 'trend' with the trainer's default setting, and
  'bound' with the setting fixed in the plan, its forecasts fitted on the other fresh runs
  (run out, and config group out).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from sgpo_jax.scaling_law.calibration import CalibrationSet, prefix_features
from sgpo_jax.scaling_law.runs import evaluate_run
from studies.scaling_law import calibrate as cal

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path(__file__).resolve().parent / 'results' / 'scaling_law_fresh'
OBSERVE_FRACTION = 0.3
BOOTSTRAP = 2000
# Fixed in PLAN.md: the in-sample choice on the 150 validation runs (32.3% saved there).
BOUND_SETTING = {'fractions': (0.4, 0.5, 0.6, 0.7), 'confidence': 0.9, 'delta': 0.03,
                 'peak_tolerance': None}
VARIANTS = {'group': None, 'no_group': ''}  # evaluate_run's group: auto / none


def complete_seeds(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
  """The runs of seeds that have every config group of the set, and what was dropped."""
  configs = sorted({run['group'] for run in runs})
  seeds: dict[str, set[str]] = {}
  for run in runs:
    seeds.setdefault(seed_of(run), set()).add(run['group'])
  kept = sorted(seed for seed, groups in seeds.items() if groups == set(configs))
  dropped = {seed: sorted(set(configs) - groups) for seed, groups in seeds.items()
             if seed not in kept}
  return ([run for run in runs if seed_of(run) in kept],
          {'configs': configs, 'seeds': kept, 'dropped': dropped})


def seed_of(run: dict[str, Any]) -> str:
  return run['seed_group'].rsplit('/', 1)[-1]


def forecast_rows(runs: list[dict[str, Any]], calibration: CalibrationSet,
                  variants: dict[str, str | None] = VARIANTS) -> list[dict[str, Any]]:
  """Per run and metric (eval, reward): the CLI's forecast per `variants` (default: with and
  without the config group), and the flat baseline."""
  rows = []
  for run in runs:
    for key in ('eval', 'reward'):
      if key not in run:
        continue
      record = run[key]
      with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        flat = prefix_features(record, OBSERVE_FRACTION).flat
        row = {'run': run['name'], 'regime': run['regime'], 'config': run['group'],
               'seed': seed_of(run), 'method': record.method, 'metric': record.metric,
               'total_steps': record.total_steps, 'flat': flat, 'actual': record.actual_final,
               'flat_err': abs(flat - record.actual_final)}
        for variant, group in variants.items():
          out, _ = evaluate_run(record, OBSERVE_FRACTION, calibration=calibration, group=group)
          if out['predicted_final_reward'] is None:
            raise ValueError(f"{run['name']} {record.metric}: no forecast ({out['error']})")
          row[variant] = {'predicted': out['predicted_final_reward'],
                          'interval': [out['interval_low'], out['interval_high']],
                          'err': abs(out['predicted_final_reward'] - record.actual_final),
                          'covered': bool(out['interval_low'] <= record.actual_final
                                          <= out['interval_high']),
                          'calibration': out['calibration_set']['description'],
                          'config_group_runs': out['calibration_set']['config_group_runs']}
      rows.append(row)
  return rows


def summarise(rows: list[dict[str, Any]], rng: np.random.Generator,
              variants: Iterable[str] = VARIANTS) -> dict[str, Any]:
  """Mean |error| (each of `variants` and flat), ratio to flat and coverage, with bootstrap
  95% intervals resampling seeds (a seed's runs share their start and their early curve)."""
  seeds = sorted({row['seed'] for row in rows})
  by_seed = {seed: [row for row in rows if row['seed'] == seed] for seed in seeds}

  def stats(members: list[dict[str, Any]]) -> dict[str, float]:
    flat = float(np.mean([row['flat_err'] for row in members]))
    out = {'flat_err': flat}
    for variant in variants:
      err = float(np.mean([row[variant]['err'] for row in members]))
      out[f'{variant}_err'] = err
      out[f'{variant}_ratio'] = err / flat if flat > 0 else float('inf')
      out[f'{variant}_coverage'] = float(np.mean([row[variant]['covered'] for row in members]))
    return out

  point = stats(rows)
  draws = []
  for _ in range(BOOTSTRAP if len(seeds) > 1 else 0):
    picked = rng.choice(len(seeds), size=len(seeds), replace=True)
    draws.append(stats([row for i in picked for row in by_seed[seeds[i]]]))
  ci = {key: [float(np.percentile([d[key] for d in draws], 2.5)),
              float(np.percentile([d[key] for d in draws], 97.5))] if draws else [None, None]
        for key in point}
  return {'n': len(rows), 'seeds': len(seeds), **point, 'ci95': ci}


def stop_rows(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
  evals = [run for run in runs if 'eval' in run and run['eval'].steps.size >= 4]
  out = {'trend_default': [dict(cal.stop_outcome(run['eval'], cal.DEFAULT_TREND),
                                run=run['name'], regime=run['regime']) for run in evals]}
  for label, leave_out in (('bound_run_out', ''), ('bound_group_out', 'group')):
    points = cal.bound_checkpoints(evals, leave_out)
    out[label] = [dict(cal.bound_outcome(run['eval'], row, BOUND_SETTING), run=run['name'],
                       regime=run['regime']) for run, row in zip(evals, points)]
  return out


def _f(value: Any, digits: int = 3) -> str:
  if value is None:
    return '-'
  return f'{value:.{digits}f}'


def _ci(pair: list[Any], digits: int = 3) -> str:
  return f'[{_f(pair[0], digits)}, {_f(pair[1], digits)}]'


def write_report(result: dict[str, Any], out: Path) -> Path:
  seeds = result['seeds']
  lines = [
      '# The shipped forecaster and early stops on fresh runs', '',
      f"Generated by `studies/scaling_law/fresh.py` ({result['command']}). Pre-registered in "
      f"`{result.get('plan') or 'PLAN.md'}`{'' if result.get('plan') else ' (same folder)'}. "
      f"{result['n_runs']} runs: regimes {', '.join(result['regimes'])}; "
      f"{len(seeds['configs'])} configs x seeds {', '.join(s.replace('seed', '') for s in seeds['seeds'])}"
      + ('; left out, a run missing: ' + ', '.join(
          f"{seed} ({len(missing)} of {len(seeds['configs'])} missing)"
          for seed, missing in sorted(seeds['dropped'].items())) if seeds['dropped'] else '')
      + '. None of these runs is in the calibration set '
      f"(`{result['calibration']}`, seeds {result['calibration_seeds']}), and no predictor or "
      'setting was chosen on them.',
      '',
      '## Forecast of the final value from the first 30% (the CLI, '
      + ('shipped calibration set)' if result['calibration_shipped']
         else 'with the calibration set named above)'),
      '',
      'Mean |error| of `python -m sgpo_jax.scaling_law fit RUN` (predictor `pooled`) with the '
      "run's config group (the CLI default since this test) and without it (before), the flat "
      "baseline's, their ratio and the coverage of the nominal 90% interval; [bootstrap 95% "
      'over seeds]. Targets: error <= 0.03 and <= 0.5x flat, coverage 85-95%.', '',
      '| metric | runs | n | flat | with group | ratio | coverage | without group | ratio | '
      'coverage |',
      '|---|---|---|---|---|---|---|---|---|---|']
  for s in result['summaries']:
    ci = s['ci95']
    lines.append(
        f"| {s['metric']} | {s['label']} | {s['n']} | {_f(s['flat_err'])} | "
        f"**{_f(s['group_err'])}** {_ci(ci['group_err'])} | {_f(s['group_ratio'], 2)}x "
        f"{_ci(ci['group_ratio'], 2)} | {_f(s['group_coverage'], 2)} | "
        f"{_f(s['no_group_err'])} | {_f(s['no_group_ratio'], 2)}x | "
        f"{_f(s['no_group_coverage'], 2)} |")
  lines += ['', '## Early stop replayed on the fresh runs', '',
            "Loss = final accuracy (mean of the last 5% of the run) minus the reading at the "
            "stop; a run that never stops saves 0 and loses 0. `trend`: the trainer's default "
            f"setting {result['trend_default']}. `bound`: the setting fixed in the plan "
            f"{result['bound_setting']}, its forecasts fitted on the other fresh runs. "
            'Targets: >= 30% saved, mean loss <= 1 point, worst <= 3.', '',
            '| rule | runs | stopped | steps saved | mean loss (points) | worst loss | runs over 3 '
            'points | worst runs |', '|---|---|---|---|---|---|---|---|']
  for label, s in result['stop_summaries'].items():
    worst = sorted(result['stops'][label], key=lambda o: -o['loss'])[:3]
    lines.append(
        f"| {label} | {s['n']} | {s['stopped']} | {100 * s['saved_mean']:.1f}% | "
        f"{100 * s['loss_mean']:.2f} | {100 * s['loss_max']:.2f} | "
        f"{round(s['share_over_max'] * s['n'])} | "
        + ', '.join(f"{o['run']} {100 * o['loss']:.1f}" for o in worst if o['loss'] > 0) + ' |')
  lines += ['', '## Per run (eval_accuracy, with group)', '',
            '| run | flat | predicted | 90% interval | actual | error | inside | config runs |',
            '|---|---|---|---|---|---|---|---|']
  for row in result['rows']:
    if row['metric'] != 'eval_accuracy':
      continue
    g = row['group']
    lines.append(f"| {row['run']} | {_f(row['flat'])} | {_f(g['predicted'])} | "
                 f"{_f(g['interval'][0])}-{_f(g['interval'][1])} | {_f(row['actual'])} | "
                 f"{_f(g['err'])} | {'yes' if g['covered'] else 'no'} | "
                 f"{g['config_group_runs']} |")
  path = out / 'results.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='*', type=Path, metavar='RUN_DIR')
  parser.add_argument('--trajectories', nargs='+', type=Path, default=[], metavar='JSON')
  parser.add_argument('--calibration', type=Path, default=cal.CALIBRATION_PATH)
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--seed', type=int, default=0, help='bootstrap seed')
  parser.add_argument('--plan', default='', help="the plan's path, when not OUT/PLAN.md")
  args = parser.parse_args(argv)
  start = time.time()
  runs = cal.load_runs([path for path in args.run_dirs if path.is_dir()])
  for path in args.trajectories:
    runs += cal.load_trajectories(path)
  if not runs:
    parser.error('no finished runs among RUN_DIRs or --trajectories')
  names = [run['name'] for run in runs]
  if len(set(names)) != len(names):
    parser.error('a run is given twice (RUN_DIR and --trajectories?)')
  calibration = CalibrationSet.load(args.calibration)
  leaked = sorted(set(names) & {record.run for record in calibration.records})
  if leaked:
    parser.error(f'{leaked[:5]} are in the calibration set {args.calibration}: not fresh')
  runs, seeds = complete_seeds(runs)
  if not runs:
    parser.error(f'no seed has every config finished: {seeds}')
  args.out.mkdir(parents=True, exist_ok=True)
  cal.dump_trajectories(runs, args.out / 'trajectories.json')
  rows = forecast_rows(runs, calibration)
  rng = np.random.default_rng(args.seed)
  summaries = []
  # Named order (a set's order follows the hash seed, and the bootstrap draws follow it).
  for metric in sorted({row['metric'] for row in rows}, key=lambda m: (m != 'eval_accuracy', m)):
    of_metric = [row for row in rows if row['metric'] == metric]
    groups = [('all', of_metric)]
    groups += [(f'method {m}', [r for r in of_metric if r['method'] == m])
               for m in sorted({str(r['method']) for r in of_metric})]
    groups += [(f'config {config}', [r for r in of_metric if r['config'] == config])
               for config in sorted({r['config'] for r in of_metric})
               if config.endswith('sgpo_bayes_g24')]  # in no calibration record
    groups += [(regime, [r for r in of_metric if r['regime'] == regime])
               for regime in sorted({r['regime'] for r in of_metric})]
    for label, members in groups:
      summaries.append({'metric': metric, 'label': label, **summarise(members, rng)})
  stops = stop_rows(runs)
  shipped = args.calibration.resolve() == cal.CALIBRATION_PATH.resolve()
  regimes = {run['regime'] for run in runs}
  result = {
      'command': ' '.join(['python -m studies.scaling_law.fresh']
                          + ([f'<{len(args.run_dirs)} run folders>'] if args.run_dirs else [])
                          + (['--trajectories', *map(str, args.trajectories)]
                             if args.trajectories else [])
                          + ([] if shipped else [f'--calibration {args.calibration}'])),
      'n_runs': len(runs), 'regimes': sorted(regimes), 'seeds': seeds,
      'calibration': args.calibration.name, 'plan': args.plan,
      'calibration_shipped': shipped,
      'calibration_seeds': cal.seed_range(record.run for record in calibration.records
                                          if record.regime in regimes),
      'summaries': summaries, 'rows': rows,
      'trend_default': cal.DEFAULT_TREND, 'bound_setting': BOUND_SETTING, 'stops': stops,
      'stop_summaries': {label: cal.summarise_stops(outcomes)
                         for label, outcomes in stops.items()},
      'runs': [run['name'] for run in runs]}
  path = write_report(result, args.out)
  (args.out / 'results.json').write_text(json.dumps(result, indent=1, default=str))
  print(f'wrote {path} in {time.time() - start:.0f}s', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
