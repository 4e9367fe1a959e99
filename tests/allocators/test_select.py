"""Tests for sgpo_jax/allocators/sgpo_select/: hand-computed selection math, the allocator's
choice from the whole pool, its exploration floor, filled share and exact resume."""

import json

import numpy as np
import pytest

from sgpo_jax import allocators
from sgpo_jax.allocators.sgpo_select import allocator as allocator_module
from sgpo_jax.allocators.sgpo_select import selection
from sgpo_jax.allocators.sgpo_select.allocator import SelectAllocator, SelectSettings
from sgpo_jax.config import defaults as default_config
from tests.allocators.test_bayes_allocator import COIN, TRIVIAL, UNSOLVED, fake_rollout

# -- selection.py ------------------------------------------------------------------------


def test_informative_given_p_hand_computed():
  v = selection.informative_given_p([0.5, 0.9, 0.0, 1.0], (2, 4))
  np.testing.assert_allclose(v[0], [0.5, 1 - 2 / 16])
  np.testing.assert_allclose(v[1], [1 - 0.81 - 0.01, 1 - 0.9 ** 4 - 0.1 ** 4])
  np.testing.assert_allclose(v[2:], 0.0)
  with pytest.raises(ValueError, match='success rates'):
    selection.informative_given_p([1.2], (2,))


def test_greedy_fill_by_value_per_row():
  # Sizes (2, 4). Prompt 0: 0.5 at G2, 0.875 at G4 (grow: 0.1875/row); prompt 1: 0.18 /
  # 0.3439 (grow 0.082/row); prompt 2: nothing to gain.
  value = np.array([[0.5, 0.875], [0.18, 0.3439], [0.0, 0.0]])
  # 4 rows: add 0 at G2 (0.25/row), grow 0 to G4 (0.1875) beats adding 1 (0.09).
  q, g = selection.greedy_fill(value, (2, 4), 4)
  assert q.tolist() == [0] and g.tolist() == [4]
  # 8 rows: then add 1 at G2 (0.09/row), grow 1 (0.082/row): 0 at G4, 1 at G4; never 2.
  q, g = selection.greedy_fill(value, (2, 4), 8)
  assert q.tolist() == [0, 1] and g.tolist() == [4, 4]
  # An ineligible prompt is never taken.
  q, g = selection.greedy_fill(value, (2, 4), 8, eligible_Q=np.array([False, True, True]))
  assert q.tolist() == [1] and g.tolist() == [4]
  # Rows that do not fit the next size are left empty; order = first taken.
  q, g = selection.greedy_fill(np.array([[0.1, 0.2], [0.4, 0.5]]), (2, 4), 2)
  assert q.tolist() == [1] and g.tolist() == [2]
  with pytest.raises(ValueError, match='ascending'):
    selection.greedy_fill(value, (4, 2), 8)
  with pytest.raises(ValueError, match='shape'):
    selection.greedy_fill(value[:, :1], (2, 4), 8)


def test_forget_and_least_recent():
  s, f = selection.forget([4.0, 0.0], [0.0, 2.0], 0.5, steps=2)
  assert s.tolist() == [1.0, 0.0] and f.tolist() == [0.0, 0.5]
  with pytest.raises(ValueError, match='sgpo_select.forget=0'):
    selection.forget([1.0], [1.0], 0.0)
  last = np.array([3, -1, 0, -1, 5])
  eligible = np.array([True, True, True, True, False])
  # Never sampled first (ties by the tie-break rank), then the oldest.
  picked = selection.least_recent(last, eligible, 3, tie_break_Q=np.array([0, 9, 0, 2, 0]))
  assert picked.tolist() == [3, 1, 2]
  assert selection.least_recent(last, eligible, 0, np.zeros(5)).size == 0


# -- the allocator -------------------------------------------------------------------------


def make(num_queries=64, rows=16, seed=0, **overrides):
  return SelectAllocator(num_queries, rows, SelectSettings(**overrides), seed=seed)


def pool(num_queries=64, coins=(3, 17, 40, 55)):
  """Mostly trivial with some unsolved prompts and a few coin flips (the learnable ones)."""
  kinds = [TRIVIAL if q % 4 else UNSOLVED for q in range(num_queries)]
  for q in coins:
    kinds[q] = COIN
  return kinds


def run(alloc, kinds, steps):
  calls, batches = [], []
  fn = fake_rollout(alloc, kinds, calls)
  for _ in range(steps):
    batches.append(alloc.fill_batch(fn))
  return batches, calls


