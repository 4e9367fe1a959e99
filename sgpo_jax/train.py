"""The run: the only place that sequences the stages.

    config -> task/data -> initial policy (HF checkpoint or cached warm start)
           -> PROFILE + ALLOCATE (allocators with needs_profile) -> RL loop
           -> summary.json, report.md, plots/

RL loop, per step: the allocator selected by config.method fills a batch (which prompts,
what G, how many generation rounds) through `rollout_fn`, which samples, scores and
charges every generated row to the FLOPs ledger; the learner takes one jitted step on the
fixed [R, T] batch (group sizes only in group_id), or none when no group of the batch has
reward spread (a logged `skipped_step`); then metrics, eval / early stop and checkpoint.
This module never names a method: allocators are plug-ins (`sgpo_jax/allocators/`).

`run` reads as its stages: `setup` -> `restore_or_init` -> (`rl_step` ->
`eval_and_stop` -> `maybe_checkpoint`)* -> `finalize`, over one `RunState`.

Determinism: the rollout RNG of step t is fold_in(seed, t); allocator state, FLOPs ledger,
pool coverage, profile and initial eval are in the checkpoint; so a run killed anywhere and
restarted with the same workdir continues with exactly the metrics an uninterrupted run writes.

Pool coverage is the trainer's, not an allocator's (`allocators/coverage.py`): the queries any
generation call sampled (`RunState.sampled_Q`) and, per query, the trained groups with
reward spread (`RunState.trained_Q`) go to summary.json's `pool_coverage`; each metrics
row's `filled_share` says how much of its batch was trained rows.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import logging

from sgpo_jax import allocators as allocators_lib
from sgpo_jax import errors, tasks
from sgpo_jax.allocators import coverage as coverage_lib
from sgpo_jax.config import check as config_check
from sgpo_jax.config import resume as resume_lib
from sgpo_jax.data import inputs as inputs_lib
from sgpo_jax.data import loading as loading_lib
from sgpo_jax.data import tokenizer as tokenizer_lib
from sgpo_jax.generate import evaluate as evaluate_lib
from sgpo_jax.generate import profiling as profile_lib
from sgpo_jax.generate import sampling_dtype as sampling_dtype_lib
from sgpo_jax.generate.continuous import ContinuousSampler
from sgpo_jax.generate.engines import make_sampler, prompt_buckets
from sgpo_jax.generate.sampler import Sampler
from sgpo_jax.model import attention as attention_lib
from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import hf as hf_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.outputs import checkpoint as checkpoint_lib
from sgpo_jax.outputs import environment
from sgpo_jax.outputs import lock as lock_lib
from sgpo_jax.outputs import metrics as metrics_lib
from sgpo_jax.outputs import paths as paths_lib
from sgpo_jax.outputs import progress as progress_lib
from sgpo_jax.outputs import report as report_lib
from sgpo_jax.parallel import processes
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.planning import dry_run as dry_run_lib
from sgpo_jax.pretrained import fetch as pretrained_fetch
from sgpo_jax.rl import learner as learner_lib
from sgpo_jax.rl import overlong as overlong_lib
from sgpo_jax.rl import warm_start as warm_start_lib
from sgpo_jax.scaling_law import early_stop as early_stop_lib
from sgpo_jax.scaling_law import runs as scaling_law_runs

ROLLOUT_STREAM = 0x5011
EVAL_STREAM = 0xE7A1


@dataclasses.dataclass
class Setup:
  """Everything built before the first RL step; notebooks use it stage by stage."""
  config: Any
  workdir: str
  mesh: Any
  tokenizer: Any
  model_cfg: model_lib.ModelConfig
  train_queries: list
  eval_queries: list
  prompt_tokens: list[list[int]]
  reward_fn: Any
  params: Any
  param_shardings: Any
  init_info: dict
  sampler: Sampler | ContinuousSampler
  ledger: flops_lib.FlopsLedger

  def sampling_params(self, params):
    """`params` in the sampler's dtype (sampling.param_dtype): one cast per call, none when
    they match (generate/sampling_dtype.py)."""
    return sampling_dtype_lib.cast_params(params, self.sampler.cfg.dtype, self.param_shardings)


def check_config(config, num_devices: int | None = None) -> None:
  """The config check, its ValueError raised as errors.ConfigError (one line in the CLI)."""
  with errors.config_errors():
    processes = jax.process_count() if num_devices is not None else 1
    config_check.check_config(config, num_devices, processes)
    allocators_lib.allocator_class(config.method)  # an unknown method fails before compute


def setup(config, workdir: str, show_progress: bool = True,
          allow_config_change: tuple[str, ...] = ()) -> Setup:
  """Checks the config, its inputs and the workdir (and, resuming, the config against the
  run's config.json: see config/resume.py; `allow_config_change` names fields that may
  change), then loads data, builds mesh, tokenizer, initial policy and sampler. Nothing is
  written to the workdir before every check has passed."""
  check_config(config, jax.device_count())
  # The workdir's storage backend and a resume's config first: neither needs the model, and a
  # first fetch of a catalog model takes minutes.
  paths_lib.check_workdir(workdir, config)
  changes = resume_lib.check_resume(config, workdir, tuple(allow_config_change))
  if config.model.get('pretrained'):  # the catalog model, fetched once into the cache
    with errors.config_errors():  # an unknown name: one line
      cached = pretrained_fetch.model_dir(config.model.pretrained)
    if os.path.abspath(cached) != os.path.abspath(config.model.hf_path):
      raise errors.ConfigError(
          f'model.pretrained={config.model.pretrained!r} is cached in {cached} but '
          f'model.hf_path={config.model.hf_path!r}; set model.hf_path to the cached folder '
          '(sgpo_jax.pretrained.fetch.model_dir) or leave model.pretrained empty.')
    try:
      with errors.config_errors():
        pretrained_fetch.ensure(config.model.pretrained, log=logging.info)
    except ConnectionError as e:
      raise errors.ConfigError(f'model.pretrained={config.model.pretrained!r} is not cached '
                               f'and cannot be fetched: {e}') from e
  # Inputs (paths, then tokenizer, checkpoint config and data parsed), before any compute
  # or write.
  with errors.config_errors():
    inputs_lib.check_paths(config)
  mesh = sharding_lib.make_mesh(config.mesh)
  tokenizer = tokenizer_lib.load_tokenizer(config.tokenizer)
  model_cfg = model_lib.ModelConfig.from_config(config.model)
  model_cfg.validate()
  if config.model.hf_path:
    with errors.config_errors():
      hf_lib.check_matches_checkpoint(model_cfg, config.model.hf_path)
    if lora_lib.enabled(model_cfg):
      with errors.config_errors():
        lora_lib.check_family(hf_lib.read_hf_config(config.model.hf_path).get('model_type', ''))
  with errors.config_errors():
    sampling_dtype_lib.resolve(config.sampling.get('param_dtype', 'auto'))  # a bad name fails now
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise errors.ConfigError(
        f'the tokenizer has {tokenizer.vocab_size} tokens but model.vocab_size='
        f'{model_cfg.vocab_size}; set model.vocab_size >= {tokenizer.vocab_size}.')
  s = config.sampling
  load = lambda split: loading_lib.load_queries(  # noqa: E731
      config.data, split, seed=config.data.seed, tokenizer=tokenizer,
      max_prompt_len=s.max_prompt_len)
  with errors.config_errors():  # a missing or malformed data file: one line
    # Roles, not dataset split names: data.split / data.eval_split name the file splits.
    train_queries = load('train')
    eval_queries = load('eval')
    inputs_lib.check_token_cap(train_queries + eval_queries, tokenizer, s.max_new_tokens)
  reward_fn = tasks.get_reward_fn(config.data)
  try:  # a user reward's contract, on a probe batch, before anything is written or computed
    tasks.startup_check(reward_fn, train_queries)
  except BaseException:
    getattr(reward_fn, 'close', lambda: None)()
    raise
  logging.info(inputs_lib.prompt_length_report(
      [len(tokenizer.encode_prompt(q.prompt)) for q in train_queries],
      prompt_buckets(config), s.max_prompt_len)[1])
  paths_lib.makedirs(paths_lib.join(workdir, 'plots'))
  if processes.is_writer():
    resume_lib.record_changes(workdir, changes, checkpoint_lib.latest_step_on_disk(
        os.path.join(workdir, 'checkpoints')))
  metrics_lib.write_json(paths_lib.join(workdir, 'config.json'), config.to_dict())
  if processes.is_writer():
    paths_lib.save_tokenizer(tokenizer, paths_lib.join(workdir, 'tokenizer'))
  params, shardings, init_info = warm_start_lib.initial_policy(
      config, model_cfg, mesh, tokenizer, train_queries, workdir, show_progress)
  if lora_lib.enabled(model_cfg):  # adapters beside the (quantized) frozen base
    params, shardings = lora_lib.attach_sharded(model_cfg, params, mesh,
                                                jax.random.key(config.seed))
  # RL and profiling on a prefix (or a difficulty-stratified selection); the warm start saw
  # the whole pool.
  with errors.config_errors():
    train_queries = loading_lib.rl_pool(train_queries, config.data)
  sampler = make_sampler(config, model_cfg, mesh, shardings, tokenizer)
  return Setup(config, workdir, mesh, tokenizer, model_cfg, train_queries, eval_queries,
               [tokenizer.encode_prompt(q.prompt) for q in train_queries], reward_fn, params,
               shardings, init_info, sampler,
               flops_lib.FlopsLedger(model_cfg, sampling_dtype=sampler.cfg.dtype))


def run_profile(su: Setup, show_progress: bool = True) -> allocators_lib.ProfileAllocation:
  """Profiles the pool under the initial policy (resumable) and allocates it."""
  config = su.config
  path = paths_lib.join(su.workdir, profile_lib.PROFILE_FILE)
  allocator_cls = allocators_lib.allocator_class(config.method)
  profile = profile_lib.profile_queries(
      su.sampler, su.sampling_params(su.params), su.train_queries, su.tokenizer, su.reward_fn,
      num_samples=config.profile.num_samples, temperature=config.profile.temperature,
      seed=config.seed, path=path, ledger=su.ledger, show_progress=show_progress,
      settled=allocator_cls.profile_settled(config) if config.profile.early_stop else None)
  return allocate(su, profile)


def allocate(su: Setup, profile: dict) -> allocators_lib.ProfileAllocation:
  """The allocator's allocation of `profile`; rewrites profile.jsonl with its fields."""
  allocation = allocators_lib.allocator_class(su.config.method).allocate(su.config, profile)
  if processes.is_writer():
    path = paths_lib.join(su.workdir, profile_lib.PROFILE_FILE)
    sampled = profile_lib.read_profile(path)  # keep each query's FLOPs share for later runs
    records = [dict(r, **{k: v for k, v in sampled.get(r['id'], {}).items()
                          if k.startswith('flops_')}) for r in allocation.profile_records()]
    tmp = path + '.tmp'
    paths_lib.write_text(tmp, '')
    metrics_lib.append_jsonl(tmp, records)
    paths_lib.replace(tmp, path)
    report_lib.plot_profile(su.workdir, allocation)
  return allocation


