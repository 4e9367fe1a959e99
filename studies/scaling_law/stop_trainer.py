"""Early-stop rule 'bound' chosen as the trainer runs it, on many design runs, then tested on
runs nothing saw (the test pre-registered in
studies/scaling_law/results/scaling_law_fresh_seeds25-34/PLAN.md).

    python -m studies.scaling_law.stop_trainer \
        --design studies/scaling_law/results/scaling_law_fresh/trajectories.json ... \
        [--test RUN_DIRS_OR_TRAJECTORIES ...] [--reference-calibration JSON] \
        [--write-calibration JSON] [--config-scores-min K] [--design-cache JSON] \
        [--least-worst-row] --out DIR

Why a second chooser (`scaling_law_stop_transfer.py` chose the shipped setting): that one
chose on the replay form (the last reading at or before each fraction, the run's actual
length), while the trainer decides at the first eval at or after each fraction of a length it
projects from its FLOPs budget; the choice transferred in the replay form and missed the
worst case as the trainer runs it (3.01 on seeds 10-14, 3.95 on seeds 15-19). Here the
setting is chosen, and scored, in the form the trainer runs.

- Replay: each run's metrics rows (`scaling_law_stop_transfer.trainer_rows`) fed in turn to
  `early_stop.BoundStopper` with its regime's planned steps and FLOPs budget. A design run
  forecasts from the design runs of the other seeds. At every eval row from 30% of the
  projected length on, the row's projected length, reading, peak guard and the upper bounds
  per CONFIDENCES (`BoundStopper.forecasts_now`) are recorded once (`trainer_table`); every
  GRID setting is then replayed from that table by the stopper's own `due_fractions` and
  `bound_within` (`table_outcome`). The chosen setting is replayed once more through
  `BoundStopper.update_row` itself (`scaling_law_stop_transfer.trainer_outcome`), and the
  two must agree run by run.
- Choice: the GRID setting (`scaling_law_stop_transfer.GRID`) saving most on the design runs
  among those meeting issue 18's targets there (mean loss <= 1 point, worst <= 3). Nested
  estimate: the same choice without each seed (both regimes), scored on that seed.
- Test: the chosen setting with the calibration set of every design run (what
  --write-calibration writes and the trainer ships), and, for reference, the trainer's
  current default setting with --reference-calibration (the set it ships now).
- Sixth test (`studies/scaling_law/results/scaling_law_fresh_seeds40-44/PLAN.md`): --config-scores-min
  gives the design pools and the written set intervals per config; --least-worst-row also
  reports each rule's frontier point (the setting saving >= 30% with the least worst loss);
  --design-cache keeps the design tables for the next call on the same runs and code.
Loss = final accuracy (mean of the last 5% of the run) minus the reading at the stop.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sgpo_jax.config import defaults as default_config
from sgpo_jax.scaling_law.calibration import CalibrationSet
from sgpo_jax.scaling_law.early_stop import (
  STOP_CALIBRATION_PATH,
  below_peak,
  bound_within,
  due_fractions,
)
from studies.scaling_law import calibrate as cal
from studies.scaling_law import stop_transfer as transfer

REPO = Path(__file__).resolve().parents[2]
GRID = transfer.GRID


def default_setting() -> dict[str, Any]:
  """The trainer's current rule-'bound' setting (`config.train.early_stop`)."""
  stop = default_config.get_config().train.early_stop
  return {'fractions': tuple(float(f) for f in stop.bound_fractions),
          'confidence': float(stop.bound_confidence), 'delta': float(stop.bound_delta),
          'peak_tolerance': stop.peak_tolerance}


# What the table holds: every confidence, peak tolerance and first checkpoint of the GRID and
# of the trainer's current setting (a setting outside them is refused by `table_outcome`).
SETTINGS_COVERED = GRID + [default_setting()]
CONFIDENCES = tuple(sorted({s['confidence'] for s in SETTINGS_COVERED}))
TOLERANCES = sorted({s['peak_tolerance'] for s in SETTINGS_COVERED},
                    key=lambda t: -1 if t is None else t)
