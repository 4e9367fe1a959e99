"""Fixed-G GRPO: every query at one group size, R/G prompts per batch, reshuffled per epoch."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.base import BatchPlan, EpochCursor, PlanAllocator, register_allocator
from sgpo_jax.allocators.pool_walk import take_pool_prompts
from sgpo_jax.allocators.settings import AllocatorSettings, require


@dataclasses.dataclass(frozen=True)
class GRPOSettings(AllocatorSettings):
  """config.grpo: its defaults and range checks."""
  section: ClassVar[str] = 'grpo'
  group_size: int = 8

  def check(self) -> None:
    require(self.group_size >= 2, f'grpo.group_size={self.group_size} must be >= 2 (a group of 1 '
            'never has both a success and a failure, so it never trains).')


@dataclasses.dataclass
class GRPOState:
  walk: EpochCursor = dataclasses.field(default_factory=EpochCursor)


@register_allocator('grpo')
class GRPOAllocator(PlanAllocator):
  """Every query at fixed G, R/G prompts per batch, a fresh shuffle per epoch, endless.

  Batches run across epoch boundaries (no padding); with fewer queries than R/G a query
  can appear twice in one batch as two independent groups.
  """
  Settings = GRPOSettings

  def __init__(self, num_queries: int, group_size: int, rows_per_batch: int, seed: int = 0):
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    rows_lib.check_rows_per_batch(rows_per_batch, (group_size,))
    self.num_queries = int(num_queries)
    self.group_size = int(group_size)
    self.rows_per_batch = int(rows_per_batch)
    self.seed = int(seed)
    self.prompts_per_batch = self.rows_per_batch // self.group_size
    self.state = GRPOState()

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None) -> GRPOAllocator:
    del profile
    settings = GRPOSettings.from_config(config.grpo)
    return cls(num_queries, settings.group_size, int(config.train.rows_per_batch),
               int(config.seed))

  def next_plan(self) -> BatchPlan:
    query_index = take_pool_prompts(self.state.walk, self.prompts_per_batch, self.num_queries,
                                    self.seed)
    return BatchPlan(query_index, np.full(query_index.size, self.group_size, np.int32),
                     self.name)

  @property
  def epoch(self) -> int:
    return self.state.walk.epoch
