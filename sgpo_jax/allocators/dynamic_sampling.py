"""Dynamic sampling (DAPO's rule), shared by the allocators that roll out several rounds.

- `keep_informative_groups`: which rows belong to groups whose rewards are not all exactly
  equal (the groups with a non-zero group-relative advantage).
- `RoundBatchBuilder` / `RoundBatch`: informative groups from successive rounds packed into
  one batch of R rows (padded after `max_rounds` rounds).
- `fill_from_rounds`: the round loop: lay out a round, roll it out through the trainer's
  rollout_fn (so every round's FLOPs are charged, discarded rows included), keep its
  informative groups, until the batch is full or `max_rounds` rounds have run.
- `round_info`: the metrics fields such a batch logs.
- `refill_lowers_cost`: whether one more round lowers the expected FLOPs per trained
  informative row (the stop rule of the allocators that plan their rounds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sgpo_jax.allocators.base import Rollout, RolloutFn
from sgpo_jax.allocators.rows import RowLayout


def keep_informative_groups(rewards_R: np.ndarray, group_id_R: np.ndarray, valid_R: np.ndarray,
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
class RoundBatch:
  """One training batch assembled from dynamic-sampling generation rounds.

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

  def gather_rollout(self, rounds: Sequence[Rollout]) -> Rollout:
    """The batch's Rollout from the rounds' rollouts (padding rows get the pad token)."""
    pad_id = rounds[0].pad_id
    return Rollout(
        tokens_RxN=self.gather([r.tokens_RxN for r in rounds], fill=pad_id),
        mask_RxN=self.gather([r.mask_RxN for r in rounds], fill=0),
        logps_RxN=self.gather([r.logps_RxN for r in rounds], fill=0.0),
        rewards_R=self.rewards_R,
        row_query_index_R=self.gather([r.row_query_index_R for r in rounds], fill=-1),
        pad_id=pad_id)

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


class RoundBatchBuilder:
  """Accumulates informative groups from successive rounds into one batch of R rows.

  Usage: `while not builder.done: layout = ...next round's rows...; ...sample, score...;
  builder.add_round(layout, rewards_R)`, then `batch = builder.build()` (`fill_from_rounds`
  is that loop). Informative groups are taken in order while they fit; the
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
    keep_R = keep_informative_groups(rewards_R, layout.group_id_R, layout.valid_R,
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

  def build(self) -> RoundBatch:
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
    return RoundBatch(
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


def fill_from_rounds(rollout_fn: RolloutFn, next_layout: Callable[[], RowLayout],
                     rows_per_batch: int, max_rounds: int) -> tuple[RoundBatch, Rollout]:
  """Rounds of `next_layout()` rolled out (round_index 0, 1, ...) until the batch is full
  or `max_rounds` rounds have run; the batch and its gathered rollout."""
  builder = RoundBatchBuilder(rows_per_batch, max_rounds)
  rounds: list[Rollout] = []
  while not builder.done:
    layout = next_layout()
    rollout = rollout_fn(layout, round_index=builder.rounds)
    builder.add_round(layout, rollout.rewards_R)
    rounds.append(rollout)
  batch = builder.build()
  return batch, batch.gather_rollout(rounds)


def round_info(batch: RoundBatch) -> dict[str, int]:
  """metrics.jsonl fields of a batch filled from rounds (names kept from DAPO's)."""
  return {'rounds': batch.rounds, 'dapo_dropped_groups': batch.dropped_groups,
          'dapo_discarded_rows': batch.discarded_rows, 'dapo_kept_groups': batch.kept_groups}


def refill_lowers_cost(filled_rows: int, expected_new_rows: float, rounds_done: int, rows: int,
                       train_cost_per_row: float) -> bool:
  """Whether one more generation round of a post-filtered batch lowers the expected FLOPs
  per trained informative row (costs in units of generating one row).

  The batch so far cost rounds_done * rows (every round generates all R rows) plus
  train_cost_per_row * rows (the train step is charged for every row, padding included);
  another round costs rows more and is expected to add min(expected_new_rows, free rows).
  train_cost_per_row = 0 or an empty batch: always refill (DAPO's rule).
  """
  if train_cost_per_row < 0:
    raise ValueError(f'train_cost_per_row={train_cost_per_row} must be >= 0')
  if train_cost_per_row == 0 or filled_rows <= 0:
    return True
  cost = (rounds_done + train_cost_per_row) * rows
  gain = min(float(expected_new_rows), rows - filled_rows)
  return (cost + rows) / (filled_rows + gain) < cost / filled_rows
