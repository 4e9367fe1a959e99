"""GRESO's skip rule on hand-made reward histories, and its allocator (cheap, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from sgpo_jax import allocators
from sgpo_jax.allocators.greso import rule as rule_lib
from sgpo_jax.allocators.greso.allocator import GRESOAllocator
from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config

ALL1, ALL0, MIXED = [1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 1]


def streaks_after(history):
  """(easy, hard) streaks after a prompt's whole history of groups, oldest first."""
  easy, hard = 0, 0
  for rewards in history:
    easy, hard = rule_lib.update_streaks(easy, hard, rule_lib.group_kind(np.asarray(rewards,
                                                                                    float)))
  return easy, hard


@pytest.mark.parametrize('history, easy, hard', [
    ([ALL1, ALL1], 2, 0),
    ([ALL0, ALL0, ALL0], 0, 3),
    ([ALL1, MIXED], 0, 0),
    ([ALL0, ALL1], 1, 0),  # a solved prompt starts an easy streak, ends the hard one
    ([ALL1, ALL1, ALL0, ALL0], 0, 2),
    ([], 0, 0),
])
def test_streaks_count_the_most_recent_run_of_one_kind(history, easy, hard):
  assert streaks_after(history) == (easy, hard)


def test_group_kind_is_exact_and_splits_all_correct_from_all_wrong():
  assert rule_lib.group_kind([1.0, 1.0]) == rule_lib.EASY
  assert rule_lib.group_kind([0.0, 0.0, 0.0]) == rule_lib.HARD
  assert rule_lib.group_kind([0.1, 0.1]) == rule_lib.HARD  # format bonus only: all wrong
  assert rule_lib.group_kind([1.0, 1.0 - 1e-7]) == rule_lib.INFORMATIVE
  with pytest.raises(ValueError, match='at least one'):
    rule_lib.group_kind([])


@pytest.mark.parametrize('history, p_easy, p_hard, expected', [
    ([ALL1, ALL1], 0.5, 0.9, 1 - 0.25),  # 1 - p_easy^2
    ([ALL0, ALL0, ALL0], 0.9, 0.5, 1 - 0.125),  # 1 - p_hard^3
    ([ALL1, MIXED], 0.5, 0.5, 0.0),  # last rollout informative: never skipped
    ([ALL1] * 10, 0.5, 0.5, 0.99),  # 0.5^10 < floor 0.01
    ([ALL0], 0.3, 0.7, 0.3),
])
def test_skip_probability_from_history(history, p_easy, p_hard, expected):
  easy, hard = streaks_after(history)
  assert rule_lib.skip_probability(easy, hard, p_easy, p_hard, 0.01) == pytest.approx(expected)


def test_adapt_moves_toward_the_target_and_stays_in_range():
  assert rule_lib.adapt_probability(0.5, 0.10, 0.25 / 3, 0.01, 0.05, 0.95) == pytest.approx(0.49)
  assert rule_lib.adapt_probability(0.5, 0.05, 0.25 / 3, 0.01, 0.05, 0.95) == pytest.approx(0.51)
  assert rule_lib.adapt_probability(0.055, 1.0, 0.1, 0.01, 0.05, 0.95) == 0.05
  assert rule_lib.adapt_probability(0.945, 0.0, 0.1, 0.01, 0.05, 0.95) == 0.95


def test_settings_defaults_are_the_papers_and_bad_values_are_named():
  s = rule_lib.GRESOSettings.from_config(default_config.get_config().greso)
  assert s == rule_lib.GRESOSettings()  # the config section is built from the field defaults
  assert (s.p_easy_init, s.p_hard_init, s.delta, s.p_min, s.p_max, s.p_floor) == \
      (0.5, 0.5, 0.01, 0.05, 0.95, 0.01)
  assert s.target_easy == pytest.approx(0.25 / 3) and s.target_hard == pytest.approx(0.5 / 3)
  with pytest.raises(ValueError, match='greso.p_easy_init=0.99'):
    rule_lib.GRESOSettings(p_easy_init=0.99)
  with pytest.raises(ValueError, match=r"unknown greso settings \['p_eassy_init'\]"):
    rule_lib.GRESOSettings.from_config({'p_eassy_init': 0.5})
  c = default_config.get_config('method=greso')
  for floor in (1.0, 0.0):  # 0: a pool of long-streak prompts would be skipped forever
    c.greso.p_floor = floor
    with pytest.raises(ValueError, match=rf'greso.p_floor={floor} must be in \(0, 1\)'):
      config_check.check_config(c)


