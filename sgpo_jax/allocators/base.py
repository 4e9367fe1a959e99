"""The allocator interface, its registry, and the parts every allocator shares.

An allocator decides which prompts, at which group size, fill each RL batch, and owns how
the batch is filled: the trainer hands it a `RolloutFn` (sample + score one fixed-shape
row layout under the current policy, FLOPs charged to the run's ledger) and gets back a
`FilledBatch`, or None when the allocator has nothing left (the run ends).

    @register_allocator('name')
    class MyAllocator(Allocator):
      State = MyState              # a dataclass: everything that changes while running
      @classmethod
      def from_config(cls, config, num_queries, profile=None): ...
      def fill_batch(self, rollout_fn): ...   # call rollout_fn as often as needed

`state_dict()` / `load_state_dict()` are shared: the allocator's identity (name, pool
size, seed) plus the fields of `self.state` (numpy arrays become lists and back), so a
run resumed from a checkpoint continues exactly.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np

from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.rows import RowLayout
from sgpo_jax.allocators.settings import AllocatorSettings


def stream_rng(*keys: int) -> np.random.Generator:
  """A numpy generator for one named random stream of one seed."""
  return np.random.default_rng(np.random.SeedSequence([int(k) for k in keys]))


# ----------------------------------------------------------------------------------------
# What flows between the trainer and an allocator


@dataclasses.dataclass
class Rollout:
  """One sampled and scored completion per row of a layout (padding rows empty)."""
  tokens_RxN: np.ndarray  # [R, N] int32, pad_id on padding rows
  mask_RxN: np.ndarray  # [R, N] int32
  logps_RxN: np.ndarray  # [R, N] float32 sampling log-probs
  rewards_R: np.ndarray  # [R] float32, 0 on padding rows
  row_query_index_R: np.ndarray  # [R] int64, -1 on padding rows
  pad_id: int = 0  # the token on padding rows (what a batch assembled from rounds fills in)


class RolloutFn(Protocol):
  """Samples and scores every valid row of `layout` with the current policy.

  `round_index=None` uses the step's own rollout key; an allocator that rolls out more
  than once per step passes a distinct `round_index` per call (key = fold_in(step key,
  round_index)). Every call is charged to the FLOPs ledger under `category` ('rollout' by
  default; a profiling pass an allocator runs itself passes 'profile'), so rows an
  allocator discards are paid for like the rows it trains on.
  """

  def __call__(self, layout: RowLayout, round_index: int | None = None,
               category: str = 'rollout') -> Rollout:
    ...


class ProfileAllocation(Protocol):
  """What a needs_profile allocator's `allocate(config, profile)` returns: the profiled pool
  (per query: index, correct samples, samples drawn, p_hat) and what the run records of it."""
  query_index: np.ndarray  # [Q'] int64 profiled queries
  n_correct: np.ndarray  # [Q'] correct samples of each
  n_samples: np.ndarray  # [Q'] samples drawn of each
  p_hat: np.ndarray  # [Q'] float64 estimated success rate

  def profile_records(self) -> list[dict]:
    """One profile.jsonl record per profiled query."""
    ...

  def summary(self) -> dict:
    """summary.json's `profile` section."""
    ...


@dataclasses.dataclass
class FilledBatch:
  """One training batch: its row layout, the rollout on it, and what to log about it."""
  phase: str  # logged as metrics.jsonl's `phase`
  layout: RowLayout
  rollout: Rollout
  info: dict[str, Any]  # extra metrics.jsonl fields, e.g. {'rounds': 1}


