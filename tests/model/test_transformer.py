"""Tests for sgpo_jax.model.transformer: KV-cache decode, masking, padding, GQA, dtypes, param trees."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forward_fn, left_pad, params_for, random_tokens, tiny_config

from sgpo_jax.model import transformer as model_lib

ATOL = 2e-5  # fp32, logits of order 1


@functools.lru_cache(maxsize=None)
def _cache_fns(cfg: model_lib.ModelConfig):
  """Jitted prefill and one-token decode through the explicit KV cache."""
  model = model_lib.Transformer(cfg)

  @jax.jit
  def prefill(params, prompt_BxP, prompt_mask_BxP, kv_mask_BxS):
    cache = model_lib.init_cache(cfg, prompt_BxP.shape[0], kv_mask_BxS.shape[1])
    hidden_BxPxD, cache = model.apply(
        {'params': params}, prompt_BxP, model_lib.positions_from_mask(prompt_mask_BxP),
        kv_mask_BxS, cache, 0)
    return model_lib.logits_from_hidden(params, cfg, hidden_BxPxD), cache

  @jax.jit
  def decode(params, token_B, position_B, kv_mask_BxS, cache, slot):
    hidden_Bx1xD, cache = model.apply({'params': params}, token_B[:, None], position_B[:, None],
                                      kv_mask_BxS, cache, slot)
    return model_lib.logits_from_hidden(params, cfg, hidden_Bx1xD)[:, 0], cache

  return prefill, decode


def _decode_through_cache(cfg, params, prompts, continuation_BxN, prompt_len):
  """Prefill left-padded prompts, then feed `continuation` one token at a time."""
  prefill, decode = _cache_fns(cfg)
  prompt_BxP, prompt_mask_BxP = left_pad(prompts, prompt_len)
  batch, n_new = continuation_BxN.shape
  kv_mask_BxS = np.concatenate([prompt_mask_BxP, np.ones((batch, n_new), np.int32)], 1) > 0
  prompt_logits_BxPxV, cache = prefill(params, prompt_BxP, prompt_mask_BxP, kv_mask_BxS)
  lengths_B = prompt_mask_BxP.sum(1)
  step_logits = []
  for t in range(n_new):
    logits_BxV, cache = decode(params, continuation_BxN[:, t], lengths_B + t, kv_mask_BxS, cache,
                               prompt_len + t)
    step_logits.append(logits_BxV)
  logits_BxTxV = np.concatenate([np.asarray(prompt_logits_BxPxV),
                                 np.stack([np.asarray(x) for x in step_logits], 1)], 1)
  tokens_BxT = np.concatenate([prompt_BxP, continuation_BxN], 1)
  mask_BxT = kv_mask_BxS.astype(np.int32)
  return logits_BxTxV, tokens_BxT, mask_BxT


def test_kv_cache_decode_matches_full_forward(cfg, params):
  prompts = [random_tokens(1, 6, 16), random_tokens(2, 3, 16), random_tokens(3, 1, 16)]
  continuation_BxN = random_tokens(4, (3, 5), 16)
  cached_BxTxV, tokens_BxT, mask_BxT = _decode_through_cache(cfg, params, prompts,
                                                             continuation_BxN, prompt_len=6)
  full_BxTxV = np.asarray(forward_fn(cfg)(params, tokens_BxT, mask_BxT))
  real_BxT = mask_BxT > 0
  np.testing.assert_allclose(cached_BxTxV[real_BxT], full_BxTxV[real_BxT], atol=ATOL, rtol=0)
  # The comparison is not vacuous: logits vary across positions.
  assert np.abs(np.diff(full_BxTxV[0], axis=0)).max() > 1e-2


def test_kv_cache_decode_matches_full_forward_qk_norm_and_llama3_rope():
  """Qwen3 / Llama 3 features through the sampler's cache path (head_dim != d_model / heads)."""
  cfg = tiny_config(qk_norm=True, head_dim=12, rope_type='llama3', rope_factor=8.0,
                    rope_original_max_len=16, rope_theta=500.0)
  params = params_for(cfg)
  prompts = [random_tokens(1, 6, 16), random_tokens(2, 3, 16)]
  cached_BxTxV, tokens_BxT, mask_BxT = _decode_through_cache(
      cfg, params, prompts, random_tokens(4, (2, 4), 16), prompt_len=6)
  full_BxTxV = np.asarray(forward_fn(cfg)(params, tokens_BxT, mask_BxT))
  real_BxT = mask_BxT > 0
  np.testing.assert_allclose(cached_BxTxV[real_BxT], full_BxTxV[real_BxT], atol=ATOL, rtol=0)


