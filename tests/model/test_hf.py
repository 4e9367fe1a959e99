"""HF import/export against transformers' own Qwen2 / Qwen3 / Llama (tiny random models, CPU).

Five tiny checkpoints are built once per module with `save_pretrained(safe_serialization)`,
each exercising features of the policy (see `_KINDS`): QKV bias, QK-norm, an explicit
head_dim, 'llama3' and 'linear' RoPE scaling, tied and untied heads, MHA / GQA / MQA.
torch and transformers come from requirements-dev.txt; without torch the parity tests skip
and the torch-free tests still run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forward_fn, mesh_config, params_for

from sgpo_jax.generate import sampler as sampling_lib
from sgpo_jax.model import hf
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib

VOCAB = 96
TOKENS = np.random.default_rng(0).integers(3, VOCAB, size=(2, 11)).astype(np.int32)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _save_tokenizer(path: str) -> None:
  import transformers
  from tokenizers import Tokenizer, models, pre_tokenizers
  tok = Tokenizer(models.WordLevel({f'w{i}': i for i in range(VOCAB)}, unk_token='w0'))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token='w0', bos_token='w1',
                                       eos_token='w2').save_pretrained(path)


# kind -> (transformers config class, model class, config fields beyond COMMON). Each
# exercises a feature: Qwen2 QKV bias + untied head; Llama rope_theta + tied + MQA; Qwen3
# QK-norm + head_dim 24 != 64 / 4 + GQA 3:1; Llama 3 'llama3' RoPE (original length 64, so
# with theta 500 and head_dim 16 the wavelengths fall in all three bands) + untied + GQA 2:1;
# 'linear' RoPE + tied + plain multi-head attention.
_KINDS = {
    'qwen2': ('Qwen2Config', 'Qwen2ForCausalLM', dict(
        intermediate_size=128, num_key_value_heads=2, tie_word_embeddings=False)),
    'llama': ('LlamaConfig', 'LlamaForCausalLM', dict(
        intermediate_size=96, num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={'rope_type': 'default', 'rope_theta': 500.0})),
    'qwen3': ('Qwen3Config', 'Qwen3ForCausalLM', dict(
        intermediate_size=80, num_attention_heads=6, num_key_value_heads=2, head_dim=24,
        tie_word_embeddings=True,
        rope_parameters={'rope_type': 'default', 'rope_theta': 1e6})),
    'llama3': ('LlamaConfig', 'LlamaForCausalLM', dict(
        intermediate_size=96, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters={'rope_type': 'llama3', 'rope_theta': 500.0, 'factor': 8.0,
                         'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                         'original_max_position_embeddings': 64})),
    'llama_linear': ('LlamaConfig', 'LlamaForCausalLM', dict(
        intermediate_size=96, num_key_value_heads=4, tie_word_embeddings=True,
        rope_parameters={'rope_type': 'linear', 'rope_theta': 300.0, 'factor': 4.0})),
}
KINDS = tuple(_KINDS)


def _build(kind: str, path: str):
  torch = pytest.importorskip('torch')
  import transformers
  torch.manual_seed(KINDS.index(kind))
  common = {'vocab_size': VOCAB, 'hidden_size': 64, 'num_hidden_layers': 2,
            'num_attention_heads': 4, 'max_position_embeddings': 128, 'initializer_range': 0.2,
            'rms_norm_eps': 1e-5, 'bos_token_id': 1, 'eos_token_id': 2, 'pad_token_id': 0}
  config_name, model_name, fields = _KINDS[kind]
  config = getattr(transformers, config_name)(**{**common, **fields})
  model = getattr(transformers, model_name)(config).eval()
  with torch.no_grad():  # non-trivial norms and biases, so a dropped one shows in the logits
    for name, p in model.named_parameters():
      if 'norm' in name:
        p.normal_(1.0, 0.3)
      elif 'bias' in name:
        p.normal_(0.0, 0.3)
  model.save_pretrained(path, safe_serialization=True)
  _save_tokenizer(path)
  return model


def _hf_logits(model, tokens: np.ndarray) -> np.ndarray:
  import torch
  with torch.no_grad():
    return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
  """{kind: (dir, torch model, HF logits on TOKENS)} for every kind in KINDS."""
  out = {}
  for kind in KINDS:
    path = str(tmp_path_factory.mktemp(kind))
    model = _build(kind, path)
    out[kind] = (path, model, _hf_logits(model, TOKENS))
  return out


@pytest.fixture(scope='module')
def mesh1():
  return sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])


def _our_logits(cfg, params, tokens=TOKENS) -> np.ndarray:
  tokens = jnp.asarray(tokens)
  return np.asarray(forward_fn(cfg)(params, tokens, jnp.ones_like(tokens)))


def _copy(path: str, tmp_path, name: str) -> str:
  dst = str(tmp_path / name)
  shutil.copytree(path, dst)
  return dst


def _edit_config(path: str, **fields) -> None:
  with open(os.path.join(path, 'config.json')) as f:
    config = json.load(f)
  config.update(fields)
  with open(os.path.join(path, 'config.json'), 'w') as f:
    json.dump(config, f)


# ---------------------------------------------------------------------------------------------
# Config mapping and import parity.


def test_config_mapping(checkpoints):
  qwen = hf.model_config_from_hf(checkpoints['qwen2'][0])
  assert (qwen.vocab_size, qwen.d_model, qwen.n_layers, qwen.n_heads, qwen.n_kv_heads,
          qwen.head_dim, qwen.d_ff) == (VOCAB, 64, 2, 4, 2, 16, 128)
  assert qwen.qkv_bias and not qwen.tie_embeddings
  assert (qwen.rope_theta, qwen.rms_eps, qwen.max_len) == (10000.0, 1e-5, 128)
  llama = hf.model_config_from_hf(checkpoints['llama'][0], dtype='bfloat16')
  assert (llama.n_kv_heads, llama.d_ff, llama.rope_theta) == (1, 96, 500.0)
  assert llama.tie_embeddings and not llama.qkv_bias and llama.dtype == 'bfloat16'
  assert llama.rope_type == 'default' and not llama.qk_norm
  qwen3 = hf.model_config_from_hf(checkpoints['qwen3'][0])
  assert (qwen3.n_heads, qwen3.n_kv_heads, qwen3.head_dim, qwen3.rope_theta) == (6, 2, 24, 1e6)
  assert qwen3.qk_norm and not qwen3.qkv_bias and qwen3.tie_embeddings
  llama3 = hf.model_config_from_hf(checkpoints['llama3'][0])
  assert (llama3.rope_type, llama3.rope_factor, llama3.rope_low_freq_factor,
          llama3.rope_high_freq_factor, llama3.rope_original_max_len) == ('llama3', 8, 1, 4, 64)
  assert not llama3.tie_embeddings
  linear = hf.model_config_from_hf(checkpoints['llama_linear'][0])
  assert (linear.rope_type, linear.rope_factor, linear.rope_theta) == ('linear', 4.0, 300.0)


def test_rope_theta_v4_layouts():
  base = {'model_type': 'llama', 'vocab_size': 8, 'hidden_size': 8, 'num_hidden_layers': 1,
              'num_attention_heads': 2, 'intermediate_size': 8}
  assert hf.model_config_from_hf({**base, 'rope_theta': 123.0}).rope_theta == 123.0
  assert hf.model_config_from_hf(
      {**base, 'rope_scaling': {'rope_type': 'default', 'rope_theta': 7.0}}).rope_theta == 7.0


def test_rope_v4_scaling_block_and_llama3_fallback_length():
  base = {'model_type': 'llama', 'vocab_size': 8, 'hidden_size': 8, 'num_hidden_layers': 1,
          'num_attention_heads': 2, 'intermediate_size': 8, 'max_position_embeddings': 512,
          'rope_theta': 5e5}
  cfg = hf.model_config_from_hf({**base, 'rope_scaling': {
      'rope_type': 'llama3', 'factor': 32.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
      'original_max_position_embeddings': 8192}})
  assert (cfg.rope_type, cfg.rope_factor, cfg.rope_original_max_len, cfg.rope_theta) == (
      'llama3', 32.0, 8192, 5e5)
  # v4 'type' spelling, and original_max_position_embeddings falling back like transformers.
  cfg = hf.model_config_from_hf({**base, 'rope_scaling': {
      'type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0}})
  assert cfg.rope_original_max_len == 512
  with pytest.raises(ValueError, match="needs 'high_freq_factor'"):
    hf.model_config_from_hf({**base, 'rope_scaling': {'rope_type': 'llama3', 'factor': 8.0,
                                                      'low_freq_factor': 1.0}})


def test_llama3_inverse_frequencies_match_transformers():
  """All three bands (kept, interpolated, divided by factor) against transformers' function."""
  torch = pytest.importorskip('torch')
  import transformers
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
  rope = {'rope_type': 'llama3', 'rope_theta': 500.0, 'factor': 8.0, 'low_freq_factor': 1.0,
          'high_freq_factor': 4.0, 'original_max_position_embeddings': 64}
  config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16,
                                    rope_parameters=rope)
  ref = ROPE_INIT_FUNCTIONS['llama3'](config, torch.device('cpu'))[0].numpy()
  ours = model_lib.rope_inv_freq(hf.model_config_from_hf(
      {'model_type': 'llama', 'vocab_size': 8, 'hidden_size': 64, 'num_hidden_layers': 1,
       'num_attention_heads': 4, 'intermediate_size': 8, 'rope_parameters': rope}))
  plain = model_lib.rope_inv_freq(model_lib.ModelConfig(
      vocab_size=8, d_model=64, n_layers=1, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=8,
      rope_theta=500.0))
  np.testing.assert_allclose(ours, ref, rtol=1e-6)
  wavelen = 2 * np.pi / plain
  high, low = wavelen < 64 / 4, wavelen > 64 / 1
  assert high.any() and low.any() and (~high & ~low).any()
  np.testing.assert_array_equal(ours[high], plain[high])
  np.testing.assert_allclose(ours[low], plain[low] / 8.0, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('kind', KINDS)
def test_import_logits_match_transformers(checkpoints, mesh1, kind):
  path, _, ref_logits = checkpoints[kind]
  cfg = hf.model_config_from_hf(path)
  params = hf.load_hf_params(path, cfg, mesh1)
  np.testing.assert_allclose(_our_logits(cfg, params), ref_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize('kind, plain', [
    ('llama3', {'rope_type': 'default'}), ('llama_linear', {'rope_type': 'default'}),
    ('qwen3', {'rope_theta': 1e4})])
def test_parity_checkpoints_are_sensitive_to_the_rope_settings(checkpoints, mesh1, kind, plain):
  """The parity above could not pass with the scaling ignored or the wrong theta."""
  import dataclasses
  path, _, ref_logits = checkpoints[kind]
  cfg = hf.model_config_from_hf(path)
  params = hf.load_hf_params(path, cfg, mesh1)
  wrong = _our_logits(dataclasses.replace(cfg, **plain), params)
  assert np.abs(wrong - ref_logits).max() > 1e-2


def test_import_casts_to_param_dtype(checkpoints, mesh1):
  path = checkpoints['qwen2'][0]
  cfg = hf.model_config_from_hf(path, param_dtype='bfloat16')
  params = hf.load_hf_params(path, cfg, mesh1)
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}


_SHARDED_SCRIPT = textwrap.dedent('''
    import json, sys
    import jax, jax.numpy as jnp, numpy as np, ml_collections
    from sgpo_jax.model import hf
    from sgpo_jax.model import transformer as model_lib
    from sgpo_jax.parallel import sharding
    tokens_file, paths = sys.argv[1], sys.argv[2:]
    tokens = jnp.asarray(np.load(tokens_file))
    def logits(path, cfg, shape, devices):
      mesh = sharding.make_mesh(ml_collections.ConfigDict(
          {'shape': shape, 'axes': ('data', 'fsdp', 'tp')}), devices)
      params = hf.load_hf_params(path, cfg, mesh)
      fwd = jax.jit(lambda p, t: model_lib.forward(model_lib.Transformer(cfg), p, t,
                                                   jnp.ones_like(t)))
      return np.asarray(fwd(params, tokens)), params
    for path in paths:
      cfg = hf.model_config_from_hf(path)
      one, _ = logits(path, cfg, (1, 1, 1), jax.devices()[:1])
      eight, params = logits(path, cfg, (2, 2, 2), jax.devices())
      np.save(path + '/sharded_logits.npy', eight)
      q = params['layers']['attn']['q']['kernel']  # [L, D, H, E]: layers unsharded
      print(json.dumps({
          'devices': jax.device_count(),
          'max_diff': float(np.abs(one - eight).max()),
          'q_shard': list(q.addressable_shards[0].data.shape),
          'embedding_spec': str(params['embedding'].sharding.spec),
          'logits_file': path + '/sharded_logits.npy',
      }))
''')


@pytest.mark.slow
def test_sharded_import_on_8_devices_matches_single_device(checkpoints, tmp_path):
  """One 8-device subprocess imports Qwen2, Qwen3 (QK-norm) and Llama 3 (llama3 RoPE)."""
  np.save(tmp_path / 'tokens.npy', TOKENS)
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=8',
             JAX_PLATFORMS='cpu', PYTHONPATH=ROOT)
  kinds = ('qwen2', 'qwen3', 'llama3')
  proc = subprocess.run(
      [sys.executable, '-c', _SHARDED_SCRIPT, str(tmp_path / 'tokens.npy')]
      + [checkpoints[kind][0] for kind in kinds],
      env=env, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = [json.loads(line) for line in proc.stdout.strip().splitlines()[-len(kinds):]]
  for kind, result in zip(kinds, results):
    assert result['devices'] == 8
    # embed over fsdp=2, heads over tp=2
    assert result['q_shard'] == {'qwen2': [2, 32, 2, 16], 'qwen3': [2, 32, 3, 24],
                                 'llama3': [2, 32, 2, 16]}[kind]
    assert 'tp' in result['embedding_spec'] and 'fsdp' in result['embedding_spec']
    assert result['max_diff'] < 1e-5, kind
    np.testing.assert_allclose(np.load(result['logits_file']), checkpoints[kind][2],
                               atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# Export.


@pytest.mark.parametrize('kind', KINDS)
def test_export_reloads_in_transformers_with_same_logits(checkpoints, mesh1, tmp_path, kind):
  import transformers
  path, _, ref_logits = checkpoints[kind]
  cfg = hf.model_config_from_hf(path)
  params = hf.load_hf_params(path, cfg, mesh1)
  out = str(tmp_path / 'export')
  files = hf.save_hf_checkpoint(params, cfg, out, tokenizer_dir=path, max_shard_bytes=40_000,
                                config_overrides={'bos_token_id': 1, 'eos_token_id': 2})
  with open(os.path.join(out, hf.INDEX_FILE)) as f:
    index = json.load(f)
  shards = sorted(set(index['weight_map'].values()))
  assert len(shards) > 1 and all(os.path.join(out, s) in files for s in shards)
  with open(os.path.join(out, 'config.json')) as f:
    exported = json.load(f)
  assert exported['architectures'] == [_KINDS[kind][1]]
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
  np.testing.assert_allclose(_hf_logits(reloaded, TOKENS), ref_logits, atol=1e-5, rtol=1e-5)
  reimported = hf.load_hf_params(out, cfg, mesh1)  # through the sharded index
  for a, b in zip(jax.tree.leaves(reimported), jax.tree.leaves(params)):
    assert np.array_equal(np.asarray(a), np.asarray(b))
  # The fixture's word-level tokenizer is not a Qwen/Llama one, so load it by its own class
  # (AutoTokenizer would pick the model_type's tokenizer class).
  tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(out)
  assert tokenizer('w5 w7')['input_ids'] == [5, 7]


@pytest.mark.parametrize('overrides', [
    {'qkv_bias': False, 'tie_embeddings': False, 'param_dtype': 'float32'},
    {'qkv_bias': True, 'tie_embeddings': True, 'param_dtype': 'bfloat16', 'rope_theta': 1234.0},
    {'qk_norm': True, 'head_dim': 12, 'tie_embeddings': False, 'rope_type': 'linear',
     'rope_factor': 2.0},
    {'rope_type': 'llama3', 'rope_factor': 32.0, 'rope_low_freq_factor': 2.0,
     'rope_high_freq_factor': 8.0, 'rope_original_max_len': 48, 'rope_theta': 5e5},
])
def test_export_import_round_trip_is_exact(mesh1, tmp_path, overrides):
  fields = dict(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                d_ff=48, max_len=64, init_std=0.2)
  cfg = model_lib.ModelConfig(**{**fields, **overrides})
  params = params_for(cfg, 3)
  out = str(tmp_path / 'rt')
  hf.save_hf_checkpoint(params, cfg, out)
  assert os.path.exists(os.path.join(out, hf.SINGLE_FILE))
  assert hf.model_config_from_hf(out, param_dtype=cfg.param_dtype, init_std=cfg.init_std) == cfg
  loaded = hf.load_hf_params(out, cfg, mesh1)
  assert jax.tree.structure(loaded) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
    assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
@pytest.mark.parametrize('overrides, arch', [
    ({}, 'LlamaForCausalLM'),
    ({'qk_norm': True, 'head_dim': 12}, 'Qwen3ForCausalLM'),
    ({'rope_type': 'llama3', 'rope_factor': 4.0, 'rope_original_max_len': 16},
     'LlamaForCausalLM'),
])
def test_our_random_model_exports_to_transformers(mesh1, tmp_path, overrides, arch):
  """A policy trained here (no bias, untied) runs in transformers unchanged."""
  pytest.importorskip('torch')
  import transformers
  cfg = model_lib.ModelConfig(**{**dict(
      vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
      max_len=64, init_std=0.2, rope_theta=777.0, tie_embeddings=False), **overrides})
  params = params_for(cfg, 5)
  hf.save_hf_checkpoint(params, cfg, str(tmp_path / 'ours'))
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / 'ours')).eval()
  assert type(reloaded).__name__ == arch
  np.testing.assert_allclose(_hf_logits(reloaded, TOKENS), _our_logits(cfg, params),
                             atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# Greedy generation.


@pytest.mark.slow
@pytest.mark.parametrize('kind', KINDS)
def test_greedy_generation_matches_transformers(checkpoints, mesh1, kind):
  import torch
  path, model, _ = checkpoints[kind]
  cfg = hf.model_config_from_hf(path)
  params = hf.load_hf_params(path, cfg, mesh1)
  shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh1)
  new_tokens, eos = 12, 2
  sampler = sampling_lib.Sampler(cfg, mesh1, shardings, rows=4, max_prompt_len=16,
                                 max_new_tokens=new_tokens, stop_ids=[eos], pad_id=0, bos_id=1,
                                 min_prompt_bucket=16)
  rng = np.random.default_rng(7)
  prompts = [list(rng.integers(3, VOCAB, size=n)) for n in (3, 9, 16, 5)]
  out = sampler.sample(params, prompts, list(range(4)), jax.random.key(0), temperature=0.0)
  assert out.lengths_R.max() > 3  # a real comparison, not an immediate EOS everywhere
  for r, prompt in enumerate(prompts):
    with torch.no_grad():
      ref = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                           use_cache=True, eos_token_id=eos, pad_token_id=0)[0, len(prompt):]
    ours = out.tokens_RxN[r, :out.lengths_R[r]]
    assert ours.tolist() == ref.tolist()[:len(ours)], (kind, r)
    assert len(ours) == len(ref) or ref[len(ours):].eq(0).all()


