"""Knapsack RL budget allocation (Li et al. 2025, arXiv 2509.25849), as pure functions.

Each prompt of a batch is an item; giving it N rollouts costs N rows and is worth

    value(p, N) = (1 - p**N - (1 - p)**N) * p * (1 - p)**2

(probability that the group has reward spread, so a non-zero GRPO gradient, times the
paper's InfoGain approximation p (1 - p)^2), with p the prompt's success rate estimated
from its past rollouts. The per-step problem is a multiple-choice knapsack: every prompt
takes exactly one N from the allowed sizes, the rows sum to at most the budget, and the
summed value is maximal; `solve` does it exactly by dynamic programming over the budget.

Prompts with p in {0, 1} are worth 0 at any N, so the solve gives them the smallest size;
the paper's fallback hands rows the solve leaves unused to the prompts it never sees
solved (p = 0), round robin, up to the largest size (`fallback_fill`).

The allocator that applies it over the one RL loop is `allocators/knapsack/allocator.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from sgpo_jax.allocators.settings import AllocatorSettings


@dataclasses.dataclass(frozen=True)
class KnapsackSettings(AllocatorSettings):
  """config.knapsack: its defaults and range checks."""
  section: ClassVar[str] = 'knapsack'
  group_size: int = 8  # the homogeneous G whose budget is redistributed: R/G prompts a step
  min_group_size: int = 2
  max_group_size: int = 64
  prior_success: float = 0.5  # p of a prompt never rolled out
  fallback: bool = True  # unused rows go to prompts never solved (p = 0)

  def check(self) -> None:
    if not 1 <= self.min_group_size <= self.group_size <= self.max_group_size:
      raise ValueError(f'knapsack: need 1 <= min_group_size ({self.min_group_size}) <= '
                       f'group_size ({self.group_size}) <= max_group_size '
                       f'({self.max_group_size})')
    if not 0.0 <= self.prior_success <= 1.0:
      raise ValueError(f'knapsack.prior_success={self.prior_success} must be in [0, 1]')

  def check_rows_per_batch(self, rows_per_batch: int) -> None:
    super().check_rows_per_batch(rows_per_batch)
    if self.max_group_size > rows_per_batch:
      raise ValueError(f'knapsack.max_group_size={self.max_group_size} exceeds '
                       f'train.rows_per_batch={rows_per_batch}; lower it')

  @property
  def sizes(self) -> tuple[int, ...]:
    return tuple(range(self.min_group_size, self.max_group_size + 1))



def task_value(p: float | np.ndarray, n: int | np.ndarray) -> np.ndarray:
  """(1 - p^N - (1-p)^N) * p * (1-p)^2, elementwise."""
  p = np.asarray(p, dtype=np.float64)
  n = np.asarray(n, dtype=np.float64)
  return (1.0 - p ** n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def solve(p_P: Sequence[float] | np.ndarray, sizes: Sequence[int], budget: int
          ) -> np.ndarray:
  """[P] int: the size per prompt maximising sum value(p_i, N_i) with sum N_i <= budget.

  Exact multiple-choice knapsack by dynamic programming over the rows used. Among equal
  values the solve keeps the smaller sizes (fewer rows), so worthless prompts take
  min(sizes) and the rest of the budget is left for the fallback.
  """
  p_P = np.asarray(p_P, dtype=np.float64).reshape(-1)
  sizes = sorted({int(s) for s in sizes})
  if not sizes or sizes[0] < 1:
    raise ValueError(f'sizes={sizes}: need at least one size, all >= 1')
  if np.any((p_P < 0) | (p_P > 1)) or np.isnan(p_P).any():
    raise ValueError(f'success rates must lie in [0, 1]; got {p_P.tolist()}')
  num = p_P.size
  if num * sizes[0] > budget:
    raise ValueError(f'{num} prompts need at least {num * sizes[0]} rows at the smallest '
                     f'size {sizes[0]} but the budget is {budget}; fewer prompts or a '
                     'larger budget')
  neg = -np.inf
  # best_B[b]: best value of the prompts so far using exactly b rows.
  best_B = np.full(budget + 1, neg)
  best_B[0] = 0.0
  choice_PxB = np.zeros((num, budget + 1), np.int64)
  for i in range(num):
    new_B = np.full(budget + 1, neg)
    for s in sizes:  # ascending: a strictly better value is needed to prefer a larger size
      if s > budget:
        break
      cand_B = np.full(budget + 1, neg)
      cand_B[s:] = best_B[:budget + 1 - s] + float(task_value(p_P[i], s))
      better = cand_B > new_B + 1e-15
      new_B[better] = cand_B[better]
      choice_PxB[i, better] = s
    best_B = new_B
  # The smallest row count reaching the best value.
  top = best_B.max()
  b = int(np.flatnonzero(best_B >= top - 1e-15)[0])
  out = np.zeros(num, np.int64)
  for i in range(num - 1, -1, -1):
    s = int(choice_PxB[i, b])
    out[i] = s
    b -= s
  return out


def fallback_fill(n_P: np.ndarray, p_P: np.ndarray, budget: int, max_size: int) -> np.ndarray:
  """Gives the rows left under the budget to prompts with p == 0, one row each in turn
  (in prompt order), none above max_size. Unchanged when no prompt has p == 0."""
  n_P = np.asarray(n_P, dtype=np.int64).copy()
  unsolved = np.flatnonzero(np.asarray(p_P) == 0.0)
  left = budget - int(n_P.sum())
  if left < 0:
    raise ValueError(f'sizes sum to {int(n_P.sum())} > budget {budget}')
  while left > 0:
    room = [i for i in unsolved if n_P[i] < max_size]
    if not room:
      break
    for i in room:
      if left == 0:
        break
      n_P[i] += 1
      left -= 1
  return n_P


def choose_group_sizes(p_P: Sequence[float] | np.ndarray, settings: KnapsackSettings,
                       budget: int) -> np.ndarray:
  """Group size per prompt for one batch: the knapsack solve, then the fallback."""
  p_P = np.asarray(p_P, dtype=np.float64)
  n_P = solve(p_P, settings.sizes, budget)
  if settings.fallback:
    n_P = fallback_fill(n_P, p_P, budget, settings.max_group_size)
  return n_P