def make_rollout_fn(su: Setup, params, step: int,
                    sampled_Q: np.ndarray | None = None) -> allocators_lib.RolloutFn:
  """The `RolloutFn` allocators fill step `step`'s batch with (see allocators/base.py).
  Every call, whatever its category, marks the queries of its valid rows in `sampled_Q`
  (bool [num_train_queries], updated in place) when one is given."""
  step_rng = jax.random.fold_in(jax.random.fold_in(jax.random.key(su.config.seed),
                                                   ROLLOUT_STREAM), step)

  def rollout_fn(layout, round_index: int | None = None,
                 category: str = 'rollout') -> allocators_lib.Rollout:
    rng = step_rng if round_index is None else jax.random.fold_in(step_rng, round_index)
    if sampled_Q is not None:
      coverage_lib.mark_sampled(sampled_Q, layout)
    return rollout(su, params, layout, rng, category)
  return rollout_fn


def rollout(su: Setup, params, layout, rng, category: str = 'rollout') -> allocators_lib.Rollout:
  """Samples one completion per valid row of `layout` and scores it; padding rows stay
  empty. The sampler calls' FLOPs go to the ledger under `category`."""
  config, tok = su.config, su.tokenizer
  rows, n_new = layout.rows_per_batch, config.sampling.max_new_tokens
  valid_rows = np.flatnonzero(layout.valid_R)
  prompts = [su.prompt_tokens[layout.row_query_index_R[r]] for r in valid_rows]
  out = su.sampler.sample(params, prompts, valid_rows, rng,
                          temperature=config.sampling.temperature, top_p=config.sampling.top_p,
                          top_k=config.sampling.top_k)
  evaluate_lib.count_generation(su.ledger, category, su.sampler, out, len(prompts))
  tokens = np.full((rows, n_new), tok.pad_id, np.int32)
  mask = np.zeros((rows, n_new), np.int32)
  logps = np.zeros((rows, n_new), np.float32)
  rewards = np.zeros((rows,), np.float32)
  tokens[valid_rows], mask[valid_rows], logps[valid_rows] = (out.tokens_RxN, out.mask_RxN,
                                                            out.logprobs_RxN)
  queries = [su.train_queries[layout.row_query_index_R[r]] for r in valid_rows]
  rewards[valid_rows] = processes.score_across_processes(
      su.reward_fn, evaluate_lib.decode_rows(tok, out.tokens_RxN, out.mask_RxN), queries)
  if config.train.overlong_penalty_len > 0:  # DAPO's soft overlong punishment
    rewards[valid_rows] += overlong_lib.soft_overlong_penalty_R(
        out.mask_RxN.sum(axis=1), n_new, config.train.overlong_penalty_len)
  return allocators_lib.Rollout(tokens, mask, logps, rewards,
                                np.asarray(layout.row_query_index_R), pad_id=tok.pad_id)


