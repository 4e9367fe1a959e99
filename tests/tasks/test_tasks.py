"""The embedded arithmetic task and the common reward interface."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgpo_jax import tasks
from sgpo_jax.configs.default import get_config
from sgpo_jax.data.loading import Query, load_queries
from sgpo_jax.data.tokenizer import CharTokenizer
from sgpo_jax.tasks import arithmetic


def _data_config(**overrides):
  config = get_config().data
  config.update(overrides)
  return config


def test_make_query_and_target():
  query = arithmetic.make_query([123, 45])
  assert query == Query(id='123+45', prompt='123+45=', answer='168', difficulty=3)
  assert arithmetic.target_text(query) == '861'
  assert arithmetic.target_text(arithmetic.make_query([999, 1])) == '0001'


def test_generate_is_deterministic_distinct_and_in_range():
  a = arithmetic.generate_queries(500, seed=3, min_digits=2, max_digits=3)
  b = arithmetic.generate_queries(500, seed=3, min_digits=2, max_digits=3)
  assert a == b
  assert a != arithmetic.generate_queries(500, seed=4, min_digits=2, max_digits=3)
  assert len({q.prompt for q in a}) == 500
  for q in a:
    left, right = q.prompt[:-1].split('+')
    assert 2 <= len(left) <= 3 and 2 <= len(right) <= 3 and not left.startswith('0')
    assert int(q.answer) == int(left) + int(right)
    assert q.difficulty == max(len(left), len(right))
  assert {q.difficulty for q in a} == {2, 3}


def test_generate_three_operands():
  queries = arithmetic.generate_queries(50, seed=0, min_digits=1, max_digits=2, num_operands=3)
  for q in queries:
    assert q.prompt.count('+') == 2 and int(q.answer) == sum(map(int, q.prompt[:-1].split('+')))


def test_exclude_and_exhaustion():
  everything = arithmetic.generate_queries(100, seed=0, min_digits=1, max_digits=1)
  assert len(everything) == 100  # the whole 1-digit space
  some = {q.prompt for q in everything[:30]}
  rest = arithmetic.generate_queries(70, seed=1, min_digits=1, max_digits=1, exclude=some)
  assert not some & {q.prompt for q in rest}
  with pytest.raises(ValueError, match='num=71 .* only 70'):
    arithmetic.generate_queries(71, seed=1, min_digits=1, max_digits=1, exclude=some)
  with pytest.raises(ValueError, match='min_digits=3, max_digits=2'):
    arithmetic.generate_queries(1, seed=0, min_digits=3, max_digits=2)


def test_load_queries_train_eval_disjoint_and_sized():
  config = _data_config(num_train=2000, num_eval=300)
  train = load_queries(config, 'train', seed=7)
  evaluation = load_queries(config, 'eval', seed=7)
  assert len(train) == 2000 and len(evaluation) == 300
  assert load_queries(config, 'test', seed=7) == evaluation
  assert not {q.prompt for q in train} & {q.prompt for q in evaluation}
  # The eval set does not move when the train pool grows.
  assert load_queries(_data_config(num_train=100, num_eval=300), 'eval', seed=7) == evaluation
  assert load_queries(config, 'eval', seed=8) != evaluation


def test_default_prompts_fit_max_prompt_len():
  config = get_config()
  train = load_queries(config.data, 'train', seed=0, tokenizer=CharTokenizer(),
                       max_prompt_len=config.sampling.max_prompt_len)
  assert max(len(CharTokenizer().encode_prompt(q.prompt)) for q in train) == 11
  assert max(len(arithmetic.target_text(q)) for q in train) + 1 <= config.sampling.max_new_tokens
  with pytest.raises(ValueError, match='max_prompt_len=5'):
    load_queries(config.data, 'train', seed=0, tokenizer=CharTokenizer(), max_prompt_len=5)


def test_reward_exact_reversed_match_only():
  query = arithmetic.make_query([57, 68])  # 125 -> '521'
  assert arithmetic.reward('521', query) == 1.0
  for wrong in ('125', '52', '5210', '', '521=', ' 521'):
    assert arithmetic.reward(wrong, query) == 0.0
  assert arithmetic.reward('520', query, format_reward=0.1) == pytest.approx(0.1)
  assert arithmetic.reward('52+', query, format_reward=0.1) == 0.0
  assert arithmetic.reward('521', query, format_reward=0.1) == 1.0


@settings(max_examples=50, deadline=None)
@given(a=st.integers(0, 9999), b=st.integers(0, 9999))
def test_reward_accepts_exactly_the_reversed_sum(a, b):
  query = arithmetic.make_query([a, b])
  assert arithmetic.reward(str(a + b)[::-1], query) == 1.0
  assert arithmetic.reward(str(a + b + 1)[::-1], query) == 0.0


def test_score_batched_and_length_check():
  queries = arithmetic.generate_queries(4, seed=0)
  completions = [arithmetic.target_text(q) for q in queries[:2]] + ['x', '']
  rewards_N = arithmetic.score(completions, queries)
  assert rewards_N.dtype == np.float32
  np.testing.assert_array_equal(rewards_N, [1, 1, 0, 0])
  with pytest.raises(ValueError, match='3 completions but 4 queries'):
    arithmetic.score(completions[:3], queries)


def test_get_reward_fn_arithmetic_with_format_reward():
  fn = tasks.get_reward_fn(_data_config(format_reward=0.25))
  query = arithmetic.make_query([1, 2])
  np.testing.assert_allclose(fn(['3', '4', 'x'], [query] * 3), [1.0, 0.25, 0.0])


def test_get_reward_fn_math():
  fn = tasks.get_reward_fn(_data_config(reward='math'))
  try:
    query = Query(id='q', prompt='1/2 + 1/4?', answer=r'\frac{3}{4}')
    np.testing.assert_array_equal(fn([r'\boxed{0.75}', 'The answer is 3/4.', r'\boxed{4}'],
                                     [query] * 3), [1, 1, 0])
  finally:
    fn.close()


def test_get_reward_fn_unknown_and_target_text():
  with pytest.raises(ValueError, match="data.reward='code'"):
    tasks.get_reward_fn(_data_config(reward='code'))
  query = arithmetic.make_query([5, 7])
  assert tasks.target_text(query, _data_config()) == '21'
  with pytest.raises(ValueError, match='only the embedded task'):
    tasks.target_text(query, _data_config(reward='math', source='jsonl'))
  # Any reward on the embedded task's data keeps its targets (a user reward warm-starts too).
  assert tasks.target_text(query, _data_config(reward='my_rewards:fn')) == '21'
