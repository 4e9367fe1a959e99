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

from sgpo_jax import configs
from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config
from sgpo_jax.model import flops, hf
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.planning import dry_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL_CONFIGS = ('qwen2_5_math_1_5b_gsm8k', 'qwen2_5_math_1_5b_dapo_math', 'qwen3_0_6b_gsm8k',
                'qwen3_1_7b_gsm8k', 'llama3_2_3b_gsm8k')
QWEN_1_5B_PARAMS = 1_543_714_304  # Qwen2.5(-Math)-1.5B, tied embeddings
QWEN_1_5B_EMBEDDING = 151936 * 1536


def load_config(name: str, arg: str = '') -> ml_collections.ConfigDict:
  spec = importlib.util.spec_from_file_location(name, configs.path(name))
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
  for row in ('params', 'optimizer', 'kv_cache', 'activations', 'FLOPs per RL step', 'GiB',
              'analytic bytes per device'):
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
  # The prefill attends over the whole 1536-slot cache; the LM head runs at its last position.
  head = 2 * 1536 * 151936
  assert step['sampling'] == 256 * (512 * (flops.forward_flops_per_token(cfg, 1536) - head)
                                    + head + 1024 * flops.forward_flops_per_token(cfg, 1536))
  assert step['reference'] == 0.0
  assert step['total'] == step['train'] + step['sampling']


def test_dapo_math_dry_run_fits_a_v5e_chip():
  result = dry_run.dry_run(load_config('qwen2_5_math_1_5b_dapo_math'), print_table=False)
  assert result['shapes']['seq_len'] == 3584
  assert result['bytes_per_device']['peak'] < 16 * 1024**3


@pytest.mark.slow
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
  assert hf.model_config_from_hf(str(tmp_path), dtype='bfloat16', remat=True,
                                 attention_impl='auto') == cfg
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
  # prefill: every prompt position over the whole cache, the LM head at the last one only
  prefill = prompt * (forward(prompt + new) - 2 * D * V) + 2 * D * V
  assert step['sampling'] == rows * (prefill + new * forward(prompt + new))
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
  # The architecture is the hub's; the attention kernel is the config's choice ('auto').
  assert hf.model_config_from_hf(hub, dtype='bfloat16', remat=True,
                                 attention_impl='auto') == cfg
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


# ---------------------------------------------------------------------------------------
# Compiled verdict: the run's own jitted programs, lowered and compiled at real shapes.

import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

from sgpo_jax.data import inputs as inputs_lib  # noqa: E402
from sgpo_jax.parallel import devices  # noqa: E402
from sgpo_jax.planning import compiled_memory  # noqa: E402


def _tiny_config() -> ml_collections.ConfigDict:
  c = default_config.get_config()
  c.train.rows_per_batch = 16
  # The padded step, whose batch bytes are counted by hand below; the packed step (the
  # default's) is lowered in test_packed_train_step_and_log_prob_pass_lower_at_their_shapes.
  c.train.packing = False
  return c


@pytest.fixture(scope='module')
def tiny_result():
  return dry_run.dry_run(_tiny_config(), print_table=False)


@pytest.mark.slow
def test_compiled_programs_account_for_state_batch_and_resident_bytes(tiny_result):
  c = _tiny_config()
  result = tiny_result
  compiled = result['compiled']
  assert set(compiled) == {'sampler', 'train_step'}  # kl_coef = 0, mu = 1: no log-prob pass
  n = result['model']['params_total']
  # f32 params, AdamW mu and nu, two int32 step counts (Adam's and the lr schedule's).
  state_bytes = n * 4 + 2 * n * 4 + 2 * 4
  rows, seq = 16, c.sampling.max_prompt_len + c.sampling.max_new_tokens
  # tokens + mask (int32), completion mask + old log-probs (4 bytes each) on T-1 target
  # positions, rewards (f32), group ids and completion lengths (int32), valid (bool); the
  # reference log-probs are unused at kl_coef = 0, so jit drops that argument.
  batch_bytes = rows * seq * 4 * 2 + rows * (seq - 1) * 4 * 2 + rows * (4 + 4 + 4 + 1)
  train = compiled['train_step']
  assert train['argument'] == state_bytes + batch_bytes
  assert train['alias'] == state_bytes  # the state is donated: updated in place
  sampler = compiled['sampler']
  assert sampler['resident'] == 2 * n * 4 + 2 * 4  # AdamW moments stay in memory while sampling
  for m in compiled.values():
    assert m['peak'] == m['argument'] + m['output'] + m['temp'] - m['alias'] + m['resident']
    assert m['fits']