FIRST_FRACTION = min(min(s['fractions']) for s in SETTINGS_COVERED)
NEVER = {'stop_step': None, 'saved': 0.0, 'loss': 0.0}


def trainer_table(run: dict[str, Any], calibration: CalibrationSet) -> list[dict[str, Any]]:
  """Per eval row at or after FIRST_FRACTION of the projected length: step, projected length,
  reading, whether the peak guard blocks a stop (per TOLERANCES) and the upper bound of the
  final accuracy per CONFIDENCES, as `BoundStopper` sees them at that row."""
  stopper = transfer.bound_stopper(run, calibration,
                                   {**GRID[0], 'fractions': (FIRST_FRACTION,)})
  table = []
  for row in transfer.trainer_rows(run):
    stopper.observe_row(row)
    if not (stopper.steps and stopper.steps[-1] == row['step']
            and 'eval_accuracy' in row):  # no eval, or a non-finite one: no decision
      continue
    total, step = stopper.run_length(), float(row['step'])
    if FIRST_FRACTION * total > step + 1e-9:
      continue
    forecasts = stopper.forecasts_now(CONFIDENCES)
    table.append({'step': step, 'total': total, 'reading': stopper.values[-1],
                  'blocked': {t: t is not None and below_peak(stopper.steps, stopper.values, t)
                              for t in TOLERANCES},
                  'upper': {f.confidence: f.interval[1] for f in forecasts}})
  return table


def table_outcome(run: dict[str, Any], table: list[dict[str, Any]], setting: dict[str, Any]
                  ) -> dict[str, Any]:
  """`setting` replayed from `trainer_table`: the first row deciding a fraction
  (`due_fractions`) whose bound is within delta of its reading and that the peak guard does
  not block, scored as `scaling_law_stop_transfer.trainer_outcome`."""
  if (min(setting['fractions']) < FIRST_FRACTION - 1e-9
      or setting['confidence'] not in CONFIDENCES
      or setting['peak_tolerance'] not in TOLERANCES):
    raise ValueError(f'setting {setting} is outside what trainer_table recorded (fractions '
                     f'from {FIRST_FRACTION}, confidences {CONFIDENCES}, peak tolerances '
                     f'{TOLERANCES}); add it to SETTINGS_COVERED')
  decided: set[float] = set()
  record = run['eval']
  for row in table:
    due = due_fractions(setting['fractions'], decided, row['total'], row['step'])
    decided.update(due)
    if due and bound_within(row['reading'], row['upper'][setting['confidence']],
                            setting['delta']) and not row['blocked'][setting['peak_tolerance']]:
      return {'stop_step': row['step'], 'saved': 1 - row['step'] / record.total_steps,
              'loss': record.actual_final - row['reading']}
  return dict(NEVER)


def seed_pools(design: list[dict[str, Any]], config_scores_min: int = 0
               ) -> dict[str, CalibrationSet]:
  """Per seed, the calibration set of the design runs of the other seeds (intervals per config
  with `config_scores_min`, as in `transfer.calibration_set`)."""
  return {seed: transfer.calibration_set([r for r in design if _seed(r) != seed],
                                         config_scores_min=config_scores_min)
          for seed in dict.fromkeys(_seed(run) for run in design)}


def design_tables(design: list[dict[str, Any]], pools: dict[str, CalibrationSet]
                  ) -> list[list[dict[str, Any]]]:
  """`trainer_table` of every design run, forecasting from `pools` (`seed_pools`)."""
  return [trainer_table(run, pools[_seed(run)]) for run in design]


def _table_code() -> list[str]:
  """The code a table depends on (the stopper, the forecaster, the functions that feed them):
  a cache written by other code is not reused."""
  files = [REPO / 'sgpo_jax' / 'scaling_law' / name
           for name in ('early_stop.py', 'calibration.py', 'conformal.py', 'runs.py')]
  files.append(REPO / 'sgpo_jax' / 'configs' / 'regimes.py')  # the regimes' planned lengths
  functions = [trainer_table, seed_pools, design_tables, transfer.calibration_set,
               transfer.bound_stopper, transfer.trainer_rows, transfer._features,
               transfer._planned_length]
  return ([hashlib.sha256(p.read_bytes()).hexdigest() for p in files]
          + [inspect.getsource(f) for f in functions])


