"""Tests for sgpo_jax/allocators/sgpo_bayes/allocator.py: lazy adaptive profile, G choice, revisits, resume."""

import functools
import hashlib
import json

import numpy as np
import pytest

from sgpo_jax import allocators
from sgpo_jax.allocators import Rollout
from sgpo_jax.allocators.sgpo_bayes import posterior as posterior_lib
from sgpo_jax.allocators.sgpo_bayes.allocator import (
  CANDIDATE,
  DEPRIORITISED,
  BayesAllocator,
  BayesSettings,
)
from sgpo_jax.config import defaults as default_config

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


# G in {4, 8}: the sizes the hand-worked layouts and probabilities below assume (the
# allocator's default is {2, 4}, whose own defaults are tested where named).
Settings48 = functools.partial(BayesSettings, group_sizes=(4, 8))


def plan_of(filled):
  """(query per prompt, G per prompt) of a filled batch, from its row layout."""
  layout = filled.layout
  valid = np.flatnonzero(layout.valid_R)
  _, first = np.unique(layout.group_id_R[valid], return_index=True)
  rows = valid[np.sort(first)]
  return layout.row_query_index_R[rows].tolist(), layout.row_group_size_R[rows].tolist()


def make(num_queries=32, rows=16, **overrides):
  # Floor 0.25 (the pre-0.2 default): these tests exercise deprioritising and revisits, which
  # the default floor 0.1 almost never triggers (see the test of the default below).
  settings = Settings48(**{'window': 8, 'informative_floor': 0.25, **overrides})
  return BayesAllocator(num_queries, rows, settings, seed=3)


def kinds_for(n):
  return [(TRIVIAL, UNSOLVED, COIN, COIN)[q % 4] for q in range(n)]


def test_profile_settles_trivial_and_unsolved_and_trains_coin_prompts_at_min_g():
  alloc = make(profile=True)
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
  alloc = make(num_queries=8, rows=8, revisit_base=1.0, revisit_floor=1.0, profile=True)
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
  assert summary['informative_group_share'] == st.informative_groups / max(st.train_groups, 1)
  assert 0 < st.informative_groups < st.train_groups  # coins first, then all-solved groups
  assert summary['revisits'] == st.revisits


@pytest.mark.parametrize('post_filter', [False, True])
def test_everything_trivial_still_fills_batches(post_filter):
  alloc = make(num_queries=8, rows=8, post_filter=post_filter)
  calls = []
  for _ in range(8):  # two all-equal groups per prompt: P_inf(4) 0.218 < floor 0.25
    filled = alloc.fill_batch(fake_rollout(alloc, [TRIVIAL] * 8, calls))
    if post_filter:  # every group all-equal: max_rounds rounds rolled out, all padding
      assert filled.info['train_rounds'] == 4 and filled.layout.num_valid_rows == 0
      assert filled.info['dapo_dropped_groups'] == 8 and filled.info['dapo_kept_groups'] == 0
    else:
      assert len(plan_of(filled)[0]) >= 1 and filled.layout.num_valid_rows <= 8
  assert (alloc.state.status == CANDIDATE).sum() == 0


@pytest.mark.parametrize('profile,train_cost_per_row', [(True, 0.0), (False, 0.0),
                                                     (False, 3.5)])
def test_state_round_trips_and_resumes_exactly(profile, train_cost_per_row):
  kinds = kinds_for(40)
  opts = {'profile': profile, 'train_cost_per_row': train_cost_per_row}

  def run(alloc, steps, calls):
    out = []
    for _ in range(steps):
      out.append(plan_of(alloc.fill_batch(fake_rollout(alloc, kinds, calls))))
    return out

  full = make(num_queries=40, **opts)
  full_plans = run(full, 12, [])
  half = make(num_queries=40, **opts)
  run(half, 5, [])
  state = json.loads(json.dumps(half.state_dict()))
  resumed = make(num_queries=40, **opts)
  resumed.load_state_dict(state)
  assert run(resumed, 7, []) == full_plans[5:]
  with pytest.raises(ValueError, match='seed=3'):
    other = BayesAllocator(40, 16, Settings48(), seed=4)
    other.load_state_dict(state)


