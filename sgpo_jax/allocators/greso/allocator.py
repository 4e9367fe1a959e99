"""GRESO (arXiv 2506.02177) as an allocator: DAPO dynamic sampling whose rounds skip
likely-zero-variance prompts before rollout (the rule: `sgpo_jax/allocators/greso/rule.py`).

The pool walk is GRPO's (`pool_walk.py`, a fresh shuffle per epoch); each candidate prompt
is skipped with `greso.skip_probability` of its all-correct / all-wrong streaks, else it
joins the round (R/G prompts a round); the rounds are DAPO's (`dynamic_sampling.py`). A
skipped prompt costs nothing; every round rolled out goes through the trainer's rollout_fn,
so its FLOPs are charged like DAPO's, trained on or not.
The exploration probabilities adapt once per training step, at the start of the next
one, from the prompts rolled out over the step's rounds (from the second epoch on).
"""

from __future__ import annotations

import dataclasses
from typing import Any

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
  stream_rng,
)
from sgpo_jax.allocators.greso import rule
from sgpo_jax.allocators.pool_walk import take_pool_prompts

_GRESO_STREAM = 0x6E50  # seed-sequence tag of the skip draws


@dataclasses.dataclass
class GRESOState:
  walk: EpochCursor
  easy_streak: np.ndarray  # [Q] int64: consecutive all-correct rollouts, most recent last
  hard_streak: np.ndarray  # [Q] int64: consecutive all-wrong rollouts
  p_easy: float
  p_hard: float
  plans: int = 0  # rounds planned so far: keys each round's skip draws
  steps: int = 0  # batches started
  step_easy: int = 0  # this step's rolled-out prompts that were all-correct
  step_hard: int = 0
  step_total: int = 0
  skipped_total: int = 0
  step_skipped: int = 0


@register_allocator('greso')
class GRESOAllocator(Allocator):
  """DAPO rounds with GRESO's pre-rollout skip; see the module docstring."""
  Settings = rule.GRESOSettings

  def __init__(self, num_queries: int, settings: rule.GRESOSettings, rows_per_batch: int,
               seed: int = 0):
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    rows_lib.check_rows_per_batch(rows_per_batch, (settings.group_size,))
    self.num_queries, self.seed = int(num_queries), int(seed)
    self.group_size, self.rows_per_batch = settings.group_size, int(rows_per_batch)
    self.max_rounds = settings.max_rounds
    self.prompts_per_batch = self.rows_per_batch // self.group_size
    self.settings = settings
    self.state = GRESOState(EpochCursor(), np.zeros(self.num_queries, np.int64),
                            np.zeros(self.num_queries, np.int64), settings.p_easy_init,
                            settings.p_hard_init)

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None) -> GRESOAllocator:
    del profile
    settings = rule.GRESOSettings.from_config(config.greso)
    return cls(num_queries, settings, int(config.train.rows_per_batch), int(config.seed))

  @property
  def p_easy(self) -> float:
    return self.state.p_easy

  @property
  def p_hard(self) -> float:
    return self.state.p_hard

  @property
  def skipped_total(self) -> int:
    return self.state.skipped_total

  @property
  def easy_streak(self) -> np.ndarray:
    return self.state.easy_streak

  def next_plan(self) -> BatchPlan:
    st, s = self.state, self.settings
    rng = stream_rng(self.seed, _GRESO_STREAM, st.plans)
    st.plans += 1
    taken: list[int] = []
    while len(taken) < self.prompts_per_batch:
      q = int(take_pool_prompts(st.walk, 1, self.num_queries, self.seed)[0])
      skip = rule.skip_probability(int(st.easy_streak[q]), int(st.hard_streak[q]),
                                   st.p_easy, st.p_hard, s.p_floor)
      if skip > 0 and rng.random() < skip:
        st.skipped_total += 1
        st.step_skipped += 1
        continue
      taken.append(q)
    query_index = np.asarray(taken, np.int64)
    return BatchPlan(query_index, np.full(query_index.size, self.group_size, np.int32),
                     self.name)

  def observe_round(self, layout, rewards_R: np.ndarray) -> None:
    """Streaks and this step's zero-variance counts from one rolled-out round."""
    st = self.state
    rewards_R = np.asarray(rewards_R, dtype=np.float64).reshape(-1)
    valid_ids = layout.group_id_R[layout.valid_R]
    _, first = np.unique(valid_ids, return_index=True)
    for gid in valid_ids[np.sort(first)]:
      rows = (layout.group_id_R == gid) & layout.valid_R
      q = int(layout.row_query_index_R[np.flatnonzero(rows)[0]])
      kind = rule.group_kind(rewards_R[rows])
      st.easy_streak[q], st.hard_streak[q] = rule.update_streaks(
          int(st.easy_streak[q]), int(st.hard_streak[q]), kind)
      st.step_easy += int(kind == rule.EASY)
      st.step_hard += int(kind == rule.HARD)
      st.step_total += 1

  def start_step(self) -> None:
    """Adapts p from the step before (after the first epoch), then opens a new step."""
    st, s = self.state, self.settings
    if st.steps and st.step_total and st.walk.epoch > 0:
      st.p_easy = rule.adapt_probability(st.p_easy, st.step_easy / st.step_total,
                                         s.target_easy, s.delta, s.p_min, s.p_max)
      st.p_hard = rule.adapt_probability(st.p_hard, st.step_hard / st.step_total,
                                         s.target_hard, s.delta, s.p_min, s.p_max)
    st.step_easy = st.step_hard = st.step_total = st.step_skipped = 0
    st.steps += 1

  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch:
    self.start_step()

    def observed(layout, round_index=None, category='rollout'):
      rollout = rollout_fn(layout, round_index=round_index, category=category)
      self.observe_round(layout, rollout.rewards_R)
      return rollout

    batch, rollout = dynamic_sampling.fill_from_rounds(
        observed, lambda: self.next_plan().rows(self.rows_per_batch), self.rows_per_batch,
        self.max_rounds)
    info = dynamic_sampling.round_info(batch)
    info.update(greso_skipped=self.state.step_skipped, greso_p_easy=self.state.p_easy,
                greso_p_hard=self.state.p_hard)
    return FilledBatch(self.name, batch.layout, rollout, info)