def _tables_key(design: list[dict[str, Any]], config_scores_min: int) -> str:
  """What `design_tables` depends on: the runs' rows, names and groups, the interval rule and
  the code of the stopper, the forecaster and the functions here that feed them."""
  blob = json.dumps({'config_scores_min': config_scores_min,
                     'code': _table_code(),
                     'runs': [[r['name'], r['group'], r['regime'], r['seed_group'],
                               float(r['eval'].actual_final), transfer.trainer_rows(r)]
                              for r in design]}, sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()


def cached_design_tables(design: list[dict[str, Any]], pools: dict[str, CalibrationSet],
                         cache: Path | None, config_scores_min: int
                         ) -> tuple[list[list[dict[str, Any]]], bool]:
  """`design_tables`, read from `cache` when it holds the tables of these runs, rule and code
  (`_tables_key`), else computed (and written there). Returns (tables, read from cache)."""
  key = _tables_key(design, config_scores_min)
  if cache is not None and cache.exists():
    stored = json.loads(cache.read_text())
    if stored.get('key') == key:
      return [[{**row, 'blocked': {None if t is None else float(t): b for t, b in row['blocked']},
                'upper': {float(c): u for c, u in row['upper']}} for row in table]
              for table in stored['tables']], True
  tables = design_tables(design, pools)
  if cache is not None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({'key': key, 'tables': [
        [{**row, 'blocked': list(row['blocked'].items()), 'upper': list(row['upper'].items())}
         for row in table] for table in tables]}))
  return tables, False


def _seed(run: dict[str, Any]) -> str:
  """The run's seed ('seed7'), shared by its two regimes' runs."""
  return run['seed_group'].split('/')[-1]


def load(paths: list[Path]) -> list[dict[str, Any]]:
  """Runs of trajectories files or run folders; one run in two files is kept once (refused
  if its readings differ)."""
  runs: dict[str, dict[str, Any]] = {}
  for run in transfer._load(paths):
    old = runs.get(run['name'])
    if old is not None:
      if transfer.trainer_rows(old) != transfer.trainer_rows(run):
        raise ValueError(f"{run['name']} is in two inputs with different readings (eval, "
                         'reward or FLOPs); give each run once')
      continue
    runs[run['name']] = run
  return list(runs.values())


def entries_for(design: list[dict[str, Any]], tables: list[list[dict[str, Any]]]
                ) -> list[dict[str, Any]]:
  entries = []
  for setting in GRID:
    outcomes = [table_outcome(run, table, setting) for run, table in zip(design, tables)]
    entries.append({'setting': setting, 'outcomes': outcomes, **cal.summarise_stops(outcomes)})
  return entries


def least_worst_saving(entries: list[dict[str, Any]], saved_min: float = cal.TARGET_SAVED
                       ) -> dict[str, Any] | None:
  """The entry with the smallest worst loss among those saving >= `saved_min` with mean loss
  <= 1 point (ties: the most saving, then the first in GRID): the rule's frontier at the
  saving target, where no setting meets the worst-case target there."""
  best = None
  for entry in entries:
    if entry['saved_mean'] + 1e-12 < saved_min or entry['loss_mean'] > cal.TARGET_MEAN_LOSS:
      continue
    if best is None or (entry['loss_max'], -entry['saved_mean']) < (best['loss_max'],
                                                                     -best['saved_mean']):
      best = entry
  return best


