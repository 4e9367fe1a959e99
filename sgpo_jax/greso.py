"""GRESO's pre-rollout skip rule (Zheng et al. 2025, arXiv 2506.02177), as pure functions.

GRESO (GRPO with Efficient Selective Rollout) runs dynamic sampling (DAPO: drop groups
whose rewards are all equal, fill the batch from further rounds) and, before each round,
skips prompts that are likely to give such a zero-variance group again:

- A prompt's reward history is reduced to two streaks: how many of its most recent
  rollouts in a row were all-correct ("easy" zero variance), and how many were all-wrong
  ("hard"). A rollout with any spread in rewards resets both to 0.
- A prompt whose last rollout was easy with streak z is skipped with probability
  1 - max(p_easy ** z, p_floor); hard with p_hard; a prompt never seen, or last seen with
  reward spread, is never skipped (probability 0).
- After each training step the exploration probabilities move by +-delta toward a target
  zero-variance share of the prompts rolled out in that step: if the easy share was >=
  target_easy, p_easy -= delta (skip more), else p_easy += delta; clipped to [p_min, p_max].
  The targets split one total: easy = total / 3, hard = 2 * total / 3 (more exploration of
  hard prompts, which turn solvable as the policy improves).

Defaults are the authors' (their public training scripts and trainer): p_easy = p_hard = 0.5
at the start, total target 0.25, delta 0.01, p in [0.05, 0.95], floor 0.01, adaptation only
after the first epoch. `GRESOAllocator` applies the rule over the one RL loop as DAPO's
round source, so every round it rolls out is counted in the FLOPs ledger.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

EASY, HARD, INFORMATIVE = 1, -1, 0


@dataclasses.dataclass(frozen=True)
class GRESOSettings:
  """config.greso, typed and range-checked once (from_config)."""
  group_size: int = 8
  max_rounds: int = 4  # generation rounds per batch before padding the rest (as DAPO)
  p_easy_init: float = 0.5
  p_hard_init: float = 0.5
  target_zero_variance: float = 0.25  # split 1/3 easy, 2/3 hard
  delta: float = 0.01
  p_min: float = 0.05
  p_max: float = 0.95
  p_floor: float = 0.01  # keep probability never below this, however long the streak

  def __post_init__(self) -> None:
    if self.group_size < 2:
      raise ValueError(f'greso.group_size={self.group_size} must be >= 2 (a group of one '
                       'has no reward spread)')
    if self.max_rounds < 1:
      raise ValueError(f'greso.max_rounds={self.max_rounds} must be >= 1')
    if not 0.0 < self.p_min <= self.p_max <= 1.0:
      raise ValueError(f'greso.p_min={self.p_min}, greso.p_max={self.p_max}: need '
                       '0 < p_min <= p_max <= 1')
    for name in ('p_easy_init', 'p_hard_init'):
      v = getattr(self, name)
      if not self.p_min <= v <= self.p_max:
        raise ValueError(f'greso.{name}={v} must lie in [p_min, p_max] = '
                         f'[{self.p_min}, {self.p_max}]')
    if not 0.0 <= self.target_zero_variance <= 1.0:
      raise ValueError(f'greso.target_zero_variance={self.target_zero_variance} must be in '
                       '[0, 1]')
    if not 0.0 <= self.delta <= 1.0:
      raise ValueError(f'greso.delta={self.delta} must be in [0, 1]')
    if not 0.0 <= self.p_floor < 1.0:
      raise ValueError(f'greso.p_floor={self.p_floor} must be in [0, 1)')

  @property
  def target_easy(self) -> float:
    return self.target_zero_variance / 3.0

  @property
  def target_hard(self) -> float:
    return self.target_zero_variance * 2.0 / 3.0

  @classmethod
  def from_config(cls, section: Any) -> GRESOSettings:
    names = {f.name for f in dataclasses.fields(cls)}
    values = dict(section.items()) if hasattr(section, 'items') else dict(section or {})
    unknown = set(values) - names
    if unknown:
      raise ValueError(f'unknown greso settings {sorted(unknown)}; known: {sorted(names)}')
    types = {f.name: type(getattr(cls(), f.name)) for f in dataclasses.fields(cls)}
    return cls(**{k: types[k](v) for k, v in values.items()})


def group_kind(rewards_G: np.ndarray) -> int:
  """EASY if every reward of the group is equal and > 0.5 (all correct), HARD if all equal
  and <= 0.5 (all wrong), INFORMATIVE otherwise (exact comparison, as DAPO's filter)."""
  rewards_G = np.asarray(rewards_G, dtype=np.float64).reshape(-1)
  if rewards_G.size == 0:
    raise ValueError('a group needs at least one reward')
  if rewards_G.max() > rewards_G.min():
    return INFORMATIVE
  return EASY if rewards_G[0] > 0.5 else HARD


def update_streaks(easy_streak: int, hard_streak: int, kind: int) -> tuple[int, int]:
  """The two streaks after one more rollout of the prompt with outcome `kind`."""
  if kind == EASY:
    return easy_streak + 1, 0
  if kind == HARD:
    return 0, hard_streak + 1
  return 0, 0


def skip_probability(easy_streak: int, hard_streak: int, p_easy: float, p_hard: float,
                     p_floor: float = 0.01) -> float:
  """1 - max(p ** streak, p_floor) for the streak that is running; 0 when none is."""
  if easy_streak and hard_streak:
    raise ValueError(f'easy_streak={easy_streak} and hard_streak={hard_streak} cannot both '
                     'run: a rollout is either all-correct or all-wrong')
  if easy_streak:
    return 1.0 - max(p_easy ** easy_streak, p_floor)
  if hard_streak:
    return 1.0 - max(p_hard ** hard_streak, p_floor)
  return 0.0


def adapt_probability(p: float, observed_share: float, target_share: float, delta: float,
                      p_min: float, p_max: float) -> float:
  """One step of GRESO's controller: too many zero-variance prompts -> explore less."""
  if observed_share >= target_share:
    return max(p - delta, p_min)
  return min(p + delta, p_max)


def replay_history(kinds: list[int]) -> tuple[int, int]:
  """The streaks after a whole history of outcomes (oldest first)."""
  easy, hard = 0, 0
  for kind in kinds:
    easy, hard = update_streaks(easy, hard, kind)
  return easy, hard


# ----------------------------------------------------------------------------------------
# The allocator: DAPO's round source with GRESO's pre-rollout skip

_GRESO_STREAM = 0x6E50


def _allocators():
  from sgpo_jax import allocators  # late: allocators.make_allocator imports this module
  return allocators


class GRESOAllocator:
  """DAPO dynamic sampling whose rounds skip likely-zero-variance prompts before rollout.

  Walks the pool like GRPO (a fresh shuffle per epoch); each candidate prompt is skipped
  with `skip_probability` of its streaks, else it joins the round (R/G prompts a round).
  Skipped prompts cost nothing; every round rolled out is charged like DAPO's. The
  exploration probabilities adapt once per training step (at `new_batch_builder`, from
  the prompts rolled out over the previous step's rounds), from the second epoch on.
  """
  kind = 'greso'

  def __init__(self, num_queries: int, settings: GRESOSettings, rows_per_batch: int,
               seed: int = 0):
    alloc = _allocators()
    self.settings = settings
    self._walk = alloc.GRPOAllocator(num_queries, settings.group_size, rows_per_batch, seed)
    self.num_queries, self.seed = int(num_queries), int(seed)
    self.rows_per_batch, self.group_size = int(rows_per_batch), settings.group_size
    self.max_rounds = settings.max_rounds
    self.prompts_per_batch = self.rows_per_batch // self.group_size
    self.easy_streak = np.zeros(self.num_queries, np.int64)
    self.hard_streak = np.zeros(self.num_queries, np.int64)
    self.p_easy, self.p_hard = settings.p_easy_init, settings.p_hard_init
    self._plans = 0  # plans drawn so far: keys each plan's skip draws
    self._steps = 0  # batch builders handed out (training steps started)
    self._step_counts = [0, 0, 0]  # easy, hard, rolled-out prompts since the last step
    self.skipped_total = 0
    self._step_skipped = 0

  @property
  def epoch(self) -> int:
    return self._walk.epoch

  def _next_candidate(self) -> int:
    w = self._walk
    if w._cursor == w.num_queries:
      w._epoch, w._cursor = w._epoch + 1, 0
    q = int(w._order(w._epoch)[w._cursor])
    w._cursor += 1
    return q

  def next_plan(self):
    rng = _allocators()._rng(self.seed, _GRESO_STREAM, self._plans)
    self._plans += 1
    s = self.settings
    taken = []
    while len(taken) < self.prompts_per_batch:
      q = self._next_candidate()
      skip = skip_probability(int(self.easy_streak[q]), int(self.hard_streak[q]),
                              self.p_easy, self.p_hard, s.p_floor)
      if skip > 0 and rng.random() < skip:
        self.skipped_total += 1
        self._step_skipped += 1
        continue
      taken.append(q)
    query_index = np.asarray(taken, np.int64)
    return _allocators().BatchPlan(query_index, np.full(query_index.size, self.group_size,
                                                        np.int32), self.kind)

  def observe(self, plan, rewards_R: np.ndarray, layout) -> None:
    rewards_R = np.asarray(rewards_R, dtype=np.float64).reshape(-1)
    for p, q in enumerate(plan.query_index.tolist()):
      rows = (layout.group_id_R == p) & layout.valid_R
      kind = group_kind(rewards_R[rows])
      self.easy_streak[q], self.hard_streak[q] = update_streaks(
          int(self.easy_streak[q]), int(self.hard_streak[q]), kind)
      self._step_counts[0] += kind == EASY
      self._step_counts[1] += kind == HARD
      self._step_counts[2] += 1

  def _adapt(self) -> None:
    easy, hard, total = self._step_counts
    s = self.settings
    if total and self.epoch > 0:
      self.p_easy = adapt_probability(self.p_easy, easy / total, s.target_easy, s.delta,
                                      s.p_min, s.p_max)
      self.p_hard = adapt_probability(self.p_hard, hard / total, s.target_hard, s.delta,
                                      s.p_min, s.p_max)
    self._step_counts = [0, 0, 0]

  def new_batch_builder(self):
    """Called once per training step: adapts p from the last step, then a DAPO builder."""
    if self._steps:
      self._adapt()
    self._steps += 1
    self._step_skipped = 0
    return _allocators().DAPOBatchBuilder(self.rows_per_batch, self.max_rounds)

  def step_info(self) -> dict:
    return {'greso_skipped': self._step_skipped, 'greso_p_easy': self.p_easy,
            'greso_p_hard': self.p_hard}

  def state_dict(self) -> dict:
    return {'kind': self.kind, 'num_queries': self.num_queries, 'seed': self.seed,
            'epoch': self._walk._epoch, 'cursor': self._walk._cursor,
            'easy_streak': self.easy_streak.tolist(), 'hard_streak': self.hard_streak.tolist(),
            'p_easy': self.p_easy, 'p_hard': self.p_hard, 'plans': self._plans,
            'steps': self._steps, 'step_counts': list(map(int, self._step_counts)),
            'skipped_total': self.skipped_total, 'step_skipped': self._step_skipped}

  def load_state_dict(self, state: dict) -> None:
    _allocators()._check_state(state, self.kind, self.num_queries, self.seed)
    self._walk._epoch, self._walk._cursor = int(state['epoch']), int(state['cursor'])
    self.easy_streak = np.asarray(state['easy_streak'], np.int64)
    self.hard_streak = np.asarray(state['hard_streak'], np.int64)
    self.p_easy, self.p_hard = float(state['p_easy']), float(state['p_hard'])
    self._plans, self._steps = int(state['plans']), int(state['steps'])
    self._step_counts = [int(v) for v in state['step_counts']]
    self.skipped_total = int(state['skipped_total'])
    self._step_skipped = int(state['step_skipped'])
