"""Early-stop rule 'bound' chosen on design runs, then tested on runs nothing saw (the test
pre-registered in studies/scaling_law/results/scaling_law_stop_transfer/PLAN.md).

    python -m studies.scaling_law.stop_transfer \
        --design studies/scaling_law/results/scaling_law_fresh/trajectories.json \
        --test studies/scaling_law/results/scaling_law_fresh_seeds10-14/trajectories.json \
        [--out studies/scaling_law/results/scaling_law_stop_transfer]

Without --test only the design half runs (the choice and its nested estimate): that is how
the plan's setting was fixed before any test run was looked at.

- Checkpoints: at each of FRACTIONS of a run, the last eval reading at or before it, the best
  reading so far and the upper ends (CONFIDENCES) of the calibrated interval of the final
  accuracy (`calibration.calibrated_forecasts`, predictor `pooled`, the run's config group
  kept so the other seeds of its config count, as the CLI does), fitted on design runs only.
  A design run's forecasts leave out every run of its seed group (the arms of one seed share
  their start and their early curve), so in-design replays see what a test run will: other
  seeds of the same configs, never its own seed.
- Choice: the GRID setting that saves the most steps on the design runs among those meeting
  issue 18's targets there (mean loss <= 1 point, worst <= 3); its nested estimate chooses
  the same way without each design seed and scores it on that seed.
- Test: the chosen setting, and the setting fixed before the first fresh test (`PLAN_SETTING`),
  on the test runs with forecasts from the design runs; `trend` with the trainer's default.
Loss = final accuracy (mean of the last 5% of the run) minus the reading at the stop.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sgpo_jax.config.args import load_config_module
from sgpo_jax.scaling_law.calibration import CalibrationSet, PrefixFeatures, prefix_features
from sgpo_jax.scaling_law.early_stop import BoundStopper
from sgpo_jax.scaling_law.runs import RunRecord
from studies.scaling_law import calibrate as cal
from studies.scaling_law.fresh import BOUND_SETTING as PLAN_SETTING

REPO = Path(__file__).resolve().parents[2]
regimes = load_config_module(str(REPO / 'sgpo_jax' / 'configs' / 'regimes.py'))
DEFAULT_OUT = Path(__file__).resolve().parent / 'results' / 'scaling_law_stop_transfer'
FRACTIONS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
CONFIDENCES = (0.8, 0.9, 0.95)
BOOTSTRAP = 2000


def _fraction_sets() -> list[tuple[float, ...]]:
  """Checkpoint sets: every 0.05 or 0.1 from a start in 0.3-0.5 to an end in 0.6-0.8."""
  sets = []
  for start in (0.3, 0.35, 0.4, 0.45, 0.5):
    for end in (0.6, 0.7, 0.8):
      for spacing in (0.05, 0.1):
        chosen = tuple(f for f in FRACTIONS if start - 1e-9 <= f <= end + 1e-9
                       and abs(round((f - start) / spacing) * spacing - (f - start)) < 1e-9)
        if chosen not in sets:
          sets.append(chosen)
  return sets


GRID = [dict(fractions=fractions, confidence=confidence, delta=delta, peak_tolerance=tolerance)
        for fractions in _fraction_sets() for confidence in CONFIDENCES
        for delta in (0.02, 0.025, 0.03, 0.035, 0.04, 0.05) for tolerance in (None, 0.01)]


def _features(runs: list[dict[str, Any]], fraction: float) -> list[PrefixFeatures]:
  return [prefix_features(run['eval'], fraction, forms=(), group=run['group'],
                          regime=run['regime']) for run in runs]


def stop_points(targets: list[dict[str, Any]], design: list[dict[str, Any]]
                ) -> list[dict[float, dict[str, Any]]]:
  """Per target run and FRACTIONS fraction: step, reading, best reading so far and upper
  bounds per CONFIDENCES, forecast from the design runs other than the target's seed group."""
  design_seed = {run['name']: run['seed_group'] for run in design}
  points: list[dict[float, dict[str, Any]]] = [{} for _ in targets]
  for fraction in FRACTIONS:
    pool_all = _features(design, fraction)
    pools: dict[str, CalibrationSet] = {}
    for i, (run, target) in enumerate(zip(targets, _features(targets, fraction))):
      seed = run['seed_group']
      if seed not in pools:
        pools[seed] = CalibrationSet([r for r in pool_all if design_seed[r.run] != seed],
                                     'design runs')
      points[i][fraction] = cal.checkpoint(run['eval'], target, pools[seed], CONFIDENCES)
  return points


