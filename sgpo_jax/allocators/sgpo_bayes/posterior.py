"""The math of `method=sgpo_bayes`: a Beta posterior per prompt -> profile stops, G, revisits.

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


def _as_float(x) -> np.ndarray:
  return np.asarray(x, dtype=np.float64)


def check_beta(a, b) -> None:
  a, b = _as_float(a), _as_float(b)
  if np.any(~np.isfinite(a)) or np.any(~np.isfinite(b)) or np.any(a <= 0) or np.any(b <= 0):
    raise ValueError(f'Beta parameters must be finite and > 0; got a={a}, b={b} '
                     '(set sgpo_bayes.prior_alpha and sgpo_bayes.prior_beta > 0)')


def expected_power(a, b, power: int) -> np.ndarray:
  """E[p**power] under Beta(a, b) = prod_{i<power} (a + i) / (a + b + i) (exact ratio of Beta
  functions for an integer power; power = 0 gives 1)."""
  if int(power) != power or power < 0:
    raise ValueError(f'power={power} must be a non-negative integer (a group size)')
  a, b = _as_float(a), _as_float(b)
  out = np.ones(np.broadcast(a, b).shape)
  for i in range(int(power)):
    out = out * (a + i) / (a + b + i)
  return out


def informative_probability(a, b, group_size: int) -> np.ndarray:
  """P(a group of `group_size` rollouts has >= 1 success and >= 1 failure) under Beta(a, b)."""
  check_beta(a, b)
  return 1.0 - expected_power(a, b, group_size) - expected_power(b, a, group_size)


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


def refill_lowers_cost(filled_rows: int, expected_new_rows: float, rounds_done: int, rows: int,
                       train_cost_per_row: float) -> bool:
  """Whether one more generation round of a post-filtered batch lowers the expected FLOPs
  per trained informative row (costs in units of generating one row).

  The batch so far cost rounds_done * rows (every round generates all R rows) plus
  train_cost_per_row * rows (the train step is charged for every row, padding included);
  another round costs rows more and is expected to add min(expected_new_rows, free rows).
  train_cost_per_row = 0 or an empty batch: always refill (DAPO's rule).
  """
  if train_cost_per_row < 0:
    raise ValueError(f'sgpo_bayes.train_cost_per_row={train_cost_per_row} must be >= 0')
  if train_cost_per_row == 0 or filled_rows <= 0:
    return True
  cost = (rounds_done + train_cost_per_row) * rows
  gain = min(float(expected_new_rows), rows - filled_rows)
  return (cost + rows) / (filled_rows + gain) < cost / filled_rows


def pooled_prior(succ_Q, fail_Q, stratum_Q, prior_alpha: float, prior_beta: float,
                 strength: float, max_concentration: float) -> tuple[np.ndarray, np.ndarray]:
  """Empirical-Bayes Beta prior per stratum (prompts sharing a feature, e.g. a difficulty
  level) from the evidence of its prompts: float64 [S] (a, b), S = stratum_Q.max() + 1.

  succ_Q / fail_Q are each prompt's (decayed) evidence counts, posterior minus the base prior
  Beta(prior_alpha, prior_beta); prompts with none are unseen and do not count. Per stratum,
  over its k seen prompts (n_i = s_i + f_i samples, rate x_i = s_i / n_i):
  - mean mu = (sum s + prior_alpha) / (sum n + prior_alpha + prior_beta), the pooled rate;
  - between-prompt variance tau2 = (sum n_i (x_i - mu)^2 - k mu (1 - mu)) / sum n, the
    spread of the rates minus their binomial noise, kept within the concentrations
    [0.5, max_concentration] (kappa = mu (1 - mu) / tau2 - 1);
  - that Beta(kappa mu, kappa (1 - mu)) is mixed with `strength` pseudo-prompts of the base
    prior (weights k : strength, first and second moments) and the mixture moment-matched
    back to a Beta. A stratum with no seen prompt gets the base prior exactly.
  So a prompt nobody has rolled out yet starts where its stratum's prompts are: a level whose
  prompts all came back solved starts near-trivial, a level of mostly-unsolved prompts with
  a few informative ones starts U-shaped (low mean, low concentration)."""
  s_Q, f_Q = _as_float(succ_Q).reshape(-1), _as_float(fail_Q).reshape(-1)
  strat_Q = np.asarray(stratum_Q, np.int64).reshape(-1)
  if not (s_Q.shape == f_Q.shape == strat_Q.shape):
    raise ValueError(f'succ {s_Q.shape}, fail {f_Q.shape} and stratum {strat_Q.shape} must '
                     'have one entry per prompt')
  if strat_Q.size and strat_Q.min() < 0:
    raise ValueError(f'stratum ids must be >= 0; got min {strat_Q.min()}')
  if strength < 0 or max_concentration < 0.5:
    raise ValueError(f'sgpo_bayes.pooled_prior_strength={strength} must be >= 0 and '
                     f'sgpo_bayes.pooled_max_concentration={max_concentration} >= 0.5')
  num_s = int(strat_Q.max()) + 1 if strat_Q.size else 0
  n_Q = s_Q + f_Q
  seen_Q = n_Q > 1e-12
  k_S = np.bincount(strat_Q, weights=seen_Q.astype(np.float64), minlength=num_s)
  sum_s_S = np.bincount(strat_Q, weights=np.where(seen_Q, s_Q, 0.0), minlength=num_s)
  sum_n_S = np.bincount(strat_Q, weights=np.where(seen_Q, n_Q, 0.0), minlength=num_s)
  mu_S = (sum_s_S + prior_alpha) / (sum_n_S + prior_alpha + prior_beta)
  x_Q = np.where(seen_Q, s_Q / np.where(seen_Q, n_Q, 1.0), 0.0)
  spread_S = np.bincount(strat_Q, weights=np.where(seen_Q, n_Q * (x_Q - mu_S[strat_Q]) ** 2, 0.0),
                         minlength=num_s)
  var_p_S = mu_S * (1.0 - mu_S)
  tau2_S = (spread_S - k_S * var_p_S) / np.maximum(sum_n_S, 1e-12)
  tau2_S = np.clip(tau2_S, var_p_S / (max_concentration + 1.0), var_p_S / 1.5)
  kappa_S = var_p_S / tau2_S - 1.0
  # Mix with the base prior (moments), then back to a Beta.
  base_m1 = prior_alpha / (prior_alpha + prior_beta)
  base_m2 = prior_alpha * (prior_alpha + 1) / ((prior_alpha + prior_beta) *
                                               (prior_alpha + prior_beta + 1))
  fit_m2 = mu_S * (kappa_S * mu_S + 1.0) / (kappa_S + 1.0)
  w_S = k_S / (k_S + strength) if strength > 0 else (k_S > 0).astype(np.float64)
  m1_S = w_S * mu_S + (1.0 - w_S) * base_m1
  m2_S = w_S * fit_m2 + (1.0 - w_S) * base_m2
  var_S = np.maximum(m2_S - m1_S ** 2, 1e-12)
  conc_S = np.maximum(m1_S * (1.0 - m1_S) / var_S - 1.0, 1e-6)
  a_S, b_S = conc_S * m1_S, conc_S * (1.0 - m1_S)
  none = k_S == 0  # exactly the base prior (no rounding through the moments)
  a_S[none], b_S[none] = prior_alpha, prior_beta
  return a_S, b_S
