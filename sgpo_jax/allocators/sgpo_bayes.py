"""`method=sgpo_bayes`: sGPO beyond the paper, a Beta posterior per prompt driving everything.

What it does per RL batch (`fill_batch`), with the math in `bayes.py`:
1. Lazy adaptive profile. Prompts are profiled in the order of a seeded permutation of the
   pool, only as far as training needs them (a budget under one epoch never pays for
   prompts it will not train on). Up to R prompts are in flight; each profiling round is one
   fixed-shape rollout of one sample per in-flight prompt (generation only, charged to the
   ledger as 'profile'). A prompt leaves the round robin once `bayes.profile_decision`
   settles it: 'learnable' (joins the epoch's candidates), 'skip' (confidently trivial or
   unsolved: deprioritised) or 'undecided' at profile_max_samples (a candidate).
2. G per prompt: the next `window` candidates of the epoch go to `bayes.choose_group_sizes`
   (greedy fill of the R rows by marginal expected informative signal per row); the ones
   not taken stay for a later batch of the same epoch.
3. Every rollout updates the prompt's posterior (old evidence decayed by evidence_decay,
   since the policy moves); a trained prompt whose posterior P_inf(min G) falls below
   informative_floor is deprioritised, its skip count = consecutive all-equal groups.
4. Deprioritised prompts are not forgotten: at each epoch start each is drawn for a revisit
   with probability max(revisit_base**skips, revisit_floor) (GRESO's rule). A revisit is a
   cheap probe (the same adaptive rounds as the profile, counted as 'profile'); a probe that
   settles 'learnable' brings the prompt back. revisit_base adapts by revisit_step per epoch
   toward a share `revisit_target` of probes that come back.
No curriculum: candidates are taken in profile order (the measured sGPO curriculum made the
eval curve swing with its phases; see the README's results).

Registered as `method=sgpo_bayes` (settings: config.sgpo_bayes). `fill_batch` calls the
trainer's `rollout_fn` for every probe round (category 'profile') and once for the batch;
the state dataclass round-trips through `state_dict()` (base.py), so resume is exact.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sgpo_jax import bayes, config_check
from sgpo_jax import sgpo as sgpo_lib
from sgpo_jax.allocators.base import (
  Allocator,
  BatchPlan,
  FilledBatch,
  RolloutFn,
  register_allocator,
)
from sgpo_jax.sgpo import RowLayout

_POOL_ORDER_STREAM = 0xBA7E5
_REVISIT_STREAM = 0x2E71

# Status of a prompt.
UNPROFILED, SAMPLING, CANDIDATE, DEPRIORITISED = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class BayesSettings:
  """config.sgpo_bayes, typed and range-checked."""
  prior_alpha: float = 0.5
  prior_beta: float = 0.5
  group_sizes: tuple[int, ...] = (4, 8)
  signal_exponent: float = 0.0
  profile_min_samples: int = 1
  profile_max_samples: int = 4
  settle_high: float = 0.6
  settle_low: float = 0.35
  informative_floor: float = 0.35
  evidence_decay: float = 0.5
  window: int = 32
  revisit_base: float = 0.25
  revisit_floor: float = 0.02
  revisit_target: float = 0.3
  revisit_step: float = 0.05

  def __post_init__(self) -> None:
    config_check.check_sgpo_bayes(dataclasses.asdict(self))
    object.__setattr__(self, 'group_sizes', tuple(sorted({int(g) for g in self.group_sizes})))

  @classmethod
  def from_config(cls, section: Any = None) -> BayesSettings:
    values = config_check.section_values('sgpo_bayes', section)
    values['group_sizes'] = tuple(values['group_sizes'])
    return cls(**values)


@dataclasses.dataclass
class BayesState:
  """Everything that changes while running (JSON round-trip in state_dict)."""
  alpha: np.ndarray  # [Q] float64 posterior
  beta: np.ndarray  # [Q]
  status: np.ndarray  # [Q] int8 UNPROFILED | SAMPLING | CANDIDATE | DEPRIORITISED
  skips: np.ndarray  # [Q] int32 consecutive all-equal observations
  probe_n: np.ndarray  # [Q] int32 samples of the current profile / revisit probe
  probe_c: np.ndarray  # [Q] int32 successes among them
  served: np.ndarray  # [Q] bool trained in this epoch
  frontier: int = 0  # profiled prefix of the pool order
  in_flight: list = dataclasses.field(default_factory=list)  # prompts being sampled, in order
  candidates: list = dataclasses.field(default_factory=list)  # this epoch's, in order
  epoch: int = 0
  revisit_base: float = 0.25
  # Diagnostics (summary.json 'allocator' block).
  profile_samples: int = 0
  probe_samples: int = 0
  train_groups: int = 0
  informative_groups: int = 0
  revisits: int = 0
  revisits_back: int = 0
  steps: int = 0
  probe_rounds: int = 0
  visits_since_draw: int = 0  # prompt visits trained since the last revisit draw


@register_allocator('sgpo_bayes')
class BayesAllocator(Allocator):

  def __init__(self, num_queries: int, rows_per_batch: int, settings: BayesSettings,
               seed: int = 0):
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    sgpo_lib.validate_rows_per_batch(rows_per_batch, settings.group_sizes)
    self.num_queries = int(num_queries)
    self.rows_per_batch = int(rows_per_batch)
    self.settings = settings
    self.seed = int(seed)
    self.min_g = settings.group_sizes[0]
    self.pool_order = np.random.default_rng(
        np.random.SeedSequence([self.seed, _POOL_ORDER_STREAM])).permutation(self.num_queries)
    q = self.num_queries
    self.state = BayesState(
        alpha=np.full(q, settings.prior_alpha), beta=np.full(q, settings.prior_beta),
        status=np.zeros(q, np.int8), skips=np.zeros(q, np.int32),
        probe_n=np.zeros(q, np.int32), probe_c=np.zeros(q, np.int32),
        served=np.zeros(q, bool), revisit_base=settings.revisit_base)

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None) -> BayesAllocator:
    del profile  # it profiles lazily itself, through rollout_fn
    return cls(num_queries, int(config.train.rows_per_batch),
               BayesSettings.from_config(config.sgpo_bayes), int(config.seed))

  # -- posterior ------------------------------------------------------------------------

  def informative(self, query_index: np.ndarray | None = None,
                  group_size: int | None = None) -> np.ndarray:
    s = self.state
    idx = slice(None) if query_index is None else np.asarray(query_index)
    return bayes.informative_probability(s.alpha[idx], s.beta[idx], group_size or self.min_g)

  def _observe_samples(self, query_R: np.ndarray, success_R: np.ndarray,
                       decay: float) -> None:
    """Posterior update from a set of samples: per prompt, decay once, add its counts."""
    st, cfg = self.state, self.settings
    queries, inverse = np.unique(query_R, return_inverse=True)
    succ = np.bincount(inverse, weights=success_R, minlength=queries.size)
    fail = np.bincount(inverse, weights=1.0 - success_R, minlength=queries.size)
    st.alpha[queries], st.beta[queries] = bayes.update_posterior(
        st.alpha[queries], st.beta[queries], succ, fail, cfg.prior_alpha, cfg.prior_beta,
        decay)

  # -- profiling and revisit probes ------------------------------------------------------

  def _decide(self, q: int) -> str:
    cfg, st = self.settings, self.state
    return bayes.profile_decision(
        int(st.probe_c[q]), int(st.probe_n[q]), prior_alpha=cfg.prior_alpha,
        prior_beta=cfg.prior_beta, group_size=self.min_g, settle_high=cfg.settle_high,
        settle_low=cfg.settle_low, min_samples=cfg.profile_min_samples,
        max_samples=cfg.profile_max_samples)

  def _top_up_in_flight(self) -> None:
    st = self.state
    while len(st.in_flight) < self.rows_per_batch and st.frontier < self.num_queries:
      q = int(self.pool_order[st.frontier])
      st.frontier += 1
      st.status[q] = SAMPLING
      st.probe_n[q], st.probe_c[q] = 0, 0
      st.in_flight.append(q)

  def _probe_round(self, rollout_fn: RolloutFn, round_index: int) -> None:
    """One generation-only rollout: one sample per in-flight prompt; settles some."""
    st = self.state
    st.probe_rounds += 1
    take = st.in_flight[:self.rows_per_batch]
    layout = sgpo_lib.pack_rows(np.array(take, np.int64), np.ones(len(take), np.int64),
                                self.rows_per_batch)
    rewards_R = np.asarray(rollout_fn(layout, round_index, 'profile').rewards_R, np.float64)
    success = np.clip(rewards_R[:len(take)], 0.0, 1.0)
    self._observe_samples(np.array(take), success, 1.0)  # same policy: no decay
    is_revisit = st.epoch > 0 and st.frontier >= self.num_queries
    for q, ok in zip(take, success):
      st.probe_n[q] += 1
      st.probe_c[q] += int(ok >= 1.0)
    if is_revisit:
      st.probe_samples += len(take)
    else:
      st.profile_samples += len(take)
    still = []
    for q in st.in_flight:
      decision = self._decide(q) if q in take else 'sample'
      if decision == 'sample':
        still.append(q)
        continue
      back = decision != 'skip'
      if st.skips[q] > 0:  # a revisit probe
        st.revisits_back += int(back)
      if back:
        st.status[q] = CANDIDATE
        st.skips[q] = 0
        st.candidates.append(q)
      else:
        st.status[q] = DEPRIORITISED
        st.skips[q] = max(int(st.skips[q]), 0) + 1
    st.in_flight = still

  # -- epochs ----------------------------------------------------------------------------

  def _start_epoch(self) -> None:
    st, cfg = self.state, self.settings
    passes = min(st.visits_since_draw / self.num_queries, 1.0)
    if st.epoch > 0 and st.revisits:
      share = st.revisits_back / st.revisits
      st.revisit_base = bayes.adapt_revisit_base(st.revisit_base, share, cfg.revisit_target,
                                                 cfg.revisit_step * passes, cfg.revisit_floor)
    st.epoch += 1
    st.served[:] = False
    active = np.flatnonzero(st.status == CANDIDATE)
    # Candidates keep the pool order; deprioritised prompts drawn for a revisit probe.
    order = {int(q): i for i, q in enumerate(self.pool_order)}
    st.candidates = sorted(active.tolist(), key=order.__getitem__)
    low = np.flatnonzero(st.status == DEPRIORITISED)
    st.visits_since_draw = 0
    if low.size:
      p_R = bayes.revisit_probability(st.skips[low], st.revisit_base, cfg.revisit_floor,
                                      passes)
      rng = np.random.default_rng(np.random.SeedSequence([self.seed, _REVISIT_STREAM,
                                                          st.epoch]))
      u_R = rng.random(low.size)
      drawn = low[u_R < p_R]
      need = self._need()
      if len(st.candidates) + drawn.size < need:
        # Too little to fill a batch: probe the most promising of the rest as well (fewest
        # consecutive all-equal observations, then the draw's order), not the whole pool.
        rest = np.lexsort((u_R, st.skips[low]))
        extra = [q for q in low[rest].tolist() if q not in set(drawn.tolist())]
        drawn = np.concatenate([drawn, np.array(extra[:need - len(st.candidates) - drawn.size],
                                                np.int64)]).astype(np.int64)
      if drawn.size:  # the policy has moved since their evidence: decay it once
        st.alpha[drawn], st.beta[drawn] = bayes.update_posterior(
            st.alpha[drawn], st.beta[drawn], 0.0, 0.0, cfg.prior_alpha, cfg.prior_beta,
            cfg.evidence_decay)
      for q in sorted(drawn.tolist(), key=order.__getitem__):
        st.status[q] = SAMPLING
        st.probe_n[q], st.probe_c[q] = 0, 0
        st.in_flight.append(q)
      st.revisits += int(drawn.size)

  # -- one batch -------------------------------------------------------------------------

  def _need(self) -> int:
    """Candidates a batch's G choice wants to look at."""
    return max(self.settings.window, self.rows_per_batch // self.min_g)

  def _ready(self) -> list[int]:
    st = self.state
    return [q for q in st.candidates if not st.served[q]]

  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch:
    """Profiles / probes as needed, then plans, rolls out and observes one batch."""
    st, cfg = self.state, self.settings
    need = self._need()
    round_index = 1  # 0 is the training rollout's own key
    probe_rounds_before = self.state.probe_rounds
    started = False
    while True:
      st.candidates = self._ready()
      if len(st.candidates) >= need:
        break
      self._top_up_in_flight()
      if st.in_flight:
        self._probe_round(rollout_fn, round_index)
        round_index += 1
        continue
      if st.candidates:
        break  # the epoch's last candidates
      if started:
        # A fresh epoch and its probes found nothing learnable: this epoch trains every
        # prompt, most promising first, so the run goes on (a degenerate pool).
        st.candidates = np.argsort(-self.informative(), kind='stable').tolist()
        break
      self._start_epoch()
      started = True
    window = np.array(st.candidates[:cfg.window], np.int64)
    g_P = bayes.choose_group_sizes(st.alpha[window], st.beta[window], cfg.group_sizes,
                                   self.rows_per_batch, cfg.signal_exponent)
    if not g_P.any():  # every option below the floor of value: take the first at min G
      g_P[0] = self.min_g
    taken = g_P > 0
    plan = BatchPlan(window[taken], g_P[taken].astype(np.int32), 'bayes')
    layout = plan.rows(self.rows_per_batch)
    rollout = rollout_fn(layout, 0, 'rollout')
    self.observe(plan, rollout.rewards_R, layout)
    probe_rounds = self.state.probe_rounds - probe_rounds_before
    return FilledBatch('bayes', layout, rollout,
                       {'rounds': probe_rounds + 1, 'profile_rounds': probe_rounds})

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout) -> None:
    st, cfg = self.state, self.settings
    rewards_R = np.clip(np.asarray(rewards_R, np.float64).reshape(-1), 0.0, 1.0)
    valid = np.flatnonzero(layout.valid_R)
    self._observe_samples(layout.row_query_index_R[valid], rewards_R[valid], cfg.evidence_decay)
    served = set()
    for p, q in enumerate(plan.query_index.tolist()):
      rows = np.flatnonzero(layout.group_id_R == p)
      r = rewards_R[rows]
      informative = bool(r.max() > r.min())
      st.train_groups += 1
      st.informative_groups += int(informative)
      st.served[q] = True
      served.add(q)
      st.skips[q] = 0 if informative else st.skips[q] + 1
      if self.informative([q])[0] < cfg.informative_floor and st.status[q] == CANDIDATE:
        st.status[q] = DEPRIORITISED
        st.skips[q] = max(int(st.skips[q]), 1)
    st.candidates = [q for q in st.candidates if q not in served]
    st.steps += 1
    st.visits_since_draw += plan.num_prompts

  # -- reports and resume ----------------------------------------------------------------

  def summary(self) -> dict[str, Any]:
    st = self.state
    return {
        'profile_samples': st.profile_samples, 'probe_samples': st.probe_samples,
        'profiled_queries': int(st.frontier),
        'profile_samples_per_query': st.profile_samples / max(st.frontier, 1),
        'train_groups': st.train_groups,
        'informative_group_share': st.informative_groups / max(st.train_groups, 1),
        'revisits': st.revisits, 'revisits_back': st.revisits_back,
        'revisit_base': st.revisit_base, 'epochs': st.epoch,
        'deprioritised': int((st.status == DEPRIORITISED).sum()),
        'candidates': int((st.status == CANDIDATE).sum()),
    }