def calibration_set(design: list[dict[str, Any]], exclude_seed: str = '', *,
                    config_scores_min: int = 0,
                    source: str = 'the 80 design runs of '
                                  'studies/scaling_law/results/scaling_law_stop_transfer'
                    ) -> CalibrationSet:
  """The design runs' prefix features at every FRACTIONS fraction (minus one seed group): what
  the trainer's rule 'bound' forecasts from (`early_stop.STOP_CALIBRATION_PATH` is this set
  of the plan's design runs; `source` says which runs). config_scores_min > 0: intervals per
  config where the config has that many runs (`CalibrationSet.config_scores_min`, stored in
  the set's file)."""
  kept = [run for run in design if run['seed_group'] != exclude_seed]
  return CalibrationSet([record for fraction in FRACTIONS for record in _features(kept, fraction)],
                        source, config_scores_min=config_scores_min)


def trainer_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
  """The run's metrics rows as the trainer logs them: one per step with its FLOPs so far (and
  a `reward_mean` key, which marks a training step), the eval reading on the steps it has."""
  rows: dict[int, dict[str, Any]] = {}
  reward: RunRecord | None = run.get('reward')
  if reward is not None:
    for step, value, flops in zip(reward.steps, reward.values, reward.flops_total):
      rows[int(step)] = {'step': int(step), 'reward_mean': float(value),
                         'flops_total': float(flops)}
  record: RunRecord = run['eval']
  for step, value in zip(record.steps, record.values):
    rows.setdefault(int(step), {'step': int(step)})['eval_accuracy'] = float(value)
  return [rows[step] for step in sorted(rows)]


@functools.cache
def _planned_length(regime: str) -> tuple[int, float]:
  """(train.num_steps, train.flops_budget) of a comparison regime's config."""
  config = regimes.get_config(f'regime={regime}')
  return int(config.train.num_steps), float(config.train.flops_budget)


def bound_stopper(run: dict[str, Any], calibration: CalibrationSet, setting: dict[str, Any],
                  *, budgeted: bool = True) -> BoundStopper:
  """The trainer's `BoundStopper` for `run` with `setting`, its regime's planned steps and
  FLOPs budget (budgeted=False, or a regime without a config: the run's actual length)."""
  record: RunRecord = run['eval']
  num_steps, budget = int(record.total_steps), 0.0
  if budgeted and run['regime'] in regimes.REGIMES:
    num_steps, budget = _planned_length(run['regime'])
  return BoundStopper({'enabled': True, 'bound_fractions': setting['fractions'],
                       'bound_confidence': setting['confidence'],
                       'bound_delta': setting['delta'],
                       'peak_tolerance': setting['peak_tolerance']},
                      num_steps, calibration=calibration, flops_budget=budget,
                      method=record.method, regime=run['regime'], group=run['group'],
                      run=run['name'])


def trainer_outcome(run: dict[str, Any], calibration: CalibrationSet, setting: dict[str, Any],
                    *, budgeted: bool = True) -> dict[str, Any]:
  """The trainer's `BoundStopper` fed the run's rows in turn (`trainer_rows`), with its
  regime's planned steps and FLOPs budget (so the run length is projected from the FLOPs per
  step so far, as in training; budgeted=False: the run's actual length), scored as
  `cal.bound_outcome`."""
  record: RunRecord = run['eval']
  stopper = bound_stopper(run, calibration, setting, budgeted=budgeted)
  for row in trainer_rows(run):
    decision = stopper.update_row(row)
    if decision is not None and decision.should_stop:
      return {'stop_step': float(row['step']), 'saved': 1 - row['step'] / record.total_steps,
              'loss': record.actual_final - row['eval_accuracy']}
  return {'stop_step': None, 'saved': 0.0, 'loss': 0.0}


