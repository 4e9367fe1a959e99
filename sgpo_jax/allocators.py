"""Allocators: which prompts, at which group size, go into each RL batch.

Owns the iteration side of every method over the one RL loop (design.md: baselines are
other allocators, not other trainers):
- `GRPOAllocator`: fixed G, all queries, reshuffled every epoch, never ends.
- `SGPOAllocator`: walks an `sgpo.Allocation` phase by phase (curriculum or 'mix'), with
  the beyond-the-paper options trivial replay and online Beta-posterior re-bucketing.
- `DAPOAllocator` + `DAPOBatchBuilder` + `dapo_keep_groups`: DAPO dynamic sampling, i.e.
  generate rounds of fixed-G groups, drop groups whose rewards are all exactly equal, and
  fill one batch from successive rounds.
- `make_allocator`: dispatch on `config.method`.

The loop's contract: `plan = allocator.next_plan()` (None = run ends), `layout =
plan.rows(rows_per_batch)`, roll out and score, `allocator.observe(plan, rewards_R,
layout)`. `state_dict()` is JSON-serialisable and restores the exact continuation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sgpo_jax import sgpo
from sgpo_jax.sgpo import Allocation, RowLayout

# Seed-sequence tags that keep the allocators' random streams apart for one seed.
_GRPO_STREAM = 0x6290
_PHASE_STREAM = 0x9A5E
_REPLAY_STREAM = 0x8E91
# How far ahead a mixed-G batch looks for a prompt that fits the rows left, so a batch is
# not closed early just because the next prompt's group is too large.
_LOOKAHEAD = 64


@dataclasses.dataclass
class BatchPlan:
  """The prompts of one RL batch (or, for DAPO, of one generation round)."""
  query_index: np.ndarray  # [P] int64 indices into the training pool
  group_size: np.ndarray  # [P] int32 G per prompt
  phase: str  # 'G2', 'G4', 'G8', 'mix', 'grpo', 'dapo'
  is_replay: np.ndarray | None = None  # [P] bool: sGPO trivial replay prompts (None = none)

  def rows(self, rows_per_batch: int) -> RowLayout:
    """Fixed-shape row layout; group_id of prompt p's rows is p, padding rows masked."""
    return sgpo.pack_rows(self.query_index, self.group_size, rows_per_batch)

  @property
  def num_prompts(self) -> int:
    return int(self.query_index.size)

  @property
  def num_rows(self) -> int:
    return int(np.sum(self.group_size))


@runtime_checkable
class Allocator(Protocol):

  def next_plan(self) -> BatchPlan | None:
    ...

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout) -> None:
    ...

  def state_dict(self) -> dict:
    ...

  def load_state_dict(self, state: dict) -> None:
    ...


def _rng(*keys: int) -> np.random.Generator:
  return np.random.default_rng(np.random.SeedSequence([int(k) for k in keys]))


def _check_state(state: dict, kind: str, num_queries: int, seed: int) -> None:
  """A saved cursor only means something for the same method, pool and seed."""
  if state.get('kind') != kind:
    raise ValueError(f"allocator state is for {state.get('kind')!r}, not {kind!r}; resume "
                     'with the same config.method')
  if state['num_queries'] != num_queries or state['seed'] != seed:
    raise ValueError(f"allocator state has num_queries={state['num_queries']}, "
                     f"seed={state['seed']} but this run has {num_queries}, "
                     f'{seed}; resume with the same data and seed')


# ----------------------------------------------------------------------------------------
# Fixed-G GRPO (and the round source of DAPO)


