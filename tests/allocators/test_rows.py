"""Tests for sgpo_jax/allocators/rows.py: the fixed-shape row layout every allocator fills."""

import numpy as np
import pytest

from sgpo_jax.allocators import rows


def test_layout_rows_mixed_sizes_and_padding():
  layout = rows.layout_rows([10, 11, 12], [2, 4, 8], 16)
  np.testing.assert_array_equal(layout.row_query_index_R,
                                [10, 10, 11, 11, 11, 11] + [12] * 8 + [-1, -1])
  np.testing.assert_array_equal(layout.group_id_R,
                                [0, 0, 1, 1, 1, 1] + [2] * 8 + [3, 4])
  assert layout.group_id_R.dtype == np.int32
  assert layout.valid_R.sum() == 14 and not layout.valid_R[-2:].any()
  assert layout.num_groups == 16 and layout.num_prompts == 3
  assert layout.padding_fraction == pytest.approx(2 / 16)
  np.testing.assert_array_equal(layout.row_group_size_R, [2, 2] + [4] * 4 + [8] * 8 + [0, 0])
  empty = rows.layout_rows([], [], 8)
  assert empty.padding_fraction == 1.0 and len(set(empty.group_id_R.tolist())) == 8


def test_layout_rows_refuses_to_overflow():
  with pytest.raises(ValueError, match='need 18 rows > rows_per_batch=16'):
    rows.layout_rows([1, 2, 3], [8, 8, 2], 16)


def test_check_rows_per_batch():
  rows.check_rows_per_batch(64, (2, 4, 8))
  with pytest.raises(ValueError,
                     match='rows_per_batch=60 is not a multiple of the largest group size 8'):
    rows.check_rows_per_batch(60, (2, 4, 8))
  with pytest.raises(ValueError, match='group size 6'):
    rows.check_rows_per_batch(16, (2, 6, 8))