def test_settings_errors_name_the_field():
  with pytest.raises(ValueError, match='profile_min_samples'):
    Settings48(profile_min_samples=5, profile_max_samples=4)
  with pytest.raises(ValueError, match='group_sizes'):
    Settings48(group_sizes=(1, 4))
  c = default_config.get_config('method=sgpo_bayes')
  c.sgpo_bayes.settle_low = 0.9
  with pytest.raises(ValueError, match='settle_low'):
    allocators.make_allocator(c, 64)
  with pytest.raises(ValueError, match='rows_per_batch=10'):
    BayesAllocator(8, 10, Settings48(), seed=0)  # not a multiple of G=4


def test_make_allocator_builds_it_from_the_config():
  c = default_config.get_config('method=sgpo_bayes')
  c.sgpo_bayes.group_sizes = (4, 8)
  alloc = allocators.make_allocator(c, 64)
  assert isinstance(alloc, BayesAllocator)
  assert alloc.settings.group_sizes == (4, 8) and alloc.rows_per_batch == 128


@pytest.mark.parametrize('top_up', [True, False])
def test_short_epoch_tops_up_with_fewest_skips_not_the_whole_pool(top_up):
  alloc = make(num_queries=32, rows=16, profile=True, top_up_revisits=top_up)  # window 8
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
  if top_up:
    assert sorted(st.in_flight) == list(range(10, 16))  # 8 - 2 candidates, fewest skips
    assert st.revisits == 6 and st.visits_since_draw == 0
  else:  # only the random draw, which is empty with no training since the last one
    assert st.in_flight == [] and st.revisits == 0


# -- v2: post-rollout filter + refill, optional profile, spare probe rows ----------------


def scripted_rollout(rewards_by_call, calls):
  """Round k of the step gets rewards_by_call[k] (a dict query -> list of per-row rewards,
  consumed in row order); records (category, round_index, valid rows) per call."""
  it = iter(rewards_by_call)

  def rollout_fn(layout, round_index=None, category='rollout'):
    script = {q: list(v) for q, v in next(it).items()}
    rewards = np.zeros(layout.rows_per_batch, np.float32)
    for r in np.flatnonzero(layout.valid_R):
      rewards[r] = script[int(layout.row_query_index_R[r])].pop(0)
    calls.append((category, round_index, int(layout.valid_R.sum())))
    n = layout.rows_per_batch
    return Rollout(np.arange(n)[:, None].astype(np.int32) + 100 * len(calls),
                   np.ones((n, 1), np.int32), np.zeros((n, 1), np.float32), rewards,
                   layout.row_query_index_R)
  return rollout_fn