def test_selection_finds_the_informative_prompts_and_wastes_less_over_time():
  kinds = pool()
  alloc = make(explore_rows=4)
  batches, calls = run(alloc, kinds, 40)
  assert all(c[0] == 'rollout' for c in calls)
  coins = {3, 17, 40, 55}
  # Late batches are filled by the coin prompts (the only informative ones) in few rounds.
  late = batches[-10:]
  trained = [set(b.layout.row_query_index_R[b.layout.valid_R].tolist()) for b in late]
  assert all(t <= coins and t for t in trained)
  early_rounds = np.mean([b.info['rounds'] for b in batches[:5]])
  late_rounds = np.mean([b.info['rounds'] for b in late])
  assert late_rounds <= early_rounds
  s = alloc.summary()
  assert 0 < s['informative_group_share'] < 1
  assert s['train_rounds'] == sum(b.info['rounds'] for b in batches)
  assert s['filled_share'] == pytest.approx(np.mean([b.info['filled_share'] for b in batches]))
  for b in batches:  # filled share = trained rows / R, every trained group informative
    assert b.info['filled_share'] == pytest.approx(b.layout.valid_R.mean())
    r = b.rollout.rewards_R
    for gid in np.unique(b.layout.group_id_R[b.layout.valid_R]):
      g = r[(b.layout.group_id_R == gid) & b.layout.valid_R]
      assert g.max() > g.min()


def test_a_prompt_is_rolled_out_at_most_once_per_step():
  kinds = pool()
  alloc = make()
  seen_per_step = []
  calls = []
  fn = fake_rollout(alloc, kinds, calls)
  orig = fn

  def recording(layout, round_index=None, category='rollout'):
    seen_per_step[-1].extend(layout.row_query_index_R[layout.valid_R].tolist())
    return orig(layout, round_index, category)
  for _ in range(10):
    seen_per_step.append([])
    alloc.fill_batch(recording)
  for rows in seen_per_step:
    groups = [q for i, q in enumerate(rows) if i == 0 or rows[i - 1] != q]
    assert len(groups) == len(set(groups))


def _longest_wait(alloc, kinds, steps: int) -> tuple[int, int]:
  """(rounds run, the longest any prompt went without a rollout, in rounds: between two of
  its rollouts, or from the start / to the end)."""
  inner = fake_rollout(alloc, kinds, [])
  history = {q: [0] for q in range(len(kinds))}
  rounds = [0]

  def recording(layout, round_index=None, category='rollout'):
    rounds[0] += 1
    for q in set(layout.row_query_index_R[layout.valid_R].tolist()):
      history[q].append(rounds[0])
    return inner(layout, round_index, category)
  for _ in range(steps):
    alloc.fill_batch(recording)
  return rounds[0], max(int(np.diff(h + [rounds[0]]).max()) for h in history.values())


def test_exploration_floor_bounds_every_prompts_wait():
  """The docstring's bound: with explore_rows = 4 (one G=4 group per round) a pool of 64 is
  revisited within 64 rounds whatever the posterior says, here over ~170 rounds without
  forgetting (the posterior's most confident case); without the floor some prompt waits
  longer than that on the same pool."""
  kinds = pool()
  rounds, wait = _longest_wait(make(explore_rows=4, forget=1.0), kinds, 60)
  assert rounds > 2 * 64 and wait <= 64
  rounds, wait = _longest_wait(make(explore_rows=0, forget=1.0), kinds, 60)
  assert rounds > 64 and wait > 64


def test_pooled_prior_prices_unseen_prompts_from_the_seen_ones():
  alloc = make(num_queries=8)  # no difficulties given: 'auto' pools the whole pool
  st = alloc.state
  st.succ[:4] = st.prior_succ[:4] = 4.0  # four seen prompts, all solved (both count sets)
  a_Q, b_Q = alloc.posterior()
  mean_unseen = a_Q[7] / (a_Q[7] + b_Q[7])
  assert mean_unseen > 0.75  # an unseen prompt now looks mostly solved
  flat = make(num_queries=8, pooled_prior='none')
  flat.state.succ[:4] = flat.state.prior_succ[:4] = 4.0
  a_Q, b_Q = flat.posterior()
  assert (a_Q[7], b_Q[7]) == (0.5, 0.5)


