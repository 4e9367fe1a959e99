"""Allocators: which prompts, at which group size, fill each RL batch, and how.

Baselines are other allocators, not other trainers: the RL loop in `train.py` asks the
allocator selected by `config.method` for each batch and never names a method.

Interface (`base.py`):
- `Allocator.from_config(config, num_queries, profile=None)` builds it; its typed settings
  (`Settings`, a frozen `AllocatorSettings` dataclass for section `config.<name>`) own the
  section's defaults and range checks (`settings.py`).
- `Allocator.fill_batch(rollout_fn) -> FilledBatch | None`: the allocator plans prompts
  and group sizes, calls `rollout_fn(layout, round_index=None, category='rollout')` as
  many times as it needs (DAPO: one call per generation round; a GRESO-style allocator
  may call it for revisits, a Bayesian one for probes), and returns one batch (layout,
  rollout, extra metric fields) or None when it is exhausted. Every row any call
  generates is charged to the FLOPs ledger by the trainer, trained on or not.
- `needs_profile = True`: the trainer profiles the pool first (stopping a query's sampling
  early when `profile_settled(config)` says so and profile.early_stop is on), turns the
  counts into a `ProfileAllocation` (sGPO's: `sgpo.allocation.Allocation`) with
  `allocate(config, profile)` (checkpointed, written
  to profile.jsonl) and passes it to `from_config` as `profile`.
- `state_dict()` / `load_state_dict()`: identity + the fields of the allocator's `state`
  dataclass, JSON round-trip, so resume is exact.
- Plan-per-batch allocators subclass `PlanAllocator` and write only `next_plan()` (and
  `observe()` if they learn from rewards). `EpochCursor` is the shuffled-epoch walk.

Shared helpers (each allocator depends on `base.py` and these only, never on another
allocator's module): `rows.py` (the row layout), `settings.py` (the settings base),
`pool_walk.py` (the fixed-G baselines' shuffled pool walk), `dynamic_sampling.py` (the
round loop that drops all-equal groups and refills the batch), `beta.py` (the Beta
posterior math of the allocators that keep one per prompt).

The registry (`registered()`, `registered_settings()`) is what the config reads: the default
config has one section per registered allocator, built from its settings' defaults, and
the config check runs each section through its settings' checks.

Adding an allocator `foo` (worked example: docs/architecture.md):
1. `sgpo_jax/allocators/foo.py`: a settings dataclass (`FooSettings(AllocatorSettings)`,
   section 'foo', defaults as field defaults, range checks in `check`), a state dataclass,
   and a class decorated `@register_allocator('foo')` with `Settings = FooSettings`,
   implementing `from_config` and `fill_batch` (or `next_plan` on a `PlanAllocator`).
2. One import line below (the registry line).
3. Tests (plans, resume via `state_dict`).
"""

from sgpo_jax.allocators.base import (
                                      Allocator,
                                      BatchPlan,
                                      EpochCursor,
                                      FilledBatch,
                                      PlanAllocator,
                                      ProfileAllocation,
                                      Rollout,
                                      RolloutFn,
                                      allocator_class,
                                      make_allocator,
                                      register_allocator,
                                      registered,
                                      registered_settings,
)
from sgpo_jax.allocators.dapo import DAPOAllocator, DAPOSettings
from sgpo_jax.allocators.dynamic_sampling import (
                                      RoundBatch,
                                      RoundBatchBuilder,
                                      keep_informative_groups,
)
from sgpo_jax.allocators.greso.allocator import GRESOAllocator

# The registry: one line per allocator module.
from sgpo_jax.allocators.grpo import GRPOAllocator, GRPOSettings  # noqa: I001
from sgpo_jax.allocators.knapsack.allocator import KnapsackAllocator
from sgpo_jax.allocators.settings import AllocatorSettings
from sgpo_jax.allocators.sgpo.allocator import SGPOAllocator
from sgpo_jax.allocators.sgpo_bayes.allocator import BayesAllocator, BayesSettings
from sgpo_jax.allocators.sgpo_select.allocator import SelectAllocator, SelectSettings

__all__ = [
    'Allocator', 'AllocatorSettings', 'BayesAllocator', 'BayesSettings', 'BatchPlan',
    'DAPOAllocator', 'DAPOSettings', 'EpochCursor', 'FilledBatch', 'GRESOAllocator',
    'GRPOAllocator', 'GRPOSettings', 'KnapsackAllocator', 'PlanAllocator',
    'ProfileAllocation', 'Rollout', 'RolloutFn', 'RoundBatch', 'RoundBatchBuilder',
    'SGPOAllocator', 'SelectAllocator', 'SelectSettings', 'allocator_class', 'keep_informative_groups', 'make_allocator',
    'register_allocator', 'registered', 'registered_settings',
]
