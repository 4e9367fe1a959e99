"""Tests for sgpo_jax/allocators/: GRPO / sGPO / DAPO allocators, resume, DAPO batches, registry."""

import dataclasses
import importlib.util
import json
from typing import ClassVar

import numpy as np
import pytest

from sgpo_jax import allocators, configs
from sgpo_jax.allocators.sgpo import allocation as allocation_lib


def default_config(arg=None):
  spec = importlib.util.spec_from_file_location('default_config', configs.path('default'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def sgpo_cfg(**overrides):
  cfg = {'trivial_threshold': 0.75, 'unsolved_keep_fraction': 0.0, 'group_sizes': (2, 4, 8),
         'rounding': 'down', 'clip': True, 'curriculum': True, 'phase_epochs': 1.0,
         'phase_plateau_window': 0, 'phase_plateau_delta': 0.01,
         'trivial_replay_fraction': 0.0, 'online_update': False, 'prior_strength': 8.0,
         'fill_phase_tail': False}
  cfg.update(overrides)
  return cfg


def plan_key(plan):
  replay = None if plan.is_replay is None else plan.is_replay.tolist()
  return (plan.phase, plan.query_index.tolist(), plan.group_size.tolist(), replay)


def rewards_for(layout, value=1.0):
  return np.where(layout.valid_R, value, 0.0)


def drive(allocator, steps, rows_per_batch, reward_fn=None):
  """Runs next_plan/observe `steps` times; returns the plans' keys."""
  keys = []
  for step in range(steps):
    plan = allocator.next_plan()
    if plan is None:
      keys.append(None)
      break
    layout = plan.rows(rows_per_batch)
    rewards = reward_fn(step, layout) if reward_fn else rewards_for(layout, step % 2)
    allocator.observe(plan, rewards, layout)
    keys.append(plan_key(plan))
  return keys


def assert_resumes_identically(make, rows_per_batch, before=5, after=12, reward_fn=None):
  original = make()
  drive(original, before, rows_per_batch, reward_fn)
  state = json.loads(json.dumps(original.state_dict()))  # must be JSON-serialisable
  resumed = make()
  resumed.load_state_dict(state)
  assert drive(resumed, after, rows_per_batch, reward_fn) == drive(
      original, after, rows_per_batch, reward_fn)


# -- GRPO ---------------------------------------------------------------------------------


def test_grpo_epochs_cover_every_query_once_and_reshuffle():
  alloc = allocators.GRPOAllocator(num_queries=12, group_size=4, rows_per_batch=16, seed=1)
  plans = [alloc.next_plan() for _ in range(6)]  # 4 prompts per batch: 2 epochs of 12
  assert all(p.num_prompts == 4 and p.phase == 'grpo' for p in plans)
  assert all(set(p.group_size.tolist()) == {4} for p in plans)
  epoch0 = np.concatenate([p.query_index for p in plans[:3]])
  epoch1 = np.concatenate([p.query_index for p in plans[3:]])
  assert sorted(epoch0.tolist()) == list(range(12)) == sorted(epoch1.tolist())
  assert epoch0.tolist() != epoch1.tolist()
  assert alloc.epoch == 1
  assert plans[0].rows(16).padding_fraction == 0.0


def test_grpo_batches_span_epochs_and_resume():
  alloc = allocators.GRPOAllocator(num_queries=5, group_size=2, rows_per_batch=8, seed=0)
  assert all(alloc.next_plan().num_prompts == 4 for _ in range(7))
  assert_resumes_identically(lambda: allocators.GRPOAllocator(5, 2, 8, seed=0), 8)
  with pytest.raises(ValueError, match='rows_per_batch=12 is not a multiple of the group size 8; use a multiple of 8'):
    allocators.GRPOAllocator(10, 8, 12)
  other = allocators.GRPOAllocator(5, 2, 8, seed=1)
  with pytest.raises(ValueError, match='same data and seed'):
    other.load_state_dict(allocators.GRPOAllocator(5, 2, 8, seed=0).state_dict())


# -- sGPO ---------------------------------------------------------------------------------

# query:     0  1  2  3  4  5  6  7  8  9 10 11
N_CORRECT = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 0]
PHASE_MEMBERS = {'G2': {3, 4, 5, 6}, 'G4': {2, 10}, 'G8': {1, 9}}


def make_sgpo(rows_per_batch=8, seed=0, **overrides):
  cfg = sgpo_cfg(**overrides)
  allocation = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(N_CORRECT, 8), cfg,
                                       seed)
  return allocators.SGPOAllocator(allocation, cfg, rows_per_batch, seed, num_queries=12)


