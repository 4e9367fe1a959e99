"""data.reward: the built-in registry, user callables `module:function`, weighted sums, the
contract checks (startup and every call) and the config check that imports them."""

from __future__ import annotations

import sys
import textwrap

import ml_collections
import numpy as np
import pytest

from sgpo_jax import tasks
from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config
from sgpo_jax.errors import ConfigError
from sgpo_jax.tasks import arithmetic, rewards
from sgpo_jax.tasks.query import Query

USER_MODULE = textwrap.dedent('''
    import math

    def length(completions, **kwargs):
      return [float(len(c)) for c in completions]

    def match(completions, answer):  # no **kwargs: gets only what it names
      return [1.0 if c == a else 0.0 for c, a in zip(completions, answer)]

    def by_column(completions, source, **kwargs):
      return [1.0 if s == 'b' else 0.0 for s in source]

    def seen(completions, prompts, id, difficulty, **kwargs):
      seen.calls.append((list(prompts), list(id), list(difficulty), kwargs))
      return [0.0] * len(completions)
    seen.calls = []

    def short(completions, **kwargs):
      return [0.0] * (len(completions) - 1)

    def nan_on_x(completions, **kwargs):
      return [math.nan if c == 'x' else 1.0 for c in completions]

    def huge_on_x(completions, **kwargs):
      return [1e39 if c == 'x' else 1.0 for c in completions]  # finite in float64 only

    def raise_on_x(completions, **kwargs):
      if 'x' in completions:
        raise KeyError('no x here')
      return [1.0] * len(completions)

    def words(completions, **kwargs):
      return ['one'] * len(completions)

    def wants_solution(completions, solution):
      return [0.0] * len(completions)

    NOT_CALLABLE = 3
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
  """`user_rewards.py` in a fresh directory that is the working directory (not on sys.path)."""
  (tmp_path / 'user_rewards.py').write_text(USER_MODULE)
  (tmp_path / 'broken_rewards.py').write_text('1 / 0\n')
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, 'path', [p for p in sys.path if p not in ('', str(tmp_path))])
  for name in ('user_rewards', 'broken_rewards'):
    monkeypatch.delitem(sys.modules, name, raising=False)
  yield 'user_rewards'
  for name in ('user_rewards', 'broken_rewards'):
    sys.modules.pop(name, None)


def data_config(reward: str, **fields) -> ml_collections.ConfigDict:
  c = default_config.get_config().data
  c.reward = reward
  for k, v in fields.items():
    c[k] = v
  return c


def queries(n: int = 3) -> list[Query]:
  return [Query(id=f'q{i}', prompt=f'p{i}', answer=str(i), difficulty=i,
                metadata={'source': 'ab'[i % 2]}) for i in range(n)]


def test_builtins_are_registered_and_unchanged():
  assert rewards.registered_rewards() == ('arithmetic', 'math')
  fn = tasks.get_reward_fn(data_config('arithmetic', format_reward=0.25))
  qs = [arithmetic.make_query([1, 2])] * 3
  out = fn(['3', '4', 'x'], qs)
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, arithmetic.score(['3', '4', 'x'], qs, format_reward=0.25))
  assert not hasattr(fn, 'startup_check')  # a lone built-in is the built-in itself


def test_register_reward_adds_a_name_and_refuses_a_second(monkeypatch):
  monkeypatch.setattr(rewards, '_BUILTINS', dict(rewards._BUILTINS))

  @rewards.register_reward('always_one')
  def _always_one(data_config):
    return lambda completions, queries: np.ones(len(completions), np.float32)

  fn = tasks.get_reward_fn(data_config('always_one'))
  np.testing.assert_array_equal(fn(['a', 'b'], queries(2)), [1, 1])
  with pytest.raises(ValueError, match='registered twice'):
    rewards.register_reward('always_one')(_always_one)


@pytest.mark.parametrize('spec, message', [
    ('code', "data.reward='code' is neither a built-in"),
    ('', 'is empty'),
    ('arithmetic,', 'has an empty term'),
    ('arithmetic=heavy', "weight 'heavy' is not a finite number"),
    ('arithmetic=inf', "weight 'inf' is not a finite number"),
    ('a:b:c', "data.reward='a:b:c' is neither"),
])
def test_bad_spellings_are_one_line_errors(spec, message):
  with pytest.raises(ValueError, match=message) as info:
    rewards.parse_reward_spec(spec)
  assert '\n' not in str(info.value)


def test_parse_weighted_list():
  terms = rewards.parse_reward_spec('pkg.mod:fmt=0.2, pkg.mod:correct=1, arithmetic')
  term = rewards.RewardTerm
  assert terms == [term('pkg.mod:fmt', 0.2), term('pkg.mod:correct', 1.0),
                   term('arithmetic', None)]


def test_user_function_from_the_working_directory(user_module):
  fn = tasks.get_reward_fn(data_config(f'{user_module}:length'))
  out = fn(['ab', '', 'abcd'], queries())
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, [2, 0, 4])


def test_user_function_receives_prompts_ids_and_columns(user_module):
  fn = tasks.get_reward_fn(data_config(f'{user_module}:seen'))
  fn(['a', 'b', 'c'], queries())
  prompts, ids, difficulty, kwargs = sys.modules[user_module].seen.calls[-1]
  assert prompts == ['p0', 'p1', 'p2'] and ids == ['q0', 'q1', 'q2'] and difficulty == [0, 1, 2]
  assert kwargs == {'answer': ['0', '1', '2'], 'source': ['a', 'b', 'a']}
  by_column = tasks.get_reward_fn(data_config(f'{user_module}:by_column'))
  np.testing.assert_array_equal(by_column(['', '', ''], queries()), [0, 1, 0])
  match = tasks.get_reward_fn(data_config(f'{user_module}:match'))  # no **kwargs
  np.testing.assert_array_equal(match(['0', '5', '2'], queries()), [1, 0, 1])


def test_weighted_sum_of_user_and_builtin(user_module):
  fn = tasks.get_reward_fn(data_config(f'{user_module}:length=0.5,{user_module}:match=2'))
  np.testing.assert_allclose(fn(['0', '55', '2'], queries()), [2.5, 1.0, 2.5])
  qs = [arithmetic.make_query([1, 2])] * 2
  mixed = tasks.get_reward_fn(data_config(f'arithmetic=1,{user_module}:length=0.25'))
  np.testing.assert_allclose(mixed(['3', '4444'], qs), [1.25, 1.0])


@pytest.mark.parametrize('spec, message', [
    ('no_such_module:f', "cannot import 'no_such_module'"),
    ('broken_rewards:f', "importing 'broken_rewards' raised ZeroDivisionError"),
    ('user_rewards:nope', "has no 'nope' .*length"),
    ('user_rewards:NOT_CALLABLE', 'is a int, not callable'),
])
def test_config_check_refuses_a_reward_that_does_not_import(user_module, spec, message):
  config = default_config.get_config()
  config.data.reward = spec
  with pytest.raises(ValueError, match=message) as info:
    config_check.check_ranges(config)
  assert '\n' not in str(info.value)


def test_warm_start_needs_the_arithmetic_task_or_a_checkpoint(user_module):
  config = default_config.get_config()
  config.data.reward = f'{user_module}:length'
  config_check.check_ranges(config)  # arithmetic data: the warm start has its targets
  assert tasks.target_text(arithmetic.make_query([5, 7]), config.data) == '21'  # reversed
  config.data.source = 'jsonl'
  with pytest.raises(ValueError, match=r"warm_start.steps=1500 trains on the arithmetic task's "
                     r"answers, but data.source='jsonl' .* set model.hf_path"):
    config_check.check_ranges(config)
  config.warm_start.steps = 0
  config_check.check_ranges(config)


@pytest.mark.parametrize('name, message', [
    ('short', r'returned shape \(5,\) for 6 completions'),
    ('nan_on_x', r"returned nan for row 1 \(query id 'q1'\)"),
    ('huge_on_x', r"returned 1e\+39 for row 1 \(query id 'q1'\) \(1 non-finite of 6 in float32\)"),
    ('raise_on_x', r"raised KeyError: 'no x here' on row 1 \(query id 'q1'\), completion 'x'"),
    ('words', 'is not numbers'),
    ('wants_solution', "takes 'solution' but the rows have no such column"),
])
def test_contract_breaks_name_the_row(user_module, name, message):
  fn = tasks.get_reward_fn(data_config(f'{user_module}:{name}'))
  with pytest.raises(tasks.RewardError, match=message) as info:
    fn(['a', 'x', 'b', 'c', 'd', 'e'], queries(6))
  assert '\n' not in str(info.value)


def test_startup_check_probes_gold_and_empty_completions(user_module):
  good = tasks.get_reward_fn(data_config(f'{user_module}:length'))
  tasks.startup_check(good, queries())  # passes
  bad = tasks.get_reward_fn(data_config(f'arithmetic=1,{user_module}:short=1'))
  with pytest.raises(ConfigError, match=r'startup check of data.reward.*returned shape \(5,\)'):
    tasks.startup_check(bad, queries())
  tasks.startup_check(tasks.get_reward_fn(data_config('arithmetic')), queries())  # no check


CLI_REWARDS = textwrap.dedent('''
    import os

    def quarter(completions, prompts, answer, **kwargs):
      with open(os.path.join(os.getcwd(), 'calls.txt'), 'a') as f:
        f.write(f'{len(completions)}\\n')
      return [0.25] * len(completions)

    def short(completions, **kwargs):
      return [0.0] * (len(completions) - 1)
''')
TINY_RUN = ('--config.method=grpo', '--config.grpo.group_size=4',
            '--config.train.rows_per_batch=8', '--config.train.num_steps=2',
            '--config.eval.every_steps=2', '--config.checkpoint.every_steps=2',
            '--config.data.num_train=16', '--config.data.num_eval=8',
            '--config.warm_start.steps=0', '--config.model.n_layers=2',
            '--config.model.d_model=32', '--config.model.d_ff=64', '--config.model.head_dim=8')


@pytest.mark.slow
def test_cli_trains_with_a_reward_from_the_working_directory(tmp_path):
  """`python -m sgpo_jax.main` run from a directory holding `cli_rewards.py`: the run's
  config.json records the path, every batch's reward is the function's; a broken reward
  fails at startup in one line, and resuming with another reward is refused."""
  import json
  import os
  import subprocess

  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  (tmp_path / 'cli_rewards.py').write_text(CLI_REWARDS)
  env = {**os.environ, 'PYTHONPATH': repo, 'JAX_PLATFORMS': 'cpu'}

  def main(workdir, reward):
    return subprocess.run(
        [sys.executable, '-m', 'sgpo_jax.main', '--config',
         'default:runlocal=1', '--workdir', str(workdir),
         f'--config.data.reward={reward}', *TINY_RUN],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

  workdir = tmp_path / 'run'
  proc = main(workdir, 'cli_rewards:quarter')
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(workdir / 'config.json') as f:
    assert json.load(f)['data']['reward'] == 'cli_rewards:quarter'
  with open(workdir / 'metrics.jsonl') as f:
    rows = [json.loads(line) for line in f if line.strip()]
  steps = [r for r in rows if 'reward_mean' in r]
  assert len(steps) == 2 and all(r['reward_mean'] == 0.25 for r in steps)
  assert all(r['eval_accuracy'] == 0.0 for r in rows if 'eval_accuracy' in r)  # 0.25 < 1
  calls = (tmp_path / 'calls.txt').read_text().split()
  assert calls[0] == '8'  # the startup probe: 4 gold answers + 4 empty completions
  assert len(calls) > 3  # then eval and rollouts

  changed = main(workdir, 'arithmetic')
  assert changed.returncode == 2
  assert 'data.reward: "cli_rewards:quarter" -> "arithmetic"' in changed.stderr

  broken = main(tmp_path / 'broken', 'cli_rewards:short')
  assert broken.returncode == 2
  error = broken.stderr.strip().splitlines()[-1]
  assert error.startswith('error: startup check of data.reward'), broken.stderr[-2000:]
  assert 'returned shape (7,) for 8 completions' in error
  assert not (tmp_path / 'broken' / 'config.json').exists()  # nothing written