def _check_same(runs: list[dict[str, Any]], fast: list[dict[str, Any]],
                slow: list[dict[str, Any]]) -> None:
  for run, a, b in zip(runs, fast, slow):
    if a['stop_step'] != b['stop_step'] or abs(a['loss'] - b['loss']) > 1e-12:
      raise AssertionError(f"{run['name']}: table replay {a} != BoundStopper replay {b}")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--design', nargs='+', type=Path, required=True,
                      help='trajectories JSON files or run folders the rule is chosen on')
  parser.add_argument('--test', nargs='+', type=Path, default=[],
                      help='trajectories JSON files or run folders it is tested on')
  parser.add_argument('--reference-calibration', type=Path, default=None, metavar='JSON',
                      help="the trainer's current calibration set, for the reference row "
                           '(default: the shipped stop_calibration_runs.json.xz)')
  parser.add_argument('--write-calibration', type=Path, default=None, metavar='JSON',
                      help="write the design runs' calibration set (what ships as "
                           'sgpo_jax/scaling_law/stop_calibration_runs.json.xz)')
  parser.add_argument('--out', type=Path, required=True)
  parser.add_argument('--seed', type=int, default=0, help='bootstrap seed')
  parser.add_argument('--design-cache', type=Path, default=None, metavar='JSON',
                      help="the design runs' tables (the slow part), reused by a later call "
                           'with the same runs, --config-scores-min and code (else rebuilt)')
  parser.add_argument('--least-worst-row', action='store_true',
                      help='also report the setting saving >= 30%% with the least worst loss '
                           '(on with --config-scores-min)')
  parser.add_argument('--config-scores-min', type=int, default=0, metavar='K',
                      help="intervals per config in the design runs' sets (their pools and "
                           'the written set) where a config has >= K runs '
                           '(CalibrationSet.config_scores_min; 0: the whole pool)')
  args = parser.parse_args(argv)
  if args.config_scores_min < 0:
    parser.error(f'--config-scores-min={args.config_scores_min} must be >= 0 (0: intervals '
                 'from the whole pool)')
  start = time.time()
  try:
    design, test = load(args.design), load(args.test)
  except ValueError as error:
    parser.error(str(error))
  if not design:
    parser.error(f'no finished runs with eval readings in --design {args.design}')
  shared = sorted({_seed(r) for r in design} & {_seed(r) for r in test})
  if shared:
    parser.error(f'seeds {shared} are in both --design and --test: the test must use seeds '
                 'the design never saw')
  reference_path = args.reference_calibration or STOP_CALIBRATION_PATH
  reference = CalibrationSet.load(reference_path)
  rng = np.random.default_rng(args.seed)
  pools = seed_pools(design, args.config_scores_min)
  tables, from_cache = cached_design_tables(design, pools, args.design_cache,
                                            args.config_scores_min)
  entries = entries_for(design, tables)
  best = transfer.choose(entries)
  chosen = best['setting'] if best else None
  at_target = least_worst_saving(entries)
  for run in design:
    run['seed_of_run'] = _seed(run)
  nested = cal.choose_out_of_sample(design, entries, cal.meets, key='seed_of_run')
  seeds = transfer._seeds(design)
  shipped = transfer.calibration_set(
      design, config_scores_min=args.config_scores_min,
      source=f'the {len(design)} design runs (seeds {seeds[0][4:]}-{seeds[-1][4:]}) of '
             'studies/scaling_law/stop_trainer.py')
  current = default_setting()
  result: dict[str, Any] = {
      'command': ' '.join(['python -m studies.scaling_law.stop_trainer',
                           '--design', *map(str, args.design)]
                          + (['--test', *map(str, args.test)] if args.test else [])
                          + (['--reference-calibration', str(args.reference_calibration)]
                             if args.reference_calibration else [])
                          + ([f'--config-scores-min {args.config_scores_min}']
                             if args.config_scores_min else [])
                          + (['--least-worst-row'] if args.least_worst_row else [])),
      'grid_size': len(GRID), 'current_setting': transfer._jsonable(current),
      'reference_calibration': str(reference_path.relative_to(REPO)
                                   if reference_path.is_relative_to(REPO) else reference_path),
      'design': {'n_runs': len(design), 'seeds': transfer._seeds(design),
                 'chosen': transfer._jsonable(chosen),
                 'chosen_summary': transfer.scored(design, best['outcomes'], rng)
                 if best else None,
                 'nested': transfer.scored(design, nested, rng),
                 'current_summary': transfer.scored(design, [table_outcome(r, t, current)
                                                             for r, t in zip(design, tables)],
                                                    rng),
                 'frontier': [{'setting': transfer._jsonable(e['setting']),
                               **{k: v for k, v in e.items() if k not in ('setting',
                                                                          'outcomes')}}
                              for e in sorted(entries, key=lambda e: -e['saved_mean'])
                              if cal.meets(e)][:10]}}
  least_worst = bool(args.config_scores_min or args.least_worst_row)
  if args.config_scores_min:  # only when set: the earlier reports stay byte-identical
    result['config_scores_min'] = args.config_scores_min
  if least_worst:
    # Added with the sixth test (off by default, so earlier reports are unchanged): the
    # setting saving >= 30% with the least worst loss on the design runs.
    result['design']['least_worst_at_30'] = transfer._jsonable(
        at_target['setting']) if at_target else None
    result['design']['least_worst_at_30_summary'] = (
        transfer.scored(design, at_target['outcomes'], rng) if at_target else None)
    # The same frontier point for rule 'trend' (its grid, replayed on each run's readings and
    # actual length).
    trend_entries = cal.trend_grid(design)
    trend_best = least_worst_saving(trend_entries)
    result['design']['trend_meeting_targets'] = sum(cal.meets(e) for e in trend_entries)
    result['design']['trend_least_worst_at_30'] = (
        dict(trend_best['setting']) if trend_best else None)
    result['design']['trend_least_worst_at_30_summary'] = (
        transfer.scored(design, trend_best['outcomes'], rng) if trend_best else None)
  # The fast replay is the trainer's code path: checked on every design run when the tables
  # are built (a cache is only read back for the same runs and code).
  if chosen and not from_cache:
    slow = [transfer.trainer_outcome(run, pools[_seed(run)], chosen) for run in design]
    _check_same(design, best['outcomes'], slow)
  if test:
    def through(setting, calibration):
      return [transfer.trainer_outcome(r, calibration, setting) for r in test]
    chosen_outcomes = through(chosen, shipped) if chosen else []
    current_outcomes = through(current, reference)
    result['test'] = {
        'n_runs': len(test), 'seeds': transfer._seeds(test),
        'chosen_summary': transfer.scored(test, chosen_outcomes, rng) if chosen else None,
        'current_summary': transfer.scored(test, current_outcomes, rng),
        'chosen_config_out_summary': transfer.scored(test, [transfer.trainer_outcome(r, CalibrationSet(
            [x for x in shipped.records if x.group != r['group']], shipped.source,
            config_scores_min=shipped.config_scores_min), chosen)
            for r in test], rng) if chosen else None,
        'trend_summary': transfer.scored(test, [cal.stop_outcome(r['eval'], cal.DEFAULT_TREND)
                                                for r in test], rng),
        # Added after the fourth test (not in its plan): what the larger set alone changes.
        # Last, so the rows before it keep their bootstrap draws.
        'current_design_set_summary': transfer.scored(test, through(current, shipped), rng),
        **({'least_worst_at_30_summary': transfer.scored(
            test, through(at_target['setting'], shipped), rng)}
           if least_worst and at_target else {}),
        'chosen_rows': [dict(o, run=r['name'], total_steps=int(r['eval'].total_steps))
                        for r, o in zip(test, chosen_outcomes)],
        'current_rows': [dict(o, run=r['name'], total_steps=int(r['eval'].total_steps))
                         for r, o in zip(test, current_outcomes)]}
  args.out.mkdir(parents=True, exist_ok=True)
  if args.write_calibration:
    shipped.save(args.write_calibration)
  for half in ('design', 'test'):
    for block in result.get(half, {}).values():
      if isinstance(block, dict) and 'worst_runs' in block:
        for row in block['worst_runs']:
          row['setting'] = transfer._jsonable(row.get('setting'))
  path = write_report(result, args.out)
  (args.out / 'stop_results.json').write_text(json.dumps(result, indent=1, default=str))
  print(f'wrote {path} in {time.time() - start:.0f}s', file=sys.stderr)
  return 0


