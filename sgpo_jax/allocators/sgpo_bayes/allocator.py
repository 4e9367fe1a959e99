"""`method=sgpo_bayes`: a Beta posterior per prompt drives profiling, group sizes and revisits.

Per RL batch (`fill_batch`), with the math in `posterior.py`:
1. Candidates. profile=False (default): prompts join the epoch's candidates as they are
   (prior posterior); their first training group is their profile. profile=True: a lazy
   adaptive profile in a seeded pool order, only as far as training needs; up to R prompts
   in flight, one fixed-shape call per round (charged as 'profile'; spare rows become extra
   samples), each prompt until `posterior.profile_decision` settles it: 'learnable' or
   'undecided' (a candidate) or 'skip' (deprioritised).
2. Group sizes: the next `window` candidates (prioritise=True: the `window` with the largest
   P_inf) go to `posterior.choose_group_sizes`, a greedy fill of the R rows by marginal
   expected signal per row; the ones not taken stay for a later round.
3. Post-filter (post_filter=True): all-equal groups are dropped and further rounds refill the
   batch (`RoundBatchBuilder`) until R rows or max_rounds rounds; an informative group that
   does not fit stays a candidate. With train_cost_per_row > 0 a refill is skipped when
   `posterior.refill_lowers_cost` says it would raise the FLOPs per trained informative row.
   Every round is charged as 'rollout', dropped rows included.
4. Every rollout updates its prompt's posterior (old evidence decayed by evidence_decay). A
   prompt whose own P_inf(min G) falls below informative_floor is deprioritised
   (skip_side='easy': only if its posterior mean is >= 1/2).
5. Revisits: at each epoch start each deprioritised prompt is drawn with probability
   max(revisit_base**skips, revisit_floor) (GRESO's rule, `posterior.revisit_probability`)
   and probed (profile=True) or given a training group; revisit_base adapts toward a share
   revisit_target of revisits that come back.
6. Options: pooled_prior shares an empirical-Bayes prior per stratum (`posterior.pooled_prior`;
   it orders and sizes groups, never deprioritises); epoch_cut (with prioritise) ends an
   epoch once its best ready candidate's P_inf is below the cut and decays the evidence of
   the candidates it leaves.
Candidates come in a fresh random order every epoch (reshuffle=True) or the pool order; no
curriculum. Resume is exact: the state dataclass round-trips through `state_dict()`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from sgpo_jax.allocators import beta as beta_lib
from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.base import (
  Allocator,
  BatchPlan,
  FilledBatch,
  Rollout,
  RolloutFn,
  register_allocator,
)
from sgpo_jax.allocators.dynamic_sampling import RoundBatchBuilder
from sgpo_jax.allocators.rows import RowLayout
from sgpo_jax.allocators.settings import AllocatorSettings, require
from sgpo_jax.allocators.sgpo_bayes import posterior as posterior_lib

_POOL_ORDER_STREAM = 0xBA7E5
_REVISIT_STREAM = 0x2E71
_EPOCH_ORDER_STREAM = 0xE90C

# Status of a prompt.
UNPROFILED, SAMPLING, CANDIDATE, DEPRIORITISED = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class BayesSettings(AllocatorSettings):
  """config.sgpo_bayes: its defaults and range checks. group_sizes is stored sorted."""
  section: ClassVar[str] = 'sgpo_bayes'
  prior_alpha: float = 0.5  # Beta prior of every prompt's success rate (Jeffreys)
  prior_beta: float = 0.5
  group_sizes: tuple[int, ...] = (2, 4)  # candidate G; rows_per_batch must be a multiple of each
  signal_exponent: float = 0.0  # group value = P_inf * G**this (0: informative groups)
  profile_min_samples: int = 1  # adaptive profile: samples before a prompt may settle
  profile_max_samples: int = 4  # ... and at most (then a training candidate)
  settle_high: float = 0.6  # settled learnable once P_inf(min G) >= this
  settle_low: float = 0.35  # settled trivial/unsolved (deprioritised) once P_inf <= this
  # A prompt whose own P_inf(min G) falls below this is deprioritised. At 0.1 with
  # evidence_decay 0.5 no run of all-equal G=4 groups takes a prompt below it (Beta(8.5,
  # 0.5): 0.179), so every prompt stays in the epoch walk and the posterior chooses G.
  informative_floor: float = 0.1
  evidence_decay: float = 0.5  # old evidence weight per training observation / revisit
  window: int = 32  # candidates the G choice looks at per batch
  revisit_base: float = 0.25  # revisit probability max(base**skips, floor) per epoch
  revisit_floor: float = 0.02
  revisit_target: float = 0.3  # base adapts toward this share of revisits coming back
  revisit_step: float = 0.05
  post_filter: bool = True  # drop all-equal groups after rollout, refill (DAPO rounds)
  max_rounds: int = 4  # post_filter: training rollout rounds per batch, then padded
  # Adaptive profile before a prompt's first training group (profile_* and settle_* apply).
  # False: a prompt's first (post-filtered) training group is its profile.
  profile: bool = False
  # > 0: a refill round is skipped when it would raise the FLOPs per trained informative row,
  # with training a row costing this many times generating it. 0: refill up to max_rounds
  # (DAPO's rule).
  train_cost_per_row: float = 0.0
  reshuffle: bool = True  # candidates in a fresh random order every epoch
  # True: a revisited prompt's evidence decays by evidence_decay per pool pass of training
  # since the last draw, not once per epoch (epochs are a round or two when few prompts are
  # learnable; per-epoch decay then makes trivial prompts look uncertain again).
  decay_by_passes: bool = False
  # True: an epoch with fewer candidates than a round looks at also revisits the deprioritised
  # prompts with the fewest all-equal groups in a row; False: only the random revisits.
  top_up_revisits: bool = True
  # both: a low P_inf deprioritises a prompt on either tail; easy: only a mostly-solved one
  # (posterior mean >= 1/2), a hard prompt with rare successes stays a candidate.
  skip_side: str = 'both'
  # Empirical-Bayes prior shared by prompts with the same feature (posterior.pooled_prior):
  # 'difficulty' (the queries' difficulty field), 'pool' (one for the whole pool) or 'none'
  # (every prompt starts at Beta(prior_alpha, prior_beta)). A prompt nobody has rolled out
  # then starts where its stratum's rolled-out prompts are; it orders and sizes groups and
  # never deprioritises a prompt (informative_floor reads the prompt's own evidence).
  pooled_prior: str = 'none'
  pooled_prior_strength: float = 1.0  # the base prior counts as this many seen prompts
  pooled_max_concentration: float = 8.0  # a stratum prior is worth at most this many samples
  # True: each round's G choice looks at the `window` ready candidates with the largest
  # P_inf (ties in epoch order) instead of the next ones; every candidate is still served
  # once per epoch, most promising first.
  prioritise: bool = False
  # > 0 (prioritise only): an epoch ends early once the best ready candidate's P_inf(min G)
  # is below this, instead of spending its last steps on the prompts ranked last; the
  # prompts it leaves unserved have their evidence decayed once by evidence_decay, so they
  # rise in later epochs' rankings.
  epoch_cut: float = 0.0

  def check(self) -> None:
    require(self.prior_alpha > 0 and self.prior_beta > 0,
            f'sgpo_bayes.prior_alpha={self.prior_alpha} and prior_beta={self.prior_beta} '
            'must be > 0.')
    object.__setattr__(self, 'group_sizes',
                       rows_lib.check_group_sizes(self.group_sizes, 'sgpo_bayes.group_sizes',
                                                  minimum=2))
    require(1 <= self.profile_min_samples <= self.profile_max_samples,
            f'need 1 <= sgpo_bayes.profile_min_samples ({self.profile_min_samples}) <= '
            f'sgpo_bayes.profile_max_samples ({self.profile_max_samples}).')
    require(0.0 <= self.settle_low <= self.settle_high <= 1.0,
            f'need 0 <= sgpo_bayes.settle_low ({self.settle_low}) <= sgpo_bayes.settle_high '
            f'({self.settle_high}) <= 1.')
    require(0.0 <= self.evidence_decay <= 1.0,
            f'sgpo_bayes.evidence_decay={self.evidence_decay} must be in [0, 1].')
    require(self.window >= 1, f'sgpo_bayes.window={self.window} must be >= 1.')
    require(0.0 <= self.informative_floor <= 1.0,
            f'sgpo_bayes.informative_floor={self.informative_floor} must be in [0, 1].')
    # An unseen prompt must start above the floor, or one all-equal group deprioritises
    # almost every prompt and the candidates starve.
    min_g = self.group_sizes[0]
    prior_inf = float(posterior_lib.informative_probability(self.prior_alpha, self.prior_beta,
                                                            min_g))
    require(self.informative_floor < prior_inf,
            f'sgpo_bayes.informative_floor={self.informative_floor} must be below '
            f'{prior_inf:.3f}, the informative probability of an unseen prompt (prior '
            f'Beta({self.prior_alpha}, {self.prior_beta})) at the smallest group size '
            f'{min_g}; else one all-equal group deprioritises nearly every prompt. Lower it '
            f'(e.g. {prior_inf * 0.8:.2f}) or drop the smallest group size.')
    require(0.0 <= self.revisit_floor <= self.revisit_base <= 1.0,
            f'need 0 <= sgpo_bayes.revisit_floor ({self.revisit_floor}) <= '
            f'sgpo_bayes.revisit_base ({self.revisit_base}) <= 1.')
    require(self.skip_side in ('both', 'easy'),
            f"sgpo_bayes.skip_side={self.skip_side!r} must be 'both' (deprioritise "
            "confidently trivial and unsolved prompts) or 'easy' (trivial ones only).")
    require(self.pooled_prior in ('none', 'difficulty', 'pool'),
            f"sgpo_bayes.pooled_prior={self.pooled_prior!r} must be 'none' (every prompt "
            "starts at the prior), 'difficulty' (an empirical-Bayes prior per difficulty "
            "level of the queries) or 'pool' (one over the whole pool).")
    require(self.pooled_prior_strength >= 0,
            f'sgpo_bayes.pooled_prior_strength={self.pooled_prior_strength} must be >= 0 '
            '(the base prior counts as this many seen prompts in a stratum).')
    require(self.pooled_max_concentration >= 0.5,
            f'sgpo_bayes.pooled_max_concentration={self.pooled_max_concentration} must be '
            '>= 0.5 (how many samples a stratum prior may be worth at most, e.g. 8).')
    for flag in ('post_filter', 'profile', 'reshuffle', 'decay_by_passes', 'top_up_revisits',
                 'prioritise'):
      require(isinstance(getattr(self, flag), bool),
              f'sgpo_bayes.{flag}={getattr(self, flag)!r} must be True or False.')
    require(0.0 <= self.epoch_cut < prior_inf,
            f'sgpo_bayes.epoch_cut={self.epoch_cut} must be in [0, {prior_inf:.3f}): 0 (off) '
            'or below the informative probability of an unseen prompt, else an epoch of '
            'unseen prompts ends before it starts. E.g. 0.3.')
    require(self.epoch_cut == 0.0 or self.prioritise,
            f'sgpo_bayes.epoch_cut={self.epoch_cut} needs sgpo_bayes.prioritise=True (it '
            'cuts the tail of an epoch served most promising first); set prioritise=True or '
            'epoch_cut=0.')
    require(isinstance(self.max_rounds, int) and not isinstance(self.max_rounds, bool)
            and self.max_rounds >= 1,
            f'sgpo_bayes.max_rounds={self.max_rounds!r} must be an integer >= 1 (training '
            'rollout rounds per batch; 1 = no refill).')
    require(self.train_cost_per_row >= 0,
            f'sgpo_bayes.train_cost_per_row={self.train_cost_per_row} must be >= 0 (0: '
            'always refill up to max_rounds).')


@dataclasses.dataclass
class BayesState:
  """Everything that changes while running (JSON round-trip in state_dict)."""
  alpha: np.ndarray  # [Q] float64 posterior
  beta: np.ndarray  # [Q]
  # [Q] float64 sum of squared sample weights behind alpha/beta's evidence (a sample enters at
  # 1 and decays with it): the noise of the decayed rate, for the pooled prior.
  weight_sq: np.ndarray
  status: np.ndarray  # [Q] int8 UNPROFILED | SAMPLING | CANDIDATE | DEPRIORITISED
  skips: np.ndarray  # [Q] int32 consecutive all-equal observations
  probe_n: np.ndarray  # [Q] int32 samples of the current profile / revisit probe
  probe_c: np.ndarray  # [Q] int32 successes among them
  served: np.ndarray  # [Q] bool rolled out for training in this epoch (kept or dropped)
  revisiting: np.ndarray  # [Q] bool drawn for a revisit, no training group since (profile=False)
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
  train_rounds: int = 0  # training rollout rounds (post_filter: several per batch)
  dropped_groups: int = 0  # all-equal groups not trained on (post_filter)
  overflow_groups: int = 0  # informative groups that did not fit (their prompt stays)
  refills_skipped: int = 0  # batches padded because another round would not pay
  expected_informative: float = 0.0  # sum of P_inf over rolled-out training groups, as planned
  epoch_cuts: int = 0  # epochs ended early by epoch_cut
  cut_unserved: int = 0  # candidates those cuts left unserved (their evidence decayed)


@register_allocator('sgpo_bayes')
class BayesAllocator(Allocator):
  """A Beta posterior per prompt drives profiling, G and revisits; see the module docstring."""
  Settings = BayesSettings
  uses_strata = True

  def __init__(self, num_queries: int, rows_per_batch: int, settings: BayesSettings,
               seed: int = 0, strata: Any = None):
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    self.stratum_Q = beta_lib.stratum_ids(settings.pooled_prior, strata, int(num_queries),
                                          BayesSettings.section)
    rows_lib.check_rows_per_batch(rows_per_batch, settings.group_sizes)
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
        weight_sq=np.zeros(q),
        status=np.zeros(q, np.int8), skips=np.zeros(q, np.int32),
        probe_n=np.zeros(q, np.int32), probe_c=np.zeros(q, np.int32),
        served=np.zeros(q, bool), revisiting=np.zeros(q, bool),
        revisit_base=settings.revisit_base)

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None,
                  strata: Any = None) -> BayesAllocator:
    del profile  # it profiles lazily itself, through rollout_fn
    return cls(num_queries, int(config.train.rows_per_batch),
               BayesSettings.from_config(config.sgpo_bayes), int(config.seed), strata)


  # -- posterior ------------------------------------------------------------------------

  def posterior(self) -> tuple[np.ndarray, np.ndarray]:
    """float64 [Q] (a, b) the decisions use: each prompt's own posterior, or with
    pooled_prior its evidence on top of its stratum's empirical-Bayes prior
    (`bayes.pooled_prior`), so a prompt nobody has rolled out starts where its stratum is.
    The informative_floor (deprioritising) always reads the own posterior (state.alpha,
    state.beta): a pooled prior orders and sizes groups, it never takes a prompt out."""
    st, cfg = self.state, self.settings
    if self.stratum_Q is None:
      return st.alpha, st.beta
    succ_Q, fail_Q = st.alpha - cfg.prior_alpha, st.beta - cfg.prior_beta
    a_S, b_S = posterior_lib.pooled_prior(succ_Q, fail_Q, self.stratum_Q, cfg.prior_alpha,
                                  cfg.prior_beta, cfg.pooled_prior_strength,
                                  cfg.pooled_max_concentration,
                                  beta_lib.noise_factor(succ_Q + fail_Q, st.weight_sq))
    return a_S[self.stratum_Q] + succ_Q, b_S[self.stratum_Q] + fail_Q

  def load_state_dict(self, state: dict) -> None:
    # A checkpoint from before weight_sq was kept: every sample counted as undecayed, the
    # estimate that version's pooled prior used (it continues as it was).
    if 'weight_sq' not in state and 'alpha' in state:
      cfg = self.settings
      state = {**state, 'weight_sq': list(np.subtract(state['alpha'], cfg.prior_alpha)
                                          + np.subtract(state['beta'], cfg.prior_beta))}
    super().load_state_dict(state)

  def informative(self, query_index: np.ndarray | None = None,
                  group_size: int | None = None) -> np.ndarray:
    a_Q, b_Q = self.posterior()
    idx = slice(None) if query_index is None else np.asarray(query_index)
    return posterior_lib.informative_probability(a_Q[idx], b_Q[idx], group_size or self.min_g)

  def own_informative(self, q: int) -> float:
    """P_inf(min G) of prompt q's own posterior (what informative_floor is compared to)."""
    st = self.state
    return float(posterior_lib.informative_probability(st.alpha[q], st.beta[q], self.min_g))

  def skippable(self, q: int) -> bool:
    """Whether prompt q may be deprioritised on a low P_inf (skip_side='both': either tail;
    'easy': only when its posterior mean success rate is >= 1/2, so a hard prompt with rare
    successes stays a candidate: held-out accuracy grows where the policy still fails)."""
    if self.settings.skip_side == 'both':
      return True
    st = self.state
    return bool(st.alpha[q] >= st.beta[q])

  def _observe_samples(self, query_R: np.ndarray, success_R: np.ndarray,
                       decay: float) -> None:
    """Posterior update from a set of samples: per prompt, decay once, add its counts."""
    queries, inverse = np.unique(query_R, return_inverse=True)
    succ = np.bincount(inverse, weights=success_R, minlength=queries.size)
    fail = np.bincount(inverse, weights=1.0 - success_R, minlength=queries.size)
    self._update(queries, succ, fail, decay)

  def _update(self, queries: np.ndarray, succ, fail, decay: float) -> None:
    """Decays `queries`' evidence by `decay`, then adds succ / fail (per query or scalars)."""
    st, cfg = self.state, self.settings
    st.alpha[queries], st.beta[queries] = posterior_lib.update_posterior(
        st.alpha[queries], st.beta[queries], succ, fail, cfg.prior_alpha, cfg.prior_beta,
        decay)
    st.weight_sq[queries] = (beta_lib.decay_sq(st.weight_sq[queries], decay)
                             + np.asarray(succ, np.float64) + np.asarray(fail, np.float64))

  # -- profiling and revisit probes ------------------------------------------------------

  def _decide(self, q: int) -> str:
    cfg, st = self.settings, self.state
    return posterior_lib.profile_decision(
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

  def _take_unprofiled(self, count: int) -> None:
    """profile=False: the next `count` prompts of the pool order become candidates as they
    are (prior posterior); their first training group is their profile."""
    st = self.state
    while count > 0 and st.frontier < self.num_queries:
      q = int(self.pool_order[st.frontier])
      st.frontier += 1
      st.status[q] = CANDIDATE
      st.candidates.append(q)
      count -= 1

  def probe_samples_per_prompt(self, take: list[int]) -> np.ndarray:
    """Samples each in-flight prompt gets in one probe call: 1, or more when fewer than R
    prompts are in flight (the call's R rows are paid for anyway), R // len(take) each,
    never past profile_max_samples."""
    st, cfg = self.state, self.settings
    per = max(1, self.rows_per_batch // max(len(take), 1))
    left = cfg.profile_max_samples - st.probe_n[np.asarray(take, np.int64)]
    return np.minimum(per, np.maximum(left, 1)).astype(np.int64)

  def _probe_round(self, rollout_fn: RolloutFn, round_index: int) -> None:
    """One generation-only rollout of the in-flight prompts; settles some."""
    st = self.state
    st.probe_rounds += 1
    take = st.in_flight[:self.rows_per_batch]
    k_P = self.probe_samples_per_prompt(take)
    layout = rows_lib.layout_rows(np.array(take, np.int64), k_P, self.rows_per_batch)
    rewards_R = np.asarray(rollout_fn(layout, round_index, 'profile').rewards_R, np.float64)
    valid = np.flatnonzero(layout.valid_R)
    success_R = np.clip(rewards_R[valid], 0.0, 1.0)
    self._observe_samples(layout.row_query_index_R[valid], success_R, 1.0)  # same policy
    group_R = layout.group_id_R[valid]
    correct_P = np.bincount(group_R, weights=(success_R >= 1.0), minlength=len(take))
    for p, q in enumerate(take):
      st.probe_n[q] += int(k_P[p])
      st.probe_c[q] += int(correct_P[p])
      if st.skips[q] > 0:  # a revisit probe
        st.probe_samples += int(k_P[p])
      else:
        st.profile_samples += int(k_P[p])
    still = []
    for q in st.in_flight:
      decision = self._decide(q) if q in take else 'sample'
      if decision == 'sample':
        still.append(q)
        continue
      back = decision != 'skip' or not self.skippable(q)
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
      st.revisit_base = posterior_lib.adapt_revisit_base(st.revisit_base, share, cfg.revisit_target,
                                                 cfg.revisit_step * passes, cfg.revisit_floor)
    st.epoch += 1
    st.served[:] = False
    active = np.flatnonzero(st.status == CANDIDATE)
    # Candidates in the epoch's order (a fresh permutation per epoch with reshuffle, else the
    # pool order); deprioritised prompts drawn for a revisit probe.
    epoch_order = (np.random.default_rng(np.random.SeedSequence(
        [self.seed, _EPOCH_ORDER_STREAM, st.epoch])).permutation(self.num_queries)
        if cfg.reshuffle else self.pool_order)
    order = {int(q): i for i, q in enumerate(epoch_order)}
    st.candidates = sorted(active.tolist(), key=order.__getitem__)
    low = np.flatnonzero(st.status == DEPRIORITISED)
    st.visits_since_draw = 0
    if low.size:
      p_R = posterior_lib.revisit_probability(st.skips[low], st.revisit_base, cfg.revisit_floor,
                                      passes)
      rng = np.random.default_rng(np.random.SeedSequence([self.seed, _REVISIT_STREAM,
                                                          st.epoch]))
      u_R = rng.random(low.size)
      drawn = low[u_R < p_R]
      need = self._need()
      if cfg.top_up_revisits and len(st.candidates) + drawn.size < need:
        # Too little to fill a batch: probe the most promising of the rest as well (fewest
        # consecutive all-equal observations, then the draw's order), not the whole pool.
        rest = np.lexsort((u_R, st.skips[low]))
        extra = [q for q in low[rest].tolist() if q not in set(drawn.tolist())]
        drawn = np.concatenate([drawn, np.array(extra[:need - len(st.candidates) - drawn.size],
                                                np.int64)]).astype(np.int64)
      if drawn.size:  # the policy has moved since their evidence: decay it once
        # decay_by_passes: by as much as training moved since the last draw (evidence_decay
        # per pool pass), so short epochs (few learnable prompts) do not wash it out.
        decay = cfg.evidence_decay ** passes if cfg.decay_by_passes else cfg.evidence_decay
        self._update(drawn, 0.0, 0.0, decay)
      for q in sorted(drawn.tolist(), key=order.__getitem__):
        if cfg.profile:
          st.status[q] = SAMPLING
          st.probe_n[q], st.probe_c[q] = 0, 0
          st.in_flight.append(q)
        else:  # the revisit is a training group, post-filtered like any other
          st.status[q] = CANDIDATE
          st.revisiting[q] = True
          st.candidates.append(q)
      st.revisits += int(drawn.size)

  # -- one batch -------------------------------------------------------------------------

  def _need(self) -> int:
    """Candidates a batch's G choice wants to look at."""
    return max(self.settings.window, self.rows_per_batch // self.min_g)

  def _ready(self) -> list[int]:
    st = self.state
    return [q for q in st.candidates if not st.served[q]]

  def _gather_candidates(self, rollout_fn: RolloutFn, round_index: Iterator[int],
                         allow_cut: bool = True) -> None:
    """Profiles / probes / starts epochs until a round has candidates to plan from
    (allow_cut: the epoch may end early here, `_cut_epoch`)."""
    st = self.state
    need = self._need()
    started = False
    while True:
      st.candidates = self._ready()
      if allow_cut and not started and self._cut_epoch():
        self._start_epoch()
        started = True
        continue
      if len(st.candidates) >= need:
        return
      if self.settings.profile:
        self._top_up_in_flight()
        if st.in_flight:
          self._probe_round(rollout_fn, next(round_index))
          continue
      elif st.frontier < self.num_queries:
        # prioritise: every prompt is a candidate from the start (taking one costs nothing
        # with profile=False), so the ordering sees the whole pool.
        self._take_unprofiled(self.num_queries if self.settings.prioritise
                              else need - len(st.candidates))
        continue
      if st.candidates:
        return  # the epoch's last candidates
      if started:
        # A fresh epoch and its probes found nothing learnable: this epoch trains every
        # prompt, most promising first, so the run goes on (a degenerate pool).
        st.candidates = np.argsort(-self.informative(), kind='stable').tolist()
        return
      self._start_epoch()
      started = True

  def _cut_epoch(self) -> bool:
    """epoch_cut > 0: whether the epoch ends here because its best ready candidate's P_inf
    (min G, the posterior the ranking reads) is below epoch_cut; if so, the candidates left
    unserved have their own evidence decayed once by evidence_decay (stale: the policy has
    moved since), so they climb later rankings instead of being forgotten. Never while
    prompts are still unprofiled or being probed (the ranking has not seen them yet)."""
    st, cfg = self.state, self.settings
    if (cfg.epoch_cut <= 0 or not st.candidates or st.in_flight
        or st.frontier < self.num_queries):
      return False
    cand = np.array(st.candidates, np.int64)
    a_Q, b_Q = self.posterior()
    if float(posterior_lib.informative_probability(a_Q[cand], b_Q[cand], self.min_g).max()) \
        >= cfg.epoch_cut:
      return False
    self._update(cand, 0.0, 0.0, cfg.evidence_decay)
    st.epoch_cuts += 1
    st.cut_unserved += int(cand.size)
    return True

  def _window(self, a_Q: np.ndarray, b_Q: np.ndarray) -> np.ndarray:
    """The candidates one round's G choice looks at: the next `window` in epoch order, or
    (prioritise) the `window` with the largest P_inf(min G), ties in epoch order."""
    st, cfg = self.state, self.settings
    cand = np.array(st.candidates, np.int64)
    if not cfg.prioritise or cand.size <= cfg.window:
      return cand[:cfg.window]
    p_inf = posterior_lib.informative_probability(a_Q[cand], b_Q[cand], self.min_g)
    return cand[np.argsort(-p_inf, kind='stable')[:cfg.window]]

  def _plan(self, posterior: tuple[np.ndarray, np.ndarray]) -> BatchPlan:
    """One training round: G for `window` candidates (`_window`), R rows at most."""
    cfg = self.settings
    a_Q, b_Q = posterior
    window = self._window(a_Q, b_Q)
    g_P = posterior_lib.choose_group_sizes(a_Q[window], b_Q[window], cfg.group_sizes,
                                   self.rows_per_batch, cfg.signal_exponent)
    if not g_P.any():  # every option below the floor of value: take the first at min G
      g_P[0] = self.min_g
    taken = g_P > 0
    return BatchPlan(window[taken], g_P[taken].astype(np.int32), 'bayes')

  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch:
    """Probes as needed, then rolls out training rounds until one batch is filled.

    post_filter=False: one round, every group trained on. post_filter=True: all-equal
    groups are dropped and further rounds refill the batch (RoundBatchBuilder's rule:
    informative groups in order while they fit), at most max_rounds rounds."""
    st, cfg = self.state, self.settings
    round_index = itertools.count()  # one rollout key per call of this step
    probe_rounds_before = st.probe_rounds
    max_rounds = cfg.max_rounds if cfg.post_filter else 1
    builder = RoundBatchBuilder(self.rows_per_batch, max_rounds)
    rounds: list[Rollout] = []
    kept = dropped = 0
    epoch_before = st.epoch
    while not builder.done and self.rows_per_batch - builder.filled_rows >= self.min_g:
      # At most one early epoch end per batch: a cut decays what it leaves, so the next
      # batch's ranking has moved (no cut-after-cut within one step).
      self._gather_candidates(rollout_fn, round_index, allow_cut=st.epoch == epoch_before)
      # One posterior per round: planning, the refill decision and the update's calibration
      # all read the state before this round's rollout.
      posterior = self.posterior()
      plan = self._plan(posterior)
      if builder.rounds and not self.refill_pays(plan, builder.filled_rows, builder.rounds,
                                                 posterior):
        st.refills_skipped += 1
        break
      layout = plan.rows(self.rows_per_batch)
      rollout = rollout_fn(layout, next(round_index), 'rollout')
      if not cfg.post_filter:
        self.observe(plan, rollout.rewards_R, layout, posterior=posterior)
        st.steps += 1
        probe_rounds = st.probe_rounds - probe_rounds_before
        return FilledBatch('bayes', layout, rollout,
                           {'rounds': probe_rounds + 1, 'profile_rounds': probe_rounds})
      free_rows = self.rows_per_batch - builder.filled_rows
      kept_P, equal_P = self.observe(plan, rollout.rewards_R, layout, free_rows, posterior)
      added = builder.add_round(layout, rollout.rewards_R)
      if added != int(plan.group_size[kept_P].sum()):
        raise AssertionError(f'batch builder kept {added} rows, the posterior update '
                             f'{int(plan.group_size[kept_P].sum())}')
      kept += int(kept_P.sum())
      dropped += int(equal_P.sum())
      rounds.append(rollout)
    batch = builder.build()
    st.steps += 1
    probe_rounds = st.probe_rounds - probe_rounds_before
    return FilledBatch('bayes', batch.layout, batch.gather_rollout(rounds),
                       {'rounds': probe_rounds + batch.rounds, 'profile_rounds': probe_rounds,
                        'train_rounds': batch.rounds, 'dapo_dropped_groups': dropped,
                        'dapo_kept_groups': kept, 'dapo_discarded_rows': batch.discarded_rows})

  def refill_pays(self, plan: BatchPlan, filled_rows: int, rounds_done: int,
                  posterior: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
    """Whether rolling out `plan` as a refill round lowers the batch's expected FLOPs per
    trained informative row (bayes.refill_lowers_cost; expected new rows = sum of
    P_inf(G) * G over the plan's groups; `posterior`: this round's, as from posterior())."""
    a_Q, b_Q = posterior if posterior is not None else self.posterior()
    expected = float(sum(
        float(posterior_lib.informative_probability(a_Q[q], b_Q[q], int(g))) * int(g)
        for q, g in zip(plan.query_index.tolist(), plan.group_size.tolist())))
    return posterior_lib.refill_lowers_cost(filled_rows, expected, rounds_done, self.rows_per_batch,
                                    self.settings.train_cost_per_row)

  def observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: RowLayout,
              free_rows: int | None = None,
              posterior: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Learns from one training round: every row updates its prompt's posterior.

    free_rows=None: every group is trained on (post_filter=False). Else the round is
    post-filtered: a group is kept iff its rewards are not all equal and it fits the
    `free_rows` still free (in plan order, as RoundBatchBuilder); an informative group that
    does not fit is not spent (its prompt stays a candidate). Returns bool [P] arrays:
    kept groups, all-equal groups. `posterior`: the round's, before this update (default:
    posterior() now)."""
    st, cfg = self.state, self.settings
    raw_R = np.asarray(rewards_R, np.float64).reshape(-1)
    valid = np.flatnonzero(layout.valid_R)
    a_Q, b_Q = posterior if posterior is not None else self.posterior()
    for q, g in zip(plan.query_index.tolist(), plan.group_size.tolist()):  # calibration
      st.expected_informative += float(posterior_lib.informative_probability(a_Q[q], b_Q[q],
                                                                             int(g)))
    self._observe_samples(layout.row_query_index_R[valid], np.clip(raw_R[valid], 0.0, 1.0),
                          cfg.evidence_decay)
    room = self.rows_per_batch if free_rows is None else int(free_rows)
    kept_P = np.zeros(plan.num_prompts, bool)
    equal_P = np.zeros(plan.num_prompts, bool)
    for p, q in enumerate(plan.query_index.tolist()):
      rows = np.flatnonzero(layout.group_id_R == p)
      r = raw_R[rows]
      informative = bool(r.max() > r.min())  # exact, as dapo_keep_groups
      equal_P[p] = not informative
      st.train_groups += 1
      st.informative_groups += int(informative)
      if st.revisiting[q]:
        st.revisits_back += int(informative)
        st.revisiting[q] = False
      st.skips[q] = 0 if informative else st.skips[q] + 1
      if free_rows is None or not informative or rows.size <= room:
        st.served[q] = True  # spent for this epoch: trained on, or dropped all-equal
        kept_P[p] = free_rows is None or informative
        room -= rows.size if kept_P[p] else 0
      else:
        st.overflow_groups += 1
      st.dropped_groups += int(free_rows is not None and not informative)
      if (self.own_informative(q) < cfg.informative_floor and st.status[q] == CANDIDATE
          and self.skippable(q)):
        st.status[q] = DEPRIORITISED
        st.skips[q] = max(int(st.skips[q]), 1)
        st.served[q] = True  # an overflow prompt deprioritised here leaves the epoch too
    st.candidates = [q for q in st.candidates if not st.served[q]]
    st.train_rounds += 1
    st.visits_since_draw += plan.num_prompts
    return kept_P, equal_P

  # -- reports and resume ----------------------------------------------------------------

  def summary(self) -> dict[str, Any]:
    st = self.state
    return {
        'profile_samples': st.profile_samples, 'probe_samples': st.probe_samples,
        'profiled_queries': int(st.frontier),
        'profile_samples_per_query': st.profile_samples / max(st.frontier, 1),
        'train_groups': st.train_groups,
        'informative_group_share': st.informative_groups / max(st.train_groups, 1),
        # Calibration: the share the posterior expected when planning the same groups.
        'expected_informative_share': st.expected_informative / max(st.train_groups, 1),
        'train_rounds': st.train_rounds, 'train_rounds_per_step': st.train_rounds / max(st.steps, 1),
        'dropped_groups': st.dropped_groups, 'overflow_groups': st.overflow_groups,
        'refills_skipped': st.refills_skipped,
        'revisits': st.revisits, 'revisits_back': st.revisits_back,
        'revisit_base': st.revisit_base, 'epochs': st.epoch,
        'deprioritised': int((st.status == DEPRIORITISED).sum()),
        'candidates': int((st.status == CANDIDATE).sum()),
        'epoch_cuts': st.epoch_cuts, 'cut_unserved': st.cut_unserved,
    }
