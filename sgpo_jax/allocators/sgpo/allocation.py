"""sGPO allocation: from a difficulty profile to group sizes, phases and fixed-shape rows.

Owns the pure, numpy-only part of sGPO (sGPO, arXiv 2606.08854):
- `group_size_for`: G = power-of-two bucket of 1/p_hat.
- `allocate`: filtering (trivial dropped, a seeded subset of unsolved kept per phase),
  group sizes for learnable queries, and the curriculum (phases in increasing G) or one
  shuffled 'mix' phase. The result also carries the per-query fields of `profile.jsonl`
  and the counts of `summary.json`'s `profile` block.
- `SGPOSettings`: config.sgpo, its defaults and range checks.
- `profile_bucket` / `bucket_settled`: what the allocation makes of partial profile counts
  (profile.early_stop).

Profiling itself (sampling completions) lives in `generate/profiling.py`; iterating the
allocation during training in `allocators/sgpo/allocator.py`; the fixed-shape row layout in
`allocators/rows.py`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from sgpo_jax.allocators.rows import check_group_sizes
from sgpo_jax.allocators.settings import AllocatorSettings, require

DEFAULT_GROUP_SIZES = (2, 4, 8)
ROUNDINGS = ('down', 'up', 'nearest')  # of 1/p_hat onto the group sizes (`group_size_for`)
# A float p_hat or threshold is read as the simplest fraction (denominator up to this) that
# rounds to exactly that float, so 1/6 or 0.7 bucket as the fractions they stand for, while
# 0.2500001 stays just above 1/4.
_MAX_DENOMINATOR = 1 << 20
# Seed-sequence tags that keep the independent random streams of one seed apart.
_UNSOLVED_STREAM = 0x5E1EC7
_MIX_ORDER_STREAM = 0x313C


def _as_fraction(value: float | Fraction | int) -> Fraction:
  if isinstance(value, Fraction):
    return value
  if isinstance(value, (int, np.integer)):
    return Fraction(int(value))
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f'p_hat={value} is not finite; pass a success rate in [0, 1]')
  exact = Fraction(value)
  simple = exact.limit_denominator(_MAX_DENOMINATOR)
  return simple if float(simple) == value else exact


def _floor_log2(x: Fraction) -> int:
  """Largest e with 2**e <= x, exactly, for x > 0."""
  e = x.numerator.bit_length() - x.denominator.bit_length()
  while Fraction(2) ** e > x:
    e -= 1
  while Fraction(2) ** (e + 1) <= x:
    e += 1
  return e


def _check_rounding(rounding: str) -> None:
  if rounding not in ROUNDINGS:
    raise ValueError(f"rounding={rounding!r} is not one of {ROUNDINGS}")


def group_size_for(p_hat: float | Fraction,
                   group_sizes: Sequence[int] = DEFAULT_GROUP_SIZES,
                   rounding: str = 'down',
                   clip: bool = True) -> int:
  """Group size for one query with success rate p_hat: a bucket of 1/p_hat.

  rounding: 'down' = 2**floor(log2(1/p)), the paper's rule (p > 1/4 -> 2,
  1/8 < p <= 1/4 -> 4, p <= 1/8 -> 8 with sizes (2, 4, 8)); 'up' = 2**ceil(log2(1/p));
  'nearest' = the nearest candidate in log space (ties go to the larger G).
  clip=True: 1/p is clipped into [min(group_sizes), max(group_sizes)] and bucketed onto
  the members of group_sizes in the rounding's direction ('down': the largest member
  <= 1/p, 'up': the smallest member >= 1/p), so sets like (2, 4, 8, 16) or (4, 16) work.
  clip=False: group_sizes is ignored and any power of two >= 1 may come out (p = 1 -> 1);
  the caller must then size rows_per_batch for the sizes actually assigned.

  p_hat is read exactly: pass a `Fraction(n_correct, n_samples)` when the counts are
  known; a float is read as the simplest fraction that rounds to exactly that float (so
  k/8, 1/3, 0.7 are the fractions they stand for; 0.2500001 stays above 1/4). p_hat = 0 (no
  success seen) gets max(group_sizes) with clip=True and is an error with clip=False.
  """
  _check_rounding(rounding)
  sizes = check_group_sizes(group_sizes)
  p = _as_fraction(p_hat)
  if p < 0 or p > 1:
    raise ValueError(f'p_hat={float(p)} is outside [0, 1]; pass a success rate')
  if p == 0:
    if clip:
      return sizes[-1]
    raise ValueError('p_hat=0 has no finite 1/p_hat group size with clip=False; filter '
                     'unsolved queries first (allocate does) or set clip=True')
  inverse = 1 / p
  if not clip:
    e = _floor_log2(inverse)
    if rounding == 'up' and Fraction(2) ** e != inverse:
      e += 1
    elif rounding == 'nearest' and inverse * inverse >= Fraction(2) ** (2 * e + 1):
      e += 1  # log2(1/p) - e >= 1/2  <=>  (1/p)**2 >= 2**(2e + 1)
    return 2 ** e
  inverse = min(max(inverse, Fraction(sizes[0])), Fraction(sizes[-1]))
  if rounding == 'down':
    return max(g for g in sizes if g <= inverse)
  if rounding == 'up':
    return min(g for g in sizes if g >= inverse)
  below = max(g for g in sizes if g <= inverse)
  above = min(g for g in sizes if g >= inverse)
  # Nearer in log space: log(x/below) < log(above/x)  <=>  x**2 < below * above.
  return below if inverse * inverse < below * above else above


def _fractions_from(p_hat_Q: Any, n_correct_Q: Any, n_samples_Q: Any) -> list[Fraction]:
  if n_correct_Q is not None or n_samples_Q is not None:
    if n_correct_Q is None or n_samples_Q is None:
      raise ValueError('pass both n_correct_Q and n_samples_Q, or p_hat_Q alone')
    correct_Q = np.asarray(n_correct_Q, dtype=np.int64).reshape(-1)
    samples_Q = np.asarray(n_samples_Q, dtype=np.int64).reshape(-1)
    if correct_Q.shape != samples_Q.shape:
      raise ValueError(f'n_correct has {correct_Q.size} entries but n_samples has '
                       f'{samples_Q.size}; give one count per query')
    bad = np.flatnonzero((samples_Q < 1) | (correct_Q < 0) | (correct_Q > samples_Q))
    if bad.size:
      i = int(bad[0])
      raise ValueError(f'query {i}: n_correct={correct_Q[i]}, n_samples={samples_Q[i]} is '
                       'not a valid count (need n_samples >= 1 and 0 <= n_correct <= '
                       'n_samples)')
    return [Fraction(int(k), int(n)) for k, n in zip(correct_Q, samples_Q)]
  if p_hat_Q is None:
    raise ValueError('pass p_hat_Q or (n_correct_Q, n_samples_Q)')
  return [_as_fraction(p) for p in np.asarray(p_hat_Q, dtype=np.float64).reshape(-1)]


# ----------------------------------------------------------------------------------------
# Allocation


@dataclasses.dataclass
class QueryProfile:
  """The profiling result: one entry per training query."""
  query_index: np.ndarray  # [Q] int64 index into the training pool
  n_samples: np.ndarray | None  # [Q] int64, None when only p_hat is known
  n_correct: np.ndarray | None  # [Q] int64
  p_hat: np.ndarray  # [Q] float64

  @classmethod
  def from_counts(cls, n_correct: Sequence[int], n_samples: Sequence[int] | int,
                  query_index: Sequence[int] | None = None) -> QueryProfile:
    n_correct_Q = np.asarray(n_correct, dtype=np.int64).reshape(-1)
    n_samples_Q = np.broadcast_to(np.asarray(n_samples, dtype=np.int64),
                                  n_correct_Q.shape).copy()
    _fractions_from(None, n_correct_Q, n_samples_Q)  # validates the counts
    index_Q = (np.arange(n_correct_Q.size, dtype=np.int64) if query_index is None
               else np.asarray(query_index, dtype=np.int64).reshape(-1))
    p_hat_Q = n_correct_Q / np.maximum(n_samples_Q, 1)
    return cls(index_Q, n_samples_Q, n_correct_Q, p_hat_Q.astype(np.float64))

  @classmethod
  def from_p_hat(cls, p_hat: Sequence[float],
                 query_index: Sequence[int] | None = None) -> QueryProfile:
    p_hat_Q = np.asarray(p_hat, dtype=np.float64).reshape(-1)
    if p_hat_Q.size and (not np.all(np.isfinite(p_hat_Q)) or p_hat_Q.min() < 0
                         or p_hat_Q.max() > 1):
      raise ValueError(f'p_hat must lie in [0, 1]; got min {p_hat_Q.min()}, '
                       f'max {p_hat_Q.max()}')
    index_Q = (np.arange(p_hat_Q.size, dtype=np.int64) if query_index is None
               else np.asarray(query_index, dtype=np.int64).reshape(-1))
    return cls(index_Q, None, None, p_hat_Q)

  def fractions(self) -> list[Fraction]:
    if self.n_correct is not None:
      return _fractions_from(None, self.n_correct, self.n_samples)
    return _fractions_from(self.p_hat, None, None)


def as_query_profile(profile: Any) -> QueryProfile:
  """Accepts a QueryProfile, a mapping with ('n_correct', 'n_samples'[, 'query_index']) or
  ('p_hat'[, 'query_index']), or a bare array of p_hat (query index = position)."""
  if isinstance(profile, QueryProfile):
    return profile
  if isinstance(profile, Mapping):
    index = profile.get('query_index')
    if 'n_correct' in profile:
      return QueryProfile.from_counts(profile['n_correct'], profile['n_samples'], index)
    if 'p_hat' in profile:
      return QueryProfile.from_p_hat(profile['p_hat'], index)
    raise ValueError(f'profile mapping has keys {sorted(profile)}; expected n_correct and '
                     'n_samples, or p_hat')
  return QueryProfile.from_p_hat(profile)


@dataclasses.dataclass
class Phase:
  """One stage of the schedule: prompts to train on, each with its group size."""
  name: str  # 'G2', 'G4', 'G8' (curriculum) or 'mix'
  query_index: np.ndarray  # [P] int64 training-pool indices (cluster, then unsolved subset)
  group_size: np.ndarray  # [P] int32
  n_unsolved: int  # how many of the P prompts are the phase's unsolved subset (at the end)

  @property
  def num_prompts(self) -> int:
    return int(self.query_index.size)


@dataclasses.dataclass
class Allocation:
  """Result of `allocate`: the phases plus per-query fields and counts for the reports."""
  phases: list[Phase]
  query_index: np.ndarray  # [Q] the profile's query indices
  p_hat: np.ndarray  # [Q] float64
  n_samples: np.ndarray | None  # [Q]
  n_correct: np.ndarray | None  # [Q]
  category: np.ndarray  # [Q] str: 'trivial' | 'unsolved' | 'learnable'
  group_size: np.ndarray  # [Q] int32; 0 = filtered out; unsolved: G of their first phase
  phase: np.ndarray  # [Q] str: phase names joined by '+' ('' = filtered out)
  unsolved_group_size: int  # G for unsolved queries in the 'mix' phase
  n_queries: int
  n_trivial: int
  n_unsolved: int
  n_unsolved_kept: int  # distinct unsolved queries kept in at least one phase
  group_size_histogram: dict[int, int]  # {G: prompts per schedule pass}, all phases

  @property
  def trivial_query_index(self) -> np.ndarray:
    return self.query_index[self.category == 'trivial']

  def summary(self) -> dict[str, Any]:
    """The `profile` block of summary.json."""
    return {
        'n_queries': self.n_queries,
        'n_trivial': self.n_trivial,
        'n_unsolved': self.n_unsolved,
        'n_unsolved_kept': self.n_unsolved_kept,
        'group_size_histogram': {str(g): c for g, c in self.group_size_histogram.items()},
    }

  def profile_records(self) -> list[dict[str, Any]]:
    """One dict per query for profile.jsonl; `id` is the training-pool index."""
    records = []
    for i in range(self.n_queries):
      records.append({
          'id': int(self.query_index[i]),
          'n_samples': None if self.n_samples is None else int(self.n_samples[i]),
          'n_correct': None if self.n_correct is None else int(self.n_correct[i]),
          'p_hat': float(self.p_hat[i]),
          'group_size': int(self.group_size[i]),
          'phase': str(self.phase[i]),
          'category': str(self.category[i]),
      })
    return records


@dataclasses.dataclass(frozen=True)
class SGPOSettings(AllocatorSettings):
  """config.sgpo: its defaults and range checks.

  Build it with `SGPOSettings.from_config(config.sgpo)` (a ConfigDict, a partial dict or
  None: missing fields take these defaults). group_sizes is stored sorted.
  """
  section: ClassVar[str] = 'sgpo'
  trivial_threshold: float = 0.75  # p_hat > this: dropped
  unsolved_keep_fraction: float = 0.10  # p_hat == 0 kept with this probability per phase
  group_sizes: tuple[int, ...] = DEFAULT_GROUP_SIZES
  rounding: str = 'down'  # down | up | nearest power of two of 1/p_hat
  clip: bool = True  # clip G into [min, max] of group_sizes
  curriculum: bool = False  # True: phases in increasing G (the paper's schedule)
  phase_epochs: float = 1.0  # epochs over each phase's cluster
  # > 0: end a phase when train reward plateaus over this many steps
  phase_plateau_window: int = 0
  phase_plateau_delta: float = 0.01
  fill_phase_tail: bool = True  # top a phase's last batch up from the next phase (no padding)
  trivial_replay_fraction: float = 0.0  # beyond the paper: share of rows replaying trivial queries
  online_update: bool = False  # beyond the paper: Beta posterior of p_hat from rollouts
  prior_strength: float = 8.0  # kappa of the Beta prior around the profiled p_hat
  prior_eps: float = 0.5  # added to both Beta parameters so p_hat = 0 or 1 stays revisable

  def check(self) -> None:
    require(0.0 <= self.trivial_threshold <= 1.0,
            f'sgpo.trivial_threshold={self.trivial_threshold} must be in [0, 1].')
    require(0.0 <= self.unsolved_keep_fraction <= 1.0,
            f'sgpo.unsolved_keep_fraction={self.unsolved_keep_fraction} must be in [0, 1].')
    object.__setattr__(self, 'group_sizes', check_group_sizes(self.group_sizes, 'sgpo.group_sizes',
                                                              minimum=2))
    require(self.rounding in ROUNDINGS,
            f'sgpo.rounding={self.rounding!r} is not one of {ROUNDINGS}.')
    require(self.phase_epochs > 0, f'sgpo.phase_epochs={self.phase_epochs} must be > 0.')
    require(self.phase_plateau_window >= 0,
            f'sgpo.phase_plateau_window={self.phase_plateau_window} must be >= 0 (0 = off).')
    require(0.0 <= self.trivial_replay_fraction < 1.0,
            f'sgpo.trivial_replay_fraction={self.trivial_replay_fraction} must be in [0, 1).')
    require(self.prior_strength >= 0,
            f'sgpo.prior_strength={self.prior_strength} must be >= 0.')
    require(self.prior_eps > 0, f'sgpo.prior_eps={self.prior_eps} must be > 0.')


def unsolved_subset(num_unsolved: int, keep_fraction: float, seed: int,
                    phase_key: int) -> np.ndarray:
  """Bool [U]: each unsolved query kept with probability keep_fraction.

  A fixed function of (seed, phase_key): the same subset every time for a phase, an
  independent one for another phase (phase_key = the phase's G, or 0 for 'mix').
  """
  if not 0.0 <= keep_fraction <= 1.0:
    raise ValueError(f'unsolved_keep_fraction={keep_fraction} is outside [0, 1]')
  rng = np.random.default_rng(np.random.SeedSequence([int(seed), _UNSOLVED_STREAM,
                                                      int(phase_key)]))
  return rng.random(num_unsolved) < keep_fraction


def allocate(profile: Any, sgpo_config: Any = None, seed: int = 0) -> Allocation:
  """Filter, size and schedule the profiled queries (sGPO, arXiv 2606.08854).

  - trivial: p_hat > trivial_threshold, never trained.
  - unsolved: p_hat == 0; per phase a fixed seeded subset (probability
    unsolved_keep_fraction, independent across phases) is appended to the phase and trained
    at the phase's G.
  - learnable: G from `group_size_for` (group_sizes, rounding, clip).
  - curriculum=True: one phase per distinct learnable G, in increasing G, named 'G<g>'.
    curriculum=False: one 'mix' phase, shuffled with `seed`, each learnable query at its
    own G and the unsolved subset at max(group_sizes).

  Degenerate inputs: an empty profile, or one where nothing is kept (all trivial, or all
  unsolved with no subset drawn), raise ValueError before any RL compute. All-unsolved
  with a non-empty kept subset gives a single phase at max(group_sizes) ('G<max>' or
  'mix'); a single learnable query gives a one-prompt phase (its batches are padded).
  """
  prof = as_query_profile(profile)
  settings = SGPOSettings.from_config(sgpo_config)
  trivial_threshold = settings.trivial_threshold
  keep_fraction = settings.unsolved_keep_fraction
  group_sizes, rounding = settings.group_sizes, settings.rounding
  clip, curriculum = settings.clip, settings.curriculum

  num_queries = int(prof.query_index.size)
  if num_queries == 0:
    raise ValueError('the profile is empty (0 queries): sGPO needs profiled training '
                     'queries; check data.num_train / data.path')
  if len(np.unique(prof.query_index)) != num_queries:
    raise ValueError('profile.query_index has duplicates; profile each query once')
  fractions = prof.fractions()
  threshold = _as_fraction(trivial_threshold)
  trivial_Q = np.array([p > threshold for p in fractions], dtype=bool)
  unsolved_Q = np.array([p == 0 for p in fractions], dtype=bool) & ~trivial_Q
  learnable_Q = ~trivial_Q & ~unsolved_Q
  learnable_G = np.zeros(num_queries, dtype=np.int32)
  learnable_pos = np.flatnonzero(learnable_Q)
  for i in learnable_pos:
    learnable_G[i] = group_size_for(fractions[i], group_sizes, rounding, clip)
  unsolved_pos = np.flatnonzero(unsolved_Q)
  max_g = group_sizes[-1]

  phases: list[Phase] = []
  if curriculum:
    phase_gs = sorted({int(g) for g in learnable_G[learnable_pos]}) or [max_g]
    for g in phase_gs:
      cluster = learnable_pos[learnable_G[learnable_pos] == g]
      kept = unsolved_pos[unsolved_subset(unsolved_pos.size, keep_fraction, seed, g)]
      positions = np.concatenate([cluster, kept])
      phases.append(Phase(f'G{g}', prof.query_index[positions].astype(np.int64),
                          np.full(positions.size, g, dtype=np.int32), int(kept.size)))
  else:
    kept = unsolved_pos[unsolved_subset(unsolved_pos.size, keep_fraction, seed, 0)]
    positions = np.concatenate([learnable_pos, kept])
    sizes = np.concatenate([learnable_G[learnable_pos],
                            np.full(kept.size, max_g, dtype=np.int32)])
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), _MIX_ORDER_STREAM]))
    order = rng.permutation(positions.size)
    unsolved_mask = np.concatenate([np.zeros(learnable_pos.size, bool),
                                    np.ones(kept.size, bool)])[order]
    phases.append(Phase('mix', prof.query_index[positions[order]].astype(np.int64),
                        sizes[order].astype(np.int32), int(unsolved_mask.sum())))
  phases = [p for p in phases if p.num_prompts > 0]
  if not phases:
    raise ValueError(
        f'nothing to train on: of {num_queries} queries {int(trivial_Q.sum())} are trivial '
        f'(p_hat > {trivial_threshold}) and {int(unsolved_Q.sum())} unsolved with none kept '
        f'(unsolved_keep_fraction={keep_fraction}); raise sgpo.trivial_threshold or '
        'sgpo.unsolved_keep_fraction, start from a different policy, or use method=grpo')

  group_size_Q = learnable_G.copy()
  phase_names: list[list[str]] = [[] for _ in range(num_queries)]
  position_of = {int(q): i for i, q in enumerate(prof.query_index)}
  histogram: dict[int, int] = {}
  for phase in phases:
    for q, g in zip(phase.query_index, phase.group_size):
      i = position_of[int(q)]
      phase_names[i].append(phase.name)
      if group_size_Q[i] == 0:
        group_size_Q[i] = g
      histogram[int(g)] = histogram.get(int(g), 0) + 1
  category_Q = np.where(trivial_Q, 'trivial', np.where(unsolved_Q, 'unsolved', 'learnable'))
  kept_unsolved = sum(1 for i in unsolved_pos if phase_names[i])
  return Allocation(
      phases=phases,
      query_index=prof.query_index.astype(np.int64),
      p_hat=np.asarray(prof.p_hat, dtype=np.float64),
      n_samples=prof.n_samples,
      n_correct=prof.n_correct,
      category=category_Q.astype(object),
      group_size=group_size_Q,
      phase=np.array(['+'.join(names) for names in phase_names], dtype=object),
      unsolved_group_size=max_g,
      n_queries=num_queries,
      n_trivial=int(trivial_Q.sum()),
      n_unsolved=int(unsolved_Q.sum()),
      n_unsolved_kept=int(kept_unsolved),
      group_size_histogram=dict(sorted(histogram.items())),
  )


def profile_bucket(n_correct: int, n_samples: int, sgpo_config: Any = None) -> int:
  """What `allocate` makes of a query with these counts: -1 trivial, 0 unsolved, else G."""
  settings = SGPOSettings.from_config(sgpo_config)
  p = Fraction(int(n_correct), int(n_samples))
  if p > _as_fraction(settings.trivial_threshold):
    return -1
  if p == 0:
    return 0
  return group_size_for(p, settings.group_sizes, settings.rounding, settings.clip)


def bucket_settled(n_correct: int, n_drawn: int, num_samples: int,
                   sgpo_config: Any = None) -> bool:
  """True when sampling the rest of a query's `num_samples` cannot change its bucket.

  Every possible final count (n_correct .. n_correct + the samples left) must give one
  bucket, and the counts drawn so far must already give that bucket, so the allocation made
  from the partial counts is the one a full profile would make (profile.early_stop).
  """
  if n_drawn >= num_samples:
    return True
  if n_drawn < 1:
    return False
  settings = SGPOSettings.from_config(sgpo_config)
  now = profile_bucket(n_correct, n_drawn, settings)
  left = num_samples - n_drawn
  return all(profile_bucket(c, num_samples, settings) == now
             for c in range(n_correct, n_correct + left + 1))