def train_batch(su: Setup, layout, rollout: allocators_lib.Rollout) -> dict[str, np.ndarray]:
  prompts = [su.prompt_tokens[qi] if qi >= 0 else [] for qi in rollout.row_query_index_R]
  batch = learner_lib.layout_batch(prompts, rollout.tokens_RxN, rollout.mask_RxN,
                                   rollout.logps_RxN, su.config.sampling.max_prompt_len,
                                   su.tokenizer.pad_id)
  if su.config.train.overlong_mask:  # DAPO's overlong filtering: cut rows leave the loss
    batch['completion_mask_RxT1'] = overlong_lib.mask_truncated(
        batch['completion_mask_RxT1'], overlong_lib.truncated_R(
            rollout.tokens_RxN, rollout.mask_RxN, su.tokenizer.stop_token_ids))
  batch.update(rewards_R=rollout.rewards_R.astype(np.float32),
               group_id_R=np.asarray(layout.group_id_R, np.int32),
               valid_R=np.asarray(layout.valid_R, bool))
  return batch


def _useful_shares(ledger, tokens_before) -> dict[str, float]:
  """This step's real tokens over the token slots computed, for rollout and train."""
  shares = {}
  for category, (computed0, useful0) in tokens_before.items():
    computed, useful = ledger.tokens(category)
    shares[f'useful_share_{category}'] = (useful - useful0) / max(computed - computed0, 1)
  return shares


