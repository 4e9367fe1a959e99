"""Tests for sgpo_jax/allocators/sgpo_bayes.py: lazy adaptive profile, G choice, revisits, resume."""

import hashlib
import json

import numpy as np
import pytest

from sgpo_jax import allocators, default_config
from sgpo_jax.allocators import Rollout
from sgpo_jax.allocators.sgpo_bayes import CANDIDATE, DEPRIORITISED, BayesAllocator, BayesSettings

TRIVIAL, UNSOLVED, COIN = 'trivial', 'unsolved', 'coin'


def fake_rollout(alloc, kinds, calls):
  """Rewards by prompt kind: trivial always 1, unsolved always 0, coin a fixed pseudo-random
  0/1 of (query, row, step, round)
  (sha256: crc32's parity is affine in its input); records (category, valid rows) per call."""
  def rollout_fn(layout, round_index=None, category='rollout'):
    rewards = np.zeros(layout.rows_per_batch, np.float32)
    for r in np.flatnonzero(layout.valid_R):
      q = int(layout.row_query_index_R[r])
      if kinds[q] == TRIVIAL:
        rewards[r] = 1.0
      elif kinds[q] == COIN:
        key = f'{q}|{r}|{alloc.state.steps}|{round_index}'.encode()
        rewards[r] = float(hashlib.sha256(key).digest()[0] % 2)
    calls.append((category, int(layout.valid_R.sum())))
    n_rows = layout.rows_per_batch
    return Rollout(np.zeros((n_rows, 1), np.int32), np.zeros((n_rows, 1), np.int32),
                   np.zeros((n_rows, 1), np.float32), rewards, layout.row_query_index_R)
  return rollout_fn


def plan_of(filled):
  """(query per prompt, G per prompt) of a filled batch, from its row layout."""
  layout = filled.layout
  valid = np.flatnonzero(layout.valid_R)
  _, first = np.unique(layout.group_id_R[valid], return_index=True)
  rows = valid[np.sort(first)]
  return layout.row_query_index_R[rows].tolist(), layout.row_group_size_R[rows].tolist()


def make(num_queries=32, rows=16, **overrides):
  settings = BayesSettings(**{'window': 8, **overrides})
  return BayesAllocator(num_queries, rows, settings, seed=3)


def kinds_for(n):
  return [(TRIVIAL, UNSOLVED, COIN, COIN)[q % 4] for q in range(n)]


def test_profile_settles_trivial_and_unsolved_and_trains_coin_prompts_at_min_g():
  alloc = make()
  kinds, calls = kinds_for(32), []
  filled = alloc.fill_batch(fake_rollout(alloc, kinds, calls))
  queries, sizes = plan_of(filled)
  st = alloc.state
  profiled = alloc.pool_order[:st.frontier]
  # Trivial / unsolved prompts settle 'skip' after 3 equal samples (Jeffreys prior, G = 4:
  # P_inf = 0.322 <= 0.35) and never reach a training batch.
  for q in profiled:
    if kinds[q] in (TRIVIAL, UNSOLVED) and st.probe_n[q] >= 3:
      assert st.status[q] == DEPRIORITISED and st.probe_n[q] == 3 and st.skips[q] == 1
  assert all(kinds[q] == COIN for q in queries)
  # Expected informative groups per row favour new prompts at G = 4 over growing to 8.
  assert sizes == [4] * 4 and filled.layout.num_valid_rows == 16
  assert filled.info == {'rounds': len(calls), 'profile_rounds': len(calls) - 1,
                         'train_rounds': 1, 'dapo_dropped_groups': 0, 'dapo_kept_groups': 4,
                         'dapo_discarded_rows': 0}
  # Profiling rounds are generation-only calls charged as 'profile', then one rollout.
  assert [c for c, _ in calls][-1] == 'rollout'
  assert all(c == 'profile' for c, _ in calls[:-1]) and len(calls) > 1
  profile_rows = sum(v for c, v in calls if c == 'profile')
  assert profile_rows == st.profile_samples == int(st.probe_n[profiled].sum())