@pytest.mark.slow
def test_compiled_sampler_grows_with_rows_and_kl_adds_the_log_prob_pass(tiny_result):
  small = tiny_result['compiled']
  c = _tiny_config()
  c.train.rows_per_batch = 64
  c.train.kl_coef = 0.1
  big = dry_run.dry_run(c, print_table=False)['compiled']
  assert big['sampler']['temp'] > small['sampler']['temp']  # KV cache of 4x the rows
  n = dry_run.dry_run(c, print_table=False, compile=False)['model']['params_total']
  assert big['logprobs']['resident'] == 2 * n * 4 + 2 * 4 + n * 4  # + the reference policy
  assert big['train_step']['resident'] == n * 4


@pytest.mark.slow
def test_continuous_engine_is_compiled_with_its_slots():
  c = _tiny_config()
  c.sampling.engine = 'continuous'
  c.sampling.decode_slots = 8
  result = dry_run.dry_run(c, print_table=False)
  assert 'continuous: 8 decode slots, 16 queued rows' == result['compiled']['sampler']['note']


def test_does_not_fit_raises_with_concrete_advice(tiny_result, monkeypatch, capsys):
  c = _tiny_config()
  c.dry_run_device = 'v5e'
  # The compiled numbers of the same config (the CLI test below compiles end to end).
  monkeypatch.setattr(compiled_memory, 'compile_programs', lambda *a: {
      k: dict(v) for k, v in tiny_result['compiled'].items()})
  train = tiny_result['compiled']['train_step']
  budget = (train['fixed'] + train['peak']) // 2  # holds the state, not the activations
  monkeypatch.setattr(devices, 'usable_bytes', lambda spec: budget)
  with pytest.raises(dry_run.DoesNotFit, match='will not fit on v5e') as err:
    dry_run.dry_run(c)
  assert 'train_step: peak' in str(err.value)
  assert 'set train.micro_batches >= 2 (now 1; 8 rows per micro-batch)' in str(err.value)
  assert 'model.remat=True' in str(err.value)
  out = capsys.readouterr().out
  assert 'NO' in out  # the table is printed before the error
  # The two memory views are labelled: the formulas' breakdown and the compiled verdict.
  assert 'analytic bytes per device (formulas, no compiler: the breakdown; the verdict is ' \
      'the compiled peak below)' in out
  assert 'compiled peak per device, the verdict (XLA:CPU' in out


def test_advice_by_hand():
  gib = 1024**3
  c = default_config.get_config()  # rows_per_batch 128, micro_batches 1, remat False
  memory = {'peak': 10 * gib, 'fixed': 2 * gib}
  # Variable part 8 GiB must shrink to 6 - 2 = 4 GiB: half the rows per call.
  text = compiled_memory.advice('train_step', memory, 6 * gib, c, batch_shards=1)
  assert 'train.micro_batches >= 2 (now 1; 64 rows per micro-batch)' in text
  assert 'model.remat=True' in text and 'train.logprob_chunk' in text
  text = compiled_memory.advice('sampler', memory, 6 * gib, c, batch_shards=1)
  assert 'sampling.decode_slots <= 64' in text and 'train.rows_per_batch <= 64' in text
  c.sampling.engine = 'continuous'
  c.sampling.decode_slots = 32
  text = compiled_memory.advice('sampler', memory, 6 * gib, c, batch_shards=1)
  assert 'sampling.decode_slots <= 16 (now 32)' in text
  text = compiled_memory.advice('train_step', memory, gib, c, batch_shards=1)
  assert 'alone need 2.00 GiB' in text and 'fsdp' in text


def test_mesh_larger_than_the_host_skips_compiling_with_the_way_to_do_it():
  c = _tiny_config()
  c.mesh.shape = (1, 8, 1)
  result = dry_run.dry_run(c, num_devices=8, print_table=False)
  assert 'xla_force_host_platform_device_count=8' in result['compile_skipped']
  assert 'compiled' not in result