def test_causal_mask_future_token_never_changes_earlier_logits(cfg, params):
  tokens_BxT = random_tokens(5, (2, 10), cfg.vocab_size)
  mask_BxT = np.ones_like(tokens_BxT)
  changed_BxT = tokens_BxT.copy()
  j = 6
  changed_BxT[:, j] = np.where(tokens_BxT[:, j] == 3, 4, 3)
  fwd = forward_fn(cfg)
  before_BxTxV = np.asarray(fwd(params, tokens_BxT, mask_BxT))
  after_BxTxV = np.asarray(fwd(params, changed_BxT, mask_BxT))
  np.testing.assert_allclose(before_BxTxV[:, :j], after_BxTxV[:, :j], atol=1e-6, rtol=0)
  assert np.abs(before_BxTxV[:, j:] - after_BxTxV[:, j:]).max() > 1e-3


def test_left_padding_invariance(cfg, params):
  prompt = random_tokens(7, 7, cfg.vocab_size)
  fwd = forward_fn(cfg)
  unpadded_1xTxV = np.asarray(fwd(params, prompt[None], np.ones((1, 7), np.int32)))[0]
  tokens_BxT, mask_BxT = left_pad([prompt, prompt[2:], prompt], 12)
  # Row 2 carries garbage in its padding slots: it must not leak into real positions.
  tokens_BxT[2, :5] = random_tokens(8, 5, cfg.vocab_size)
  padded_BxTxV = np.asarray(fwd(params, tokens_BxT, mask_BxT))
  np.testing.assert_allclose(padded_BxTxV[0, 5:], unpadded_1xTxV, atol=ATOL, rtol=0)
  np.testing.assert_allclose(padded_BxTxV[2, 5:], unpadded_1xTxV, atol=ATOL, rtol=0)
  # A shorter prompt is a different sequence: its logits differ, so the check can fail.
  assert np.abs(padded_BxTxV[1, 7:] - unpadded_1xTxV[2:]).max() > 1e-3


def test_gqa_equals_mha_with_repeated_kv_heads():
  """n_kv_heads=2 under 4 query heads == MHA whose KV heads are each copied per group."""
  gqa_cfg = tiny_config(n_kv_heads=2)
  mha_cfg = tiny_config(n_kv_heads=4)
  gqa_params = params_for(gqa_cfg)
  groups = gqa_cfg.n_heads // gqa_cfg.n_kv_heads
  assert gqa_params['layers']['attn']['k']['kernel'].shape[1:] == (32, 2, 8)
  assert gqa_params['layers']['attn']['q']['kernel'].shape[1:] == (32, 4, 8)
  # HF repeat_kv convention: query head h reads KV head h // groups.
  mha_params = jax.tree_util.tree_map_with_path(
      lambda path, x: jnp.repeat(x, groups, axis=2)  # [L, D, K, E]
      if any(getattr(k, 'key', None) in ('k', 'v') for k in path) else x, gqa_params)
  assert mha_params['layers']['attn']['k']['kernel'].shape[1:] == (32, 4, 8)
  tokens_BxT = random_tokens(9, (2, 9), 16)
  tokens_BxT, mask_BxT = left_pad([tokens_BxT[0], tokens_BxT[1, :5]], 9)
  gqa_BxTxV = np.asarray(forward_fn(gqa_cfg)(gqa_params, tokens_BxT, mask_BxT))
  mha_BxTxV = np.asarray(forward_fn(mha_cfg)(mha_params, tokens_BxT, mask_BxT))
  np.testing.assert_allclose(gqa_BxTxV, mha_BxTxV, atol=ATOL, rtol=0)
  # Pairing query heads with KV heads the other way round (h % K) gives different logits.
  swapped = jax.tree_util.tree_map_with_path(
      lambda path, x: jnp.tile(x, (1, groups, 1))
      if any(getattr(k, 'key', None) in ('k', 'v') for k in path) else x, gqa_params)
  swapped_BxTxV = np.asarray(forward_fn(mha_cfg)(swapped, tokens_BxT, mask_BxT))
  assert np.abs(swapped_BxTxV - gqa_BxTxV).max() > 1e-3


