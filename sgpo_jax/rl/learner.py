"""The jitted, sharded policy update: optimizer, train state, rollout-batch layout, step.

A rollout batch is always `[R, T]` tokens (T = max_prompt_len + max_new_tokens: prompt
left-padded to max_prompt_len, completion right after) plus `group_id[R]`, `valid[R]`,
rewards and behaviour log-probs. Group sizes live only in `group_id`, so one compilation
serves every batch of the run; `Learner.compile_count` proves it.

Token t's log-prob is read from hidden state t-1, so the per-token arrays the loss sees
are `[R, T-1]` ("target" positions).

With `train.packing` the step instead runs on `packing.pack_batch`'s fixed
`[buffers, pack_rows, pack_len]` buffers of real tokens (segment ids keep rows apart):
a scan over the buffers accumulates gradients, skipping empty buffers at run time, so one
compilation still serves every batch, and loss and gradients equal the padded step's.
Each data-parallel shard (the mesh's batch axes) packs its own rows into its own
`pack_rows` buffer rows, and the buffers' row dimension is sharded over those axes, so the
packed step splits its tokens over devices and processes as the padded step splits rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.rl import losses as grpo
from sgpo_jax.rl import sequence_packing as packing_lib


class NonFiniteError(FloatingPointError):
  """Loss or gradients became NaN/Inf; the run stops and the last checkpoint stays intact."""


def make_optimizer(train_config, num_steps: int) -> optax.GradientTransformation:
  lr, warmup = float(train_config.learning_rate), int(train_config.warmup_steps)
  if train_config.schedule == 'cosine':
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(warmup, 1), max(num_steps, warmup + 1))
  elif train_config.schedule == 'constant':
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, lr, max(warmup, 1)), optax.constant_schedule(lr)],
        [max(warmup, 1)]) if warmup > 0 else optax.constant_schedule(lr)
  else:
    raise ValueError(f'train.schedule={train_config.schedule!r}: use constant or cosine.')
  parts = []
  if train_config.grad_clip > 0:
    parts.append(optax.clip_by_global_norm(float(train_config.grad_clip)))
  parts.append(optax.adamw(schedule, weight_decay=float(train_config.weight_decay)))
  return optax.chain(*parts)


def layout_batch(prompts: list[list[int]], completions_RxN: np.ndarray, mask_RxN: np.ndarray,
                 logprobs_RxN: np.ndarray, max_prompt_len: int, pad_id: int) -> dict[str, np.ndarray]:
  """Rows of (prompt tokens, sampled completion) -> the fixed [R, T] train layout.

  Returns tokens_RxT, mask_RxT (real tokens), and on target positions [R, T-1]:
  completion_mask and behaviour log-probs.
  """
  rows, n_new = completions_RxN.shape
  t_len = max_prompt_len + n_new
  tokens = np.full((rows, t_len), pad_id, np.int32)
  mask = np.zeros((rows, t_len), np.int32)
  for r, prompt in enumerate(prompts):
    tokens[r, max_prompt_len - len(prompt):max_prompt_len] = prompt
    mask[r, max_prompt_len - len(prompt):max_prompt_len] = 1
  tokens[:, max_prompt_len:] = completions_RxN
  mask[:, max_prompt_len:] = mask_RxN
  completion_mask = np.zeros((rows, t_len - 1), np.int32)
  completion_mask[:, max_prompt_len - 1:] = mask_RxN
  old_logp = np.zeros((rows, t_len - 1), np.float32)
  old_logp[:, max_prompt_len - 1:] = np.where(mask_RxN > 0, logprobs_RxN, 0.0)
  return dict(tokens_RxT=tokens, mask_RxT=mask, completion_mask_RxT1=completion_mask,
              old_logp_RxT1=old_logp)


@dataclasses.dataclass
class LossSettings:
  advantage: str
  std_eps: float
  loss_agg: str
  policy_loss: str
  importance_level: str
  clip_eps_low: float
  clip_eps_high: float
  logratio_clamp: float
  kl_coef: float
  kl_form: str
  logprob_chunk: int
  micro_batches: int
  max_new_tokens: int
  temperature: float
  packing: bool = False
  pack_rows: int = 1
  pack_len: int = 0

  @classmethod
  def from_config(cls, config) -> 'LossSettings':
    t = config.train
    # Unset clip bounds (None) become the chosen loss's paper defaults, in one place.
    clip_eps_low, clip_eps_high = grpo.resolve_clip_bounds(
        t.policy_loss, t.importance_level, t.clip_eps_low, t.clip_eps_high)
    return cls(advantage=t.advantage, std_eps=float(t.std_eps), loss_agg=t.loss_agg,
               policy_loss=t.policy_loss, importance_level=t.importance_level,
               clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high,
               logratio_clamp=float(t.logratio_clamp), kl_coef=float(t.kl_coef),
               kl_form=t.kl_form, logprob_chunk=int(t.logprob_chunk),
               micro_batches=int(t.micro_batches), max_new_tokens=int(config.sampling.max_new_tokens),
               temperature=float(config.sampling.temperature) or 1.0,
               packing=bool(t.get('packing', False)), pack_rows=int(t.get('pack_rows', 1)),
               pack_len=int(t.get('pack_len', 0)))


def sequence_logprobs(model: model_lib.Transformer, params, tokens_RxT, mask_RxT,
                      temperature: float, chunk: int):
  """Log-prob (and entropy) of every next token under temperature-scaled logits: [R, T-1]."""
  cfg = model.cfg
  inputs, targets = tokens_RxT[:, :-1], tokens_RxT[:, 1:]
  in_mask = mask_RxT[:, :-1]
  hidden, _ = model.apply({'params': params}, inputs, model_lib.positions_from_mask(in_mask),
                          in_mask.astype(bool))
  head_DxV = model_lib.lm_head_DxV(params, cfg).astype(jnp.dtype(cfg.dtype))
  return grpo.token_logprobs(hidden / temperature, head_DxV, targets, chunk)


class Learner:
  """Owns the optimizer and the jitted train / log-prob functions on one mesh."""

  def __init__(self, cfg: model_lib.ModelConfig, mesh: Mesh, param_shardings, config,
               num_steps: int):
    self.cfg, self.mesh, self.config = cfg, mesh, config
    self.model = lora_lib.make_model(cfg)
    self.settings = LossSettings.from_config(config)
    self.optimizer = make_optimizer(config.train, num_steps)
    self.param_shardings = param_shardings
    self.traces = 0
    self.logprob_traces = 0
    self.pack_shape = None
    if self.settings.packing:
      s = config.sampling
      self.pack_shape = packing_lib.PackShape.for_batch(
          int(config.train.rows_per_batch), int(s.max_prompt_len) + int(s.max_new_tokens),
          self.settings.pack_rows, self.settings.pack_len,
          shards=sharding_lib.batch_size_multiple(mesh))
    self.last_tokens = (0, 0)  # (computed, useful) input tokens of the last train step
    self._state_shardings = None
    self._train_jit = None
    self._logprob_jit = jax.jit(
        self._logprobs, in_shardings=(param_shardings, sharding_lib.batch_sharding(mesh, 2),
                                      sharding_lib.batch_sharding(mesh, 2)),
        out_shardings=sharding_lib.batch_sharding(mesh, 2))

  @property
  def compile_count(self) -> int:
    return self.traces

  def trainable(self, params):
    """(trainable, frozen) parts of `params`: the LoRA adapters and the base with LoRA
    (model/lora.py), else all parameters and nothing."""
    if lora_lib.enabled(self.cfg):
      return lora_lib.split(params)
    return params, {}

  def _join(self, trainable, frozen):
    return lora_lib.merge(trainable, frozen) if lora_lib.enabled(self.cfg) else trainable

  def init_state(self, params) -> dict[str, Any]:
    # With LoRA the optimizer holds moments for the adapters only.
    opt_state = sharding_lib.init_optimizer_state(self.optimizer, self.trainable(params)[0])
    state = {'params': params, 'opt_state': opt_state}
    self._build(state)
    return state

  def state_shardings(self, state) -> Any:
    return jax.tree.map(lambda x: x.sharding, state)

  def _build(self, state) -> None:
    self._state_shardings = self.state_shardings(state)
    b1 = sharding_lib.batch_sharding(self.mesh, 1)
    b2 = sharding_lib.batch_sharding(self.mesh, 2)
    batch_shardings = dict(tokens_RxT=b2, mask_RxT=b2, completion_mask_RxT1=b2, old_logp_RxT1=b2,
                           ref_logp_RxT1=b2, rewards_R=b1, group_id_R=b1, valid_R=b1)
    if self.pack_shape is not None:
      rep = sharding_lib.replicated(self.mesh)
      self._packed_jit = jax.jit(self._packed_train_step,
                                 in_shardings=(self._state_shardings, self.packed_shardings()),
                                 out_shardings=(self._state_shardings, rep), donate_argnums=(0,))
    self._batch_keys = tuple(batch_shardings)
    self._train_jit = jax.jit(
        self._train_step, in_shardings=(self._state_shardings, batch_shardings),
        out_shardings=(self._state_shardings, sharding_lib.replicated(self.mesh)),
        donate_argnums=(0,))

  def packed_shardings(self) -> dict[str, Any]:
    """Buffers [M, S * B, ...] split over the batch axes along dim 1 (each shard's own
    buffer rows); the per-row arrays and used_M, small, replicated."""
    rep = sharding_lib.replicated(self.mesh)
    rows = sharding_lib.packed_rows_sharding(self.mesh)
    keys = ('tokens_MxBxL', 'segment_ids_MxBxL', 'positions_MxBxL', 'row_MxBxL1') + tuple(
        k.replace('RxT1', 'MxBxL1') for k in packing_lib.TARGET_KEYS)
    out = {k: rows for k in keys}
    out.update({k: rep for k in ('used_M', 'rewards_R', 'group_id_R', 'valid_R',
                                 'completion_len_R')})
    return out

  def _logprobs(self, params, tokens_RxT, mask_RxT):
    self.logprob_traces += 1
    s = self.settings
    logp, _ = sequence_logprobs(self.model, params, tokens_RxT, mask_RxT, s.temperature,
                                s.logprob_chunk)
    return logp

  def logprobs(self, params, tokens_RxT: np.ndarray, mask_RxT: np.ndarray):
    """Per-target-token log-probs [R, T-1] (old-policy recompute, reference policy)."""
    tokens, mask = sharding_lib.shard_batch(self.mesh, (tokens_RxT, mask_RxT))
    return self._logprob_jit(params, tokens, mask)

  def _loss(self, params, mb, denom, advantages_R):
    s = self.settings
    logp, entropy = sequence_logprobs(self.model, params, mb['tokens_RxT'], mb['mask_RxT'],
                                      s.temperature, s.logprob_chunk)
    use_kl = s.kl_coef > 0
    loss_sum, _, metrics = grpo.policy_loss(
        logp, mb['old_logp_RxT1'], advantages_R, mb['completion_mask_RxT1'], mb['valid_R'],
        clip_eps_low=s.clip_eps_low, clip_eps_high=s.clip_eps_high,
        logratio_clamp=s.logratio_clamp, loss_agg=s.loss_agg, max_new_tokens=s.max_new_tokens,
        kl_coef=s.kl_coef if use_kl else 0.0,
        ref_logp_RxT=mb['ref_logp_RxT1'] if use_kl else None, kl_form=s.kl_form,
        entropy_RxT=entropy, pg_loss=s.policy_loss, importance_level=s.importance_level)
    return loss_sum / jnp.maximum(denom, 1.0), metrics

  def _train_step(self, state, batch):
    self.traces += 1
    s = self.settings
    rows = batch['rewards_R'].shape[0]
    advantages_R, adv_stats = grpo.compute_advantages(
        batch['rewards_R'], batch['group_id_R'], batch['valid_R'], rows, s.advantage, s.std_eps)
    denom = grpo.loss_denominator(batch['completion_mask_RxT1'], batch['valid_R'], s.loss_agg,
                                  s.max_new_tokens)
    train_p, frozen_p = self.trainable(state['params'])
    grad_fn = jax.value_and_grad(
        lambda tp, *a: self._loss(self._join(tp, frozen_p), *a), has_aux=True)
    n_mb = s.micro_batches
    if n_mb == 1:
      (loss, metrics), grads = grad_fn(train_p, batch, denom, advantages_R)
    else:
      # Rows are split into micro-batches (never tokens of a row); sums stay exact because
      # every micro-batch divides by the full batch's denominator.
      split = lambda x: x.reshape((n_mb, rows // n_mb) + x.shape[1:])  # noqa: E731
      mbs = jax.tree.map(split, batch)
      adv_mbs = split(advantages_R)

      def accumulate(carry, xs):
        mb, adv = xs
        (loss_i, metrics_i), grads_i = grad_fn(train_p, mb, denom, adv)
        g_acc, l_acc, m_acc = carry
        g_acc = jax.tree.map(jnp.add, g_acc, grads_i)
        m_acc = metrics_i if m_acc is None else grpo.merge_loss_metrics(m_acc, metrics_i)
        return (g_acc, l_acc + loss_i, m_acc), None

      first = jax.tree.map(lambda x: x[0], (mbs, adv_mbs))
      (loss0, metrics0), grads0 = grad_fn(train_p, first[0], denom, first[1])
      rest = jax.tree.map(lambda x: x[1:], (mbs, adv_mbs))
      (grads, loss, metrics), _ = jax.lax.scan(accumulate, (grads0, loss0, metrics0), rest)
    updates, opt_state = self.optimizer.update(grads, state['opt_state'], train_p)
    params = self._join(optax.apply_updates(train_p, updates), frozen_p)
    out = dict(grpo.finalize_loss_metrics(metrics))
    out.update({f'{k}': v for k, v in adv_stats.items()})
    out['loss'] = loss
    out['grad_norm'] = optax.tree.norm(grads)
    return {'params': params, 'opt_state': opt_state}, out

  def _packed_loss(self, params, buf, advantages_R, weight_R, denom):
    s = self.settings
    cfg = self.cfg
    seg_BxL1 = buf['segment_ids_MxBxL'][:, :-1]
    hidden, _ = self.model.apply({'params': params}, buf['tokens_MxBxL'][:, :-1],
                                 buf['positions_MxBxL'][:, :-1], seg_BxL1 > 0,
                                 segment_ids_BxT=seg_BxL1)
    head_DxV = model_lib.lm_head_DxV(params, cfg).astype(jnp.dtype(cfg.dtype))
    logp, entropy = grpo.token_logprobs(hidden / s.temperature, head_DxV,
                                        buf['tokens_MxBxL'][:, 1:], s.logprob_chunk)
    row_BxL1 = buf['row_MxBxL1']
    use_kl = s.kl_coef > 0
    loss_sum, _, metrics = grpo.policy_loss(
        logp, buf['old_logp_MxBxL1'], advantages_R[row_BxL1], buf['completion_mask_MxBxL1'],
        jnp.ones(row_BxL1.shape[:1], bool), clip_eps_low=s.clip_eps_low,
        clip_eps_high=s.clip_eps_high, logratio_clamp=s.logratio_clamp, loss_agg='token_mean',
        max_new_tokens=s.max_new_tokens, kl_coef=s.kl_coef if use_kl else 0.0,
        ref_logp_RxT=buf['ref_logp_MxBxL1'] if use_kl else None, kl_form=s.kl_form,
        entropy_RxT=entropy, token_weight_RxT=weight_R[row_BxL1], pg_loss=s.policy_loss)
    return loss_sum / jnp.maximum(denom, 1.0), metrics

  def _packed_train_step(self, state, packed):
    self.traces += 1
    s = self.settings
    rows = packed['rewards_R'].shape[0]
    valid_R = packed['valid_R']
    advantages_R, adv_stats = grpo.compute_advantages(
        packed['rewards_R'], packed['group_id_R'], valid_R, rows, s.advantage, s.std_eps)
    valid_f_R = valid_R.astype(jnp.float32)
    count_R = packed['completion_len_R'].astype(jnp.float32)
    # Each token's share of its row's aggregation (see grpo.LOSS_AGGREGATIONS).
    if s.loss_agg == 'token_mean':
      weight_R, denom = valid_f_R, jnp.sum(count_R * valid_f_R)
    elif s.loss_agg == 'seq_mean_token_mean':
      weight_R, denom = valid_f_R / jnp.maximum(count_R, 1.0), jnp.sum(valid_f_R)
    else:
      weight_R, denom = valid_f_R / s.max_new_tokens, jnp.sum(valid_f_R)
    params = state['params']
    train_p, frozen_p = self.trainable(params)
    grad_fn = jax.value_and_grad(
        lambda tp, *a: self._packed_loss(self._join(tp, frozen_p), *a), has_aux=True)
    buffers = {k: v for k, v in packed.items() if k.endswith(('MxBxL', 'MxBxL1'))}
    first = jax.tree.map(lambda x: x[0], buffers)
    metric_shapes = jax.eval_shape(lambda: self._packed_loss(params, first, advantages_R,
                                                             weight_R, denom)[1])
    def fill(name):  # identities of merge_loss_metrics: max, min, sum
      return -jnp.inf if name.endswith('_max') else jnp.inf if name.endswith('_min') else 0.0
    metrics0 = {k: jnp.full(v.shape, fill(k), v.dtype) for k, v in metric_shapes.items()}
    carry0 = (jax.tree.map(jnp.zeros_like, train_p), jnp.float32(0.0), metrics0)

    def accumulate(carry, xs):
      buf, used = xs

      def run(carry):
        g_acc, l_acc, m_acc = carry
        (loss_i, metrics_i), grads_i = grad_fn(train_p, buf, advantages_R, weight_R, denom)
        return (jax.tree.map(jnp.add, g_acc, grads_i), l_acc + loss_i,
                grpo.merge_loss_metrics(m_acc, metrics_i))
      return jax.lax.cond(used, run, lambda c: c, carry), None

    (grads, loss, metrics), _ = jax.lax.scan(accumulate, carry0, (buffers, packed['used_M']))
    metrics['seq_count'] = jnp.sum(valid_f_R)
    updates, opt_state = self.optimizer.update(grads, state['opt_state'], train_p)
    params = self._join(optax.apply_updates(train_p, updates), frozen_p)
    out = dict(grpo.finalize_loss_metrics(metrics))
    out.update(adv_stats)
    out['loss'] = loss
    out['grad_norm'] = optax.tree.norm(grads)
    return {'params': params, 'opt_state': opt_state}, out

  def train_step(self, state, batch_np: dict[str, np.ndarray]):
    """One optimizer update on a host batch; raises NonFiniteError on NaN/Inf."""
    batch_np = dict(batch_np)
    if 'ref_logp_RxT1' not in batch_np:
      batch_np['ref_logp_RxT1'] = np.zeros_like(batch_np['old_logp_RxT1'])
    if self.pack_shape is not None:
      # Padding slots are masked by segment id 0, so their token id is irrelevant.
      packed = packing_lib.pack_batch(batch_np, self.pack_shape, pad_id=0)
      self.last_tokens = packing_lib.token_counts(packed)
      return self._packed_jit(state, sharding_lib.put_host_values(packed, self.packed_shardings()))
    self.last_tokens = packing_lib.padded_token_counts(batch_np)
    batch = sharding_lib.shard_batch(self.mesh, {k: batch_np[k] for k in self._batch_keys})
    return self._train_jit(state, batch)

  def count_train(self, ledger: flops_lib.FlopsLedger, rows: int, seq_len: int,
                  valid_rows: int, passes: int = 1) -> None:
    """Ledger entry of the last `train_step` (`passes` times): the padded rectangle as
    before, or the packed buffers actually run with their real tokens as useful."""
    computed_tokens, useful_tokens = self.last_tokens
    if self.pack_shape is None:
      ledger.add_train(rows, seq_len, valid_rows, passes=passes)
    else:
      length = self.pack_shape.length - 1
      per_token = passes * flops_lib.train_flops_per_token(self.cfg, length)
      ledger.add('train', computed_tokens * per_token, useful_tokens * per_token)
    ledger.add_tokens('train', passes * computed_tokens, passes * useful_tokens)


def check_finite(metrics: dict[str, Any], step: int) -> None:
  loss, grad_norm = float(metrics['loss']), float(metrics['grad_norm'])
  if not (np.isfinite(loss) and np.isfinite(grad_norm)):
    raise NonFiniteError(
        f'step {step}: loss={loss} grad_norm={grad_norm} is not finite; the run stops here and '
        'the last checkpoint is kept intact. Lower train.learning_rate, check rewards for '
        'NaN, or set train.grad_clip.')
