"""Masked grouped-query attention: the score/softmax/value part of a layer, as pure functions.

Which keys a query sees is given by its ingredients, never by a materialised [B, T, S] mask:
query slot q_slot[b, t] (its index in the key range; None = slot t on every row, the plain
causal case of a forward pass or a prefill at cache slot 0), key validity kv_valid[b, s]
(False for left padding) and, for packed rows, segment ids. Key s is visible to query t iff
    s <= q_slot[b, t]  and  kv_valid[b, s]  and  (no segments or seg_q == seg_k > 0).

Implementations (`ATTENTION_IMPLS`, `ModelConfig.attention_impl`):
- 'chunked' (default): online softmax over query chunks x key chunks (running max and sum,
  as in flash attention), so peak memory holds one [B, K, G, q_chunk, kv_chunk] score block
  instead of the full [B, K, G, T, S] tensor. Each query chunk is rematerialised in the
  backward pass. Short inputs (decode: T = 1) take the direct path below: their scores are
  small, and a single chunk would compute the same thing with more steps.
- 'full': the direct formulation (full f32 scores, softmax, weighted sum); the reference the
  others are tested against.
- 'dot_product': `jax.nn.dot_product_attention` with a boolean mask. On GPU it asks for
  cuDNN's fused flash attention (`implementation='cudnn'`) where cuDNN's constraints hold
  (`cudnn_applies`: bf16/fp16, head dim a multiple of 8 and <= 128, even T and S; the mask
  becomes a [B, 1, T, S] additive bias); elsewhere, and for other shapes, XLA's formulation
  (full scores). Not run on a GPU in this repository's tests.
- 'splash': the TPU splash-attention Pallas kernel that jax ships
  (`jax.experimental.pallas.ops.tpu.splash_attention`): a causal block-sparse mask (blocks
  above the diagonal are skipped), left padding and packed segments as its segment ids, GQA
  natively (K key heads under H query heads), vmapped over rows. It applies to T > 1 queries
  at slots 0..T-1 (q_slot None) with T and S multiples of 128; anything else (decode steps,
  prefill at a cache offset, ragged lengths) takes 'chunked'. Off TPU the kernel runs in the
  Pallas interpreter (slow: for tests). Under a mesh context (`jax.set_mesh`) the kernel
  runs under `shard_map`, rows over the batch axes and heads over 'tp'.
- 'auto': 'splash' on TPU, 'dot_product' (cuDNN) on GPU with decode steps (T = 1) on the
  direct path, 'chunked' on CPU (`resolve_impl`). On a multi-chip TPU without a mesh
  context it takes 'chunked': XLA cannot partition a Pallas call, it would gather every
  row onto every chip. `train.run` therefore traces under the run's mesh (`jax.set_mesh`)
  where `needs_mesh_context` says so, and 'auto' takes 'splash' there.
Masked scores are NEG_INF rather than -inf, so a row with no visible key (padding queries)
yields the mean of the values instead of NaN in every implementation but 'splash', where a
padding query attends to the padding keys at or before its slot (the kernel needs a visible
key per row). Either way a padding query's output is never read.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from sgpo_jax.parallel import sharding as sharding_lib

NEG_INF = -1e30
ATTENTION_IMPLS = ('chunked', 'full', 'dot_product', 'splash', 'auto')
SPLASH_BLOCKS = (512, 256, 128)  # splash block sizes tried, largest first (multiples of 128)
BATCH_AXES, HEAD_AXIS = ('data', 'fsdp'), 'tp'  # as parallel/sharding.py names the mesh axes


def resolve_impl(impl: str, backend: str | None = None) -> str:
  """'auto' -> the implementation for `backend` (default: jax's); other names unchanged."""
  if impl not in ATTENTION_IMPLS:
    raise ValueError(f'model.attention_impl={impl!r} is unknown; use one of {ATTENTION_IMPLS}.')
  if impl != 'auto':
    return impl
  backend = backend or jax.default_backend()
  if backend == 'tpu':
    unpartitioned = jax.device_count() > 1 and jax.sharding.get_abstract_mesh().empty
    return 'chunked' if unpartitioned else 'splash'
  return 'dot_product' if backend == 'gpu' else 'chunked'


def needs_mesh_context(impl: str, backend: str, num_devices: int) -> bool:
  """Whether a run must trace under its mesh (`jax.set_mesh`) for `impl` to mean the splash
  kernel: 'auto' or 'splash' on a TPU of more than one chip (shard_map needs the mesh)."""
  return impl in ('auto', 'splash') and backend == 'tpu' and num_devices > 1


def run_mesh_context(config) -> Any:
  """`jax.set_mesh(the run's mesh)` where attention needs it to pick the splash kernel (a
  multi-chip TPU, `needs_mesh_context`), else a no-op context: elsewhere tracing stays
  exactly as it was."""
  if not needs_mesh_context(config.model.attention_impl, jax.default_backend(),
                            jax.device_count()):
    return contextlib.nullcontext()
  try:
    mesh = sharding_lib.make_mesh(config.mesh)
  except ValueError:  # a mesh larger than this host: the dry run's analytic mode says so
    return contextlib.nullcontext()
  return jax.set_mesh(mesh)


def causal_slots_BxT(b: int, t: int):
  """q_slot of queries at slots 0..T-1 (what q_slot None stands for)."""
  return jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))


