"""Masked grouped-query attention: the score/softmax/value part of a layer, as pure functions.

Which keys a query sees is given by its ingredients, never by a materialised [B, T, S] mask:
query slot q_slot[b, t] (its index in the key range), key validity kv_valid[b, s] (False for
left padding) and, for packed rows, segment ids. Key s is visible to query t iff
    s <= q_slot[b, t]  and  kv_valid[b, s]  and  (no segments or seg_q == seg_k > 0).

Implementations (`ATTENTION_IMPLS`, `ModelConfig.attention_impl`):
- 'chunked' (default): online softmax over query chunks x key chunks (running max and sum,
  as in flash attention), so peak memory holds one [B, K, G, q_chunk, kv_chunk] score block
  instead of the full [B, K, G, T, S] tensor. Each query chunk is rematerialised in the
  backward pass. Short inputs (decode: T = 1) take the direct path below: their scores are
  small, and a single chunk would compute the same thing with more steps.
- 'full': the direct formulation (full f32 scores, softmax, weighted sum); the reference the
  others are tested against.
- 'dot_product': `jax.nn.dot_product_attention` with a boolean mask (XLA picks the kernel;
  cuDNN flash attention on GPU where its constraints hold). Untested on accelerators here.
Masked scores are NEG_INF rather than -inf, so a row with no visible key (padding queries)
yields the mean of the values instead of NaN, in every implementation.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

NEG_INF = -1e30
ATTENTION_IMPLS = ('chunked', 'full', 'dot_product')


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
    (_, l, acc), _ = jax.lax.scan(step, init, (k_c, v_c, valid_c, slot_c, seg_k_c))
    out_BxKxGxCxE = acc / l[..., None]
    return jnp.transpose(out_BxKxGxCxE, (0, 3, 1, 2, 4)).astype(q_BxTxKxGxE.dtype)

  q_c = to_chunks(q, nq, q_chunk)
  q_slot_c = to_chunks(q_slot, nq, q_chunk)
  seg_q_c = to_chunks(seg_q, nq, q_chunk) if segmented else q_slot_c
  out_c = jax.lax.map(one_query_chunk, (q_c, q_slot_c, seg_q_c))  # [nq, B, C, K, G, E]
  return jnp.moveaxis(out_c, 0, 1).reshape(b, tp, kh, g, e)[:, :t]


def attend(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, q_slot_BxT, kv_valid_BxS, seg_q_BxT=None,
           seg_k_BxS=None, *, impl: str = 'chunked', q_chunk: int = 128, kv_chunk: int = 512):
  """Attention output [B, T, H, E] (dtype of q) of queries over keys/values with K heads,
  H a multiple of K (grouped-query), under the visibility of the module docstring."""
  b, t, h, e = q_BxTxHxE.shape
  kh = k_BxSxKxE.shape[2]
  s = k_BxSxKxE.shape[1]
  k_BxSxKxE = k_BxSxKxE.astype(q_BxTxHxE.dtype)
  v_BxSxKxE = v_BxSxKxE.astype(q_BxTxHxE.dtype)
  if impl == 'dot_product':
    mask_Bx1xTxS = visible_BxTxS(q_slot_BxT, kv_valid_BxS, seg_q_BxT, seg_k_BxS)[:, None]
    return jax.nn.dot_product_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, mask=mask_Bx1xTxS)
  q_BxTxKxGxE = q_BxTxHxE.reshape(b, t, kh, h // kh, e)
  if impl == 'full' or (t <= q_chunk and s <= kv_chunk) or t == 1:
    mask = visible_BxTxS(q_slot_BxT, kv_valid_BxS, seg_q_BxT, seg_k_BxS)
    out = _full(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, mask)
  elif impl == 'chunked':
    out = _chunked(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, q_slot_BxT, kv_valid_BxS, seg_q_BxT,
                   seg_k_BxS, min(q_chunk, t), min(kv_chunk, s))
  else:
    raise ValueError(f'model.attention_impl={impl!r} is unknown; use one of {ATTENTION_IMPLS}.')
  return out.reshape(b, t, h, e)


attend_jit = functools.partial(jax.jit, static_argnames=('impl', 'q_chunk', 'kv_chunk'))(attend)