def write_report(result: dict[str, Any], out: Path) -> Path:
  header = transfer.HEADER
  design = result['design']
  lines = ['# Early-stop rule `bound` chosen as the trainer runs it', '',
           f"Generated by `studies/scaling_law/stop_trainer.py` ({result['command']}). "
           f"Design: {design['n_runs']} runs (seeds {', '.join(design['seeds'])}); "
           + (f"test: {result['test']['n_runs']} runs (seeds "
              f"{', '.join(result['test']['seeds'])}), none of them in the design set."
              if result.get('test') else 'no test runs given (design half only).'),
           '', 'Every row is the trainer\'s `BoundStopper` (first eval at or after each '
           'fraction, run length projected from the regime\'s FLOPs budget). Loss = final '
           'accuracy (mean of the last 5% of the run) minus the reading at the stop; a run '
           'that never stops saves 0 and loses 0. Targets: >= 30% of steps saved, mean loss '
           '<= 1 point, worst <= 3. Design runs forecast from the design runs of other seeds.',
           '', f"Chosen on the design runs ({result['grid_size']} settings): "
           f"`{design['chosen']}`. The trainer's current setting: "
           f"`{result['current_setting']}`."
           + (f" Intervals per config (`config_scores_min` {result['config_scores_min']}) in "
              "the design runs' sets." if result.get('config_scores_min') else ''),
           '', '## Design runs', '', header]
  if design['chosen_summary']:
    lines.append(transfer._line('chosen, in sample', design['chosen_summary']))
  lines.append(transfer._line('chosen without each seed, scored on it (nested)',
                              design['nested']))
  lines.append(transfer._line("the trainer's current setting", design['current_summary']))
  if design.get('least_worst_at_30_summary'):
    lines.append(transfer._line(f"saving >= 30% with the least worst loss in sample: "
                                f"`{design['least_worst_at_30']}`",
                                design['least_worst_at_30_summary']))
  if design.get('trend_least_worst_at_30_summary'):
    lines.append(transfer._line(f"`trend` ({len(cal.TREND_GRID)} settings, "
                                f"{design['trend_meeting_targets']} meeting mean and worst "
                                f"loss) saving >= 30% with the least worst loss: "
                                f"`{design['trend_least_worst_at_30']}`",
                                design['trend_least_worst_at_30_summary']))
  lines += ['', 'Settings meeting the targets on the design runs, most saving first:', '',
            '| setting | saved | mean loss | worst |', '|---|---|---|---|']
  for entry in design['frontier']:
    lines.append(f"| `{entry['setting']}` | {100 * entry['saved_mean']:.1f}% | "
                 f"{100 * entry['loss_mean']:.2f} | {100 * entry['loss_max']:.2f} |")
  if result.get('test'):
    test = result['test']
    lines += ['', '## Test runs', '', header]
    if test['chosen_summary']:
      lines.append(transfer._line('**chosen, calibration set of the design runs**',
                                  test['chosen_summary']))
      lines.append(transfer._line("the same, the run's config left out of the calibration set",
                                  test['chosen_config_out_summary']))
    lines.append(transfer._line(f"the trainer's current setting and set "
                                f"(`{result['reference_calibration']}`)",
                                test['current_summary']))
    lines.append(transfer._line("the trainer's current setting with the design runs' set "
                                '(added after the fourth test, not in its plan)',
                                test['current_design_set_summary']))
    lines.append(transfer._line('trend, trainer default', test['trend_summary']))
    if test.get('least_worst_at_30_summary'):
      lines.append(transfer._line('saving >= 30% with the least worst loss on the design runs',
                                  test['least_worst_at_30_summary']))
    lines += transfer.per_run_lines(test['chosen_rows'])
  path = out / 'stop_results.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


if __name__ == '__main__':
  sys.exit(main())
