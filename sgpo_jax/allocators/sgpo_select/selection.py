"""The math of `method=sgpo_select`: which prompts to roll out, at which G, before rolling out.

Pure numpy functions, pinned by hand-computed tests (tests/allocators/test_select.py); the
allocator that iterates them over a run is `allocator.SelectAllocator`.

- `informative_given_p`: the chance that a group of G rollouts of a prompt whose success
  rate is p holds both a success and a failure, 1 - p^G - (1-p)^G: evaluated at a
  Thompson draw of p from the prompt's posterior it is the draw's value of that group.
- `greedy_fill`: fills a round's R rows from the whole pool, greedily by marginal value per
  row (a new prompt at the smallest G, or a taken prompt grown to its next G), so every
  option is paid for by the rows it takes, the only cost a round has (its R rows are
  generated whether or not they hold a prompt).
- `forget`: evidence decays toward the prior as the policy moves (a factor per step).
- `least_recent`: the prompts the exploration floor serves, never-sampled first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def informative_given_p(p_Q, group_sizes: Sequence[int]) -> np.ndarray:
  """float64 [Q, S]: 1 - p^G - (1-p)^G for each success rate p and each G of group_sizes."""
  p_Q = np.asarray(p_Q, np.float64).reshape(-1)
  if np.any(~np.isfinite(p_Q)) or np.any((p_Q < 0) | (p_Q > 1)):
    raise ValueError(f'success rates must lie in [0, 1]; got {p_Q[(p_Q < 0) | (p_Q > 1)][:4]}')
  sizes = np.asarray(list(group_sizes), np.float64)
  return 1.0 - p_Q[:, None] ** sizes - (1.0 - p_Q[:, None]) ** sizes


def greedy_fill(value_QxS: np.ndarray, group_sizes: Sequence[int], rows: int,
                eligible_Q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Greedy knapsack of one round: (query_index [P] int64, group_size [P] int32).

  value_QxS[q, s] is the value of a group of group_sizes[s] rollouts of prompt q (sizes
  sorted ascending). Each step takes the option with the largest marginal value per row
  that still fits the `rows` left: prompt q added at the smallest G (value / G) or a taken
  prompt grown to its next G ((v' - v) / (G' - G)). Ties go to the lower prompt index, then
  to adding over growing. Options with a non-positive marginal value are never taken.
  The prompts come back in the order they were first taken (best value per row first), so a
  post-filter that keeps groups while they fit keeps the most valuable ones.
  """
  sizes = [int(g) for g in group_sizes]
  if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 1:
    raise ValueError(f'group_sizes={tuple(group_sizes)} must be distinct positive integers in '
                     'ascending order')
  value_QxS = np.asarray(value_QxS, np.float64)
  num_q = value_QxS.shape[0]
  if value_QxS.shape != (num_q, len(sizes)):
    raise ValueError(f'value has shape {value_QxS.shape}; expected [Q, {len(sizes)}]')
  ok_Q = np.ones(num_q, bool) if eligible_Q is None else np.asarray(eligible_Q, bool).copy()
  sizes_S = np.asarray(sizes)
  level_Q = np.full(num_q, -1)  # index into sizes; -1 = not taken
  first_taken: list[int] = []
  left = int(rows)
  while True:
    taken_Q = level_Q >= 0
    nxt_Q = level_Q + 1
    can_Q = ok_Q & (nxt_Q < len(sizes))
    nxt_c = np.minimum(nxt_Q, len(sizes) - 1)
    g_now_Q = np.where(taken_Q, sizes_S[np.maximum(level_Q, 0)], 0)
    v_now_Q = np.where(taken_Q, value_QxS[np.arange(num_q), np.maximum(level_Q, 0)], 0.0)
    extra_Q = sizes_S[nxt_c] - g_now_Q
    gain_Q = value_QxS[np.arange(num_q), nxt_c] - v_now_Q
    can_Q &= (extra_Q <= left) & (gain_Q > 0)
    if not can_Q.any():
      break
    per_row_Q = np.where(can_Q, gain_Q / np.maximum(extra_Q, 1), -np.inf)
    best = per_row_Q.max()
    # Ties: adding before growing, then the lower index.
    tied = np.flatnonzero(per_row_Q == best)
    adding = tied[~taken_Q[tied]]
    q = int(adding[0] if adding.size else tied[0])
    if level_Q[q] < 0:
      first_taken.append(q)
    left -= int(extra_Q[q])
    level_Q[q] += 1
  order = np.array(first_taken, np.int64)
  return order, sizes_S[level_Q[order]].astype(np.int32) if order.size else np.zeros(0, np.int32)


def forget(succ_Q, fail_Q, factor: float, steps: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """Evidence after `steps` training steps: both counts scaled by factor**steps (the prior
  never decays, so a prompt nobody samples drifts back to where an unseen one starts)."""
  if not 0.0 < factor <= 1.0:
    raise ValueError(f'sgpo_select.forget={factor} must be in (0, 1] (1 = never forget)')
  if steps < 0:
    raise ValueError(f'steps={steps} must be >= 0')
  scale = float(factor) ** int(steps)
  return np.asarray(succ_Q, np.float64) * scale, np.asarray(fail_Q, np.float64) * scale


def least_recent(last_step_Q, eligible_Q, count: int, tie_break_Q) -> np.ndarray:
  """int64 [<= count]: the eligible prompts sampled longest ago (last_step -1 = never:
  first), ties in the order of tie_break_Q (a random permutation rank per prompt)."""
  last_Q = np.asarray(last_step_Q, np.int64)
  cand = np.flatnonzero(np.asarray(eligible_Q, bool))
  if count <= 0 or cand.size == 0:
    return np.zeros(0, np.int64)
  order = np.lexsort((np.asarray(tie_break_Q)[cand], last_Q[cand]))
  return cand[order[:count]].astype(np.int64)