def test_auto_prior_is_per_difficulty_level_when_the_queries_have_one():
  levels = [1, 1, 1, 1, 2, 2, 2, 2]
  alloc = SelectAllocator(8, 16, SelectSettings(), strata=levels)
  st = alloc.state
  st.succ[:3] = st.prior_succ[:3] = 4.0  # level 1: three seen prompts, all solved
  st.fail[4:7] = st.prior_fail[4:7] = 4.0  # level 2: three seen prompts, all failed
  a_Q, b_Q = alloc.posterior()
  assert a_Q[3] / (a_Q[3] + b_Q[3]) > 0.75 > 0.25 > a_Q[7] / (a_Q[7] + b_Q[7])
  # Without levels, one prior for all: both unseen prompts start at the same place.
  pooled = SelectAllocator(8, 16, SelectSettings(), strata=[None] * 8)
  st = pooled.state
  st.succ[:3] = st.prior_succ[:3] = 4.0
  st.fail[4:7] = st.prior_fail[4:7] = 4.0
  a_Q, b_Q = pooled.posterior()
  assert (a_Q[3], b_Q[3]) == (a_Q[7], b_Q[7])


def test_forgetting_between_steps():
  kinds = [COIN] * 64  # step 1 trains (coin groups come back mixed), so the policy moves
  alloc = make(forget=0.5)
  _, calls1 = run(alloc, kinds, 1)
  assert alloc.state.last_batch_trained
  total1 = alloc.state.succ.sum() + alloc.state.fail.sum()
  assert total1 == sum(n for _, n in calls1)  # one unit of evidence per rolled-out row
  _, calls2 = run(alloc, kinds, 1)
  # Step 2 first halves the evidence, then adds its own rows.
  total2 = alloc.state.succ.sum() + alloc.state.fail.sum()
  assert total2 == pytest.approx(total1 / 2 + sum(n for _, n in calls2))


def test_a_batch_that_trains_nothing_forgets_nothing():
  """All-trivial pool: every group is all-equal, no batch trains, the policy never moves,
  so the evidence only grows (with forget 0.5 it would halve before each step)."""
  kinds = [TRIVIAL] * 16
  alloc = make(num_queries=16, forget=0.5, explore_rows=0)
  _, calls1 = run(alloc, kinds, 1)
  assert not alloc.state.last_batch_trained
  total1 = alloc.state.succ.sum() + alloc.state.fail.sum()
  _, calls2 = run(alloc, kinds, 1)
  assert alloc.state.succ.sum() + alloc.state.fail.sum() == pytest.approx(
      total1 + sum(n for _, n in calls2))


def test_decayed_evidence_keeps_its_noise_for_the_pooled_prior():
  kinds = [COIN] * 64
  alloc = make(forget=0.5)
  _, calls1 = run(alloc, kinds, 1)
  assert alloc.state.last_batch_trained
  n1 = sum(n for _, n in calls1)
  assert alloc.state.weight_sq.sum() == n1  # one unit per rolled-out row, as the counts
  _, calls2 = run(alloc, kinds, 1)
  # Step 2 scales every weight by 0.5 first: the squares by 0.25, the counts by 0.5.
  assert alloc.state.weight_sq.sum() == pytest.approx(n1 / 4 + sum(n for _, n in calls2))


def test_prior_forget_decays_only_the_counts_the_pooled_prior_reads():
  kinds = [COIN] * 64  # every step trains (coin groups come back mixed): every step decays
  same = make(forget=0.9)
  run(same, kinds, 3)
  # 0 (the default): one set of counts in effect, the prior reads what `forget` keeps.
  for key in ('succ', 'fail', 'weight_sq'):
    np.testing.assert_array_equal(getattr(same.state, 'prior_' + key),
                                  getattr(same.state, key))
  fast = make(forget=0.9, prior_forget=0.5)
  calls = []
  fn = fake_rollout(fast, kinds, calls)
  rows = []
  for _ in range(3):
    before = len(calls)
    fast.fill_batch(fn)
    assert fast.state.last_batch_trained
    rows.append(sum(n for _, n in calls[before:]))
  n1, n2, n3 = rows
  st = fast.state
  # A prompt's own evidence keeps 0.9 a step; the prior's counts 0.5 (squares 0.25).
  assert (st.succ + st.fail).sum() == pytest.approx(0.81 * n1 + 0.9 * n2 + n3)
  assert (st.prior_succ + st.prior_fail).sum() == pytest.approx(0.25 * n1 + 0.5 * n2 + n3)
  assert st.prior_weight_sq.sum() == pytest.approx(0.0625 * n1 + 0.25 * n2 + n3)
  # The pooled prior reads the fast counts: zero them and it is the base prior again.
  st.prior_succ[:], st.prior_fail[:] = 0.0, 0.0
  a_Q, b_Q = fast.posterior()
  np.testing.assert_allclose(a_Q - st.succ, 0.5)
  np.testing.assert_allclose(b_Q - st.fail, 0.5)