# ---------------------------------------------------------------------------------------------
# Clear errors.


def test_missing_tensor_names_it(checkpoints, mesh1, tmp_path):
  from safetensors.numpy import load_file, save_file
  path = _copy(checkpoints['qwen2'][0], tmp_path, 'missing')
  file = os.path.join(path, hf.SINGLE_FILE)
  tensors = load_file(file)
  del tensors['model.layers.1.self_attn.k_proj.bias']
  save_file(tensors, file, metadata={'format': 'pt'})
  with pytest.raises(ValueError, match=r'model\.layers\.1\.self_attn\.k_proj\.bias'):
    hf.load_hf_params(path, hf.model_config_from_hf(path), mesh1)


def test_wrong_shape_names_tensor_and_shapes(checkpoints, mesh1, tmp_path):
  from safetensors.numpy import load_file, save_file
  path = _copy(checkpoints['llama'][0], tmp_path, 'shape')
  file = os.path.join(path, hf.SINGLE_FILE)
  tensors = load_file(file)
  tensors['model.layers.0.mlp.up_proj.weight'] = np.zeros((95, 64), np.float32)
  save_file(tensors, file, metadata={'format': 'pt'})
  with pytest.raises(ValueError, match=r'up_proj\.weight.*\(95, 64\).*\(96, 64\)'):
    hf.load_hf_params(path, hf.model_config_from_hf(path), mesh1)


