"""The policy: a decoder-only transformer of the Qwen2/Qwen3/Llama family, in Flax linen.

Owns the architecture (token embedding, RMSNorm, rotary embeddings with optional scaling,
grouped-query attention with optional QKV bias and optional per-head QK RMSNorm, SwiGLU MLP,
final norm, tied or untied LM head), the
explicit KV cache used by the sampler, and the logical axis names every parameter carries
(`parallel/sharding.py` maps them onto the mesh). We use linen rather than NNX because the policy is
then a pure function of a plain parameter pytree, which is what `jax.jit` shardings, optax,
orbax and the HF weight mapping all want.

Attention is computed over the whole static key range with a mask, so one compiled shape
serves every prompt length inside a bucket. Rotary embeddings follow the HF convention
(rotate_half over two halves), so HF checkpoints load without permuting q/k weights.

RoPE scaling (`rope_type`, transformers' `modeling_rope_utils` formulas on the inverse
frequencies inv_freq_i = theta^(-2i/head_dim)):
- 'default': unscaled.
- 'linear': inv_freq / rope_factor (position interpolation).
- 'llama3' (Llama 3.1/3.2): with wavelen = 2 pi / inv_freq and L = rope_original_max_len,
  wavelengths above L / rope_low_freq_factor are divided by rope_factor, those below
  L / rope_high_freq_factor are kept, and those between are interpolated with
  s = (L / wavelen - low) / (high - low): (1 - s) * inv_freq / factor + s * inv_freq.
The frequencies are static (computed in numpy from the config), so they cost nothing per step.
QK-norm (Qwen3, `qk_norm=True`): an RMSNorm over head_dim, one scale vector shared by all
heads, applied to queries and keys after the projection and before the rotation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from sgpo_jax.model import attention as attention_lib
from sgpo_jax.model import lora_settings
from sgpo_jax.parallel import sharding as sharding_lib

Params = Any
NEG_INF = attention_lib.NEG_INF


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  d_ff: int
  rope_theta: float = 10000.0
  rope_type: str = 'default'  # default | linear | llama3 (see the module docstring)
  rope_factor: float = 1.0  # linear, llama3: how much longer the context was made
  rope_low_freq_factor: float = 1.0  # llama3
  rope_high_freq_factor: float = 4.0  # llama3
  rope_original_max_len: int = 8192  # llama3: the pre-extension context length
  rms_eps: float = 1e-6
  tie_embeddings: bool = True
  qkv_bias: bool = False
  qk_norm: bool = False  # Qwen3: per-head RMSNorm on queries and keys before RoPE
  max_len: int = 2048
  dtype: str = 'float32'
  param_dtype: str = 'float32'
  remat: bool = False
  attention_impl: str = 'chunked'  # chunked | full | dot_product | splash | auto (attention.py)
  attention_q_chunk: int = 128  # chunked: queries per block
  attention_kv_chunk: int = 512  # chunked: keys per block
  # Layers per iteration of the layer scan; n_layers = straight-line code (longer compiles;
  # XLA's cost analysis counts a loop body once, so FLOPs cross-checks unroll fully).
  scan_unroll: int = 1
  init_std: float = 0.02
  # LoRA / QLoRA (model/lora.py): rank 0 = full fine-tuning.
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_targets: tuple[str, ...] = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')
  lora_base_dtype: str | None = None  # None | 'int8' | 'nf4': the frozen base's storage

  @classmethod
  def from_config(cls, model_config) -> 'ModelConfig':
    """From the `config.model` ConfigDict (extra fields such as hf_path are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in dict(model_config).items() if k in names}
    if 'lora_targets' in values:
      values['lora_targets'] = lora_settings.parse_targets(values['lora_targets'])
    return cls(**values)

  @property
  def dtypes(self) -> tuple[jnp.dtype, jnp.dtype]:
    """(compute dtype, parameter dtype) as jnp dtypes."""
    return jnp.dtype(self.dtype), jnp.dtype(self.param_dtype)

  def validate(self) -> None:
    lora_settings.check(self)
    if self.n_heads % self.n_kv_heads:
      raise ValueError(
          f'model.n_heads={self.n_heads} is not a multiple of model.n_kv_heads='
          f'{self.n_kv_heads}: grouped-query attention shares each KV head across an equal '
          'number of query heads; pick n_kv_heads dividing n_heads.')
    if self.head_dim % 2:
      raise ValueError(f'model.head_dim={self.head_dim} must be even for rotary embeddings.')
    for name in ('dtype', 'param_dtype'):
      value = getattr(self, name)
      if value not in ('float32', 'bfloat16', 'float16'):
        raise ValueError(f'model.{name}={value!r}: use float32, bfloat16 or float16.')
    if self.attention_impl not in attention_lib.ATTENTION_IMPLS:
      raise ValueError(f'model.attention_impl={self.attention_impl!r} is unknown; use one of '
                       f'{attention_lib.ATTENTION_IMPLS}.')
    if self.scan_unroll < 1:
      raise ValueError(f'model.scan_unroll={self.scan_unroll} must be >= 1 (1 = a loop over '
                       f'layers, {self.n_layers} = fully unrolled).')
    if min(self.attention_q_chunk, self.attention_kv_chunk) < 1:
      raise ValueError(f'model.attention_q_chunk={self.attention_q_chunk} and '
                       f'model.attention_kv_chunk={self.attention_kv_chunk} must be >= 1.')
    if self.rope_type not in ROPE_TYPES:
      raise ValueError(f'model.rope_type={self.rope_type!r} is unknown; use one of {ROPE_TYPES}.')
    if self.rope_type != 'default' and self.rope_factor <= 0:
      raise ValueError(f'model.rope_factor={self.rope_factor} must be > 0 for rope_type '
                       f'{self.rope_type!r} (1.0 = no scaling).')
    if self.rope_type == 'llama3':
      if not 0 < self.rope_low_freq_factor < self.rope_high_freq_factor:
        raise ValueError(
            f'model.rope_low_freq_factor={self.rope_low_freq_factor} and '
            f'model.rope_high_freq_factor={self.rope_high_freq_factor}: llama3 RoPE needs '
            '0 < low < high (Llama 3.1/3.2 use 1.0 and 4.0).')
      if self.rope_original_max_len < 1:
        raise ValueError(f'model.rope_original_max_len={self.rope_original_max_len} must be '
                         '>= 1 (Llama 3.1/3.2 use 8192).')


