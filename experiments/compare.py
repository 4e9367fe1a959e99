"""sGPO vs GRPO vs DAPO at one total-FLOPs budget, from one shared initial policy.

    python experiments/compare.py                       # main regime, 3 seeds (~30 min, 2 CPUs)
    python experiments/compare.py --block small_pool --num-train 512
    python experiments/compare.py --block sgpo_replay --arms grpo \
        --arm sgpo_replay=sgpo,sgpo.trivial_replay_fraction=0.125
    python experiments/compare.py --smoke --results-dir /tmp/x --runs-dir /tmp/x/runs

Every arm (a method plus overrides) runs for every seed through `experiments/sweep.py`
(one `sgpo_jax.main` process each) with `train.flops_budget` set: the loop stops at the
first step whose cumulative FLOPs (profiling included) reach the budget. All runs share
`warm_start.cache_dir` and `data.seed`, so every method and seed starts from the very same
policy and is evaluated on the very same held-out problems; `seed` only changes the RL
randomness (rollouts, shuffles, sGPO's unsolved subset).

Results land in RESULTS/compare.json (one block per `--block`; the main regime is the
top level, other blocks under 'ablations') and RESULTS/compare.md (regenerated from the
JSON), plus RESULTS/plots/compare_<block>.png.

The "first reaches" rule (noise-robust, seed-mean curve):
- Each run's eval curve (accuracy vs cumulative FLOPs, step 0 included) is linearly
  interpolated onto a common grid of GRID_POINTS + 1 points from 0 to the budget; a run that
  stopped just past the budget contributes its last point at the budget. Per arm, the
  seed-mean curve is the mean over seeds at every grid point.
- target = mean over GRPO seeds of the final eval accuracy (the eval at the budget).
- FLOPs for an arm to reach the target = the first grid point where the seed-mean curve is
  >= target AND the next grid point is too (the last grid point needs no confirmation).
  None if never reached.
- flops_ratio_vs_grpo = FLOPs(GRPO reaches target) / FLOPs(sGPO reaches target); GRPO's own
  number is read off its seed-mean curve by the same rule, so it can be below the budget when
  GRPO plateaus early. flops_ratio_vs_dapo uses DAPO's FLOPs to reach the same target
  (None when DAPO or sGPO never does). A per-seed version (each seed's own curve against the
  same target) is reported alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402

REPO = sweep.REPO
RESULTS = os.path.join(REPO, 'experiments', 'results')
GRID_POINTS = 50
MAIN_BLOCK = 'main'

# The main regime: the embedded default's initial policy and 512 eval problems, RL on a
# 2048-query prefix of its pool, a budget of ~82 GRPO steps of 128 rows (2.19e10 FLOPs
# each). Within it GRPO sees each query ~0.65 times and sGPO (after a 8.1e11-FLOPs profile,
# ~37 GRPO steps) its kept queries ~1-3 times: the LLM-RLVR regime of few epochs.
MAIN_OVERRIDES = {
    'data.rl_pool_size': 2048,
    'train.num_steps': 1000,  # the budget, not the step count, ends every run
    'eval.every_steps': 10,
    'checkpoint.every_steps': 1000,
}
DEFAULT_BUDGET = 1.8e12
DEFAULT_ARMS = {'sgpo': ('sgpo', {}), 'grpo': ('grpo', {}), 'dapo': ('dapo', {})}

# Smoke mode: the tiny model of tests/test_train.py, a few steps, one seed.
SMOKE_OVERRIDES = {
    'model.d_model': 32, 'model.n_layers': 2, 'model.d_ff': 64, 'model.n_heads': 4,
    'model.n_kv_heads': 2, 'model.head_dim': 8, 'data.num_train': 96, 'data.num_eval': 32,
    'warm_start.steps': 30, 'train.rows_per_batch': 16, 'train.num_steps': 40,
    'eval.every_steps': 2, 'checkpoint.every_steps': 100, 'sgpo.unsolved_keep_fraction': 1.0,
    'sgpo.trivial_threshold': 0.99,
}
SMOKE_BUDGET = 1.1e9  # ~14 tiny steps of profiling + ~6 of training


def parse_arm(spec: str) -> tuple[str, tuple[str, dict[str, Any]]]:
  """'name=method,a.b=1,c=x' -> (name, (method, {'a.b': 1, 'c': 'x'}))."""
  name, rest = spec.split('=', 1)
  # Commas inside brackets belong to a value: 'sgpo.group_sizes=(4,8)'.
  method, *pairs = re.split(r',(?![^()\[\]]*[)\]])', rest)
  overrides = {}
  for pair in pairs:
    k, v = pair.split('=', 1)
    overrides[k] = _parse_value(v)
  return name, (method, overrides)


def _parse_value(v: str) -> Any:
  for cast in (int, float):
    try:
      return cast(v)
    except ValueError:
      pass
  return {'True': True, 'False': False}.get(v, v)


def build_entries(arms: dict[str, tuple[str, dict]], seeds: list[int], base: dict[str, Any],
                  budget: float) -> list[dict[str, Any]]:
  entries = []
  for seed in seeds:  # seed-major: a cut-short sweep still has every arm
    for arm, (method, overrides) in arms.items():
      entries.append({'name': f'{arm}_seed{seed}', 'method': method, 'seed': seed, **base,
                      'train.flops_budget': float(budget), **overrides})
  return entries


def read_curve(workdir: str) -> tuple[np.ndarray, np.ndarray]:
  """(cumulative FLOPs, eval accuracy) at every eval of the run, step 0 included."""
  xs, ys = [], []
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    for line in f:
      row = json.loads(line)
      if 'eval_accuracy' in row:
        xs.append(float(row['flops_total']))
        ys.append(float(row['eval_accuracy']))
  return np.asarray(xs), np.asarray(ys)


def on_grid(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
  """Linear interpolation; beyond the last eval (a run stopped by its allocator) -> NaN.

  A run that stopped at most one step past the budget has its last eval at or after the
  grid's end; a run with nothing before a grid point (sGPO's profile) holds its first value.
  """
  out = np.interp(grid, xs, ys)
  out[grid > xs[-1] * (1 + 1e-9)] = np.nan
  if xs[-1] >= grid[-1]:
    out[-1] = ys[-1]  # the eval of the step that crossed the budget is the run's final
  return out


def first_reach(grid: np.ndarray, curve: np.ndarray, target: float) -> float | None:
  """First grid point where curve >= target, confirmed by the next one (rule in the
  module docstring); None if never."""
  ok = np.nan_to_num(curve, nan=-np.inf) >= target - 1e-12
  for i in range(len(grid)):
    if ok[i] and (i == len(grid) - 1 or ok[i + 1]):
      return float(grid[i])
  return None


def analyse(arms: list[str], runs: dict[str, list[str]], budget: float,
            reference: str = 'grpo') -> dict[str, Any]:
  """The comparison numbers of one block from its runs' workdirs ({arm: [workdir per seed]})."""
  grid = np.linspace(0.0, budget, GRID_POINTS + 1)
  curves, finals, per_arm = {}, {}, {}
  for arm in arms:
    seed_curves, seed_finals = [], []
    for workdir in runs[arm]:
      xs, ys = read_curve(workdir)
      seed_curves.append(on_grid(xs, ys, grid))
      seed_finals.append(float(ys[-1]))
    curves[arm] = np.asarray(seed_curves)
    finals[arm] = np.asarray(seed_finals)
  target = float(finals[reference].mean())
  for arm in arms:
    mean_curve = np.nanmean(curves[arm], axis=0) if np.isfinite(curves[arm]).any() else \
        curves[arm][0]
    per_seed = [first_reach(grid, c, target) for c in curves[arm]]
    summaries = []
    for workdir in runs[arm]:
      with open(os.path.join(workdir, 'summary.json')) as f:
        summaries.append(json.load(f))
    per_arm[arm] = {
        'final_accuracy': {'mean': float(finals[arm].mean()), 'std': float(finals[arm].std()),
                           'per_seed': finals[arm].tolist()},
        'initial_accuracy': float(np.mean([s['eval_accuracy_initial'] for s in summaries])),
        'flops_to_target': first_reach(grid, mean_curve, target),
        'flops_to_target_per_seed': per_seed,
        'flops_total_mean': float(np.mean([s['flops']['total'] for s in summaries])),
        'flops_profile_mean': float(np.mean([s['flops']['profile'] for s in summaries])),
        'steps_mean': float(np.mean([s['steps'] for s in summaries])),
        'padding_fraction_mean': float(np.mean([s['padding_fraction'] for s in summaries])),
        'wall_seconds_mean': float(np.mean([s['wall_seconds'] for s in summaries])),
        'mean_curve': [None if not np.isfinite(v) else float(v) for v in mean_curve],
    }
    if summaries[0].get('profile'):
      per_arm[arm]['profile'] = summaries[0]['profile']
  return {'target_accuracy': target, 'grid_flops': grid.tolist(), 'arms': per_arm}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
  if numerator is None or denominator is None or denominator <= 0:
    return None
  return numerator / denominator