class GRPOAllocator:
  """Every query at fixed G, R/G prompts per batch, a fresh shuffle per epoch, endless.

  Batches run across epoch boundaries (no padding); with fewer queries than R/G a query
  can appear twice in one batch as two independent groups.
  """
  kind = 'grpo'

  def __init__(self, num_queries: int, group_size: int, rows_per_batch: int, seed: int = 0):
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    sgpo.validate_rows_per_batch(rows_per_batch, (group_size,))
    self.num_queries = int(num_queries)
    self.group_size = int(group_size)
    self.rows_per_batch = int(rows_per_batch)
    self.seed = int(seed)
    self.prompts_per_batch = self.rows_per_batch // self.group_size
    self._epoch = 0
    self._cursor = 0
    self._order_cache: tuple[int, np.ndarray] | None = None

  def _order(self, epoch: int) -> np.ndarray:
    if self._order_cache is None or self._order_cache[0] != epoch:
      self._order_cache = (epoch, _rng(self.seed, _GRPO_STREAM, epoch)
                           .permutation(self.num_queries))
    return self._order_cache[1]

  def next_plan(self) -> BatchPlan | None:
    taken, count = [], 0
    while count < self.prompts_per_batch:
      if self._cursor == self.num_queries:
        self._epoch, self._cursor = self._epoch + 1, 0
      take = min(self.prompts_per_batch - count, self.num_queries - self._cursor)
      taken.append(self._order(self._epoch)[self._cursor:self._cursor + take])
      self._cursor += take
      count += take
    query_index = np.concatenate(taken).astype(np.int64)
    return BatchPlan(query_index, np.full(query_index.size, self.group_size, np.int32),
                     self.kind)

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout) -> None:
    del plan, rewards_R, layout  # fixed schedule: nothing learnt from rewards

  @property
  def epoch(self) -> int:
    return self._epoch

  def state_dict(self) -> dict:
    return {'kind': self.kind, 'epoch': self._epoch, 'cursor': self._cursor,
            'num_queries': self.num_queries, 'seed': self.seed}

  def load_state_dict(self, state: dict) -> None:
    _check_state(state, self.kind, self.num_queries, self.seed)
    self._epoch, self._cursor = int(state['epoch']), int(state['cursor'])


# ----------------------------------------------------------------------------------------
# DAPO dynamic sampling


def dapo_keep_groups(rewards_R: np.ndarray, group_id_R: np.ndarray, valid_R: np.ndarray,
                     num_groups: int) -> np.ndarray:
  """Bool [R]: rows of groups whose valid rewards are not all EXACTLY equal.

  A group is dropped iff max == min over its valid rows (so a group with a single valid
  row is dropped too); padding rows are never kept. Exact comparison on purpose: a
  `std > 0` test keeps all-equal groups with float noise.
  """
  rewards_R = np.asarray(rewards_R, dtype=np.float64).reshape(-1)
  group_id_R = np.asarray(group_id_R, dtype=np.int64).reshape(-1)
  valid_R = np.asarray(valid_R, dtype=bool).reshape(-1)
  if not rewards_R.shape == group_id_R.shape == valid_R.shape:
    raise ValueError(f'rewards ({rewards_R.size}), group ids ({group_id_R.size}) and valid '
                     f'({valid_R.size}) must have one entry per row')
  if np.isnan(rewards_R[valid_R]).any():
    raise ValueError('a valid row has reward NaN; fix the reward function')
  if group_id_R.size and (group_id_R.min() < 0 or group_id_R.max() >= num_groups):
    raise ValueError(f'group ids span [{group_id_R.min()}, {group_id_R.max()}] but '
                     f'num_groups={num_groups}; ids must lie in [0, num_groups)')
  max_G = np.full(num_groups, -np.inf)
  min_G = np.full(num_groups, np.inf)
  np.maximum.at(max_G, group_id_R[valid_R], rewards_R[valid_R])
  np.minimum.at(min_G, group_id_R[valid_R], rewards_R[valid_R])
  informative_G = max_G > min_G
  return valid_R & informative_G[group_id_R]


@dataclasses.dataclass
class DAPOBatch:
  """One training batch assembled from DAPO generation rounds.

  Row r of the batch is row `round_row_R[r]` of round `round_index_R[r]` (-1 = padding);
  `gather` applies that mapping to any per-round array (tokens, logprobs, masks).
  """
  round_index_R: np.ndarray  # [R] int32, -1 for padding
  round_row_R: np.ndarray  # [R] int32, -1 for padding
  layout: RowLayout  # fresh group ids 0..kept_groups-1, each padding row its own id
  rewards_R: np.ndarray  # [R] float32, 0 on padding
  rounds: int  # generation rounds run for this batch
  generated_rows: int  # rows sampled over all rounds (rounds * R): their FLOPs count
  generated_valid_rows: int  # of those, rows of real prompts
  discarded_rows: int  # valid generated rows not trained on (all-equal groups + overflow)
  kept_groups: int
  dropped_groups: int  # all-equal reward groups
  overflow_groups: int  # informative groups that did not fit the batch

  def gather(self, per_round: Sequence[np.ndarray], fill: Any = 0) -> np.ndarray:
    """Stack rows [R, ...] from per-round arrays [R, ...]; padding rows get `fill`."""
    if len(per_round) != self.rounds:
      raise ValueError(f'got {len(per_round)} per-round arrays for {self.rounds} rounds')
    first = np.asarray(per_round[0])
    out = np.full((self.round_index_R.size,) + first.shape[1:], fill, dtype=first.dtype)
    for k, arr in enumerate(per_round):
      rows = np.flatnonzero(self.round_index_R == k)
      out[rows] = np.asarray(arr)[self.round_row_R[rows]]
    return out