def test_sgpo_walks_phases_in_order_pads_phase_ends_and_cycles():
  alloc = make_sgpo(rows_per_batch=8)
  plans = [alloc.next_plan() for _ in range(7)]
  # G2: 4 prompts x 2 = 8 rows (1 batch); G4: 2 x 4 (1 batch); G8: 2 batches of 1 prompt.
  assert [p.phase for p in plans] == ['G2', 'G4', 'G8', 'G8', 'G2', 'G4', 'G8']
  for plan in plans:
    assert set(plan.query_index.tolist()) <= PHASE_MEMBERS[plan.phase]
    assert set(plan.group_size.tolist()) == {int(plan.phase[1:])}
  assert alloc.cycle == 1
  assert set(plans[0].query_index.tolist()) == PHASE_MEMBERS['G2']

  padded = make_sgpo(rows_per_batch=16)
  first = padded.next_plan()  # the whole G2 cluster: 8 of 16 rows, never topped up from G4
  assert first.phase == 'G2' and first.rows(16).padding_fraction == 0.5
  assert padded.next_plan().phase == 'G4'


def test_sgpo_phase_epochs_fractional_and_multiple():
  twice = make_sgpo(rows_per_batch=8, phase_epochs=2.0)
  g2 = [twice.next_plan() for _ in range(2)]  # 8 prompts served, 4 per batch
  assert all(p.phase == 'G2' for p in g2)
  served = np.concatenate([p.query_index for p in g2]).tolist()
  assert sorted(served) == sorted(list(PHASE_MEMBERS['G2']) * 2)
  assert twice.next_plan().phase == 'G4'
  half = make_sgpo(rows_per_batch=8, phase_epochs=0.5)  # 2, 1 and 1 prompts
  assert [half.next_plan().phase for _ in range(3)] == ['G2', 'G4', 'G8']


def test_sgpo_plateau_ends_phase_early():
  alloc = make_sgpo(rows_per_batch=8, phase_epochs=10.0, phase_plateau_window=2,
                    phase_plateau_delta=0.01)
  phases = []
  for _ in range(5):
    plan = alloc.next_plan()
    phases.append(plan.phase)
    layout = plan.rows(8)
    alloc.observe(plan, rewards_for(layout, 0.5), layout)  # flat reward: a plateau
  # 4 observed steps (2 windows of 2) with no gain end G2; the 5th plan is G4.
  assert phases == ['G2', 'G2', 'G2', 'G2', 'G4']

  rising = make_sgpo(rows_per_batch=8, phase_epochs=10.0, phase_plateau_window=2)
  for step in range(8):
    plan = rising.next_plan()
    assert plan.phase == 'G2'
    layout = plan.rows(8)
    rising.observe(plan, rewards_for(layout, step / 8), layout)


def test_sgpo_trivial_replay_share():
  alloc = make_sgpo(rows_per_batch=16, trivial_replay_fraction=0.25)
  plan = alloc.next_plan()  # 4 replay rows = 2 prompts at G=2, from trivial {7, 8}
  assert plan.is_replay.tolist() == [False] * 4 + [True] * 2
  assert sorted(plan.query_index[plan.is_replay].tolist()) == [7, 8]
  assert plan.group_size[plan.is_replay].tolist() == [2, 2]
  assert set(plan.query_index[~plan.is_replay].tolist()) == PHASE_MEMBERS['G2']
  layout = plan.rows(16)
  rewards = np.zeros(16)
  rewards[layout.valid_R & np.isin(layout.row_query_index_R, [7, 8])] = 1.0
  alloc.observe(plan, rewards, layout)
  assert alloc.state.phase_rewards == [0.0]  # replay rows do not count towards the plateau
  assert_resumes_identically(
      lambda: make_sgpo(rows_per_batch=16, trivial_replay_fraction=0.25), 16)


def test_sgpo_resume_mid_phase_and_across_cycles():
  for before in (1, 3, 6):
    assert_resumes_identically(lambda: make_sgpo(rows_per_batch=8, phase_epochs=1.5), 8,
                               before=before)
  assert_resumes_identically(
      lambda: make_sgpo(rows_per_batch=16, curriculum=False, unsolved_keep_fraction=1.0),
      16, before=2)


