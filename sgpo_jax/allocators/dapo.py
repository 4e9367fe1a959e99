"""DAPO dynamic sampling: rounds of fixed-G groups, all-equal groups dropped, one batch filled.

Each round draws R/G fresh prompts from the pool walk (`pool_walk.py`, the same order as
GRPO's at one seed); the rounds run through the trainer's rollout_fn, so every round's
FLOPs are charged, discarded rows included. The round loop and the keep rule are
`dynamic_sampling.py`. A batch whose `max_rounds` rounds kept no informative group holds
only padding; the trainer then skips its optimizer step (metrics field `skipped_step`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from sgpo_jax.allocators import dynamic_sampling
from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.base import (
  Allocator,
  BatchPlan,
  EpochCursor,
  FilledBatch,
  RolloutFn,
  register_allocator,
)
from sgpo_jax.allocators.pool_walk import take_pool_prompts
from sgpo_jax.allocators.settings import AllocatorSettings, require


@dataclasses.dataclass(frozen=True)
class DAPOSettings(AllocatorSettings):
  """config.dapo: its defaults and range checks."""
  section: ClassVar[str] = 'dapo'
  group_size: int = 8
  max_rounds: int = 4  # generation rounds per batch before padding the rest

  def check(self) -> None:
    require(self.group_size >= 2, f'dapo.group_size={self.group_size} must be >= 2 (a group of 1 '
            'is always all-equal: every round would be dropped).')
    require(self.max_rounds >= 1, f'dapo.max_rounds={self.max_rounds} must be >= 1.')


@dataclasses.dataclass
class DAPOState:
  walk: EpochCursor = dataclasses.field(default_factory=EpochCursor)


@register_allocator('dapo')
class DAPOAllocator(Allocator):
  """Rounds of R/G fresh prompts (the pool walk, phase 'dapo') until one batch of
  informative groups is full or max_rounds rounds have run."""
  Settings = DAPOSettings

  def __init__(self, num_queries: int, group_size: int, rows_per_batch: int,
               max_rounds: int, seed: int = 0):
    DAPOSettings(group_size=group_size, max_rounds=max_rounds)  # range-checked there
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    rows_lib.check_rows_per_batch(rows_per_batch, (group_size,))
    self.num_queries, self.seed = int(num_queries), int(seed)
    self.group_size, self.rows_per_batch = int(group_size), int(rows_per_batch)
    self.max_rounds = int(max_rounds)
    self.prompts_per_batch = self.rows_per_batch // self.group_size
    self.state = DAPOState()

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None) -> DAPOAllocator:
    del profile
    settings = DAPOSettings.from_config(config.dapo)
    return cls(num_queries, settings.group_size, int(config.train.rows_per_batch),
               settings.max_rounds, int(config.seed))

  @property
  def epoch(self) -> int:
    return self.state.walk.epoch

  def next_plan(self) -> BatchPlan:
    """One round's prompts: the next R/G of the pool walk, each at G."""
    query_index = take_pool_prompts(self.state.walk, self.prompts_per_batch, self.num_queries,
                                    self.seed)
    return BatchPlan(query_index, np.full(query_index.size, self.group_size, np.int32),
                     self.name)

  def new_batch_builder(self) -> dynamic_sampling.RoundBatchBuilder:
    return dynamic_sampling.RoundBatchBuilder(self.rows_per_batch, self.max_rounds)

  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch:
    batch, rollout = dynamic_sampling.fill_from_rounds(
        rollout_fn, lambda: self.next_plan().rows(self.rows_per_batch), self.rows_per_batch,
        self.max_rounds)
    return FilledBatch(self.name, batch.layout, rollout, dynamic_sampling.round_info(batch))