ROPE_TYPES = ('default', 'linear', 'llama3')


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
  """float32 [head_dim / 2] inverse frequencies of `cfg.rope_type` (module docstring)."""
  dim = cfg.head_dim
  inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
  inv_freq = inv_freq.astype(np.float32)
  if cfg.rope_type == 'linear':
    return (inv_freq / np.float32(cfg.rope_factor)).astype(np.float32)
  if cfg.rope_type == 'llama3':
    old_len = cfg.rope_original_max_len
    low, high, factor = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor, cfg.rope_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)
  return inv_freq


def rope_inv_freq_traced(cfg: ModelConfig):
  """The inverse frequencies the forward pass uses: `rope_inv_freq`, except that unscaled
  RoPE keeps the in-graph formula of earlier versions. The two differ in the last bit of some
  frequencies (numpy's pow against XLA's), and that alone moved the embedded default's
  1500-step SFT warm start from 63.1% to 32.5% held-out accuracy: the cached warm starts and
  every measured run were made with this formula."""
  if cfg.rope_type != 'default':
    return rope_inv_freq(cfg)
  half = cfg.head_dim // 2
  return 1.0 / (cfg.rope_theta ** (jnp.arange(half, dtype=jnp.float32) / half))


def _init(std: float, names: tuple[str | None, ...]):
  return nn.with_logical_partitioning(nn.initializers.normal(std), names)