def test_device_table():
  assert devices.spec('h100-80gb').hbm_bandwidth == 3.35e12
  assert devices.spec('h200').hbm_bandwidth == 4.8e12
  assert devices.spec_for_kind('NVIDIA H100 80GB HBM3').name == 'h100-80gb'
  assert devices.spec_for_kind('TPU v5 lite').name == 'v5e'
  with pytest.raises(ValueError, match="dry_run_device='a100'"):
    devices.spec('a100')
  c = default_config.get_config()
  c.dry_run_device = 'a100'
  with pytest.raises(ValueError, match='dry_run_device'):
    config_check.check_config(c)


@pytest.mark.slow
def test_cli_dry_run_exits_non_zero_when_it_does_not_fit():
  env = dict(os.environ, XLA_PYTHON_CLIENT_MEM_FRACTION='0.000001', JAX_PLATFORMS='cpu')
  proc = subprocess.run(
      [sys.executable, '-m', 'sgpo_jax.main', '--config', 'default',
       '--config.dry_run=True', '--config.dry_run_device=h100-80gb',
       '--config.train.rows_per_batch=16'], cwd=ROOT, env=env, capture_output=True, text=True,
      timeout=600)
  assert proc.returncode != 0
  assert 'will not fit on h100-80gb' in proc.stderr


# ---------------------------------------------------------------------------------------
# Inputs: placeholders and missing paths name their field; nothing is written before.


def test_placeholder_paths_are_listed_by_the_dry_run(capsys):
  c = load_config('qwen3_0_6b_gsm8k')
  result = dry_run.dry_run(c)
  problems = result['inputs']
  assert any(p.startswith("model.hf_path='/path/to/Qwen3-0.6B' is the shipped placeholder")
             for p in problems)
  assert any(p.startswith('tokenizer.path=') for p in problems)
  assert any(p.startswith('data.path=') for p in problems)
  assert 'a real run stops on these' in capsys.readouterr().out


def test_real_run_stops_on_a_missing_path_before_writing(tmp_path):
  from sgpo_jax import train
  c = default_config.get_config()
  c.model.hf_path = str(tmp_path / 'no_such_checkpoint')
  workdir = tmp_path / 'run'
  with pytest.raises(ValueError, match=r"model\.hf_path='.*no_such_checkpoint' does not exist; "
                     r'set --config\.model\.hf_path'):
    train.setup(c, str(workdir), show_progress=False)
  assert not workdir.exists()
  c = load_config('qwen3_0_6b_gsm8k', 'gpu=1')
  with pytest.raises(ValueError, match='shipped placeholder') as err:
    train.setup(c, str(workdir), show_progress=False)
  for field in ('model.hf_path', 'tokenizer.path', 'data.path'):
    assert field in str(err.value)
  assert not workdir.exists()


def test_prompt_length_histogram_by_hand():
  counts, text = inputs_lib.prompt_length_report([3, 16, 17, 40, 64, 70], (16, 32, 64), 64)
  assert counts == {16: 2, 32: 1, 64: 2}
  assert '>     64       1 (longer than sampling.max_prompt_len)' in text and 'max 70' in text
  assert np.sum(list(counts.values())) == 5


def test_packed_train_step_and_log_prob_pass_lower_at_their_shapes():
  c = _tiny_config()
  c.train.packing = True
  c.train.pack_rows = 2
  c.train.mu = 2  # the old-policy log-prob pass
  cfg = model_lib.ModelConfig.from_config(c.model)
  mesh = dry_run._mesh_for(c.mesh, None)[0]
  programs = {p.name: p for p in compiled_memory.build_programs(c, cfg, mesh)}
  assert set(programs) == {'sampler', 'train_step', 'logprobs'}
  packed = programs['train_step'].args[1]
  assert packed['tokens_MxBxL'].shape[1:] == (2, c.sampling.max_prompt_len
                                              + c.sampling.max_new_tokens)
  for p in programs.values():
    p.jitted.lower(*p.args)  # traces the trainer's own functions at these shapes
