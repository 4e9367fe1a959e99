"""Packs the rows of a padded rollout batch into fixed-shape buffers of real tokens only.

The padded train layout is `[R, T]` (prompt left-padded to max_prompt_len, completion
padded to max_new_tokens); with skewed lengths most of that rectangle is padding. Packing
lays each valid row's real tokens (prompt + completion up to its stop) end to end into
`[buffers, pack_rows, pack_len]` with

- `segment_ids` (1, 2, ... per row within a buffer row; 0 = padding): attention never
  crosses segments (`model.Transformer(segment_ids_BxT=...)`),
- `positions` counting from 0 in every segment (the padded layout's positions),
- on target positions `[.., pack_len - 1]`: completion mask, behaviour / reference
  log-probs and `row` (the padded row a target token belongs to), so advantages, group ids
  and loss weights stay per row.

Rows go into buffer rows by first-fit decreasing. Under first fit a buffer row holds at
least floor(pack_len / T) rows before another is opened, so `num_buffers` (static, from
the worst case of R full-length rows) always suffices; buffers left empty are skipped by
the train step at run time, never compiled differently.

Data parallelism: with `shards` > 1 (the mesh's batch axes, `sharding.batch_size_multiple`)
the padded rows split into contiguous blocks of R / shards, as `sharding.batch_sharding`
splits them, and each block is packed into its own `pack_rows` buffer rows. The packed
arrays are `[buffers, shards * pack_rows, ...]`, shard s's buffer rows at
`[s * pack_rows, (s + 1) * pack_rows)`, so sharding dim 1 over the batch axes hands every
device its own rows' tokens. One shard reproduces the unsharded layout exactly.
"""

from __future__ import annotations

import dataclasses

import numpy as np

TARGET_KEYS = ('completion_mask_RxT1', 'old_logp_RxT1', 'ref_logp_RxT1')