class RMSNorm(nn.Module):
  eps: float
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x_BxTxD):
    scale_D = self.param('scale', nn.with_logical_partitioning(nn.initializers.ones, ('norm',)),
                         (x_BxTxD.shape[-1],), self.param_dtype)
    x32 = x_BxTxD.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (normed * scale_D.astype(jnp.float32)).astype(self.dtype)


def rotary(x_BxTxNxH, positions_BxT, inv_freq_H2):
  """HF-convention RoPE: rotate the two halves of each head by position-dependent angles."""
  half = x_BxTxNxH.shape[-1] // 2
  angles_BxTxH2 = positions_BxT[..., None].astype(jnp.float32) * jnp.asarray(inv_freq_H2)
  cos = jnp.cos(angles_BxTxH2)[:, :, None, :]
  sin = jnp.sin(angles_BxTxH2)[:, :, None, :]
  x32 = x_BxTxNxH.astype(jnp.float32)
  x1, x2 = x32[..., :half], x32[..., half:]
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BxTxNxH.dtype)


class Attention(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxD, positions_BxT, mask_info, cache, layer):
    cfg = self.cfg
    dtype, pdtype = cfg.dtypes

    def proj(name, n_heads, head_axis):
      return nn.DenseGeneral(
          (n_heads, cfg.head_dim), use_bias=cfg.qkv_bias, dtype=dtype, param_dtype=pdtype,
          kernel_init=_init(cfg.init_std, ('embed', head_axis, 'head_dim')),
          bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (head_axis, 'head_dim')),
          name=name)(x_BxTxD).astype(dtype)  # a LoRA adapter (param dtype) may promote it

    q_BxTxHxE = proj('q', cfg.n_heads, 'heads')
    k_BxTxKxE = proj('k', cfg.n_kv_heads, 'kv_heads')
    if cfg.qk_norm:
      q_BxTxHxE = RMSNorm(cfg.rms_eps, dtype, pdtype, name='q_norm')(q_BxTxHxE)
      k_BxTxKxE = RMSNorm(cfg.rms_eps, dtype, pdtype, name='k_norm')(k_BxTxKxE)
    inv_freq_H2 = rope_inv_freq_traced(cfg)
    q_BxTxHxE = rotary(q_BxTxHxE, positions_BxT, inv_freq_H2)
    k_BxTxKxE = rotary(k_BxTxKxE, positions_BxT, inv_freq_H2)
    v_BxTxKxE = proj('v', cfg.n_kv_heads, 'kv_heads')

    q_slot_BxT, kv_valid_BxS, segment_ids_BxT, cache_index = mask_info
    if cache is not None:
      cache = write_cache(cache, layer, cache_index, k_BxTxKxE, v_BxTxKxE)
      k_BxSxKxE, v_BxSxKxE = read_cache(cache, layer, x_BxTxD.shape[0])
    else:
      k_BxSxKxE, v_BxSxKxE = k_BxTxKxE, v_BxTxKxE
    out_BxTxHxE = attention_lib.attend(
        q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, q_slot_BxT, kv_valid_BxS, segment_ids_BxT,
        segment_ids_BxT, impl=cfg.attention_impl, q_chunk=cfg.attention_q_chunk,
        kv_chunk=cfg.attention_kv_chunk)
    out_BxTxD = nn.DenseGeneral(
        cfg.d_model, axis=(-2, -1), use_bias=False, dtype=dtype, param_dtype=pdtype,
        kernel_init=_init(cfg.init_std, ('heads', 'head_dim', 'embed')), name='o')(out_BxTxHxE)
    return out_BxTxD.astype(dtype), cache