def test_bf16_compute_close_to_fp32(cfg, params):
  bf16_cfg = dataclasses.replace(cfg, dtype='bfloat16', param_dtype='float32')
  bf16_params = params_for(bf16_cfg)
  assert {x.dtype for x in jax.tree.leaves(bf16_params)} == {jnp.dtype(jnp.float32)}
  tokens_BxT = random_tokens(10, (2, 10), cfg.vocab_size)
  tokens_BxT, mask_BxT = left_pad([tokens_BxT[0], tokens_BxT[1, :6]], 10)
  fp32_BxTxV = np.asarray(forward_fn(cfg)(params, tokens_BxT, mask_BxT))
  bf16_BxTxV = np.asarray(forward_fn(bf16_cfg)(params, tokens_BxT, mask_BxT))
  assert bf16_BxTxV.dtype == np.float32 and np.isfinite(bf16_BxTxV).all()
  real_BxT = mask_BxT > 0
  err = np.abs(bf16_BxTxV - fp32_BxTxV)[real_BxT].max()
  scale = np.abs(fp32_BxTxV[real_BxT]).max()
  assert err < 0.05 * scale, (err, scale)
  assert err > 0  # bf16 was really used
  bf16_cache = model_lib.init_cache(bf16_cfg, 2, 4)
  assert bf16_cache[0].dtype == jnp.bfloat16


def test_tied_and_untied_param_trees():
  tied = params_for(tiny_config(tie_embeddings=True))
  untied = params_for(tiny_config(tie_embeddings=False))
  assert 'lm_head' not in tied
  assert untied['lm_head'].shape == (32, 16)
  assert set(untied) - set(tied) == {'lm_head'}
  tied_cfg, untied_cfg = tiny_config(tie_embeddings=True), tiny_config(tie_embeddings=False)
  np.testing.assert_array_equal(model_lib.lm_head_DxV(tied, tied_cfg), tied['embedding'].T)
  np.testing.assert_array_equal(model_lib.lm_head_DxV(untied, untied_cfg), untied['lm_head'])
  # The untied head really drives the logits; the embedding then only feeds the input.
  tokens_BxT = random_tokens(11, (1, 5), 16)
  mask_BxT = np.ones_like(tokens_BxT)
  fwd = forward_fn(untied_cfg)
  base = np.asarray(fwd(untied, tokens_BxT, mask_BxT))
  bumped = np.asarray(fwd(dict(untied, lm_head=untied['lm_head'] * 2.0), tokens_BxT, mask_BxT))
  np.testing.assert_allclose(bumped, 2.0 * base, rtol=1e-5, atol=1e-6)


