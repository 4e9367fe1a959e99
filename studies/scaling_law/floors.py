"""What issue 18's remaining targets' own measurements allow: the noise floor under each target,
next to what the shipped forecaster and the trainer's early stop reach on the pooled held-out
runs of `scaling_law_pooled.py`.

    python -m studies.scaling_law.floors \
        [--out studies/scaling_law/results/scaling_law_floors] [--seed 0] [--draws 4000]

Nothing is fitted or chosen here. It reads the pooled report's per-run rows
(`scaling_law_pooled/results.json`) and the committed trajectories of the tests it pooled.

Reward forecasts (`reward_mean`, sGPO's `reward_over_profile`). A run's final value is the mean
of its readings in the last 5% of its steps (`runs.ACTUAL_FINAL_WINDOW`), ~5-8 noisy batch
rewards. `scaling_law_reward_noise.run_noise` gives each run's floor: the mean |error| of a
forecaster that knew the run's late level exactly. Per method and regime the table sets the
shipped forecaster's error beside the mean floor (err / floor near 1: nothing is left to
gain) and the floor beside the flat baseline's error (floor / flat over 0.5: not even that
oracle meets the ratio target). Where the late steps are autocorrelated (rho far from 0,
sGPO's curriculum buckets) the floor is only indicative.

Early stop's worst case: how much of it is the noise of one reading? Loss = the run's final
accuracy (mean of its final window) minus the one reading at the stop. In the runs evaluated
densely at the end (>= MIN_PLATEAU_READINGS readings in the final window: the fifth to
seventh tests), each final-window reading stands for a stop on the run's own plateau, i.e. one
that loses nothing in truth: its measured loss is the mean of the window's other readings
minus that reading (points). Two such stops:
- unguarded: any plateau reading;
- guarded, as the trainer's rules stop: only a reading within `peak_tolerance` (1 point) of the
  best reading so far (`early_stop.below_peak`), which drops the dips.
Drawing one reading per run, for n runs drawn with replacement, gives the worst case and the
count over 3 points such a stop would show on a test of n runs (with 260 runs in the pool, the
worst of 480 draws is mostly the pool's own largest value). The trainer's `bound` rule on the
same runs (the pooled report's rows) is set beside them: a guarded zero-loss stop's worst
case far under 3 points means the rule's losses over 3 are real late gains, not reading noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sgpo_jax.scaling_law.early_stop import below_peak
from sgpo_jax.scaling_law.runs import RunRecord
from studies.scaling_law import calibrate as cal
from studies.scaling_law import pooled as pooled
from studies.scaling_law import reward_noise as reward_noise

DEFAULT_OUT = pooled.RESULTS / 'scaling_law_floors'
POOLED_JSON = pooled.DEFAULT_OUT / 'results.json'
MIN_PLATEAU_READINGS = 3  # below this a final window holds no spread to measure
PEAK_TOLERANCE = 0.01  # the trainer's default train.early_stop.peak_tolerance
# Beyond this lag-1 autocorrelation of the late readings the floor assumes independence it does
# not have: it is reported, not used to rule a target out.
MAX_FLOOR_RHO = 0.2
TARGET_ERROR = 0.03  # issue 18: forecast mean |error| <= 0.03 ...
TARGET_RATIO = 0.5  # ... and <= 0.5x the flat baseline's
TARGET_WORST = 3.0  # early stop: worst loss <= 3 points
TEST_SIZES = (80, 240, 480)  # one fresh test, the three dense tests, the pooled balanced runs


def plateau_losses(record: RunRecord, peak_tolerance: float | None = None
                   ) -> np.ndarray | None:
  """Points each final-window reading sits below the mean of the window's other readings: the
  loss a stop at that reading would measure if it lost nothing in truth. With
  `peak_tolerance`, only the readings a guarded rule may stop at (`early_stop.below_peak`
  false: within the tolerance of the best reading so far). None: fewer than
  MIN_PLATEAU_READINGS readings in the window, or none the guard allows."""
  window = np.asarray(record.final_readings, float)
  if window.size < MIN_PLATEAU_READINGS:
    return None
  others_mean = (window.sum() - window) / (window.size - 1)
  losses = 100.0 * (others_mean - window)
  if peak_tolerance is None:
    return losses
  first = record.values.size - window.size
  allowed = np.array([not below_peak(record.steps[:i + 1], record.values[:i + 1], peak_tolerance)
                      for i in range(first, record.values.size)])
  return losses[allowed] if allowed.any() else None


def worst_of_n(losses_by_run: Sequence[np.ndarray], n: int, draws: int,
               rng: np.random.Generator, target: float = TARGET_WORST) -> dict[str, float]:
  """A zero-loss stop on a test of `n` runs, `draws` times: runs drawn with replacement, one
  plateau reading each. The worst loss (median, 5-95% range), P(worst > target) and the mean
  count of runs over target."""
  if not losses_by_run:
    raise ValueError('worst_of_n needs at least one run with plateau readings')
  if n < 1 or draws < 1:
    raise ValueError(f'n={n!r}, draws={draws!r}: both must be >= 1')
  worst = np.empty(draws)
  over = np.empty(draws)
  for d in range(draws):
    picks = np.array([losses_by_run[i][rng.integers(losses_by_run[i].size)]
                      for i in rng.integers(len(losses_by_run), size=n)])
    worst[d] = picks.max()
    over[d] = np.sum(picks > target + 1e-9)
  return {'n': n, 'draws': draws, 'worst_median': float(np.median(worst)),
          'worst_p05': float(np.quantile(worst, 0.05)),
          'worst_p95': float(np.quantile(worst, 0.95)),
          'p_worst_over': float(np.mean(worst > target + 1e-9)),
          'mean_over': float(np.mean(over))}


def plateau_summary(losses: Sequence[np.ndarray]) -> dict[str, float]:
  """Over every plateau reading of `losses` (points): count, sd, largest, share over 3."""
  values = np.concatenate(losses)
  return {'runs': len(losses), 'readings': int(values.size), 'sd': float(np.std(values)),
          'max': float(values.max()), 'share_over': float(np.mean(values > TARGET_WORST + 1e-9))}


def rule_summary(losses_points: Sequence[float]) -> dict[str, float]:
  """The trainer's rule on the same runs: its measured worst loss and count over 3 (points)."""
  values = np.asarray(losses_points, float)
  over = int(np.sum(values > TARGET_WORST + 1e-9))
  return {'runs': int(values.size), 'worst': float(values.max()), 'over': over,
          'share_over': over / values.size}


