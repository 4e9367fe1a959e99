"""The comparison's arms (allocator + overrides), its seeds and regimes, and the run entries
the resumable sweep walks: what `python -m sgpo_jax.compare run` runs."""

from __future__ import annotations

import os
import re
from typing import Any

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
    # Beyond the paper, as first measured (G in {4, 8}; the default is now {2, 4}).
    'sgpo_bayes': ('sgpo_bayes', {'sgpo_bayes.group_sizes': (4, 8)}),
    # Its ablation: the earlier default floor, which deprioritises a prompt after two
    # all-equal groups in a row (revisited GRESO-style).
    'sgpo_bayes_floor25': ('sgpo_bayes', {'sgpo_bayes.informative_floor': 0.25,
                                          'sgpo_bayes.group_sizes': (4, 8)}),
    # Control for sgpo_bayes: DAPO at the group size its posterior mostly picks.
    'dapo_g4': ('dapo', {'dapo.group_size': 4}),
    # sgpo_bayes with an empirical-Bayes prior per difficulty level and the prioritised
    # window, and its ablation without the pooled prior (priority from own evidence only).
    'sgpo_bayes_pooled': ('sgpo_bayes', {'sgpo_bayes.pooled_prior': 'difficulty',
                                         'sgpo_bayes.prioritise': True,
                                         'sgpo_bayes.group_sizes': (4, 8)}),
    'sgpo_bayes_priority': ('sgpo_bayes', {'sgpo_bayes.prioritise': True,
                                           'sgpo_bayes.group_sizes': (4, 8)}),
    # sgpo_bayes_pooled whose epochs end before their all-equal tail (epoch_cut 0.3: just
    # above an unseen prompt's P_inf(4) after one all-equal group, 0.278).
    'sgpo_bayes_cut': ('sgpo_bayes', {'sgpo_bayes.pooled_prior': 'difficulty',
                                      'sgpo_bayes.prioritise': True,
                                      'sgpo_bayes.epoch_cut': 0.3,
                                      'sgpo_bayes.group_sizes': (4, 8)}),
    # The default (recommended) allocator: sgpo_bayes allowed G=2 as well: cheaper steps
    # under the packed train step, where padded rows cost nothing (chosen on seeds 0-1 among G {4}, {2,4}, {4} with 3 rounds
    # and train.mu=2; then measured on fresh seeds 5-19:
    # studies/allocator_comparison/sweeps/compare_packed_confirm/).
    'sgpo_bayes_g24': ('sgpo_bayes', {'sgpo_bayes.group_sizes': (2, 4)}),
    # Selection before sampling: each round's prompts and G chosen from the whole pool by
    # Thompson draws from the posterior, plus an exploration floor (allocators/sgpo_select).
    'sgpo_select': ('sgpo_select', {}),
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
    'sgpo_bayes_g24': 'sgpo_bayes with G in {2, 4}: the default config (recommended)',
    'sgpo_select': ('sgpo_select: each round rolls out the prompts and G whose Thompson draws '
                    'from the posterior promise the most informative rows per row, from the '
                    'whole pool (an empirical-Bayes prior per difficulty level for unseen '
                    'prompts, evidence forgotten by 0.9 per step, 8 rows per round for the '
                    'prompts sampled longest ago), then drops all-equal groups and refills '
                    'as DAPO'),
}

# Smoke mode: the tiny model of tests/test_train.py, a few steps, one seed. The budget ends
# every run: the tiny policy's groups are often all-equal, and such a step is skipped and
# charges its rollouts only, so the step cap sits far above the ~20 steps a trained run needs.
SMOKE_OVERRIDES = {
    'model.d_model': 32, 'model.n_layers': 2, 'model.d_ff': 64, 'model.n_heads': 4,
    'model.n_kv_heads': 2, 'model.head_dim': 8, 'data.num_train': 96, 'data.num_eval': 32,
    'warm_start.steps': 30, 'train.rows_per_batch': 16, 'train.num_steps': 120,
    'eval.every_steps': 2, 'checkpoint.every_steps': 100, 'sgpo.unsolved_keep_fraction': 1.0,
    'sgpo.trivial_threshold': 0.99, 'greso.group_size': 4, 'knapsack.group_size': 4,
    'knapsack.max_group_size': 16, 'train.flops_budget': 1.1e9,
}
SMOKE_REGIME = 'smoke'


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
                extra: dict[str, Any], regime_seeds: dict[str, list[int]] | None = None
                ) -> list[dict[str, Any]]:
  """Seed-major order: a sweep cut short still has every regime and arm at the seeds done.
  `regime_seeds` gives some regimes other seeds than `seeds`."""
  planned = {r: (regime_seeds or {}).get(r, seeds) for r in regimes}
  out = []
  order = list(dict.fromkeys([*seeds, *sorted(set().union(*planned.values()) - set(seeds))]))
  for seed in order:
    for regime in regimes:
      if seed not in planned[regime]:
        continue
      for arm, (method, overrides) in arms.items():
        out.append({'regime': regime, 'arm': arm, 'seed': seed, 'name': f'{arm}_seed{seed}',
                    'overrides': {'method': method, 'seed': seed, **extra, **overrides}})
  return out


def config_arg(regime: str, code_dir: str | None = None) -> str:
  """The --config of a regime's runs: the shipped default config, by path relative to
  `code_dir` (a checkout from before the configs moved into the package has them in
  configs/), or by name when no code_dir is given."""
  if code_dir is None:
    config = 'default'
  elif os.path.isfile(os.path.join(code_dir, 'sgpo_jax', 'configs', 'default.py')):
    config = 'sgpo_jax/configs/default.py'
  else:
    config = 'configs/default.py'
  return config if regime == SMOKE_REGIME else f'{config}:regime={regime}'
