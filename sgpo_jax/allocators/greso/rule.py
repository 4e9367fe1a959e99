"""GRESO's pre-rollout skip rule (Zheng et al. 2025, arXiv 2506.02177), as pure functions.

GRESO (GRPO with Efficient Selective Rollout) runs dynamic sampling (DAPO: drop groups
whose rewards are all equal, fill the batch from further rounds) and, before each round,
skips prompts that are likely to give such a zero-variance group again:

- A prompt's reward history is reduced to two streaks: how many of its most recent
  rollouts in a row were all-correct ("easy" zero variance), and how many were all-wrong
  ("hard"). A rollout with any spread in rewards resets both to 0.
- A prompt whose last rollout was easy with streak z is skipped with probability
  1 - max(p_easy ** z, p_floor); hard with p_hard; a prompt never seen, or last seen with
  reward spread, is never skipped (probability 0).
- After each training step the exploration probabilities move by +-delta toward a target
  zero-variance share of the prompts rolled out in that step: if the easy share was >=
  target_easy, p_easy -= delta (skip more), else p_easy += delta; clipped to [p_min, p_max].
  The targets split one total: easy = total / 3, hard = 2 * total / 3 (more exploration of
  hard prompts, which turn solvable as the policy improves).

Defaults are the authors' (their public training scripts and trainer): p_easy = p_hard = 0.5
at the start, total target 0.25, delta 0.01, p in [0.05, 0.95], floor 0.01, adaptation only
after the first epoch. The allocator that applies the rule over the one RL loop is
`allocators/greso/allocator.py`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from sgpo_jax.allocators.settings import AllocatorSettings

EASY, HARD, INFORMATIVE = 1, -1, 0


@dataclasses.dataclass(frozen=True)
class GRESOSettings(AllocatorSettings):
  """config.greso: its defaults (the authors') and range checks."""
  section: ClassVar[str] = 'greso'
  group_size: int = 8
  max_rounds: int = 4  # generation rounds per batch before padding the rest (as DAPO)
  p_easy_init: float = 0.5  # keep probability base for all-correct streaks
  p_hard_init: float = 0.5  # ... for all-wrong streaks
  target_zero_variance: float = 0.25  # target share of zero-variance prompts (1/3 easy)
  delta: float = 0.01  # controller step per training step
  p_min: float = 0.05
  p_max: float = 0.95
  p_floor: float = 0.01  # keep probability never below this, however long the streak

  def check(self) -> None:
    if self.group_size < 2:
      raise ValueError(f'greso.group_size={self.group_size} must be >= 2 (a group of one '
                       'has no reward spread)')
    if self.max_rounds < 1:
      raise ValueError(f'greso.max_rounds={self.max_rounds} must be >= 1')
    if not 0.0 < self.p_min <= self.p_max <= 1.0:
      raise ValueError(f'greso.p_min={self.p_min}, greso.p_max={self.p_max}: need '
                       '0 < p_min <= p_max <= 1')
    for name in ('p_easy_init', 'p_hard_init'):
      v = getattr(self, name)
      if not self.p_min <= v <= self.p_max:
        raise ValueError(f'greso.{name}={v} must lie in [p_min, p_max] = '
                         f'[{self.p_min}, {self.p_max}]')
    if not 0.0 <= self.target_zero_variance <= 1.0:
      raise ValueError(f'greso.target_zero_variance={self.target_zero_variance} must be in '
                       '[0, 1]')
    if not 0.0 <= self.delta <= 1.0:
      raise ValueError(f'greso.delta={self.delta} must be in [0, 1]')
    if not 0.0 < self.p_floor < 1.0:  # 0 lets a long streak skip every prompt forever
      raise ValueError(f'greso.p_floor={self.p_floor} must be in (0, 1): a prompt with a long '
                       'streak must keep some chance of a rollout, or a pool of them hangs')

  @property
  def target_easy(self) -> float:
    return self.target_zero_variance / 3.0

  @property
  def target_hard(self) -> float:
    return self.target_zero_variance * 2.0 / 3.0



def group_kind(rewards_G: np.ndarray) -> int:
  """EASY if every reward of the group is equal and > 0.5 (all correct), HARD if all equal
  and <= 0.5 (all wrong), INFORMATIVE otherwise (exact comparison, as DAPO's filter)."""
  rewards_G = np.asarray(rewards_G, dtype=np.float64).reshape(-1)
  if rewards_G.size == 0:
    raise ValueError('a group needs at least one reward')
  if rewards_G.max() > rewards_G.min():
    return INFORMATIVE
  return EASY if rewards_G[0] > 0.5 else HARD


def update_streaks(easy_streak: int, hard_streak: int, kind: int) -> tuple[int, int]:
  """The two streaks after one more rollout of the prompt with outcome `kind`."""
  if kind == EASY:
    return easy_streak + 1, 0
  if kind == HARD:
    return 0, hard_streak + 1
  return 0, 0


def skip_probability(easy_streak: int, hard_streak: int, p_easy: float, p_hard: float,
                     p_floor: float = 0.01) -> float:
  """1 - max(p ** streak, p_floor) for the streak that is running; 0 when none is."""
  if easy_streak and hard_streak:
    raise ValueError(f'easy_streak={easy_streak} and hard_streak={hard_streak} cannot both '
                     'run: a rollout is either all-correct or all-wrong')
  if easy_streak:
    return 1.0 - max(p_easy ** easy_streak, p_floor)
  if hard_streak:
    return 1.0 - max(p_hard ** hard_streak, p_floor)
  return 0.0


def adapt_probability(p: float, observed_share: float, target_share: float, delta: float,
                      p_min: float, p_max: float) -> float:
  """One step of GRESO's controller: too many zero-variance prompts -> explore less."""
  if observed_share >= target_share:
    return max(p - delta, p_min)
  return min(p + delta, p_max)