def test_sgpo_mix_phase_batches_mixed_sizes_without_waste():
  alloc = make_sgpo(rows_per_batch=16, curriculum=False)
  plans = [alloc.next_plan() for _ in range(2)]
  assert all(p.phase == 'mix' for p in plans)
  # 8 learnable prompts need 2+2+2+2+4+4+8+8 = 32 rows: exactly two full batches.
  assert [p.num_rows for p in plans] == [16, 16]
  served = dict(zip(np.concatenate([p.query_index for p in plans]).tolist(),
                    np.concatenate([p.group_size for p in plans]).tolist()))
  assert served == {3: 2, 4: 2, 5: 2, 6: 2, 2: 4, 10: 4, 1: 8, 9: 8}


def test_sgpo_online_update_rebuckets_between_cycles():
  alloc = make_sgpo(rows_per_batch=8, online_update=True)
  first = alloc.next_plan()
  assert first.phase == 'G2'
  # Evidence for two G2 queries: 16 successes for query 3, 24 failures for query 4.
  fake = allocators.BatchPlan(np.array([3] * 8 + [4] * 12), np.full(20, 2, np.int32), 'G2')
  layout = fake.rows(40)
  alloc.observe(fake, np.where(layout.row_query_index_R == 3, 1.0, 0.0), layout)
  mean = alloc.posterior_mean()
  # kappa = 8, eps = 0.5: q3 (19.5, 5.5) -> 0.78 > 0.75; q4 (4.5, 28.5) -> 0.136 -> G = 4
  assert mean[3] == pytest.approx(19.5 / 25) and mean[4] == pytest.approx(4.5 / 33)
  st = alloc.state  # the counts land exactly (posterior.update_posterior, no decay)
  assert (st.alpha[3], st.beta[3], st.observed[3]) == (19.5, 5.5, 16)
  assert (st.alpha[4], st.beta[4], st.observed[4]) == (4.5, 28.5, 24)
  seen = {}
  while alloc.cycle < 2:
    plan = alloc.next_plan()
    for q, g in zip(plan.query_index.tolist(), plan.group_size.tolist()):
      seen.setdefault((alloc.cycle, plan.phase), set()).add((q, g))
  assert seen[(1, 'G2')] == {(5, 2), (6, 2)}  # 3 dropped as solved, 4 moved on
  assert seen[(1, 'G4')] == {(2, 4), (10, 4), (4, 4)}
  assert seen[(1, 'G8')] == {(1, 8), (9, 8)}
  assert_resumes_identically(lambda: make_sgpo(rows_per_batch=8, online_update=True), 8,
                             before=3, after=10,
                             reward_fn=lambda step, lay: rewards_for(lay, float(step % 3 == 0)))


def test_sgpo_returns_none_when_a_whole_cycle_is_empty():
  cfg = sgpo_cfg(online_update=True)
  allocation = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([3], 8), cfg)
  alloc = allocators.SGPOAllocator(allocation, cfg, 8, num_queries=1)
  plan = alloc.next_plan()
  layout = plan.rows(8)
  for _ in range(10):  # the only query is solved over and over
    alloc.observe(plan, rewards_for(layout, 1.0), layout)
  assert alloc.next_plan() is None


# -- DAPO ---------------------------------------------------------------------------------


def test_dapo_keep_groups_exact_equality():
  # groups of 4: all 1 (drop), all 0 (drop), one success (keep), 0.5 vs 0.5 + 1e-12 (keep:
  # not exactly equal), differing only on a padding row (drop), one valid row (drop).
  rewards = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, .5, .5, .5, .5 + 1e-12,
                      1, 1, 1, 0, 1, 0, 0, 0], dtype=np.float64)
  group_id = np.repeat(np.arange(6), 4)
  valid = np.ones(24, bool)
  valid[19] = False
  valid[21:24] = False
  keep = allocators.keep_informative_groups(rewards, group_id, valid, num_groups=6)
  np.testing.assert_array_equal(keep.reshape(6, 4).all(axis=1), [0, 0, 1, 1, 0, 0])
  assert not keep[16:].any()
  with pytest.raises(ValueError, match='num_groups=5'):
    allocators.keep_informative_groups(rewards, group_id, valid, num_groups=5)