def run_eval(su: Setup, params, step: int) -> dict[str, float]:
  rng = jax.random.fold_in(jax.random.key(su.config.seed), EVAL_STREAM)
  return evaluate_lib.evaluate(su.sampler, su.sampling_params(params), su.eval_queries, su.tokenizer, su.reward_fn,
                               rng, pass_k=su.config.eval.pass_k,
                               temperature=su.config.sampling.temperature, ledger=su.ledger)


def _se(result: dict, n: int) -> float:
  if 'eval_accuracy_se' in result:
    return float(result['eval_accuracy_se'])
  return evaluate_lib.accuracy_se(result['eval_accuracy'], n) if n else 0.0


# ----------------------------------------------------------------------------------------
# The RL loop's stages


@dataclasses.dataclass
class RunState:
  """Everything the loop's stages read and update; `meta` is what checkpoints carry."""
  learner: learner_lib.Learner
  ckpt: checkpoint_lib.Checkpointer
  train_state: Any
  ref_params: Any  # the initial policy when train.kl_coef > 0, else None
  meta: dict
  resumed_step: int | None
  allocation: allocators_lib.ProfileAllocation | None = None
  allocator: allocators_lib.Allocator | None = None
  writer: metrics_lib.MetricsWriter | None = None
  stopper: Any = None
  p_hat_by_query: dict[int, float] | None = None
  # bool [num_train_queries]: sampled by some generation call so far (None: not tracked,
  # a resumed checkpoint written before coverage was kept)
  sampled_Q: np.ndarray | None = None
  # int64 [num_train_queries]: trained groups with reward spread per query (None: as above)
  trained_Q: np.ndarray | None = None
  step: int = 0
  last_eval: dict = dataclasses.field(default_factory=dict)
  stop_reason: str | None = None
  wall_start: float = dataclasses.field(default_factory=time.time)
  flops_before_step: float = 0.0  # the ledger's total when the current step began

  def wall_seconds(self) -> float:
    return self.meta.get('wall_seconds_base', 0.0) + time.time() - self.wall_start