def test_post_filter_keeps_informative_groups_that_fit_and_updates_every_posterior():
  alloc = make(num_queries=8, rows=8, profile=False, evidence_decay=1.0)
  st = alloc.state
  plan = allocators.BatchPlan(np.array([5, 6, 7]), np.array([4, 4, 4], np.int32), 'bayes')
  layout = plan.rows(12)  # a 12-row layout observed with 8 rows free: 3 groups of 4
  alloc.rows_per_batch = 12
  st.status[[5, 6, 7]] = CANDIDATE
  st.candidates = [5, 6, 7]
  rewards = np.array([1, 1, 1, 1,  1, 0, 0, 0,  0, 1, 1, 1], np.float32)
  kept, equal = alloc.observe(plan, rewards, layout, free_rows=4)
  # Prompt 5: all-equal, dropped (not trained on) but spent for this epoch. Prompt 6:
  # informative, fits the 4 free rows. Prompt 7: informative, no room left: not spent.
  assert kept.tolist() == [False, True, False] and equal.tolist() == [True, False, False]
  assert st.served[[5, 6, 7]].tolist() == [True, True, False] and st.candidates == [7]
  assert (st.dropped_groups, st.overflow_groups, st.train_groups) == (1, 1, 3)
  # Planned under Jeffreys, G = 4: P_inf = 1 - 2 * (.5*1.5*2.5*3.5)/(1*2*3*4) = 0.4531 each.
  assert st.expected_informative == pytest.approx(3 * (1 - 2 * 6.5625 / 24))
  assert alloc.summary()['informative_group_share'] == pytest.approx(2 / 3)
  # Every row updates its posterior (decay 1): Jeffreys + counts.
  assert (st.alpha[5], st.beta[5]) == (4.5, 0.5)
  assert (st.alpha[6], st.beta[6]) == (1.5, 3.5)
  assert (st.alpha[7], st.beta[7]) == (3.5, 1.5)
  # Beta(4.5, 0.5), G = 4: P_inf = 1 - (4.5*5.5*6.5*7.5)/(5*6*7*8) - (.5*1.5*2.5*3.5)/(5*6*7*8)
  # = 1 - 1206.5625/1680 - 6.5625/1680 = 0.2779 >= informative_floor 0.25: one all-equal
  # group does not deprioritise a prompt (it is spent for this epoch, skips 1).
  assert alloc.informative([5])[0] == pytest.approx(1 - 1213.125 / 1680)
  assert st.status[5] == CANDIDATE and st.skips[5] == 1
  # A second one does: Beta(8.5, 0.5) -> P_inf(4) = 0.179 < 0.25.
  alloc.observe(allocators.BatchPlan(np.array([5]), np.array([4], np.int32), 'bayes'),
                np.ones(12, np.float32), allocators.BatchPlan(
                    np.array([5]), np.array([4], np.int32), 'bayes').rows(12), free_rows=4)
  assert (st.alpha[5], st.beta[5]) == (8.5, 0.5)
  assert alloc.informative([5])[0] == pytest.approx(
      1 - (8.5 * 9.5 * 10.5 * 11.5 + 0.5 * 1.5 * 2.5 * 3.5) / (9 * 10 * 11 * 12))
  assert st.status[5] == DEPRIORITISED and st.skips[5] == 2
  assert st.status[6] == CANDIDATE and st.skips[6] == 0


def test_refill_rounds_drop_all_equal_groups_and_build_one_batch_of_informative_rows():
  # No profile, 4 prompts in the pool order per round at G = 4 (window 8, rows 16).
  alloc = make(num_queries=12, rows=16, profile=False, group_sizes=(4,))
  order = alloc.pool_order.tolist()
  first, second = order[:4], order[4:8]
  mixed, same = [1, 0, 0, 0], [1, 1, 1, 1]
  round0 = {first[0]: same, first[1]: mixed, first[2]: [0] * 4, first[3]: mixed}
  round1 = {q: mixed for q in second}
  calls = []
  filled = alloc.fill_batch(scripted_rollout([round0, round1], calls))
  # Round 0 keeps 2 groups (8 rows); round 1 plans 4 more prompts (full R rows: the call
  # costs R rows either way), keeps the 2 that fit, leaves the other 2 candidates.
  assert [(c, i) for c, i, _ in calls] == [('rollout', 0), ('rollout', 1)]
  assert filled.info == {'rounds': 2, 'profile_rounds': 0, 'train_rounds': 2,
                         'dapo_dropped_groups': 2, 'dapo_kept_groups': 4,
                         'dapo_discarded_rows': 16}
  queries, sizes = plan_of(filled)
  assert queries == [first[1], first[3], second[0], second[1]] and sizes == [4] * 4
  assert filled.layout.num_valid_rows == 16
  np.testing.assert_array_equal(filled.rollout.rewards_R, mixed * 4)
  # Rows come from the round they were generated in (the fake tokens encode the call).
  assert filled.rollout.tokens_RxN[:8, 0].tolist() == [104, 105, 106, 107, 112, 113, 114, 115]
  assert filled.rollout.tokens_RxN[8:, 0].tolist() == [200, 201, 202, 203, 204, 205, 206, 207]
  assert alloc.state.candidates[:2] == second[2:]
  assert alloc.state.overflow_groups == 2 and alloc.state.steps == 1


def test_without_post_filter_one_round_trains_every_group():
  alloc = make(num_queries=12, rows=16, profile=False, group_sizes=(4,), post_filter=False)
  first = alloc.pool_order[:4].tolist()
  calls = []
  filled = alloc.fill_batch(scripted_rollout([{q: [1] * 4 for q in first}], calls))
  assert filled.info == {'rounds': 1, 'profile_rounds': 0} and len(calls) == 1
  assert plan_of(filled)[0] == first and alloc.state.dropped_groups == 0