def _feed(alloc, plan, rewards_by_query, rows=16):
  layout = plan.rows(rows)
  rewards_R = np.zeros(rows, np.float32)
  for r in np.flatnonzero(layout.valid_R):
    q = int(layout.row_query_index_R[r])
    rewards_R[r] = rewards_by_query(q, r)
  alloc.observe_round(layout, rewards_R)


def test_allocator_skips_solved_prompts_at_the_rule_rate_and_never_informative_ones():
  # 8 queries, G=4, R=16: 4 prompts a round. Queries 0-3 always solved, 4-7 mixed.
  s = rule_lib.GRESOSettings(group_size=4)
  alloc = GRESOAllocator(8, s, 16, seed=3)
  solved = lambda q, r: 1.0 if q < 4 else float(r % 2)  # noqa: E731
  for _ in range(2):  # the whole first epoch: every prompt rolled out once
    _feed(alloc, alloc.next_plan(), solved)
  assert alloc.skipped_total == 0
  assert alloc.easy_streak.tolist() == [1] * 4 + [0] * 4
  served = np.zeros(8)
  for _ in range(400):
    plan = alloc.next_plan()
    np.add.at(served, plan.query_index, 1)
    _feed(alloc, plan, solved)
  # Informative prompts are served every time they come up; a solved one whose streak is z
  # comes through with p_easy^z (floored), so far less often.
  assert served[4:].min() > 5 * served[:4].max()
  assert alloc.easy_streak[:4].min() >= 2 and alloc.skipped_total > 0


def test_allocator_adapts_p_once_per_step_after_the_first_epoch():
  s = rule_lib.GRESOSettings(group_size=4)
  alloc = GRESOAllocator(8, s, 16, seed=0)
  all_wrong = lambda q, r: 0.0  # noqa: E731
  alloc.start_step()  # step 1 starts: nothing to adapt yet
  for _ in range(2):
    _feed(alloc, alloc.next_plan(), all_wrong)
  alloc.start_step()  # step 2 starts: step 1 was epoch 0 -> no adaptation
  assert (alloc.p_easy, alloc.p_hard) == (0.5, 0.5)
  plan = alloc.next_plan()  # epoch 1 now
  _feed(alloc, plan, all_wrong)
  alloc.start_step()  # hard share 1.0 >= 1/6: explore hard prompts less
  assert alloc.p_hard == pytest.approx(0.49) and alloc.p_easy == pytest.approx(0.51)


def test_allocator_state_round_trips_to_the_same_continuation():
  s = rule_lib.GRESOSettings(group_size=4)
  reward = lambda q, r: float((q * 7 + r) % 3 == 0) if q % 2 else 1.0  # noqa: E731

  def run(alloc, steps):
    out = []
    for _ in range(steps):
      alloc.start_step()
      plan = alloc.next_plan()
      _feed(alloc, plan, reward)
      out.append(plan.query_index.tolist())
    return out

  a = GRESOAllocator(12, s, 16, seed=5)
  run(a, 7)
  state = a.state_dict()
  import json
  b = GRESOAllocator(12, s, 16, seed=5)
  b.load_state_dict(json.loads(json.dumps(state)))
  assert run(a, 9) == run(b, 9)
  assert (a.p_easy, a.p_hard, a.skipped_total) == (b.p_easy, b.p_hard, b.skipped_total)
  with pytest.raises(ValueError, match='seed'):
    GRESOAllocator(12, s, 16, seed=6).load_state_dict(state)


def test_make_allocator_builds_greso_from_the_config():
  c = default_config.get_config()
  c.method = 'greso'
  c.greso.p_hard_init = 0.7
  alloc = allocators.make_allocator(c, 100)
  assert isinstance(alloc, GRESOAllocator) and alloc.p_hard == 0.7
  assert alloc.prompts_per_batch == c.train.rows_per_batch // c.greso.group_size