def test_config_mismatch_names_fields(checkpoints, mesh1):
  path = checkpoints['qwen2'][0]
  cfg = hf.model_config_from_hf(path, d_ff=256, rope_theta=1e6)
  with pytest.raises(ValueError, match=r'model\.d_ff=256 but the checkpoint has 128.*rope_theta'):
    hf.load_hf_params(path, cfg, mesh1)


@pytest.mark.parametrize('fields, match', [
    ({'model_type': 'mixtral', 'architectures': ['MixtralForCausalLM']}, "model_type='mixtral'"),
    ({'use_sliding_window': True}, 'use_sliding_window=True'),
    ({'num_experts': 8}, 'num_experts=8'),
    ({'rope_parameters': {'rope_type': 'yarn', 'rope_theta': 5e5, 'factor': 8.0}},
     r"rope_parameters\.rope_type='yarn'"),
    ({'rope_scaling': {'type': 'dynamic', 'factor': 2.0}}, r"rope_scaling\.rope_type='dynamic'"),
    ({'rope_scaling': {'rope_type': 'longrope', 'factor': 2.0}}, "rope_type='longrope'"),
    ({'model_type': 'qwen3_moe', 'architectures': ['Qwen3MoeForCausalLM']},
     "model_type='qwen3_moe'"),
    ({'hidden_act': 'gelu'}, "hidden_act='gelu'"),
    ({'architectures': ['Qwen2ForSequenceClassification']}, 'architectures='),
])
def test_unsupported_configs_name_the_field(checkpoints, fields, match):
  with open(os.path.join(checkpoints['qwen2'][0], 'config.json')) as f:
    config = json.load(f)
  config.update(fields)
  with pytest.raises(ValueError, match=match):
    hf.model_config_from_hf(config)