def restore_or_init(su: Setup, show_progress: bool = True) -> RunState:
  """Learner state and meta from the latest checkpoint, or fresh; then the profile."""
  config = su.config
  learner = learner_lib.Learner(su.model_cfg, su.mesh, su.param_shardings, config,
                                config.train.num_steps)
  # With LoRA the reference is the base (B zeroed) of the current params, made each step.
  ref_params = (jax.tree.map(lambda x: x.copy(), su.params)
                if config.train.kl_coef > 0 and not lora_lib.enabled(su.model_cfg) else None)
  ckpt = checkpoint_lib.Checkpointer(paths_lib.join(su.workdir, 'checkpoints'),
                                     config.checkpoint.keep, config.checkpoint.async_save)
  train_state, meta, latest = learner.init_state(su.params), {}, None
  # The newest checkpoint that restores; broken newer ones are moved aside (checkpoint.py).
  restored = ckpt.restore_latest(train_state)
  if restored is not None:
    latest, train_state, meta = restored
    su.ledger.load_state_dict(meta['flops'])
    meta['wall_seconds_base'] = meta.get('wall_seconds', 0.0)
    logging.info('resumed from step %d in %s', latest, su.workdir)
  rs = RunState(learner, ckpt, train_state, ref_params, meta, latest, step=latest or 0)
  rs.sampled_Q, rs.trained_Q = coverage_lib.from_meta(meta, latest is not None,
                                                      len(su.train_queries))
  if rs.sampled_Q is None:
    logging.warning('the checkpoint of step %d predates pool coverage: summary.json will '
                    'have no pool_coverage', latest)
  if allocators_lib.allocator_class(config.method).needs_profile:
    rs.allocation = (allocate(su, meta['profile']) if 'profile' in meta
                     else run_profile(su, show_progress))
    if rs.sampled_Q is not None:
      rs.sampled_Q[rs.allocation.query_index[rs.allocation.n_samples > 0]] = True
    meta['profile'] = {'query_index': rs.allocation.query_index.tolist(),
                       'n_correct': rs.allocation.n_correct.tolist(),
                       'n_samples': rs.allocation.n_samples.tolist()}
    rs.p_hat_by_query = dict(zip(rs.allocation.query_index.tolist(),
                                 rs.allocation.p_hat.tolist()))
  return rs


def start_loop(su: Setup, rs: RunState) -> None:
  """Allocator (restored), metrics writer, initial eval and early stopper of the loop."""
  rs.allocator = allocators_lib.make_allocator(su.config, len(su.train_queries), rs.allocation,
                                               [q.difficulty for q in su.train_queries])
  if 'allocator' in rs.meta:
    rs.allocator.load_state_dict(rs.meta['allocator'])
  rs.writer = metrics_lib.MetricsWriter(
      su.workdir, resume_step=rs.resumed_step, wandb_project=su.config.logging.wandb_project,
      wandb_config=metrics_lib.to_jsonable(su.config.to_dict()))
  if 'eval_initial' not in rs.meta:
    rs.meta['eval_initial'] = run_eval(su, su.params, 0)
    rs.writer.write({'step': 0, 'flops_total': su.ledger.total, **rs.meta['eval_initial']})
  rs.last_eval = dict(rs.meta.get('last_eval', rs.meta['eval_initial']))
  rs.stop_reason = rs.meta.get('stop_reason')
  budget = su.config.train.flops_budget
  if (rs.stop_reason or '').startswith('flops budget') and not 0 < budget <= su.ledger.total:
    # A resume may raise the budget (config/resume.py accepts it): the run goes on from where
    # the old budget stopped it, instead of rewriting the same summary.
    logging.info('train.flops_budget is now %.3g, above the %.3g FLOPs spent: the run goes on '
                 'past its budget stop', budget, su.ledger.total)
    rs.stop_reason = None
  if su.config.train.early_stop.enabled:
    es = su.config.train.early_stop
    rs.stopper = early_stop_lib.make_stopper(
        es, su.config.train.num_steps, su.config.train.flops_budget,
        method=su.config.method, regime=su.config.regime,
        group=es.get('config_group', '') or scaling_law_runs.config_group(su.workdir),
        run=scaling_law_runs.run_key(su.workdir))
    for row in rs.writer.rows:  # replay the logged curve into a resumed stopper
      rs.stopper.observe_row(row)


def _policy_logprobs(su: Setup, rs: RunState, params, batch: dict, category: str) -> np.ndarray:
  """Per-token log-probs of `params` on the batch, charged to the ledger as `category`."""
  rows, seq_len = batch['tokens_RxT'].shape[0], batch['tokens_RxT'].shape[1] - 1
  su.ledger.add_forward(category, rows, seq_len, int(batch['valid_R'].sum()))
  return np.asarray(sharding_lib.to_host(
      rs.learner.logprobs(params, batch['tokens_RxT'], batch['mask_RxT'])))