def write_cache(cache, layer, cache_index, k_BxTxKxE, v_BxTxKxE):
  """Writes this layer's new keys/values into the stacked cache ([L, B', S, K, E], B' >= B:
  rows [0, B) are written) in place: at slots [cache_index, cache_index + T), or per row at
  [cache_index[b], ...) when cache_index is a [B] array (continuous batching)."""
  k_cache, v_cache = cache
  b, t = k_BxTxKxE.shape[:2]
  if jnp.ndim(cache_index) == 1:
    rows_Bx1 = jnp.arange(b)[:, None]
    slots_BxT = cache_index[:, None] + jnp.arange(t)[None, :]
    write = lambda c, x: c.at[layer, rows_Bx1, slots_BxT].set(  # noqa: E731
        x.astype(c.dtype), mode='drop')
  else:
    write = lambda c, x: jax.lax.dynamic_update_slice(  # noqa: E731
        c, x[None].astype(c.dtype), (layer, 0, cache_index, 0, 0))
  return write(k_cache, k_BxTxKxE), write(v_cache, v_BxTxKxE)


def read_cache(cache, layer, rows: int):
  """Layer `layer`'s keys and values of cache rows [0, rows): ([rows, S, K, E],) * 2."""
  def read(c):
    return jax.lax.dynamic_slice(c, (layer, 0, 0, 0, 0), (1, rows) + c.shape[2:])[0]
  return read(cache[0]), read(cache[1])


class MLP(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxD):
    cfg = self.cfg
    dtype, pdtype = cfg.dtypes
    dense = lambda features, names, name: nn.Dense(  # noqa: E731
        features, use_bias=False, dtype=dtype, param_dtype=pdtype,
        kernel_init=_init(cfg.init_std, names), name=name)
    # .astype: a LoRA adapter in the param dtype promotes a projection's output.
    gate_BxTxF = dense(cfg.d_ff, ('embed', 'mlp'), 'gate')(x_BxTxD).astype(dtype)
    up_BxTxF = dense(cfg.d_ff, ('embed', 'mlp'), 'up')(x_BxTxD).astype(dtype)
    return dense(cfg.d_model, ('mlp', 'embed'), 'down')(
        nn.silu(gate_BxTxF) * up_BxTxF).astype(dtype)


