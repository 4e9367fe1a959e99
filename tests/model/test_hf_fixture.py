"""The offline Qwen2 fixture and the Qwen2.5-0.5B LoRA config the Colab notebook runs.

The fixture must read back as the architecture the 0.5B config declares (so the notebook's
offline run exercises the same code path as the real model), and the config must carry
Qwen2.5-0.5B's published shape.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest
from conftest import forward_fn, mesh_config

from sgpo_jax.config import check
from sgpo_jax.config.args import load_config_module
from sgpo_jax.model import flops, hf, hf_fixture
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import devices
from sgpo_jax.parallel import sharding as sharding_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, 'sgpo_jax', 'configs', 'qwen2_5_0_5b_gsm8k_lora.py')
CORPUS = ['Mia buys 3 packs of 12 stickers. How many stickers?', '#### 36',
          'Please reason step by step.']


@pytest.fixture(scope='module')
def tiny_dir(tmp_path_factory):
  pytest.importorskip('torch')
  return hf_fixture.build_tiny_qwen2(str(tmp_path_factory.mktemp('tiny_qwen2')), CORPUS * 4,
                                     vocab_size=300)


def _qwen_config(arg: str = ''):
  return load_config_module(CONFIG).get_config(arg)


def test_fixture_is_a_qwen2_5_shaped_checkpoint(tiny_dir):
  cfg = hf.model_config_from_hf(tiny_dir)
  # 300 tokens padded to a multiple of 64; 64 wide / 4 heads = head_dim 16; 2 KV heads.
  assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads,
          cfg.head_dim, cfg.d_ff) == (320, 64, 2, 4, 2, 16, 128)
  arch = hf.architecture_fields(tiny_dir)
  qwen = _qwen_config('rank=0').model
  # Same family as the 0.5B config: every non-size architecture field agrees.
  for name in ('qkv_bias', 'qk_norm', 'tie_embeddings', 'rope_theta', 'rope_type', 'rms_eps'):
    assert arch[name] == qwen[name], name
  assert set(arch) <= set(qwen)


def test_fixture_tokenizer_speaks_chatml(tiny_dir):
  transformers = pytest.importorskip('transformers')
  tok = transformers.AutoTokenizer.from_pretrained(tiny_dir)
  assert len(tok) == 300
  assert tok.eos_token == '<|im_end|>' and tok.pad_token == '<|endoftext|>'
  text = tok.apply_chat_template([{'role': 'user', 'content': CORPUS[0]}],
                                 add_generation_prompt=True, tokenize=False)
  assert text == f'<|im_start|>user\n{CORPUS[0]}<|im_end|>\n<|im_start|>assistant\n'
  assert tok.decode(tok(CORPUS[0])['input_ids']) == CORPUS[0]


def test_fixture_loads_with_transformers_logits(tiny_dir):
  """The fixture is a real HF checkpoint: our import gives transformers' logits."""
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  tokens = np.random.default_rng(0).integers(3, 300, size=(2, 9)).astype(np.int32)
  with torch.no_grad():
    want = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)(
        torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()
  cfg = hf.model_config_from_hf(tiny_dir)
  mesh = sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  params = hf.load_hf_params(tiny_dir, cfg, mesh)
  got = np.asarray(forward_fn(cfg)(params, tokens, np.ones_like(tokens)))
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_bad_fixture_settings_name_the_value(tmp_path):
  with pytest.raises(ValueError, match='vocab_size=200'):
    hf_fixture.save_bpe_tokenizer(str(tmp_path), CORPUS, vocab_size=200)
  with pytest.raises(ValueError, match="'hidden'"):
    hf_fixture.save_random_qwen2(str(tmp_path), tokenizer=None, hidden=32)


def test_qwen2_5_0_5b_config_has_the_published_shape():
  config = _qwen_config('rank=0')
  counts = flops.param_counts(model_lib.ModelConfig.from_config(config.model))
  assert counts['total'] == 494_032_768  # Qwen2.5-0.5B: 0.49B, 0.36B non-embedding
  assert counts['nonembed'] == 357_898_112
  check.check_config(config, num_devices=1)
  with pytest.raises(ValueError, match='rank=-1'):
    _qwen_config('rank=-1')


def test_colab_gpus_are_known_devices():
  assert devices.spec_for_kind('Tesla T4').name == 't4'
  assert devices.spec_for_kind('NVIDIA L4').name == 'l4'
  # 15360 MiB x the default 0.75 memory fraction
  assert devices.usable_bytes(devices.spec('t4')) == int(15 * 1024**3 * 0.75)
