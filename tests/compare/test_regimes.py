"""Comparison regimes (default / paper_like / small_pool), the arithmetic difficulty mix and
the eval's standard error. Cheap: no model is run."""

from __future__ import annotations

import collections
import math
import pathlib

import pytest

from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config
from sgpo_jax.config.args import load_config_module
from sgpo_jax.data import loading as data_lib
from sgpo_jax.data.loading import load_queries
from sgpo_jax.generate import evaluate as evaluate_lib
from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.tasks import arithmetic

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / 'sgpo_jax' / 'configs'
regimes = load_config_module(str(CONFIGS / 'regimes.py'))
default_file = load_config_module(str(CONFIGS / 'default.py'))  # its regime=NAME: the same


def test_accuracy_se_is_binomial():
  assert evaluate_lib.accuracy_se(0.5, 2048) == pytest.approx(0.5 / math.sqrt(2048))
  assert evaluate_lib.accuracy_se(0.9, 100) == pytest.approx(0.03)  # sqrt(.09 / 100)
  assert evaluate_lib.accuracy_se(0.0, 10) == 0.0 == evaluate_lib.accuracy_se(1.0, 10)
  # The worst case at the default eval size is just over one point; 0.6 is under it.
  assert evaluate_lib.accuracy_se(0.6, default_config.get_config().data.num_eval) < 0.011
  with pytest.raises(ValueError, match='n=0'):
    evaluate_lib.accuracy_se(0.5, 0)
  with pytest.raises(ValueError, match='accuracy=1.5'):
    evaluate_lib.accuracy_se(1.5, 10)


def test_level_counts_largest_remainder():
  assert arithmetic.level_counts(10, (1, 1, 1, 1), 1, 4) == {1: 3, 2: 3, 3: 2, 4: 2}
  assert arithmetic.level_counts(7, (0, 2, 1), 2, 4) == {2: 0, 3: 5, 4: 2}  # 4.67, 2.33
  with pytest.raises(ValueError, match=r'difficulty_weights=\(1, 1\) must be 4'):
    arithmetic.level_counts(10, (1, 1), 1, 4)
  with pytest.raises(ValueError, match='non-negative'):
    arithmetic.level_counts(10, (1, -1, 1, 1), 1, 4)


def test_level_space_counts_problems_by_largest_operand():
  assert arithmetic.level_space(1, 1) == 100  # 0..9 + 0..9
  assert arithmetic.level_space(2, 1) == 100 ** 2 - 10 ** 2  # operands 0..99, not both < 10
  assert arithmetic.level_space(2, 2) == 90 ** 2


def test_mixed_pool_has_exactly_the_weighted_levels():
  weights = (0.02, 0.5, 0.25, 0.23)
  queries = arithmetic.generate_mixed_queries(1000, seed=5, weights=weights)
  assert collections.Counter(q.difficulty for q in queries) == {1: 20, 2: 500, 3: 250, 4: 230}
  assert len({q.prompt for q in queries}) == 1000
  assert queries == arithmetic.generate_mixed_queries(1000, seed=5, weights=weights)
  assert queries[:50] != sorted(queries[:50], key=lambda q: q.difficulty)  # levels shuffled
  for q in queries:
    operands = q.prompt[:-1].split('+')
    assert max(len(x) for x in operands) == q.difficulty
    assert int(q.answer) == sum(map(int, operands))


def test_mixed_pool_names_the_level_that_runs_out():
  with pytest.raises(ValueError, match='difficulty level 1 needs 101 distinct problems'):
    arithmetic.generate_mixed_queries(101, seed=0, weights=(1, 0, 0, 0))


def test_regime_args_select_named_blocks():
  for regime in regimes.REGIMES:
    for method in ('sgpo', 'grpo', 'dapo'):
      c = default_file.get_config(f'regime={regime},method={method}')
      config_check.check_config(c, num_devices=1)
      assert c.regime == regime and c.method == method
      assert c.train.flops_budget > 0 and c.data.rl_pool_size > 0
      assert c == regimes.get_config(f'method={method},regime={regime}')
  assert default_config.get_config().regime == '' == default_file.get_config().regime
  assert regimes.get_config().regime == 'default'
  with pytest.raises(ValueError, match="regime='paperlike' is not one of"):
    default_file.get_config('regime=paperlike')
  with pytest.raises(ValueError, match="unknown config arg 'regim'"):
    default_file.get_config('regim=default')
  with pytest.raises(ValueError, match="unknown config arg 'regime'"):
    default_config.get_config('regime=default')  # the package's config has no regimes


