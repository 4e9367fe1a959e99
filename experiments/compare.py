"""Compute-saving methods at equal total FLOPs, per regime, with bootstrap intervals.

    python experiments/compare.py --runs-dir /work/compare_runs            # the full protocol
    python experiments/compare.py --regimes paper_like --arms grpo,greso --seeds 0-2
    python experiments/compare.py --analyse-only --runs-dir /work/compare_runs
    python experiments/compare.py --smoke --results-dir /tmp/x --runs-dir /tmp/x/runs

Arms (ARMS, one line each; `--arms` picks, `--arm name=method,field=value,...` adds one):
GRPO, DAPO, sGPO with the paper's settings (G in {2,4,8}, k=8 profile), the best sGPO variant
measured so far (G in {4,8}, k=2 profile), GRESO, Knapsack RL and sgpo_bayes (beyond the
paper: allocators/sgpo_bayes.py). Regimes are the named
config blocks of `configs/default.py:regime=NAME` (pool, initial policy, FLOPs budget, eval
size and cadence). Every run of a regime shares the warm-start cache and data.seed, so every
arm and seed starts from the same policy and is scored on the same held-out problems; `seed`
only changes the RL randomness. The FLOPs budget (profiling included) ends every run.

Runs go seed-major (seed 0 of every regime and arm, then seed 1, ...), one process at a time,
into RUNS_DIR/<regime>/<arm>_seed<s>; a run with summary.json is skipped and an unfinished
one resumes from its checkpoint, so the sweep can be stopped and continued, and other
sweeps can reuse finished runs. `--code-dir` runs a frozen copy of the code (so editing the
checkout does not change a sweep under way). After every run the results are regenerated
from whatever runs have finished: RESULTS/compare.json, RESULTS/compare.md and
RESULTS/plots/compare_<regime>.png.

Measures (per regime and arm; rule and bootstrap in `analyse_regime`):
- target = mean over GRPO seeds of the final eval accuracy (the eval at the budget);
- flops_to_target: the FLOPs from which the seed-mean accuracy curve reaches the target and
  holds it to the budget (`first_reach`), with a bootstrap 95% interval over seeds;
- ratio_vs_grpo / ratio_vs_dapo = reference FLOPs to target / arm FLOPs to target (> 1: the
  arm needs fewer FLOPs), intervals resampling the seeds of both arms and of GRPO's target;
- final_accuracy {mean, std}, auc (mean accuracy over the budget), wall-clock per arm.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402

sys.path.insert(0, sweep.REPO)
from sgpo_jax.config import defaults as default_config  # noqa: E402

REPO = sweep.REPO
RESULTS = os.path.join(REPO, 'experiments', 'results')
# The analysis grid: 0 and GRID_POINTS log-spaced points from budget/GRID_SPAN to the budget
# (1.8% apart: a ratio is resolved to ~2% wherever the target is crossed).
GRID_POINTS = 300
GRID_SPAN = 200.0
BOOTSTRAP = 2000
HEADLINE_REGIME, HEADLINE_ARM = 'paper_like', 'sgpo'
DEFAULT_REGIMES = ('paper_like', 'default')

# name: (method, overrides). One line per arm; the order is the table's.
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    'grpo': ('grpo', {}),
    'dapo': ('dapo', {}),
    # The paper's settings, pinned (the default config may move): G in {2,4,8}, k=8 profile,
    # threshold 0.75, phases in increasing G.
    'sgpo': ('sgpo', {'sgpo.group_sizes': (2, 4, 8), 'profile.num_samples': 8,
                      'sgpo.trivial_threshold': 0.75, 'sgpo.curriculum': True}),
    # The best variant measured before (compare_512eval.md), as it was measured.
    'sgpo_g48_k2': ('sgpo', {'sgpo.group_sizes': (4, 8), 'profile.num_samples': 2,
                             'sgpo.curriculum': True}),
    'greso': ('greso', {}),
    'knapsack': ('knapsack', {}),
    'sgpo_bayes': ('sgpo_bayes', {}),  # beyond the paper (issue 15)
    # Its ablation: the earlier default floor, which deprioritises a prompt after two
    # all-equal groups in a row (revisited GRESO-style).
    'sgpo_bayes_floor25': ('sgpo_bayes', {'sgpo_bayes.informative_floor': 0.25}),
    # Control for sgpo_bayes: DAPO at the group size its posterior mostly picks.
    'dapo_g4': ('dapo', {'dapo.group_size': 4}),
    # sgpo_bayes with an empirical-Bayes prior per difficulty level and the prioritised
    # window, and its ablation without the pooled prior (priority from own evidence only).
    'sgpo_bayes_pooled': ('sgpo_bayes', {'sgpo_bayes.pooled_prior': 'difficulty',
                                         'sgpo_bayes.prioritise': True}),
    'sgpo_bayes_priority': ('sgpo_bayes', {'sgpo_bayes.prioritise': True}),
    # sgpo_bayes_pooled whose epochs end before their all-equal tail (epoch_cut 0.3: just
    # above an unseen prompt's P_inf(4) after one all-equal group, 0.278).
    'sgpo_bayes_cut': ('sgpo_bayes', {'sgpo_bayes.pooled_prior': 'difficulty',
                                      'sgpo_bayes.prioritise': True,
                                      'sgpo_bayes.epoch_cut': 0.3}),
    # sgpo_bayes allowed G=2 as well: cheaper steps under the packed train step, where
    # padded rows cost nothing (chosen on seeds 0-1 among G {4}, {2,4}, {4} with 3 rounds
    # and train.mu=2; then measured on fresh seeds 5-19: experiments/results/compare_packed_confirm/).
    'sgpo_bayes_g24': ('sgpo_bayes', {'sgpo_bayes.group_sizes': (2, 4)}),
}
ARM_NOTES = {
    'grpo': 'GRPO, G=8 for every prompt',
    'dapo': 'DAPO dynamic sampling (drop all-equal groups, refill from further rounds)',
    'sgpo': "sGPO, the paper's settings (profile k=8, G in {2,4,8}, curriculum)",
    'sgpo_g48_k2': 'sGPO, best variant so far (profile k=2, G in {4,8})',
    'greso': 'GRESO: DAPO rounds that skip likely-zero-variance prompts before rollout',
    'knapsack': 'Knapsack RL: per-step G in [2,64] from past success rates, same R rows',
    'sgpo_bayes': ('sGPO beyond the paper: Beta posterior per prompt from every rollout '
                   '(old evidence decayed), G in {4, 8} by expected informative groups per '
                   'row, all-equal groups dropped after rollout and refilled (up to 4 '
                   'rounds), every prompt kept in a reshuffled epoch walk (floor 0.1)'),
    'sgpo_bayes_floor25': ('sgpo_bayes with floor 0.25: a prompt is deprioritised after two '
                           'all-equal groups in a row and revisited GRESO-style (the '
                           'default before this sweep)'),
    'dapo_g4': 'DAPO at G=4 (control: the group size sgpo_bayes mostly picks)',
    'sgpo_bayes_pooled': ('sgpo_bayes with a prior shared per difficulty level (empirical '
                          'Bayes from the rolled-out prompts of that level), each round '
                          'taking the most promising ready prompts first'),
    'sgpo_bayes_priority': ('sgpo_bayes_pooled without the shared prior: most promising '
                            'first by each prompt\'s own evidence'),
    'sgpo_bayes_cut': ('sgpo_bayes_pooled whose epoch ends once its best ready prompt\'s '
                       'P_inf(4) < 0.3 (the all-equal tail); what it leaves is decayed once, '
                       'so it comes back in later epochs'),
    'sgpo_bayes_g24': 'sgpo_bayes with G in {2, 4} (instead of {4, 8})',
}

# Smoke mode: the tiny model of tests/test_train.py, a few steps, one seed.
SMOKE_OVERRIDES = {
    'model.d_model': 32, 'model.n_layers': 2, 'model.d_ff': 64, 'model.n_heads': 4,
    'model.n_kv_heads': 2, 'model.head_dim': 8, 'data.num_train': 96, 'data.num_eval': 32,
    'warm_start.steps': 30, 'train.rows_per_batch': 16, 'train.num_steps': 40,
    'eval.every_steps': 2, 'checkpoint.every_steps': 100, 'sgpo.unsolved_keep_fraction': 1.0,
    'sgpo.trivial_threshold': 0.99, 'greso.group_size': 4, 'knapsack.group_size': 4,
    'knapsack.max_group_size': 16, 'train.flops_budget': 1.1e9,
}
SMOKE_REGIME = 'smoke'


# ----------------------------------------------------------------------------------------
# Arms, runs, the sweep


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


def parse_seeds(spec: str) -> list[int]:
  """'0-4' -> [0..4]; '0,2,5' -> [0, 2, 5]."""
  seeds: list[int] = []
  for part in spec.split(','):
    if '-' in part:
      lo, hi = part.split('-')
      seeds += list(range(int(lo), int(hi) + 1))
    elif part:
      seeds.append(int(part))
  return seeds


def run_entries(regimes: list[str], arms: dict[str, tuple[str, dict]], seeds: list[int],
                extra: dict[str, Any]) -> list[dict[str, Any]]:
  """Seed-major order: a sweep cut short still has every regime and arm at the seeds done."""
  out = []
  for seed in seeds:
    for regime in regimes:
      for arm, (method, overrides) in arms.items():
        out.append({'regime': regime, 'arm': arm, 'seed': seed, 'name': f'{arm}_seed{seed}',
                    'overrides': {'method': method, 'seed': seed, **extra, **overrides}})
  return out


def config_arg(regime: str) -> str:
  return 'configs/default.py' if regime == SMOKE_REGIME else f'configs/default.py:regime={regime}'


RUN_LOCK = '.compare.lock'


def run_one(entry: dict[str, Any], runs_dir: str, code_dir: str, log) -> bool | None:
  """Runs (or resumes) one run; True when it has a summary.json afterwards, None when another
  sweep process is running it right now (so two sweeps over one runs dir never write the same
  run: each holds an exclusive lock on the run's folder while it runs)."""
  workdir = os.path.join(runs_dir, entry['regime'], entry['name'])
  if os.path.exists(os.path.join(workdir, 'summary.json')):
    return True
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, RUN_LOCK), 'w') as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when this process ends
    except BlockingIOError:
      log(f"[compare] {entry['regime']}/{entry['name']}: another sweep process is running it; "
          'skipped')
      return None
    if os.path.exists(os.path.join(workdir, 'summary.json')):  # finished while we waited
      return True
    cmd = sweep.command_for(entry['overrides'], workdir, config_arg(entry['regime']))
    log(f"[compare] {entry['regime']}/{entry['name']}: " + ' '.join(cmd[1:]))
    start = time.time()
    with open(os.path.join(workdir, 'stdout.log'), 'a') as fh:
      proc = subprocess.run(cmd, cwd=code_dir, stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=code_dir))
    log(f"[compare] {entry['regime']}/{entry['name']}: exit {proc.returncode} after "
        f'{time.time() - start:.0f} s')
    return proc.returncode == 0