def test_qkv_bias_params_present_and_used():
  cfg = tiny_config(qkv_bias=True)
  params = params_for(cfg)
  attn = params['layers']['attn']  # stacked layers: [L, ...]
  assert attn['q']['bias'].shape[1:] == (4, 8)
  assert attn['k']['bias'].shape[1:] == (2, 8)
  assert attn['v']['bias'].shape[1:] == (2, 8)
  assert 'bias' not in attn['o']
  assert 'bias' not in params_for(tiny_config(qkv_bias=False))['layers']['attn']['q']
  tokens_BxT = random_tokens(12, (1, 6), 16)
  mask_BxT = np.ones_like(tokens_BxT)
  fwd = forward_fn(cfg)
  biased = jax.tree.map(lambda x: x, params)
  biased['layers']['attn']['v']['bias'] = attn['v']['bias'].at[0].set(0.5)
  assert np.abs(np.asarray(fwd(biased, tokens_BxT, mask_BxT))
                - np.asarray(fwd(params, tokens_BxT, mask_BxT))).max() > 1e-3


def test_qk_norm_params_present_and_used():
  cfg = tiny_config(qk_norm=True, head_dim=12)
  params = params_for(cfg)
  attn = params['layers']['attn']
  assert attn['q_norm']['scale'].shape[1:] == (12,) and attn['k_norm']['scale'].shape[1:] == (12,)
  assert attn['q']['kernel'].shape[1:] == (32, 4, 12)
  assert 'q_norm' not in params_for(tiny_config(head_dim=12))['layers']['attn']
  tokens_BxT = random_tokens(12, (1, 6), 16)
  mask_BxT = np.ones_like(tokens_BxT)
  fwd = forward_fn(cfg)
  scaled = jax.tree.map(lambda x: x, params)
  scaled['layers']['attn']['k_norm']['scale'] = attn['k_norm']['scale'].at[0].multiply(2.0)
  assert np.abs(np.asarray(fwd(scaled, tokens_BxT, mask_BxT))
                - np.asarray(fwd(params, tokens_BxT, mask_BxT))).max() > 1e-3


def test_rope_inverse_frequencies_by_hand():
  """theta 100, head_dim 4: inv_freq = [1, 0.1], wavelengths 2 pi and 20 pi."""
  base = tiny_config(head_dim=4, rope_theta=100.0)
  np.testing.assert_allclose(model_lib.rope_inv_freq(base), [1.0, 0.1], rtol=1e-6)
  linear = dataclasses.replace(base, rope_type='linear', rope_factor=2.0)
  np.testing.assert_allclose(model_lib.rope_inv_freq(linear), [0.5, 0.05], rtol=1e-6)
  # llama3, original length 40 (low 1, high 4): kept below 40/4 = 10, divided above 40.
  llama3 = dataclasses.replace(base, rope_type='llama3', rope_factor=4.0,
                               rope_original_max_len=40)
  np.testing.assert_allclose(model_lib.rope_inv_freq(llama3), [1.0, 0.025], rtol=1e-6)
  # original length 100: 20 pi lies in [25, 100], interpolated with s = (100 / 20 pi - 1) / 3.
  mid = dataclasses.replace(llama3, rope_original_max_len=100)
  s = (100 / (20 * np.pi) - 1) / 3
  np.testing.assert_allclose(model_lib.rope_inv_freq(mid),
                             [1.0, (1 - s) * 0.1 / 4 + s * 0.1], rtol=1e-6)


