"""The run: the only place that sequences the stages.

    config -> task/data -> initial policy (HF checkpoint or cached warm start)
           -> PROFILE (sgpo) -> ALLOCATE -> RL loop -> summary.json, report.md, plots/

RL loop, per step: the allocator plans a batch (which prompts, what G), the sampler rolls
out, the task scores, the learner takes one jitted step on the fixed [R, T] batch (group
sizes only in group_id), then metrics, eval, checkpoint, early stop. DAPO assembles its
batch over several generation rounds; every round's FLOPs are counted.

Determinism: the rollout RNG of step t is fold_in(seed, t); allocator state, FLOPs ledger,
profile and initial eval are in the checkpoint; so a run killed anywhere and restarted
with the same workdir continues with exactly the metrics an uninterrupted run writes.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Any

import jax
import numpy as np
from absl import logging
from tqdm.auto import tqdm

from sgpo_jax import allocators as allocators_lib
from sgpo_jax import checkpoint as checkpoint_lib
from sgpo_jax import config_check
from sgpo_jax import data as data_lib
from sgpo_jax import evaluate as evaluate_lib
from sgpo_jax import flops as flops_lib
from sgpo_jax import learner as learner_lib
from sgpo_jax import metrics as metrics_lib
from sgpo_jax import model as model_lib
from sgpo_jax import profile as profile_lib
from sgpo_jax import report as report_lib
from sgpo_jax import sgpo as sgpo_lib
from sgpo_jax import sharding as sharding_lib
from sgpo_jax import tasks
from sgpo_jax import tokenizer as tokenizer_lib
from sgpo_jax import warm_start as warm_start_lib
from sgpo_jax.sampling import Sampler

ROLLOUT_STREAM = 0x5011
EVAL_STREAM = 0xE7A1
# A phase-end batch of a few valid rows has a meaningless reward mean: keep it out of fits.
MAX_PADDING_FOR_FIT = 0.75


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
  sampler: Sampler
  ledger: flops_lib.FlopsLedger


def setup(config, workdir: str, show_progress: bool = True) -> Setup:
  """Checks the config, loads data, builds mesh, tokenizer, initial policy and sampler."""
  config_check.check_config(config, jax.device_count())
  os.makedirs(os.path.join(workdir, 'plots'), exist_ok=True)
  metrics_lib.write_json(os.path.join(workdir, 'config.json'), config.to_dict())
  mesh = sharding_lib.make_mesh(config.mesh)
  tokenizer = tokenizer_lib.load_tokenizer(config.tokenizer)
  if sharding_lib.is_writer():
    tokenizer.save(os.path.join(workdir, 'tokenizer'))
  model_cfg = model_lib.ModelConfig.from_config(config.model)
  model_cfg.validate()
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise ValueError(f'the tokenizer has {tokenizer.vocab_size} tokens but model.vocab_size='
                     f'{model_cfg.vocab_size}; set model.vocab_size >= {tokenizer.vocab_size}.')
  s = config.sampling
  load = lambda split: data_lib.load_queries(  # noqa: E731
      config.data, split, seed=config.data.seed, tokenizer=tokenizer,
      max_prompt_len=s.max_prompt_len)
  train_queries = load(config.data.split)
  eval_queries = load(config.data.eval_split)
  reward_fn = tasks.get_reward_fn(config.data)
  params, shardings, init_info = warm_start_lib.initial_policy(
      config, model_cfg, mesh, tokenizer, train_queries, workdir, show_progress)
  if config.data.rl_pool_size:  # RL and profiling on a prefix; the warm start saw it all
    train_queries = train_queries[:config.data.rl_pool_size]
  sampler = Sampler(model_cfg, mesh, shardings, rows=config.train.rows_per_batch,
                    max_prompt_len=s.max_prompt_len, max_new_tokens=s.max_new_tokens,
                    stop_ids=tokenizer.stop_token_ids, pad_id=tokenizer.pad_id,
                    bos_id=tokenizer.bos_id, min_prompt_bucket=s.min_prompt_bucket)
  return Setup(config, workdir, mesh, tokenizer, model_cfg, train_queries, eval_queries,
               [tokenizer.encode_prompt(q.prompt) for q in train_queries], reward_fn, params,
               shardings, init_info, sampler, flops_lib.FlopsLedger(model_cfg))


def run_profile(su: Setup, show_progress: bool = True) -> sgpo_lib.Allocation:
  """Profiles the pool under the initial policy (resumable) and allocates it."""
  config = su.config
  path = os.path.join(su.workdir, profile_lib.PROFILE_FILE)
  profile = profile_lib.profile_queries(
      su.sampler, su.params, su.train_queries, su.tokenizer, su.reward_fn,
      num_samples=config.profile.num_samples, temperature=config.profile.temperature,
      seed=config.seed, path=path, ledger=su.ledger, show_progress=show_progress,
      settled=_bucket_settled(config) if config.profile.early_stop else None)
  return allocate(su, profile)


def _bucket_settled(config):
  k = int(config.profile.num_samples)
  return lambda n_correct, n_drawn: sgpo_lib.bucket_settled(n_correct, n_drawn, k, config.sgpo)


def allocate(su: Setup, profile: dict) -> sgpo_lib.Allocation:
  allocation = sgpo_lib.allocate(profile, su.config.sgpo, su.config.seed)
  if sharding_lib.is_writer():
    path = os.path.join(su.workdir, profile_lib.PROFILE_FILE)
    sampled = profile_lib.read_profile(path)  # keep each query's FLOPs share for later runs
    records = [dict(r, **{k: v for k, v in sampled.get(r['id'], {}).items()
                          if k.startswith('flops_')}) for r in allocation.profile_records()]
    tmp = path + '.tmp'
    open(tmp, 'w').close()
    metrics_lib.append_jsonl(tmp, records)
    os.replace(tmp, path)
    report_lib.plot_profile(su.workdir, allocation)
  return allocation


def _rollout(su: Setup, params, layout, rng, category: str = 'rollout') -> dict[str, np.ndarray]:
  """Samples one completion per valid row of `layout`; padding rows stay empty."""
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
  rewards[valid_rows] = sharding_lib.score_across_processes(
      su.reward_fn, evaluate_lib.decode_rows(tok, out.tokens_RxN, out.mask_RxN), queries)
  return dict(tokens=tokens, mask=mask, logps=logps, rewards=rewards,
              row_query_index=np.asarray(layout.row_query_index_R))


def collect_batch(su: Setup, allocator, params, step: int) -> tuple[Any, Any, dict, dict] | None:
  """Plans, rolls out and scores one RL batch. Returns (plan, layout, rollout, info)."""
  rows = su.config.train.rows_per_batch
  step_rng = jax.random.fold_in(jax.random.fold_in(jax.random.key(su.config.seed),
                                                   ROLLOUT_STREAM), step)
  if hasattr(allocator, 'fill_batch'):  # the allocator rolls out itself (probes, profile)
    calls = []

    def rollout_fn(layout, round_index, category):
      calls.append(category)
      return _rollout(su, params, layout, jax.random.fold_in(step_rng, round_index), category)

    plan, layout, rollout = allocator.fill_batch(rollout_fn)
    return plan, layout, rollout, {'rounds': len(calls),
                                   'profile_rounds': calls.count('profile')}
  if not hasattr(allocator, 'new_batch_builder'):  # one plan per step; DAPO/GRESO: rounds
    plan = allocator.next_plan()
    if plan is None:
      return None
    layout = plan.rows(rows)
    rollout = _rollout(su, params, layout, step_rng)
    allocator.observe(plan, rollout['rewards'], layout)
    return plan, layout, rollout, {'rounds': 1}
  builder = allocator.new_batch_builder()
  rounds, plan = [], None
  while not builder.done:
    plan = allocator.next_plan()
    layout = plan.rows(rows)
    rollout = _rollout(su, params, layout, jax.random.fold_in(step_rng, builder.rounds))
    allocator.observe(plan, rollout['rewards'], layout)
    builder.add_round(layout, rollout['rewards'])
    rounds.append(rollout)
  batch = builder.build()
  gathered = {
      'tokens': batch.gather([r['tokens'] for r in rounds], fill=su.tokenizer.pad_id),
      'mask': batch.gather([r['mask'] for r in rounds], fill=0),
      'logps': batch.gather([r['logps'] for r in rounds], fill=0.0),
      'rewards': batch.rewards_R,
      'row_query_index': batch.gather([r['row_query_index'] for r in rounds], fill=-1),
  }
  info = {'rounds': batch.rounds, 'dapo_dropped_groups': batch.dropped_groups,
          'dapo_discarded_rows': batch.discarded_rows, 'dapo_kept_groups': batch.kept_groups}
  if hasattr(allocator, 'step_info'):
    info.update(allocator.step_info())
  return plan, batch.layout, gathered, info


def train_batch(su: Setup, layout, rollout) -> dict[str, np.ndarray]:
  prompts = [su.prompt_tokens[qi] if qi >= 0 else [] for qi in rollout['row_query_index']]
  batch = learner_lib.layout_batch(prompts, rollout['tokens'], rollout['mask'], rollout['logps'],
                                   su.config.sampling.max_prompt_len, su.tokenizer.pad_id)
  batch.update(rewards_R=rollout['rewards'].astype(np.float32),
               group_id_R=np.asarray(layout.group_id_R, np.int32),
               valid_R=np.asarray(layout.valid_R, bool))
  return batch


def run_eval(su: Setup, params, step: int) -> dict[str, float]:
  rng = jax.random.fold_in(jax.random.key(su.config.seed), EVAL_STREAM)
  return evaluate_lib.evaluate(su.sampler, params, su.eval_queries, su.tokenizer, su.reward_fn,
                               rng, pass_k=su.config.eval.pass_k,
                               temperature=su.config.sampling.temperature, ledger=su.ledger)


def _early_stopper(config):
  if not config.train.early_stop.enabled:
    return None
  from sgpo_jax.scaling_law.early_stop import EarlyStopper
  return EarlyStopper(config.train.early_stop, config.train.num_steps)


def run(config, workdir: str, stop_after: str | None = None, show_progress: bool = True
        ) -> dict:
  """Runs (or resumes) the whole job in `workdir`; returns summary.json's content."""
  if config.dry_run:
    config_check.check_config(config)
    from sgpo_jax import dry_run
    return dry_run.dry_run(config)
  wall_start = time.time()
  su = setup(config, workdir, show_progress)
  t, num_steps, rows = config.train, config.train.num_steps, config.train.rows_per_batch
  learner = learner_lib.Learner(su.model_cfg, su.mesh, su.param_shardings, config, num_steps)
  ref_params = jax.tree.map(lambda x: x.copy(), su.params) if t.kl_coef > 0 else None
  state = learner.init_state(su.params)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'), config.checkpoint.keep,
                                     config.checkpoint.async_save)
  latest = ckpt.latest_step()
  meta: dict = {}
  if latest is not None:
    state, meta = ckpt.restore(latest, state)
    su.ledger.load_state_dict(meta['flops'])
    meta['wall_seconds_base'] = meta.get('wall_seconds', 0.0)
    logging.info('resumed from step %d in %s', latest, workdir)

  allocation = None
  if config.method == 'sgpo':
    allocation = allocate(su, meta['profile']) if 'profile' in meta else run_profile(
        su, show_progress)
    meta['profile'] = {'query_index': allocation.query_index.tolist(),
                       'n_correct': allocation.n_correct.tolist(),
                       'n_samples': allocation.n_samples.tolist()}
  if stop_after == 'profile':
    ckpt.close()
    return {'profile': None if allocation is None else allocation.summary()}

  allocator = allocators_lib.make_allocator(config, len(su.train_queries), allocation)
  if 'allocator' in meta:
    allocator.load_state_dict(meta['allocator'])
  writer = metrics_lib.MetricsWriter(workdir, resume_step=latest)
  if 'eval_initial' not in meta:
    meta['eval_initial'] = run_eval(su, su.params, 0)
    writer.write({'step': 0, 'flops_total': su.ledger.total, **meta['eval_initial']})
  stopper = _early_stopper(config)
  if stopper is not None:
    for row in writer.rows:
      if 'reward_mean' in row and row['padding_fraction'] <= MAX_PADDING_FOR_FIT:
        stopper.observe(row['step'], row['reward_mean'], row['flops_total'])
  p_hat_by_query = None if allocation is None else dict(zip(allocation.query_index.tolist(),
                                                            allocation.p_hat.tolist()))

  step = latest or 0
  last_eval = dict(meta.get('last_eval', meta['eval_initial']))
  stop_reason = meta.get('stop_reason')
  bar = tqdm(total=num_steps, initial=step, desc=f'RL ({config.method})',
             disable=not show_progress)
  while step < num_steps and stop_reason is None:
    step_start = time.time()
    params = state['params']
    collected = collect_batch(su, allocator, params, step)
    if collected is None:
      stop_reason = 'allocator exhausted'
      break
    plan, layout, rollout, info = collected
    batch = train_batch(su, layout, rollout)
    seq_len = batch['tokens_RxT'].shape[1] - 1
    valid_rows = int(layout.valid_R.sum())
    if t.kl_coef > 0:
      batch['ref_logp_RxT1'] = np.asarray(sharding_lib.to_host(
          learner.logprobs(ref_params, batch['tokens_RxT'], batch['mask_RxT'])))
      su.ledger.add_forward('reference', rows, seq_len, valid_rows)
    if t.mu > 1:
      batch['old_logp_RxT1'] = np.asarray(sharding_lib.to_host(
          learner.logprobs(params, batch['tokens_RxT'], batch['mask_RxT'])))
      su.ledger.add_forward('reference', rows, seq_len, valid_rows)
    for _ in range(t.mu):
      state, step_metrics = learner.train_step(state, batch)
    step_metrics = jax.device_get(step_metrics)
    learner_lib.check_finite(step_metrics, step + 1)
    su.ledger.add_train(rows, seq_len, valid_rows, passes=t.mu)
    step += 1

    valid = np.asarray(layout.valid_R, bool)
    completion_tokens = int(rollout['mask'][valid].sum())
    seconds = time.time() - step_start
    row = {
        'step': step, 'phase': plan.phase,
        'reward_mean': float(rollout['rewards'][valid].mean()) if valid.any() else 0.0,
        'padding_fraction': float(1.0 - valid.mean()),
        'flops_total': su.ledger.total, 'flops_useful_total': su.ledger.useful_total,
        'tokens_per_second': completion_tokens / max(seconds, 1e-9),
        'n_prompts': int(layout.num_prompts),
        'group_size_mean': float(np.asarray(layout.row_group_size_R)[valid].mean())
        if valid.any() else 0.0,
        'completion_len_mean': completion_tokens / max(valid_rows, 1),
        'seconds': seconds, **info,
        **{k: float(v) for k, v in step_metrics.items()},
    }
    if p_hat_by_query is not None:
      batch_queries = [int(q) for q in rollout['row_query_index'][valid]]
      row['p_hat_mean'] = float(np.mean([p_hat_by_query.get(q, np.nan) for q in batch_queries]))
    budget_hit = 0 < t.flops_budget <= su.ledger.total
    if budget_hit:
      stop_reason = f'flops budget {t.flops_budget:.3g} reached at step {step}'
    if step % config.eval.every_steps == 0 or step == num_steps or budget_hit:
      last_eval = run_eval(su, state['params'], step)
      row.update(last_eval)
    if (stopper is not None and stop_reason is None
        and row['padding_fraction'] <= MAX_PADDING_FOR_FIT):
      decision = stopper.update(step, row['reward_mean'], su.ledger.total)
      if decision is not None and decision.should_stop:
        stop_reason = f'early stop at step {step}: {decision.reason}'
        row['early_stop_reason'] = decision.reason
        row['flops_saved_estimate'] = decision.flops_saved_estimate
        logging.info(stop_reason)
        if 'eval_accuracy' not in row:
          last_eval = run_eval(su, state['params'], step)
          row.update(last_eval)
    writer.write(row)
    if (os.environ.get('SGPO_TEST_SIGKILL_AFTER_STEP') == str(step) and
        os.environ.get('SGPO_TEST_SIGKILL_PROCESS', str(jax.process_index())) ==
        str(jax.process_index())):
      os.kill(os.getpid(), signal.SIGKILL)  # fault injection for the resume tests
    bar.update(1)
    bar.set_postfix(reward=f"{row['reward_mean']:.2f}", acc=f"{last_eval['eval_accuracy']:.3f}",
                    tok_s=f"{row['tokens_per_second']:.0f}")
    if step % config.checkpoint.every_steps == 0 or step == num_steps or stop_reason:
      meta.update(step=step, allocator=allocator.state_dict(), flops=su.ledger.state_dict(),
                  last_eval=last_eval, stop_reason=stop_reason,
                  wall_seconds=meta.get('wall_seconds_base', 0.0) + time.time() - wall_start)
      ckpt.save(step, state, metrics_lib.to_jsonable(meta))
  bar.close()
  ckpt.close()
  writer.close()

  steps_rows = [r for r in writer.rows if 'reward_mean' in r]
  summary = {
      'method': config.method, 'seed': config.seed, 'steps': step,
      'model_name': config.model.hf_path or 'embedded',
      'params_nonembed': flops_lib.param_counts(su.model_cfg)['nonembed'],
      'params_total': flops_lib.param_counts(su.model_cfg)['total'],
      'eval_accuracy_initial': meta['eval_initial']['eval_accuracy'],
      'eval_accuracy_final': last_eval['eval_accuracy'],
      'flops': su.ledger.as_dict(),
      'compiles': {'train_step': learner.compile_count, 'sampler': su.sampler.compile_count},
      'padding_fraction': float(np.mean([r['padding_fraction'] for r in steps_rows]))
      if steps_rows else 0.0,
      'wall_seconds': meta.get('wall_seconds_base', 0.0) + time.time() - wall_start,
      'initial_policy': su.init_info,
      'stop_reason': stop_reason,
  }
  if allocation is not None:
    summary['profile'] = allocation.summary()
  if hasattr(allocator, 'summary'):
    summary['allocator'] = allocator.summary()
  metrics_lib.write_json(os.path.join(workdir, 'summary.json'), summary)
  if sharding_lib.is_writer():
    report_lib.write_report(workdir, summary, writer.rows, allocation)
  closer = getattr(su.reward_fn, 'close', None)
  if closer is not None:
    closer()
  return summary
