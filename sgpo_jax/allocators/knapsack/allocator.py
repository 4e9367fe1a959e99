"""Knapsack RL (arXiv 2509.25849) as an allocator: R/G prompts a step from the pool walk
(`pool_walk.py`, GRPO's order), each at the group size the knapsack solve gives it (the
math: `solver.py`).

p of a prompt = the mean clipped reward of its last rollout group (settings.prior_success
before its first). One plan per step, at most R rows (padding where the solve and its
fallback leave rows unused); sizes live only in the group ids, so the train step compiles
once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.base import BatchPlan, EpochCursor, PlanAllocator, register_allocator
from sgpo_jax.allocators.knapsack import solver
from sgpo_jax.allocators.pool_walk import take_pool_prompts

UNSEEN = -1.0  # success rate of a prompt never rolled out (JSON-safe, unlike NaN)


@dataclasses.dataclass
class KnapsackState:
  walk: EpochCursor
  success: np.ndarray  # [Q] float64: last group's success rate, UNSEEN before the first


@register_allocator('knapsack')
class KnapsackAllocator(PlanAllocator):
  """Knapsack-sized groups over the pool walk; see the module docstring."""
  Settings = solver.KnapsackSettings

  def __init__(self, num_queries: int, settings: solver.KnapsackSettings, rows_per_batch: int,
               seed: int = 0):
    settings.check_rows_per_batch(rows_per_batch)
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    rows_lib.check_rows_per_batch(rows_per_batch, (settings.group_size,))
    self.num_queries, self.seed = int(num_queries), int(seed)
    self.group_size, self.rows_per_batch = settings.group_size, int(rows_per_batch)
    self.prompts_per_batch = self.rows_per_batch // self.group_size
    self.settings = settings
    self.state = KnapsackState(EpochCursor(), np.full(self.num_queries, UNSEEN))

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None
                  ) -> KnapsackAllocator:
    del profile
    settings = solver.KnapsackSettings.from_config(config.knapsack)
    return cls(num_queries, settings, int(config.train.rows_per_batch), int(config.seed))

  @property
  def success(self) -> np.ndarray:
    return np.where(self.state.success == UNSEEN, np.nan, self.state.success)

  def success_estimate(self, query_index: np.ndarray) -> np.ndarray:
    p = self.state.success[np.asarray(query_index, np.int64)]
    return np.where(p == UNSEEN, self.settings.prior_success, p)

  @property
  def epoch(self) -> int:
    return self.state.walk.epoch

  def next_plan(self) -> BatchPlan:
    query_index = take_pool_prompts(self.state.walk, self.prompts_per_batch, self.num_queries,
                                    self.seed)
    sizes = solver.choose_group_sizes(self.success_estimate(query_index), self.settings,
                                      self.rows_per_batch)
    return BatchPlan(query_index, sizes.astype(np.int32), self.name)

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout) -> None:
    rewards_R = np.clip(np.asarray(rewards_R, dtype=np.float64).reshape(-1), 0.0, 1.0)
    for p, q in enumerate(plan.query_index.tolist()):
      rows = (layout.group_id_R == p) & layout.valid_R
      if rows.any():
        self.state.success[q] = float(rewards_R[rows].mean())
