"""The analytic FLOPs ledger agrees with XLA's own cost analysis of the compiled model."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from sgpo_jax.config import defaults as default_config
from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import transformer as model_lib


@pytest.fixture(scope='module')
def default_model():
  cfg = model_lib.ModelConfig.from_config(default_config.get_config().model)
  # XLA's cost analysis counts a while-loop body once: unroll the layer scan to compare.
  cfg = dataclasses.replace(cfg, scan_unroll=cfg.n_layers)
  return cfg, model_lib.init_params(cfg, jax.random.key(0))


@pytest.mark.slow
@pytest.mark.parametrize('rows,seq_len', [(64, 20), (16, 32)])
def test_forward_flops_match_xla_within_15_percent(default_model, rows, seq_len):
  cfg, params = default_model
  model = model_lib.Transformer(cfg)
  tokens = jnp.ones((rows, seq_len), jnp.int32)
  forward = jax.jit(lambda p, t, m: model_lib.forward(model, p, t, m))
  measured = flops_lib.xla_flops(forward, params, tokens, tokens)
  analytic = rows * seq_len * flops_lib.forward_flops_per_token(cfg, seq_len)
  assert measured == pytest.approx(analytic, rel=0.15)


def test_train_step_flops_match_xla_within_15_percent(default_model):
  cfg, params = default_model
  model = model_lib.Transformer(cfg)
  rows, seq_len = 64, 20
  tokens = jnp.ones((rows, seq_len), jnp.int32)

  def loss(p):
    logits = model_lib.forward(model, p, tokens, tokens)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

  measured = flops_lib.xla_flops(jax.jit(jax.grad(loss)), params)
  analytic = rows * seq_len * flops_lib.train_flops_per_token(cfg, seq_len)
  assert measured == pytest.approx(analytic, rel=0.15)


@pytest.mark.slow
def test_lora_train_step_flops_match_xla_within_15_percent():
  """Gradients of the adapters alone: XLA computes no weight gradient for the frozen base,
  and the ledger charges none (the full fine-tuning count would be ~1.4x off here)."""
  from sgpo_jax.model import lora as lora_lib
  base_cfg = model_lib.ModelConfig.from_config(default_config.get_config().model)
  base_cfg = dataclasses.replace(base_cfg, scan_unroll=base_cfg.n_layers)
  cfg = dataclasses.replace(base_cfg, lora_rank=8)
  base = model_lib.init_params(base_cfg, jax.random.key(0))
  params = lora_lib.attach(cfg, base, jax.random.key(1))
  adapters, frozen = lora_lib.split(params)
  model = lora_lib.make_model(cfg)
  rows, seq_len = 64, 20
  tokens = jnp.ones((rows, seq_len), jnp.int32)

  def loss(a):
    logits = model_lib.forward(model, lora_lib.merge(a, frozen), tokens, tokens)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

  measured = flops_lib.xla_flops(jax.jit(jax.grad(loss)), adapters)
  analytic = rows * seq_len * flops_lib.train_flops_per_token(cfg, seq_len)
  full_count = rows * seq_len * 3 * flops_lib.forward_flops_per_token(cfg, seq_len)
  assert measured == pytest.approx(analytic, rel=0.15)
  assert full_count > 1.3 * measured


@pytest.mark.slow
def test_sampler_prefill_flops_match_xla_within_15_percent(default_model):
  """The static sampler's prefill: every prompt position attends over the whole KV cache
  (prompt + new-token slots), and the LM head runs at the last position only."""
  cfg, params = default_model
  model = model_lib.Transformer(cfg)
  rows, prompt_len, new = 16, 16, 112
  cache_len = prompt_len + new
  tokens = jnp.ones((rows, prompt_len), jnp.int32)

  def prefill(p, tokens_RxP, cache):
    mask_RxP = jnp.ones_like(tokens_RxP)
    kv_mask_RxS = jnp.concatenate([mask_RxP.astype(bool), jnp.ones((rows, new), bool)], 1)
    hidden, _ = model.apply({'params': p}, tokens_RxP, model_lib.positions_from_mask(mask_RxP),
                            kv_mask_RxS, cache, 0)
    return model_lib.logits_from_hidden(p, cfg, hidden[:, -1:])

  cache = model_lib.init_cache(cfg, rows, cache_len)
  measured = flops_lib.xla_flops(jax.jit(prefill), params, tokens, cache)
  analytic = rows * flops_lib.prefill_flops(cfg, prompt_len, cache_len)
  assert measured == pytest.approx(analytic, rel=0.15)
  # The count it replaced (a full forward attending over the prompt alone) is further off.
  old = rows * prompt_len * flops_lib.forward_flops_per_token(cfg, prompt_len)
  assert abs(analytic - measured) < abs(old - measured)
