"""Generation in the sampling dtype (sampling.param_dtype) on a copy of the f32 masters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import BOS, EOS, PAD, forward_fn, random_tokens

from sgpo_jax.generate import sampler as sampling
from sgpo_jax.generate import sampling_dtype
from sgpo_jax.model import flops as flops_lib

N_NEW = 6


def test_resolve_auto_per_backend_and_refuse_unknown_names():
  assert sampling_dtype.resolve('auto', 'cpu') == 'float32'
  assert sampling_dtype.resolve('auto', 'gpu') == 'bfloat16'
  assert sampling_dtype.resolve('auto', 'tpu') == 'bfloat16'
  assert sampling_dtype.resolve('float16', 'gpu') == 'float16'
  with pytest.raises(ValueError, match="sampling.param_dtype='bf16'"):
    sampling_dtype.resolve('bf16')


def test_cast_copies_once_and_matching_dtype_is_the_identity(cfg, params, param_shardings1):
  assert sampling_dtype.cast_params(params, 'float32', param_shardings1) is params
  cast = sampling_dtype.cast_params(params, 'bfloat16', param_shardings1)
  assert {x.dtype for x in jax.tree.leaves(cast)} == {jnp.dtype(jnp.bfloat16)}
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}  # masters kept
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(
      np.asarray(a), np.asarray(b.astype(jnp.bfloat16))), cast, params)
  assert sampling_dtype.sampling_model_config(cfg, 'float32') is cfg
  bf16 = sampling_dtype.sampling_model_config(cfg, 'bfloat16')
  assert (bf16.dtype, bf16.param_dtype, bf16.n_layers) == ('bfloat16', 'bfloat16', cfg.n_layers)


@pytest.mark.slow
def test_bfloat16_sampler_log_probs_are_its_own_forward_and_near_float32(
    cfg, params, mesh1, param_shardings1):
  """The bfloat16 sampler's log-probs equal a bfloat16 full forward's over its completions
  (the dtype that ran), and lie within bfloat16 rounding of the float32 model's."""
  bf16_cfg = sampling_dtype.sampling_model_config(cfg, 'bfloat16')
  bf16_params = sampling_dtype.cast_params(params, 'bfloat16', param_shardings1)
  sampler = sampling.Sampler(bf16_cfg, mesh1, param_shardings1, rows=4, max_prompt_len=8,
                             max_new_tokens=N_NEW, stop_ids=[EOS], pad_id=PAD, bos_id=BOS)
  prompts = [[BOS] + random_tokens(40 + i, n, 16).tolist() for i, n in enumerate([3, 7, 5, 1])]
  out = sampler.sample(bf16_params, prompts, [0, 1, 2, 3], jax.random.key(0), temperature=1.0)
  tokens_RxP, mask_RxP = sampler.pad_prompts(prompts)
  tokens_RxT = np.concatenate([tokens_RxP, out.tokens_RxN], 1)
  mask_RxT = np.concatenate([mask_RxP, np.ones_like(out.tokens_RxN)], 1)
  p = tokens_RxP.shape[1]

  def logp(model_cfg, weights):
    logits = np.asarray(forward_fn(model_cfg)(weights, tokens_RxT, mask_RxT), np.float64)
    logits = logits[:, p - 1:p - 1 + N_NEW]
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return np.take_along_axis(logits, out.tokens_RxN[..., None], -1)[..., 0] - logz

  valid = out.mask_RxN.astype(bool)
  own = logp(bf16_cfg, bf16_params)
  f32 = logp(cfg, params)
  np.testing.assert_allclose(out.logprobs_RxN[valid], own[valid], atol=0.05)
  assert np.abs(out.logprobs_RxN[valid] - f32[valid]).max() < 0.25
  assert np.abs(own[valid] - f32[valid]).max() > 0  # bfloat16 did run

  ledger = flops_lib.FlopsLedger(cfg, sampling_dtype=bf16_cfg.dtype)
  assert ledger.dtypes['rollout'] == 'bfloat16' and ledger.dtypes['train'] == 'float32'
  assert ledger.state_dict()['dtypes']['profile'] == 'bfloat16'
