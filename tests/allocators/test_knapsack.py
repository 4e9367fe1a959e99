"""Knapsack RL's value, exact solve (hand-computed optima, brute force) and allocator."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from sgpo_jax import allocators
from sgpo_jax.allocators.knapsack import solver as solver_lib
from sgpo_jax.allocators.knapsack.allocator import KnapsackAllocator
from sgpo_jax.config import defaults as default_config


def test_task_value_by_hand():
  # (1 - p^N - (1-p)^N) * p * (1-p)^2
  assert solver_lib.task_value(0.5, 2) == pytest.approx(0.5 * 0.125)
  assert solver_lib.task_value(0.5, 4) == pytest.approx((1 - 2 / 16) * 0.125)
  assert solver_lib.task_value(0.9, 2) == pytest.approx(0.18 * 0.9 * 0.01)
  assert solver_lib.task_value(0.0, 8) == 0.0 and solver_lib.task_value(1.0, 8) == 0.0


def test_solve_hand_computed_optima():
  # p = (0.5, 0.9), N in {2, 4}, 6 rows: (4, 2) = 0.109375 + 0.00162 beats (2, 4) = 0.0625 +
  # 0.0030942; (4, 4) does not fit.
  assert solver_lib.solve([0.5, 0.9], [2, 4], 6).tolist() == [4, 2]
  # p = (0.1, 0.5), N in {2, 8}, 10 rows: (2, 8) = 0.01458 + 0.124023 beats (8, 2) = 0.046132
  # + 0.0625.
  assert solver_lib.solve([0.1, 0.5], [2, 8], 10).tolist() == [2, 8]
  # Worthless prompts (p in {0, 1}) take the smallest size; the rest goes where it is worth.
  assert solver_lib.solve([0.0, 1.0, 0.5], [2, 4, 8], 12).tolist() == [2, 2, 8]


def test_solve_matches_brute_force():
  rng = np.random.default_rng(0)
  sizes = [2, 3, 5, 8]
  for _ in range(25):
    p = rng.choice([0.0, 1.0, 0.05, 0.2, 0.5, 0.7, 0.95], size=4)
    budget = int(rng.integers(8, 30))
    got = solver_lib.solve(p, sizes, budget)
    assert got.sum() <= budget
    best = max(sum(solver_lib.task_value(pi, n) for pi, n in zip(p, combo))
               for combo in itertools.product(sizes, repeat=4) if sum(combo) <= budget)
    assert sum(solver_lib.task_value(pi, n) for pi, n in zip(p, got)) == pytest.approx(best)


def test_solve_rejects_an_impossible_budget_and_bad_rates():
  with pytest.raises(ValueError, match='at least 8 rows'):
    solver_lib.solve([0.5] * 4, [2, 4], 7)
  with pytest.raises(ValueError, match=r'\[0, 1\]'):
    solver_lib.solve([1.5], [2], 4)


def test_fallback_gives_left_rows_to_unsolved_prompts_round_robin():
  n = solver_lib.fallback_fill(np.array([2, 2, 2, 4]), np.array([0.0, 1.0, 0.0, 0.5]), 15, 5)
  assert n.tolist() == [5, 2, 4, 4]  # 5 rows left: 0,2,0,2,0 -> capped at 5 for prompt 0
  n = solver_lib.fallback_fill(np.array([2, 2]), np.array([1.0, 0.5]), 10, 8)
  assert n.tolist() == [2, 2]  # nobody unsolved: rows stay padding


def _feed(alloc, plan, success_by_query, rows):
  layout = plan.rows(rows)
  rewards_R = np.zeros(rows, np.float32)
  for p, q in enumerate(plan.query_index.tolist()):
    idx = np.flatnonzero((layout.group_id_R == p) & layout.valid_R)
    k = int(round(success_by_query[q] * idx.size))
    rewards_R[idx[:k]] = 1.0
  alloc.observe(plan, rewards_R, layout)


def test_allocator_sizes_follow_the_last_success_rates_within_one_static_batch():
  s = solver_lib.KnapsackSettings(group_size=4, min_group_size=2, max_group_size=8)
  alloc = KnapsackAllocator(8, s, 16, seed=1)
  first = alloc.next_plan()
  assert first.group_size.tolist() == [4, 4, 4, 4]  # prior 0.5 for all: the even split
  success = {0: 0.0, 1: 1.0, 2: 0.5, 3: 0.25, 4: 0.0, 5: 1.0, 6: 0.5, 7: 0.75}
  _feed(alloc, first, success, 16)
  _feed(alloc, alloc.next_plan(), success, 16)  # epoch 0 done: every rate seen
  for _ in range(4):
    plan = alloc.next_plan()
    p = np.array([alloc.success[q] for q in plan.query_index])
    assert plan.group_size.tolist() == solver_lib.choose_group_sizes(p, s, 16).tolist()
    assert plan.num_rows <= 16 and plan.rows(16).valid_R.size == 16
    _feed(alloc, plan, success, 16)


def test_allocator_state_round_trips():
  s = solver_lib.KnapsackSettings(group_size=4, min_group_size=2, max_group_size=8)
  success = {q: (q % 5) / 4 for q in range(10)}
  a = KnapsackAllocator(10, s, 16, seed=2)
  for _ in range(3):
    _feed(a, a.next_plan(), success, 16)
  b = KnapsackAllocator(10, s, 16, seed=2)
  b.load_state_dict(json.loads(json.dumps(a.state_dict())))
  for _ in range(4):
    pa, pb = a.next_plan(), b.next_plan()
    assert pa.query_index.tolist() == pb.query_index.tolist()
    assert pa.group_size.tolist() == pb.group_size.tolist()
    _feed(a, pa, success, 16)
    _feed(b, pb, success, 16)


def test_config_builds_knapsack_and_checks_its_settings():
  from sgpo_jax.config import check as config_check
  c = default_config.get_config()
  c.method = 'knapsack'
  alloc = allocators.make_allocator(c, 50)
  assert isinstance(alloc, KnapsackAllocator)
  c.knapsack.max_group_size = 4  # below group_size 8
  with pytest.raises(ValueError, match='max_group_size'):
    config_check.check_config(c)
  c.knapsack.max_group_size = 1024
  with pytest.raises(ValueError, match='rows_per_batch'):
    config_check.check_config(c)