@pytest.mark.parametrize('kind', ['llama', 'qwen3'])
def test_attention_bias_is_rejected(checkpoints, tmp_path, kind):
  path = _copy(checkpoints[kind][0], tmp_path, 'bias')
  _edit_config(path, attention_bias=True)
  with pytest.raises(ValueError, match=f'attention_bias=True is not supported for {kind}'):
    hf.model_config_from_hf(path)


def test_qwen3_sliding_window_is_rejected(checkpoints):
  with open(os.path.join(checkpoints['qwen3'][0], 'config.json')) as f:
    config = json.load(f)
  config.update(use_sliding_window=True, sliding_window=32)
  with pytest.raises(ValueError, match='use_sliding_window=True'):
    hf.model_config_from_hf(config)


def test_export_refuses_a_family_that_cannot_hold_the_config():
  cfg = model_lib.ModelConfig(vocab_size=8, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                              head_dim=8, d_ff=16, qk_norm=True)
  with pytest.raises(ValueError, match=r"qk_norm=True cannot be exported as model_type='llama'"):
    hf.hf_config_from_model_config(cfg, 'llama')
  with pytest.raises(ValueError, match="model_type='qwen3' cannot hold qkv_bias=True"):
    hf.hf_config_from_model_config(cfg.__class__(**{**cfg.__dict__, 'qkv_bias': True}), 'qwen3')


def test_not_a_checkpoint_dir(tmp_path, mesh1):
  with pytest.raises(ValueError, match='no config.json'):
    hf.model_config_from_hf(str(tmp_path))


def test_bfloat16_checkpoint_loads_into_float32_params(mesh1, tmp_path):
  """Hub checkpoints are usually bf16; f32 master weights are their exact upcast."""
  cfg = model_lib.ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2,
                              head_dim=8, d_ff=48, max_len=64, init_std=0.2, qkv_bias=True)
  params = params_for(cfg, 4)
  hf.save_hf_checkpoint(params, cfg, str(tmp_path / 'bf16'), dtype='bfloat16')
  with open(tmp_path / 'bf16' / 'config.json') as f:
    assert json.load(f)['dtype'] == 'bfloat16'
  loaded = hf.load_hf_params(str(tmp_path / 'bf16'), cfg, mesh1)
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
    assert a.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b.astype(jnp.bfloat16), np.float32))