@dataclasses.dataclass
class BatchPlan:
  """The prompts of one RL batch (or, for DAPO, of one generation round)."""
  query_index: np.ndarray  # [P] int64 indices into the training pool
  group_size: np.ndarray  # [P] int32 G per prompt
  phase: str  # sGPO's 'G2', 'G4', 'G8', 'mix'; else the allocator's name
  is_replay: np.ndarray | None = None  # [P] bool: sGPO trivial replay prompts (None = none)

  def rows(self, rows_per_batch: int) -> RowLayout:
    """Fixed-shape row layout; group_id of prompt p's rows is p, padding rows masked."""
    return rows_lib.layout_rows(self.query_index, self.group_size, rows_per_batch)

  @property
  def num_prompts(self) -> int:
    return int(self.query_index.size)

  @property
  def num_rows(self) -> int:
    return int(np.sum(self.group_size))


# ----------------------------------------------------------------------------------------
# The interface


def _to_jsonable(value: Any) -> Any:
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, (list, tuple)):
    return [_to_jsonable(v) for v in value]
  if isinstance(value, np.generic):
    return value.item()
  if dataclasses.is_dataclass(value):
    return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
  return value


def _like(saved: Any, current: Any) -> Any:
  """`saved` (from JSON) converted back to the type of the field's current value."""
  if isinstance(current, np.ndarray):
    return np.asarray(saved, dtype=current.dtype)
  if dataclasses.is_dataclass(current):
    return dataclasses.replace(current, **{f.name: _like(saved[f.name], getattr(current, f.name))
                                           for f in dataclasses.fields(current)})
  if isinstance(current, bool):
    return bool(saved)
  if isinstance(current, int):
    return int(saved)
  if isinstance(current, float):
    return float(saved)
  if isinstance(current, list):
    return list(saved)
  return saved


class Allocator(abc.ABC):
  """Base of every allocator; see the module docstring for the contract."""
  name: ClassVar[str] = ''
  # Its settings dataclass: defaults and checks of config.<name> (`settings.py`).
  Settings: ClassVar[type[AllocatorSettings]]
  # True: the trainer profiles the pool under the initial policy first and passes the
  # resulting `ProfileAllocation` to `from_config` (and logs p_hat per batch).
  needs_profile: ClassVar[bool] = False
  # True: `from_config` also takes `strata`, one feature value per training query (its
  # `difficulty`, None where it has none), for priors shared across similar prompts.
  uses_strata: ClassVar[bool] = False

  num_queries: int
  seed: int
  state: Any  # a dataclass instance: all mutable progress

  @classmethod
  def allocate(cls, config: Any, profile: Any) -> ProfileAllocation:
    """needs_profile allocators: the allocation of a profile (what `profile` becomes)."""
    raise NotImplementedError(f'allocator {cls.name!r} does not use a profile')

  @classmethod
  def profile_settled(cls, config: Any) -> Callable[[int, int], bool] | None:
    """needs_profile allocators: `settled(n_correct, n_drawn)` for profile.early_stop, i.e.
    True once more samples of a query cannot change what the allocation does with it."""
    return None

  @classmethod
  @abc.abstractmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None) -> Allocator:
    """Builds the allocator from the run config (its typed settings validated here)."""

  @abc.abstractmethod
  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch | None:
    """Plans, rolls out (via rollout_fn) and assembles one batch; None ends the run."""

  def state_dict(self) -> dict:
    """JSON-serialisable: identity plus every field of `self.state`."""
    return {'kind': self.name, 'num_queries': self.num_queries, 'seed': self.seed,
            **_to_jsonable(self.state)}

  def load_state_dict(self, state: dict) -> None:
    if state.get('kind') != self.name:
      raise ValueError(f"allocator state is for {state.get('kind')!r}, not {self.name!r}; "
                       'resume with the same config.method')
    if state['num_queries'] != self.num_queries or state['seed'] != self.seed:
      raise ValueError(f"allocator state has num_queries={state['num_queries']}, "
                       f"seed={state['seed']} but this run has {self.num_queries}, "
                       f'{self.seed}; resume with the same data and seed')
    missing = [f.name for f in dataclasses.fields(self.state) if f.name not in state]
    if missing:
      raise ValueError(f'allocator state lacks {missing}; it was written by another version '
                       'or config; resume with the config the run started with')
    self.state = _like(state, self.state)


