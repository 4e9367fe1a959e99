"""sGPO: walks an `sgpo.Allocation` phase by phase (curriculum or 'mix').

Beyond the paper (off by default): trivial replay and online Beta-posterior re-bucketing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.base import (
  BatchPlan,
  EpochCursor,
  PlanAllocator,
  register_allocator,
  stream_rng,
)
from sgpo_jax.allocators.rows import RowLayout
from sgpo_jax.allocators.sgpo import allocation as sgpo_lib
from sgpo_jax.allocators.sgpo.allocation import Allocation, SGPOSettings

_PHASE_STREAM = 0x9A5E
_REPLAY_STREAM = 0x8E91
# How far ahead a mixed-G batch looks for a prompt that fits the rows left, so a batch is
# not closed early just because the next prompt's group is too large.
_LOOKAHEAD = 64


@dataclasses.dataclass
class SGPOState:
  """Everything that changes while walking the allocation (the checkpointed cursor)."""
  cycle: int = 0
  phase_pos: int = -1  # -1: not started
  items_q: list = dataclasses.field(default_factory=list)  # the phase's prompts, unshuffled
  items_g: list = dataclasses.field(default_factory=list)
  order_q: list = dataclasses.field(default_factory=list)  # this epoch's order
  order_g: list = dataclasses.field(default_factory=list)
  epoch: int = 0
  cursor: int = 0
  served: int = 0
  budget: int = 0
  phase_rewards: list = dataclasses.field(default_factory=list)
  plateaued: bool = False
  pending: list = dataclasses.field(default_factory=list)  # online: not yet trained this cycle
  replay: EpochCursor = dataclasses.field(default_factory=EpochCursor)
  step: int = 0
  # Online update: Beta posterior per query (alpha, beta) and observed row counts.
  alpha: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  beta: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  observed: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


@register_allocator('sgpo')
class SGPOAllocator(PlanAllocator):
  """Walks the allocation's phases in order; after the last phase it starts over at the
  first (a new 'cycle', fresh shuffles), so train.num_steps is the only cap.

  A phase serves ceil(phase_epochs * P) prompts (reshuffled each epoch), and with
  phase_plateau_window = w > 0 ends early once mean train reward over the last w observed
  steps minus that over the w before is < phase_plateau_delta (set phase_epochs high to
  run each phase to its plateau, as the paper does). A phase's last batch is padded, or
  with fill_phase_tail=True topped up from the next phase (that one batch mixes two G).

  Beyond the paper (off by default):
  - trivial_replay_fraction f: floor(f * R / min G) prompts per batch are trivial queries
    at min(group_sizes) (own shuffled stream), capped so a phase prompt of max G still
    fits; a no-op when no query is trivial.
  - online_update: a Beta posterior per query, alpha = kappa * p_hat + eps, beta =
    kappa * (1 - p_hat) + eps (kappa = prior_strength, eps = prior_eps), updated in
    observe() with clip(reward, 0, 1) per valid row. At each phase start the
    profiled-learnable queries not yet trained in this cycle that have observations are
    re-bucketed from the posterior mean (dropped for the cycle if now > trivial_threshold);
    the phase takes those with G' <= its G (the last phase takes the rest), each at its
    own G' (with clip=False capped at the largest size rows_per_batch was validated for),
    so its batches may mix sizes. Queries never observed keep their profiled G.
    Unsolved subsets keep the paper's rule (the phase's G).
  """
  Settings = SGPOSettings
  needs_profile = True

  def __init__(self, allocation: Allocation, settings: SGPOSettings | Any,
               rows_per_batch: int, seed: int = 0, num_queries: int | None = None):
    if not isinstance(settings, SGPOSettings):
      settings = SGPOSettings.from_config(settings)
    if not allocation.phases:
      raise ValueError('allocation has no phases; allocate() should have raised')
    self.allocation = allocation
    self.settings = settings
    self.rows_per_batch = int(rows_per_batch)
    self.seed = int(seed)
    self.num_queries = int(num_queries if num_queries is not None
                           else int(allocation.query_index.max()) + 1)
    if allocation.query_index.max() >= self.num_queries:
      raise ValueError(f'allocation refers to query {int(allocation.query_index.max())} but '
                       f'num_queries={self.num_queries}')
    self._min_group_size = min(settings.group_sizes)
    self._trivial = allocation.trivial_query_index.astype(np.int64)
    self._replay_prompts, self._max_group_size = self._row_budget()
    # Phase clusters (profiled-learnable), as (query, G) arrays.
    self._clusters = [p.query_index[:p.num_prompts - p.n_unsolved] for p in allocation.phases]
    self._cluster_g = [p.group_size[:p.num_prompts - p.n_unsolved] for p in allocation.phases]
    self.state = SGPOState()
    kappa, eps = settings.prior_strength, settings.prior_eps
    p_hat = np.full(self.num_queries, 0.5)
    p_hat[allocation.query_index] = allocation.p_hat
    self.state.alpha = kappa * p_hat + eps
    self.state.beta = kappa * (1.0 - p_hat) + eps
    self.state.observed = np.zeros(self.num_queries, np.int64)

  def _row_budget(self) -> tuple[int, int]:
    """(replay prompts per batch, largest G a batch may hold); validates rows_per_batch."""
    s = self.settings
    sizes = {int(g) for p in self.allocation.phases for g in p.group_size}
    if s.online_update and s.clip:
      sizes |= set(s.group_sizes)
    replay_prompts = 0
    if s.trivial_replay_fraction > 0 and self._trivial.size:
      sizes.add(self._min_group_size)
      room = max(self.rows_per_batch - max(sizes), 0)
      replay_prompts = min(
          int(s.trivial_replay_fraction * self.rows_per_batch) // self._min_group_size,
          room // self._min_group_size)
    rows_lib.check_rows_per_batch(self.rows_per_batch, sorted(sizes))
    return replay_prompts, max(sizes)

  @classmethod
  def allocate(cls, config: Any, profile: Any) -> Allocation:
    return sgpo_lib.allocate(profile, SGPOSettings.from_config(config.sgpo), int(config.seed))

  @classmethod
  def profile_settled(cls, config: Any) -> Callable[[int, int], bool]:
    k = int(config.profile.num_samples)
    settings = SGPOSettings.from_config(config.sgpo)
    return lambda n_correct, n_drawn: sgpo_lib.bucket_settled(n_correct, n_drawn, k, settings)

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None) -> SGPOAllocator:
    """`profile`: an `sgpo.Allocation`, or anything `sgpo.allocate` accepts (allocated
    with config.sgpo and config.seed)."""
    if profile is None:
      raise ValueError('method=sgpo needs the profile (p_hat per query); profile the '
                       'initial policy first and pass it to make_allocator')
    allocation = profile if isinstance(profile, Allocation) else cls.allocate(config, profile)
    return cls(allocation, SGPOSettings.from_config(config.sgpo),
               int(config.train.rows_per_batch), int(config.seed), num_queries)

  # -- phases --------------------------------------------------------------------------

  @property
  def phase_name(self) -> str:
    return self.allocation.phases[max(self.state.phase_pos, 0)].name

  @property
  def cycle(self) -> int:
    return self.state.cycle

  def posterior_mean(self) -> np.ndarray:
    return self.state.alpha / (self.state.alpha + self.state.beta)

  def _phase_items(self, pos: int) -> tuple[list[int], list[int]]:
    phase, st, s = self.allocation.phases[pos], self.state, self.settings
    unsolved_q = phase.query_index[phase.num_prompts - phase.n_unsolved:]
    unsolved_g = phase.group_size[phase.num_prompts - phase.n_unsolved:]
    if not s.online_update:
      return phase.query_index.tolist(), phase.group_size.tolist()
    if pos == 0:
      st.pending = np.concatenate(self._clusters).tolist()
    profiled_g = {}
    for q_P, g_P in zip(self._clusters, self._cluster_g):
      profiled_g.update(zip(q_P.tolist(), g_P.tolist()))
    mean = self.posterior_mean()
    last = pos == len(self.allocation.phases) - 1
    phase_g = int(phase.group_size.max()) if phase.name != 'mix' else None
    take_q, take_g, keep_pending = [], [], []
    for q in st.pending:
      if st.observed[q] == 0:
        g = profiled_g[q]
      elif mean[q] > s.trivial_threshold:
        continue  # solved by now: dropped for the rest of this cycle
      else:
        g = sgpo_lib.group_size_for(float(mean[q]), s.group_sizes, s.rounding, s.clip)
        g = min(g, self._max_group_size)  # clip=False: keep within the validated sizes
      if last or phase_g is None or g <= phase_g:
        take_q.append(q)
        take_g.append(g)
      else:
        keep_pending.append(q)
    st.pending = keep_pending
    return take_q + unsolved_q.tolist(), take_g + unsolved_g.tolist()

  def _shuffle_items(self) -> None:
    st = self.state
    rng = stream_rng(self.seed, _PHASE_STREAM, st.cycle, st.phase_pos, st.epoch)
    perm = rng.permutation(len(st.items_q))
    st.order_q = [st.items_q[i] for i in perm]
    st.order_g = [st.items_g[i] for i in perm]
    st.cursor = 0

  def _start_next_phase(self) -> bool:
    """Moves to the next non-empty phase (cycling); False if a whole cycle is empty."""
    st = self.state
    num_phases = len(self.allocation.phases)
    for _ in range(num_phases + 1):
      st.phase_pos += 1
      if st.phase_pos == num_phases:
        st.phase_pos, st.cycle = 0, st.cycle + 1
      st.items_q, st.items_g = self._phase_items(st.phase_pos)
      st.epoch, st.served = 0, 0
      st.budget = math.ceil(self.settings.phase_epochs * len(st.items_q) - 1e-9)
      st.phase_rewards, st.plateaued = [], False
      if st.budget > 0:
        self._shuffle_items()
        return True
    return False

  def _phase_finished(self) -> bool:
    st = self.state
    return st.phase_pos < 0 or st.served >= st.budget or st.plateaued

  # -- the plan interface --------------------------------------------------------------

  def _replay_batch(self) -> list[int]:
    if not self._replay_prompts:
      return []
    picks = self.state.replay.take(self._replay_prompts, self._trivial.size,
                                   (self.seed, _REPLAY_STREAM))
    return self._trivial[picks].tolist()

  def _take_phase_prompts(self, capacity: int, take_q: list[int], take_g: list[int]) -> int:
    """Moves prompts of the current phase that fit `capacity` rows; returns rows left."""
    st = self.state
    while st.served < st.budget and capacity > 0:
      if st.cursor == len(st.order_q):
        st.epoch += 1
        self._shuffle_items()
      end = min(st.cursor + _LOOKAHEAD, len(st.order_q))
      fit = next((j for j in range(st.cursor, end) if st.order_g[j] <= capacity), None)
      if fit is None:
        break
      c = st.cursor
      st.order_q[c], st.order_q[fit] = st.order_q[fit], st.order_q[c]
      st.order_g[c], st.order_g[fit] = st.order_g[fit], st.order_g[c]
      take_q.append(st.order_q[c])
      take_g.append(st.order_g[c])
      capacity -= st.order_g[c]
      st.cursor += 1
      st.served += 1
    return capacity

  def next_plan(self) -> BatchPlan | None:
    if self._phase_finished():
      if not self._start_next_phase():
        return None
    replay_q = self._replay_batch()
    capacity = self.rows_per_batch - len(replay_q) * self._min_group_size
    take_q: list[int] = []
    take_g: list[int] = []
    phase = self.phase_name  # a tail-filled batch is named by the phase it started in
    while True:
      capacity = self._take_phase_prompts(capacity, take_q, take_g)
      # fill_phase_tail: a phase's last batch continues into the next phase, not padding.
      if not (self.settings.fill_phase_tail and capacity > 0 and take_q
              and self._phase_finished() and self._start_next_phase()):
        break
    self.state.step += 1
    query_index = np.array(take_q + replay_q, dtype=np.int64)
    group_size = np.array(take_g + [self._min_group_size] * len(replay_q), dtype=np.int32)
    is_replay = np.arange(query_index.size) >= len(take_q)
    return BatchPlan(query_index, group_size, phase, is_replay if replay_q else None)

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout) -> None:
    st = self.state
    rewards_R = np.asarray(rewards_R, dtype=np.float64).reshape(-1)
    valid_R = layout.valid_R
    if self.settings.online_update:
      rows = np.flatnonzero(valid_R)
      success = np.clip(rewards_R[rows], 0.0, 1.0)
      queries, inverse = np.unique(layout.row_query_index_R[rows], return_inverse=True)
      successes = np.bincount(inverse, weights=success, minlength=queries.size)
      failures = np.bincount(inverse, weights=1.0 - success, minlength=queries.size)
      # The Beta posterior's update: nothing decays and the profiled prior is already in
      # alpha and beta, so the new counts are simply added.
      st.alpha[queries] = st.alpha[queries] + successes
      st.beta[queries] = st.beta[queries] + failures
      st.observed[queries] += np.bincount(inverse, minlength=queries.size)
    if plan.phase != self.phase_name or plan.num_prompts == 0:
      return  # a stale plan from an earlier phase says nothing about this one's plateau
    phase_rows_R = valid_R.copy()
    if plan.is_replay is not None:
      phase_rows_R &= ~plan.is_replay[np.minimum(layout.group_id_R, plan.num_prompts - 1)]
    if phase_rows_R.any():
      st.phase_rewards.append(float(rewards_R[phase_rows_R].mean()))
    w = self.settings.phase_plateau_window
    if w > 0 and len(st.phase_rewards) >= 2 * w:
      recent = np.mean(st.phase_rewards[-w:])
      before = np.mean(st.phase_rewards[-2 * w:-w])
      if recent - before < self.settings.phase_plateau_delta:
        st.plateaued = True
