"""The fixed-G baselines' walk over the training pool: a fresh shuffle per epoch, endless.

GRPO, DAPO, GRESO and Knapsack draw their prompts from one seeded stream, so at the same
seed they see the pool in the same order (what a paired comparison needs). The walk's
position is an `EpochCursor` in the allocator's state.
"""

from __future__ import annotations

import numpy as np

from sgpo_jax.allocators.base import EpochCursor

POOL_STREAM = 0x6290  # seed-sequence tag of the pool walk


def take_pool_prompts(walk: EpochCursor, count: int, num_queries: int, seed: int
                      ) -> np.ndarray:
  """The next `count` query indices of the pool walk of `seed` (advances `walk`)."""
  return walk.take(count, num_queries, (seed, POOL_STREAM))