def _resumed_without(*keys):
  """(the allocator that ran 3 steps, one restored from its state less `keys`: a checkpoint
  written before they were kept)."""
  a = make(seed=3)
  run(a, pool(), 3)
  saved = json.loads(json.dumps(a.state_dict()))
  for key in keys:
    del saved[key]
  b = make(seed=3)
  b.load_state_dict(saved)
  return a, b


def test_a_checkpoint_without_prior_counts_resumes_with_one_set():
  a, b = _resumed_without('prior_succ', 'prior_fail', 'prior_weight_sq')
  np.testing.assert_array_equal(b.state.prior_succ, a.state.succ)
  np.testing.assert_array_equal(b.state.prior_weight_sq, a.state.weight_sq)


def test_a_checkpoint_without_weight_sq_resumes_with_undecayed_noise():
  a, b = _resumed_without('weight_sq')
  np.testing.assert_allclose(b.state.weight_sq, a.state.succ + a.state.fail)


def test_calibration_splits_groups_by_what_their_evidence_predates():
  """The summary's calibration, against a tally kept here from the rollouts and batches
  alone: a prompt never rolled out is 'unseen'; one trained on at or after its last rollout
  step (a step's update follows its rollouts) is 'trained_since'; else 'untrained_since'."""
  kinds = pool()
  alloc = make(seed=5, explore_rows=4)
  fn = fake_rollout(alloc, kinds, [])
  last_roll, last_trained = {}, {}
  tally = {k: [0, 0] for k in allocator_module.CALIBRATION_KINDS}  # groups, informative
  step = 0

  def recording(layout, round_index=None, category='rollout'):
    out = fn(layout, round_index, category)
    for gid in np.unique(layout.group_id_R[layout.valid_R]):
      rows = layout.valid_R & (layout.group_id_R == gid)
      q = int(layout.row_query_index_R[rows][0])
      kind = ('unseen' if q not in last_roll else 'trained_since'
              if last_trained.get(q, -1) >= last_roll[q] else 'untrained_since')
      r = out.rewards_R[rows]
      tally[kind][0] += 1
      tally[kind][1] += int(r.max() > r.min())
      last_roll[q] = step
    return out
  for step in range(25):
    batch = alloc.fill_batch(recording)
    for q in set(batch.layout.row_query_index_R[batch.layout.valid_R].tolist()):
      last_trained[q] = step
  s = alloc.summary()
  got = {k: [v['groups'], round(v['informative_share'] * v['groups'])]
         for k, v in s['calibration'].items()}
  assert got == tally
  assert all(n > 0 for n, _ in tally.values())  # every kind occurs in this pool
  # The kinds partition the groups, and the expectation is the planned one, split.
  assert sum(v['groups'] for v in s['calibration'].values()) == s['train_groups']
  expected = sum(v['expected_informative_share'] * v['groups'] for v in s['calibration'].values())
  assert expected / s['train_groups'] == pytest.approx(s['expected_informative_share'])
  # The coin prompts train and come back mixed: the trained-since groups are the informative
  # ones here; trivial and unsolved prompts never train, so never land in that kind.
  assert s['calibration']['trained_since']['informative_share'] > 0.3
  assert s['calibration']['untrained_since']['informative_share'] < 0.1


def test_a_checkpoint_without_calibration_counts_resumes_counting_from_there():
  _, b = _resumed_without('calib_groups', 'calib_expected', 'calib_informative')
  assert b.summary()['calibration']['unseen'] == {
      'groups': 0, 'expected_informative_share': None, 'informative_share': None}
  run(b, pool(), 2)
  assert sum(v['groups'] for v in b.summary()['calibration'].values()) > 0


def test_resume_is_exact():
  kinds = pool()
  a = make(seed=3)
  full, _ = run(a, kinds, 12)
  b = make(seed=3)
  run(b, kinds, 5)
  saved = json.loads(json.dumps(b.state_dict()))
  c = make(seed=3)
  c.load_state_dict(saved)
  rest, _ = run(c, kinds, 7)
  for x, y in zip(full[5:], rest):
    np.testing.assert_array_equal(x.layout.row_query_index_R, y.layout.row_query_index_R)
    np.testing.assert_array_equal(x.rollout.rewards_R, y.rollout.rewards_R)
  assert a.summary() == c.summary()


