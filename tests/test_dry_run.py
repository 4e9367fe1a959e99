"""Dry run: the Qwen2.5-Math-1.5B configs are costed on this CPU with hand-checked numbers."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import jax
import ml_collections
import pytest

from sgpo_jax import config_check, default_config, dry_run, flops, hf
from sgpo_jax import model as model_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_CONFIGS = ('qwen2_5_math_1_5b_gsm8k', 'qwen2_5_math_1_5b_dapo_math')
QWEN_1_5B_PARAMS = 1_543_714_304  # Qwen2.5(-Math)-1.5B, tied embeddings
QWEN_1_5B_EMBEDDING = 151936 * 1536


def load_config(name: str, arg: str = '') -> ml_collections.ConfigDict:
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'configs', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def _field_names(c: ml_collections.ConfigDict, prefix: str = '') -> set[str]:
  names = set()
  for key, value in c.items():
    names.add(prefix + key)
    if isinstance(value, ml_collections.ConfigDict):
      names |= _field_names(value, prefix + key + '.')
  return names


@pytest.mark.parametrize('name', REAL_CONFIGS)
@pytest.mark.parametrize('arg', ['', 'gpu=1', 'method=grpo', 'method=dapo'])
def test_real_configs_keep_the_default_schema_and_validate(name, arg):
  c = load_config(name, arg)
  assert _field_names(c) == _field_names(default_config.get_config())
  config_check.check_config(c)
  assert c.model.hf_path and c.tokenizer.kind == 'hf' and c.data.reward == 'math'


def test_qwen_1_5b_gsm8k_dry_run_table(capsys):
  c = load_config('qwen2_5_math_1_5b_gsm8k')
  result = dry_run.dry_run(c)
  table = capsys.readouterr().out
  for row in ('params', 'optimizer', 'kv_cache', 'activations', 'FLOPs per RL step', 'GiB'):
    assert row in table
  model = result['model']
  assert model['params_total'] == QWEN_1_5B_PARAMS
  assert model['params_nonembed'] == QWEN_1_5B_PARAMS - QWEN_1_5B_EMBEDDING
  assert result['mesh']['shape'] == {'data': 1, 'fsdp': 8, 'tp': 1}
  assert result['mesh']['mode'] == ('placed' if jax.device_count() == 8 else 'analytic')

  # Every matrix has a d_model dim, sharded over fsdp=8; biases and norms are replicated.
  replicated = 28 * (1536 + 2 * 256) + 28 * 2 * 1536 + 1536
  mem = result['bytes_per_device']
  assert mem['params'] == (QWEN_1_5B_PARAMS - replicated) * 4 // 8 + replicated * 4
  assert mem['optimizer'] == 2 * mem['params']
  assert mem['kv_cache'] == 256 * 1536 * 28 * 2 * 2 * 128 * 2 // 8
  assert 0 < mem['activations'] < 16 * 1024**3  # fits a v5e chip by construction
  assert mem['peak'] < 16 * 1024**3

  cfg = model_lib.ModelConfig.from_config(c.model)
  step = result['flops_per_step']
  assert step['train'] == 256 * 1536 * flops.train_flops_per_token(cfg, 1536)
  assert step['sampling'] == 256 * (512 * flops.forward_flops_per_token(cfg, 512)
                                    + 1024 * flops.forward_flops_per_token(cfg, 1536))
  assert step['reference'] == 0.0
  assert step['total'] == step['train'] + step['sampling']


def test_dapo_math_dry_run_fits_a_v5e_chip():
  result = dry_run.dry_run(load_config('qwen2_5_math_1_5b_dapo_math'), print_table=False)
  assert result['shapes']['seq_len'] == 3584
  assert result['bytes_per_device']['peak'] < 16 * 1024**3


def test_default_config_is_placed_on_the_local_mesh():
  result = dry_run.dry_run(default_config.get_config(), print_table=False)
  assert result['mesh']['mode'] == 'placed'
  assert result['mesh']['devices'] == jax.device_count()
  assert result['model']['params_total'] == flops.param_counts(
      model_lib.ModelConfig.from_config(default_config.get_config().model))['total']


def test_num_devices_resolves_the_rest_axis_analytically():
  c = default_config.get_config()
  c.mesh.shape = (-1, 2, 1)
  result = dry_run.dry_run(c, num_devices=8, print_table=False)
  assert result['mesh'] == {'shape': {'data': 4, 'fsdp': 2, 'tp': 1}, 'mode': 'analytic',
                            'devices': 8, 'batch_shards': 8}


def test_activation_estimate_responds_to_remat_and_logprob_chunk():
  cfg = model_lib.ModelConfig.from_config(load_config('qwen2_5_math_1_5b_gsm8k').model)
  full = dry_run.activation_bytes(dataclasses.replace(cfg, remat=False), 2, 1536, 0)
  remat = dry_run.activation_bytes(cfg, 2, 1536, 0)
  chunked = dry_run.activation_bytes(cfg, 2, 1536, 256)
  assert full > 4 * remat > 4 * chunked
  assert remat - chunked == 2 * 2 * (1536 - 256) * 151936 * 4


# Qwen/Qwen2.5-Math-1.5B config.json as published (transformers v4 layout).
HUB_CONFIG = {
    'architectures': ['Qwen2ForCausalLM'], 'attention_dropout': 0.0, 'bos_token_id': 151643,
    'eos_token_id': 151643, 'hidden_act': 'silu', 'hidden_size': 1536,
    'initializer_range': 0.02, 'intermediate_size': 8960, 'max_position_embeddings': 4096,
    'max_window_layers': 21, 'model_type': 'qwen2', 'num_attention_heads': 12,
    'num_hidden_layers': 28, 'num_key_value_heads': 2, 'rms_norm_eps': 1e-06,
    'rope_theta': 10000.0, 'sliding_window': 4096, 'tie_word_embeddings': True,
    'torch_dtype': 'bfloat16', 'use_cache': True, 'use_mrope': False,
    'use_sliding_window': False, 'vocab_size': 151936}


def test_dry_run_checks_an_existing_hf_config(tmp_path):
  c = load_config('qwen2_5_math_1_5b_gsm8k')
  cfg = model_lib.ModelConfig.from_config(c.model)
  c.model.hf_path = str(tmp_path)
  with open(tmp_path / 'config.json', 'w') as f:
    json.dump(HUB_CONFIG, f)
  assert dry_run.dry_run(c, print_table=False)['hf_config_checked']
  assert hf.model_config_from_hf(str(tmp_path), dtype='bfloat16', remat=True) == cfg
  with open(tmp_path / 'config.json', 'w') as f:
    json.dump(hf.hf_config_from_model_config(dataclasses.replace(cfg, d_ff=8192)), f)
  with pytest.raises(ValueError, match=r'model\.d_ff=8960 but the checkpoint has 8192'):
    dry_run.dry_run(c, print_table=False)


def test_num_devices_that_the_mesh_cannot_fill_is_an_error():
  c = default_config.get_config()
  c.mesh.shape = (1, 8, 1)
  with pytest.raises(ValueError, match='mesh.shape'):
    dry_run.dry_run(c, num_devices=16, print_table=False)
