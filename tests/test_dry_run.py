"""Dry run: the real-model configs (Qwen2.5-Math-1.5B, Qwen3-0.6B / 1.7B, Llama-3.2-3B) are
costed on this CPU with hand-checked numbers."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import jax
import ml_collections
import pytest

from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config
from sgpo_jax.model import dry_run
from sgpo_jax.model import flops
from sgpo_jax.model import hf
from sgpo_jax.model import transformer as model_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_CONFIGS = ('qwen2_5_math_1_5b_gsm8k', 'qwen2_5_math_1_5b_dapo_math', 'qwen3_0_6b_gsm8k',
                'qwen3_1_7b_gsm8k', 'llama3_2_3b_gsm8k')
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


# Dims from each model's published config.json (the config files state the same values):
# D hidden_size, L layers, H / K query / KV heads, E head_dim, F intermediate, V vocab; all
# three tie the embeddings; Qwen3 has QK-norm. PARAMS is the hand count below, written out.
NEW_MODELS = {
    'qwen3_0_6b_gsm8k': dict(D=1024, L=28, H=16, K=8, E=128, F=3072, V=151936, qk=True,
                             PARAMS=596_049_920),
    'qwen3_1_7b_gsm8k': dict(D=2048, L=28, H=16, K=8, E=128, F=6144, V=151936, qk=True,
                             PARAMS=1_720_574_976),
    'llama3_2_3b_gsm8k': dict(D=3072, L=28, H=24, K=8, E=128, F=8192, V=128256, qk=False,
                              PARAMS=3_212_749_824),
}


@pytest.mark.parametrize('name', sorted(NEW_MODELS))
def test_new_model_dry_run_by_hand(name):
  """Params, per-device bytes (fsdp=8) and FLOPs per step against a hand computation."""
  d = NEW_MODELS[name]
  D, L, H, K, E, F, V = (d[k] for k in 'DLHKEFV')
  matmul_per_layer = D * H * E + 2 * D * K * E + H * E * D + 3 * D * F  # q, k, v, o, MLP
  norms_per_layer = 2 * D + (2 * E if d['qk'] else 0)  # + q_norm, k_norm [E] in Qwen3
  replicated = L * norms_per_layer + D  # every norm scale, and the final norm
  total = V * D + L * matmul_per_layer + replicated
  assert total == d['PARAMS']

  c = load_config(name)
  result = dry_run.dry_run(c, print_table=False)
  assert result['model']['params_total'] == total
  assert result['model']['params_nonembed'] == total - V * D
  assert result['mesh']['shape'] == {'data': 1, 'fsdp': 8, 'tp': 1}
  mem = result['bytes_per_device']
  # f32 params: every matrix (incl. the embedding) has a D dim split over fsdp=8.
  assert mem['params'] == (total - replicated) * 4 // 8 + replicated * 4
  assert mem['grads'] == mem['params'] and mem['optimizer'] == 2 * mem['params']
  rows, prompt, new = 256, 512, 1024
  assert mem['kv_cache'] == rows * (prompt + new) * L * 2 * K * E * 2 // 8  # bf16, 8 shards
  assert mem['peak'] < 16 * 1024**3  # fits a 16 GB v5e chip

  def forward(ctx):  # 2 x matmul params + LM head + QK^T and AV over ctx keys
    return 2 * L * matmul_per_layer + 2 * D * V + 4 * L * H * E * ctx

  step = result['flops_per_step']
  assert step['train'] == rows * (prompt + new) * 3 * forward(prompt + new)
  assert step['sampling'] == rows * (prompt * forward(prompt) + new * forward(prompt + new))
  assert step['total'] == step['train'] + step['sampling']


# Published config.json files (transformers v4 layout) of the three new models.
QWEN3_0_6B_HUB = {
    'architectures': ['Qwen3ForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0,
    'bos_token_id': 151643, 'eos_token_id': 151645, 'head_dim': 128, 'hidden_act': 'silu',
    'hidden_size': 1024, 'initializer_range': 0.02, 'intermediate_size': 3072,
    'max_position_embeddings': 40960, 'max_window_layers': 28, 'model_type': 'qwen3',
    'num_attention_heads': 16, 'num_hidden_layers': 28, 'num_key_value_heads': 8,
    'rms_norm_eps': 1e-06, 'rope_scaling': None, 'rope_theta': 1000000,
    'sliding_window': None, 'tie_word_embeddings': True, 'torch_dtype': 'bfloat16',
    'use_cache': True, 'use_sliding_window': False, 'vocab_size': 151936}
QWEN3_1_7B_HUB = dict(QWEN3_0_6B_HUB, hidden_size=2048, intermediate_size=6144)
LLAMA_3_2_3B_HUB = {
    'architectures': ['LlamaForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0,
    'bos_token_id': 128000, 'eos_token_id': 128001, 'head_dim': 128, 'hidden_act': 'silu',
    'hidden_size': 3072, 'initializer_range': 0.02, 'intermediate_size': 8192,
    'max_position_embeddings': 131072, 'mlp_bias': False, 'model_type': 'llama',
    'num_attention_heads': 24, 'num_hidden_layers': 28, 'num_key_value_heads': 8,
    'pretraining_tp': 1, 'rms_norm_eps': 1e-05,
    'rope_scaling': {'factor': 32.0, 'high_freq_factor': 4.0, 'low_freq_factor': 1.0,
                     'original_max_position_embeddings': 8192, 'rope_type': 'llama3'},
    'rope_theta': 500000.0, 'tie_word_embeddings': True, 'torch_dtype': 'bfloat16',
    'use_cache': True, 'vocab_size': 128256}


@pytest.mark.parametrize('name, hub', [('qwen3_0_6b_gsm8k', QWEN3_0_6B_HUB),
                                       ('qwen3_1_7b_gsm8k', QWEN3_1_7B_HUB),
                                       ('llama3_2_3b_gsm8k', LLAMA_3_2_3B_HUB)])
def test_new_configs_match_the_published_config_json(name, hub, tmp_path):
  c = load_config(name)
  cfg = model_lib.ModelConfig.from_config(c.model)
  assert hf.model_config_from_hf(hub, dtype='bfloat16', remat=True) == cfg
  c.model.hf_path = str(tmp_path)
  with open(tmp_path / 'config.json', 'w') as f:
    json.dump(hub, f)
  assert dry_run.dry_run(c, print_table=False)['hf_config_checked']


@pytest.mark.parametrize('arg, expected', [
    ('', ('ppo', 'token', 0.2, 0.28, False)),
    ('loss=gspo', ('ppo', 'sequence', 3e-4, 4e-4, False)),
    ('loss=cispo,thinking=1', ('cispo', 'token', 1.0, 0.28, True)),
])
def test_qwen3_config_loss_and_thinking_variants(arg, expected):
  c = load_config('qwen3_1_7b_gsm8k', arg)
  t = c.train
  assert (t.policy_loss, t.importance_level, t.clip_eps_low, t.clip_eps_high,
          c.tokenizer.enable_thinking) == expected
  assert c.model.d_model == 2048 and c.tokenizer.chat_template
  config_check.check_config(c)
  with pytest.raises(ValueError, match="loss='grpo'"):
    load_config('qwen3_0_6b_gsm8k', 'loss=grpo')
  assert not load_config('qwen3_0_6b_gsm8k', 'thinking=0').tokenizer.enable_thinking