def test_dapo_builder_fills_from_rounds_and_reports_discards():
  alloc = allocators.DAPOAllocator(num_queries=10, group_size=4, rows_per_batch=8,
                                   max_rounds=4, seed=0)
  builder = alloc.new_batch_builder()
  round_rewards = [
      [1, 1, 1, 1, 1, 0, 1, 0],  # group 0 all-equal (dropped), group 1 kept
      [0, 1, 0, 0, 1, 1, 0, 1],  # both informative: one fits, one overflows
  ]
  plans, layouts = [], []
  for rewards in round_rewards:
    assert not builder.done
    plan = alloc.next_plan()
    assert plan.phase == 'dapo' and plan.num_prompts == 2
    layout = plan.rows(8)
    plans.append(plan)
    layouts.append(layout)
    builder.add_round(layout, np.array(rewards, np.float32))
  assert builder.done and builder.rounds == 2
  batch = builder.build()
  assert (batch.kept_groups, batch.dropped_groups, batch.overflow_groups) == (2, 1, 1)
  assert batch.generated_rows == 16 and batch.discarded_rows == 8
  np.testing.assert_array_equal(batch.round_index_R, [0] * 4 + [1] * 4)
  np.testing.assert_array_equal(batch.round_row_R, [4, 5, 6, 7, 0, 1, 2, 3])
  np.testing.assert_array_equal(batch.rewards_R, [1, 0, 1, 0, 0, 1, 0, 0])
  np.testing.assert_array_equal(batch.layout.group_id_R, [0, 0, 0, 0, 1, 1, 1, 1])
  expected_queries = [plans[0].query_index[1]] * 4 + [plans[1].query_index[0]] * 4
  np.testing.assert_array_equal(batch.layout.row_query_index_R, expected_queries)
  tokens = [np.arange(8)[:, None] * 10 + k for k in range(2)]  # [R, 1] per round
  np.testing.assert_array_equal(batch.gather(tokens, fill=-1)[:, 0],
                                [40, 50, 60, 70, 1, 11, 21, 31])
  with pytest.raises(ValueError, match='already done'):
    builder.add_round(layouts[0], np.zeros(8))


def test_dapo_builder_stops_at_max_rounds_and_pads():
  alloc = allocators.DAPOAllocator(10, 4, 8, max_rounds=3, seed=0)
  builder = alloc.new_batch_builder()
  while not builder.done:
    layout = alloc.next_plan().rows(8)
    rewards = np.zeros(8)
    if builder.rounds == 1:
      rewards[:4] = [1, 0, 0, 0]  # one informative group in round 2
    builder.add_round(layout, rewards)
  batch = builder.build()
  assert batch.rounds == 3 and batch.generated_rows == 24
  assert batch.layout.num_valid_rows == 4 and batch.layout.padding_fraction == 0.5
  assert batch.discarded_rows == 20 and batch.dropped_groups == 5
  assert len(set(batch.layout.group_id_R.tolist())) == 5  # 1 group + 4 padding ids
  np.testing.assert_array_equal(batch.round_index_R, [1] * 4 + [-1] * 4)
  with pytest.raises(ValueError, match='no rounds'):
    allocators.RoundBatchBuilder(8, 2).build()


# -- dispatch ------------------------------------------------------------------------------


def test_make_allocator_dispatches_on_method():
  grpo = allocators.make_allocator(default_config('method=grpo'), num_queries=100)
  assert isinstance(grpo, allocators.GRPOAllocator) and grpo.prompts_per_batch == 16
  dapo = allocators.make_allocator(default_config('method=dapo'), num_queries=100)
  assert isinstance(dapo, allocators.DAPOAllocator) and dapo.max_rounds == 4
  config = default_config('method=sgpo')
  config.sgpo.curriculum = True  # the default is the shuffled mix
  with pytest.raises(ValueError, match='needs the profile'):
    allocators.make_allocator(config, 12)
  sgpo_alloc = allocators.make_allocator(
      config, 12, profile={'n_correct': N_CORRECT, 'n_samples': 8})
  assert isinstance(sgpo_alloc, allocators.Allocator)
  assert sgpo_alloc.next_plan().phase == 'G2'
  # The profile stage goes through the class too: train.py never names a method.
  sgpo_cls = allocators.allocator_class('sgpo')
  assert sgpo_cls.needs_profile and not allocators.allocator_class('grpo').needs_profile
  allocation = sgpo_cls.allocate(config, {'n_correct': N_CORRECT, 'n_samples': 8})
  assert allocation.summary() == allocation_lib.allocate(
      allocation_lib.QueryProfile.from_counts(N_CORRECT, 8), config.sgpo, config.seed).summary()
  settled = sgpo_cls.profile_settled(config)
  assert settled(3, 5) and not settled(0, 7)  # 3..6 of 8 all give G=2; 0 vs 1 of 8 differ
  assert allocators.allocator_class('dapo').profile_settled(config) is None
  config.method = 'ppo'
  with pytest.raises(ValueError, match=r"config.method='ppo' is not one of "
                     r"\('dapo', 'greso', 'grpo', 'knapsack', 'sgpo', 'sgpo_bayes', 'sgpo_select'\)"):
    allocators.make_allocator(config, 12)


