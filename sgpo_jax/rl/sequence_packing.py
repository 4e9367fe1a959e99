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
"""

from __future__ import annotations

import dataclasses

import numpy as np

TARGET_KEYS = ('completion_mask_RxT1', 'old_logp_RxT1', 'ref_logp_RxT1')


@dataclasses.dataclass(frozen=True)
class PackShape:
  """Static shape of a packed batch: `buffers` x `rows` x `length` tokens."""
  buffers: int
  rows: int
  length: int

  @classmethod
  def for_batch(cls, batch_rows: int, row_len: int, pack_rows: int, pack_len: int
                ) -> 'PackShape':
    """pack_len 0 = the padded row length T; buffers sized for R full-length rows."""
    length = pack_len or row_len
    if length < row_len:
      raise ValueError(f'train.pack_len={pack_len} is shorter than a padded row '
                       f'(max_prompt_len + max_new_tokens = {row_len}); set pack_len >= '
                       f'{row_len} or 0.')
    if pack_rows < 1:
      raise ValueError(f'train.pack_rows={pack_rows} must be >= 1.')
    per_row = length // row_len
    bins = -(-batch_rows // per_row)
    return cls(buffers=-(-bins // pack_rows), rows=pack_rows, length=length)


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
  the packed arrays are [M, B, L] (tokens, segment_ids, positions) and [M, B, L - 1]
  (the target arrays and row_MxBxL1), plus used_M (buffer holds at least one row).
  """
  tokens_RxT, mask_RxT = batch['tokens_RxT'], batch['mask_RxT']
  valid_R = np.asarray(batch['valid_R'], bool)
  M, B, L = shape.buffers, shape.rows, shape.length
  rows = np.flatnonzero(valid_R)
  seqs = [np.flatnonzero(mask_RxT[r]) for r in rows]
  for r, idx in zip(rows, seqs):
    if idx.size and idx[-1] - idx[0] + 1 != idx.size:
      raise ValueError(f'row {r} has gaps in its token mask; packing needs the real tokens of '
                       'a row to be contiguous (left-padded prompt + completion).')
  bins = first_fit_decreasing([len(s) for s in seqs], L)
  if len(bins) > M * B:
    raise ValueError(f'{len(bins)} packed rows exceed the static {M} x {B}; pack shape was '
                     'sized for a different batch.')
  out = {
      'tokens_MxBxL': np.full((M, B, L), pad_id, np.int32),
      'segment_ids_MxBxL': np.zeros((M, B, L), np.int32),
      'positions_MxBxL': np.zeros((M, B, L), np.int32),
      'row_MxBxL1': np.zeros((M, B, L - 1), np.int32),
      'used_M': np.zeros((M,), bool),
  }
  for key in TARGET_KEYS:
    dtype = np.int32 if key == 'completion_mask_RxT1' else np.float32
    out[key.replace('RxT1', 'MxBxL1')] = np.zeros((M, B, L - 1), dtype)
  for b, items in enumerate(bins):
    m, br = divmod(b, B)
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