# ----------------------------------------------------------------------------------------
# Curves and the statistics (pure functions: tests/test_compare.py)


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
  """Linear interpolation; beyond the last eval (a run stopped early) -> NaN.

  A run that stopped at most one step past the budget has its last eval at or after the
  grid's end (its final eval); a run with nothing before a grid point (sGPO's profile)
  holds its first value (the initial policy's accuracy).
  """
  out = np.interp(grid, xs, ys)
  out[grid > xs[-1] * (1 + 1e-9)] = np.nan
  if xs[-1] >= grid[-1]:
    out[-1] = ys[-1]
  return out


def make_grid(budget: float) -> np.ndarray:
  """0, then GRID_POINTS log-spaced FLOPs from budget / GRID_SPAN to the budget: the same
  relative resolution wherever an arm crosses the target (a FLOPs ratio is a ratio)."""
  return np.concatenate([[0.0], np.geomspace(budget / GRID_SPAN, budget, GRID_POINTS)])


def first_reach(grid: np.ndarray, curve: np.ndarray, target: float) -> float:
  """FLOPs from which `curve` reaches `target` and holds it to the budget: the crossing after
  the last grid point below the target (NaN counts as below), interpolated linearly from that
  point when it is defined; the first grid point when the curve never falls below; +inf when
  the curve ends below the target. A noisy early bump that falls back does not count: a run
  stopped anywhere past this point would have had at least the target accuracy."""
  values = np.nan_to_num(curve, nan=-np.inf)
  ok = values >= target - 1e-12
  if not ok[-1]:
    return float('inf')
  below = np.flatnonzero(~ok)
  if below.size == 0:
    return float(grid[0])
  k = int(below[-1])
  if not np.isfinite(values[k]):
    return float(grid[k + 1])
  frac = (target - values[k]) / (values[k + 1] - values[k])
  return float(grid[k] + min(max(frac, 0.0), 1.0) * (grid[k + 1] - grid[k]))


