"""The TPU splash kernel (run here in the Pallas interpreter) and 'auto' against the reference
attention: outputs and gradients on tiny shapes (GQA, left padding, packed segments, prefill
into a longer cache), the whole model's prefill + decode, the fallbacks, and which kernel
'auto' picks on each backend (bit-identical to 'chunked' on CPU)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forward_fn, left_pad, params_for, random_tokens, tiny_config

from sgpo_jax.model import attention
from sgpo_jax.model import transformer as model_lib

ATOL = 2e-5  # fp32 logits of order 1, as tests/model/test_transformer.py


def _qkv(seed, b=2, t=128, s=128, h=4, k=2, e=8):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, t, h, e)), jnp.float32)
  kv = [jnp.asarray(rng.normal(size=(b, s, k, e)), jnp.float32) for _ in range(2)]
  return q, kv[0], kv[1]


def _case(name):
  """(q, k, v, kv_valid, seg) of a causal case with queries at slots 0..T-1."""
  if name == 'padding':  # row 1: 37 left-padding slots
    q, k, v = _qkv(0)
    return q, k, v, jnp.arange(128)[None, :] >= jnp.array([[0], [37]]), None
  if name == 'packed':  # segments of 16 tokens, segment 0 = padding (also mid-row)
    q, k, v = _qkv(1)
    seg = jnp.asarray(np.repeat([[1, 2, 2, 3, 0, 4, 4, 0], [5, 5, 5, 6, 6, 7, 8, 8]], 16, axis=1))
    return q, k, v, seg > 0, seg
  # prefill of 128 prompt slots into a 256-slot cache: the generated slots are valid keys
  # but lie in every query's future
  q, k, v = _qkv(2, s=256)
  valid = (jnp.arange(256)[None, :] >= jnp.array([[5], [90]])) | (jnp.arange(256) >= 128)
  return q, k, v, valid, None


@pytest.mark.slow
@pytest.mark.parametrize('name', ['padding', 'packed', 'cache'])
def test_splash_matches_full_attention(name):
  """Outputs of every query with a visible key; for 'padding', gradients of q, k and v too."""
  q, k, v, valid, seg = _case(name)

  def run(impl, q, k, v):
    return attention.attend(q, k, v, None, valid, seg, seg, impl=impl)

  full, splash = run('full', q, k, v), jax.jit(run, static_argnums=0)('splash', q, k, v)
  slots = attention.causal_slots_BxT(*q.shape[:2])
  seen = np.asarray(attention.visible_BxTxS(slots, valid, seg, seg).any(-1))
  assert seen.sum() >= 160  # the comparison covers most queries, not a handful
  np.testing.assert_allclose(np.asarray(splash)[seen], np.asarray(full)[seen], atol=2e-6)
  if name != 'padding':
    return
  weights = jnp.asarray(np.random.default_rng(3).normal(size=full.shape)) * seen[..., None, None]
  loss = lambda impl: lambda *x: jnp.sum(run(impl, *x) * weights)  # noqa: E731
  grads_full = jax.grad(loss('full'), argnums=(0, 1, 2))(q, k, v)
  grads_splash = jax.jit(jax.grad(loss('splash'), argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(grads_splash, grads_full):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_splash_under_a_mesh_context_matches_plain_call():
  """The shard_map path (rows over the batch axes, heads over 'tp') on a 1-device mesh."""
  q, k, v, valid, _ = _case('padding')
  run = jax.jit(lambda q, k, v: attention.attend(q, k, v, None, valid, impl='splash'))
  want = np.asarray(run(q, k, v))
  mesh = jax.make_mesh((1, 1, 1), ('data', 'fsdp', 'tp'))
  with jax.set_mesh(mesh):
    got = np.asarray(jax.jit(lambda q, k, v: attention.attend(q, k, v, None, valid,
                                                              impl='splash'))(q, k, v))
  np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize('t,s,offset', [(37, 53, None), (1, 128, 100), (128, 256, 16)])
def test_splash_falls_back_to_chunked(t, s, offset):
  """Ragged T/S, a decode step and a prefill at a cache offset are 'chunked', bit for bit."""
  q, k, v = _qkv(4, t=t, s=s)
  valid = jnp.ones((2, s), bool)
  slots = None if offset is None else jnp.broadcast_to(offset + jnp.arange(t), (2, t))
  run = lambda impl: np.asarray(attention.attend(  # noqa: E731
      q, k, v, slots, valid, impl=impl, q_chunk=16, kv_chunk=32))
  np.testing.assert_array_equal(run('splash'), run('chunked'))


@pytest.mark.slow
def test_model_prefill_and_decode_with_splash_match_full():
  """The model as the sampler runs it: prefill of a 128-token bucket (left padded) into a
  256-slot cache with splash, then decode steps (direct path), against the full-softmax
  model's forward over the same tokens; and the cache-free forward with splash."""
  cfg = tiny_config(max_len=256)
  params = params_for(cfg)
  splash_cfg = dataclasses.replace(cfg, attention_impl='splash')
  raw = random_tokens(31, (2, 131), cfg.vocab_size)
  tokens_BxT, mask_BxT = left_pad([raw[0], raw[1, :100]], 131)
  want = np.asarray(forward_fn(dataclasses.replace(cfg, attention_impl='full'))(
      params, tokens_BxT, mask_BxT))
  got = np.asarray(forward_fn(splash_cfg)(params, tokens_BxT[:, :128], mask_BxT[:, :128]))
  np.testing.assert_allclose(got[0], want[0, :128], atol=ATOL)
  np.testing.assert_allclose(got[1, 31:], want[1, 31:128], atol=ATOL)

  model = model_lib.Transformer(splash_cfg)
  positions = model_lib.positions_from_mask(mask_BxT)
  kv_mask = np.concatenate([mask_BxT, np.ones((2, 256 - 131), np.int32)], 1).astype(bool)

  @jax.jit
  def prefill(params, cache):
    hidden, cache = model.apply({'params': params}, tokens_BxT[:, :128], positions[:, :128],
                                kv_mask, cache, 0)
    return model_lib.logits_from_hidden(params, splash_cfg, hidden)[:, -1], cache

  @jax.jit
  def decode(params, cache, i):
    hidden, cache = model.apply({'params': params}, jax.lax.dynamic_slice_in_dim(
        tokens_BxT, i, 1, 1), jax.lax.dynamic_slice_in_dim(positions, i, 1, 1), kv_mask, cache, i)
    return model_lib.logits_from_hidden(params, splash_cfg, hidden)[:, 0], cache

  logits, cache = prefill(params, model_lib.init_cache(splash_cfg, 2, 256))
  steps = [logits]
  for i in range(128, 130):
    logits, cache = decode(params, cache, i)
    steps.append(logits)
  np.testing.assert_allclose(np.stack(steps, 1), want[:, 127:130], atol=ATOL)