def plot(block: dict[str, Any], runs: dict[str, list[str]], path: str) -> None:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  grid = np.asarray(block['grid_flops'])
  fig, ax = plt.subplots(figsize=(7, 4.2))
  for i, (arm, workdirs) in enumerate(runs.items()):
    color = f'C{i}'
    curves = np.asarray([on_grid(*read_curve(w), grid) for w in workdirs])
    mean = np.nanmean(curves, axis=0)
    ax.plot(grid, mean, color=color, lw=2, label=f'{arm} (n={len(workdirs)})')
    if len(workdirs) > 1:
      ax.fill_between(grid, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=color,
                      alpha=0.18, lw=0)
  ax.axhline(block['target_accuracy'], color='k', ls=':', lw=1, label='target (GRPO final)')
  ax.set_xlabel('cumulative training FLOPs (profiling + rollouts + training)')
  ax.set_ylabel('held-out greedy accuracy')
  ax.set_title(f"{block['name']}: mean over seeds, shaded min-max")
  ax.legend(fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _pct(x: float | None) -> str:
  return 'n/a' if x is None else f'{100 * x:.1f}'


def _sci(x: float | None) -> str:
  return 'never' if x is None else f'{x:.3g}'


def _ratio_str(x: float | None) -> str:
  return 'n/a (not reached)' if x is None else f'{x:.2f}x'


def render_block(block: dict[str, Any], heading: str) -> list[str]:
  lines = [f'## {heading}', '', f"Command: `{block['command']}`", '',
           f"Seeds: {block['seeds']}. FLOPs budget: {block['flops_budget']:.3g}. Target "
           f"accuracy (GRPO mean final): {_pct(block['target_accuracy'])}%.", '',
           f"**FLOPs ratio GRPO / sGPO (arm `{block.get('sgpo_arm')}`) to reach the target: "
           f"{_ratio_str(block['flops_ratio_vs_grpo'])}; DAPO / sGPO: "
           f"{_ratio_str(block['flops_ratio_vs_dapo'])}.**", '',
           '| arm | initial acc % | final acc % (mean ± std) | FLOPs to target | GRPO / arm '
           'FLOPs | steps | profile FLOPs | padding | wall s |',
           '|---|---|---|---|---|---|---|---|---|']
  grpo_flops = block['arms'].get('grpo', {}).get('flops_to_target')
  for arm, a in block['arms'].items():
    fa = a['final_accuracy']
    lines.append(f"| {arm} | {_pct(a['initial_accuracy'])} | {_pct(fa['mean'])} ± "
                 f"{_pct(fa['std'])} | {_sci(a['flops_to_target'])} | "
                 f"{_ratio_str(ratio(grpo_flops, a['flops_to_target']))} | {a['steps_mean']:.0f} | "
                 f"{a['flops_profile_mean']:.3g} | {a['padding_fraction_mean']:.1%} | "
                 f"{a['wall_seconds_mean']:.0f} |")
  lines += ['', 'Per-seed FLOPs to target: ' + '; '.join(
      f"{arm}: {', '.join(_sci(x) for x in a['flops_to_target_per_seed'])}"
      for arm, a in block['arms'].items()), '']
  for arm, a in block['arms'].items():
    if 'profile' in a:
      p = a['profile']
      lines.append(f"{arm} profile: {p['n_queries']} queries, {p['n_trivial']} trivial, "
                   f"{p['n_unsolved']} unsolved ({p['n_unsolved_kept']} kept), prompts per "
                   f"pass by G {p['group_size_histogram']}.")
  if block.get('note'):
    lines += ['', block['note']]
  lines += ['', f"![{block['name']}](plots/compare_{block['name']}.png)", '']
  return lines


def render(results: dict[str, Any]) -> str:
  lines = ['# sGPO vs GRPO vs DAPO at equal total FLOPs', '',
           'Generated by `experiments/compare.py` from `compare.json` (edit neither by hand).',
           '', '"First reaches" rule: each run\'s eval curve (accuracy vs cumulative FLOPs, '
           'profiling included) is linearly interpolated onto a grid of '
           f'{GRID_POINTS} equal steps up to the budget and averaged over seeds; the target is '
           "GRPO's mean final accuracy; an arm reaches it at the first grid point where its "
           'seed-mean curve is >= the target and the next grid point is too (the last point '
           "needs no confirmation). GRPO's own FLOPs come from the same rule on its curve. "
           'Same held-out problems and same initial policy (shared warm-start cache, same '
           'data.seed) for every run.', '']
  if 'arms' in results:
    lines += render_block(results, f"Main regime: {results['name']}")
  for name, block in results.get('ablations', {}).items():
    lines += render_block(block, f'Ablation: {name}')
  return '\n'.join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--block', default=MAIN_BLOCK,
                      help="results block name; 'main' is the headline, others are ablations")
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--budget', type=float, default=None, help='total FLOPs per run')
  parser.add_argument('--arms', default='sgpo,grpo,dapo', help='built-in arms to run')
  parser.add_argument('--arm', action='append', default=[],
                      help="extra arm 'name=method,field=value,...' (repeatable)")
  parser.add_argument('--set', action='append', default=[],
                      help="override for every run 'field=value' (repeatable)")
  parser.add_argument('--num-train', type=int, default=None, help='shortcut: data.num_train')
  parser.add_argument('--runs-dir', default=os.path.join(REPO, 'runs', 'compare'))
  parser.add_argument('--results-dir', default=RESULTS)
  parser.add_argument('--cache-dir', default=None,
                      help='shared warm-start cache (default RUNS_DIR/warm_start)')
  parser.add_argument('--note', default='', help='a sentence for the block in compare.md')
  parser.add_argument('--smoke', action='store_true', help='tiny model, 1 seed, few steps')
  args = parser.parse_args()

  base = dict(SMOKE_OVERRIDES if args.smoke else MAIN_OVERRIDES)
  budget = args.budget or (SMOKE_BUDGET if args.smoke else DEFAULT_BUDGET)
  seeds = [0] if args.smoke else [int(s) for s in args.seeds.split(',') if s]
  base['warm_start.cache_dir'] = args.cache_dir or os.path.join(args.runs_dir, 'warm_start')
  if args.num_train:
    base['data.num_train'] = args.num_train
  for kv in args.set:
    k, v = kv.split('=', 1)
    base[k] = _parse_value(v)
  arms = {a: DEFAULT_ARMS[a] for a in args.arms.split(',') if a}
  arms.update(parse_arm(spec) for spec in args.arm)
  if 'grpo' not in arms:
    arms['grpo'] = DEFAULT_ARMS['grpo']  # the reference every block needs

  block_dir = os.path.join(args.runs_dir, args.block)
  entries = build_entries(arms, seeds, base, budget)
  start = time.time()
  sweep.run_sweep(entries, block_dir, log=lambda m: print(m, flush=True))
  runs = {arm: [os.path.join(block_dir, f'{arm}_seed{s}') for s in seeds] for arm in arms}
  block = analyse(list(arms), runs, budget)
  sgpo_arm = next((a for a in arms if arms[a][0] == 'sgpo'), None)
  sg = block['arms'][sgpo_arm]['flops_to_target'] if sgpo_arm else None
  block.update(
      name=args.block, seeds=seeds, flops_budget=budget, sgpo_arm=sgpo_arm,
      command=' '.join(['python', 'experiments/compare.py'] + sys.argv[1:]),
      base_overrides=base, arm_specs={a: {'method': m, 'overrides': o}
                                      for a, (m, o) in arms.items()},
      flops_ratio_vs_grpo=ratio(block['arms']['grpo']['flops_to_target'], sg),
      flops_ratio_vs_dapo=ratio(block['arms']['dapo']['flops_to_target'], sg)
      if 'dapo' in arms else None,
      final_accuracy={a: {k: v['final_accuracy'][k] for k in ('mean', 'std')}
                      for a, v in block['arms'].items()},
      wall_seconds=time.time() - start, note=args.note)
  os.makedirs(args.results_dir, exist_ok=True)
  plot(block, runs, os.path.join(args.results_dir, 'plots', f'compare_{args.block}.png'))

  json_path = os.path.join(args.results_dir, 'compare.json')
  results = {}
  if os.path.exists(json_path):
    with open(json_path) as f:
      results = json.load(f)
  if args.block == MAIN_BLOCK or args.smoke:
    ablations = results.get('ablations', {})
    results = dict(block, ablations=ablations)
  else:
    results.setdefault('ablations', {})[args.block] = block
  with open(json_path, 'w') as f:
    json.dump(results, f, indent=1)
  with open(os.path.join(args.results_dir, 'compare.md'), 'w') as f:
    f.write(render(results))
  print(render(results))


if __name__ == '__main__':
  main()