def rl_step(su: Setup, rs: RunState) -> dict | None:
  """Fills, trains on and measures one batch; returns its metrics row (None: exhausted)."""
  t = su.config.train
  step_start = time.time()
  rs.flops_before_step = su.ledger.total
  tokens_before = {c: su.ledger.tokens(c) for c in ('rollout', 'train')}
  params = rs.train_state['params']
  filled = rs.allocator.fill_batch(make_rollout_fn(su, su.sampling_params(params), rs.step,
                                                   rs.sampled_Q))
  if filled is None:
    return None
  if not has_informative_group(filled.layout, filled.rollout.rewards_R):
    return _skipped_step(su, rs, filled, time.time() - step_start, tokens_before)
  batch = train_batch(su, filled.layout, filled.rollout)
  if t.kl_coef > 0:
    ref_params = (lora_lib.reference_params(params) if lora_lib.enabled(su.model_cfg)
                  else rs.ref_params)
    batch['ref_logp_RxT1'] = _policy_logprobs(su, rs, ref_params, batch, 'reference')
  if t.mu > 1:  # the behaviour policy's log-probs, recomputed once for the mu passes
    batch['old_logp_RxT1'] = _policy_logprobs(su, rs, params, batch, 'old_logprob')
  for _ in range(t.mu):
    rs.train_state, step_metrics = rs.learner.train_step(rs.train_state, batch)
  step_metrics = jax.device_get(step_metrics)
  learner_lib.check_finite(step_metrics, rs.step + 1)
  seq_len = batch['tokens_RxT'].shape[1] - 1
  rs.learner.count_train(su.ledger, t.rows_per_batch, seq_len, int(filled.layout.valid_R.sum()),
                         passes=t.mu)
  if rs.trained_Q is not None:
    coverage_lib.mark_trained(rs.trained_Q, filled.layout, filled.rollout.rewards_R)
  rs.step += 1
  row = _metrics_row(su, rs, filled, step_metrics, time.time() - step_start)
  row.update(_useful_shares(su.ledger, tokens_before))
  return row


def has_informative_group(layout, rewards_R: np.ndarray) -> bool:
  """Whether any group of the batch has reward spread, i.e. a non-zero group-relative
  advantage (every estimator in rl/losses.py is relative to its group). A non-finite reward
  counts as spread, so the learner's finiteness check still stops the run."""
  valid_R = np.asarray(layout.valid_R, bool)
  rewards_R = np.asarray(rewards_R, np.float64).reshape(-1)
  if not np.isfinite(rewards_R[valid_R]).all():
    return True
  return bool(allocators_lib.keep_informative_groups(
      rewards_R, layout.group_id_R, valid_R, layout.num_groups).any())


def _skipped_step(su: Setup, rs: RunState, filled: allocators_lib.FilledBatch, seconds: float,
                  tokens_before: dict) -> dict:
  """A batch without an informative group: no optimizer step (parameters and optimizer
  state unchanged, so resume stays exact), a logged `skipped_step` row; the rollout FLOPs
  were charged by rollout_fn and stay in the ledger. The step counter advances."""
  rs.step += 1
  logging.warning('step %d: no informative group in the batch (%s rounds, every group\'s '
                  'rewards all equal); optimizer step skipped, its rollout FLOPs counted',
                  rs.step, filled.info.get('rounds', 1))
  row = _metrics_row(su, rs, filled, {}, seconds)
  row['skipped_step'] = 1
  row.update(_useful_shares(su.ledger, tokens_before))
  return row


def _metrics_row(su: Setup, rs: RunState, filled: allocators_lib.FilledBatch,
                 step_metrics: dict, seconds: float) -> dict:
  layout, rollout = filled.layout, filled.rollout
  valid = np.asarray(layout.valid_R, bool)
  completion_tokens = int(rollout.mask_RxN[valid].sum())
  row = {
      'step': rs.step, 'phase': filled.phase,
      'reward_mean': float(rollout.rewards_R[valid].mean()) if valid.any() else 0.0,
      'padding_fraction': float(1.0 - valid.mean()),
      # valid rows / rows_per_batch; an allocator's own filled_share (same meaning) wins
      'filled_share': float(valid.mean()),
      'flops_total': su.ledger.total, 'flops_useful_total': su.ledger.useful_total,
      'tokens_per_second': completion_tokens / max(seconds, 1e-9),
      'n_prompts': int(layout.num_prompts),
      'group_size_mean': float(np.asarray(layout.row_group_size_R)[valid].mean())
      if valid.any() else 0.0,
      'completion_len_mean': completion_tokens / max(int(valid.sum()), 1),
      'truncated_fraction': float(overlong_lib.truncated_R(
          rollout.tokens_RxN[valid], rollout.mask_RxN[valid], su.tokenizer.stop_token_ids).mean())
      if valid.any() else 0.0,
      'seconds': seconds, **filled.info,
      **{k: float(v) for k, v in step_metrics.items()},
  }
  if rs.p_hat_by_query is not None:
    batch_queries = [int(q) for q in rollout.row_query_index_R[valid]]
    row['p_hat_mean'] = float(np.mean([rs.p_hat_by_query.get(q, np.nan)
                                       for q in batch_queries]))
  return row