def test_probe_samples_use_the_spare_rows_of_the_call():
  alloc = make(num_queries=8, rows=16, profile=True)  # profile_max_samples 4
  alloc.state.probe_n[[0, 1, 2, 3, 4]] = [0, 1, 3, 0, 2]
  # 16 rows // 5 prompts = 3 each, capped by the samples left before max (4 - n).
  assert alloc.probe_samples_per_prompt([0, 1, 2, 3, 4]).tolist() == [3, 3, 1, 3, 2]
  # 16 // 8 = 2 each: prompt 2 has one sample left.
  assert alloc.probe_samples_per_prompt(list(range(8))).tolist() == [2, 2, 1, 2, 2, 2, 2, 2]
  # A full round (R prompts in flight): one sample each, the adaptive profile's pace.
  assert make(num_queries=32, rows=16, profile=True).probe_samples_per_prompt(list(range(16))).tolist() \
      == [1] * 16


def test_revisit_without_profile_is_a_training_group_and_counts_back_when_informative():
  alloc = make(num_queries=8, rows=8, profile=False, group_sizes=(4,), revisit_base=1.0,
               revisit_floor=1.0)
  st = alloc.state
  st.frontier = 8
  st.status[:] = DEPRIORITISED
  st.skips[:] = 2
  st.epoch = 1
  st.visits_since_draw = 8  # one pool pass: revisit probability 1
  alloc._start_epoch()
  assert st.revisits == 8 and st.revisiting.all() and st.in_flight == []
  assert (st.status == CANDIDATE).all()
  order = list(st.candidates)  # the epoch's fresh order (reshuffle)
  assert sorted(order) == list(range(8)) and order != alloc.pool_order.tolist()
  calls = []
  rounds = [{order[0]: [1, 0, 1, 0], order[1]: [1] * 4}]
  filled = alloc.fill_batch(scripted_rollout(rounds + [{q: [1, 0, 0, 0] for q in order[2:4]}],
                                             calls))
  assert [c for c, _, _ in calls] == ['rollout', 'rollout']  # no probe rounds
  assert st.revisits_back == 3 and st.revisiting.sum() == 4
  assert plan_of(filled)[0] == [order[0], order[2]]


def test_floor_must_be_below_an_unseen_prompts_informative_probability():
  # Jeffreys prior, G = 2: P_inf = 1 - 2 * (0.5 * 1.5) / (1 * 2) = 0.25; a floor of 0.25
  # would deprioritise a prompt after a single all-equal pair.
  with pytest.raises(ValueError, match=r'informative_floor=0.25 must be below 0.250'):
    Settings48(group_sizes=(2, 4, 8), informative_floor=0.25)
  assert Settings48(group_sizes=(2, 4, 8), informative_floor=0.2).group_sizes == (2, 4, 8)
  # G = 4: 0.453 (the default sizes are fine).
  with pytest.raises(ValueError, match=r'below 0.453'):
    Settings48(informative_floor=0.46)


def test_new_settings_are_range_checked():
  with pytest.raises(ValueError, match='max_rounds=0'):
    Settings48(max_rounds=0)
  with pytest.raises(ValueError, match='post_filter=1'):
    Settings48(post_filter=1)
  with pytest.raises(ValueError, match="profile='no'"):
    BayesSettings.from_config({'profile': 'no'})


@pytest.mark.parametrize('train_cost_per_row,refilled', [(3.5, True), (0.5, False)])
def test_refill_round_only_when_it_lowers_the_cost_per_informative_row(train_cost_per_row,
                                                                       refilled):
  alloc = make(num_queries=12, rows=16, profile=False, group_sizes=(4,),
               train_cost_per_row=train_cost_per_row)
  order = alloc.pool_order.tolist()
  mixed = [1, 0, 0, 0]
  # Round 0: 3 of 4 groups informative -> 12 of 16 rows. The next round plans 4 unprofiled
  # prompts at G = 4 (Jeffreys P_inf(4) = 0.4531: 7.25 expected rows, capped at the 4 free).
  # train 3.5: cost so far (1 + 3.5) * 16 = 72, 6.0 per row; with the round 88 / 16 = 5.5:
  # refill. train 0.5: (1 + 0.5) * 16 = 24, 2.0 per row; with the round 40 / 16 = 2.5: pad.
  calls = []
  filled = alloc.fill_batch(scripted_rollout(
      [{order[0]: mixed, order[1]: mixed, order[2]: mixed, order[3]: [1] * 4},
       {q: mixed for q in order[4:8]}], calls))
  assert len(calls) == (2 if refilled else 1)
  assert alloc.state.refills_skipped == (0 if refilled else 1)
  assert filled.layout.num_valid_rows == (16 if refilled else 12)
  plan = allocators.BatchPlan(np.array(order[4:8]), np.full(4, 4, np.int32), 'bayes')
  if not refilled:  # the rule the allocator applied, on the plan it would have rolled out
    assert not alloc.refill_pays(plan, 12, 1)