def reward_rows(cli_rows: Sequence[dict[str, Any]], records: dict[str, RunRecord]
                ) -> list[dict[str, Any]]:
  """Each reward forecast of the pooled report with its run's noise floor (runs with too few
  late readings for `run_noise` are left out, and counted by the caller)."""
  out = []
  for row in cli_rows:
    if row['metric'] == 'eval_accuracy':
      continue
    record = records.get(row['run'])
    if record is None or record.metric != row['metric']:
      raise ValueError(f"{row['run']}: the trajectories hold no {row['metric']} record for "
                       'this pooled row (regenerate scaling_law_pooled first)')
    noise = reward_noise.run_noise(record)
    if noise is None:
      continue
    out.append({'run': row['run'], 'seed': f"seed{cal.seed_number(row['run'])}", 'metric': row['metric'],
                'method': str(row['method']), 'regime': row['regime'],
                'err': row['group']['err'], 'flat_err': row['flat_err'],
                'floor': noise['floor'], 'sigma': noise['sigma'], 'n_final': noise['n_final'],
                'rho': noise['rho']})
  return out


def reward_summary(rows: Sequence[dict[str, Any]], rng: np.random.Generator | None = None,
                   draws: int = 1000) -> dict[str, Any]:
  """Mean error, flat error and floor; err / floor; the ratio err / flat and the late-level
  oracle's floor / flat. With `rng`, bootstrap 95% intervals of the floor and the oracle ratio
  resampling seeds (a seed's runs share their start), and whether the floor rules each target
  out: its whole interval above the target, where the floor holds (|rho| <= MAX_FLOOR_RHO)."""
  def point(members: Sequence[dict[str, Any]]) -> tuple[float, float, float]:
    return tuple(float(np.mean([r[key] for r in members]))
                 for key in ('err', 'flat_err', 'floor'))
  err, flat, floor = point(rows)
  rho = float(np.nanmedian([r['rho'] for r in rows]))
  out = {'runs': len(rows), 'err': err, 'flat': flat, 'floor': floor,
         'err_over_floor': err / floor, 'ratio': err / flat, 'oracle_ratio': floor / flat,
         'rho_median': rho, 'floor_holds': abs(rho) <= MAX_FLOOR_RHO}
  if rng is None:
    return out
  seeds = sorted({r['seed'] for r in rows})
  by_seed = {seed: [r for r in rows if r['seed'] == seed] for seed in seeds}
  samples = [point([r for i in rng.integers(len(seeds), size=len(seeds))
                    for r in by_seed[seeds[i]]]) for _ in range(draws)]
  floors = np.array([sample[2] for sample in samples])
  oracle = np.array([sample[2] / sample[1] for sample in samples])
  out['floor_ci95'] = [float(np.percentile(floors, 2.5)), float(np.percentile(floors, 97.5))]
  out['oracle_ratio_ci95'] = [float(np.percentile(oracle, 2.5)),
                              float(np.percentile(oracle, 97.5))]
  out['error_target_out_of_reach'] = out['floor_holds'] and out['floor_ci95'][0] > TARGET_ERROR
  out['ratio_target_out_of_reach'] = (out['floor_holds']
                                      and out['oracle_ratio_ci95'][0] > TARGET_RATIO)
  return out


