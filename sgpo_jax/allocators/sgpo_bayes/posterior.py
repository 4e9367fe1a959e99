"""The math of `method=sgpo_bayes`: a Beta posterior per prompt -> profile stops, G, revisits.

The Beta math it shares with `sgpo_select` (expected powers, P_inf, the pooled prior) lives
in `allocators/beta.py` and is re-exported here.

Pure numpy functions, pinned by hand-computed tests (tests/allocators/test_bayes.py); the allocator
that iterates them over a run is `allocator.BayesAllocator`.

A prompt's success rate p under the current policy gets a Beta(a, b) posterior: a prior
Beta(prior_alpha, prior_beta) plus the successes / failures of every sample it was given,
profiling and training rollouts alike (older evidence optionally decayed, since the policy
moves). A group of G rollouts carries a learning signal iff it holds at least one success
and one failure (binary reward, group-relative advantage, no KL), so the probability that a
group is informative, averaged over the posterior, is

    P_inf(a, b, G) = 1 - E[p^G] - E[(1-p)^G],
    E[p^G] = B(a + G, b) / B(a, b) = prod_{i<G} (a + i) / (a + b + i)

(both tails: unlike sGPO's 1/p_hat, a prompt at p = 0.6 is not given a pair that is
all-equal half the time). The value of a group is P_inf * G**signal_exponent
(signal_exponent = 0: expected informative groups; 1: expected rows with a non-zero
advantage). `choose_group_sizes` fills a batch's R rows greedily by marginal value per
row, so every group costs its rows' generation + training FLOPs and nothing else.
`refill_lowers_cost` decides whether one more generation round of a post-filtered batch
lowers its expected FLOPs per trained informative row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sgpo_jax.allocators.beta import (  # noqa: F401  (re-exported: the posterior math)
  check_beta,
  expected_power,
  informative_probability,
  pooled_prior,
)
from sgpo_jax.allocators.dynamic_sampling import refill_lowers_cost  # noqa: F401


def _as_float(x) -> np.ndarray:
  return np.asarray(x, dtype=np.float64)


def group_value(a, b, group_size: int, signal_exponent: float = 0.0) -> np.ndarray:
  """Expected signal of one group: P_inf * G**signal_exponent."""
  return informative_probability(a, b, group_size) * float(group_size) ** signal_exponent


def update_posterior(a, b, successes, failures, prior_alpha: float, prior_beta: float,
                     decay: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
  """Posterior after new evidence; old evidence is first scaled by `decay` (1 = keep all).

  a' = prior_alpha + decay * (a - prior_alpha) + successes (b alike): the prior never decays,
  so a prompt's posterior stays a proper Beta however often it is revisited.
  """
  if not 0.0 <= decay <= 1.0:
    raise ValueError(f'sgpo_bayes.evidence_decay={decay} must be in [0, 1]')
  a, b = _as_float(a), _as_float(b)
  s, f = _as_float(successes), _as_float(failures)
  if np.any(s < 0) or np.any(f < 0):
    raise ValueError(f'successes={s} and failures={f} must be >= 0')
  return (prior_alpha + decay * (a - prior_alpha) + s,
          prior_beta + decay * (b - prior_beta) + f)


def profile_decision(n_correct: int, n_drawn: int, *, prior_alpha: float, prior_beta: float,
                     group_size: int, settle_high: float, settle_low: float,
                     min_samples: int, max_samples: int) -> str:
  """What the adaptive profile makes of a prompt so far: 'sample' (draw another),
  'learnable' (P_inf(group_size) >= settle_high), 'skip' (P_inf <= settle_low: confidently
  trivial or unsolved) or 'undecided' (max_samples reached in between; treated as
  learnable, the training rollouts decide)."""
  if not 1 <= min_samples <= max_samples:
    raise ValueError(f'need 1 <= sgpo_bayes.profile_min_samples ({min_samples}) <= '
                     f'sgpo_bayes.profile_max_samples ({max_samples})')
  if not 0 <= n_correct <= n_drawn:
    raise ValueError(f'n_correct={n_correct}, n_drawn={n_drawn} is not a valid count')
  if n_drawn >= min_samples:
    p_inf = float(informative_probability(prior_alpha + n_correct,
                                          prior_beta + n_drawn - n_correct, group_size))
    if p_inf >= settle_high:
      return 'learnable'
    if p_inf <= settle_low:
      return 'skip'
  return 'undecided' if n_drawn >= max_samples else 'sample'


def choose_group_sizes(a_P, b_P, group_sizes: Sequence[int], rows: int,
                       signal_exponent: float = 0.0,
                       min_value_per_row: float = 0.0) -> np.ndarray:
  """Greedy knapsack over candidates P (in priority order): int32 [P] group sizes, 0 = not
  taken, sum <= rows.

  Each step takes the option with the largest marginal value per row that still fits:
  a new prompt at min(group_sizes) (value / G) or a taken prompt grown to its next size
  ((value(G') - value(G)) / (G' - G)). Ties go to the earlier candidate, then to adding over
  growing. Options worth < min_value_per_row per row are never taken.
  """
  sizes = sorted({int(g) for g in group_sizes})
  if not sizes or sizes[0] < 1:
    raise ValueError(f'sgpo_bayes.group_sizes={tuple(group_sizes)} must be positive integers')
  a_P, b_P = _as_float(a_P).reshape(-1), _as_float(b_P).reshape(-1)
  num = a_P.size
  value_PxS = np.stack([group_value(a_P, b_P, g, signal_exponent) for g in sizes], axis=1) \
      if num else np.zeros((0, len(sizes)))
  level_P = np.full(num, -1)  # index into sizes, -1 = not taken
  used = 0
  while True:
    best, best_key = None, None
    for p in range(num):
      lvl = level_P[p]
      if lvl + 1 >= len(sizes):
        continue
      g_now = 0 if lvl < 0 else sizes[lvl]
      g_next = sizes[lvl + 1]
      if used + g_next - g_now > rows:
        continue
      v_now = 0.0 if lvl < 0 else value_PxS[p, lvl]
      per_row = (value_PxS[p, lvl + 1] - v_now) / (g_next - g_now)
      if per_row < min_value_per_row:
        continue
      key = (-per_row, lvl >= 0, p)  # larger per-row value, then adding, then earlier
      if best_key is None or key < best_key:
        best, best_key = p, key
    if best is None:
      break
    lvl = level_P[best]
    used += sizes[lvl + 1] - (0 if lvl < 0 else sizes[lvl])
    level_P[best] = lvl + 1
  return np.array([0 if lvl < 0 else sizes[lvl] for lvl in level_P], dtype=np.int32)


def revisit_probability(skips: int | np.ndarray, base: float, floor: float,
                        pool_passes: float = 1.0) -> np.ndarray:
  """GRESO-style: a deprioritised prompt is revisited with probability max(base**skips,
  floor) per pass over the pool (skips = consecutive all-equal observations, >= 1).

  pool_passes: how much training happened since the last draw, in pool passes (prompt visits
  / pool size); the probability for that stretch is 1 - (1 - p)**pool_passes, so a run whose
  epochs over a few learnable prompts are short does not probe the rest every few steps.
  """
  if not 0.0 <= floor <= base <= 1.0:
    raise ValueError(f'need 0 <= sgpo_bayes.revisit_floor ({floor}) <= sgpo_bayes.revisit_base '
                     f'({base}) <= 1')
  if pool_passes < 0:
    raise ValueError(f'pool_passes={pool_passes} must be >= 0')
  per_pass = np.maximum(base ** np.maximum(_as_float(skips), 1.0), floor)
  return 1.0 - (1.0 - per_pass) ** pool_passes


def adapt_revisit_base(base: float, informative_share: float, target: float, step: float,
                       floor: float, ceiling: float = 1.0) -> float:
  """Moves the revisit base one step up when revisited groups were informative more often
  than `target` (deprioritised prompts are coming back), one step down otherwise."""
  new = base + step if informative_share > target else base - step
  return float(min(max(new, floor), ceiling))