@pytest.mark.parametrize('reshuffle', [False, True])
def test_epoch_order_is_the_pool_order_or_a_fresh_permutation(reshuffle):
  orders = []
  for epoch in (1, 2):
    alloc = make(num_queries=16, rows=8, reshuffle=reshuffle)
    st = alloc.state
    st.frontier, st.epoch = 16, epoch
    st.status[:] = CANDIDATE
    alloc._start_epoch()
    orders.append(list(st.candidates))
  if reshuffle:  # seeded per epoch: differs from the pool order and between epochs
    assert orders[0] != orders[1] and orders[0] != make(16, 8).pool_order.tolist()
    assert sorted(orders[0]) == list(range(16))
  else:
    assert orders[0] == orders[1] == make(16, 8).pool_order.tolist()


@pytest.mark.parametrize('decay_by_passes,expected_alpha', [
    (False, 0.5 + 0.5 * 8.0),  # once per epoch: half the evidence, however short the epoch
    (True, 0.5 + 0.5 ** 0.25 * 8.0),  # 4 visits / 16 prompts = 0.25 pool passes
])
def test_revisit_evidence_decays_per_epoch_or_per_pool_pass(decay_by_passes, expected_alpha):
  alloc = make(num_queries=16, rows=8, decay_by_passes=decay_by_passes, revisit_base=1.0,
               revisit_floor=1.0)
  st = alloc.state
  st.frontier, st.epoch = 16, 1
  st.status[:] = DEPRIORITISED
  st.skips[:] = 1
  st.alpha[:], st.beta[:] = 8.5, 0.5  # 8 successes on the Jeffreys prior
  st.visits_since_draw = 4
  alloc._start_epoch()
  # Revisit probability 1 (floor 1): every prompt is drawn and its evidence decayed.
  assert st.revisits == 16
  np.testing.assert_allclose(st.alpha, expected_alpha)
  np.testing.assert_allclose(st.beta, 0.5)


@pytest.mark.parametrize('skip_side', ['both', 'easy'])
def test_skip_side_easy_deprioritises_only_mostly_solved_prompts(skip_side):
  alloc = make(num_queries=8, rows=8, profile=False, skip_side=skip_side, evidence_decay=1.0)
  st = alloc.state
  st.status[[1, 2]] = CANDIDATE
  plan = allocators.BatchPlan(np.array([1, 2]), np.array([4, 4], np.int32), 'bayes')
  layout = plan.rows(8)
  # Two all-equal groups each (no decay): prompt 1 always solved -> Beta(8.5, 0.5), prompt 2
  # never -> Beta(0.5, 8.5); both have P_inf(4) = 0.179 < floor 0.25.
  for _ in range(2):
    st.served[:] = False
    alloc.observe(plan, np.array([1, 1, 1, 1, 0, 0, 0, 0], np.float32), layout, free_rows=8)
  assert (st.alpha[1], st.beta[1]) == (8.5, 0.5) and (st.alpha[2], st.beta[2]) == (0.5, 8.5)
  assert alloc.informative([1, 2]) == pytest.approx([0.179] * 2, abs=5e-4)
  assert st.status[1] == DEPRIORITISED
  # 'easy': the unsolved prompt (posterior mean 0.056 < 1/2) stays a candidate.
  assert st.status[2] == (DEPRIORITISED if skip_side == 'both' else CANDIDATE)
  with pytest.raises(ValueError, match="skip_side='hard'"):
    Settings48(skip_side='hard')


