"""LoRA / QLoRA through qwix (model/lora.py): adapters-only training, frozen base, counts,
quantized-base accuracy, merged and PEFT export, packing, continuous sampler, exact resume."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.rl import learner as learner_lib
from tests.conftest import mesh_config, tiny_config
from tests.rl.test_learner import make_batch, run_config

LORA = dict(lora_rank=4, lora_alpha=8.0)


def lora_learner(config, **lora):
  cfg = tiny_config(**{**LORA, **lora})
  mesh = sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  base, _ = model_lib.init_sharded_params(dataclasses.replace(cfg, lora_rank=0,
                                                                 lora_base_dtype=None),
                                             mesh, jax.random.key(0))
  params, shardings = lora_lib.attach_sharded(cfg, base, mesh, jax.random.key(1))
  learner = learner_lib.Learner(cfg, mesh, shardings, config, num_steps=10)
  return learner, learner.init_state(params)


@pytest.mark.parametrize('fields, match', [
    (dict(lora_rank=-1), 'lora_rank=-1'),
    (dict(lora_rank=4, lora_targets=('q', 'qkv')), "'qkv'"),
    (dict(lora_rank=4, lora_base_dtype='fp8'), "lora_base_dtype='fp8'"),
    (dict(lora_rank=0, lora_base_dtype='nf4'), "lora_base_dtype='nf4'"),
])
def test_bad_lora_settings_are_one_line_errors(fields, match):
  with pytest.raises(ValueError, match=match) as info:
    tiny_config(**fields).validate()
  assert '\n' not in str(info.value)


def test_lora_on_a_family_it_cannot_wrap_is_an_error():
  with pytest.raises(ValueError, match="'gpt2'"):
    lora_lib.check_family('gpt2')


@pytest.mark.slow
def test_trainable_count_is_the_hand_computed_adapter_count():
  # d=32, H=4, K=2, E=8, F=64, L=2, r=4: q 32+32, v 32+16, down 64+32 -> 208 per rank-layer.
  cfg = tiny_config(lora_rank=4, lora_targets=('q', 'v', 'down'))
  base = model_lib.init_params(dataclasses.replace(cfg, lora_rank=0), jax.random.key(0))
  counts = lora_lib.param_counts(lora_lib.attach(cfg, base, jax.random.key(1)))
  assert counts['trainable_params'] == 2 * 4 * 208 == lora_lib.expected_adapter_count(cfg)
  n_base = sum(x.size for x in jax.tree.leaves(base))
  assert counts['total_params'] == n_base + 1664
  assert lora_lib.param_counts(base) == {'trainable_params': n_base, 'total_params': n_base}


@pytest.mark.slow
@pytest.mark.parametrize('base_dtype', [None, 'nf4'])
def test_adapters_alone_train_and_the_base_stays_bit_identical(base_dtype):
  config = run_config(learning_rate=3e-2, loss_agg='seq_mean_token_mean')
  learner, state = lora_learner(config, lora_base_dtype=base_dtype)
  _, base0 = lora_lib.split(jax.device_get(state['params']))
  adapters0, _ = lora_lib.split(state['params'])
  # optimizer moments exist for the adapters only
  n_adapters = sum(x.size for x in jax.tree.leaves(adapters0))
  n_moments = sum(x.size for x in jax.tree.leaves(state['opt_state']) if x.ndim > 0)
  assert n_moments == 2 * n_adapters
  batch = make_batch([4, 4, 4, 4], seed=3)
  batch['rewards_R'] = np.tile([1.0, 0.0, 0.0, 0.0], 4).astype(np.float32)
  positive = (batch['rewards_R'] > 0)[:, None] * batch['completion_mask_RxT1']

  def nll():  # negative log-likelihood of the rewarded completions
    logp = np.asarray(learner.logprobs(state['params'], batch['tokens_RxT'], batch['mask_RxT']))
    return -float((logp * positive).sum())
  losses = [nll()]
  for _ in range(4):
    batch['old_logp_RxT1'] = np.asarray(learner.logprobs(
        state['params'], batch['tokens_RxT'], batch['mask_RxT'])) * batch['completion_mask_RxT1']
    state, _ = learner.train_step(state, batch)
    losses.append(nll())
  assert losses[-1] < 0.8 * losses[0], losses
  _, base1 = lora_lib.split(jax.device_get(state['params']))
  for a, b in zip(jax.tree.leaves(base0), jax.tree.leaves(base1)):
    np.testing.assert_array_equal(a, b)
  adapters1, _ = lora_lib.split(state['params'])
  moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(adapters0),
                                                    jax.tree.leaves(adapters1))]
  assert all(moved)


@pytest.mark.slow
def test_packed_step_with_lora_equals_padded_step():
  batch = make_batch([4, 4, 4, 4], seed=5)
  results = []
  for packing in (False, True):
    config = run_config(learning_rate=1e-2, packing=packing, pack_rows=4)
    learner, state = lora_learner(config)
    state, metrics = learner.train_step(state, batch)
    results.append((jax.device_get(lora_lib.split(state['params'])[0]), float(metrics['loss'])))
  np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(results[0][0]), jax.tree.leaves(results[1][0])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _logits(cfg, params, tokens):
  return np.asarray(model_lib.forward(lora_lib.make_model(cfg), params, tokens,
                                      np.ones_like(tokens)))


# Relative L2 error of the logits of a QLoRA base against the float32 base, tiny model
# (init_std 0.2, 2 layers): measured int8 2.1% (kernel 0.55%), nf4 29% (kernel 8.7%): nf4 has
# 16 levels, and a random tiny model amplifies kernel error more than a trained one.
QUANT_TOLERANCE = {'int8': 0.04, 'nf4': 0.5}


@pytest.mark.slow
@pytest.mark.parametrize('base_dtype', ['int8', 'nf4'])
def test_quantized_base_logits_are_close_to_full_precision(base_dtype):
  cfg = tiny_config(**LORA)
  base = model_lib.init_params(dataclasses.replace(cfg, lora_rank=0), jax.random.key(0))
  tokens = np.array([[1, 4, 5, 13, 6, 14, 3, 9]], np.int32)
  full = _logits(cfg, lora_lib.attach(cfg, base, jax.random.key(1)), tokens)
  qcfg = dataclasses.replace(cfg, lora_base_dtype=base_dtype)
  quant = _logits(qcfg, lora_lib.attach(qcfg, base, jax.random.key(1)), tokens)
  rel = np.linalg.norm(quant - full) / np.linalg.norm(full)
  assert 0 < rel < QUANT_TOLERANCE[base_dtype], rel


@pytest.mark.slow
@pytest.mark.parametrize('base_dtype', [None, 'int8'])
def test_merged_weights_and_peft_adapters_match_the_lora_model(base_dtype, tmp_path):
  cfg = tiny_config(**LORA, lora_base_dtype=base_dtype)
  base = model_lib.init_params(dataclasses.replace(cfg, lora_rank=0, lora_base_dtype=None),
                               jax.random.key(0))
  params = lora_lib.attach(cfg, base, jax.random.key(1))
  adapters, frozen = lora_lib.split(params)
  rng = np.random.default_rng(0)
  adapters = jax.tree.map(lambda x: 0.1 * rng.standard_normal(x.shape).astype(np.float32),
                          adapters)  # trained-looking B != 0
  params = lora_lib.merge(adapters, frozen)
  tokens = np.array([[1, 4, 5, 13, 6, 14, 3, 9]], np.int32)
  ours = _logits(cfg, params, tokens)
  plain_cfg = dataclasses.replace(cfg, lora_rank=0, lora_base_dtype=None)
  merged = _logits(plain_cfg, lora_lib.merged_params(cfg, params), tokens)
  np.testing.assert_allclose(merged, ours, atol=1e-4, rtol=1e-4)
  # the reference policy (B zeroed) is the base model
  ref = _logits(cfg, lora_lib.reference_params(params), tokens)
  np.testing.assert_allclose(ref, _logits(cfg, lora_lib.merge(
      jax.tree.map(np.zeros_like, adapters), frozen), tokens), atol=0, rtol=0)
  lora_lib.save_peft(cfg, params, str(tmp_path))
  from safetensors.numpy import load_file
  tensors = load_file(str(tmp_path / 'adapter_model.safetensors'))
  q_a = tensors['base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight']
  o_b = tensors['base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight']
  assert q_a.shape == (4, 32) and o_b.shape == (32, 4)
  np.testing.assert_array_equal(q_a, adapters['layers']['attn']['q']['kernel_lora_a'][1].T)
  assert len(tensors) == 2 * 2 * 7
  config = json.loads((tmp_path / 'adapter_config.json').read_text())
  assert config['r'] == 4 and config['lora_alpha'] == 8.0 and 'q_proj' in config['target_modules']


@pytest.mark.slow
def test_peft_loads_the_exported_adapters_onto_the_exported_base(tmp_path):
  """The round trip a user makes: our base in HF format, our adapters in the PEFT layout,
  loaded by transformers + peft, give our LoRA model's logits (head_dim 16, so the query
  width H*E = 64 differs from d_model = 32 and a transposed adapter cannot pass)."""
  torch = pytest.importorskip('torch')
  peft = pytest.importorskip('peft')
  import transformers

  from sgpo_jax.model import hf
  cfg = tiny_config(**LORA, head_dim=16)
  plain_cfg = dataclasses.replace(cfg, lora_rank=0, lora_base_dtype=None)
  base = model_lib.init_params(plain_cfg, jax.random.key(0))
  adapters, frozen = lora_lib.split(lora_lib.attach(cfg, base, jax.random.key(1)))
  rng = np.random.default_rng(0)
  adapters = jax.tree.map(lambda x: 0.1 * rng.standard_normal(x.shape).astype(np.float32),
                          adapters)  # trained-looking B != 0
  params = lora_lib.merge(adapters, frozen)
  hf.save_hf_checkpoint(base, plain_cfg, str(tmp_path / 'base'), dtype='float32')
  lora_lib.save_peft(cfg, params, str(tmp_path / 'adapters'))
  model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / 'base'),
                                                            torch_dtype=torch.float32)
  model = peft.PeftModel.from_pretrained(model, str(tmp_path / 'adapters')).eval()
  tokens = np.array([[1, 4, 5, 13, 6, 14, 3, 9]], np.int32)
  with torch.no_grad():
    theirs = model(torch.from_numpy(tokens).long()).logits.numpy()
  ours = _logits(cfg, params, tokens)
  assert np.abs(ours - _logits(plain_cfg, base, tokens)).max() > 0.1  # the adapters matter
  np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_qlora_run_with_continuous_sampler_resumes_exactly_and_exports(tmp_path, monkeypatch):
  from sgpo_jax import export, tasks, train
  from tests.test_train import assert_metrics_match, coin_flip_reward, tiny_run_config
  monkeypatch.setattr(tasks, 'get_reward_fn', coin_flip_reward)

  def config():
    c = tiny_run_config('grpo', num_steps=3, kl_coef=0.01)
    c.eval.every_steps = c.checkpoint.every_steps = 1
    c.model.lora_rank, c.model.lora_alpha, c.model.lora_base_dtype = 4, 8.0, 'nf4'
    c.sampling.engine = 'continuous'
    return c
  full, resumed = str(tmp_path / 'full'), str(tmp_path / 'resumed')
  summary = train.run(config(), full, show_progress=False)
  assert 0 < summary['trainable_params'] < summary['total_params']

  def crash(step):
    if step == 2:
      raise KeyboardInterrupt
  with pytest.raises(KeyboardInterrupt):
    train.run(config(), resumed, show_progress=False, after_step=crash)
  train.run(config(), resumed, show_progress=False)
  assert_metrics_match(full, resumed)
  params, cfg, _ = export.load_policy(full)
  files = export.export_run(full, str(tmp_path / 'hf'), peft_out=str(tmp_path / 'peft'))
  assert files and os.path.exists(tmp_path / 'peft' / 'adapter_model.safetensors')
  from sgpo_jax.model import hf as hf_lib
  plain = dataclasses.replace(cfg, lora_rank=0, lora_base_dtype=None)
  mesh = sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  exported = hf_lib.load_hf_params(str(tmp_path / 'hf'), plain, mesh)
  tokens = np.array([[1, 4, 5, 13, 6, 14, 3, 9]], np.int32)
  np.testing.assert_allclose(_logits(plain, exported, tokens), _logits(cfg, params, tokens),
                             atol=1e-4, rtol=1e-4)
