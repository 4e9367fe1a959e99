"""A llama.cpp GGUF file -> a float32 Hugging Face checkpoint folder.

Owns the one translation table from GGUF tensor names to transformers' names
(`_TENSORS`), the dequantization (the `gguf` package's reference kernels), the inverse of
llama.cpp's Q/K row permutation, and the config.json built from the GGUF metadata. What it
cannot represent exactly is refused before any tensor is read: an architecture other than
the ones in `ARCHITECTURES`, a tensor type outside `QUANT_TYPES`, a rope scaling block
(a `rope.scaling.type` field or `rope_freqs` factors other than 1), missing metadata.

Why the permutation: llama.cpp's converter reorders the rows of q_proj and k_proj from
transformers' rotate-half RoPE layout (first half, second half of each head) to the
interleaved pairs its kernels use: `w.reshape(heads, 2, hd // 2, d).swapaxes(1, 2)`.
Reading the rows back without undoing it gives a model that loads and talks nonsense.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np
from safetensors.numpy import save_file

ARCHITECTURES = ('llama',)
# Tensor types the gguf package dequantizes bit-exactly to float32 (its numpy kernels).
QUANT_TYPES = ('F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q2_K', 'Q3_K',
               'Q4_K', 'Q5_K', 'Q6_K')


@dataclasses.dataclass(frozen=True)
class _Tensor:
  """One tensor: its GGUF name, transformers' name and the row permutation to undo
  ('' none; 'q' / 'k': llama.cpp's RoPE reordering with the query / KV head count)."""
  gguf_name: str
  hf_name: str
  unpermute: str = ''


_GLOBAL = (
    _Tensor('token_embd.weight', 'model.embed_tokens.weight'),
    _Tensor('output_norm.weight', 'model.norm.weight'),
    _Tensor('output.weight', 'lm_head.weight'),  # absent when the embeddings are tied
)
_PER_LAYER = (
    _Tensor('attn_norm.weight', 'input_layernorm.weight'),
    _Tensor('ffn_norm.weight', 'post_attention_layernorm.weight'),
    _Tensor('attn_q.weight', 'self_attn.q_proj.weight', 'q'),
    _Tensor('attn_k.weight', 'self_attn.k_proj.weight', 'k'),
    _Tensor('attn_v.weight', 'self_attn.v_proj.weight'),
    _Tensor('attn_output.weight', 'self_attn.o_proj.weight'),
    _Tensor('ffn_gate.weight', 'mlp.gate_proj.weight'),
    _Tensor('ffn_up.weight', 'mlp.up_proj.weight'),
    _Tensor('ffn_down.weight', 'mlp.down_proj.weight'),
)


def _tensors(n_layers: int) -> list[_Tensor]:
  per_layer = [_Tensor(f'blk.{i}.{t.gguf_name}', f'model.layers.{i}.{t.hf_name}', t.unpermute)
               for i in range(n_layers) for t in _PER_LAYER]
  return list(_GLOBAL) + per_layer


def undo_rope_permutation(w_RxD: np.ndarray, n_heads: int) -> np.ndarray:
  """llama.cpp's q/k row order -> transformers' (the inverse of its converter's `permute`)."""
  rows = w_RxD.shape[0]
  return (w_RxD.reshape(n_heads, rows // n_heads // 2, 2, *w_RxD.shape[1:])
          .swapaxes(1, 2).reshape(w_RxD.shape))


def _field(reader, key: str, default: Any = None) -> Any:
  field = reader.fields.get(key)
  return default if field is None else field.contents()


def _required(reader, path: str, key: str) -> Any:
  """A metadata field the config cannot do without; its absence raises ValueError naming it."""
  value = _field(reader, key)
  if value is None:
    raise ValueError(f'{os.path.basename(path)}: metadata field {key!r} is missing; the GGUF '
                     'importer needs it to build config.json (is the file complete?).')
  return value


def _check_rope_freqs(reader, path: str) -> None:
  """llama.cpp stores Llama-3-style RoPE scaling as per-frequency factors in a `rope_freqs`
  tensor, not as a `rope.scaling.type` field; factors other than 1 would change every
  attention score, so such a file is refused (all-ones factors are plain RoPE)."""
  import gguf  # deferred: only a GGUF conversion needs it

  for tensor in reader.tensors:
    if tensor.name.startswith('rope_freqs'):
      factors = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)
      if not np.all(factors == 1.0):
        raise ValueError(f'{os.path.basename(path)}: tensor {tensor.name!r} holds RoPE '
                         'frequency factors (Llama-3-style rope scaling), which are not '
                         'supported; the importer reads plain RoPE.')


def read_metadata(path: str) -> tuple[Any, dict[str, Any]]:
  """(reader, the transformers config.json dict) of a GGUF file; unsupported files raise
  ValueError naming the field and value."""
  import gguf  # deferred: only a GGUF conversion needs it

  reader = gguf.GGUFReader(path)
  arch = _field(reader, 'general.architecture')
  if arch not in ARCHITECTURES:
    raise ValueError(f'{os.path.basename(path)}: general.architecture={arch!r} is not '
                     f'supported; the GGUF importer reads {ARCHITECTURES}.')
  bad = sorted({t.tensor_type.name for t in reader.tensors} - set(QUANT_TYPES))
  if bad:
    raise ValueError(f'{os.path.basename(path)}: tensor type(s) {bad} are not supported; the '
                     f'GGUF importer dequantizes {QUANT_TYPES}.')
  scaling = _field(reader, f'{arch}.rope.scaling.type')
  if scaling not in (None, 'none'):
    raise ValueError(f'{os.path.basename(path)}: {arch}.rope.scaling.type={scaling!r} is not '
                     'supported; the importer reads plain RoPE.')
  _check_rope_freqs(reader, path)
  required = lambda key: _required(reader, path, f'{arch}.{key}')  # noqa: E731
  d_model = int(required('embedding_length'))
  n_heads = int(required('attention.head_count'))
  names = {t.name for t in reader.tensors}
  embed = next((t for t in reader.tensors if t.name == 'token_embd.weight'), None)
  if embed is None:
    raise ValueError(f"{os.path.basename(path)}: no tensor 'token_embd.weight'; the GGUF "
                     'importer needs the token embeddings.')
  config = {
      'architectures': ['LlamaForCausalLM'],
      'model_type': 'llama',
      'vocab_size': int(embed.shape[-1]),
      'hidden_size': d_model,
      'intermediate_size': int(required('feed_forward_length')),
      'num_hidden_layers': int(required('block_count')),
      'num_attention_heads': n_heads,
      'num_key_value_heads': int(_field(reader, f'{arch}.attention.head_count_kv', n_heads)),
      'head_dim': int(_field(reader, f'{arch}.rope.dimension_count', d_model // n_heads)),
      'hidden_act': 'silu',
      'max_position_embeddings': int(required('context_length')),
      # GGUF stores float32: 1e-5 reads back as 9.99999974e-06; its shortest repr is the
      # value the publisher wrote.
      'rms_norm_eps': float(str(np.float32(
          required('attention.layer_norm_rms_epsilon')))),
      'rope_theta': float(_field(reader, f'{arch}.rope.freq_base', 10000.0)),
      'tie_word_embeddings': 'output.weight' not in names,
      'attention_bias': False,
      'mlp_bias': False,
      'torch_dtype': 'float32',
      'bos_token_id': _field(reader, 'tokenizer.ggml.bos_token_id'),
      'eos_token_id': _field(reader, 'tokenizer.ggml.eos_token_id'),
      'pad_token_id': _field(reader, 'tokenizer.ggml.padding_token_id'),
  }
  config['rope_parameters'] = {'rope_type': 'default', 'rope_theta': config['rope_theta']}
  return reader, config


def read_tensors(reader, config: dict[str, Any]) -> dict[str, np.ndarray]:
  """Every tensor of the file under its transformers name, float32, rows in HF order."""
  import gguf  # deferred: only a GGUF conversion needs it

  by_name = {t.name: t for t in reader.tensors}
  heads = {'q': config['num_attention_heads'], 'k': config['num_key_value_heads']}
  out: dict[str, np.ndarray] = {}
  for spec in _tensors(config['num_hidden_layers']):
    tensor = by_name.pop(spec.gguf_name, None)
    if tensor is None:
      if spec.gguf_name == 'output.weight':
        continue  # tied embeddings
      raise ValueError(f'the GGUF file has no tensor {spec.gguf_name!r}.')
    w = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)
    if spec.unpermute:
      w = undo_rope_permutation(w, heads[spec.unpermute])
    out[spec.hf_name] = np.ascontiguousarray(w)
  extra = sorted(n for n in by_name if not n.startswith('rope_freqs'))
  if extra:
    raise ValueError(f'the GGUF file has tensors the importer does not map: {extra[:5]}.')
  return out


def convert(path: str, out_dir: str) -> dict[str, Any]:
  """Writes `out_dir`/{model.safetensors, config.json, generation_config.json, tokenizer
  files, chat template}; returns the config dict."""
  from transformers import AutoTokenizer  # deferred: heavy; only a conversion needs it

  reader, config = read_metadata(path)
  os.makedirs(out_dir, exist_ok=True)
  tensors = read_tensors(reader, config)
  save_file(tensors, os.path.join(out_dir, 'model.safetensors'), metadata={'format': 'pt'})
  with open(os.path.join(out_dir, 'config.json'), 'w') as f:
    json.dump(config, f, indent=2)
  generation = {k: config[k] for k in ('bos_token_id', 'eos_token_id', 'pad_token_id')}
  with open(os.path.join(out_dir, 'generation_config.json'), 'w') as f:
    json.dump(generation, f, indent=2)
  # transformers rebuilds the fast tokenizer (BPE vocabulary, merges, special tokens, chat
  # template) from the file's tokenizer.ggml.* fields.
  tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                            gguf_file=os.path.basename(path))
  tokenizer.save_pretrained(out_dir)
  return config
