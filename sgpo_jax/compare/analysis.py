"""The comparison's numbers: eval-accuracy curves on a FLOPs grid, FLOPs to a target accuracy,
ratios against GRPO and DAPO with bootstrap intervals over seeds, per-regime facts, and
`analyse`, which turns a runs folder into the compare.json dict."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np

from sgpo_jax.compare.diagnostics import run_wall_seconds, where_flops_go
from sgpo_jax.config import defaults as default_config

# The analysis grid: 0 and GRID_POINTS log-spaced points from budget/GRID_SPAN to the budget
# (1.8% apart: a ratio is resolved to ~2% wherever the target is crossed).
GRID_POINTS = 300
GRID_SPAN = 200.0
BOOTSTRAP = 2000
HEADLINE_REGIME, HEADLINE_ARM = 'paper_like', 'sgpo_bayes_g24'  # the recommended allocator
# The head-to-head that separates the posterior from "small G + dynamic sampling": the
# recommended allocator against DAPO at the same small G.
HEAD_TO_HEAD = ('sgpo_bayes_g24', 'dapo_g4')
# Whose mean final accuracy is a regime's target: the first of these with a finished run
# (unless `analyse` is told the reference: DAPO where a pre-registration names it).
REFERENCES = ('grpo', 'dapo')
# A head-to-head FLOPs interval decides only when neither arm reaches DAPO's final accuracy
# in at most this share of the bootstrap resamples (the interval covers the rest).
MAX_UNDEFINED = 0.025

# ----------------------------------------------------------------------------------------
# Curves and the statistics (pure functions: tests/compare/test_compare.py)


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

  Why not `scipy.stats.bootstrap` (checked against scipy 1.17): it could draw the same
  resamples (several samples of different sizes, each resampled along its seed axis, one
  vector-valued statistic over every arm), but it could not make the intervals this module
  reports, so it would only replace the three lines that draw indices:
  - Its interval is `scipy.stats.quantile(replicates, method='linear')` over every
    replicate. Here a replicate's statistic is legitimately +inf (FLOPs to a target the
    resampled curve never reaches; a ratio where only the arm reaches it) or NaN (neither
    reaches: undefined). `interval` drops the NaN replicates and reports their share
    (`undefined_fraction`, `reached_fraction`), and takes `inverted_cdf` quantiles so an end
    is an actual replicate: an 'inf' end means more than 2.5% of the defined replicates are
    infinite. Under scipy one NaN makes the whole interval NaN, linear interpolation next to
    +inf returns inf or NaN, and its 'BCa' (the default) and 'basic' methods are undefined
    with infinite replicates.
  - The resample is joint and moves the target: one replicate draws every arm's seeds once,
    the target is the resampled reference arm's mean final accuracy, and every arm's FLOPs to
    that same target come from that same draw (ratio replicates pair them). In scipy that is
    one statistic returning every arm's FLOPs, whose `bootstrap_distribution` would then go
    through `interval` anyway.
  - The committed compare.json files (and the README's headline block, rendered from them)
    hold intervals from this generator's stream (`default_rng(seed)`, seeds 0, 1, 2). A
    different draw or quantile rule moves every interval end by resampling noise with
    nothing gained; `tests/compare/test_compare.py` pins the conventions above.
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
                   num_bootstrap: int = BOOTSTRAP, num_eval: int = 0,
                   pair: tuple[str, str] = HEAD_TO_HEAD) -> dict[str, Any]:
  """The comparison numbers of one regime from its finished runs ({arm: [workdir...]});
  arms without a finished run are left out. Needs the reference arm (the target is its mean
  final accuracy): GRPO, or DAPO in a regime that runs no GRPO (`analyse` picks)."""
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
        'wall_seconds': {'mean': float(np.mean([run_wall_seconds(x) for x in s])),
                         'per_seed': [run_wall_seconds(x) for x in s]},
        'mean_curve': [_finite(v, nan=True) for v in mean_curve],
        'band_curve': {'lo': [_finite(v, nan=True) for v in np.nanmin(curves[arm], axis=0)],
                       'hi': [_finite(v, nan=True) for v in np.nanmax(curves[arm], axis=0)]},
    }
    for ref, key in (('grpo', 'ratio_vs_grpo'), ('dapo', 'ratio_vs_dapo')):
      if ref in runs:
        reps = np.array([ratio(r, x) for r, x in zip(boot['flops'][ref], boot['flops'][arm])])
        a[key] = {'point': _finite(ratio(point[ref], point[arm]), nan=True),
                  'ci95': _finite_list(interval(reps)),
                  'undefined_fraction': float(np.mean(np.isnan(reps)))}
      else:
        a[key] = {'point': None, 'ci95': None, 'undefined_fraction': None}
    a['at_dapo_final'] = _at_target(grid, curves, arm, dapo_target, boot_dapo)
    a.update(batch_diagnostics(runs[arm]))
    a['where_flops_go'] = where_flops_go(runs[arm])
    if s[0].get('profile'):
      a['profile'] = s[0]['profile']
    out_arms[arm] = a
  ref_wall = out_arms['grpo']['wall_seconds']['mean'] if 'grpo' in out_arms else None
  for a in out_arms.values():
    a['wall_ratio_vs_grpo'] = a['wall_seconds']['mean'] / ref_wall if ref_wall else None
  initial = float(np.mean([x['eval_accuracy_initial'] for x in summaries[reference]]))
  pair_block = (head_to_head(grid, curves, finals, *pair, dapo_target, boot_dapo,
                             num_bootstrap) if all(a in runs for a in pair) else None)
  return {'reference': reference, 'target_accuracy': target, 'initial_accuracy': initial,
          'reference_learned': bool(target > initial),
          'target_ci95': interval(boot['target']),
          'grid_flops': grid.tolist(), 'flops_budget': budget, 'arms': out_arms,
          'head_to_head': pair_block}


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


def head_to_head(grid: np.ndarray, curves: dict[str, np.ndarray], finals: dict[str, np.ndarray],
                 arm: str, control: str, dapo_target: float | None, boot_dapo: dict | None,
                 num: int = BOOTSTRAP, seed: int = 2) -> dict[str, Any]:
  """`arm` against `control` on two measures, each with a 95% bootstrap interval over seeds
  (each arm's seeds resampled independently): the final-accuracy difference (arm - control)
  and the FLOPs ratio at DAPO's final accuracy (control's FLOPs / arm's; > 1: the arm needs
  fewer). Verdict, the pre-registered rule: 'ahead' iff the difference's interval lies above
  0 or the ratio's lies above 1; 'behind' iff the difference's lies below 0 or the ratio's
  below 1; otherwise 'does not separate'. The ratio's interval is read with its infinite ends
  (only one arm reaches), so swapping arm and control mirrors the verdict; it counts only when
  it covers at least 97.5% of the resamples (`MAX_UNDEFINED`): where neither arm reaches DAPO's
  final accuracy in more of them, an interval over the rest would decide on a subset."""
  rng = np.random.default_rng(seed)
  fa, fc = finals[arm], finals[control]
  diff_B = np.array([fa[rng.integers(0, fa.size, fa.size)].mean()
                     - fc[rng.integers(0, fc.size, fc.size)].mean() for _ in range(num)])
  diff = {'point': float(fa.mean() - fc.mean()), 'ci95': interval(diff_B)}
  flops: dict[str, Any] = {'point': None, 'ci95': None, 'undefined_fraction': None}
  ratio_ci = None  # the ratio's interval as the verdict reads it (inf kept), when it counts
  if dapo_target is not None:
    point = ratio(first_reach(grid, seed_mean(curves[control]), dapo_target),
                  first_reach(grid, seed_mean(curves[arm]), dapo_target))
    reps = np.array([ratio(c, a) for c, a in zip(boot_dapo['flops'][control],
                                                  boot_dapo['flops'][arm])])
    raw = interval(reps)
    flops = {'point': _finite(point, nan=True), 'ci95': _finite_list(raw),
             'undefined_fraction': float(np.mean(np.isnan(reps)))}
    if flops['undefined_fraction'] <= MAX_UNDEFINED:
      ratio_ci = raw
  diff_ci = diff['ci95'] or [None, None]
  above = ((diff_ci[0] is not None and diff_ci[0] > 0)
           or (ratio_ci is not None and ratio_ci[0] > 1))
  below = ((diff_ci[1] is not None and diff_ci[1] < 0)
           or (ratio_ci is not None and ratio_ci[1] < 1))
  verdict = ('ahead' if above and not below else 'behind' if below and not above
             else 'does not separate')
  return {'arm': arm, 'control': control, 'final_accuracy_diff': diff,
          'flops_ratio_at_dapo_final': flops, 'verdict': verdict}


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
                  log=print, anchor: str | None = None) -> dict[str, list[str]]:
  """{arm: workdirs with summary.json} whose regime signature matches the anchor's: the first
  finished run of `anchor` (the reference), else of GRPO, else of the arms in order."""
  out: dict[str, list[str]] = {}
  for arm in arms:
    out[arm] = [os.path.join(runs_dir, regime, f'{arm}_seed{s}') for s in seeds
                if os.path.exists(os.path.join(runs_dir, regime, f'{arm}_seed{s}',
                                               'summary.json'))]
  order = ([anchor] if anchor else []) + ['grpo', *arms]
  ref = next((w for a in order for w in out.get(a, [])), None)
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
            command: str, num_bootstrap: int = BOOTSTRAP,
            regime_seeds: dict[str, list[int]] | None = None,
            headline: tuple[str, str] = (HEADLINE_REGIME, HEADLINE_ARM),
            pair: tuple[str, str] = HEAD_TO_HEAD, reference: str | None = None,
            required: list[str] | None = None) -> dict[str, Any]:
  """The compare.json dict. `regime_seeds` plans other seeds for some regimes than `seeds`;
  `headline` names the (regime, arm) whose numbers are repeated at the top level and `pair`
  the head-to-head (arm, control) reported per regime. `reference`: whose mean final
  accuracy is the target (default: GRPO where it ran, else DAPO); `required`: the arms a
  regime needs at every planned seed to be `complete` (default: all of `arms`), the others
  (references, follow-ups) reported with what has finished."""
  regime_seeds = regime_seeds or {}
  required = list(arms if required is None else required)
  results: dict[str, Any] = {'command': command, 'seeds_planned': seeds, 'regimes': {}}
  for regime in regimes:
    planned = regime_seeds.get(regime, seeds)
    runs = finished_runs(runs_dir, regime, arms, planned, anchor=reference)
    # The target is GRPO's final accuracy; a regime too costly for GRPO (the real model's)
    # is measured against DAPO's instead, as its pre-registration says.
    chosen = reference or next((a for a in REFERENCES if runs.get(a)), None)
    if chosen is None or not runs.get(chosen):
      continue
    with open(os.path.join(runs[chosen][0], 'config.json')) as f:
      config = json.load(f)
    block = analyse_regime(runs, float(config['train']['flops_budget']), reference=chosen,
                           num_bootstrap=num_bootstrap, num_eval=int(config['data']['num_eval']),
                           pair=pair)
    block['seeds_planned'] = planned
    # Complete = every required arm finished every planned seed (an arm with no finished run
    # counts as missing all of them); verdicts are read only from a complete regime.
    missing = {a: sorted(set(planned) - {int(w.rsplit('_seed', 1)[1]) for w in runs.get(a, [])})
               for a in required}
    block['required_arms'] = required
    block['seeds_missing'] = {a: s for a, s in missing.items() if s}
    block['complete'] = not block['seeds_missing']
    facts = regime_facts(runs, config)
    block.update(facts)
    for a in block['arms'].values():  # the regime's facts, repeated per arm for readers
      a.update({k: facts[k] for k in ('trivial_fraction', 'unsolved_fraction', 'epochs_grpo')})
    results['regimes'][regime] = block
  head = results['regimes'].get(headline[0], {}).get('arms', {}).get(headline[1])
  results['headline'] = f'{headline[0]}/{headline[1]}'
  results['flops_ratio_vs_grpo'] = head['ratio_vs_grpo']['point'] if head else None
  results['flops_ratio_vs_dapo'] = head['ratio_vs_dapo']['point'] if head else None
  results['final_accuracy'] = ({k: head['final_accuracy'][k] for k in ('mean', 'std')}
                               if head else None)
  return results