def test_auto_picks_per_backend_and_is_chunked_bit_for_bit_on_cpu(cfg):
  assert attention.resolve_impl('auto', 'cpu') == 'chunked'
  assert attention.resolve_impl('auto', 'gpu') == 'dot_product'
  assert attention.resolve_impl('auto', 'tpu') == 'splash'  # one device here
  assert attention.resolve_impl('full', 'tpu') == 'full'
  with pytest.raises(ValueError, match='attention_impl=.flash.'):
    attention.resolve_impl('flash')
  auto_cfg = dataclasses.replace(cfg, attention_impl='auto', attention_q_chunk=2,
                                 attention_kv_chunk=4)
  chunked_cfg = dataclasses.replace(auto_cfg, attention_impl='chunked')
  auto_cfg.validate()
  tokens_BxT, mask_BxT = left_pad([random_tokens(7, 12, cfg.vocab_size),
                                   random_tokens(8, 5, cfg.vocab_size)], 12)
  params = params_for(cfg)
  np.testing.assert_array_equal(np.asarray(forward_fn(auto_cfg)(params, tokens_BxT, mask_BxT)),
                                np.asarray(forward_fn(chunked_cfg)(params, tokens_BxT, mask_BxT)))


def test_cudnn_applies_only_where_its_checks_pass():
  q = lambda t, e, dtype=jnp.bfloat16: jax.ShapeDtypeStruct((2, t, 4, e), dtype)  # noqa: E731
  assert attention.cudnn_applies(q(512, 128), 1536, 'gpu')
  assert not attention.cudnn_applies(q(512, 128), 1536, 'cpu')
  assert not attention.cudnn_applies(q(512, 128, jnp.float32), 1536, 'gpu')  # f32: XLA
  assert not attention.cudnn_applies(q(512, 100), 1536, 'gpu')  # head dim not a multiple of 8
  assert not attention.cudnn_applies(q(512, 256), 1536, 'gpu')  # above the pre-Hopper limit
  assert not attention.cudnn_applies(q(37, 128), 1536, 'gpu')  # odd T with a mask (bias)
  assert attention.splash_blocks(512, 1536) == (512, 512)
  assert attention.splash_blocks(384, 640) == (128, 128)
  assert attention.splash_blocks(64, 1536) is None


def test_auto_is_splash_on_a_multi_chip_tpu_once_the_run_sets_its_mesh(monkeypatch):
  """train.run enters `attention.run_mesh_context`: on a multi-chip TPU (faked here: backend
  and device count) it sets the run's mesh, and 'auto' resolves to 'splash' inside it where
  it would take 'chunked' outside; elsewhere the context is a no-op."""
  import contextlib

  from sgpo_jax.config import defaults
  assert attention.needs_mesh_context('auto', 'tpu', 8)
  assert attention.needs_mesh_context('splash', 'tpu', 4)
  assert not attention.needs_mesh_context('auto', 'tpu', 1)
  assert not attention.needs_mesh_context('auto', 'gpu', 8)
  assert not attention.needs_mesh_context('chunked', 'tpu', 8)
  config = defaults.get_config()
  config.model.attention_impl = 'auto'
  assert isinstance(attention.run_mesh_context(config), contextlib.nullcontext)  # CPU here

  monkeypatch.setattr(jax, 'default_backend', lambda: 'tpu')
  monkeypatch.setattr(jax, 'device_count', lambda *a: 8)
  assert attention.resolve_impl('auto') == 'chunked'  # no mesh: a Pallas call can't partition
  with attention.run_mesh_context(config):
    assert not jax.sharding.get_abstract_mesh().empty
    assert attention.resolve_impl('auto') == 'splash'
  config.model.attention_impl = 'chunked'
  assert isinstance(attention.run_mesh_context(config), contextlib.nullcontext)
