"""Verifiable tasks: the reward function and SFT target chosen by `config.data`.

Owns the common task interface:
- `get_reward_fn(config.data)` -> `fn(completions: list[str], queries: list[Query])`
  returning float32[N] rewards. `data.reward='arithmetic'` is the embedded task's exact match
  (`tasks/arithmetic.py`); `data.reward='math'` is a `MathVerifier` (`tasks/math_reward.py`:
  answer extraction + math-verify in killable worker processes; call `.close()` when done).
- `target_text(query, config.data)` -> the completion SFT trains on (arithmetic only).
Completions are decoded text up to EOS, with no padding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from sgpo_jax.data.query import Query
from sgpo_jax.tasks import arithmetic

RewardFn = Callable[[list[str], list[Query]], np.ndarray]
REWARDS = ('arithmetic', 'math')


def get_reward_fn(data_config: Any) -> RewardFn:
  """The batched reward named by `data.reward` ('arithmetic' | 'math')."""
  kind = data_config.reward
  if kind == 'arithmetic':
    return functools.partial(arithmetic.score, format_reward=float(data_config.format_reward))
  if kind == 'math':
    from sgpo_jax.tasks import math_reward

    return math_reward.MathVerifier(num_workers=int(data_config.math_workers))
  raise ValueError(f'data.reward={kind!r} is not one of {REWARDS}')


def target_text(query: Query, data_config: Any) -> str:
  """The supervised target completion (before EOS) for warm-start SFT."""
  if data_config.reward != 'arithmetic':
    raise ValueError(f'target_text needs data.reward="arithmetic" (got {data_config.reward!r}): '
                     'only the embedded task has a canonical target completion')
  return arithmetic.target_text(query)