# -- fill_batch: the one interface the trainer uses ----------------------------------------


class FakeRollouts:
  """A RolloutFn: scripted rewards per call; records every call as the ledger would."""

  def __init__(self, rewards_per_call):
    self.rewards_per_call = list(rewards_per_call)
    self.calls = []

  def __call__(self, layout, round_index=None, category='rollout'):
    k = len(self.calls)
    self.calls.append((round_index, category, layout.num_valid_rows))
    rows = layout.rows_per_batch
    tokens = np.where(layout.valid_R[:, None], 100 * k + np.arange(rows)[:, None], 0)
    return allocators.Rollout(tokens.astype(np.int32), layout.valid_R[:, None].astype(np.int32),
                              np.zeros((rows, 1), np.float32),
                              np.asarray(self.rewards_per_call[k], np.float32) * layout.valid_R,
                              np.asarray(layout.row_query_index_R), pad_id=0)


def test_plan_allocators_fill_one_batch_per_rollout_like_next_plan():
  via_fill = make_sgpo(rows_per_batch=8)
  via_plans = make_sgpo(rows_per_batch=8)
  fake = FakeRollouts([np.ones(8)] * 3)
  for _ in range(3):
    filled = via_fill.fill_batch(fake)
    plan = via_plans.next_plan()
    via_plans.observe(plan, rewards_for(plan.rows(8)), plan.rows(8))
    assert filled.phase == plan.phase and filled.info == {'rounds': 1}
    np.testing.assert_array_equal(filled.layout.row_query_index_R,
                                  plan.rows(8).row_query_index_R)
  # one rollout per step, on the step's own key, charged as 'rollout'
  assert [c[:2] for c in fake.calls] == [(None, 'rollout')] * 3
  assert via_fill.state_dict() == via_plans.state_dict()


def test_dapo_fill_batch_runs_rounds_and_charges_discarded_rows():
  alloc = allocators.DAPOAllocator(num_queries=10, group_size=4, rows_per_batch=8,
                                   max_rounds=4, seed=0)
  mirror = allocators.DAPOAllocator(10, 4, 8, max_rounds=4, seed=0)
  fake = FakeRollouts([[1, 1, 1, 1, 1, 0, 1, 0], [0, 1, 0, 0, 1, 1, 0, 1]])
  filled = alloc.fill_batch(fake)
  # two rounds (distinct round keys), all 16 generated rows charged, 8 of them discarded
  assert fake.calls == [(0, 'rollout', 8), (1, 'rollout', 8)]
  assert filled.info == {'rounds': 2, 'dapo_dropped_groups': 1, 'dapo_discarded_rows': 8,
                         'dapo_kept_groups': 2}
  assert filled.phase == 'dapo'
  np.testing.assert_array_equal(filled.rollout.rewards_R, [1, 0, 1, 0, 0, 1, 0, 0])
  # round 0 rows 4..7, then round 1 rows 0..3 (tokens encode 100 * round + row)
  np.testing.assert_array_equal(filled.rollout.tokens_RxN[:, 0],
                                [4, 5, 6, 7, 100, 101, 102, 103])
  plans = [mirror.next_plan() for _ in range(2)]
  expected = [plans[0].query_index[1]] * 4 + [plans[1].query_index[0]] * 4
  np.testing.assert_array_equal(filled.rollout.row_query_index_R, expected)
  np.testing.assert_array_equal(filled.layout.row_query_index_R, expected)


# -- registry, settings, state ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OnceSettings(allocators.AllocatorSettings):
  section: ClassVar[str] = 'every_query_once_test'
  group_size: int = 2


