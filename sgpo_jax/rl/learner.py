"""The policy update: the train batch's schema, its one loss, and the pure jitted train step.

A rollout batch is always `[R, T]` tokens (T = max_prompt_len + max_new_tokens: prompt
left-padded to max_prompt_len, completion right after) plus per-row `group_id[R]`,
`valid[R]`, rewards and completion lengths, and behaviour log-probs. Group sizes live only
in `group_id`, so one compilation serves every batch of the run; `Learner.compile_count`
proves it.

Token t's log-prob is read from hidden state t-1, so the per-token arrays the loss sees
are `[R, T-1]` ("target" positions).

The batch has two token layouts of one schema (`batch_schema`): the padded `[R, T]` rows,
or with `train.packing` `packing.pack_batch`'s fixed `[buffers, pack_rows, pack_len]`
buffers of real tokens (segment ids keep rows apart); the per-row arrays are the same in
both. `train_step` cuts either into chunks (micro-batches of rows, or buffers; a scan
accumulates gradients, skipping empty buffers at run time), runs every chunk through the
one `chunk_loss` and one optimizer update; loss and gradients are the same for both
layouts. Each data-parallel shard (the mesh's batch axes) packs its own rows into its own
`pack_rows` buffer rows, and the buffers' row dimension is sharded over those axes, so the
packed step splits its tokens over devices and processes as the padded step splits rows.

`make_train_step` jits `train_step` with its shardings and state donation beside it; the
thin `Learner` holds the optimizer and the jitted functions for the trainer (host batch in,
packing, FLOPs ledger).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.rl import losses as losses_lib
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
    clip_eps_low, clip_eps_high = losses_lib.resolve_clip_bounds(
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


# --------------------------------------------------------------------------- batch schema

# The per-row arrays, the same in both layouts.
ROW_KEYS = {'rewards_R': jnp.float32, 'group_id_R': jnp.int32, 'valid_R': jnp.bool_,
            'completion_len_R': jnp.int32}
# Padded layout: [R, T] tokens, [R, T - 1] targets.
PADDED_KEYS = {'tokens_RxT': jnp.int32, 'mask_RxT': jnp.int32,
               'completion_mask_RxT1': jnp.int32, 'old_logp_RxT1': jnp.float32,
               'ref_logp_RxT1': jnp.float32}
# Packed layout (sequence_packing.pack_batch): [M, S * B, L] tokens, [M, S * B, L - 1]
# targets, used_M.
PACKED_KEYS = {'tokens_MxBxL': jnp.int32, 'segment_ids_MxBxL': jnp.int32,
               'positions_MxBxL': jnp.int32, 'row_MxBxL1': jnp.int32,
               'completion_mask_MxBxL1': jnp.int32, 'old_logp_MxBxL1': jnp.float32,
               'ref_logp_MxBxL1': jnp.float32, 'used_M': jnp.bool_}


def batch_schema(rows: int, seq_len: int, pack_shape: packing_lib.PackShape | None = None
                 ) -> dict[str, jax.ShapeDtypeStruct]:
  """Shape and dtype of every array of a train batch: R = `rows` rows of T = `seq_len` tokens,
  padded, or packed into `pack_shape`'s buffers. The one definition of the batch that the
  step, its shardings and the dry run (planning/compiled_memory.py) read."""
  dims = {'R': rows, 'T': seq_len, 'T1': seq_len - 1}
  if pack_shape is not None:
    dims.update(M=pack_shape.buffers, B=pack_shape.shards * pack_shape.rows,
                L=pack_shape.length, L1=pack_shape.length - 1)
  keys = dict(PACKED_KEYS if pack_shape is not None else PADDED_KEYS, **ROW_KEYS)
  return {k: jax.ShapeDtypeStruct(tuple(dims[d] for d in k.rsplit('_', 1)[1].split('x')), dtype)
          for k, dtype in keys.items()}


def batch_shardings(mesh: Mesh, packed: bool) -> dict[str, Any]:
  """Padded: rows over the batch axes. Packed: buffers [M, S * B, ...] split over the batch
  axes along dim 1 (each shard's own buffer rows); the per-row arrays and used_M, small,
  replicated."""
  if packed:
    rows, rep = sharding_lib.packed_rows_sharding(mesh), sharding_lib.replicated(mesh)
    return dict({k: rows for k in PACKED_KEYS if k != 'used_M'}, used_M=rep,
                **{k: rep for k in ROW_KEYS})
  return dict({k: sharding_lib.batch_sharding(mesh, 2) for k in PADDED_KEYS},
              **{k: sharding_lib.batch_sharding(mesh, 1) for k in ROW_KEYS})


# --------------------------------------------------------------------------- loss


def forward_logprobs(model: model_lib.Transformer, params, tokens_BxL, positions_BxL1,
                     attend_BxL1, temperature: float, chunk: int, segment_ids_BxL1=None):
  """Log-prob (and entropy) of every next token under temperature-scaled logits: [B, L-1]."""
  cfg = model.cfg
  kwargs = {} if segment_ids_BxL1 is None else {'segment_ids_BxT': segment_ids_BxL1}
  hidden, _ = model.apply({'params': params}, tokens_BxL[:, :-1], positions_BxL1, attend_BxL1,
                          **kwargs)
  head_DxV = model_lib.lm_head_DxV(params, cfg).astype(jnp.dtype(cfg.dtype))

  def scaled_logits(hidden_BxCxD, head):
    # The float32 logits divided by T, as the sampler scales them: dividing the hidden state
    # in a bf16 compute dtype would round it first and shift every log-prob a little.
    return jnp.einsum('bcd,dv->bcv', hidden_BxCxD, head,
                      preferred_element_type=jnp.float32) / temperature
  return losses_lib.token_logprobs(hidden, head_DxV, tokens_BxL[:, 1:], chunk,
                                   logits_fn=scaled_logits)


def sequence_logprobs(model: model_lib.Transformer, params, tokens_RxT, mask_RxT,
                      temperature: float, chunk: int):
  """Log-prob (and entropy) of every next token of padded rows: [R, T-1]."""
  in_mask = mask_RxT[:, :-1]
  return forward_logprobs(model, params, tokens_RxT, model_lib.positions_from_mask(in_mask),
                          in_mask.astype(bool), temperature, chunk)


class RowTerms(NamedTuple):
  """Per-row inputs of the loss: padded chunks carry their own rows' (advantages, valid);
  packed buffers index the whole batch's (advantages, token weights) by each token's row."""

  advantages_R: jax.Array
  valid_R: jax.Array | None = None
  weight_R: jax.Array | None = None


def chunk_loss(params, chunk: dict[str, jax.Array], rows: RowTerms, denom, *,
               model: model_lib.Transformer, settings: LossSettings):
  """(loss of one chunk over the whole batch's denominator, its metrics) for a padded
  micro-batch (`*_RxT*` keys, one sequence per row, aggregated by `loss_agg`) or a packed
  buffer (`*_MxBxL*` keys, sequences kept apart by segment ids and `row_MxBxL1`, each
  token weighted by its row's share of the aggregation)."""
  s = settings
  use_kl = s.kl_coef > 0
  packed = 'row_MxBxL1' in chunk
  if packed:
    seg_BxL1 = chunk['segment_ids_MxBxL'][:, :-1]
    logp, entropy = forward_logprobs(model, params, chunk['tokens_MxBxL'],
                                     chunk['positions_MxBxL'][:, :-1], seg_BxL1 > 0,
                                     s.temperature, s.logprob_chunk, segment_ids_BxL1=seg_BxL1)
    row_BxL1 = chunk['row_MxBxL1']
    per_row = dict(advantages_R=rows.advantages_R[row_BxL1],
                   valid_R=jnp.ones(row_BxL1.shape[:1], bool), loss_agg='token_mean',
                   token_weight_RxT=rows.weight_R[row_BxL1],
                   sequences=losses_lib.Sequences(row_BxL1, rows.advantages_R.shape[0]))
    target = lambda k: chunk[f'{k}_MxBxL1']  # noqa: E731
  else:
    logp, entropy = sequence_logprobs(model, params, chunk['tokens_RxT'], chunk['mask_RxT'],
                                      s.temperature, s.logprob_chunk)
    per_row = dict(advantages_R=rows.advantages_R, valid_R=rows.valid_R, loss_agg=s.loss_agg)
    target = lambda k: chunk[f'{k}_RxT1']  # noqa: E731
  loss_sum, _, metrics = losses_lib.policy_loss(
      logp, target('old_logp'), completion_mask_RxT=target('completion_mask'),
      clip_eps_low=s.clip_eps_low, clip_eps_high=s.clip_eps_high,
      logratio_clamp=s.logratio_clamp, max_new_tokens=s.max_new_tokens,
      kl_coef=s.kl_coef if use_kl else 0.0,
      ref_logp_RxT=target('ref_logp') if use_kl else None, kl_form=s.kl_form,
      entropy_RxT=entropy, pg_loss=s.policy_loss, importance_level=s.importance_level,
      **per_row)
  return loss_sum / jnp.maximum(denom, 1.0), metrics


# --------------------------------------------------------------------------- train step


def trainable(params, cfg: model_lib.ModelConfig):
  """(trainable, frozen) parts of `params`: the LoRA adapters and the base with LoRA
  (model/lora.py), else all parameters and nothing."""
  if lora_lib.enabled(cfg):
    return lora_lib.split(params)
  return params, {}


def join(trainable_params, frozen, cfg: model_lib.ModelConfig):
  return lora_lib.merge(trainable_params, frozen) if lora_lib.enabled(cfg) else trainable_params


def _sum_over_chunks(run, chunks, used_M=None):
  """(loss, metrics), grads summed over `chunks` (leading axis) by a scan: gradients and
  losses added, metrics merged (`losses_lib.merge_loss_metrics`). used_M None: every chunk runs,
  the first outside the scan; else chunk m runs only where used_M[m], from zero sums."""
  def accumulate(carry, chunk):
    (loss_i, metrics_i), grads_i = run(chunk)
    g_acc, l_acc, m_acc = carry
    return (jax.tree.map(jnp.add, g_acc, grads_i), l_acc + loss_i,
            losses_lib.merge_loss_metrics(m_acc, metrics_i))

  if used_M is None:
    (loss0, metrics0), grads0 = run(jax.tree.map(lambda x: x[0], chunks))
    (grads, loss, metrics), _ = jax.lax.scan(lambda c, x: (accumulate(c, x), None),
                                             (grads0, loss0, metrics0),
                                             jax.tree.map(lambda x: x[1:], chunks))
    return (loss, metrics), grads
  (_, metric_shapes), grad_shapes = jax.eval_shape(run, jax.tree.map(lambda x: x[0], chunks))

  def fill(name):  # identities of merge_loss_metrics: max, min, sum
    return -jnp.inf if name.endswith('_max') else jnp.inf if name.endswith('_min') else 0.0
  metrics0 = {k: jnp.full(v.shape, fill(k), v.dtype) for k, v in metric_shapes.items()}
  carry0 = (jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), grad_shapes), jnp.float32(0.0),
            metrics0)

  def step(carry, xs):
    chunk, used = xs
    return jax.lax.cond(used, lambda c: accumulate(c, chunk), lambda c: c, carry), None
  (grads, loss, metrics), _ = jax.lax.scan(step, carry0, (chunks, used_M))
  return (loss, metrics), grads


def train_step(state: dict[str, Any], batch: dict[str, jax.Array], *,
               model: model_lib.Transformer, optimizer: optax.GradientTransformation,
               settings: LossSettings) -> tuple[dict[str, Any], dict[str, jax.Array]]:
  """One optimizer update on a batch of either layout (`batch_schema`): advantages and the
  aggregation's token weights over the whole batch, gradients summed over its chunks (rows
  split into `micro_batches`, or the packed buffers), then AdamW. Pure; returns the new
  {'params', 'opt_state'} and the step's metrics."""
  s, cfg = settings, model.cfg
  rows = batch['rewards_R'].shape[0]
  valid_R = batch['valid_R']
  advantages_R, adv_stats = losses_lib.compute_advantages(
      batch['rewards_R'], batch['group_id_R'], valid_R, rows, s.advantage, s.std_eps)
  # Every micro-batch / buffer divides by the whole batch's denominator (losses docstring).
  weight_R, denom = losses_lib.token_weights(batch['completion_len_R'], valid_R, s.loss_agg,
                                       s.max_new_tokens)
  train_p, frozen_p = trainable(state['params'], cfg)
  grad_fn = jax.value_and_grad(
      lambda tp, *a: chunk_loss(join(tp, frozen_p, cfg), *a, model=model, settings=s),
      has_aux=True)
  if 'used_M' in batch:
    buffers = {k: batch[k] for k in PACKED_KEYS if k != 'used_M'}
    row_terms = RowTerms(advantages_R, weight_R=weight_R)
    (loss, metrics), grads = _sum_over_chunks(
        lambda buf: grad_fn(train_p, buf, row_terms, denom), buffers, batch['used_M'])
  else:
    # Rows are split into micro-batches (never tokens of a row); sums stay exact because
    # every micro-batch divides by the full batch's denominator.
    tokens = {k: batch[k] for k in PADDED_KEYS}
    row_terms = RowTerms(advantages_R, valid_R=valid_R)
    run = lambda xs: grad_fn(train_p, xs[0], xs[1], denom)  # noqa: E731
    n_mb = s.micro_batches
    if n_mb == 1:
      (loss, metrics), grads = run((tokens, row_terms))
    else:
      split = lambda x: x.reshape((n_mb, rows // n_mb) + x.shape[1:])  # noqa: E731
      (loss, metrics), grads = _sum_over_chunks(run, jax.tree.map(split, (tokens, row_terms)))
  metrics['seq_count'] = jnp.sum(valid_R.astype(jnp.float32))
  updates, opt_state = optimizer.update(grads, state['opt_state'], train_p)
  params = join(optax.apply_updates(train_p, updates), frozen_p, cfg)
  out = dict(losses_lib.finalize_loss_metrics(metrics))
  out.update(adv_stats)
  out['loss'] = loss
  out['grad_norm'] = optax.tree.norm(grads)
  return {'params': params, 'opt_state': opt_state}, out


def make_train_step(model: model_lib.Transformer, optimizer: optax.GradientTransformation,
                    settings: LossSettings, mesh: Mesh, state_shardings: Any, packed: bool):
  """(`train_step` jitted for this run, its batch shardings): the state keeps its shardings
  and is donated (updated in place), metrics come back replicated."""
  shardings = batch_shardings(mesh, packed)
  step = functools.partial(train_step, model=model, optimizer=optimizer, settings=settings)
  jitted = jax.jit(step, in_shardings=(state_shardings, shardings),
                   out_shardings=(state_shardings, sharding_lib.replicated(mesh)),
                   donate_argnums=(0,))
  return jitted, shardings


# --------------------------------------------------------------------------- learner


class Learner:
  """Owns the optimizer and the jitted train / log-prob functions on one mesh; turns host
  batches into the step's layout and charges the FLOPs ledger."""

  def __init__(self, cfg: model_lib.ModelConfig, mesh: Mesh, param_shardings, config,
               num_steps: int):
    self.cfg, self.mesh, self.config = cfg, mesh, config
    self.model = lora_lib.make_model(cfg)
    self.settings = LossSettings.from_config(config)
    self.optimizer = make_optimizer(config.train, num_steps)
    self.param_shardings = param_shardings
    s = config.sampling
    self.rows, self.seq_len = int(config.train.rows_per_batch), int(s.max_prompt_len) + int(
        s.max_new_tokens)
    self.pack_shape = None
    if self.settings.packing:
      self.pack_shape = packing_lib.PackShape.for_batch(
          self.rows, self.seq_len, self.settings.pack_rows, self.settings.pack_len,
          shards=sharding_lib.batch_size_multiple(mesh))
    self.last_tokens = (0, 0)  # (computed, useful) input tokens of the last train step
    self.step_jit, self.batch_shardings = None, None
    b2 = sharding_lib.batch_sharding(mesh, 2)
    self.logprob_jit = jax.jit(self._logprobs, in_shardings=(param_shardings, b2, b2),
                               out_shardings=b2)

  @property
  def compile_count(self) -> int:
    """Programs the jitted train step has compiled (its cache, counted from outside)."""
    return 0 if self.step_jit is None else self.step_jit._cache_size()

  def trainable(self, params):
    return trainable(params, self.cfg)

  def init_state(self, params) -> dict[str, Any]:
    # With LoRA the optimizer holds moments for the adapters only.
    opt_state = sharding_lib.init_optimizer_state(self.optimizer, self.trainable(params)[0])
    state = {'params': params, 'opt_state': opt_state}
    self.build(state)
    return state

  def build(self, state) -> None:
    """Jits the train step for `state`'s shardings (concrete or abstract arrays)."""
    shardings = jax.tree.map(lambda x: x.sharding, state)
    self.step_jit, self.batch_shardings = make_train_step(
        self.model, self.optimizer, self.settings, self.mesh, shardings,
        packed=self.pack_shape is not None)

  def batch_schema(self) -> dict[str, jax.ShapeDtypeStruct]:
    """This run's train batch, abstract, with its shardings."""
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=self.batch_shardings[k])
            for k, v in batch_schema(self.rows, self.seq_len, self.pack_shape).items()}

  def _logprobs(self, params, tokens_RxT, mask_RxT):
    s = self.settings
    logp, _ = sequence_logprobs(self.model, params, tokens_RxT, mask_RxT, s.temperature,
                                s.logprob_chunk)
    return logp

  def logprobs(self, params, tokens_RxT: np.ndarray, mask_RxT: np.ndarray):
    """Per-target-token log-probs [R, T-1] (old-policy recompute, reference policy)."""
    tokens, mask = sharding_lib.shard_batch(self.mesh, (tokens_RxT, mask_RxT))
    return self.logprob_jit(params, tokens, mask)

  def device_batch(self, batch_np: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host rollout batch (layout_batch + rewards_R, group_id_R, valid_R) -> this run's
    layout as host arrays (packed when train.packing); sets `last_tokens`."""
    batch_np = dict(batch_np)
    if 'ref_logp_RxT1' not in batch_np:
      batch_np['ref_logp_RxT1'] = np.zeros_like(batch_np['old_logp_RxT1'])
    if self.pack_shape is not None:
      # Padding slots are masked by segment id 0, so their token id is irrelevant.
      packed = packing_lib.pack_batch(batch_np, self.pack_shape, pad_id=0)
      self.last_tokens = packing_lib.token_counts(packed)
      return packed
    self.last_tokens = packing_lib.padded_token_counts(batch_np)
    batch = {k: batch_np[k] for k in PADDED_KEYS.keys() | ROW_KEYS.keys() if k in batch_np}
    batch['completion_len_R'] = (np.asarray(batch_np['completion_mask_RxT1'], np.int32).sum(1)
                                 * np.asarray(batch_np['valid_R'], bool)).astype(np.int32)
    return batch

  def train_step(self, state, batch_np: dict[str, np.ndarray]):
    """One optimizer update on a host batch (metrics are device arrays; `check_finite`)."""
    batch = self.device_batch(batch_np)
    return self.step_jit(state, sharding_lib.put_host_values(batch, self.batch_shardings))

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