class DAPOBatchBuilder:
  """Accumulates informative groups from successive rounds into one batch of R rows.

  Usage: `while not builder.done: plan = allocator.next_plan(); layout =
  plan.rows(R); ...sample, score...; builder.add_round(layout, rewards_R)`, then
  `batch = builder.build()`. Informative groups are taken in order while they fit; the
  batch is done when R rows are filled or max_rounds rounds have run (the rest padded).
  """

  def __init__(self, rows_per_batch: int, max_rounds: int):
    if max_rounds < 1:
      raise ValueError(f'max_rounds={max_rounds} must be >= 1')
    self.rows_per_batch = int(rows_per_batch)
    self.max_rounds = int(max_rounds)
    self._round_index: list[np.ndarray] = []
    self._round_row: list[np.ndarray] = []
    self._group_size: list[int] = []
    self._query: list[np.ndarray] = []
    self._rewards: list[np.ndarray] = []
    self._filled = 0
    self._rounds = 0
    self._generated_valid = 0
    self._dropped_groups = 0
    self._overflow_groups = 0

  @property
  def rounds(self) -> int:
    return self._rounds

  @property
  def filled_rows(self) -> int:
    return self._filled

  @property
  def done(self) -> bool:
    return self._filled >= self.rows_per_batch or self._rounds >= self.max_rounds

  def add_round(self, layout: RowLayout, rewards_R: np.ndarray) -> int:
    """Adds one scored round; returns how many of its rows joined the batch."""
    if self.done:
      raise ValueError(f'the batch is already done ({self._filled}/{self.rows_per_batch} '
                       f'rows, {self._rounds}/{self.max_rounds} rounds); call build()')
    if layout.rows_per_batch != self.rows_per_batch:
      raise ValueError(f'round has {layout.rows_per_batch} rows but the builder expects '
                       f'rows_per_batch={self.rows_per_batch}')
    rewards_R = np.asarray(rewards_R, dtype=np.float32).reshape(-1)
    keep_R = dapo_keep_groups(rewards_R, layout.group_id_R, layout.valid_R,
                              layout.num_groups)
    round_id = self._rounds
    self._rounds += 1
    self._generated_valid += layout.num_valid_rows
    valid_ids = layout.group_id_R[layout.valid_R]
    _, first = np.unique(valid_ids, return_index=True)
    added = 0
    for gid in valid_ids[np.sort(first)]:
      rows = np.flatnonzero(layout.group_id_R == gid)
      if not keep_R[rows[0]]:
        self._dropped_groups += 1
      elif self._filled + rows.size > self.rows_per_batch:
        self._overflow_groups += 1
      else:
        self._round_index.append(np.full(rows.size, round_id, np.int32))
        self._round_row.append(rows.astype(np.int32))
        self._group_size.append(int(rows.size))
        self._query.append(layout.row_query_index_R[rows])
        self._rewards.append(rewards_R[rows])
        self._filled += int(rows.size)
        added += int(rows.size)
    return added

  def build(self) -> DAPOBatch:
    if self._rounds == 0:
      raise ValueError('no rounds added; call add_round at least once before build()')
    num_rows, filled = self.rows_per_batch, self._filled
    num_pad = num_rows - filled
    kept = len(self._group_size)

    def cat(parts: list[np.ndarray], dtype: Any, pad_value: Any) -> np.ndarray:
      return np.concatenate(parts + [np.full(num_pad, pad_value, dtype)]).astype(dtype)

    group_id_R = np.concatenate([np.repeat(np.arange(kept), self._group_size),
                                 kept + np.arange(num_pad)]).astype(np.int32)
    layout = RowLayout(
        row_query_index_R=cat(self._query, np.int64, -1),
        group_id_R=group_id_R,
        valid_R=np.arange(num_rows) < filled,
        row_group_size_R=cat([np.full(g, g, np.int32) for g in self._group_size], np.int32,
                             0),
        num_groups=num_rows)
    return DAPOBatch(
        round_index_R=cat(self._round_index, np.int32, -1),
        round_row_R=cat(self._round_row, np.int32, -1),
        layout=layout,
        rewards_R=cat(self._rewards, np.float32, 0.0),
        rounds=self._rounds,
        generated_rows=self._rounds * num_rows,
        generated_valid_rows=self._generated_valid,
        discarded_rows=self._generated_valid - filled,
        kept_groups=kept,
        dropped_groups=self._dropped_groups,
        overflow_groups=self._overflow_groups)