def seed_mean(curves_SxK: np.ndarray) -> np.ndarray:
  with np.errstate(all='ignore'):
    import warnings
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', category=RuntimeWarning)
      return np.nanmean(curves_SxK, axis=0)


def ratio(reference: float, arm: float) -> float:
  """reference FLOPs / arm FLOPs: inf when only the arm reaches, 0 when only the reference
  does, NaN when neither does (undefined)."""
  if np.isinf(arm):
    return float('nan') if np.isinf(reference) else 0.0
  if arm <= 0:
    return float('inf') if reference > 0 else float('nan')
  return float(reference / arm)


def interval(samples: np.ndarray) -> list[float] | None:
  """Percentile 95% interval over the defined (non-NaN) bootstrap replicates; the quantiles
  are actual replicate values, so an arm that misses the target in >2.5% of resamples has
  an infinite upper end."""
  samples = np.asarray(samples, dtype=np.float64)
  samples = samples[~np.isnan(samples)]
  if samples.size == 0:
    return None
  lo, hi = np.quantile(samples, [0.025, 0.975], method='inverted_cdf')
  return [float(lo), float(hi)]


def bootstrap_flops(grid: np.ndarray, curves: dict[str, np.ndarray],
                    finals: dict[str, np.ndarray], reference: str = 'grpo',
                    num: int = BOOTSTRAP, seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
  """Bootstrap replicates over seeds: each replicate resamples every arm's seeds (with
  replacement, independently), recomputes the target from the resampled reference finals
  and every arm's FLOPs to that target on its resampled seed-mean curve.

  Returns {'target': [num], 'flops': {arm: [num]}}.
  """
  rng = np.random.default_rng(seed)
  arms = list(curves)
  target_B = np.zeros(num)
  flops = {a: np.zeros(num) for a in arms}
  for b in range(num):
    picks = {a: rng.integers(0, len(curves[a]), len(curves[a])) for a in arms}
    target_B[b] = finals[reference][picks[reference]].mean()
    for a in arms:
      flops[a][b] = first_reach(grid, seed_mean(curves[a][picks[a]]), target_B[b])
  return {'target': target_B, 'flops': flops}


def auc(grid: np.ndarray, curve: np.ndarray) -> float:
  """Mean accuracy over [0, budget] (trapezoid area / budget), NaN holes skipped."""
  ok = ~np.isnan(curve)
  if ok.sum() < 2:
    return float('nan')
  return float(np.trapezoid(curve[ok], grid[ok]) / (grid[ok][-1] - grid[ok][0]))


# ----------------------------------------------------------------------------------------
# One regime's numbers


def _summary(workdir: str) -> dict[str, Any]:
  with open(os.path.join(workdir, 'summary.json')) as f:
    return json.load(f)


def analyse_regime(runs: dict[str, list[str]], budget: float, reference: str = 'grpo',
                   num_bootstrap: int = BOOTSTRAP, num_eval: int = 0) -> dict[str, Any]:
  """The comparison numbers of one regime from its finished runs ({arm: [workdir...]});
  arms without a finished run are left out. Needs the reference arm."""
  runs = {a: w for a, w in runs.items() if w}
  if reference not in runs:
    raise ValueError(f'no finished {reference} run: the target needs it')
  grid = make_grid(budget)
  curves, finals, summaries = {}, {}, {}
  for arm, workdirs in runs.items():
    curves[arm] = np.asarray([on_grid(*read_curve(w), grid) for w in workdirs])
    finals[arm] = np.asarray([read_curve(w)[1][-1] for w in workdirs])
    summaries[arm] = [_summary(w) for w in workdirs]
  target = float(finals[reference].mean())
  point = {a: first_reach(grid, seed_mean(curves[a]), target) for a in runs}
  boot = bootstrap_flops(grid, curves, finals, reference, num_bootstrap)
  # Second bar: DAPO's own final accuracy (the strongest common baseline), when it ran.
  dapo_target = float(finals['dapo'].mean()) if 'dapo' in runs else None
  boot_dapo = (bootstrap_flops(grid, curves, finals, 'dapo', num_bootstrap, seed=1)
               if dapo_target is not None else None)
  out_arms = {}
  for arm in runs:
    s = summaries[arm]
    fin = finals[arm]
    mean_curve = seed_mean(curves[arm])
    a = {
        'seeds': [int(x['seed']) for x in s],
        'flops_to_target': {
            'mean': _finite(point[arm]),
            'ci95': _finite_list(interval(boot['flops'][arm])),
            'reached_fraction': float(np.mean(np.isfinite(boot['flops'][arm]))),
            'per_seed': [_finite(first_reach(grid, c, target)) for c in curves[arm]]},
        'final_accuracy': {'mean': float(fin.mean()),
                           'std': float(fin.std(ddof=1)) if fin.size > 1 else None,
                           'per_seed': fin.tolist()},
        # Binomial standard error of one final eval (num_eval problems), seed mean.
        'eval_se': float(np.mean(np.sqrt(fin * (1 - fin) / num_eval))) if num_eval else None,
        'auc': auc(grid, mean_curve),
        'auc_per_seed': [auc(grid, c) for c in curves[arm]],
        'initial_accuracy': float(np.mean([x['eval_accuracy_initial'] for x in s])),
        'flops_total_mean': float(np.mean([x['flops']['total'] for x in s])),
        'flops_profile_mean': float(np.mean([x['flops']['profile'] for x in s])),
        'steps_mean': float(np.mean([x['steps'] for x in s])),
        'padding_fraction_mean': float(np.mean([x['padding_fraction'] for x in s])),
        'wall_seconds': {'mean': float(np.mean([_rl_wall(x) for x in s])),
                         'per_seed': [_rl_wall(x) for x in s]},
        'mean_curve': [_finite(v, nan=True) for v in mean_curve],
        'band_curve': {'lo': [_finite(v, nan=True) for v in np.nanmin(curves[arm], axis=0)],
                       'hi': [_finite(v, nan=True) for v in np.nanmax(curves[arm], axis=0)]},
    }
    for ref, key in ((reference, 'ratio_vs_grpo'), ('dapo', 'ratio_vs_dapo')):
      if ref in runs:
        reps = np.array([ratio(r, x) for r, x in zip(boot['flops'][ref], boot['flops'][arm])])
        a[key] = {'point': _finite(ratio(point[ref], point[arm]), nan=True),
                  'ci95': _finite_list(interval(reps)),
                  'undefined_fraction': float(np.mean(np.isnan(reps)))}
      else:
        a[key] = {'point': None, 'ci95': None, 'undefined_fraction': None}
    a['at_dapo_final'] = _at_target(grid, curves, arm, dapo_target, boot_dapo)
    a.update(batch_diagnostics(runs[arm]))
    if s[0].get('profile'):
      a['profile'] = s[0]['profile']
    out_arms[arm] = a
  ref_wall = out_arms[reference]['wall_seconds']['mean']
  for a in out_arms.values():
    a['wall_ratio_vs_grpo'] = a['wall_seconds']['mean'] / ref_wall if ref_wall else None
  initial = float(np.mean([x['eval_accuracy_initial'] for x in summaries[reference]]))
  return {'target_accuracy': target, 'initial_accuracy': initial,
          'reference_learned': bool(target > initial),
          'target_ci95': interval(boot['target']),
          'grid_flops': grid.tolist(), 'flops_budget': budget, 'arms': out_arms}


def _at_target(grid: np.ndarray, curves: dict[str, np.ndarray], arm: str,
               target: float | None, boot: dict | None) -> dict[str, Any] | None:
  """FLOPs to DAPO's mean final accuracy and the ratio vs DAPO there (`boot` resamples DAPO's
  seeds for the target): how the arm compares with the strongest baseline at its own level."""
  if target is None:
    return None
  flops = first_reach(grid, seed_mean(curves[arm]), target)
  ref = first_reach(grid, seed_mean(curves['dapo']), target)
  reps = np.array([ratio(r, x) for r, x in zip(boot['flops']['dapo'], boot['flops'][arm])])
  return {'target_accuracy': target,
          'flops_to_target': {'mean': _finite(flops),
                              'ci95': _finite_list(interval(boot['flops'][arm])),
                              'reached_fraction': float(np.mean(np.isfinite(boot['flops'][arm])))},
          'ratio_vs_dapo': {'point': _finite(ratio(ref, flops), nan=True),
                            'ci95': _finite_list(interval(reps)),
                            'undefined_fraction': float(np.mean(np.isnan(reps)))}}


def batch_diagnostics(workdirs: list[str]) -> dict[str, Any]:
  """Seed means of what the batches looked like: the share of rolled-out groups with
  all-equal rewards (trained on for single-round methods; dropped by DAPO/GRESO), rounds
  per step, and GRESO's share of candidate prompts skipped before rollout."""
  zero, rounds, skip = [], [], []
  for w in workdirs:
    with open(os.path.join(w, 'metrics.jsonl')) as f:
      rows = [r for r in map(json.loads, f) if 'reward_mean' in r]
    if not rows:
      continue
    rounds.append(float(np.mean([r.get('rounds', 1) for r in rows])))
    if 'dapo_dropped_groups' in rows[0]:
      dropped = sum(r['dapo_dropped_groups'] for r in rows)
      zero.append(dropped / max(dropped + sum(r['dapo_kept_groups'] for r in rows), 1))
    else:
      zero.append(float(np.mean([r.get('frac_zero_std', np.nan) for r in rows])))
    if 'greso_skipped' in rows[0]:
      with open(os.path.join(w, 'config.json')) as f:
        config = json.load(f)
      per_round = config['train']['rows_per_batch'] // config['greso']['group_size']
      skipped = sum(r['greso_skipped'] for r in rows)
      skip.append(skipped / max(skipped + per_round * sum(r['rounds'] for r in rows), 1))
  mean = lambda xs: float(np.nanmean(xs)) if xs else None  # noqa: E731
  return {'zero_variance_share': mean(zero), 'rounds_mean': mean(rounds),
          'greso_skip_share': mean(skip)}


def _rl_wall(summary: dict[str, Any]) -> float:
  """Wall seconds of the run without building the shared warm start (the first run of a
  regime pays for it; the others load it from the cache)."""
  init = summary.get('initial_policy') or {}
  built = 0.0 if init.get('cached', True) else float(init.get('seconds', 0.0))
  return float(summary['wall_seconds']) - built


def _finite(x: float, nan: bool = False) -> float | None:
  """JSON-safe: inf -> None ('never'), NaN -> None."""
  if x is None or not np.isfinite(x):
    return None
  return float(x)


def _finite_list(xs: list[float] | None) -> list[float | None] | None:
  return None if xs is None else [_finite(x) for x in xs]


def regime_facts(runs: dict[str, list[str]], config: dict[str, Any]) -> dict[str, Any]:
  """Regime-level facts: the pool under the initial policy (from a paper-settings sGPO
  profile: trivial = p_hat > threshold, unsolved = p_hat = 0) and GRPO's epochs."""
  facts: dict[str, Any] = {'trivial_fraction': None, 'unsolved_fraction': None,
                           'epochs_grpo': None, 'eval_problems': config['data']['num_eval'],
                           'rl_pool_size': config['data']['rl_pool_size'] or
                           config['data']['num_train'],
                           'rows_per_batch': config['train']['rows_per_batch']}
  profiled = [w for arm in ('sgpo',) for w in runs.get(arm, [])]
  if profiled:
    p = _summary(profiled[0])['profile']
    facts['trivial_fraction'] = p['n_trivial'] / p['n_queries']
    facts['unsolved_fraction'] = p['n_unsolved'] / p['n_queries']
  every = [w for ws in runs.values() for w in ws]
  facts['machine'] = machine_line(every) if every else None
  ref_policy = _summary(every[0]).get('initial_policy', {}) if every else {}
  facts['warm_start_final_loss'] = ref_policy.get('final_loss')
  if runs.get('grpo'):
    steps = np.mean([_summary(w)['steps'] for w in runs['grpo']])
    per_step = config['train']['rows_per_batch'] / config['grpo']['group_size']
    facts['epochs_grpo'] = float(steps * per_step / facts['rl_pool_size'])
  return facts


def _loss(value: Any) -> str:
  return 'not recorded' if value is None else f'{value:.4f}'


def _as_json(value: Any) -> Any:
  return json.loads(json.dumps(value, sort_keys=True, default=str))


def _without_defaults(name: str, section: dict[str, Any]) -> dict[str, Any]:
  """config.<name> minus the fields at this version's default: a field a later version
  added (absent from an older run's config.json, which behaved as its default) then leaves
  the signature alone; a field set away from its default still counts."""
  defaults = _as_json(default_config.get_config()[name].to_dict())
  return {k: v for k, v in _as_json(section).items() if k not in defaults or v != defaults[k]}


def regime_signature(config: dict[str, Any]) -> str:
  """What makes runs comparable: the pool, eval set, initial policy, budget and batch shape
  (the runs dir is shared across code versions; a run of another definition is left out)."""
  ws = {k: v for k, v in config['warm_start'].items() if k != 'cache_dir'}
  sig = {'data': _without_defaults('data', config['data']),
         'model': _without_defaults('model', config['model']),
         'warm_start': _without_defaults('warm_start', ws),
         'budget': config['train']['flops_budget'],
         'rows': config['train']['rows_per_batch'],
         'eval': _without_defaults('eval', config['eval'])}
  return json.dumps(sig, sort_keys=True, default=str)


def finished_runs(runs_dir: str, regime: str, arms: list[str], seeds: list[int],
                  log=print) -> dict[str, list[str]]:
  """{arm: workdirs with summary.json} whose regime signature matches the reference's."""
  out: dict[str, list[str]] = {}
  for arm in arms:
    out[arm] = [os.path.join(runs_dir, regime, f'{arm}_seed{s}') for s in seeds
                if os.path.exists(os.path.join(runs_dir, regime, f'{arm}_seed{s}',
                                               'summary.json'))]
  ref = next((w for a in ('grpo', *arms) for w in out.get(a, [])), None)
  if ref is None:
    return out
  def signature(w: str) -> str:
    with open(os.path.join(w, 'config.json')) as f:
      return regime_signature(json.load(f))
  want, want_policy = signature(ref), initial_policy(ref)
  for arm, workdirs in out.items():
    keep = []
    for w in workdirs:
      policy = initial_policy(w)
      if signature(w) != want:
        log(f'[compare] {w}: another definition of regime {regime} than {ref}; left out')
      elif policy != want_policy:
        log(f'[compare] {w}: another initial policy than {ref} (SFT final loss, initial '
            f'accuracy {policy} vs {want_policy}): its warm start was built on '
            'another machine or library version (sgpo_jax/outputs/environment.py); left out. Rerun '
            'it with the same warm-start cache.')
      else:
        keep.append(w)
    out[arm] = keep
  return out


def initial_policy(workdir: str) -> tuple[Any, Any]:
  """A run's initial policy, fingerprinted: (warm start SFT final loss, initial held-out
  accuracy). Equal configs give different policies on different machines (environment.py)."""
  s = _summary(workdir)
  return (s.get('initial_policy', {}).get('final_loss'), s.get('eval_accuracy_initial'))


def machine_line(workdirs: list[str]) -> str:
  """Where the regime's runs and warm start were made (from summary.json's environment;
  runs before it was recorded say so)."""
  envs = [_summary(w).get('environment') for w in workdirs]
  known = [e for e in envs if e]
  if not known:
    return 'machine not recorded (runs before summary.json had an environment block)'
  kinds = sorted({f"{e['cpu']['model']} ({', '.join(e['cpu']['features']) or 'no listed features'}), "
                  f"jax {e['packages'].get('jax')}, jaxlib {e['packages'].get('jaxlib')}, "
                  f"flax {e['packages'].get('flax')}" for e in known})
  return '; '.join(kinds) + ('' if len(known) == len(envs) else
                             f' ({len(envs) - len(known)} runs without a record)')


def analyse(runs_dir: str, regimes: list[str], arms: list[str], seeds: list[int],
            command: str, num_bootstrap: int = BOOTSTRAP) -> dict[str, Any]:
  results: dict[str, Any] = {'command': command, 'seeds_planned': seeds, 'regimes': {}}
  for regime in regimes:
    runs = finished_runs(runs_dir, regime, arms, seeds)
    if not runs.get('grpo'):
      continue
    with open(os.path.join(runs['grpo'][0], 'config.json')) as f:
      config = json.load(f)
    block = analyse_regime(runs, float(config['train']['flops_budget']),
                           num_bootstrap=num_bootstrap, num_eval=int(config['data']['num_eval']))
    facts = regime_facts(runs, config)
    block.update(facts)
    for a in block['arms'].values():  # the regime's facts, repeated per arm for readers
      a.update({k: facts[k] for k in ('trivial_fraction', 'unsolved_fraction', 'epochs_grpo')})
    results['regimes'][regime] = block
  head = results['regimes'].get(HEADLINE_REGIME, {}).get('arms', {}).get(HEADLINE_ARM)
  results['headline'] = f'{HEADLINE_REGIME}/{HEADLINE_ARM}'
  results['flops_ratio_vs_grpo'] = head['ratio_vs_grpo']['point'] if head else None
  results['flops_ratio_vs_dapo'] = head['ratio_vs_dapo']['point'] if head else None
  results['final_accuracy'] = ({k: head['final_accuracy'][k] for k in ('mean', 'std')}
                               if head else None)
  return results


# ----------------------------------------------------------------------------------------
# Report


def plot_regime(name: str, block: dict[str, Any], path: str) -> None:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  grid = np.asarray(block['grid_flops'])
  fig, ax = plt.subplots(figsize=(7.5, 4.5))
  for i, (arm, a) in enumerate(block['arms'].items()):
    f = lambda xs: np.array([np.nan if v is None else v for v in xs])  # noqa: E731
    color = f'C{i}'
    ax.plot(grid, f(a['mean_curve']), color=color, lw=2, label=f"{arm} (n={len(a['seeds'])})")
    if len(a['seeds']) > 1:
      ax.fill_between(grid, f(a['band_curve']['lo']), f(a['band_curve']['hi']), color=color,
                      alpha=0.12, lw=0)
  ax.axhline(block['target_accuracy'], color='k', ls=':', lw=1, label='target (GRPO final)')
  ax.set_xscale('log')  # a FLOPs ratio is a horizontal distance; the grid starts at budget/200
  ax.set_xlabel('cumulative FLOPs (profiling + rollouts + training), log scale')
  ax.set_ylabel('held-out greedy accuracy')
  ax.set_title(f'{name}: seed mean, shaded min-max over seeds')
  ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _pct(x: float | None) -> str:
  return 'n/a' if x is None else f'{100 * x:.1f}'


def _sci(x: float | None) -> str:
  return 'never' if x is None else f'{x:.2e}'


def _ci(ci: list | None, fmt) -> str:
  if ci is None:
    return 'n/a'
  return f"[{fmt(ci[0])}, {'inf' if ci[1] is None else fmt(ci[1])}]"


def _x(v: float | None) -> str:
  return 'n/a' if v is None else f'{v:.2f}x'


def render(results: dict[str, Any]) -> str:
  lines = ['# Compute-saving methods at equal total FLOPs', '',
           'Generated by `experiments/compare.py` from `compare.json` (edit neither by hand).',
           f"Command: `{results['command']}`", '']
  if results.get('note'):
    lines += [results['note'], '']
  lines += [
           'Protocol. Each regime is a named config block (`configs/default.py:regime=NAME`); '
           'every run of a regime starts from the same warm-start policy and is scored on the '
           'same held-out problems (greedy); the FLOPs budget (profiling included) ends every '
           'run. Each run\'s eval curve (accuracy vs cumulative FLOPs; evals at fixed '
           'fractions of the budget, log-spaced early) is interpolated linearly onto a grid of '
           f'0 and {GRID_POINTS} log-spaced FLOPs from budget/{GRID_SPAN:.0f} to the budget '
           '(1.8% apart) and averaged over seeds. Target = '
           "GRPO's mean final accuracy. FLOPs to target = where the seed-mean curve reaches "
           'the target and holds it to the budget (the crossing after its last point below the '
           'target, interpolated; an early bump that falls back does not count). '
           'Ratio vs GRPO (vs DAPO) = '
           "GRPO's (DAPO's) FLOPs to target / the arm's: > 1 means the arm needs fewer "
           f'FLOPs. 95% intervals: {BOOTSTRAP} bootstrap resamples of the seeds of every arm '
           '(GRPO\'s resample also moves the target); "inf" = in more than 2.5% of resamples '
           'the arm never reaches the target. AUC = mean accuracy over the budget. Wall-clock '
           'was measured on a 2-core CPU shared with other work (RL only: building the '
           "regime's shared warm start is left out): compare it within a regime only, "
           'loosely.', '']
  if results.get('flops_ratio_vs_grpo') is not None or results.get('final_accuracy'):
    lines += [f"Headline ({results['headline']}): FLOPs ratio vs GRPO "
              f"{_x(results['flops_ratio_vs_grpo'])}, vs DAPO "
              f"{_x(results['flops_ratio_vs_dapo'])}; final accuracy "
              f"{_pct((results['final_accuracy'] or {}).get('mean'))}%.", '']
  for name, block in results['regimes'].items():
    n_seeds = {a: len(v['seeds']) for a, v in block['arms'].items()}
    epochs = 'n/a' if block['epochs_grpo'] is None else f"{block['epochs_grpo']:.2f}"
    lines += [f'## Regime `{name}`', '',
              f"Pool {block['rl_pool_size']} prompts, {block['rows_per_batch']} rows per "
              f"batch, budget {block['flops_budget']:.3g} FLOPs, {block['eval_problems']} "
              f"eval problems. Under the initial policy: trivial (p_hat > 0.75) "
              f"{_pct(block['trivial_fraction'])}%, unsolved (p_hat = 0) "
              f"{_pct(block['unsolved_fraction'])}%. GRPO sees each prompt "
              f"{epochs} times. Target: {_pct(block['target_accuracy'])}% "
              f"(95% CI {_ci(block['target_ci95'], _pct)}). Seeds finished: {n_seeds}.", '',
              f"Initial policy: warm-start SFT final loss {_loss(block.get('warm_start_final_loss'))}, "
              f"held-out {_pct(block.get('initial_accuracy'))}%. Measured on: "
              f"{block.get('machine') or 'not recorded'}. (Another machine builds another "
              'initial policy from the same config; its runs are not mixed in.)', '']
    if not block.get('reference_learned', True):
      lines += [f"**GRPO did not improve on the initial policy here** (initial "
                f"{_pct(block['initial_accuracy'])}%, final {_pct(block['target_accuracy'])}%): "
                'the target is met at 0 FLOPs, so FLOPs-to-target ratios say nothing; compare '
                'final accuracy and AUC instead.', '']
    lines += [
              '| arm | seeds | final acc % (mean ± std over seeds; SE of one eval) | FLOPs to target [95% CI] | vs GRPO '
              '[95% CI] | vs DAPO [95% CI] | AUC % | profile FLOPs | wall s (x GRPO) |',
              '|---|---|---|---|---|---|---|---|---|']
    for arm, a in block['arms'].items():
      fa, ft = a['final_accuracy'], a['flops_to_target']
      rg, rd = a['ratio_vs_grpo'], a['ratio_vs_dapo']
      wr = a['wall_ratio_vs_grpo']
      lines.append(
          f"| {arm} | {len(a['seeds'])} | {_pct(fa['mean'])} ± {_pct(fa['std'])}; "
          f"{_pct(a['eval_se'])} | "
          f"{_sci(ft['mean'])} {_ci(ft['ci95'], _sci)} | {_x(rg['point'])} "
          f"{_ci(rg['ci95'], _x)} | {_x(rd['point'])} {_ci(rd['ci95'], _x)} | "
          f"{_pct(a['auc'])} | {a['flops_profile_mean']:.2g} | "
          f"{a['wall_seconds']['mean']:.0f} ({'n/a' if wr is None else f'{wr:.2f}'}) |")
    dapo_bar = next((a['at_dapo_final'] for a in block['arms'].values()
                     if a.get('at_dapo_final')), None)
    if dapo_bar is not None:
      lines += ['', f"At DAPO's own final accuracy ({_pct(dapo_bar['target_accuracy'])}%, a "
                'higher bar than GRPO\'s; same rule and bootstrap, DAPO\'s seeds resampled for '
                'the target): FLOPs to reach and hold it, and the ratio vs DAPO [95% CI]: ' +
                '; '.join(f"{arm} {_sci(a['at_dapo_final']['flops_to_target']['mean'])} "
                          f"({_x(a['at_dapo_final']['ratio_vs_dapo']['point'])} "
                          f"{_ci(a['at_dapo_final']['ratio_vs_dapo']['ci95'], _x)})"
                          for arm, a in block['arms'].items()) + '.']
    diag = []
    for arm, a in block['arms'].items():
      d = f"{arm} {_pct(a.get('zero_variance_share'))}%"
      if a.get('rounds_mean') and a['rounds_mean'] > 1.0001:
        d += f" ({a['rounds_mean']:.2f} rounds/step)"
      if a.get('greso_skip_share') is not None:
        d += f", {_pct(a['greso_skip_share'])}% of candidates skipped before rollout"
      diag.append(d)
    lines += ['', 'All-equal-reward groups among those rolled out (trained on by GRPO, sGPO and '
              'Knapsack; dropped and refilled by DAPO and GRESO): ' + '; '.join(diag) + '.']
    lines += ['', 'Arms: ' + '; '.join(f'`{a}` = {ARM_NOTES.get(a, a)}'
                                       for a in block['arms']) + '.', '',
              f'![{name}](plots/compare_{name}.png)', '']
  return '\n'.join(lines)


def write_results(results: dict[str, Any], results_dir: str) -> None:
  os.makedirs(os.path.join(results_dir, 'plots'), exist_ok=True)
  for name, block in results['regimes'].items():
    plot_regime(name, block, os.path.join(results_dir, 'plots', f'compare_{name}.png'))
  with open(os.path.join(results_dir, 'compare.json'), 'w') as f:
    json.dump(results, f, indent=1)
  with open(os.path.join(results_dir, 'compare.md'), 'w') as f:
    f.write(render(results))


# ----------------------------------------------------------------------------------------


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--regimes', default=','.join(DEFAULT_REGIMES))
  parser.add_argument('--arms', default=','.join(ARMS), help=f'from {list(ARMS)}')
  parser.add_argument('--arm', action='append', default=[],
                      help="extra arm 'name=method,field=value,...' (repeatable)")
  parser.add_argument('--seeds', default='0-4', help="'0-4' or '0,1,2'")
  parser.add_argument('--set', action='append', default=[],
                      help="override for every run 'field=value' (repeatable)")
  parser.add_argument('--runs-dir', default=os.path.join(REPO, 'runs', 'compare'),
                      help='shared runs folder, e.g. /work/compare_runs')
  parser.add_argument('--code-dir', default=REPO,
                      help='checkout the runs execute (a frozen copy keeps a sweep stable)')
  parser.add_argument('--results-dir', default=RESULTS)
  parser.add_argument('--cache-dir', default=None,
                      help='shared warm-start cache (default RUNS_DIR/warm_start)')
  parser.add_argument('--analyse-only', action='store_true', help='no runs: report what exists')
  parser.add_argument('--bootstrap', type=int, default=BOOTSTRAP)
  parser.add_argument('--note', default='', help='a paragraph printed under the title')
  parser.add_argument('--smoke', action='store_true', help='tiny model, 1 seed, few steps')
  args = parser.parse_args()

  unknown = [a for a in args.arms.split(',') if a and a not in ARMS]
  if unknown:
    raise SystemExit(f'--arms: unknown {unknown}; known {list(ARMS)} (or add one with --arm)')
  arms = {a: ARMS[a] for a in args.arms.split(',') if a}
  arms.update(parse_arm(spec) for spec in args.arm)
  if 'grpo' not in arms:
    arms = {'grpo': ARMS['grpo'], **arms}  # the reference every regime needs
  regimes = [SMOKE_REGIME] if args.smoke else [r for r in args.regimes.split(',') if r]
  seeds = [0] if args.smoke else parse_seeds(args.seeds)
  extra: dict[str, Any] = dict(SMOKE_OVERRIDES) if args.smoke else {}
  extra['warm_start.cache_dir'] = args.cache_dir or os.path.join(args.runs_dir, 'warm_start')
  for kv in args.set:
    k, v = kv.split('=', 1)
    extra[k] = _parse_value(v)
  command = ' '.join(['python', 'experiments/compare.py'] + sys.argv[1:])
  log = lambda m: print(m, flush=True)  # noqa: E731

  def report() -> None:
    results = analyse(args.runs_dir, regimes, list(arms), seeds, command, args.bootstrap)
    results['note'] = args.note
    if results['regimes']:
      write_results(results, args.results_dir)

  if not args.analyse_only:
    failed = []
    for entry in run_entries(regimes, arms, seeds, extra):
      done_before = os.path.exists(os.path.join(args.runs_dir, entry['regime'],
                                                entry['name'], 'summary.json'))
      ok = run_one(entry, args.runs_dir, args.code_dir, log)
      if ok is None:  # another sweep process has it
        continue
      if not ok:
        failed.append(f"{entry['regime']}/{entry['name']}")
        continue
      if not done_before:
        report()
    if failed:
      log(f'[compare] failed runs (see their stdout.log): {failed}')
  report()
  md = os.path.join(args.results_dir, 'compare.md')
  if os.path.exists(md):
    print(open(md).read())


if __name__ == '__main__':
  main()