class Block(nn.Module):
  """One layer, in scan form: carry (hidden, stacked cache or None, layer index) -> carry."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, carry, positions_BxT, mask_info):
    x_BxTxD, cache, layer = carry
    cfg = self.cfg
    dtype, pdtype = cfg.dtypes
    h = RMSNorm(cfg.rms_eps, dtype, pdtype, name='attn_norm')(x_BxTxD)
    attn_BxTxD, cache = Attention(cfg, name='attn')(h, positions_BxT, mask_info, cache, layer)
    x_BxTxD = x_BxTxD + attn_BxTxD
    h = RMSNorm(cfg.rms_eps, dtype, pdtype, name='mlp_norm')(x_BxTxD)
    return (x_BxTxD + MLP(cfg, name='mlp')(h), cache, layer + 1), None


LAYERS = 'layers'  # the params subtree of the stacked layers; leading axis = layer


class Transformer(nn.Module):
  """Returns final hidden states [B, T, D] (pre LM head) and the updated KV cache.

  The layers run under one `nn.scan` over parameters stacked on a leading layer axis
  (params['layers'][...] is [L, ...], logical axis 'layers'), so compile time does not grow
  with depth; with `remat` each layer is rematerialised in the backward pass.

  `kv_mask_BxS` marks which key slots hold real tokens (False for left padding). Without a
  cache the key slots are the T input positions; with a cache (`cache` = (k, v), each
  [L, B', S, K, E] with B' >= B; rows [0, B) are used) the inputs are written in place at
  slots [cache_index, cache_index + T) and each query attends to the valid slots up to its
  own. `cache_index` may be a [B] array: row b writes at its own slot (the continuous
  sampler's decode step). Pass the cache as a donated jit argument (or keep it inside one
  jitted loop) and XLA updates it without a copy.

  `segment_ids_BxT` (no cache) packs several sequences into one row: a query attends only to
  earlier keys of its own segment, and segment 0 is padding (packed training).
  """
  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens_BxT, positions_BxT, kv_mask_BxS, cache=None, cache_index=0,
               segment_ids_BxT=None):
    cfg = self.cfg
    dtype, pdtype = cfg.dtypes
    embedding_VxD = self.param(
        'embedding', _init(cfg.init_std, ('vocab', 'embed')), (cfg.vocab_size, cfg.d_model), pdtype)
    x_BxTxD = jnp.take(embedding_VxD, tokens_BxT, axis=0).astype(dtype)

    b, t = tokens_BxT.shape
    causal_from_0 = isinstance(cache_index, (int, np.integer)) and cache_index == 0
    cache_index = jnp.asarray(cache_index, jnp.int32)
    if causal_from_0:  # queries at slots 0..T-1, known while tracing (splash needs it)
      q_slot_BxT = None
    elif cache_index.ndim == 1:
      q_slot_BxT = cache_index[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
    else:
      q_slot_BxT = jnp.broadcast_to(cache_index + jnp.arange(t, dtype=jnp.int32), (b, t))
    if segment_ids_BxT is not None and cache is not None:
      raise ValueError('segment_ids_BxT (packed rows) is for cache-free forward passes only.')
    mask_info = (q_slot_BxT, kv_mask_BxS.astype(bool), segment_ids_BxT, cache_index)

    block_cls = Block
    if cfg.remat:
      block_cls = nn.remat(Block, prevent_cse=False)
    layers = nn.scan(
        block_cls, variable_axes={'params': 0}, split_rngs={'params': True},
        in_axes=(nn.broadcast, nn.broadcast), length=cfg.n_layers, unroll=cfg.scan_unroll,
        metadata_params={nn.PARTITION_NAME: 'layers'})(cfg, name=LAYERS)
    (x_BxTxD, cache, _), _ = layers((x_BxTxD, cache, jnp.int32(0)), positions_BxT, mask_info)
    hidden_BxTxD = RMSNorm(cfg.rms_eps, dtype, pdtype, name='final_norm')(x_BxTxD)
    if not cfg.tie_embeddings:
      self.param('lm_head', _init(cfg.init_std, ('embed', 'vocab')),
                 (cfg.d_model, cfg.vocab_size), pdtype)
    return hidden_BxTxD, cache


def lm_head_DxV(params: Params, cfg: ModelConfig) -> jax.Array:
  """The output projection: the transposed embedding when tied, else its own matrix."""
  return params['embedding'].T if cfg.tie_embeddings else params['lm_head']


def logits_from_hidden(params: Params, cfg: ModelConfig, hidden_BxTxD) -> jax.Array:
  head_DxV = lm_head_DxV(params, cfg).astype(jnp.dtype(cfg.dtype))
  return jnp.einsum('btd,dv->btv', hidden_BxTxD, head_DxV, preferred_element_type=jnp.float32)


def positions_from_mask(mask_BxT) -> jax.Array:
  """Positions count only real tokens, so a left-padded prompt starts at position 0."""
  return jnp.maximum(jnp.cumsum(mask_BxT.astype(jnp.int32), axis=1) - 1, 0)


def forward(model: Transformer, params: Params, tokens_BxT, mask_BxT) -> jax.Array:
  """Full forward pass -> float32 logits [B, T, V] (no cache)."""
  hidden, _ = model.apply({'params': params}, tokens_BxT, positions_from_mask(mask_BxT),
                          mask_BxT.astype(bool))
  return logits_from_hidden(params, model.cfg, hidden)


def init_cache(cfg: ModelConfig, batch: int, size: int):
  shape = (cfg.n_layers, batch, size, cfg.n_kv_heads, cfg.head_dim)
  dtype = jnp.dtype(cfg.dtype)
  return jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)


def abstract_params(cfg: ModelConfig):
  """Boxed (logically partitioned) parameter shapes, without allocating anything."""
  model = Transformer(cfg)
  tokens = jnp.zeros((1, 1), jnp.int32)
  return jax.eval_shape(lambda: model.init(jax.random.key(0), tokens, tokens,
                                           tokens.astype(bool))['params'])


def init_params(cfg: ModelConfig, rng) -> Params:
  """Unsharded init (tests); `init_sharded_params` creates params on the mesh."""
  model = Transformer(cfg)
  tokens = jnp.zeros((1, 1), jnp.int32)
  return nn.meta.unbox(model.init(rng, tokens, tokens, tokens.astype(bool))['params'])


def init_sharded_params(cfg: ModelConfig, mesh: Mesh, rng, rules=sharding_lib.DEFAULT_RULES):
  """Creates parameters directly on the mesh with their target shardings."""
  shardings = sharding_lib.param_shardings(abstract_params(cfg), mesh, rules)
  init = jax.jit(lambda key: init_params(cfg, key), out_shardings=shardings)
  return init(rng), shardings


def _is_per_layer(tree) -> bool:
  return isinstance(tree, dict) and 'layers_0' in tree


def stack_layers(tree):
  """Converts a parameter tree of the per-layer layout ('layers_0' ... 'layers_{L-1}', as
  written before the layers were scanned) into the stacked one ('layers', each leaf [L, ...]),
  at any depth (optimizer moments mirror the params). Other trees come back unchanged."""
  if not isinstance(tree, dict):  # tuples, optimizer states: convert the dicts inside
    return jax.tree.map(lambda x: stack_layers(x) if isinstance(x, dict) else x, tree,
                        is_leaf=lambda x: isinstance(x, dict))
  if _is_per_layer(tree):
    n = 0
    while f'layers_{n}' in tree:
      n += 1
    rest = {k: v for k, v in tree.items() if not (k.startswith('layers_') and k[7:].isdigit())}
    stray = sorted(set(tree) - set(rest) - {f'layers_{i}' for i in range(n)})
    if stray or LAYERS in rest:
      raise ValueError(f'parameter tree mixes layouts or skips a layer ({stray or LAYERS!r} '
                       f'beside layers_0..layers_{n - 1}); it is not a checkpoint of this model.')
    layers = [tree[f'layers_{i}'] for i in range(n)]
    stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *layers)
    return {**{k: stack_layers(v) for k, v in rest.items()}, LAYERS: stacked}
  return {k: stack_layers(v) for k, v in tree.items()}


def has_per_layer_layout(tree) -> bool:
  """True if any dict inside `tree` uses the old per-layer keys (see `stack_layers`)."""
  if isinstance(tree, dict):
    return _is_per_layer(tree) or any(has_per_layer_layout(v) for v in tree.values())
  dicts = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, dict))
  return any(has_per_layer_layout(d) for d in dicts if isinstance(d, dict))


def per_layer_target(tree):
  """The abstract tree (ShapeDtypeStructs with NamedShardings) a per-layer-layout checkpoint of
  `tree` (stacked layout) was saved as: each 'layers' subtree becomes 'layers_0' ... with the
  layer axis dropped from shapes and shardings. Restore with it, then `stack_layers`."""
  def unstack(sub):
    def layer(leaf):
      sharding = getattr(leaf, 'sharding', None)
      if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec) + (None,) * (len(leaf.shape) - len(sharding.spec))
        sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec[1:]))
      return jax.ShapeDtypeStruct(leaf.shape[1:], leaf.dtype, sharding=sharding)
    n = jax.tree.leaves(sub)[0].shape[0]
    per = jax.tree.map(layer, sub)
    return {f'layers_{i}': per for i in range(n)}

  def convert(x):
    if not isinstance(x, dict):
      return x
    out = {k: convert(v) for k, v in x.items() if k != LAYERS}
    if LAYERS in x:
      out.update(unstack(x[LAYERS]))
    return out

  return jax.tree.map(convert, tree, is_leaf=lambda x: isinstance(x, dict))