class PlanAllocator(Allocator):
  """An allocator that fills each batch with one plan: next_plan -> roll out -> observe."""
  rows_per_batch: int

  @abc.abstractmethod
  def next_plan(self) -> BatchPlan | None:
    """The next batch's prompts and group sizes; None when the allocator is exhausted."""

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout) -> None:
    """Learns from a scored batch (default: nothing)."""
    del plan, rewards_R, layout

  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch | None:
    plan = self.next_plan()
    if plan is None:
      return None
    layout = plan.rows(self.rows_per_batch)
    rollout = rollout_fn(layout)
    self.observe(plan, rollout.rewards_R, layout)
    return FilledBatch(plan.phase, layout, rollout, {'rounds': 1})


# ----------------------------------------------------------------------------------------
# The shuffled-epoch cursor (GRPO's pool walk, sGPO's trivial replay)


@dataclasses.dataclass
class EpochCursor:
  """Position in an endless walk over `size` items, reshuffled every epoch.

  The order of epoch e is `stream_rng(*stream, e).permutation(size)`: a pure function of
  the stream keys and the epoch, so (epoch, cursor) is the whole state.
  """
  epoch: int = 0
  cursor: int = 0

  def take(self, count: int, size: int, stream: tuple[int, ...]) -> np.ndarray:
    """The next `count` positions in [0, size), crossing epochs as needed."""
    if size < 1:
      raise ValueError(f'cannot walk an empty pool (size={size})')
    taken: list[np.ndarray] = []
    got = 0
    while got < count:
      if self.cursor == size:
        self.epoch, self.cursor = self.epoch + 1, 0
      take = min(count - got, size - self.cursor)
      order = stream_rng(*stream, self.epoch).permutation(size)
      taken.append(order[self.cursor:self.cursor + take])
      self.cursor += take
      got += take
    return np.concatenate(taken).astype(np.int64) if taken else np.zeros(0, np.int64)


# ----------------------------------------------------------------------------------------
# The registry


_REGISTRY: dict[str, type[Allocator]] = {}


def register_allocator(name: str) -> Callable[[type[Allocator]], type[Allocator]]:
  """Class decorator: makes `config.method=name` select this allocator, and its `Settings`
  (section `name`) a section of the default config and of the config checks."""
  def register(cls: type[Allocator]) -> type[Allocator]:
    if name in _REGISTRY and _REGISTRY[name] is not cls:
      raise ValueError(f'allocator {name!r} is already registered by '
                       f'{_REGISTRY[name].__qualname__}')
    settings = cls.__dict__.get('Settings')
    if settings is None or settings.section != name:
      raise ValueError(f'allocator {cls.__qualname__} registered as {name!r} needs its own '
                       f"`Settings` class with section = {name!r} (config.{name}); got "
                       f"{getattr(settings, 'section', None)!r}")
    cls.name = name
    _REGISTRY[name] = cls
    return cls
  return register


def registered() -> tuple[str, ...]:
  """The allocator names config.method may take, sorted."""
  return tuple(sorted(_REGISTRY))


def registered_settings() -> tuple[tuple[str, type[AllocatorSettings]], ...]:
  """(config section, settings class) of every registered allocator, sorted by name."""
  return tuple((name, _REGISTRY[name].Settings) for name in registered())


def allocator_class(method: str) -> type[Allocator]:
  if method not in _REGISTRY:
    raise ValueError(f'config.method={method!r} is not one of {registered()}')
  return _REGISTRY[method]


def make_allocator(config: Any, num_queries: int, profile: Any = None,
                   strata: Any = None) -> Allocator:
  """The allocator registered under config.method, built from the run config (`strata`, the
  queries' difficulty values, reach only allocators with uses_strata)."""
  cls = allocator_class(config.method)
  if cls.uses_strata:
    return cls.from_config(config, num_queries, profile, strata=strata)
  return cls.from_config(config, num_queries, profile)