def cudnn_applies(q_BxTxHxE, s: int, backend: str | None = None) -> bool:
  """Whether cuDNN's fused attention takes these shapes (its checks in jax's
  `cudnn/fused_attention_stablehlo.py`, at the pre-Hopper head-dim limit)."""
  t, e = q_BxTxHxE.shape[1], q_BxTxHxE.shape[-1]
  return ((backend or jax.default_backend()) == 'gpu'
          and q_BxTxHxE.dtype in (jnp.bfloat16, jnp.float16)
          and e % 8 == 0 and e <= 128 and t % 2 == 0 and s % 2 == 0)


def splash_blocks(t: int, s: int) -> tuple[int, int] | None:
  """(block_q, block_kv) for the splash kernel at T queries and S keys, or None when T or S
  is no multiple of 128 (then 'splash' takes 'chunked')."""
  block_q = next((blk for blk in SPLASH_BLOCKS if t % blk == 0), None)
  block_kv = next((blk for blk in SPLASH_BLOCKS if s % blk == 0), None)
  return None if block_q is None or block_kv is None else (block_q, block_kv)


def visible_BxTxS(q_slot_BxT, kv_valid_BxS, seg_q_BxT=None, seg_k_BxS=None):
  """Boolean [B, T, S] visibility (module docstring)."""
  s = kv_valid_BxS.shape[1]
  mask = (jnp.arange(s)[None, None, :] <= q_slot_BxT[:, :, None]) & kv_valid_BxS[:, None, :]
  if seg_q_BxT is not None:
    mask = mask & (seg_q_BxT[:, :, None] == seg_k_BxS[:, None, :]) & (seg_k_BxS[:, None, :] > 0)
  return mask


def _full(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, mask_BxTxS):
  """out [B, T, K, G, E] in q's dtype, scores in float32."""
  scale = 1.0 / jnp.sqrt(jnp.float32(q_BxTxKxGxE.shape[-1]))
  scores = jnp.einsum('btkge,bske->bkgts', q_BxTxKxGxE, k_BxSxKxE,
                      preferred_element_type=jnp.float32) * scale
  scores = jnp.where(mask_BxTxS[:, None, None, :, :], scores, NEG_INF)
  probs = jax.nn.softmax(scores, axis=-1).astype(q_BxTxKxGxE.dtype)
  return jnp.einsum('bkgts,bske->btkge', probs, v_BxSxKxE)


def _pad_axis(x, axis: int, size: int, value=0):
  pad = size - x.shape[axis]
  if pad == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths, constant_values=value)