def test_default_and_small_pool_share_the_readme_runs_initial_policy():
  from sgpo_jax.rl import warm_start
  readme = default_config.get_config()
  for regime in ('default', 'small_pool'):
    c = default_file.get_config(f'regime={regime}')
    assert warm_start.cache_key(c) == warm_start.cache_key(readme), regime
  # paper_like has its own pool and warm start; every method of a regime starts from the
  # same policy.
  assert warm_start.cache_key(default_file.get_config('regime=paper_like')) != \
      warm_start.cache_key(readme)
  for regime in regimes.REGIMES:
    keys = {warm_start.cache_key(default_file.get_config(f'regime={regime},method={m}'))
            for m in ('sgpo', 'grpo', 'dapo', 'greso', 'knapsack', 'sgpo_bayes')}
    assert len(keys) == 1, regime


def test_paper_like_pool_eval_and_warm_start_data():
  """paper_like: pool and eval share one difficulty mix; the warm start sees every query of
  levels 1-3 and only the last 10% of level 4, none of them in the RL pool."""
  from sgpo_jax.rl import warm_start
  c = default_file.get_config('regime=paper_like')
  full = load_queries(c.data, 'train', seed=c.data.seed)
  evals = load_queries(c.data, 'test', seed=c.data.seed)
  weights = c.data.difficulty_weights
  assert collections.Counter(q.difficulty for q in full) == arithmetic.level_counts(
      len(full), weights, 1, 4)
  # The eval set is its core and the rest, each drawn with the mix (arithmetic.
  # train_eval_queries): per level the two parts' rounded counts, within 1 of the whole's.
  core = min(len(evals), arithmetic.EVAL_CORE)
  parts = collections.Counter(arithmetic.level_counts(core, weights, 1, 4))
  parts.update(arithmetic.level_counts(len(evals) - core, weights, 1, 4))
  assert collections.Counter(q.difficulty for q in evals) == parts
  whole = arithmetic.level_counts(len(evals), weights, 1, 4)
  assert all(abs(parts[level] - whole[level]) <= 1 for level in whole)
  pool = data_lib.rl_pool(full, c.data)
  assert pool == full[:c.data.rl_pool_size]
  sft = warm_start.sft_queries(full, c.warm_start, c.data.min_digits)
  n4 = sum(q.difficulty == 4 for q in full)
  assert sum(q.difficulty == 4 for q in sft) == round(0.1 * n4)
  assert [q for q in sft if q.difficulty < 4] == [q for q in full if q.difficulty < 4]
  assert not {q.prompt for q in sft if q.difficulty == 4} & {q.prompt for q in pool}


def test_sft_queries_takes_the_last_share_of_each_level():
  from sgpo_jax.rl import warm_start
  c = default_config.get_config()
  queries = [arithmetic.make_query(ops) for ops in
             ([1, 2], [10, 3], [4, 5], [11, 12], [100, 1], [13, 14], [6, 7], [15, 16])]
  # levels: 1 1 2 1 ... -> d1: [1+2, 4+5, 6+7]; d2: [10+3, 11+12, 13+14, 15+16]; d3: [100+1]
  assert warm_start.sft_queries(queries, c.warm_start) == queries  # () = the whole pool
  c.warm_start.level_fractions = (1.0, 0.5, 0.0, 0.0)
  kept = warm_start.sft_queries(queries, c.warm_start)
  assert [q.id for q in kept] == ['1+2', '4+5', '13+14', '6+7', '15+16']
  c.warm_start.level_fractions = (0.34, 0.0, 1.0, 0.0)  # round(0.34 * 3) = 1: the last d1
  assert [q.id for q in warm_start.sft_queries(queries, c.warm_start)] == ['100+1', '6+7']
  c.warm_start.level_fractions = (0.0, 0.0, 0.0, 1.0)
  with pytest.raises(ValueError, match='leaves no pool query'):
    warm_start.sft_queries(queries, c.warm_start)


@pytest.mark.parametrize('fractions, match', [
    ((1.0, 1.0, 1.0), 'must be 4 fractions'),
    ((1.0, 1.0, 1.0, 1.5), 'must be 4 fractions in'),
    ((0.0, 0.0, 0.0, 0.0), 'not all 0'),
])
def test_level_fractions_are_checked(fractions, match):
  c = default_config.get_config()
  c.warm_start.level_fractions = fractions
  with pytest.raises(ValueError, match=match):
    config_check.check_config(c, num_devices=1)


