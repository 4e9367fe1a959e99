"""The fixed-shape row layout every allocator fills: prompts with (possibly mixed) group
sizes laid out as `rows_per_batch` rows, a group id per row, masked padding rows.

Not to be confused with sequence packing (`rl/sequence_packing.py`, config `train.pack_rows`),
which concatenates rows into long token sequences for the train step.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence

import numpy as np


def check_group_sizes(group_sizes: Sequence[int], name: str = 'group_sizes',
                      minimum: int = 1) -> tuple[int, ...]:
  """The sorted distinct sizes of a non-empty collection of integers >= minimum; else a
  ValueError naming `name` (e.g. 'sgpo.group_sizes')."""
  sizes = tuple(group_sizes)
  if not sizes or not all(isinstance(g, numbers.Integral) and not isinstance(g, bool)
                          and g >= minimum for g in sizes):
    why = (' (a group of 1 never has both a success and a failure)' if minimum == 2 else '')
    raise ValueError(f'{name}={sizes} must be a non-empty set of integers >= {minimum}{why}, '
                     'e.g. (2, 4, 8)')
  return tuple(sorted({int(g) for g in sizes}))


@dataclasses.dataclass(frozen=True)
class RowLayout:
  """Rows of one fixed-shape batch: prompt p's G_p rows are contiguous, padding at the end.

  group_id_R is the prompt's position in the plan (0..P-1) for valid rows; every padding
  row has its own id (P, P+1, ...), so all ids are < num_groups = rows_per_batch.
  """
  row_query_index_R: np.ndarray  # [R] int64, -1 for padding
  group_id_R: np.ndarray  # [R] int32
  valid_R: np.ndarray  # [R] bool
  row_group_size_R: np.ndarray  # [R] int32, 0 for padding
  num_groups: int  # static: == rows_per_batch

  @property
  def rows_per_batch(self) -> int:
    return int(self.valid_R.size)

  @property
  def num_valid_rows(self) -> int:
    return int(self.valid_R.sum())

  @property
  def num_prompts(self) -> int:
    return int(np.unique(self.group_id_R[self.valid_R]).size)

  @property
  def padding_fraction(self) -> float:
    return 1.0 - float(self.valid_R.mean())


def _lcm(values: Sequence[int]) -> int:
  out = 1
  for v in values:
    out = out * v // math.gcd(out, v)
  return out


def check_rows_per_batch(rows_per_batch: int, group_sizes: Sequence[int],
                            name: str = 'rows_per_batch') -> None:
  """Raises ValueError unless rows_per_batch is a positive multiple of every group size
  (the message calls it `name`, e.g. 'train.rows_per_batch')."""
  sizes = check_group_sizes(group_sizes)
  if rows_per_batch < 1:
    raise ValueError(f'{name}={rows_per_batch} must be positive')
  bad = [g for g in sizes if rows_per_batch % g]
  if bad:
    lcm = _lcm(sizes)
    suggestion = max(lcm, rows_per_batch // lcm * lcm)
    which = ('the largest group size' if len(sizes) > 1 and bad[-1] == sizes[-1]
             else 'the group size')
    among = f' (group sizes {sizes})' if len(sizes) > 1 else ''
    raise ValueError(f'{name}={rows_per_batch} is not a multiple of {which} '
                     f'{bad[-1]}{among}; use a multiple of {lcm}, e.g. {suggestion}.')


def layout_rows(query_index_P: np.ndarray | Sequence[int],
              group_size_P: np.ndarray | Sequence[int],
              rows_per_batch: int) -> RowLayout:
  """Lay out P prompts (G_p rows each, sizes may differ) as one batch of rows_per_batch rows.

  Raises if the prompts need more than rows_per_batch rows: a group is never split across
  batches.
  """
  query_index_P = np.asarray(query_index_P, dtype=np.int64).reshape(-1)
  group_size_P = np.asarray(group_size_P, dtype=np.int64).reshape(-1)
  if query_index_P.shape != group_size_P.shape:
    raise ValueError(f'{query_index_P.size} query indices but {group_size_P.size} group '
                     'sizes; give one group size per prompt')
  if group_size_P.size and group_size_P.min() < 1:
    raise ValueError(f'group sizes must be >= 1; got {int(group_size_P.min())}')
  needed = int(group_size_P.sum())
  if needed > rows_per_batch:
    raise ValueError(f'{query_index_P.size} prompts need {needed} rows > rows_per_batch='
                     f'{rows_per_batch}; lay them out over several batches')
  num_prompts = int(query_index_P.size)
  prompt_R = np.repeat(np.arange(num_prompts), group_size_P)
  num_pad = rows_per_batch - needed
  valid_R = np.concatenate([np.ones(needed, bool), np.zeros(num_pad, bool)])
  row_query_index_R = np.concatenate([query_index_P[prompt_R],
                                      np.full(num_pad, -1, np.int64)])
  group_id_R = np.concatenate([prompt_R, num_prompts + np.arange(num_pad)]).astype(np.int32)
  row_group_size_R = np.concatenate([group_size_P[prompt_R],
                                     np.zeros(num_pad, np.int64)]).astype(np.int32)
  return RowLayout(row_query_index_R, group_id_R, valid_R, row_group_size_R,
                   num_groups=int(rows_per_batch))