def _chunked(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, q_slot_BxT, kv_valid_BxS, seg_q_BxT, seg_k_BxS,
             q_chunk: int, kv_chunk: int):
  b, t, kh, g, e = q_BxTxKxGxE.shape
  s = k_BxSxKxE.shape[1]
  nq, nk = -(-t // q_chunk), -(-s // kv_chunk)
  tp, sp = nq * q_chunk, nk * kv_chunk
  scale = 1.0 / jnp.sqrt(jnp.float32(e))
  q = _pad_axis(q_BxTxKxGxE, 1, tp)
  q_slot = _pad_axis(q_slot_BxT, 1, tp, -1)  # padded queries see nothing; dropped below
  k = _pad_axis(k_BxSxKxE, 1, sp)
  v = _pad_axis(v_BxSxKxE, 1, sp)
  kv_valid = _pad_axis(kv_valid_BxS, 1, sp, False)
  segmented = seg_q_BxT is not None
  if segmented:
    seg_q = _pad_axis(seg_q_BxT, 1, tp)
    seg_k = _pad_axis(seg_k_BxS, 1, sp)
  # Key chunks as scan inputs: [nk, B, kv_chunk, ...].
  to_chunks = lambda x, n, c: jnp.moveaxis(x.reshape(b, n, c, *x.shape[2:]), 1, 0)  # noqa: E731
  k_c, v_c = to_chunks(k, nk, kv_chunk), to_chunks(v, nk, kv_chunk)
  valid_c = to_chunks(kv_valid, nk, kv_chunk)
  slot_c = jnp.arange(sp, dtype=jnp.int32).reshape(nk, kv_chunk)
  seg_k_c = to_chunks(seg_k, nk, kv_chunk) if segmented else valid_c

  @jax.checkpoint
  def one_query_chunk(args):
    q_BxCxKxGxE, q_slot_BxC, seg_q_BxC = args

    def step(carry, kv):
      m_BxKxGxC, l_BxKxGxC, acc_BxKxGxCxE = carry
      k_BxDxKxE, v_BxDxKxE, valid_BxD, slot_D, seg_k_BxD = kv
      scores = jnp.einsum('bckge,bdke->bkgcd', q_BxCxKxGxE, k_BxDxKxE,
                          preferred_element_type=jnp.float32) * scale
      mask = (slot_D[None, None, :] <= q_slot_BxC[:, :, None]) & valid_BxD[:, None, :]
      if segmented:
        mask = mask & (seg_q_BxC[:, :, None] == seg_k_BxD[:, None, :]) & (
            seg_k_BxD[:, None, :] > 0)
      scores = jnp.where(mask[:, None, None], scores, NEG_INF)
      m_new = jnp.maximum(m_BxKxGxC, jnp.max(scores, axis=-1))
      p = jnp.exp(scores - m_new[..., None])
      correction = jnp.exp(m_BxKxGxC - m_new)
      l_new = l_BxKxGxC * correction + jnp.sum(p, axis=-1)
      pv = jnp.einsum('bkgcd,bdke->bkgce', p.astype(v_BxDxKxE.dtype), v_BxDxKxE,
                      preferred_element_type=jnp.float32)
      return (m_new, l_new, acc_BxKxGxCxE * correction[..., None] + pv), None

    c = q_BxCxKxGxE.shape[1]
    init = (jnp.full((b, kh, g, c), -jnp.inf, jnp.float32), jnp.zeros((b, kh, g, c), jnp.float32),
            jnp.zeros((b, kh, g, c, e), jnp.float32))
    (_, l_BxKxGxC, acc_BxKxGxCxE), _ = jax.lax.scan(step, init,
                                                   (k_c, v_c, valid_c, slot_c, seg_k_c))
    out_BxKxGxCxE = acc_BxKxGxCxE / l_BxKxGxC[..., None]
    return jnp.transpose(out_BxKxGxCxE, (0, 3, 1, 2, 4)).astype(q_BxTxKxGxE.dtype)

  q_c = to_chunks(q, nq, q_chunk)
  q_slot_c = to_chunks(q_slot, nq, q_chunk)
  seg_q_c = to_chunks(seg_q, nq, q_chunk) if segmented else q_slot_c
  out_c = jax.lax.map(one_query_chunk, (q_c, q_slot_c, seg_q_c))  # [nq, B, C, K, G, E]
  return jnp.moveaxis(out_c, 0, 1).reshape(b, tp, kh, g, e)[:, :t]


@functools.lru_cache(maxsize=64)
def _splash_kernel(h: int, t: int, s: int, block_q: int, block_kv: int, interpret: bool):
  """The splash kernel of one row: H query heads, a causal [T, S] mask (query t sees keys
  s <= t), forward and backward blocks of the given sizes. Made once per shape (the mask's
  block structure is computed in numpy)."""
  # deferred: the TPU Pallas kernels load only when splash attention is chosen
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as splash_mask
  mask = splash_mask.MultiHeadMask([splash_mask.CausalMask((t, s)) for _ in range(h)])
  blocks = splash.BlockSizes(
      block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv, block_q_dkv=block_q,
      block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv, block_q_dq=block_q,
      block_kv_dq=block_kv)
  with jax.ensure_compile_time_eval():  # mask metadata as constants, never as tracers
    return splash.make_splash_mha(mask, block_sizes=blocks, head_shards=1, q_seq_shards=1,
                                  interpret=interpret)


def _splash(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, kv_valid_BxS, seg_q_BxT, seg_k_BxS, blocks):
  """Splash attention of queries at slots 0..T-1: validity and segments become the kernel's
  segment ids (an invalid key gets id 0, as does a query whose own slot is invalid)."""
  # deferred: the TPU Pallas kernels load only when splash attention is chosen
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
  t, e = q_BxTxHxE.shape[1], q_BxTxHxE.shape[-1]
  seg_k_BxS = jnp.ones(kv_valid_BxS.shape, jnp.int32) if seg_k_BxS is None else seg_k_BxS
  seg_q_BxT = seg_k_BxS[:, :t] if seg_q_BxT is None else seg_q_BxT
  ids_k_BxS = jnp.where(kv_valid_BxS, seg_k_BxS, 0).astype(jnp.int32)
  ids_q_BxT = jnp.where(kv_valid_BxS[:, :t], seg_q_BxT, 0).astype(jnp.int32)
  scale = 1.0 / jnp.sqrt(jnp.float32(e))
  q_BxHxTxE = jnp.swapaxes((q_BxTxHxE.astype(jnp.float32) * scale).astype(q_BxTxHxE.dtype), 1, 2)
  k_BxKxSxE, v_BxKxSxE = jnp.swapaxes(k_BxSxKxE, 1, 2), jnp.swapaxes(v_BxSxKxE, 1, 2)
  interpret = jax.default_backend() != 'tpu'

  def rows(q_BxHxTxE, k_BxKxSxE, v_BxKxSxE, ids_q_BxT, ids_k_BxS):
    kernel = _splash_kernel(q_BxHxTxE.shape[1], t, k_BxKxSxE.shape[2], *blocks, interpret)
    one_row = lambda q, k, v, iq, ik: kernel(q, k, v, segment_ids=splash.SegmentIds(iq, ik))  # noqa: E731
    return jax.vmap(one_row)(q_BxHxTxE, k_BxKxSxE, v_BxKxSxE, ids_q_BxT, ids_k_BxS)

  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty:  # shard_map: each device runs the kernel on its own rows and heads
    P = jax.sharding.PartitionSpec
    names = [a for a in BATCH_AXES if a in mesh.axis_names and mesh.shape[a] > 1]
    b_size = math.prod(mesh.shape[a] for a in names)
    row_axes = tuple(names) if names and q_BxTxHxE.shape[0] % b_size == 0 else None
    tp = mesh.shape.get(HEAD_AXIS, 1)
    head_axis = HEAD_AXIS if tp > 1 and k_BxSxKxE.shape[2] % tp == 0 else None
    qkv, ids = P(row_axes, head_axis), P(row_axes)
    rows = jax.shard_map(rows, mesh=mesh, in_specs=(qkv, qkv, qkv, ids, ids), out_specs=qkv,
                         check_vma=False)
  out_BxHxTxE = rows(q_BxHxTxE, k_BxKxSxE, v_BxKxSxE, ids_q_BxT, ids_k_BxS)
  return jnp.swapaxes(out_BxHxTxE, 1, 2).astype(q_BxTxHxE.dtype)


def attend(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, q_slot_BxT, kv_valid_BxS, seg_q_BxT=None,
           seg_k_BxS=None, *, impl: str = 'chunked', q_chunk: int = 128, kv_chunk: int = 512):
  """Attention output [B, T, H, E] (dtype of q) of queries over keys/values with K heads,
  H a multiple of K (grouped-query), under the visibility of the module docstring
  (q_slot_BxT None: queries at slots 0..T-1)."""
  b, t, h, e = q_BxTxHxE.shape
  kh = k_BxSxKxE.shape[2]
  s = k_BxSxKxE.shape[1]
  k_BxSxKxE = k_BxSxKxE.astype(q_BxTxHxE.dtype)
  v_BxSxKxE = v_BxSxKxE.astype(q_BxTxHxE.dtype)
  auto = impl == 'auto'
  impl = resolve_impl(impl)
  if impl == 'splash':
    blocks = splash_blocks(t, s)
    if q_slot_BxT is None and t > 1 and blocks is not None:
      return _splash(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, kv_valid_BxS, seg_q_BxT, seg_k_BxS, blocks)
    impl = 'chunked'
  if q_slot_BxT is None:
    q_slot_BxT = causal_slots_BxT(b, t)
  if impl == 'dot_product' and not (auto and t == 1):
    mask_Bx1xTxS = visible_BxTxS(q_slot_BxT, kv_valid_BxS, seg_q_BxT, seg_k_BxS)[:, None]
    cudnn = 'cudnn' if cudnn_applies(q_BxTxHxE, s) else None
    return jax.nn.dot_product_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, mask=mask_Bx1xTxS,
                                        implementation=cudnn)
  q_BxTxKxGxE = q_BxTxHxE.reshape(b, t, kh, h // kh, e)
  if impl in ('full', 'dot_product') or (t <= q_chunk and s <= kv_chunk) or t == 1:
    mask = visible_BxTxS(q_slot_BxT, kv_valid_BxS, seg_q_BxT, seg_k_BxS)
    out = _full(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, mask)
  elif impl == 'chunked':
    out = _chunked(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, q_slot_BxT, kv_valid_BxS, seg_q_BxT,
                   seg_k_BxS, min(q_chunk, t), min(kv_chunk, s))
  else:
    raise ValueError(f'model.attention_impl={impl!r} is unknown; use one of {ATTENTION_IMPLS}.')
  return out.reshape(b, t, h, e)


attend_jit = functools.partial(jax.jit, static_argnames=('impl', 'q_chunk', 'kv_chunk'))(attend)