def test_level_fractions_key_their_own_cache():
  from sgpo_jax.rl import warm_start
  c = default_config.get_config()
  whole = warm_start.cache_key(c)
  del c.warm_start['level_fractions']  # caches made before the field existed keep their key
  assert warm_start.cache_key(c) == whole
  c = default_config.get_config()
  c.warm_start.level_fractions = (1.0, 1.0, 1.0, 0.1)
  assert warm_start.cache_key(c) != whole


def test_rl_pool_prefix_and_errors():
  c = default_config.get_config()
  queries = arithmetic.generate_queries(200, seed=1)
  c.data.rl_pool_size = 0
  assert data_lib.rl_pool(queries, c.data) == queries
  c.data.rl_pool_size = 50
  assert data_lib.rl_pool(queries, c.data) == queries[:50]
  c.data.rl_difficulty_weights = (1, 0, 0, 0)
  with pytest.raises(ValueError, match='level 1 needs 50 queries .* the pool has'):
    data_lib.rl_pool(queries, c.data)
  c.data.rl_pool_size = 500
  with pytest.raises(ValueError, match='rl_pool_size=500 > the 200 queries'):
    data_lib.rl_pool(queries, c.data)


@pytest.mark.parametrize('regime', regimes.REGIMES)
def test_regime_budget_lets_grpo_see_the_pool(regime):
  """paper_like: GRPO sees every prompt >= 2 times within the budget even if every rollout
  ran to max_new_tokens; real: less than one epoch; the others: at least one epoch's worth."""
  c = default_file.get_config(f'regime={regime},method=grpo')
  step = flops_lib.rl_step_flops_bound(model_lib.ModelConfig.from_config(c.model),
                                       c.train.rows_per_batch, c.sampling.max_prompt_len,
                                       c.sampling.max_new_tokens, c.train.mu)
  epochs = c.train.flops_budget / step * (c.train.rows_per_batch // c.grpo.group_size) \
      / c.data.rl_pool_size
  if regime == 'real':
    # A real model's RLVR sees a large pool less than once (each prompt fresh); its eval,
    # a 135M model's greedy decode, is 512 problems: SE <= 2.21 points.
    assert 0.1 < epochs < 1.0, epochs
    assert evaluate_lib.accuracy_se(0.5, c.data.num_eval) <= 0.0221
    return
  assert epochs >= (2.0 if regime == 'paper_like' else 1.0), epochs
  # A comparison eval's standard error is under one point at any accuracy.
  assert evaluate_lib.accuracy_se(0.5, c.data.num_eval) <= 0.01


def test_real_regime_checkpoints_within_a_run():
  """A real-model run outlasts a sitting's tail: it must save at least three checkpoints
  within its budget (steps counted at the per-step FLOPs bound, so a lower bound)."""
  c = default_file.get_config('regime=real,method=grpo')
  step = flops_lib.rl_step_flops_bound(model_lib.ModelConfig.from_config(c.model),
                                       c.train.rows_per_batch, c.sampling.max_prompt_len,
                                       c.sampling.max_new_tokens, c.train.mu)
  assert c.checkpoint.every_steps * 3 <= c.train.flops_budget / step


def test_warm_start_schedule_keys_its_own_cache():
  from sgpo_jax.rl import warm_start
  c = default_config.get_config()
  constant = warm_start.cache_key(c)
  del c.warm_start['schedule']  # caches made before the field existed keep their key
  assert warm_start.cache_key(c) == constant
  c = default_config.get_config()
  c.warm_start.schedule = 'cosine'
  assert warm_start.cache_key(c) != constant


def test_pool_does_not_move_when_the_eval_set_grows():
  train_512, eval_512 = arithmetic.train_eval_queries(3000, 512, seed=0)
  train_2048, eval_2048 = arithmetic.train_eval_queries(3000, 2048, seed=0)
  assert train_2048 == train_512  # so the warm start SFT on it is the same
  assert eval_2048[:512] == eval_512
  prompts = [q.prompt for q in eval_2048]
  assert len(set(prompts)) == 2048
  assert not set(prompts) & {q.prompt for q in train_2048}


def test_cache_key_marks_pools_drawn_around_a_large_eval_set():
  from sgpo_jax.rl import warm_start
  c = default_config.get_config()
  big = warm_start.cache_key(c)
  c.data.num_eval = 512
  assert warm_start.cache_key(c) != big  # 512: the key every earlier version computed