def reward_groups(rows: Sequence[dict[str, Any]], rng: np.random.Generator
                  ) -> list[dict[str, Any]]:
  """`reward_summary` per metric: all runs, per regime, per method."""
  out = []
  for metric in sorted({r['metric'] for r in rows}):
    of_metric = [r for r in rows if r['metric'] == metric]
    groups = [('all', of_metric)]
    groups += [(regime, [r for r in of_metric if r['regime'] == regime])
               for regime in sorted({r['regime'] for r in of_metric})]
    groups += [(f'method {m}', [r for r in of_metric if r['method'] == m])
               for m in sorted({r['method'] for r in of_metric})]
    out += [{'metric': metric, 'label': label, **reward_summary(members, rng)}
            for label, members in groups if members]
  return out


def verdict(summary: dict[str, Any], target: str) -> str:
  """'met', or why not: 'missed, floor above it' when even the late-level oracle misses it
  (`reward_summary`'s out-of-reach flag: the interval clear of the target, the floor holding),
  else 'missed'."""
  value, limit = ((summary['err'], TARGET_ERROR) if target == 'error'
                  else (summary['ratio'], TARGET_RATIO))
  if value <= limit:
    return 'met'
  if summary.get(f'{target}_target_out_of_reach'):
    return 'missed, floor above it'
  return 'missed'