def grid_entries(evals: list[dict[str, Any]], points: list[dict[float, dict[str, Any]]]
                 ) -> list[dict[str, Any]]:
  entries = []
  for setting in GRID:
    outcomes = [cal.bound_outcome(run['eval'], row, setting) for run, row in zip(evals, points)]
    entries.append({'setting': setting, 'outcomes': outcomes, **cal.summarise_stops(outcomes)})
  return entries


def choose(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
  """The entry saving most among those meeting the targets (ties: the first in GRID)."""
  best = None
  for entry in entries:
    if cal.meets(entry) and (best is None or entry['saved_mean'] > best['saved_mean']):
      best = entry
  return best


def scored(evals: list[dict[str, Any]], outcomes: list[dict[str, Any]], rng: np.random.Generator
           ) -> dict[str, Any]:
  """Summary of per-run outcomes with bootstrap 95% intervals over seed groups."""
  if all('run' in o for o in outcomes):  # choose_out_of_sample's rows: ordered by group
    by_name = {run['name']: run for run in evals}
    pairs = [(by_name[o['run']], o) for o in outcomes]
  else:
    pairs = list(zip(evals, outcomes))
  rows = [dict(o, run=run['name'], regime=run['regime'], seed_group=run['seed_group'])
          for run, o in pairs]
  summary = cal.summarise_stops(rows)
  seeds = sorted({row['seed_group'].split('/')[-1] for row in rows})
  by_seed = {s: [r for r in rows if r['seed_group'].endswith('/' + s)] for s in seeds}
  draws = []
  for _ in range(BOOTSTRAP if len(seeds) > 1 else 0):
    picked = rng.choice(len(seeds), size=len(seeds), replace=True)
    draws.append(cal.summarise_stops([r for i in picked for r in by_seed[seeds[i]]]))
  summary['ci95'] = {key: [float(np.percentile([d[key] for d in draws], 2.5)),
                           float(np.percentile([d[key] for d in draws], 97.5))] if draws else None
                     for key in ('saved_mean', 'loss_mean', 'loss_max')}
  summary['per_regime'] = {regime: cal.summarise_stops([r for r in rows if r['regime'] == regime])
                           for regime in sorted({r['regime'] for r in rows})}
  summary['worst_runs'] = sorted(rows, key=lambda r: -r['loss'])[:3]
  return summary


def _jsonable(setting: dict[str, Any] | None) -> dict[str, Any] | None:
  return None if setting is None else {**setting, 'fractions': list(setting['fractions'])}


def _line(label: str, s: dict[str, Any]) -> str:
  ci = s.get('ci95') or {}
  def with_ci(key, scale, fmt):
    value = fmt.format(s[key] * scale)
    if ci.get(key):
      value += ' [' + ', '.join(fmt.format(x * scale) for x in ci[key]) + ']'
    return value
  worst = ', '.join(f"{r['run']} {100 * r['loss']:.1f}" for r in s.get('worst_runs', []))
  regimes = '; '.join(f"{k}: {100 * v['saved_mean']:.1f}% saved, worst {100 * v['loss_max']:.2f}"
                      for k, v in s.get('per_regime', {}).items())
  return (f"| {label} | {s['n']} | {s['stopped']} | {with_ci('saved_mean', 100, '{:.1f}')}% | "
          f"{with_ci('loss_mean', 100, '{:.2f}')} | {100 * s['loss_max']:.2f} | "
          f"{round(s['share_over_max'] * s['n'])} | {regimes} | {worst} |")


HEADER = ('| rule | runs | stopped | steps saved [95% over seeds] | mean loss (points) | '
          'worst loss | runs over 3 | per regime | worst runs |\n' + '|' + '---|' * 9)


def per_run_lines(rows: list[dict[str, Any]]) -> list[str]:
  """The report's per-test-run table of the chosen setting."""
  lines = ['', '## Per test run (chosen setting)', '',
           '| run | steps | stop step | saved | loss (points) |', '|---|---|---|---|---|']
  for row in rows:
    lines.append(f"| {row['run']} | {row['total_steps']} | "
                 f"{'-' if row['stop_step'] is None else int(row['stop_step'])} | "
                 f"{100 * row['saved']:.0f}% | {100 * row['loss']:.2f} |")
  return lines


def write_report(result: dict[str, Any], out: Path) -> Path:
  header = HEADER
  lines = ['# Early-stop rule `bound`: chosen on design runs, tested on fresh ones', '',
           f"Generated by `studies/scaling_law/stop_transfer.py` ({result['command']}). "
           'Pre-registered in `PLAN.md` (same folder). Design: '
           f"{result['design']['n_runs']} runs ({', '.join(result['design']['seeds'])}); "
           + (f"test: {result['test']['n_runs']} runs (seeds "
              f"{', '.join(result['test']['seeds'])}), none of them in the design set."
              if result.get('test') else 'no test runs given (design half only).'),
           '', 'Loss = final accuracy (mean of the last 5% of the run) minus the reading at the '
           'stop; a run that never stops saves 0 and loses 0. Targets: >= 30% of steps saved, '
           'mean loss <= 1 point, worst <= 3. Forecasts come from design runs only, never from '
           "the run's own seed.", '',
           f"Chosen on the design runs ({len(GRID)} settings): `{result['design']['chosen']}`.",
           '', '## Design runs', '', header]
  design = result['design']
  if design['chosen_summary']:
    lines.append(_line('chosen, in sample', design['chosen_summary']))
  lines.append(_line('chosen without each seed, scored on it (nested)', design['nested']))
  lines.append(_line('setting of the first fresh test', design['plan_summary']))
  lines.append(_line('trend, trainer default', design['trend_summary']))
  if result.get('test'):
    test = result['test']
    lines += ['', '## Test runs', '', header]
    if test['chosen_summary']:
      lines.append(_line('**chosen on design**', test['chosen_summary']))
    lines.append(_line('setting of the first fresh test', test['plan_summary']))
    lines.append(_line('trend, trainer default', test['trend_summary']))
    if test.get('trainer_summary'):
      lines += ['', ('Pre-registered in this test\'s plan' if result.get('trainer_in_plan')
                     else 'Added after the test (not in the plan)')
                + ': the chosen setting as the trainer '
                'runs it (`early_stop.BoundStopper`, rule `bound`, fed the run\'s metrics rows '
                'in turn with `sgpo_jax/scaling_law/stop_calibration_runs.json.xz`, the design '
                'runs, and its regime\'s FLOPs budget, so the run length is projected from the '
                'FLOPs per step so far): it decides at the first reading at or after each '
                'fraction, forecasting from every reading so far, where the replay above takes '
                'the last reading at or before and the run\'s actual length.', '', header,
                _line('chosen, as the trainer runs it', test['trainer_summary']),
                _line("the same, with the run's actual length (no projection)",
                      test['trainer_actual_length_summary']),
                _line("the same, the run's config left out of the calibration set",
                      test['trainer_config_out_summary'])]
    lines += per_run_lines(test['chosen_rows'])
  path = out / 'results.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


def _load(paths: list[Path]) -> list[dict[str, Any]]:
  runs = []
  for path in paths:
    runs += (cal.load_trajectories(path) if path.is_file()
             else cal.load_runs([path]))
  return [run for run in runs if 'eval' in run and run['eval'].steps.size >= 4]


def _seeds(runs: list[dict[str, Any]]) -> list[str]:
  return sorted({run['seed_group'].split('/')[-1] for run in runs},
                key=lambda s: int(s.removeprefix('seed')) if s[4:].isdigit() else 0)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--design', nargs='+', type=Path, required=True,
                      help='trajectories JSON files or run folders the rule is chosen on')
  parser.add_argument('--test', nargs='+', type=Path, default=[],
                      help='trajectories JSON files or run folders it is tested on')
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--seed', type=int, default=0, help='bootstrap seed')
  parser.add_argument('--write-calibration', type=Path, default=None, metavar='JSON',
                      help="also write the design runs' calibration set for the trainer's "
                           'rule bound (the shipped one: sgpo_jax/scaling_law/'
                           'stop_calibration_runs.json.xz)')
  parser.add_argument('--trainer-in-plan', action='store_true',
                      help="the trainer replay is one of the plan's measures (says so in the "
                           'report; the second fresh test added it after the test)')
  args = parser.parse_args(argv)
  start = time.time()
  design, test = _load(args.design), _load(args.test)
  if not design:
    parser.error(f'no finished runs with eval readings in --design {args.design}')
  shared = {r['seed_group'] for r in design} & {r['seed_group'] for r in test}
  if shared:
    parser.error(f'seed groups {sorted(shared)[:5]} are in both --design and --test: '
                 'the test must use seeds the design never saw')
  rng = np.random.default_rng(args.seed)
  shipped = calibration_set(design)  # what the trainer forecasts from (--write-calibration)
  entries = grid_entries(design, stop_points(design, design))
  best = choose(entries)
  chosen = best['setting'] if best else None
  nested = cal.choose_out_of_sample(design, entries, cal.meets, key='seed_group')
  plan_entry = next(e for e in entries if e['setting'] == {**PLAN_SETTING})
  result: dict[str, Any] = {
      'command': ' '.join(['python -m studies.scaling_law.stop_transfer',
                           '--design', *map(str, args.design)]
                          + (['--test', *map(str, args.test)] if args.test else [])),
      'grid_size': len(GRID), 'trend_default': cal.DEFAULT_TREND,
      'trainer_in_plan': args.trainer_in_plan,
      'plan_setting': _jsonable(PLAN_SETTING),
      'design': {
          'n_runs': len(design), 'seeds': _seeds(design), 'chosen': _jsonable(chosen),
          'chosen_summary': scored(design, best['outcomes'], rng) if best else None,
          'nested': scored(design, nested, rng),
          'plan_summary': scored(design, plan_entry['outcomes'], rng),
          'trend_summary': scored(design, [cal.stop_outcome(r['eval'], cal.DEFAULT_TREND)
                                           for r in design], rng),
          'frontier': [{'setting': _jsonable(e['setting']),
                        **{k: v for k, v in e.items() if k not in ('setting', 'outcomes')}}
                       for e in sorted(entries, key=lambda e: -e['saved_mean'])
                       if cal.meets(e)][:20]}}
  if test:
    points = stop_points(test, design)
    def outcomes(setting):
      return [cal.bound_outcome(run['eval'], row, setting) for run, row in zip(test, points)]
    chosen_outcomes = outcomes(chosen) if chosen else None
    result['test'] = {
        'n_runs': len(test), 'seeds': _seeds(test),
        'chosen_summary': scored(test, chosen_outcomes, rng) if chosen else None,
        'plan_summary': scored(test, outcomes(PLAN_SETTING), rng),
        'trend_summary': scored(test, [cal.stop_outcome(r['eval'], cal.DEFAULT_TREND)
                                       for r in test], rng),
        'trainer_summary': scored(test, [trainer_outcome(r, shipped, chosen) for r in test],
                                  rng) if chosen else None,
        # A new config: none of its runs in the calibration set, the rest of its regime's are.
        'trainer_config_out_summary': scored(test, [trainer_outcome(r, CalibrationSet(
            [x for x in shipped.records if x.group != r['group']], shipped.source), chosen)
            for r in test], rng) if chosen else None,
        # The trainer's rule with the run's actual length: what the FLOPs-budget projection costs.
        'trainer_actual_length_summary': scored(test, [
            trainer_outcome(r, shipped, chosen, budgeted=False) for r in test],
            rng) if chosen else None,
        'chosen_rows': [dict(o, run=r['name'], total_steps=int(r['eval'].total_steps))
                        for r, o in zip(test, chosen_outcomes or [])]}
  args.out.mkdir(parents=True, exist_ok=True)
  if args.write_calibration:
    shipped.save(args.write_calibration)
  for half in ('design', 'test'):
    for key in ('chosen_summary', 'nested', 'plan_summary', 'trend_summary', 'trainer_summary',
                'trainer_actual_length_summary', 'trainer_config_out_summary'):
      block = result.get(half, {}).get(key)
      if block:
        for row in block['worst_runs']:
          row['setting'] = _jsonable(row.get('setting'))
  path = write_report(result, args.out)
  (args.out / 'results.json').write_text(json.dumps(result, indent=1, default=str))
  print(f'wrote {path} in {time.time() - start:.0f}s', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
