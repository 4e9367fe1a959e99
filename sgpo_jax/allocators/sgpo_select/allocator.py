"""`method=sgpo_select`: the posterior decides which prompts to roll out before rolling out.

`sgpo_bayes` walks its epoch: every prompt gets a group once per epoch, and its posterior only
sizes the group, so most groups it rolls out are ones it already expects to come back
all-correct or all-wrong, then drops them as DAPO does. Here each round chooses from the
whole pool (math in `selection.py`, the Beta posterior in `allocators/beta.py`):

1. Posterior per prompt: successes / failures of every sample it was given, on top of an
   empirical-Bayes prior shared by the prompts of its difficulty level (`pooled_prior`:
   'auto' = per level when the queries have a difficulty, else one for the pool), so a
   prompt nobody has rolled out is priced at what the rolled-out prompts of its level have
   turned out to be (a mastered level: trivial; the frontier level: mixed), not at a flat
   prior. `prior_forget` (0: `forget`) decays the counts that prior reads on their own: the
   calibration split (below) found the level prior over-promising unseen prompts in
   paper_like, as if it lagged a policy that moves a whole level. Tried on two development
   seeds (0.5), it neither calibrated them nor saved FLOPs (studies/allocator_comparison/
   README.md): off by default. The level carries most of what can be known before
   sampling: a prompt's own history goes stale fast, since a group that trained on it moves
   its p. The evidence decays by `forget` per training step: the policy moves, and a prompt
   unsolved 30 steps ago may not be now (a batch with no trained row takes no step: nothing
   decays).
2. Value of a group of G rollouts of prompt q: 1 - p^G - (1-p)^G (the chance it is not
   all-equal) at a Thompson draw p ~ Beta(a_q, b_q), times G**signal_exponent (1: expected
   informative rows, the unit a batch is filled in; 0: informative groups). A round's R
   rows cost the same whichever prompts hold them (the sampler's shape is fixed), so the
   greedy fill by value per row maximises the expected informative rows per FLOP.
3. Exploration, two kinds. Thompson draws give an uncertain prompt (unseen, or seen long ago
   and decayed) its chance in proportion to how likely it is to be informative. Thompson
   alone can still starve a prompt whose posterior is confidently trivial for a long stretch
   while the policy moves under it, so a floor of `explore_rows` rows per round goes to the
   prompts sampled longest ago (never-sampled first, ties in a seeded random order, at
   G = max(group_sizes)): every prompt is revisited at least once per
   pool / (explore_rows / G) rounds, a bound that does not depend on the posterior.
4. Post-filter as DAPO: all-equal groups are dropped, informative groups kept while they fit,
   further rounds refill the batch up to `max_rounds`, stopped early once `fill_target` of
   the rows hold informative groups (a round already rolled out is kept whole), or by
   `train_cost_per_row` (`dynamic_sampling.refill_lowers_cost`). A prompt is rolled out at
   most once per step. `fill_target` < 1 trades rows per step for cheaper steps; it was
   tried because, in paper_like, this rule's fuller batches taught no more per optimizer
   step than DAPO at G=4's (`compare diagnose`, by-step table). On two development seeds
   (0.33 and 0.5) the cheaper steps taught less each and saved nothing: kept as an option,
   off by default (studies/allocator_comparison/select/README.md). `train_cooldown` k > 0
   rests a prompt for k steps after a step trained on it: the informative prompts are
   mostly the few at the frontier, and the rule's extra rows were repeats of them (the
   trainer's per-prompt counts); on the development seeds resting them spread the training
   over more prompts and narrowed small_pool's gap, but the wasted share rose back to DAPO at
   G=4's and nothing was saved against it. Off by default. A step where the cooldown would
   rest every prompt (a pool smaller than k steps' trained prompts) lifts it for that step.
   Every rollout updates its prompt's evidence; every round is charged
   as 'rollout', dropped rows included.
Each batch logs `filled_share` (trained rows / R); summary.json's allocator block has the
wasted (all-equal) share of rolled-out groups, the share of the pool never sampled and the
rounds per step, and the posterior's calibration by what its evidence predates
(`calibration`): for the groups of prompts never rolled out before, of prompts trained on
since their last rollout (a step moved their p after the evidence was taken), and of the
others, the informative share the posterior expected (its mean, as planned) and the share
that came back informative. In the pre-registered studies the rule's groups came back
all-equal far more often than it expected (82.8% against 66.3% in paper_like); on
development seeds the gap sat mostly in prompts not trained on since their evidence, and in
unseen ones too, not in just-trained ones. Resume is exact: the state round-trips through
`state_dict()` and every draw comes from a stream keyed by (seed, step, round).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from sgpo_jax.allocators import beta as beta_lib
from sgpo_jax.allocators import dynamic_sampling
from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.allocators.base import (
  Allocator,
  BatchPlan,
  FilledBatch,
  Rollout,
  RolloutFn,
  register_allocator,
  stream_rng,
)
from sgpo_jax.allocators.settings import AllocatorSettings, require
from sgpo_jax.allocators.sgpo_select import selection

_THOMPSON_STREAM = 0x7405
# What a planned group's evidence predates (SelectState.calib_*; summary 'calibration').
CALIBRATION_KINDS = ('unseen', 'trained_since', 'untrained_since')
_EXPLORE_ORDER_STREAM = 0xE8F1


@dataclasses.dataclass(frozen=True)
class SelectSettings(AllocatorSettings):
  """config.sgpo_select: its defaults and range checks. group_sizes is stored sorted."""
  section: ClassVar[str] = 'sgpo_select'
  group_sizes: tuple[int, ...] = (2, 4)  # candidate G; rows_per_batch must be a multiple of each
  prior_alpha: float = 0.5  # base Beta prior (Jeffreys); the pooled prior is built on it
  prior_beta: float = 0.5
  # 'auto' (difficulty when the queries have one, else pool) | 'difficulty' | 'pool' | 'none'
  pooled_prior: str = 'auto'
  pooled_prior_strength: float = 1.0  # the base prior counts as this many seen prompts
  pooled_max_concentration: float = 8.0  # a pooled prior is worth at most this many samples
  forget: float = 0.9  # evidence kept per training step (1: never forget)
  # Evidence kept per step for the pooled prior alone (0: `forget`, one set of counts).
  prior_forget: float = 0.0
  signal_exponent: float = 1.0  # group value = P_inf * G**this (1: informative rows)
  explore_rows: int = 8  # rows per round for the prompts sampled longest ago (0: none)
  max_rounds: int = 4  # rollout rounds per batch, then padded (as DAPO)
  train_cost_per_row: float = 0.0  # > 0: stop refilling when a round would not pay
  fill_target: float = 1.0  # stop refilling once this share of rows_per_batch is trained on
  train_cooldown: int = 0  # a prompt trained on is not rolled out for this many steps

  def check(self) -> None:
    object.__setattr__(self, 'group_sizes',
                       rows_lib.check_group_sizes(self.group_sizes, 'sgpo_select.group_sizes',
                                                  minimum=2))
    require(self.prior_alpha > 0 and self.prior_beta > 0,
            f'sgpo_select.prior_alpha={self.prior_alpha} and prior_beta={self.prior_beta} '
            'must be > 0 (e.g. 0.5, the Jeffreys prior).')
    require(self.pooled_prior in ('auto', 'none', 'difficulty', 'pool'),
            f"sgpo_select.pooled_prior={self.pooled_prior!r} must be 'auto' (per difficulty "
            "level when the queries have one, else one for the pool), 'difficulty', 'pool' "
            "or 'none' (every prompt starts at the base prior).")
    require(self.pooled_prior_strength >= 0,
            f'sgpo_select.pooled_prior_strength={self.pooled_prior_strength} must be >= 0.')
    require(self.pooled_max_concentration >= 0.5,
            f'sgpo_select.pooled_max_concentration={self.pooled_max_concentration} must be '
            '>= 0.5 (e.g. 8).')
    require(0.0 < self.forget <= 1.0,
            f'sgpo_select.forget={self.forget} must be in (0, 1] (evidence kept per step; '
            '1 = never forget), e.g. 0.9.')
    require(self.prior_forget == 0.0 or 0.0 < self.prior_forget <= 1.0,
            f'sgpo_select.prior_forget={self.prior_forget} must be 0 (the pooled prior reads '
            'the evidence `forget` keeps) or in (0, 1] (its own decay per step), e.g. 0.5.')
    require(self.signal_exponent >= 0,
            f'sgpo_select.signal_exponent={self.signal_exponent} must be >= 0 (0: '
            'informative groups, 1: informative rows).')
    max_g = self.group_sizes[-1]
    require(isinstance(self.explore_rows, int) and not isinstance(self.explore_rows, bool)
            and self.explore_rows >= 0 and self.explore_rows % max_g == 0,
            f'sgpo_select.explore_rows={self.explore_rows!r} must be 0 or a multiple of the '
            f'largest group size {max_g} (exploration groups are of that size), e.g. {max_g}.')
    require(isinstance(self.max_rounds, int) and not isinstance(self.max_rounds, bool)
            and self.max_rounds >= 1,
            f'sgpo_select.max_rounds={self.max_rounds!r} must be an integer >= 1.')
    require(self.train_cost_per_row >= 0,
            f'sgpo_select.train_cost_per_row={self.train_cost_per_row} must be >= 0 (0: '
            'refill up to max_rounds).')
    require(isinstance(self.train_cooldown, int) and not isinstance(self.train_cooldown, bool)
            and self.train_cooldown >= 0,
            f'sgpo_select.train_cooldown={self.train_cooldown!r} must be an integer >= 0 '
            '(steps a prompt rests after a step trained on it; 0: none).')
    require(0.0 < self.fill_target <= 1.0,
            f'sgpo_select.fill_target={self.fill_target} must be in (0, 1] (the share of '
            'train.rows_per_batch after which no further round is rolled out; 1: fill the '
            'batch, as DAPO), e.g. 0.33.')

  def check_rows_per_batch(self, rows_per_batch: int) -> None:
    super().check_rows_per_batch(rows_per_batch)
    require(self.explore_rows < rows_per_batch,
            f'sgpo_select.explore_rows={self.explore_rows} must be below '
            f'train.rows_per_batch={rows_per_batch}, or no row is left for the posterior.')


@dataclasses.dataclass
class SelectState:
  """Everything that changes while running (JSON round-trip in state_dict)."""
  succ: np.ndarray  # [Q] float64 decayed successes
  fail: np.ndarray  # [Q] float64 decayed failures
  # [Q] float64 sum of squared sample weights (each sample enters at 1 and decays with the
  # counts): the binomial noise of the decayed rate, for the pooled prior (beta.noise_factor).
  weight_sq: np.ndarray
  # [Q] float64 the same three, decayed by `prior_forget` for the pooled prior (equal to the
  # above when prior_forget is 0).
  prior_succ: np.ndarray
  prior_fail: np.ndarray
  prior_weight_sq: np.ndarray
  last_step: np.ndarray  # [Q] int32 last step the prompt was rolled out (-1 = never)
  times_sampled: np.ndarray  # [Q] int32 groups rolled out
  last_trained: np.ndarray  # [Q] int32 last step a group of it was trained on (-1 = never)
  steps: int = 0
  # Whether the last batch held a trained row: a batch without one takes no optimizer step
  # (the trainer skips it), so the policy did not move and the evidence is not forgotten.
  last_batch_trained: bool = True
  # Diagnostics (summary.json 'allocator' block).
  train_groups: int = 0  # groups rolled out
  informative_groups: int = 0
  expected_informative: float = 0.0  # sum of posterior-mean P_inf over them, as planned
  explore_groups: int = 0
  explore_informative: int = 0
  train_rounds: int = 0
  dropped_groups: int = 0
  overflow_groups: int = 0
  refills_skipped: int = 0
  filled_rows: int = 0  # trained rows over all batches
  # Per CALIBRATION_KINDS: groups rolled out, their summed posterior-mean P_inf as planned,
  # and how many came back informative.
  calib_groups: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3, np.int64))
  calib_expected: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
  calib_informative: np.ndarray = dataclasses.field(
      default_factory=lambda: np.zeros(3, np.int64))


@register_allocator('sgpo_select')
class SelectAllocator(Allocator):
  """Chooses each round's prompts and G from the whole pool; see the module docstring."""
  Settings = SelectSettings
  uses_strata = True

  def __init__(self, num_queries: int, rows_per_batch: int, settings: SelectSettings,
               seed: int = 0, strata: Any = None):
    if num_queries < 1:
      raise ValueError(f'num_queries={num_queries}: the training pool is empty')
    settings.check_rows_per_batch(rows_per_batch)
    self.num_queries = int(num_queries)
    self.rows_per_batch = int(rows_per_batch)
    self.settings = settings
    self.seed = int(seed)
    self.stratum_Q = beta_lib.stratum_ids(settings.pooled_prior, strata, self.num_queries,
                                          SelectSettings.section)
    # Exploration ties (never-sampled prompts) in a fixed random order of the pool.
    self.explore_rank_Q = np.argsort(stream_rng(self.seed, _EXPLORE_ORDER_STREAM)
                                     .permutation(self.num_queries))
    q = self.num_queries
    self.state = SelectState(succ=np.zeros(q), fail=np.zeros(q), weight_sq=np.zeros(q),
                             prior_succ=np.zeros(q), prior_fail=np.zeros(q),
                             prior_weight_sq=np.zeros(q),
                             last_step=np.full(q, -1, np.int32),
                             times_sampled=np.zeros(q, np.int32),
                             last_trained=np.full(q, -1, np.int32))

  @classmethod
  def from_config(cls, config: Any, num_queries: int, profile: Any = None,
                  strata: Any = None) -> SelectAllocator:
    del profile  # it needs none: unseen prompts are priced by the pooled prior
    return cls(num_queries, int(config.train.rows_per_batch),
               SelectSettings.from_config(config.sgpo_select), int(config.seed), strata)

  # -- posterior -------------------------------------------------------------------------

  def posterior(self) -> tuple[np.ndarray, np.ndarray]:
    """float64 [Q] (a, b): each prompt's decayed evidence on its stratum's prior."""
    st, cfg = self.state, self.settings
    if self.stratum_Q is None:
      return cfg.prior_alpha + st.succ, cfg.prior_beta + st.fail
    a_S, b_S = beta_lib.pooled_prior(
        st.prior_succ, st.prior_fail, self.stratum_Q, cfg.prior_alpha, cfg.prior_beta,
        cfg.pooled_prior_strength, cfg.pooled_max_concentration,
        beta_lib.noise_factor(st.prior_succ + st.prior_fail, st.prior_weight_sq))
    return a_S[self.stratum_Q] + st.succ, b_S[self.stratum_Q] + st.fail

  def load_state_dict(self, state: dict) -> None:
    # A checkpoint from before weight_sq was kept: every sample counted as undecayed, the
    # estimate that version used (its pooled prior continues as it was).
    if 'weight_sq' not in state and 'succ' in state:
      state = {**state, 'weight_sq': list(np.add(state['succ'], state['fail']))}
    state = {'last_batch_trained': True, **state}  # older: forgot after every step
    for key in ('succ', 'fail', 'weight_sq'):  # older: one set of counts (prior_forget 0)
      if key in state:
        state.setdefault('prior_' + key, np.array(state[key], np.float64))  # a copy
    for key in ('calib_groups', 'calib_expected', 'calib_informative'):
      state.setdefault(key, [0] * len(CALIBRATION_KINDS))  # older: counted from the resume on
    super().load_state_dict(state)

  # -- one round -------------------------------------------------------------------------

  def plan_round(self, round_index: int, eligible_Q: np.ndarray,
                 posterior: tuple[np.ndarray, np.ndarray]) -> tuple[BatchPlan, int]:
    """The prompts and G of one round: the Thompson greedy fill, then the exploration
    floor's prompts (sampled longest ago) at the largest G. Returns (plan, explore count)."""
    st, cfg = self.state, self.settings
    sizes = cfg.group_sizes
    max_g = sizes[-1]
    explore_Q = selection.least_recent(st.last_step, eligible_Q, cfg.explore_rows // max_g,
                                       self.explore_rank_Q)
    ok_Q = eligible_Q.copy()
    ok_Q[explore_Q] = False
    a_Q, b_Q = posterior
    rng = stream_rng(self.seed, _THOMPSON_STREAM, st.steps, round_index)
    p_Q = rng.beta(a_Q, b_Q)
    value_QxS = (selection.informative_given_p(p_Q, sizes)
                 * np.asarray(sizes, np.float64) ** cfg.signal_exponent)
    query, group = selection.greedy_fill(value_QxS, sizes,
                                         self.rows_per_batch - explore_Q.size * max_g, ok_Q)
    if query.size + explore_Q.size == 0 and round_index == 0:
      # No group is worth anything to the draws (every draw at exactly 0 or 1) and no
      # exploration rows: a step still needs one round, so the longest-unsampled prompts
      # fill it at the smallest G.
      query = selection.least_recent(st.last_step, ok_Q, self.rows_per_batch // sizes[0],
                                     self.explore_rank_Q)
      group = np.full(query.size, sizes[0], np.int32)
    plan = BatchPlan(np.concatenate([query, explore_Q]).astype(np.int64),
                     np.concatenate([group, np.full(explore_Q.size, max_g, np.int32)]),
                     'select')
    return plan, int(explore_Q.size)

  def _expected_rows(self, plan: BatchPlan, posterior: tuple[np.ndarray, np.ndarray]
                     ) -> np.ndarray:
    """Posterior-mean P_inf of each planned group [P]."""
    a_Q, b_Q = posterior
    return np.array([float(beta_lib.informative_probability(a_Q[q], b_Q[q], int(g)))
                     for q, g in zip(plan.query_index.tolist(), plan.group_size.tolist())])

  def calibration_kind(self, query_P: np.ndarray) -> np.ndarray:
    """int [P] index into CALIBRATION_KINDS, before the round's evidence is added: never
    rolled out; trained on since its last rollout (a step's rollouts come before its update,
    so a prompt trained in the step that rolled it out counts); or neither."""
    st = self.state
    last_P, trained_P = st.last_step[query_P], st.last_trained[query_P]
    return np.where(st.times_sampled[query_P] == 0, 0,
                    np.where((trained_P >= 0) & (trained_P >= last_P), 1, 2))

  def _observe(self, plan: BatchPlan, rewards_R: np.ndarray, layout: rows_lib.RowLayout,
               explore: int, expected_P: np.ndarray) -> None:
    """Evidence and counters from one round (its last `explore` groups are exploration's;
    expected_P: each group's posterior-mean P_inf as planned)."""
    st = self.state
    kind_P = self.calibration_kind(plan.query_index)
    raw_R = np.asarray(rewards_R, np.float64).reshape(-1)
    valid = np.flatnonzero(layout.valid_R)
    q_R = layout.row_query_index_R[valid]
    success_R = np.clip(raw_R[valid], 0.0, 1.0)
    for succ, fail, weight_sq in ((st.succ, st.fail, st.weight_sq),
                                  (st.prior_succ, st.prior_fail, st.prior_weight_sq)):
      np.add.at(succ, q_R, success_R)
      np.add.at(fail, q_R, 1.0 - success_R)
      np.add.at(weight_sq, q_R, 1.0)
    informative_P = np.zeros(plan.num_prompts, bool)
    for p in range(plan.num_prompts):
      r = raw_R[layout.group_id_R == p]
      informative_P[p] = bool(r.max() > r.min())  # exact, as keep_informative_groups
    np.add.at(st.calib_groups, kind_P, 1)
    np.add.at(st.calib_expected, kind_P, expected_P)
    np.add.at(st.calib_informative, kind_P, informative_P.astype(np.int64))
    st.last_step[plan.query_index] = st.steps
    st.times_sampled[plan.query_index] += 1
    st.train_groups += plan.num_prompts
    st.informative_groups += int(informative_P.sum())
    st.explore_groups += explore
    st.explore_informative += int(informative_P[plan.num_prompts - explore:].sum())
    st.train_rounds += 1

  def fill_batch(self, rollout_fn: RolloutFn) -> FilledBatch:
    """Rounds planned from the whole pool until the batch is filled or max_rounds ran."""
    st, cfg = self.state, self.settings
    if st.steps > 0 and st.last_batch_trained:  # the policy moved by one step since then
      st.succ, st.fail = selection.forget(st.succ, st.fail, cfg.forget)
      st.weight_sq = beta_lib.decay_sq(st.weight_sq, cfg.forget)
      prior_forget = cfg.prior_forget or cfg.forget
      st.prior_succ, st.prior_fail = selection.forget(st.prior_succ, st.prior_fail, prior_forget)
      st.prior_weight_sq = beta_lib.decay_sq(st.prior_weight_sq, prior_forget)
    builder = dynamic_sampling.RoundBatchBuilder(self.rows_per_batch, cfg.max_rounds)
    eligible_Q = np.ones(self.num_queries, bool)  # one group per prompt per step
    if cfg.train_cooldown:
      rested_Q = (st.last_trained < 0) | (st.steps - st.last_trained > cfg.train_cooldown)
      if rested_Q.any():  # else every prompt trained within k steps: no cooldown this step
        eligible_Q &= rested_Q
    rounds: list[Rollout] = []
    explored = 0
    min_g = cfg.group_sizes[0]
    enough = cfg.fill_target * self.rows_per_batch
    while (not builder.done and self.rows_per_batch - builder.filled_rows >= min_g
           and builder.filled_rows < enough and eligible_Q.any()):
      posterior = self.posterior()
      plan, explore = self.plan_round(builder.rounds, eligible_Q, posterior)
      if plan.num_prompts == 0:
        break
      expected_P = self._expected_rows(plan, posterior)
      if builder.rounds and not dynamic_sampling.refill_lowers_cost(
          builder.filled_rows, float(np.sum(expected_P * plan.group_size)), builder.rounds,
          self.rows_per_batch, cfg.train_cost_per_row):
        st.refills_skipped += 1
        break
      layout = plan.rows(self.rows_per_batch)
      rollout = rollout_fn(layout, builder.rounds, 'rollout')
      st.expected_informative += float(expected_P.sum())
      self._observe(plan, rollout.rewards_R, layout, explore, expected_P)
      explored += explore
      builder.add_round(layout, rollout.rewards_R)
      eligible_Q[plan.query_index] = False
      rounds.append(rollout)
    batch = builder.build()
    kept_R = np.asarray(batch.layout.valid_R, bool)
    st.last_trained[np.asarray(batch.layout.row_query_index_R)[kept_R]] = st.steps
    st.dropped_groups += batch.dropped_groups
    st.overflow_groups += batch.overflow_groups
    st.filled_rows += batch.layout.num_valid_rows
    st.last_batch_trained = batch.layout.num_valid_rows > 0
    st.steps += 1
    info = dynamic_sampling.round_info(batch)
    info.update(train_rounds=batch.rounds, explore_groups=explored,
                filled_share=batch.layout.num_valid_rows / self.rows_per_batch)
    return FilledBatch('select', batch.layout, batch.gather_rollout(rounds), info)

  # -- reports ---------------------------------------------------------------------------

  def summary(self) -> dict[str, Any]:
    st = self.state
    groups = max(st.train_groups, 1)
    return {
        'train_groups': st.train_groups,
        'informative_group_share': st.informative_groups / groups,
        'expected_informative_share': st.expected_informative / groups,
        'train_rounds': st.train_rounds,
        'train_rounds_per_step': st.train_rounds / max(st.steps, 1),
        'dropped_groups': st.dropped_groups, 'overflow_groups': st.overflow_groups,
        'refills_skipped': st.refills_skipped,
        'filled_share': st.filled_rows / max(st.steps * self.rows_per_batch, 1),
        'never_sampled_share': float(np.mean(st.times_sampled == 0)),
        'explore_groups': st.explore_groups,
        'explore_informative_share': st.explore_informative / max(st.explore_groups, 1),
        'calibration': {
            kind: {'groups': int(st.calib_groups[k]),
                   'expected_informative_share': (float(st.calib_expected[k] / st.calib_groups[k])
                                                  if st.calib_groups[k] else None),
                   'informative_share': (float(st.calib_informative[k] / st.calib_groups[k])
                                         if st.calib_groups[k] else None)}
            for k, kind in enumerate(CALIBRATION_KINDS)},
    }