def plateau_runs(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """Every dense-final run (>= MIN_PLATEAU_READINGS final readings) with its unguarded and
  guarded plateau losses (guarded: None where the guard allows no reading)."""
  out = []
  for run in runs:
    if 'eval' in run and (losses := plateau_losses(run['eval'])) is not None:
      out.append({'name': run['name'], 'regime': run['regime'], 'group': run['group'],
                  'unguarded': losses,
                  'guarded': plateau_losses(run['eval'], PEAK_TOLERANCE)})
  return out


def plateau_groups(dense: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """`plateau_runs`' losses summarised over all runs, per regime and per config."""
  labels = [('all', dense)]
  labels += [(regime, [r for r in dense if r['regime'] == regime])
             for regime in sorted({r['regime'] for r in dense})]
  labels += [(config, [r for r in dense if r['group'] == config])
             for config in sorted({r['group'] for r in dense})]
  out = []
  for label, members in labels:
    guarded = [r['guarded'] for r in members if r['guarded'] is not None]
    out.append({'label': label,
                'unguarded': plateau_summary([r['unguarded'] for r in members]),
                'guarded': plateau_summary(guarded) if guarded else None})
  return out


def report(result: dict[str, Any]) -> str:
  lines = ['# Issue 18: what the targets\' own measurements allow', '',
           f"Generated by `{result['command']}`. Nothing is fitted or chosen here: the pooled "
           'report\'s per-run rows (`scaling_law_pooled/results.json`) and the committed '
           'trajectories of the tests it pooled. The method is in the script\'s docstring.', '',
           '## Reward forecasts from 30%: the error against the final value\'s noise floor', '',
           'Rows: the pooled report\'s forecasts (shipped calibration set, held-out runs, '
           f"{result['reward_left_out']} left out for too few late readings). err: the shipped "
           'forecaster\'s mean |error|; floor: the mean |error| of a forecaster that knows each '
           'run\'s late level exactly; oracle ratio = floor / flat. [bootstrap 95% over seeds] '
           f'Targets: error <= {TARGET_ERROR} and ratio <= {TARGET_RATIO}. "Floor above it": '
           'even that oracle would miss the target (the interval clear of it); where the late '
           f'readings are autocorrelated (|rho| > {MAX_FLOOR_RHO}) the floor assumes an '
           'independence they lack and rules nothing out.', '',
           '| metric | runs | n | flat | err | floor | err / floor | ratio | oracle ratio | '
           'rho | error target | ratio target |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for s in result['reward']:
    floor_ci, oracle_ci = s['floor_ci95'], s['oracle_ratio_ci95']
    lines.append(f"| {s['metric']} | {s['label']} | {s['runs']} | {s['flat']:.4f} | "
                 f"**{s['err']:.4f}** | {s['floor']:.4f} [{floor_ci[0]:.4f}, {floor_ci[1]:.4f}] | "
                 f"{s['err_over_floor']:.2f} | {s['ratio']:.2f}x | {s['oracle_ratio']:.2f}x "
                 f"[{oracle_ci[0]:.2f}, {oracle_ci[1]:.2f}] | {s['rho_median']:.2f} | "
                 f"{verdict(s, 'error')} | {verdict(s, 'ratio')} |")
  plateau = result['plateau']
  overall = plateau['groups'][0]
  lines += ['', '## Early stop: how much of the worst case one reading\'s noise explains', '',
            f"{overall['unguarded']['runs']} runs with >= {MIN_PLATEAU_READINGS} readings in the "
            f"final window ({overall['unguarded']['readings']} plateau readings). Measured loss "
            'of a stop at a plateau reading (zero loss in truth) = mean of the window\'s other '
            'readings minus it (points). Guarded: only readings within '
            f'{100 * PEAK_TOLERANCE:.0f} point of the best so far, where the trainer\'s rules '
            'may stop.', '',
            '| runs | n | sd | largest | over 3 | guarded: runs | readings | largest | over 3 |',
            '|---|---|---|---|---|---|---|---|---|']
  for g in plateau['groups']:
    u, d = g['unguarded'], g['guarded']
    guarded = (f"{d['runs']} | {d['readings']} | {d['max']:.2f} | {100 * d['share_over']:.1f}%"
               if d else '0 | 0 | | ')
    lines.append(f"| {g['label']} | {u['runs']} | {u['sd']:.2f} | {u['max']:.2f} | "
                 f"{100 * u['share_over']:.1f}% | {guarded} |")
  lines += ['', f"Such a stop on a test of n runs (runs drawn with replacement, one reading "
            f"each; {result['draws']} draws, seed {result['seed']}):", '',
            '| stop | n runs | worst, median [5%, 95%] | P(worst > 3) | runs over 3, mean |',
            '|---|---|---|---|---|']
  for kind in ('unguarded', 'guarded'):
    for s in plateau['worst_of_n'][kind]:
      lines.append(f"| {kind} | {s['n']} | {s['worst_median']:.2f} [{s['worst_p05']:.2f}, "
                   f"{s['worst_p95']:.2f}] | {100 * s['p_worst_over']:.0f}% | "
                   f"{s['mean_over']:.1f} |")
  lines += ['', 'The trainer\'s `bound` rule (current setting and shipped set) as measured on '
            'the same runs, and on the pooled balanced runs of every test:', '',
            '| runs | n | worst | over 3 | share over 3 |', '|---|---|---|---|---|']
  for label, s in result['rule'].items():
    lines.append(f"| {label} | {s['runs']} | {s['worst']:.2f} | {s['over']} | "
                 f"{100 * s['share_over']:.1f}% |")
  guarded = plateau['groups'][0]['guarded']
  lines += ['', f"Read: unguarded, one plateau reading's scatter alone would put a worst case "
            'over 3 points on most tests (mostly `default` sGPO, whose accuracy swings with its '
            'curriculum phases). Guarded as the rules stop, it never reaches 3 (largest '
            f"{guarded['max']:.2f}): a `bound` stop that loses over 3 points holds a real late "
            'gain its forecast did not see; the noise of the reading it stopped at is under '
            f"{guarded['max']:.0f} points of it. The worst-case target is a property of the "
            'rule, not of the measurement.', '']
  return '\n'.join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--pooled', type=Path, default=POOLED_JSON,
                      help="scaling_law_pooled.py's results.json")
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--draws', type=int, default=4000)
  args = parser.parse_args(argv)
  if args.draws < 100:
    parser.error(f'--draws={args.draws}: use >= 100 (P(worst > 3) is read to 1%)')
  if not args.pooled.exists():
    parser.error(f'--pooled {args.pooled}: not found (run studies/scaling_law/pooled.py)')
  started = time.time()
  pooled_result = json.loads(args.pooled.read_text())
  runs = pooled.load_tests()
  rng = np.random.default_rng(args.seed)

  rewards = {r['name']: r['reward'] for r in runs if 'reward' in r}
  reward_cli = [r for r in pooled_result['cli']['rows'] if r['metric'] != 'eval_accuracy']
  rows = reward_rows(reward_cli, rewards)

  dense = plateau_runs(runs)
  worst = {kind: [r[kind] for r in dense if r[kind] is not None]
           for kind in ('unguarded', 'guarded')}
  stop_rows = {r['run']: r for r in pooled_result['stop']['bound_rows']}
  balanced = set(pooled_result['stop']['balanced_seeds'])
  result = {
      'command': 'python -m studies.scaling_law.floors'
                 + (f' --seed {args.seed}' if args.seed else '')
                 + (f' --draws {args.draws}' if args.draws != 4000 else ''),
      'seed': args.seed, 'draws': args.draws,
      'reward': reward_groups(rows, rng), 'reward_left_out': len(reward_cli) - len(rows),
      'reward_rows': rows,
      'plateau': {'groups': plateau_groups(dense),
                  'worst_of_n': {kind: [worst_of_n(losses, n, args.draws, rng)
                                        for n in TEST_SIZES]
                                 for kind, losses in worst.items()}},
      'rule': {'dense-final runs (the same)': rule_summary(
                   [100 * stop_rows[r['name']]['loss'] for r in dense if r['name'] in stop_rows]),
               'pooled balanced runs': rule_summary(
                   [100 * r['loss'] for r in pooled_result['stop']['bound_rows']
                    if f"seed{cal.seed_number(r['run'])}" in balanced])},
  }
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / 'results.json').write_text(json.dumps(result, indent=1))
  (args.out / 'results.md').write_text(report(result))
  print(report(result))
  print(f'written to {args.out} in {time.time() - started:.0f} s', file=sys.stderr)
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
