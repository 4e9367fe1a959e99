"""What issue 18's remaining targets' own measurements allow: the noise floor under each target,
next to what the shipped forecaster and the trainer's early stop reach on the pooled held-out
runs of `scaling_law_pooled.py`.

    PYTHONPATH=. python experiments/scaling_law_floors.py \
        [--out experiments/results/scaling_law_floors] [--seed 0] [--draws 4000]

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

Early stop's worst case. Loss = the run's final accuracy (mean of its final window) minus the
one reading at the stop. How large is that for a rule that loses nothing in truth? In the runs
evaluated densely at the end (>= MIN_PLATEAU_READINGS readings in the final window: the
fifth to seventh tests), each final-window reading stands for a stop on the run's own plateau:
its "loss" is the mean of the window's other readings minus that reading (points). Drawing one
such reading per run, for n runs drawn with replacement, gives the worst case and the count
over 3 points that a zero-loss stop would show on a test of n runs. The plateau's fluctuation
stands in for the fluctuation at a mid-run stop, where the policy still moves (no smaller, as
a rule). The trainer's rule on the same runs (the pooled report's rows) is set beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaling_law_pooled as pooled
import scaling_law_reward_noise as reward_noise

from sgpo_jax.scaling_law.runs import RunRecord

DEFAULT_OUT = pooled.RESULTS / 'scaling_law_floors'
POOLED_JSON = pooled.DEFAULT_OUT / 'results.json'
MIN_PLATEAU_READINGS = 3  # below this a final window holds no spread to measure
# Beyond this lag-1 autocorrelation of the late readings the floor assumes independence it does
# not have: it is reported, not used to rule a target out.
MAX_FLOOR_RHO = 0.2
TARGET_ERROR = 0.03  # issue 18: forecast mean |error| <= 0.03 ...
TARGET_RATIO = 0.5  # ... and <= 0.5x the flat baseline's
TARGET_WORST = 3.0  # early stop: worst loss <= 3 points
TEST_SIZES = (80, 240, 480)  # one fresh test, the three dense tests, the pooled balanced runs


def plateau_losses(record: RunRecord) -> np.ndarray | None:
  """Points each final-window reading sits below the mean of the window's other readings: the
  loss a stop at that reading would measure if it lost nothing in truth (None: fewer than
  MIN_PLATEAU_READINGS readings)."""
  window = np.asarray(record.final_readings, float)
  if window.size < MIN_PLATEAU_READINGS:
    return None
  others_mean = (window.sum() - window) / (window.size - 1)
  return 100.0 * (others_mean - window)


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
    out.append({'run': row['run'], 'metric': row['metric'], 'method': str(row['method']),
                'regime': row['regime'], 'err': row['group']['err'], 'flat_err': row['flat_err'],
                'floor': noise['floor'], 'sigma': noise['sigma'], 'n_final': noise['n_final'],
                'rho': noise['rho']})
  return out


def reward_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """Mean error, flat error and floor; err / floor; the ratio err / flat and the oracle's
  floor / flat; whether the floor alone rules out each target."""
  err = float(np.mean([r['err'] for r in rows]))
  flat = float(np.mean([r['flat_err'] for r in rows]))
  floor = float(np.mean([r['floor'] for r in rows]))
  return {'runs': len(rows), 'err': err, 'flat': flat, 'floor': floor,
          'err_over_floor': err / floor, 'ratio': err / flat, 'oracle_ratio': floor / flat,
          'rho_median': float(np.nanmedian([r['rho'] for r in rows])),
          'floor_holds': abs(float(np.nanmedian([r['rho'] for r in rows]))) <= MAX_FLOOR_RHO,
          'error_target_out_of_reach': floor > TARGET_ERROR,
          'ratio_target_out_of_reach': floor / flat > TARGET_RATIO}


def reward_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """`reward_summary` per metric: all runs, per regime, per method."""
  out = []
  for metric in sorted({r['metric'] for r in rows}):
    of_metric = [r for r in rows if r['metric'] == metric]
    groups = [('all', of_metric)]
    groups += [(regime, [r for r in of_metric if r['regime'] == regime])
               for regime in sorted({r['regime'] for r in of_metric})]
    groups += [(f'method {m}', [r for r in of_metric if r['method'] == m])
               for m in sorted({r['method'] for r in of_metric})]
    out += [{'metric': metric, 'label': label, **reward_summary(members)}
            for label, members in groups if members]
  return out


def _seed_label(run: str) -> str:
  """'seed19' for 'default/dapo_g4_seed19' (the pooled report's seed labels)."""
  return 'seed' + run.rsplit('_seed', 1)[1]


def verdict(summary: dict[str, Any], target: str) -> str:
  """'met', or why not: 'missed, floor above it' when even the late-level oracle misses it (and
  the floor holds), else 'missed'."""
  value, limit = ((summary['err'], TARGET_ERROR) if target == 'error'
                  else (summary['ratio'], TARGET_RATIO))
  if value <= limit:
    return 'met'
  if summary['floor_holds'] and summary[f'{target}_target_out_of_reach']:
    return 'missed, floor above it'
  return 'missed'


def report(result: dict[str, Any]) -> str:
  lines = ['# Issue 18: what the targets\' own measurements allow', '',
           f"Generated by `{result['command']}`. Nothing is fitted or chosen here: the pooled "
           'report\'s per-run rows (`scaling_law_pooled/results.json`) and the committed '
           'trajectories of the tests it pooled. The method is in the script\'s docstring.', '',
           '## Reward forecasts from 30%: the error against the final value\'s noise floor', '',
           'Rows: the pooled report\'s forecasts (shipped calibration set, held-out runs, '
           f"{result['reward_left_out']} left out for too few late readings). err: the shipped "
           'forecaster\'s mean |error|; floor: the mean |error| of a forecaster that knows each '
           'run\'s late level exactly; oracle ratio = floor / flat. Targets: error <= '
           f'{TARGET_ERROR} and ratio <= {TARGET_RATIO}. "Floor above it": even that oracle '
           'would miss the target on these runs; where the late readings are autocorrelated '
           f'(|rho| > {MAX_FLOOR_RHO}) the floor assumes an independence they lack and rules '
           'nothing out.', '',
           '| metric | runs | n | flat | err | floor | err / floor | ratio | oracle ratio | '
           'rho | error target | ratio target |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for s in result['reward']:
    lines.append(f"| {s['metric']} | {s['label']} | {s['runs']} | {s['flat']:.4f} | "
                 f"**{s['err']:.4f}** | {s['floor']:.4f} | {s['err_over_floor']:.2f} | "
                 f"{s['ratio']:.2f}x | {s['oracle_ratio']:.2f}x | {s['rho_median']:.2f} | "
                 f"{verdict(s, 'error')} | {verdict(s, 'ratio')} |")
  plateau = result['plateau']
  lines += ['', '## Early stop: the worst case a stop that loses nothing would measure', '',
            f"{plateau['all']['runs']} runs with >= {MIN_PLATEAU_READINGS} readings in the "
            f"final window ({plateau['all']['readings']} plateau readings). Loss of a stop at a "
            'plateau reading = mean of the window\'s other readings minus it (points).', '',
            '| runs | n | readings | sd | largest | share over 3 |', '|---|---|---|---|---|---|']
  for label, s in plateau['groups'].items():
    lines.append(f"| {label} | {s['runs']} | {s['readings']} | {s['sd']:.2f} | {s['max']:.2f} | "
                 f"{100 * s['share_over']:.1f}% |")
  lines += ['', f"A zero-loss stop on a test of n runs ({result['draws']} draws, seed "
            f"{result['seed']}):", '',
            '| n runs | worst, median [5%, 95%] | P(worst > 3) | runs over 3, mean |',
            '|---|---|---|---|']
  for s in plateau['worst_of_n']:
    lines.append(f"| {s['n']} | {s['worst_median']:.2f} [{s['worst_p05']:.2f}, "
                 f"{s['worst_p95']:.2f}] | {100 * s['p_worst_over']:.0f}% | "
                 f"{s['mean_over']:.1f} |")
  rule = result['rule']
  lines += ['', 'The trainer\'s `bound` rule (current setting and shipped set) as measured on '
            'the same runs, and on the pooled balanced runs of every test:', '',
            '| runs | n | worst | over 3 | share over 3 |', '|---|---|---|---|---|']
  for label, s in rule.items():
    lines.append(f"| {label} | {s['runs']} | {s['worst']:.2f} | {s['over']} | "
                 f"{100 * s['share_over']:.1f}% |")
  lines += ['', 'Read: a stop that lost nothing in truth would measure a worst case over 3 points '
            'on most tests of this size, because one reading of a policy on its plateau '
            'scatters by the sd above around the mean of its neighbours. A measured share over '
            '3 below the zero-loss stop\'s is no evidence of loss beyond that scatter (the rule '
            'stops only near the best reading so far, which picks readings above the plateau '
            'as often as chance allows).', '']
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
    parser.error(f'--pooled {args.pooled}: not found (run experiments/scaling_law_pooled.py)')
  started = time.time()
  pooled_result = json.loads(args.pooled.read_text())
  runs = pooled.load_tests()
  rng = np.random.default_rng(args.seed)

  rewards = {r['name']: r['reward'] for r in runs if 'reward' in r}
  reward_cli = [r for r in pooled_result['cli']['rows'] if r['metric'] != 'eval_accuracy']
  rows = reward_rows(reward_cli, rewards)

  losses = {r['name']: plateau_losses(r['eval']) for r in runs if 'eval' in r}
  dense = {name: value for name, value in losses.items() if value is not None}
  stop_rows = {r['run']: r for r in pooled_result['stop']['bound_rows']}
  balanced = set(pooled_result['stop']['balanced_seeds'])
  regime_of = {r['name']: r['regime'] for r in runs}
  groups = {'all': plateau_summary(list(dense.values()))}
  for regime in sorted({regime_of[name] for name in dense}):
    groups[regime] = plateau_summary([v for k, v in dense.items() if regime_of[k] == regime])
  in_both = [name for name in dense if name in stop_rows]
  result = {
      'command': 'PYTHONPATH=. python experiments/scaling_law_floors.py'
                 + (f' --seed {args.seed}' if args.seed else '')
                 + (f' --draws {args.draws}' if args.draws != 4000 else ''),
      'seed': args.seed, 'draws': args.draws,
      'reward': reward_groups(rows), 'reward_left_out': len(reward_cli) - len(rows),
      'reward_rows': rows,
      'plateau': {'all': groups['all'], 'groups': groups,
                  'worst_of_n': [worst_of_n(list(dense.values()), n, args.draws, rng)
                                 for n in TEST_SIZES]},
      'rule': {'dense-final runs (the same)': rule_summary(
                   [100 * stop_rows[name]['loss'] for name in in_both]),
               'pooled balanced runs': rule_summary(
                   [100 * r['loss'] for r in pooled_result['stop']['bound_rows']
                    if _seed_label(r['run']) in balanced])},
  }
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / 'results.json').write_text(json.dumps(result, indent=1))
  (args.out / 'results.md').write_text(report(result))
  print(report(result))
  print(f'written to {args.out} in {time.time() - started:.0f} s', file=sys.stderr)
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