def test_registry_takes_a_new_allocator_with_one_decorator():
  with pytest.raises(ValueError, match="needs its own `Settings` class with section = 'nameless'"):
    @allocators.register_allocator('nameless')
    class Nameless(allocators.PlanAllocator):  # noqa: F841 (GRPO's Settings is not its own)
      pass

  @allocators.register_allocator('every_query_once_test')
  class OnceAllocator(allocators.PlanAllocator):
    """All queries at G=2 in one batch, then exhausted (a toy plug-in)."""
    Settings = OnceSettings

    def __init__(self, num_queries, seed):
      self.num_queries, self.seed, self.rows_per_batch = num_queries, seed, 2 * num_queries
      self.state = OnceState()

    @classmethod
    def from_config(cls, config, num_queries, profile=None):
      return cls(num_queries, int(config.seed))

    def next_plan(self):
      if self.state.done:
        return None
      self.state.done = True
      return allocators.BatchPlan(np.arange(self.num_queries), np.full(self.num_queries, 2),
                                  'once')

  try:
    config = default_config()
    assert config.every_query_once_test.group_size == 2  # its section, from its Settings
    config.method = 'every_query_once_test'
    alloc = allocators.make_allocator(config, num_queries=3)
    fake = FakeRollouts([np.ones(6)])
    assert alloc.fill_batch(fake).layout.num_valid_rows == 6
    state = json.loads(json.dumps(alloc.state_dict()))
    assert state == {'kind': 'every_query_once_test', 'num_queries': 3, 'seed': 0, 'done': True}
    fresh = allocators.make_allocator(config, num_queries=3)
    fresh.load_state_dict(state)
    assert fresh.fill_batch(fake) is None
    with pytest.raises(ValueError, match='already registered'):
      allocators.register_allocator('every_query_once_test')(allocators.GRPOAllocator)
  finally:
    allocators.base._REGISTRY.pop('every_query_once_test')


@dataclasses.dataclass
class OnceState:
  done: bool = False


def test_state_dict_is_the_state_dataclass_and_round_trips_arrays():
  alloc = make_sgpo(rows_per_batch=8, online_update=True, trivial_replay_fraction=0.25)
  drive(alloc, 3, 8)
  state = json.loads(json.dumps(alloc.state_dict()))
  fields = {f.name for f in dataclasses.fields(alloc.state)}
  assert set(state) == fields | {'kind', 'num_queries', 'seed'}
  resumed = make_sgpo(rows_per_batch=8, online_update=True, trivial_replay_fraction=0.25)
  resumed.load_state_dict(state)
  assert resumed.state.alpha.dtype == np.float64 and resumed.state.observed.dtype == np.int64
  np.testing.assert_array_equal(resumed.state.alpha, alloc.state.alpha)
  assert resumed.state.replay == alloc.state.replay
  del state['pending']
  with pytest.raises(ValueError, match=r"lacks \['pending'\]"):
    resumed.load_state_dict(state)


def test_epoch_cursor_covers_each_epoch_once_and_crosses_epochs():
  cursor = allocators.EpochCursor()
  picks = np.concatenate([cursor.take(3, 5, (7, 1)) for _ in range(4)])  # 12 = 2.4 epochs
  assert sorted(picks[:5].tolist()) == list(range(5)) == sorted(picks[5:10].tolist())
  assert (cursor.epoch, cursor.cursor) == (2, 2)
  again = allocators.EpochCursor()
  assert np.concatenate([again.take(6, 5, (7, 1)), again.take(6, 5, (7, 1))]).tolist() == \
      picks.tolist()


def test_typed_settings_take_defaults_from_default_config_and_check_ranges():
  settings = allocation_lib.SGPOSettings.from_config({'group_sizes': [8, 2, 4]})
  defaults = default_config().sgpo
  assert settings.group_sizes == (2, 4, 8)
  assert settings.trivial_threshold == defaults.trivial_threshold
  assert settings.fill_phase_tail == defaults.fill_phase_tail
  with pytest.raises(ValueError, match=r"unknown sgpo settings \['phase_epoch'\]; known:"):
    allocation_lib.SGPOSettings.from_config({'phase_epoch': 2.0})
  with pytest.raises(ValueError, match='sgpo.phase_epochs=0 must be > 0'):
    allocation_lib.SGPOSettings.from_config({'phase_epochs': 0})
  with pytest.raises(ValueError, match='dapo.max_rounds=0 must be >= 1'):
    allocators.DAPOSettings.from_config({'max_rounds': 0})
  assert allocators.GRPOSettings.from_config(None).group_size == default_config().grpo.group_size