@dataclasses.dataclass(frozen=True)
class PackShape:
  """Static shape of a packed batch: `buffers` x (`shards` x `rows`) x `length` tokens;
  `rows` buffer rows per data-parallel shard."""
  buffers: int
  rows: int
  length: int
  shards: int = 1

  @classmethod
  def for_batch(cls, batch_rows: int, row_len: int, pack_rows: int, pack_len: int,
                shards: int = 1) -> 'PackShape':
    """pack_len 0 = the padded row length T; buffers sized for R / shards full-length rows
    per shard."""
    length = pack_len or row_len
    if pack_len < 0 or length < row_len:
      raise ValueError(f'train.pack_len={pack_len} is shorter than the longest row '
                       f'(sampling.max_prompt_len + sampling.max_new_tokens = {row_len}); set '
                       f'train.pack_len >= {row_len} or 0 (= {row_len}).')
    if pack_rows < 1:
      raise ValueError(f'train.pack_rows={pack_rows} must be >= 1 (packed rows per buffer '
                       'and data-parallel shard); set train.pack_rows=8, the default.')
    if shards < 1 or batch_rows < shards or batch_rows % shards:
      raise ValueError(f'train.rows_per_batch={batch_rows} does not split over {shards} '
                       f'data-parallel shards; set train.rows_per_batch to a multiple of '
                       f'{shards} (>= {shards}).')
    per_row = length // row_len
    bins = -(-(batch_rows // shards) // per_row)
    return cls(buffers=-(-bins // pack_rows), rows=pack_rows, length=length, shards=shards)


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
  """Item indices per bin, bins in opening order; longest items placed first."""
  bins: list[list[int]] = []
  free: list[int] = []
  for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
    for b, room in enumerate(free):
      if lengths[i] <= room:
        bins[b].append(i)
        free[b] -= lengths[i]
        break
    else:
      bins.append([i])
      free.append(capacity - lengths[i])
  return bins


def pack_batch(batch: dict[str, np.ndarray], shape: PackShape, pad_id: int
               ) -> dict[str, np.ndarray]:
  """Padded train batch (learner.layout_batch + rewards/group ids/valid) -> packed batch.

  Keeps the per-row arrays (rewards_R, group_id_R, valid_R) and adds completion_len_R;
  the packed arrays are [M, S * B, L] (tokens, segment_ids, positions) and [M, S * B, L - 1]
  (the target arrays and row_MxBxL1, which holds padded row indices of the whole batch),
  plus used_M (some shard's buffer holds at least one row).
  """
  tokens_RxT, mask_RxT = batch['tokens_RxT'], batch['mask_RxT']
  valid_R = np.asarray(batch['valid_R'], bool)
  M, B, L, S = shape.buffers, shape.rows, shape.length, shape.shards
  n_rows = valid_R.shape[0]
  if n_rows % S:
    raise ValueError(f'{n_rows} rows do not split over {shape.shards} data-parallel shards; '
                     'the pack shape was sized for a different batch.')
  out = {
      'tokens_MxBxL': np.full((M, S * B, L), pad_id, np.int32),
      'segment_ids_MxBxL': np.zeros((M, S * B, L), np.int32),
      'positions_MxBxL': np.zeros((M, S * B, L), np.int32),
      'row_MxBxL1': np.zeros((M, S * B, L - 1), np.int32),
      'used_M': np.zeros((M,), bool),
  }
  for key in TARGET_KEYS:
    dtype = np.int32 if key == 'completion_mask_RxT1' else np.float32
    out[key.replace('RxT1', 'MxBxL1')] = np.zeros((M, S * B, L - 1), dtype)
  per_shard = n_rows // S
  for shard in range(S):
    lo = shard * per_shard
    rows = lo + np.flatnonzero(valid_R[lo:lo + per_shard])
    seqs = [np.flatnonzero(mask_RxT[r]) for r in rows]
    for r, idx in zip(rows, seqs):
      if idx.size and idx[-1] - idx[0] + 1 != idx.size:
        raise ValueError(f'row {r} has gaps in its token mask; packing needs the real tokens '
                         'of a row to be contiguous (left-padded prompt + completion).')
    bins = first_fit_decreasing([len(s) for s in seqs], L)
    if len(bins) > M * B:
      raise ValueError(f'{len(bins)} packed rows exceed the static {M} x {B}; pack shape was '
                       'sized for a different batch.')
    for b, items in enumerate(bins):
      m, br = divmod(b, B)
      br += shard * B
      out['used_M'][m] = True
      start = 0
      for seg, item in enumerate(items, start=1):
        r, idx = rows[item], seqs[item]
        n, end = idx.size, start + idx.size
        out['tokens_MxBxL'][m, br, start:end] = tokens_RxT[r, idx]
        out['segment_ids_MxBxL'][m, br, start:end] = seg
        out['positions_MxBxL'][m, br, start:end] = np.arange(n)
        # Target j of the segment (predicting its token j + 1) is padded target idx[j].
        out['row_MxBxL1'][m, br, start:end - 1] = r
        for key in TARGET_KEYS:
          if key in batch:
            out[key.replace('RxT1', 'MxBxL1')][m, br, start:end - 1] = batch[key][r, idx[:-1]]
        start = end
  out['rewards_R'] = np.asarray(batch['rewards_R'], np.float32)
  out['group_id_R'] = np.asarray(batch['group_id_R'], np.int32)
  out['valid_R'] = valid_R
  out['completion_len_R'] = np.asarray(batch['completion_mask_RxT1'], np.int32).sum(1) * valid_R
  return out


def token_counts(packed: dict[str, np.ndarray]) -> tuple[int, int]:
  """(input token slots the packed step computes, useful ones: each row's real tokens but
  its last, which predicts nothing; the padded layout's count is the same)."""
  used = int(packed['used_M'].sum())
  _, B, L = packed['tokens_MxBxL'].shape
  seg = packed['segment_ids_MxBxL']
  return used * B * (L - 1), int(np.sum(seg > 0) - np.sum(seg.max(axis=2)))


def padded_token_counts(batch: dict[str, np.ndarray]) -> tuple[int, int]:
  """(input token slots of the padded [R, T] step, useful ones as in `token_counts`)."""
  rows, t_len = batch['tokens_RxT'].shape
  valid_R = np.asarray(batch['valid_R'], bool)
  real_R = np.asarray(batch['mask_RxT']).sum(1)
  return rows * (t_len - 1), int(np.sum(np.maximum(real_R[valid_R] - 1, 0)))