def test_default_floor_keeps_a_prompt_of_any_all_equal_streak_in_the_walk():
  # Default floor 0.1, evidence_decay 0.5: a run of all-equal G=4 groups converges to
  # Beta(0.5 + 4 / (1 - 0.5), 0.5) = Beta(8.5, 0.5), P_inf(4) = 1 - (8.5*9.5*10.5*11.5 +
  # .5*1.5*2.5*3.5) / (9*10*11*12) = 0.179 > 0.1: never deprioritised.
  assert Settings48().informative_floor == 0.1
  alloc = BayesAllocator(8, 8, Settings48(window=8), seed=3)
  st = alloc.state
  st.status[1] = CANDIDATE
  plan = allocators.BatchPlan(np.array([1]), np.array([4], np.int32), 'bayes')
  for _ in range(30):
    st.served[:] = False
    alloc.observe(plan, np.ones(8, np.float32), plan.rows(8), free_rows=8)
  assert st.alpha[1] == pytest.approx(8.5, abs=1e-6) and st.beta[1] == 0.5
  assert alloc.informative([1])[0] == pytest.approx(
      1 - (8.5 * 9.5 * 10.5 * 11.5 + 0.5 * 1.5 * 2.5 * 3.5) / (9 * 10 * 11 * 12), abs=1e-6)
  assert st.status[1] == CANDIDATE and st.skips[1] == 30


# -- pooled prior (strata) and the prioritised window ------------------------------------


def test_strata_from_difficulty_pool_or_none_and_the_error_without_any():
  settings = Settings48(pooled_prior='difficulty')
  alloc = BayesAllocator(5, 16, settings, seed=0, strata=[3, None, 1, 3, 1])
  assert alloc.stratum_Q.tolist() == [1, 2, 0, 1, 0]  # sorted levels, None last
  assert BayesAllocator(3, 16, Settings48(pooled_prior='pool')).stratum_Q.tolist() == [0] * 3
  assert BayesAllocator(3, 16, Settings48()).stratum_Q is None
  with pytest.raises(ValueError, match="no training query has a difficulty.*'pool'"):
    BayesAllocator(3, 16, settings, strata=[None, None, None])
  with pytest.raises(ValueError, match='one difficulty per training query \\(3\\); got 2'):
    BayesAllocator(3, 16, settings, strata=[1, 2])
  with pytest.raises(ValueError, match='pooled_prior'):
    Settings48(pooled_prior='level')
  with pytest.raises(ValueError, match='pooled_prior_strength'):
    Settings48(pooled_prior_strength=-1.0)


def test_make_allocator_passes_the_strata_to_sgpo_bayes_only():
  c = default_config.get_config('method=sgpo_bayes')
  c.sgpo_bayes.pooled_prior = 'difficulty'
  alloc = allocators.make_allocator(c, 4, None, [1, 2, 2, 1])
  assert alloc.stratum_Q.tolist() == [0, 1, 1, 0]
  grpo = allocators.make_allocator(default_config.get_config('method=grpo'), 4, None, [1] * 4)
  assert grpo.name == 'grpo'


def _strata_run(pooled_prior, prioritise, batches=2):
  """64 prompts: even ones (level 1) always solved, odd ones (level 2) coin flips. Returns
  the allocator and the level-2 share of each batch's prompts after the first."""
  n = 64
  kinds = [TRIVIAL if q % 2 == 0 else COIN for q in range(n)]
  alloc = BayesAllocator(n, 16, Settings48(window=8, pooled_prior=pooled_prior,
                                              prioritise=prioritise, post_filter=False),
                         seed=3, strata=[1 + q % 2 for q in range(n)])
  shares = []
  for b in range(batches):
    queries, _ = plan_of(alloc.fill_batch(fake_rollout(alloc, kinds, [])))
    if b:
      shares.append(np.mean([q % 2 for q in queries]))
  return alloc, shares