def test_forward_pass_rope_frequencies_agree_with_the_table():
  """The in-graph unscaled formula (kept for the cached warm starts) and the numpy table agree
  to float32 rounding; scaled types use the table as is."""
  for head_dim, theta in ((32, 10000.0), (64, 1_000_000.0), (4, 100.0)):
    cfg = tiny_config(head_dim=head_dim, rope_theta=theta)
    traced = np.asarray(jax.jit(lambda: model_lib.rope_inv_freq_traced(cfg))())
    table = model_lib.rope_inv_freq(cfg)
    assert traced.dtype == table.dtype == np.float32 and traced.shape == (head_dim // 2,)
    np.testing.assert_array_max_ulp(traced, table, maxulp=2)
  linear = tiny_config(head_dim=8, rope_type='linear', rope_factor=2.0)
  assert model_lib.rope_inv_freq_traced(linear) is not None
  np.testing.assert_array_equal(np.asarray(model_lib.rope_inv_freq_traced(linear)),
                                model_lib.rope_inv_freq(linear))


@functools.lru_cache(maxsize=None)
def _loss_and_grad_fn(cfg):
  """Jitted next-token cross-entropy -> ((loss, logits_BxTxV), grads)."""
  model = model_lib.Transformer(cfg)

  def loss(params, tokens_BxT, mask_BxT):
    logits_BxTxV = model_lib.forward(model, params, tokens_BxT, mask_BxT)
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV[:, :-1])
    nll_BxT = -jnp.take_along_axis(logp_BxTxV, tokens_BxT[:, 1:, None], -1)[..., 0]
    weight_BxT = mask_BxT[:, 1:] * mask_BxT[:, :-1]
    return jnp.sum(nll_BxT * weight_BxT) / jnp.sum(weight_BxT), logits_BxTxV
  return jax.jit(jax.value_and_grad(loss, has_aux=True))


@pytest.mark.slow
def test_remat_same_logits_and_grads(cfg, params):
  remat_cfg = dataclasses.replace(cfg, remat=True)
  tokens_BxT = random_tokens(13, (2, 9), cfg.vocab_size)
  tokens_BxT, mask_BxT = left_pad([tokens_BxT[0], tokens_BxT[1, :4]], 9)
  (loss, logits_BxTxV), grads = _loss_and_grad_fn(cfg)(params, tokens_BxT, mask_BxT)
  (remat_loss, remat_logits_BxTxV), remat_grads = _loss_and_grad_fn(remat_cfg)(
      params, tokens_BxT, mask_BxT)
  np.testing.assert_allclose(remat_logits_BxTxV, logits_BxTxV, atol=1e-6, rtol=0)
  np.testing.assert_allclose(remat_loss, loss, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5),
               remat_grads, grads)
  assert float(jnp.abs(grads['layers']['attn']['q']['kernel'][0]).max()) > 0


def test_positions_from_mask_counts_real_tokens_only():
  mask_BxT = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
  np.testing.assert_array_equal(model_lib.positions_from_mask(mask_BxT),
                                [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]])


@pytest.mark.parametrize('overrides, message', [
    (dict(n_heads=4, n_kv_heads=3), 'n_kv_heads=3'),
    (dict(head_dim=7), 'head_dim=7'),
    (dict(dtype='float64'), "dtype='float64'"),
    (dict(param_dtype='int8'), "param_dtype='int8'"),
    (dict(rope_type='yarn'), "rope_type='yarn'"),
    (dict(rope_type='linear', rope_factor=0.0), 'rope_factor=0.0'),
    (dict(rope_type='llama3', rope_low_freq_factor=4.0, rope_high_freq_factor=1.0),
     'rope_low_freq_factor=4.0'),
])
def test_validate_errors(overrides, message):
  with pytest.raises(ValueError, match=message):
    tiny_config(**overrides).validate()


def test_validate_accepts_good_configs():
  tiny_config().validate()
  tiny_config(n_kv_heads=4, dtype='bfloat16').validate()
  tiny_config(n_kv_heads=1).validate()


def _attention_inputs(seed, b=2, t=37, s=53, h=4, k=2, e=8):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, t, h, e)), jnp.float32)
  kv = [jnp.asarray(rng.normal(size=(b, s, k, e)), jnp.float32) for _ in range(2)]
  return q, kv[0], kv[1]


