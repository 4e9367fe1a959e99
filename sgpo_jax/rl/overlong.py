"""Overlong completions as in DAPO (arXiv 2503.14476, section 3.4): masking and soft penalty.

A completion is *truncated* when the sampler cut it at `max_new_tokens` before it emitted a
stop token: all N slots are generated and the last one is not a stop id (a stop token in
the last slot is a finished completion). Its reward says nothing about its answer's
quality, only that it ran out of room.

- `truncated_R`: which rows were cut.
- `mask_truncated`: DAPO's overlong filtering (`train.overlong_mask`): a truncated row's
  completion tokens leave the loss (its completion mask becomes 0). The row keeps its
  reward in its group's advantage statistics, so its siblings' advantages are unchanged.
  Under the sequence-mean aggregations it still counts in the denominator, contributing 0,
  like any valid row with an empty completion (rl/losses.py `loss_denominator`).
- `soft_overlong_penalty_R`: DAPO eq. 13 (`train.overlong_penalty_len` = L_cache > 0), added
  to the reward, with L_max = `sampling.max_new_tokens`:
      0                                 if |y| <= L_max - L_cache
      ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
      -1                                if |y| > L_max
  so it falls linearly from 0 to -1 over the last L_cache tokens of the budget.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def truncated_R(tokens_RxN: np.ndarray, mask_RxN: np.ndarray,
                stop_ids: Sequence[int]) -> np.ndarray:
  """[R] bool: every slot generated and the last token not a stop token."""
  mask_RxN = np.asarray(mask_RxN)
  full_R = mask_RxN.sum(axis=1) >= mask_RxN.shape[1]
  last_is_stop_R = np.isin(np.asarray(tokens_RxN)[:, -1], np.asarray(list(stop_ids)))
  return full_R & ~last_is_stop_R


def mask_truncated(completion_mask_RxT1: np.ndarray, truncated: np.ndarray) -> np.ndarray:
  """The completion mask with truncated rows' tokens removed (a new array)."""
  return np.where(np.asarray(truncated, bool)[:, None], 0, completion_mask_RxT1).astype(
      np.asarray(completion_mask_RxT1).dtype)


def soft_overlong_penalty_R(lengths_R: np.ndarray, max_len: int, cache_len: int) -> np.ndarray:
  """DAPO eq. 13 per row (float32, in [-1, 0]); see the module docstring."""
  if not 0 < cache_len <= max_len:
    raise ValueError(f'train.overlong_penalty_len={cache_len} must be in (0, '
                     f'sampling.max_new_tokens={max_len}].')
  lengths_R = np.asarray(lengths_R, np.float64)
  start = max_len - cache_len
  ramp_R = (start - lengths_R) / cache_len
  penalty_R = np.where(lengths_R <= start, 0.0, np.where(lengths_R <= max_len, ramp_R, -1.0))
  return penalty_R.astype(np.float32)