def test_pooled_prior_and_priority_send_unseen_prompts_of_the_learnable_level_first():
  # After one batch (4 prompts of a random mix), the pooled prior knows level 1 is solved:
  # the prioritised window then takes only level-2 prompts nobody has rolled out yet.
  alloc, shares = _strata_run('difficulty', True, batches=4)
  assert shares == [1.0, 1.0, 1.0]
  # Without the pooled prior every unseen prompt looks alike, so the window takes them in
  # epoch order, a mix of both levels.
  _, plain = _strata_run('none', True, batches=4)
  assert min(plain) < 1.0
  # Without priority the pooled prior only reorders within the next `window` candidates.
  _, window_only = _strata_run('difficulty', False, batches=4)
  assert np.mean(window_only) < 1.0


def test_pooled_prior_never_deprioritises_a_prompt_its_own_evidence_keeps():
  # Floor 0.25: one all-solved G=4 group leaves a prompt's own posterior at Beta(4.5, 0.5),
  # P_inf 0.2779 (kept); its pooled posterior (a solved level) is below the floor.
  n = 32
  kinds = [TRIVIAL] * n
  alloc = BayesAllocator(n, 16, Settings48(window=8, informative_floor=0.25,
                                              pooled_prior='pool', post_filter=False),
                         seed=3)
  queries, sizes = plan_of(alloc.fill_batch(fake_rollout(alloc, kinds, [])))
  assert sizes == [4] * 4
  st = alloc.state
  for q in queries:
    assert (st.alpha[q], st.beta[q]) == (4.5, 0.5)
    assert alloc.own_informative(q) == pytest.approx(0.2779, abs=1e-4)
    assert alloc.informative([q])[0] < 0.25
    assert st.status[q] == CANDIDATE


@pytest.mark.parametrize('epoch_cut', [0.0, 0.3])
def test_pooled_prioritised_state_resumes_exactly(epoch_cut):
  kinds = kinds_for(40)
  strata = [q % 3 for q in range(40)]
  opts = {'pooled_prior': 'difficulty', 'prioritise': True, 'epoch_cut': epoch_cut}

  # Floor 0.25 exercises deprioritising; with the cut, floor 0.1 keeps the all-equal prompts
  # in the walk, where the cut (not the floor) takes them out of an epoch's tail.
  floor = 0.1 if epoch_cut else 0.25

  def fresh():
    return BayesAllocator(40, 16, Settings48(window=8, informative_floor=floor, **opts),
                          seed=3, strata=strata)

  def run(alloc, steps):
    return [plan_of(alloc.fill_batch(fake_rollout(alloc, kinds, []))) for _ in range(steps)]

  steps = 16 if epoch_cut else 12  # the first cut comes in the fourth epoch (step 13)
  whole = fresh()
  full_plans = run(whole, steps)
  assert (whole.state.epoch_cuts > 0) == (epoch_cut > 0)  # the cut path is exercised
  half = fresh()
  run(half, 5)
  resumed = fresh()
  resumed.load_state_dict(json.loads(json.dumps(half.state_dict())))
  assert run(resumed, steps - 5) == full_plans[5:]
  # A different pooled prior changes the plans (the test above is not vacuous).
  plain = BayesAllocator(40, 16, Settings48(window=8, informative_floor=0.25), seed=3)
  assert run(plain, 12) != full_plans


# -- epoch_cut: an epoch served most promising first ends before its all-equal tail -------


def _halves_rollout(kinds, calls):
  """Trivial prompts always solved; 'half' prompts solved on the even rows of their group
  (every group informative, 2 of 4 / 4 of 8). Records (epoch-independent) planned queries."""
  def rollout_fn(layout, round_index=None, category='rollout'):
    rewards = np.zeros(layout.rows_per_batch, np.float32)
    for r in np.flatnonzero(layout.valid_R):
      q = int(layout.row_query_index_R[r])
      first = int(np.flatnonzero(layout.group_id_R == layout.group_id_R[r])[0])
      rewards[r] = 1.0 if kinds[q] == TRIVIAL else float((r - first) % 2 == 0)
    calls.append(category)
    n_rows = layout.rows_per_batch
    return Rollout(np.zeros((n_rows, 1), np.int32), np.zeros((n_rows, 1), np.int32),
                   np.zeros((n_rows, 1), np.float32), rewards, layout.row_query_index_R)
  return rollout_fn