def test_a_step_rolls_out_even_when_no_draw_values_a_group(monkeypatch):
  # Draws at exactly 1 (all value 0) and no exploration rows: the first round falls back to
  # the longest-unsampled prompts at the smallest G instead of building an empty batch.
  alloc = make(num_queries=16, explore_rows=0)
  class OnesDraw:
    def beta(self, a, b):
      return np.ones(np.shape(a))
  monkeypatch.setattr(allocator_module, 'stream_rng', lambda *keys: OnesDraw())
  batches, calls = run(alloc, pool(16, coins=()), 1)
  assert calls == [('rollout', 16)]
  assert alloc.state.times_sampled.sum() == 8  # eight prompts at G=2


def test_fill_target_stops_refilling_once_that_share_is_informative():
  # The same pool and seed: filling the batch takes more rounds than stopping once a quarter
  # of it is informative, and no batch stops short of the target unless the rounds ran out.
  kinds = pool()
  full_batches, full_calls = run(make(explore_rows=4), kinds, 12)
  part_batches, part_calls = run(make(explore_rows=4, fill_target=0.25), kinds, 12)
  assert len(part_calls) < len(full_calls)
  for b in part_batches:
    assert b.info['filled_share'] >= 0.25 or b.info['rounds'] == 4
  assert any(b.info['rounds'] < f.info['rounds'] for b, f in zip(part_batches, full_batches))


def test_a_cooldown_that_would_rest_every_prompt_is_lifted_for_that_step():
  """4 coin prompts, all trained at step 0, cooldown 1: at step 1 nothing is rested; the step
  rolls out anyway (it raised 'no rounds added' before)."""
  kinds = [COIN] * 4
  alloc = make(num_queries=4, explore_rows=0, train_cooldown=1)
  batches, calls = run(alloc, kinds, 3)
  assert len(batches) == 3 and all(b.layout.num_valid_rows > 0 for b in batches)


def test_train_cooldown_rests_a_prompt_after_a_step_trained_on_it():
  kinds = pool()
  alloc = make(explore_rows=4, train_cooldown=3)
  inner = fake_rollout(alloc, kinds, [])
  rolled_this_step: set[int] = set()

  def recording(layout, round_index=None, category='rollout'):
    rolled_this_step.update(layout.row_query_index_R[layout.valid_R].tolist())
    return inner(layout, round_index, category)
  trained_at: dict[int, list[int]] = {}
  for step in range(30):
    rolled_this_step.clear()
    batch = alloc.fill_batch(recording)
    # Nothing trained in the 3 steps before was rolled out again this step.
    recent = {q for q, steps in trained_at.items() if any(step - 3 <= s for s in steps)}
    assert not rolled_this_step & recent
    for q in set(batch.layout.row_query_index_R[batch.layout.valid_R].tolist()):
      trained_at.setdefault(q, []).append(step)
  # The four coin prompts (the only informative ones) take turns: each rests 3 steps after
  # it trains, so none trains on more than a quarter of the 30 steps (+1 for the phase).
  assert trained_at and all(len(steps) <= 8 for steps in trained_at.values())
  assert alloc.state.last_trained.max() >= 25


def test_settings_refuse_bad_values_by_name():
  with pytest.raises(ValueError, match='sgpo_select.train_cooldown=-1'):
    SelectSettings(train_cooldown=-1)
  with pytest.raises(ValueError, match='sgpo_select.fill_target=0'):
    SelectSettings(fill_target=0.0)
  with pytest.raises(ValueError, match='sgpo_select.forget=1.5'):
    SelectSettings(forget=1.5)
  with pytest.raises(ValueError, match='sgpo_select.explore_rows=6'):
    SelectSettings(explore_rows=6)
  with pytest.raises(ValueError, match="sgpo_select.pooled_prior='x'"):
    SelectSettings(pooled_prior='x')
  with pytest.raises(ValueError, match='explore_rows=16 must be below'):
    make(rows=16, explore_rows=16)
  with pytest.raises(ValueError, match="sgpo_select.pooled_prior='difficulty' but no"):
    SelectAllocator(4, 16, SelectSettings(pooled_prior='difficulty'), strata=[None] * 4)


def test_registered_and_built_from_the_default_config():
  config = default_config.get_config('method=sgpo_select')
  alloc = allocators.make_allocator(config, 64, strata=[1] * 64)
  assert isinstance(alloc, SelectAllocator)
  assert alloc.settings == SelectSettings()