class DAPOAllocator(GRPOAllocator):
  """Plans of R/G fresh prompts per generation round (the GRPO stream, phase 'dapo');
  the loop assembles a training batch from rounds with `new_batch_builder()`."""
  kind = 'dapo'

  def __init__(self, num_queries: int, group_size: int, rows_per_batch: int,
               max_rounds: int, seed: int = 0):
    super().__init__(num_queries, group_size, rows_per_batch, seed)
    if max_rounds < 1:
      raise ValueError(f'dapo.max_rounds={max_rounds} must be >= 1')
    self.max_rounds = int(max_rounds)

  def new_batch_builder(self) -> DAPOBatchBuilder:
    return DAPOBatchBuilder(self.rows_per_batch, self.max_rounds)


# ----------------------------------------------------------------------------------------
# sGPO


def _cfg(config: Any, name: str, default: Any) -> Any:
  return sgpo._cfg(config, name, default)


class SGPOAllocator:
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
    kappa * (1 - p_hat) + eps (kappa = prior_strength, eps = prior_eps, default 0.5),
    updated in observe() with clip(reward, 0, 1) per valid row. At each phase start the
    profiled-learnable queries not yet trained in this cycle that have observations are
    re-bucketed from the posterior mean (dropped for the cycle if now > trivial_threshold);
    the phase takes those with G' <= its G (the last phase takes the rest), each at its
    own G' (with clip=False capped at the largest size rows_per_batch was validated for),
    so its batches may mix sizes. Queries never observed keep their profiled G.
    Unsolved subsets keep the paper's rule (the phase's G).
  """
  kind = 'sgpo'

  def __init__(self, allocation: Allocation, sgpo_config: Any, rows_per_batch: int,
               seed: int = 0, num_queries: int | None = None):
    self.allocation = allocation
    self.rows_per_batch = int(rows_per_batch)
    self.seed = int(seed)
    self.num_queries = int(num_queries if num_queries is not None
                           else int(allocation.query_index.max()) + 1)
    if allocation.query_index.max() >= self.num_queries:
      raise ValueError(f'allocation refers to query {int(allocation.query_index.max())} but '
                       f'num_queries={self.num_queries}')
    self.group_sizes = sgpo._check_group_sizes(
        _cfg(sgpo_config, 'group_sizes', sgpo.DEFAULT_GROUP_SIZES))
    self.rounding = str(_cfg(sgpo_config, 'rounding', 'down'))
    self.clip = bool(_cfg(sgpo_config, 'clip', True))
    self.trivial_threshold = float(_cfg(sgpo_config, 'trivial_threshold', 0.75))
    self.phase_epochs = float(_cfg(sgpo_config, 'phase_epochs', 1.0))
    self.plateau_window = int(_cfg(sgpo_config, 'phase_plateau_window', 0))
    self.plateau_delta = float(_cfg(sgpo_config, 'phase_plateau_delta', 0.01))
    self.replay_fraction = float(_cfg(sgpo_config, 'trivial_replay_fraction', 0.0))
    self.fill_phase_tail = bool(_cfg(sgpo_config, 'fill_phase_tail', False))
    self.online_update = bool(_cfg(sgpo_config, 'online_update', False))
    self.prior_strength = float(_cfg(sgpo_config, 'prior_strength', 8.0))
    self.prior_eps = float(_cfg(sgpo_config, 'prior_eps', 0.5))
    if self.phase_epochs <= 0:
      raise ValueError(f'sgpo.phase_epochs={self.phase_epochs} must be > 0')
    if not 0.0 <= self.replay_fraction < 1.0:
      raise ValueError(f'sgpo.trivial_replay_fraction={self.replay_fraction} must be in '
                       '[0, 1)')
    if not allocation.phases:
      raise ValueError('allocation has no phases; allocate() should have raised')

    sizes = {int(g) for p in allocation.phases for g in p.group_size}
    if self.online_update:
      sizes |= set(self.group_sizes) if self.clip else set()
    self._min_group_size = min(self.group_sizes)
    self._trivial = allocation.trivial_query_index.astype(np.int64)
    self._replay_prompts = 0
    if self.replay_fraction > 0 and self._trivial.size:
      sizes.add(self._min_group_size)
      room = max(self.rows_per_batch - max(sizes), 0)
      self._replay_prompts = min(
          int(self.replay_fraction * self.rows_per_batch) // self._min_group_size,
          room // self._min_group_size)
    sgpo.validate_rows_per_batch(self.rows_per_batch, sorted(sizes))
    self._max_group_size = max(sizes)

    # Phase clusters (profiled-learnable) and unsolved subsets, as (query, G) lists.
    self._clusters = [p.query_index[:p.num_prompts - p.n_unsolved] for p in allocation.phases]
    self._cluster_g = [p.group_size[:p.num_prompts - p.n_unsolved] for p in allocation.phases]

    kappa, eps = self.prior_strength, self.prior_eps
    p_hat = np.full(self.num_queries, 0.5)
    p_hat[allocation.query_index] = allocation.p_hat
    self._alpha = kappa * p_hat + eps
    self._beta = kappa * (1.0 - p_hat) + eps
    self._observed = np.zeros(self.num_queries, np.int64)

    self._cycle = 0
    self._phase_pos = -1  # -1: not started
    self._items_q: list[int] = []  # the current phase's prompts (before shuffling)
    self._items_g: list[int] = []
    self._order_q: list[int] = []  # the current epoch's order
    self._order_g: list[int] = []
    self._epoch = 0
    self._cursor = 0
    self._served = 0
    self._budget = 0
    self._phase_rewards: list[float] = []
    self._plateaued = False
    self._pending: list[int] = []  # online: learnable queries not yet trained this cycle
    self._replay_epoch = 0
    self._replay_cursor = 0
    self._step = 0

  # -- phases --------------------------------------------------------------------------

  @property
  def phase_name(self) -> str:
    return self.allocation.phases[max(self._phase_pos, 0)].name

  @property
  def cycle(self) -> int:
    return self._cycle

  def posterior_mean(self) -> np.ndarray:
    return self._alpha / (self._alpha + self._beta)

  def _phase_items(self, pos: int) -> tuple[list[int], list[int]]:
    phase = self.allocation.phases[pos]
    unsolved_q = phase.query_index[phase.num_prompts - phase.n_unsolved:]
    unsolved_g = phase.group_size[phase.num_prompts - phase.n_unsolved:]
    if not self.online_update:
      return phase.query_index.tolist(), phase.group_size.tolist()
    if pos == 0:
      self._pending = np.concatenate(self._clusters).tolist()
    profiled_g = {}
    for q_P, g_P in zip(self._clusters, self._cluster_g):
      profiled_g.update(zip(q_P.tolist(), g_P.tolist()))
    mean = self.posterior_mean()
    last = pos == len(self.allocation.phases) - 1
    phase_g = int(phase.group_size.max()) if phase.name != 'mix' else None
    take_q, take_g, keep_pending = [], [], []
    for q in self._pending:
      if self._observed[q] == 0:
        g = profiled_g[q]
      elif mean[q] > self.trivial_threshold:
        continue  # solved by now: dropped for the rest of this cycle
      else:
        g = sgpo.group_size_for(float(mean[q]), self.group_sizes, self.rounding, self.clip)
        g = min(g, self._max_group_size)  # clip=False: keep within the validated sizes
      if last or phase_g is None or g <= phase_g:
        take_q.append(q)
        take_g.append(g)
      else:
        keep_pending.append(q)
    self._pending = keep_pending
    return take_q + unsolved_q.tolist(), take_g + unsolved_g.tolist()

  def _shuffle_items(self) -> None:
    rng = _rng(self.seed, _PHASE_STREAM, self._cycle, self._phase_pos, self._epoch)
    perm = rng.permutation(len(self._items_q))
    self._order_q = [self._items_q[i] for i in perm]
    self._order_g = [self._items_g[i] for i in perm]
    self._cursor = 0

  def _start_next_phase(self) -> bool:
    """Moves to the next non-empty phase (cycling); False if a whole cycle is empty."""
    num_phases = len(self.allocation.phases)
    for _ in range(num_phases + 1):
      self._phase_pos += 1
      if self._phase_pos == num_phases:
        self._phase_pos, self._cycle = 0, self._cycle + 1
      self._items_q, self._items_g = self._phase_items(self._phase_pos)
      self._epoch, self._served = 0, 0
      self._budget = math.ceil(self.phase_epochs * len(self._items_q) - 1e-9)
      self._phase_rewards, self._plateaued = [], False
      if self._budget > 0:
        self._shuffle_items()
        return True
    return False

  def _phase_finished(self) -> bool:
    return self._phase_pos < 0 or self._served >= self._budget or self._plateaued

  # -- the Allocator interface ---------------------------------------------------------

  def _replay_batch(self) -> list[int]:
    out = []
    n = self._trivial.size
    while len(out) < self._replay_prompts:
      if self._replay_cursor == n:
        self._replay_epoch, self._replay_cursor = self._replay_epoch + 1, 0
      order = _rng(self.seed, _REPLAY_STREAM, self._replay_epoch).permutation(n)
      take = min(self._replay_prompts - len(out), n - self._replay_cursor)
      out.extend(self._trivial[order[self._replay_cursor:self._replay_cursor + take]].tolist())
      self._replay_cursor += take
    return out

  def next_plan(self) -> BatchPlan | None:
    if self._phase_finished():
      if not self._start_next_phase():
        return None
    replay_q = self._replay_batch()
    capacity = self.rows_per_batch - len(replay_q) * self._min_group_size
    take_q, take_g = [], []
    phase = self.phase_name  # a tail-filled batch is named by the phase it started in
    while True:
      while self._served < self._budget and capacity > 0:
        if self._cursor == len(self._order_q):
          self._epoch += 1
          self._shuffle_items()
        end = min(self._cursor + _LOOKAHEAD, len(self._order_q))
        fit = next((j for j in range(self._cursor, end) if self._order_g[j] <= capacity),
                   None)
        if fit is None:
          break
        c = self._cursor
        self._order_q[c], self._order_q[fit] = self._order_q[fit], self._order_q[c]
        self._order_g[c], self._order_g[fit] = self._order_g[fit], self._order_g[c]
        take_q.append(self._order_q[c])
        take_g.append(self._order_g[c])
        capacity -= self._order_g[c]
        self._cursor += 1
        self._served += 1
      # fill_phase_tail: a phase's last batch continues into the next phase, not padding.
      if not (self.fill_phase_tail and capacity > 0 and take_q and self._phase_finished()
              and self._start_next_phase()):
        break
    self._step += 1
    query_index = np.array(take_q + replay_q, dtype=np.int64)
    group_size = np.array(take_g + [self._min_group_size] * len(replay_q), dtype=np.int32)
    is_replay = np.arange(query_index.size) >= len(take_q)
    return BatchPlan(query_index, group_size, phase, is_replay if replay_q else None)

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout) -> None:
    rewards_R = np.asarray(rewards_R, dtype=np.float64).reshape(-1)
    valid_R = layout.valid_R
    if self.online_update:
      rows = np.flatnonzero(valid_R)
      success = np.clip(rewards_R[rows], 0.0, 1.0)
      queries = layout.row_query_index_R[rows]
      np.add.at(self._alpha, queries, success)
      np.add.at(self._beta, queries, 1.0 - success)
      np.add.at(self._observed, queries, 1)
    if plan.phase != self.phase_name or plan.num_prompts == 0:
      return  # a stale plan from an earlier phase says nothing about this one's plateau
    phase_rows_R = valid_R.copy()
    if plan.is_replay is not None:
      phase_rows_R &= ~plan.is_replay[np.minimum(layout.group_id_R, plan.num_prompts - 1)]
    if phase_rows_R.any():
      self._phase_rewards.append(float(rewards_R[phase_rows_R].mean()))
    w = self.plateau_window
    if w > 0 and len(self._phase_rewards) >= 2 * w:
      recent = np.mean(self._phase_rewards[-w:])
      before = np.mean(self._phase_rewards[-2 * w:-w])
      if recent - before < self.plateau_delta:
        self._plateaued = True

  def state_dict(self) -> dict:
    state = {
        'kind': self.kind, 'seed': self.seed, 'num_queries': self.num_queries,
        'cycle': self._cycle, 'phase_pos': self._phase_pos, 'epoch': self._epoch,
        'cursor': self._cursor, 'served': self._served, 'budget': self._budget,
        'items_q': list(map(int, self._items_q)), 'items_g': list(map(int, self._items_g)),
        'order_q': list(map(int, self._order_q)), 'order_g': list(map(int, self._order_g)),
        'phase_rewards': list(map(float, self._phase_rewards)),
        'plateaued': self._plateaued, 'pending': list(map(int, self._pending)),
        'replay_epoch': self._replay_epoch, 'replay_cursor': self._replay_cursor,
        'step': self._step,
    }
    if self.online_update:
      state.update(alpha=self._alpha.tolist(), beta=self._beta.tolist(),
                   observed=self._observed.tolist())
    return state

  def load_state_dict(self, state: dict) -> None:
    _check_state(state, self.kind, self.num_queries, self.seed)
    self._cycle, self._phase_pos = int(state['cycle']), int(state['phase_pos'])
    self._epoch, self._cursor = int(state['epoch']), int(state['cursor'])
    self._served, self._budget = int(state['served']), int(state['budget'])
    self._items_q, self._items_g = list(state['items_q']), list(state['items_g'])
    self._order_q, self._order_g = list(state['order_q']), list(state['order_g'])
    self._phase_rewards = list(state['phase_rewards'])
    self._plateaued = bool(state['plateaued'])
    self._pending = list(state['pending'])
    self._replay_epoch = int(state['replay_epoch'])
    self._replay_cursor = int(state['replay_cursor'])
    self._step = int(state['step'])
    if self.online_update:
      if 'alpha' not in state:
        raise ValueError('allocator state has no posterior but sgpo.online_update=True; '
                         'resume with the config the run started with')
      self._alpha = np.asarray(state['alpha'], dtype=np.float64)
      self._beta = np.asarray(state['beta'], dtype=np.float64)
      self._observed = np.asarray(state['observed'], dtype=np.int64)


# ----------------------------------------------------------------------------------------


def make_allocator(config: Any, num_queries: int, profile: Any = None) -> Allocator:
  """The allocator for config.method ('sgpo' | 'grpo' | 'dapo' | 'greso' | 'knapsack').

  sgpo needs `profile`: an `sgpo.Allocation`, or anything `sgpo.allocate` accepts (it is
  then allocated with config.sgpo and config.seed).
  """
  method = config.method
  rows_per_batch = int(config.train.rows_per_batch)
  seed = int(config.seed)
  if method == 'grpo':
    return GRPOAllocator(num_queries, int(config.grpo.group_size), rows_per_batch, seed)
  if method == 'dapo':
    return DAPOAllocator(num_queries, int(config.dapo.group_size), rows_per_batch,
                         int(config.dapo.max_rounds), seed)
  if method == 'sgpo':
    if profile is None:
      raise ValueError('method=sgpo needs the profile (p_hat per query); profile the '
                       'initial policy first and pass it to make_allocator')
    allocation = (profile if isinstance(profile, Allocation)
                  else sgpo.allocate(profile, config.sgpo, seed))
    return SGPOAllocator(allocation, config.sgpo, rows_per_batch, seed, num_queries)
  if method == 'greso':
    from sgpo_jax import greso
    return greso.GRESOAllocator(num_queries, greso.GRESOSettings.from_config(config.greso),
                                rows_per_batch, seed)
  if method == 'knapsack':
    from sgpo_jax import knapsack
    return knapsack.KnapsackAllocator(
        num_queries, knapsack.KnapsackSettings.from_config(config.knapsack), rows_per_batch,
        seed)
  if method == 'sgpo_bayes':
    from sgpo_jax import bayes_allocator
    return bayes_allocator.BayesAllocator.from_config(config, num_queries)
  raise ValueError(f"config.method={method!r} is not one of 'sgpo', 'grpo', 'dapo', "
                   "'greso', 'knapsack', 'sgpo_bayes'")