def test_trained_prompt_that_turns_trivial_is_deprioritised_and_revisited_later():
  alloc = make(num_queries=8, rows=8, revisit_base=1.0, revisit_floor=1.0)
  kinds = [COIN] * 8
  calls = []
  alloc.fill_batch(fake_rollout(alloc, kinds, calls))
  # The policy "learns" every prompt: from now on all succeed.
  kinds[:] = [TRIVIAL] * 8
  for _ in range(6):
    alloc.fill_batch(fake_rollout(alloc, kinds, calls))
  st = alloc.state
  assert (st.status == DEPRIORITISED).sum() >= 1
  # revisit probability 1: every deprioritised prompt is probed in the next epoch.
  assert st.revisits >= 1 and st.probe_samples >= 1
  summary = alloc.summary()
  assert 0.0 <= summary['informative_group_share'] <= 1.0
  assert summary['revisits'] == st.revisits


@pytest.mark.parametrize('post_filter', [False, True])
def test_everything_trivial_still_fills_batches(post_filter):
  alloc = make(num_queries=8, rows=8, post_filter=post_filter)
  calls = []
  for _ in range(4):
    filled = alloc.fill_batch(fake_rollout(alloc, [TRIVIAL] * 8, calls))
    if post_filter:  # every group all-equal: max_rounds rounds rolled out, all padding
      assert filled.info['train_rounds'] == 4 and filled.layout.num_valid_rows == 0
      assert filled.info['dapo_dropped_groups'] == 8 and filled.info['dapo_kept_groups'] == 0
    else:
      assert len(plan_of(filled)[0]) >= 1 and filled.layout.num_valid_rows <= 8
  assert (alloc.state.status == CANDIDATE).sum() == 0


def test_state_round_trips_and_resumes_exactly():
  kinds = kinds_for(40)

  def run(alloc, steps, calls):
    out = []
    for _ in range(steps):
      out.append(plan_of(alloc.fill_batch(fake_rollout(alloc, kinds, calls))))
    return out

  full = make(num_queries=40)
  full_plans = run(full, 12, [])
  half = make(num_queries=40)
  run(half, 5, [])
  state = json.loads(json.dumps(half.state_dict()))
  resumed = make(num_queries=40)
  resumed.load_state_dict(state)
  assert run(resumed, 7, []) == full_plans[5:]
  with pytest.raises(ValueError, match='seed=3'):
    other = BayesAllocator(40, 16, BayesSettings(), seed=4)
    other.load_state_dict(state)


def test_settings_errors_name_the_field():
  with pytest.raises(ValueError, match='profile_min_samples'):
    BayesSettings(profile_min_samples=5, profile_max_samples=4)
  with pytest.raises(ValueError, match='group_sizes'):
    BayesSettings(group_sizes=(1, 4))
  c = default_config.get_config('method=sgpo_bayes')
  c.sgpo_bayes.settle_low = 0.9
  with pytest.raises(ValueError, match='settle_low'):
    allocators.make_allocator(c, 64)
  with pytest.raises(ValueError, match='rows_per_batch=12'):
    BayesAllocator(8, 12, BayesSettings(), seed=0)


def test_make_allocator_builds_it_from_the_config():
  c = default_config.get_config('method=sgpo_bayes')
  c.sgpo_bayes.group_sizes = (4, 8)
  alloc = allocators.make_allocator(c, 64)
  assert isinstance(alloc, BayesAllocator)
  assert alloc.settings.group_sizes == (4, 8) and alloc.rows_per_batch == 128


def test_short_epoch_tops_up_with_fewest_skips_not_the_whole_pool():
  alloc = make(num_queries=32, rows=16)  # window 8: a batch wants 8 candidates
  st = alloc.state
  st.frontier = 32
  st.status[:] = DEPRIORITISED
  st.skips[:] = 3
  st.status[[0, 1]] = CANDIDATE
  st.skips[[0, 1]] = 0
  st.skips[10:16] = 1  # the six most recently informative deprioritised prompts
  st.epoch = 1
  st.visits_since_draw = 0  # no training since the last draw: no random revisits
  alloc._start_epoch()
  assert sorted(st.candidates) == [0, 1]
  assert sorted(st.in_flight) == list(range(10, 16))  # 8 - 2 candidates, fewest skips
  assert st.revisits == 6 and st.visits_since_draw == 0
