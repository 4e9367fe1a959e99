"""Verifiable tasks: the reward function and SFT target chosen by `config.data`.

Owns the common task interface:
- `Query` (`tasks/query.py`): one prompt (a string or chat messages) and its reference answer.
- `get_reward_fn(config.data)` -> `fn(completions: list[str], queries: list[Query])`
  returning float32[N] rewards, built from the spelling in `data.reward` by
  `tasks/rewards.py`: a registered built-in, a user function `module.path:function`, or a
  weighted sum of them. Built-ins: 'arithmetic' is the embedded task's exact match
  (`tasks/arithmetic.py`); 'math' is a `MathVerifier` (`tasks/math_reward.py`: answer
  extraction + math-verify in killable worker processes; call `.close()` when done).
- `target_text(query, config.data)` -> the completion SFT trains on (the arithmetic task).
Completions are decoded text up to EOS, with no padding.
"""

from __future__ import annotations

from typing import Any

from sgpo_jax.tasks import arithmetic
from sgpo_jax.tasks.query import Query
from sgpo_jax.tasks.rewards import (
  RewardError,
  RewardFn,
  check_reward_spec,
  get_reward_fn,
  register_reward,
  registered_rewards,
  startup_check,
)

__all__ = ['RewardError', 'RewardFn', 'check_reward_spec', 'get_reward_fn', 'has_target_text',
           'register_reward', 'registered_rewards', 'startup_check', 'target_text']


def has_target_text(data_config: Any) -> bool:
  """Whether warm-start SFT has targets: the embedded arithmetic task's data or its reward
  (any reward trains on the arithmetic task's own answers)."""
  return data_config.source == 'arithmetic' or data_config.reward == 'arithmetic'


def target_text(query: Query, data_config: Any) -> str:
  """The supervised target completion (before EOS) for warm-start SFT."""
  if not has_target_text(data_config):
    raise ValueError(f'target_text needs data.source="arithmetic" or data.reward="arithmetic" '
                     f'(got {data_config.source!r}, {data_config.reward!r}): only the embedded '
                     'task has a canonical target completion')
  return arithmetic.target_text(query)