def eval_due(step: int, every_steps: int, budget_fractions, budget: float,
             flops_before: float, flops_after: float) -> bool:
  """Whether the step that took the ledger from flops_before to flops_after is evaluated
  by the schedule: every `every_steps` steps, and at the first step whose cumulative FLOPs
  reach each fraction of `budget` (several fractions crossed in one step: one eval). Step 1
  also takes the fractions that profiling (counted before it) had already passed."""
  if step % every_steps == 0:
    return True
  low = -1.0 if step == 1 else flops_before
  return budget > 0 and any(low < f * budget <= flops_after for f in budget_fractions)


def eval_and_stop(su: Setup, rs: RunState, row: dict) -> None:
  """Evaluates when due, and decides (FLOPs budget, early stop) whether the run ends."""
  config, step = su.config, rs.step
  budget = config.train.flops_budget
  budget_hit = 0 < budget <= su.ledger.total
  if budget_hit:
    rs.stop_reason = f'flops budget {budget:.3g} reached at step {step}'
  if (eval_due(step, config.eval.every_steps, tuple(config.eval.at_budget_fractions), budget,
               rs.flops_before_step, su.ledger.total)
      or step == config.train.num_steps or budget_hit):
    rs.last_eval = run_eval(su, rs.train_state['params'], step)
    row.update(rs.last_eval)
  if rs.stopper is None or rs.stop_reason is not None:
    return
  decision = rs.stopper.update_row(row)
  if decision is not None and decision.should_stop:
    rs.stop_reason = f'early stop at step {step}: {decision.reason}'
    row['early_stop_reason'] = decision.reason
    row['flops_saved_estimate'] = decision.flops_saved_estimate
    logging.info(rs.stop_reason)
    if 'eval_accuracy' not in row:  # the stopping step is always evaluated
      rs.last_eval = run_eval(su, rs.train_state['params'], step)
      row.update(rs.last_eval)


def maybe_checkpoint(su: Setup, rs: RunState, replace: bool = False) -> None:
  """Saves the step when the schedule or a stop says so (replace: over the step's own
  checkpoint, when the loop learns something after saving it)."""
  config, step = su.config, rs.step
  if (step % config.checkpoint.every_steps == 0 or step == config.train.num_steps
      or rs.stop_reason):
    rs.meta.update(step=step, allocator=rs.allocator.state_dict(),
                   flops=su.ledger.state_dict(), last_eval=rs.last_eval,
                   stop_reason=rs.stop_reason, wall_seconds=rs.wall_seconds())
    coverage_lib.to_meta(rs.meta, rs.sampled_Q, rs.trained_Q)
    rs.ckpt.save(step, rs.train_state, metrics_lib.to_jsonable(rs.meta), replace=replace)


def finish_exhausted(su: Setup, rs: RunState) -> None:
  """The allocator has no batch left (sgpo with every phase empty, a plug-in that serves
  its pool once): the run ends at its last step. That step's parameters are evaluated,
  unless the step already was, so summary.json's final accuracy is the final policy's; and
  checkpointed with the stop reason (over the step's scheduled checkpoint, which lacks it and
  that eval), so a resume neither profiles nor trains nor asks the allocator again."""
  rs.stop_reason = 'allocator exhausted'
  last = rs.writer.rows[-1] if rs.writer.rows else {}
  if not (last.get('step') == rs.step and 'eval_accuracy' in last):
    rs.last_eval = run_eval(su, rs.train_state['params'], rs.step)
    rs.writer.write({'step': rs.step, 'flops_total': su.ledger.total, **rs.last_eval})
  maybe_checkpoint(su, rs, replace=True)
  logging.info('allocator exhausted after step %d: the run ends there', rs.step)