@pytest.mark.slow
@pytest.mark.parametrize('case', ['cache_offset', 'packed'])
def test_chunked_attention_matches_full(case):
  """Online softmax over 8 x 16 blocks (ragged last blocks) == full softmax, outputs and
  gradients: GQA (4 query heads, 2 KV heads), left padding, queries at cache offset 16 of 53
  key slots; and packed rows (segment ids, segment 0 = padding) without a cache."""
  from sgpo_jax.model import attention
  if case == 'cache_offset':
    q, k, v = _attention_inputs(0)
    q_slot = jnp.broadcast_to(16 + jnp.arange(37), (2, 37))
    kv_valid = jnp.arange(53)[None, :] >= jnp.array([[0], [11]])  # row 1: 11 padding slots
    seg = None
  else:
    q, k, v = _attention_inputs(1, t=40, s=40)
    q_slot = jnp.broadcast_to(jnp.arange(40), (2, 40))
    kv_valid = jnp.ones((2, 40), bool)
    seg = jnp.asarray(np.repeat([[1, 2, 2, 3, 0], [4, 4, 5, 5, 5]], 8, axis=1))

  def run(impl, q, k, v):
    return attention.attend(q, k, v, q_slot, kv_valid, seg, seg, impl=impl, q_chunk=8,
                            kv_chunk=16)
  full = run('full', q, k, v)
  chunked = run('chunked', q, k, v)
  visible = attention.visible_BxTxS(q_slot, kv_valid, seg, seg).any(-1)  # rows with any key
  np.testing.assert_allclose(np.asarray(chunked)[visible], np.asarray(full)[visible], atol=2e-6)
  weights = jnp.asarray(np.random.default_rng(2).normal(size=full.shape)) * visible[..., None,
                                                                                    None]
  loss = lambda impl: lambda *x: jnp.sum(run(impl, *x) * weights)  # noqa: E731
  grads_full = jax.grad(loss('full'), argnums=(0, 1, 2))(q, k, v)
  grads_chunked = jax.grad(loss('chunked'), argnums=(0, 1, 2))(q, k, v)
  for a, b in zip(grads_chunked, grads_full):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  # dot_product (XLA here) agrees too.
  np.testing.assert_allclose(np.asarray(run('dot_product', q, k, v))[visible],
                             np.asarray(full)[visible], atol=2e-6)


@pytest.mark.slow
def test_chunked_prefill_and_decode_match_full_attention_model(cfg, params):
  """The whole model with tiny attention blocks (prefill 9 tokens in 2 x 4 blocks into a
  12-slot cache, then decode) matches the full-softmax model's full forward."""
  small = dataclasses.replace(cfg, attention_q_chunk=2, attention_kv_chunk=4)
  tokens_BxT = random_tokens(21, (2, 12), cfg.vocab_size)
  tokens_BxT, mask_BxT = left_pad([tokens_BxT[0], tokens_BxT[1, :7]], 12)
  want = np.asarray(forward_fn(dataclasses.replace(cfg, attention_impl='full'))(
      params, tokens_BxT, mask_BxT))
  got = np.asarray(forward_fn(small)(params, tokens_BxT, mask_BxT))
  np.testing.assert_allclose(got[0], want[0], atol=ATOL)
  np.testing.assert_allclose(got[1, 5:], want[1, 5:], atol=ATOL)
  model = model_lib.Transformer(small)
  positions = model_lib.positions_from_mask(mask_BxT)
  cache = model_lib.init_cache(small, 2, 12)
  hidden, cache = model.apply({'params': params}, tokens_BxT[:, :9], positions[:, :9],
                              mask_BxT.astype(bool), cache, 0)
  steps = [model_lib.logits_from_hidden(params, small, hidden)[:, -1]]
  for i in range(9, 11):
    hidden, cache = model.apply({'params': params}, tokens_BxT[:, i:i + 1], positions[:, i:i + 1],
                                mask_BxT.astype(bool), cache, i)
    steps.append(model_lib.logits_from_hidden(params, small, hidden)[:, 0])
  np.testing.assert_allclose(np.stack(steps, 1), want[:, 8:11], atol=ATOL)
