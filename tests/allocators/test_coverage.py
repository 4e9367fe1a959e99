"""allocators/coverage.py: which queries a run sampled and which ones it learned from."""

import types

import numpy as np

from sgpo_jax.allocators import coverage


def test_trained_groups_with_spread_are_counted_per_query_and_their_concentration():
  # Three groups: query 7 (rewards 1, 0: spread), query 2 (1, 1: all-equal), query 7 again
  # in a later batch; padding rows never count.
  layout = types.SimpleNamespace(row_query_index_R=np.array([7, 7, 2, 2, -1, -1]),
                                 group_id_R=np.array([0, 0, 1, 1, 2, 3]),
                                 valid_R=np.array([1, 1, 1, 1, 0, 0], bool), num_groups=6)
  trained_Q = np.zeros(20, np.int64)
  coverage.mark_trained(trained_Q, layout, np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]))
  layout.row_query_index_R = np.array([7, 7, 3, 3, -1, -1])
  coverage.mark_trained(trained_Q, layout, np.array([0.0, 1.0, 0.5, 0.0, 0.0, 0.0]))
  assert trained_Q[7] == 2 and trained_Q[3] == 1 and trained_Q.sum() == 3
  cov = coverage.pool_coverage(np.ones(20, bool), trained_Q)
  # 2 of 20 prompts trained on; the top tenth (2 prompts) holds all 3 groups.
  assert (cov['trained_groups'], cov['trained_prompts_share'],
          cov['top_decile_trained_share']) == (3, 0.1, 1.0)
  trained_Q[:] = 1  # evenly spread: the top tenth holds a tenth
  assert coverage.pool_coverage(np.ones(20, bool), trained_Q)['top_decile_trained_share'] == 0.1


def test_meta_round_trip_and_a_checkpoint_that_predates_a_count():
  sampled_Q = np.array([0, 1, 1, 0, 0], bool)
  trained_Q = np.array([0, 3, 0, 0, 1], np.int64)
  meta = {}
  coverage.to_meta(meta, sampled_Q, trained_Q)
  assert meta == {'sampled_query_index': [1, 2], 'trained_groups_per_query': [[1, 3], [4, 1]]}
  back_s, back_t = coverage.from_meta(meta, True, 5)
  np.testing.assert_array_equal(back_s, sampled_Q)
  np.testing.assert_array_equal(back_t, trained_Q)
  # Resumed from a checkpoint written before the trained counts: not reported (None).
  back_s, back_t = coverage.from_meta({'sampled_query_index': [2]}, True, 5)
  assert back_t is None and back_s.tolist() == [False, False, True, False, False]
  assert coverage.from_meta({}, True, 5) == (None, None)
  fresh_s, fresh_t = coverage.from_meta({}, False, 5)
  assert not fresh_s.any() and not fresh_t.any()