def finalize(su: Setup, rs: RunState) -> dict:
  """Closes the loop's resources; writes summary.json and report.md; returns the summary."""
  rs.ckpt.close()
  rs.writer.close()
  config = su.config
  steps_rows = [r for r in rs.writer.rows if 'reward_mean' in r]
  counts = flops_lib.param_counts(su.model_cfg)
  summary = {
      'method': config.method, 'seed': config.seed, 'steps': rs.step,
      'model_name': config.model.hf_path or 'embedded',
      'params_nonembed': counts['nonembed'], 'params_total': counts['total'],
      # trainable (LoRA adapters, else all) and total weights of the trained tree
      **lora_lib.param_counts(rs.train_state['params']),
      'eval_accuracy_initial': rs.meta['eval_initial']['eval_accuracy'],
      'eval_accuracy_final': rs.last_eval['eval_accuracy'],
      # Binomial SE of each (older checkpoints' metas may lack it: recomputed from n).
      'eval_accuracy_initial_se': _se(rs.meta['eval_initial'], len(su.eval_queries)),
      'eval_accuracy_final_se': _se(rs.last_eval, len(su.eval_queries)),
      'num_eval': len(su.eval_queries),
      'flops': su.ledger.as_dict(),
      'compiles': {'train_step': rs.learner.compile_count,
                   'sampler': su.sampler.compile_count},
      'padding_fraction': float(np.mean([r['padding_fraction'] for r in steps_rows]))
      if steps_rows else 0.0,
      'skipped_steps': sum(int(r.get('skipped_step', 0)) for r in steps_rows),
      'wall_seconds': rs.wall_seconds(),
      # The budget ends a run at the first step that reaches it: the overshoot is that step's.
      'flops_budget': float(config.train.flops_budget),
      'flops_over_budget': (max(su.ledger.total - config.train.flops_budget, 0.0)
                            if config.train.flops_budget > 0 else 0.0),
      'initial_policy': su.init_info,
      'stop_reason': rs.stop_reason,
      'environment': environment.describe(),
  }
  if rs.sampled_Q is not None:
    summary['pool_coverage'] = coverage_lib.pool_coverage(rs.sampled_Q, rs.trained_Q)
  if rs.allocation is not None:
    summary['profile'] = rs.allocation.summary()
  if hasattr(rs.allocator, 'summary'):  # an allocator's own diagnostics (sgpo_bayes)
    summary['allocator'] = rs.allocator.summary()
  metrics_lib.write_json(paths_lib.join(su.workdir, 'summary.json'), summary)
  if processes.is_writer():
    report_lib.write_report(su.workdir, summary, rs.writer.rows, rs.allocation)
  closer = getattr(su.reward_fn, 'close', None)
  if closer is not None:
    closer()
  return summary


def run(config, workdir: str, stop_after: str | None = None, show_progress: bool = True,
        after_step: Callable[[int], None] | None = None,
        allow_config_change: tuple[str, ...] = ()) -> dict:
  """Runs (or resumes) the whole job in `workdir`; returns summary.json's content.

  One run at a time holds `workdir` (outputs/lock.py); a resumed run's config must match
  the run's config.json but for `allow_config_change` and output-only fields
  (config/resume.py). `after_step(step)` is called once each step's metrics row is
  written, before its checkpoint (tests use it to inject faults).
  """
  if config.dry_run:
    check_config(config)
    with attention_lib.run_mesh_context(config):
      return dry_run_lib.dry_run(config)
  check_config(config, jax.device_count())  # a bad config fails before the workdir exists
  lock = lock_lib.WorkdirLock(workdir) if processes.is_writer() else None
  if lock is not None:
    lock.acquire()
  try:
    # A multi-chip TPU traces under the mesh, so attention_impl=auto runs the splash kernel.
    with attention_lib.run_mesh_context(config):
      return _run_locked(config, workdir, stop_after, show_progress, after_step,
                         allow_config_change)
  except Exception as e:
    full = errors.find_enospc(e)
    if full is None or isinstance(e, errors.UserError):
      raise
    # A full disk outside the checkpointer (metrics, summary): the newest checkpoint stays.
    raise errors.DiskFullError(full.filename or workdir, checkpoint_lib.latest_step_on_disk(
        os.path.join(workdir, 'checkpoints'))) from e
  finally:
    if lock is not None:
      lock.release()


def _run_locked(config, workdir, stop_after, show_progress, after_step,
                allow_config_change) -> dict:
  wall_start = time.time()
  su = setup(config, workdir, show_progress, allow_config_change)
  rs = restore_or_init(su, show_progress)
  rs.wall_start = wall_start  # wall time counts setup (warm start, profiling) too
  if stop_after == 'profile':
    rs.ckpt.close()
    return {'profile': None if rs.allocation is None else rs.allocation.summary()}
  start_loop(su, rs)
  bar = progress_lib.RunProgress(config.train.num_steps, config.train.flops_budget, rs.step,
                                 su.ledger.total, f'RL ({config.method})',
                                 disable=not show_progress)
  # Closed on any exit (SIGTERM, a full disk): the bar ends its line before the one-line
  # error main prints, which would otherwise land on the bar's unfinished line.
  with bar:
    while rs.step < config.train.num_steps and rs.stop_reason is None:
      row = rl_step(su, rs)
      if row is None:
        finish_exhausted(su, rs)
        break
      eval_and_stop(su, rs, row)
      rs.writer.write(row)
      if after_step is not None:
        after_step(rs.step)
      bar.advance(rs.step, su.ledger.total, reward=f"{row['reward_mean']:.2f}",
                  acc=f"{rs.last_eval['eval_accuracy']:.3f}",
                  tok_s=f"{row['tokens_per_second']:.0f}")
      maybe_checkpoint(su, rs)
  return finalize(su, rs)