def _served_by_epoch(epoch_cut, batches=12):
  n = 16
  kinds = [TRIVIAL if q % 2 == 0 else 'half' for q in range(n)]
  alloc = BayesAllocator(n, 16, Settings48(window=8, prioritise=True, post_filter=False,
                                              epoch_cut=epoch_cut, group_sizes=(4,)), seed=3)
  served: dict[int, list[int]] = {}
  for _ in range(batches):
    filled = alloc.fill_batch(_halves_rollout(kinds, []))
    queries, _ = plan_of(filled)
    served.setdefault(alloc.state.epoch, []).extend(queries)
  return alloc, served


def test_epoch_cut_skips_the_all_equal_tail_and_decays_what_it_leaves():
  # Epoch 1: 16 unseen prompts (P_inf(4) 0.453 each), 4 per batch, all served. A trivial
  # prompt's one all-solved group leaves Beta(4.5, 0.5): P_inf(4) = 1 - E[p^4] - E[(1-p)^4]
  # = 1 - (4.5*5.5*6.5*7.5)/(5*6*7*8) - (.5*1.5*2.5*3.5)/1680 = 0.2779 < 0.3.
  assert float(posterior_lib.informative_probability(4.5, 0.5, 4)) == pytest.approx(0.2779,
                                                                                    abs=1e-4)
  alloc, served = _served_by_epoch(0.3, batches=7)  # epochs are numbered from 0
  assert sorted(served[0]) == list(range(16))
  # Epoch 1 serves the 8 'half' prompts (informative, ranked first), then its ready
  # candidates are the 8 trivial ones, best P_inf 0.278 < 0.3: the epoch ends there.
  assert sorted(served[1]) == list(range(1, 16, 2))
  st = alloc.state
  assert st.epoch == 2 and st.epoch_cuts == 1 and st.cut_unserved == 8
  # What the cut left is decayed once (evidence_decay 0.5): (4, 0) -> (2, 0), Beta(2.5, 0.5),
  # P_inf(4) = 1 - (2.5*3.5*4.5*5.5)/(3*4*5*6) - 6.5625/360 = 0.3802 > 0.3: it comes back.
  for q in range(0, 16, 2):
    assert (st.alpha[q], st.beta[q]) == (2.5, 0.5)
  assert float(posterior_lib.informative_probability(2.5, 0.5, 4)) == pytest.approx(0.3802,
                                                                                    abs=1e-4)
  # Epoch 2 serves everything again, the 'half' prompts first.
  alloc, served = _served_by_epoch(0.3, batches=11)
  assert sorted(served[2]) == list(range(16))
  assert all(q % 2 == 1 for q in served[2][:8])
  # Without the cut, epoch 1 also spends two batches on the trivial prompts.
  _, plain = _served_by_epoch(0.0, batches=8)
  assert sorted(plain[1]) == list(range(16))


def test_epoch_cut_is_range_checked_and_needs_prioritise():
  with pytest.raises(ValueError, match=r'epoch_cut=0.5 must be in \[0, 0.453\)'):
    Settings48(prioritise=True, epoch_cut=0.5)
  with pytest.raises(ValueError, match='epoch_cut=0.3 needs sgpo_bayes.prioritise=True'):
    Settings48(epoch_cut=0.3)


def test_every_posterior_update_tracks_the_noise_of_decayed_evidence():
  alloc = make(evidence_decay=0.5)
  q = np.array([0])
  alloc._update(q, 2.0, 1.0, 0.5)  # 3 samples at weight 1
  alloc._update(q, 1.0, 0.0, 0.5)  # they decay to 0.5 (squares 0.25), 1 new sample
  assert alloc.state.weight_sq[0] == pytest.approx(0.25 * 3 + 1)
  n = alloc.state.alpha[0] + alloc.state.beta[0] - 2 * alloc.settings.prior_alpha
  assert n == pytest.approx(0.5 * 3 + 1)
  # A checkpoint written before weight_sq was kept resumes with undecayed noise (factor 1).
  saved = json.loads(json.dumps(alloc.state_dict()))
  del saved['weight_sq']
  back = make(evidence_decay=0.5)
  back.load_state_dict(saved)
  assert back.state.weight_sq[0] == pytest.approx(n)
