"""Beta-posterior math shared by the allocators that keep one per prompt (sgpo_bayes, sgpo_select).

A prompt's success rate p gets a Beta(a, b) posterior. A group of G rollouts carries a
learning signal iff it holds at least one success and one failure (binary reward,
group-relative advantage), so the probability that a group is informative, averaged over
the posterior, is

    P_inf(a, b, G) = 1 - E[p^G] - E[(1-p)^G],
    E[p^G] = B(a + G, b) / B(a, b) = prod_{i<G} (a + i) / (a + b + i).

`pooled_prior` is the empirical-Bayes prior a prompt nobody has rolled out starts from, per
stratum (`stratum_ids`: the pool, or its difficulty levels).
Pure numpy functions, pinned by hand-computed tests (tests/allocators/test_bayes.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _as_float(x) -> np.ndarray:
  return np.asarray(x, dtype=np.float64)


def check_beta(a, b) -> None:
  a, b = _as_float(a), _as_float(b)
  if np.any(~np.isfinite(a)) or np.any(~np.isfinite(b)) or np.any(a <= 0) or np.any(b <= 0):
    raise ValueError(f'Beta parameters must be finite and > 0; got a={a}, b={b} '
                     '(set the allocator\'s prior_alpha and prior_beta > 0)')


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


def noise_factor(weight_Q, weight_sq_Q) -> np.ndarray:
  """float64 [Q] sum(w^2) / sum(w) of each prompt's sample weights: how much binomial noise its
  weighted rate carries per unit of evidence (1 when every sample counts fully; c when every
  weight was scaled by c; 1 for a prompt with no evidence)."""
  w_Q, w2_Q = _as_float(weight_Q), _as_float(weight_sq_Q)
  seen_Q = w_Q > 1e-12
  return np.where(seen_Q, w2_Q / np.where(seen_Q, w_Q, 1.0), 1.0)


def decay_sq(weight_sq_Q, decay: float) -> np.ndarray:
  """sum(w^2) after every weight is scaled by `decay` (the evidence's own sum scales by it)."""
  return _as_float(weight_sq_Q) * float(decay) ** 2


def pooled_prior(succ_Q, fail_Q, stratum_Q, prior_alpha: float, prior_beta: float,
                 strength: float, max_concentration: float,
                 noise_Q=None) -> tuple[np.ndarray, np.ndarray]:
  """Empirical-Bayes Beta prior per stratum (prompts sharing a feature, e.g. a difficulty
  level) from the evidence of its prompts: float64 [S] (a, b), S = stratum_Q.max() + 1.

  succ_Q / fail_Q are each prompt's (decayed) evidence counts, posterior minus the base prior
  Beta(prior_alpha, prior_beta); prompts with none are unseen and do not count. Per stratum,
  over its k seen prompts (n_i = s_i + f_i samples, rate x_i = s_i / n_i):
  - mean mu = (sum s + prior_alpha) / (sum n + prior_alpha + prior_beta), the pooled rate;
  - between-prompt variance tau2 = (sum n_i (x_i - mu)^2 - mu (1 - mu) sum c_i) / sum n, the
    spread of the rates minus their binomial noise, kept within the concentrations
    [0.5, max_concentration] (kappa = mu (1 - mu) / tau2 - 1). c_i = `noise_Q` (default 1:
    undecayed counts) is the prompt's `noise_factor`: decayed evidence is a weighted rate
    whose noise does not shrink with its decayed count (n_i (x_i - p_i)^2 has mean
    p_i (1 - p_i) sum w^2 / sum w), so subtracting k mu (1 - mu) from a spread whose decayed
    counts shrank would clip tau2 to its floor and make the prior as concentrated as allowed;
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
    raise ValueError(f'pooled_prior_strength={strength} must be >= 0 and '
                     f'pooled_max_concentration={max_concentration} >= 0.5')
  num_s = int(strat_Q.max()) + 1 if strat_Q.size else 0
  n_Q = s_Q + f_Q
  seen_Q = n_Q > 1e-12
  k_S = np.bincount(strat_Q, weights=seen_Q.astype(np.float64), minlength=num_s)
  c_Q = np.ones_like(n_Q) if noise_Q is None else _as_float(noise_Q).reshape(-1)
  if c_Q.shape != n_Q.shape:
    raise ValueError(f'noise {c_Q.shape} must have one entry per prompt, as succ {n_Q.shape}')
  noise_S = np.bincount(strat_Q, weights=np.where(seen_Q, c_Q, 0.0), minlength=num_s)
  sum_s_S = np.bincount(strat_Q, weights=np.where(seen_Q, s_Q, 0.0), minlength=num_s)
  sum_n_S = np.bincount(strat_Q, weights=np.where(seen_Q, n_Q, 0.0), minlength=num_s)
  mu_S = (sum_s_S + prior_alpha) / (sum_n_S + prior_alpha + prior_beta)
  x_Q = np.where(seen_Q, s_Q / np.where(seen_Q, n_Q, 1.0), 0.0)
  spread_S = np.bincount(strat_Q, weights=np.where(seen_Q, n_Q * (x_Q - mu_S[strat_Q]) ** 2, 0.0),
                         minlength=num_s)
  var_p_S = mu_S * (1.0 - mu_S)
  tau2_S = (spread_S - noise_S * var_p_S) / np.maximum(sum_n_S, 1e-12)
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


def stratum_ids(mode: str, strata: Any, num_queries: int, section: str) -> np.ndarray | None:
  """int64 [Q] stratum ids for a pooled prior, None for mode 'none'.

  'pool': one stratum. 'difficulty': one per distinct value of `strata` (the queries'
  `difficulty` field; queries without one, None, share a stratum of their own). 'auto':
  'difficulty' when some query has a difficulty, else 'pool'. `section` names the config
  section in the error ('sgpo_bayes', 'sgpo_select')."""
  values = list(strata) if strata is not None else []
  if mode == 'auto':
    mode = ('difficulty' if len(values) == num_queries and any(v is not None for v in values)
            else 'pool')
  if mode == 'none':
    return None
  if mode == 'pool':
    return np.zeros(num_queries, np.int64)
  if len(values) != num_queries:
    raise ValueError(f"{section}.pooled_prior='difficulty' needs one difficulty per "
                     f'training query ({num_queries}); got {len(values)}')
  if all(v is None for v in values):
    raise ValueError(f"{section}.pooled_prior='difficulty' but no training query has a "
                     "difficulty (add a 'difficulty' column to the data, or set "
                     f"{section}.pooled_prior='pool' to pool over the whole pool)")
  keys = sorted({v for v in values if v is not None})
  index = {v: i for i, v in enumerate(keys)}
  return np.array([index[v] if v is not None else len(keys) for v in values], np.int64)
