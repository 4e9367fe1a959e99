"""Hugging Face checkpoints <-> our parameters: config mapping, sharded import, export.

Owns three things:
- `model_config_from_hf(hf_dir)`: a local checkpoint's `config.json` (Qwen2ForCausalLM,
  Qwen3ForCausalLM, LlamaForCausalLM incl. Llama 3.x) -> `ModelConfig`. Anything the policy
  cannot represent exactly (sliding-window layers, MoE, an o_proj bias, RoPE types other than
  'default' / 'linear' / 'llama3' such as yarn or dynamic, partial rotary, an activation other
  than SiLU) raises ValueError naming the config field.
- `load_hf_params(hf_dir, cfg, mesh)`: safetensors shards -> our parameter tree, one tensor
  at a time, straight onto the mesh: each parameter is built with
  `jax.make_array_from_callback` under its target NamedSharding, so a device reads only
  the slice of the HF tensor it holds (safetensors `get_slice` memory-maps the file) and no
  host ever holds the whole model. Tensors are cast to `cfg.param_dtype` slice by slice.
- `save_hf_checkpoint(params, cfg, out_dir)`: our parameters -> `config.json` +
  safetensors (sharded with `model.safetensors.index.json` when over `max_shard_bytes`) +
  the tokenizer files, loadable by `transformers.AutoModelForCausalLM`. Import after export
  is exact.

Layouts. HF `nn.Linear` weights are [out, in]; ours are [in, out] with the heads split out:
q_proj [H*hd, D] -> q/kernel [D, H, hd]; o_proj [D, H*hd] -> o/kernel [H, hd, D];
q_norm / k_norm [hd] -> q_norm/scale, k_norm/scale [hd] (Qwen3);
gate/up [F, D] -> [D, F]; down [D, F] -> [F, D]; lm_head [V, D] -> [D, V]. Both sides use
the rotate_half RoPE convention, so q/k need no permutation.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import math
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import jax
import ml_dtypes
import numpy as np
from jax.sharding import Mesh
from safetensors import safe_open
from safetensors.numpy import save_file

from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import processes
from sgpo_jax.parallel import sharding as sharding_lib

Params = Any
ARCHITECTURES = {'qwen2': 'Qwen2ForCausalLM', 'qwen3': 'Qwen3ForCausalLM',
                 'llama': 'LlamaForCausalLM'}
INDEX_FILE = 'model.safetensors.index.json'
SINGLE_FILE = 'model.safetensors'
TOKENIZER_FILES = (
    'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'vocab.json',
    'merges.txt', 'tokenizer.model', 'added_tokens.json', 'chat_template.jinja',
    'chat_template.json', 'generation_config.json')
DEFAULT_MAX_SHARD_BYTES = 4 * 1024**3
# Fields whose presence (with a non-trivial value) means a feature the policy lacks.
_MOE_FIELDS = ('num_experts', 'num_local_experts', 'n_routed_experts', 'moe_intermediate_size',
               'num_experts_per_tok')
_ARCH_FIELDS = ('vocab_size', 'd_model', 'n_layers', 'n_heads', 'n_kv_heads', 'head_dim', 'd_ff',
                'rope_theta', 'rope_type', 'rope_factor', 'rope_low_freq_factor',
                'rope_high_freq_factor', 'rope_original_max_len', 'rms_eps', 'tie_embeddings',
                'qkv_bias', 'qk_norm')
_NP_DTYPES = {'float32': np.float32, 'bfloat16': ml_dtypes.bfloat16, 'float16': np.float16}
EXPORT_DTYPES = tuple(_NP_DTYPES)  # what save_hf_checkpoint's `dtype` accepts


# ---------------------------------------------------------------------------------------------
# Config mapping.


def read_hf_config(hf_dir: str) -> dict[str, Any]:
  path = os.path.join(hf_dir, 'config.json')
  if not os.path.isfile(path):
    raise ValueError(f'model.hf_path={hf_dir!r} has no config.json; point it at a local '
                     'Hugging Face checkpoint directory (config.json + *.safetensors).')
  with open(path) as f:
    return json.load(f)


_ROPE_SUPPORTED = ('default', 'linear', 'llama3')


def _rope_fields(hf: Mapping[str, Any]) -> dict[str, Any]:
  """The RoPE fields of ModelConfig from transformers v5 `rope_parameters` or the v4
  top-level `rope_theta` + `rope_scaling` (v5 entries win where both are present)."""
  params = hf.get('rope_parameters') or {}
  if params and not isinstance(params, Mapping):
    raise ValueError(f'config.json rope_parameters={params!r} is not a dict.')
  if params and all(isinstance(v, Mapping) for v in params.values()):
    raise ValueError('config.json rope_parameters is per layer type '
                     f'({sorted(params)}); only one global RoPE is supported.')
  scaling = hf.get('rope_scaling') or {}
  rope: dict[str, Any] = {}
  source: dict[str, str] = {}
  for field, block in (('rope_scaling', scaling), ('rope_parameters', params)):
    for key, value in block.items():
      key = 'rope_type' if key == 'type' else key
      if key == 'rope_type' and value in (None, 'default') and rope.get('rope_type'):
        continue  # a v5 'default' next to a v4 scaling block: the scaling block describes it
      rope[key] = value
      source[key] = field
    factor = block.get('partial_rotary_factor', 1.0)
    if factor != 1.0:
      raise ValueError(f'config.json {field}.partial_rotary_factor={factor} is not supported; '
                       'the policy rotates the full head dimension.')
  if hf.get('partial_rotary_factor', 1.0) != 1.0:
    raise ValueError(f"config.json partial_rotary_factor={hf['partial_rotary_factor']} is not "
                     'supported; the policy rotates the full head dimension.')
  rope_type = rope.get('rope_type') or 'default'
  if rope_type not in _ROPE_SUPPORTED:
    raise ValueError(
        f"config.json {source['rope_type']}.rope_type={rope_type!r} is not supported: the "
        f'policy implements RoPE types {_ROPE_SUPPORTED} (transformers formulas); use a '
        'checkpoint with one of these or add the scaling to model.rope_inv_freq.')
  theta = rope.get('rope_theta', hf.get('rope_theta', 10000.0))
  fields: dict[str, Any] = {'rope_theta': float(theta), 'rope_type': rope_type}
  if rope_type == 'default':
    return fields
  for key in ('factor',) + (('low_freq_factor', 'high_freq_factor')
                            if rope_type == 'llama3' else ()):
    if key not in rope:
      raise ValueError(f"config.json rope_type={rope_type!r} needs {key!r} in "
                       f"{source['rope_type']}; the checkpoint's config.json is incomplete.")
  fields['rope_factor'] = float(rope['factor'])
  if rope_type == 'llama3':
    fields['rope_low_freq_factor'] = float(rope['low_freq_factor'])
    fields['rope_high_freq_factor'] = float(rope['high_freq_factor'])
    # transformers falls back to max_position_embeddings when this is absent.
    fields['rope_original_max_len'] = int(rope.get('original_max_position_embeddings')
                                          or hf.get('max_position_embeddings', 2048))
  return fields


def _hf_rope_block(cfg: model_lib.ModelConfig) -> dict[str, Any]:
  """ModelConfig -> the `rope_parameters` dict (without rope_theta for the v4 `rope_scaling`)."""
  block: dict[str, Any] = {'rope_type': cfg.rope_type}
  if cfg.rope_type != 'default':
    block['factor'] = cfg.rope_factor
  if cfg.rope_type == 'llama3':
    block.update(low_freq_factor=cfg.rope_low_freq_factor,
                 high_freq_factor=cfg.rope_high_freq_factor,
                 original_max_position_embeddings=cfg.rope_original_max_len)
  return block


def _check_supported(hf: Mapping[str, Any]) -> str:
  model_type = hf.get('model_type')
  if model_type not in ARCHITECTURES:
    raise ValueError(f'config.json model_type={model_type!r} is not supported; supported: '
                     f'{sorted(ARCHITECTURES)} (dense Qwen2 / Qwen3 / Llama decoders).')
  archs = hf.get('architectures') or [ARCHITECTURES[model_type]]
  if archs[0] != ARCHITECTURES[model_type]:
    raise ValueError(f'config.json architectures={archs} is not supported for model_type '
                     f'{model_type!r}; expected [{ARCHITECTURES[model_type]!r}] (a causal LM).')
  for field in _MOE_FIELDS:
    if hf.get(field):
      raise ValueError(f'config.json {field}={hf[field]!r}: mixture-of-experts models are not '
                       'supported; use a dense checkpoint.')
  if hf.get('use_sliding_window'):
    raise ValueError('config.json use_sliding_window=True is not supported: the policy uses '
                     'full attention in every layer; set it to false only if the model was '
                     'trained without sliding windows.')
  layer_types = hf.get('layer_types') or []
  if any(t != 'full_attention' for t in layer_types):
    raise ValueError(f'config.json layer_types={sorted(set(layer_types))}: only '
                     "'full_attention' layers are supported.")
  act = hf.get('hidden_act', 'silu')
  if act not in ('silu', 'swish'):
    raise ValueError(f'config.json hidden_act={act!r} is not supported; the MLP is SwiGLU '
                     "(hidden_act 'silu').")
  if hf.get('mlp_bias'):
    raise ValueError('config.json mlp_bias=True is not supported: the MLP has no biases.')
  if model_type in ('llama', 'qwen3') and hf.get('attention_bias'):
    raise ValueError(f'config.json attention_bias=True is not supported for {model_type}: it '
                     'also adds an o_proj bias, which the policy lacks.')
  return model_type


def model_config_from_hf(hf_dir: str | Mapping[str, Any], **overrides: Any
                         ) -> model_lib.ModelConfig:
  """config.json (a directory or its parsed dict) -> ModelConfig.

  `overrides` set non-architecture fields (dtype, param_dtype, remat, max_len, ...).
  """
  hf = read_hf_config(hf_dir) if isinstance(hf_dir, str) else dict(hf_dir)
  model_type = _check_supported(hf)
  n_heads = int(hf['num_attention_heads'])
  head_dim = hf.get('head_dim') or hf['hidden_size'] // n_heads
  fields = {
      'vocab_size': int(hf['vocab_size']),
      'd_model': int(hf['hidden_size']),
      'n_layers': int(hf['num_hidden_layers']),
      'n_heads': n_heads,
      'n_kv_heads': int(hf.get('num_key_value_heads') or n_heads),
      'head_dim': int(head_dim),
      'd_ff': int(hf['intermediate_size']),
      'rms_eps': float(hf.get('rms_norm_eps', 1e-6)),
      'tie_embeddings': bool(hf.get('tie_word_embeddings', False)),  # all classes default False
      'qkv_bias': model_type == 'qwen2',
      'qk_norm': model_type == 'qwen3',
      'max_len': int(hf.get('max_position_embeddings', 2048)),
      **_rope_fields(hf),
  }
  fields.update(overrides)
  cfg = model_lib.ModelConfig(**fields)
  cfg.validate()
  return cfg


def architecture_fields(hf_dir: str) -> dict[str, Any]:
  """The architecture fields of `config.model` (dims, RoPE, norms, biases) from config.json.

  For a config written for one checkpoint that must point at another of the same family
  (e.g. a tiny offline stand-in): dtypes, remat, LoRA and max_len stay as the config has them.
  """
  cfg = model_config_from_hf(hf_dir)
  return {name: getattr(cfg, name) for name in _ARCH_FIELDS}


def check_matches_checkpoint(cfg: model_lib.ModelConfig, hf_dir: str) -> None:
  """Raises naming every architecture field where `cfg` and the checkpoint disagree."""
  want = model_config_from_hf(hf_dir)
  bad = [f'model.{name}={getattr(cfg, name)!r} but the checkpoint has {getattr(want, name)!r}'
         for name in _ARCH_FIELDS if getattr(cfg, name) != getattr(want, name)]
  if bad:
    raise ValueError(f'config.model does not match {hf_dir}/config.json: ' + '; '.join(bad)
                     + '. Set these fields to the checkpoint values (hf.model_config_from_hf).')


def hf_config_from_model_config(cfg: model_lib.ModelConfig, model_type: str | None = None,
                                torch_dtype: str | None = None, **extra: Any) -> dict[str, Any]:
  """ModelConfig -> a transformers config.json dict (Qwen3 when qk_norm, Qwen2 when qkv_bias,
  else Llama)."""
  model_type = model_type or ('qwen3' if cfg.qk_norm else 'qwen2' if cfg.qkv_bias else 'llama')
  if model_type not in ARCHITECTURES:
    raise ValueError(f'model_type={model_type!r}: export supports {sorted(ARCHITECTURES)}.')
  if model_type in ('llama', 'qwen3') and cfg.qkv_bias:
    raise ValueError(f"model_type={model_type!r} cannot hold qkv_bias=True (its attention_bias "
                     "also adds an o_proj bias); export with model_type='qwen2'.")
  if cfg.qk_norm != (model_type == 'qwen3'):
    raise ValueError(f'model.qk_norm={cfg.qk_norm} cannot be exported as '
                     f"model_type={model_type!r}: only 'qwen3' has QK-norm; leave model_type "
                     'unset to pick it from the config.')
  hf = {
      'architectures': [ARCHITECTURES[model_type]],
      'model_type': model_type,
      'vocab_size': cfg.vocab_size,
      'hidden_size': cfg.d_model,
      'intermediate_size': cfg.d_ff,
      'num_hidden_layers': cfg.n_layers,
      'num_attention_heads': cfg.n_heads,
      'num_key_value_heads': cfg.n_kv_heads,
      'head_dim': cfg.head_dim,
      'hidden_act': 'silu',
      'max_position_embeddings': cfg.max_len,
      'rms_norm_eps': cfg.rms_eps,
      'rope_theta': cfg.rope_theta,
      'rope_parameters': {**_hf_rope_block(cfg), 'rope_theta': cfg.rope_theta},
      # transformers 4.x reads scaling from here (null for plain RoPE).
      'rope_scaling': _hf_rope_block(cfg) if cfg.rope_type != 'default' else None,
      'tie_word_embeddings': cfg.tie_embeddings,
      'initializer_range': cfg.init_std,
      'attention_dropout': 0.0,
      'use_cache': True,
      'dtype': torch_dtype or cfg.param_dtype,
      'torch_dtype': torch_dtype or cfg.param_dtype,  # the name transformers 4.x reads
  }
  if model_type in ('qwen2', 'qwen3'):
    hf.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg.n_layers,
              layer_types=['full_attention'] * cfg.n_layers)
  if model_type == 'qwen3':
    hf.update(attention_bias=False)
  elif model_type == 'llama':
    hf.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
  hf.update(extra)
  return hf


# ---------------------------------------------------------------------------------------------
# The weight mapping: one `_Tensor` per parameter, with index translation for slices.


@dataclasses.dataclass(frozen=True)
class _Tensor:
  """One parameter's HF name and layout transform.

  kind: 'copy' (same layout), 'transpose' (2-D [out, in] <-> [in, out]), 'in_heads'
  ([N*E, D] <-> [D, N, E]), 'bias_heads' ([N*E] <-> [N, E]), 'out_heads' ([D, N*E] <->
  [N, E, D]).
  """
  hf_name: str
  path: tuple[str, ...]
  kind: str
  shape: tuple[int, ...]  # ours (one layer's slice for per-layer tensors)
  layer: int | None = None  # per-layer tensors: the index along params['layers'][...]'s axis 0

  @property
  def hf_shape(self) -> tuple[int, ...]:
    s = self.shape
    if self.kind == 'in_heads':
      return (s[1] * s[2], s[0])
    if self.kind == 'bias_heads':
      return (s[0] * s[1],)
    if self.kind == 'out_heads':
      return (s[2], s[0] * s[1])
    return s[::-1] if self.kind == 'transpose' else s

  def to_hf(self, ours: np.ndarray) -> np.ndarray:
    if self.kind == 'copy':
      return ours
    if self.kind == 'transpose':
      return ours.T
    return ours.reshape(self.hf_shape[::-1]).T if self.kind != 'bias_heads' else ours.reshape(-1)

  def read(self, hf_slice: Callable[[tuple[slice, ...]], np.ndarray], index: tuple[slice, ...]
           ) -> np.ndarray:
    """Our block `index` (slices into `self.shape`), reading only the HF rows/cols it needs."""
    idx = tuple(slice(*sl.indices(dim)) for sl, dim in zip(index, self.shape))
    if self.kind == 'copy':
      return hf_slice(idx)
    if self.kind == 'transpose':
      return hf_slice(idx[::-1]).T
    heads = idx[1] if self.kind == 'in_heads' else idx[0]
    e = self.shape[-1] if self.kind != 'out_heads' else self.shape[1]
    rows = slice(heads.start * e, heads.stop * e)  # whole heads; head_dim sliced after
    n = heads.stop - heads.start
    if self.kind == 'in_heads':
      block = hf_slice((rows, idx[0])).T
      return block.reshape(block.shape[0], n, e)[:, :, idx[2]]
    if self.kind == 'bias_heads':
      return hf_slice((rows,)).reshape(n, e)[:, idx[1]]
    block = hf_slice((idx[2], rows)).T
    return block.reshape(n, e, block.shape[-1])[:, idx[1], :]


def _tensor_specs(cfg: model_lib.ModelConfig) -> list[_Tensor]:
  d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
  h, k, e = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  specs = [_Tensor('model.embed_tokens.weight', ('embedding',), 'copy', (v, d))]
  for i in range(cfg.n_layers):
    hf, ours = f'model.layers.{i}.', model_lib.LAYERS
    layer_specs = [
        _Tensor(hf + 'input_layernorm.weight', (ours, 'attn_norm', 'scale'), 'copy', (d,)),
        _Tensor(hf + 'self_attn.q_proj.weight', (ours, 'attn', 'q', 'kernel'), 'in_heads',
                (d, h, e)),
        _Tensor(hf + 'self_attn.k_proj.weight', (ours, 'attn', 'k', 'kernel'), 'in_heads',
                (d, k, e)),
        _Tensor(hf + 'self_attn.v_proj.weight', (ours, 'attn', 'v', 'kernel'), 'in_heads',
                (d, k, e)),
    ]
    if cfg.qk_norm:
      layer_specs += [
          _Tensor(hf + 'self_attn.q_norm.weight', (ours, 'attn', 'q_norm', 'scale'), 'copy', (e,)),
          _Tensor(hf + 'self_attn.k_norm.weight', (ours, 'attn', 'k_norm', 'scale'), 'copy', (e,)),
      ]
    if cfg.qkv_bias:
      layer_specs += [
          _Tensor(hf + 'self_attn.q_proj.bias', (ours, 'attn', 'q', 'bias'), 'bias_heads', (h, e)),
          _Tensor(hf + 'self_attn.k_proj.bias', (ours, 'attn', 'k', 'bias'), 'bias_heads', (k, e)),
          _Tensor(hf + 'self_attn.v_proj.bias', (ours, 'attn', 'v', 'bias'), 'bias_heads', (k, e)),
      ]
    layer_specs += [
        _Tensor(hf + 'self_attn.o_proj.weight', (ours, 'attn', 'o', 'kernel'), 'out_heads',
                (h, e, d)),
        _Tensor(hf + 'post_attention_layernorm.weight', (ours, 'mlp_norm', 'scale'), 'copy', (d,)),
        _Tensor(hf + 'mlp.gate_proj.weight', (ours, 'mlp', 'gate', 'kernel'), 'transpose', (d, f)),
        _Tensor(hf + 'mlp.up_proj.weight', (ours, 'mlp', 'up', 'kernel'), 'transpose', (d, f)),
        _Tensor(hf + 'mlp.down_proj.weight', (ours, 'mlp', 'down', 'kernel'), 'transpose', (f, d)),
    ]
    specs += [dataclasses.replace(spec, layer=i) for spec in layer_specs]
  specs.append(_Tensor('model.norm.weight', ('final_norm', 'scale'), 'copy', (d,)))
  if not cfg.tie_embeddings:
    specs.append(_Tensor('lm_head.weight', ('lm_head',), 'transpose', (d, v)))
  return specs


def _get_path(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
  for key in path:
    tree = tree[key]
  return tree


def _set_path(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


# ---------------------------------------------------------------------------------------------
# Import.


def _weight_files(hf_dir: str) -> dict[str, str]:
  """HF tensor name -> the safetensors file holding it."""
  index_path = os.path.join(hf_dir, INDEX_FILE)
  if os.path.isfile(index_path):
    with open(index_path) as f:
      weight_map = json.load(f)['weight_map']
    return {name: os.path.join(hf_dir, file) for name, file in weight_map.items()}
  files = sorted(glob.glob(os.path.join(hf_dir, '*.safetensors')))
  if not files:
    raise ValueError(f'{hf_dir} holds no *.safetensors files (and no {INDEX_FILE}); export the '
                     'model with save_pretrained(safe_serialization=True).')
  names = {}
  for path in files:
    with safe_open(path, framework='numpy') as f:
      names.update(dict.fromkeys(f.keys(), path))
  return names


def load_hf_params(hf_dir: str, cfg: model_lib.ModelConfig, mesh: Mesh,
                   rules=sharding_lib.DEFAULT_RULES) -> Params:
  """Reads a local HF checkpoint onto `mesh` with each parameter's target sharding.

  `cfg` must match the checkpoint's architecture (see `model_config_from_hf`); its
  `param_dtype` is the dtype of the returned arrays. Each device reads only its own slice.
  """
  check_matches_checkpoint(cfg, hf_dir)
  shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh, rules)
  files = _weight_files(hf_dir)
  dtype = _NP_DTYPES[cfg.param_dtype]
  specs = _tensor_specs(cfg)
  missing = [s.hf_name for s in specs if s.hf_name not in files]
  if missing:
    raise ValueError(f'{hf_dir} lacks tensor(s) {missing[:5]}{" ..." if len(missing) > 5 else ""} '
                     f'that a {cfg.n_layers}-layer model with qkv_bias={cfg.qkv_bias}, '
                     f'qk_norm={cfg.qk_norm}, tie_embeddings={cfg.tie_embeddings} needs; the '
                     'checkpoint is incomplete '
                     'or its config.json does not describe it.')
  params: dict[str, Any] = {}
  handles: dict[str, Any] = {}
  readers: dict[tuple[str, ...], dict[int | None, Callable]] = {}
  shapes: dict[tuple[str, ...], tuple[int, ...]] = {}
  try:
    for spec in specs:
      path = files[spec.hf_name]
      if path not in handles:
        handles[path] = safe_open(path, framework='numpy')
      tensor = handles[path].get_slice(spec.hf_name)
      found = tuple(tensor.get_shape())
      if found != spec.hf_shape:
        raise ValueError(f'tensor {spec.hf_name} in {os.path.basename(path)} has shape {found}; '
                         f'expected {spec.hf_shape} from config.json. The weights and config '
                         'disagree: fix config.json or re-export the checkpoint.')

      def hf_slice(index, tensor=tensor):
        return np.asarray(tensor[index])

      readers.setdefault(spec.path, {})[spec.layer] = functools.partial(spec.read, hf_slice)
      shapes[spec.path] = spec.shape
    for param_path, by_layer in readers.items():
      cache: dict[Any, np.ndarray] = {}
      stacked = None not in by_layer  # a per-layer tensor: our leaf is [L, ...]

      def block(index, by_layer=by_layer, cache=cache, stacked=stacked):
        key = tuple((s.start, s.stop, s.step) for s in index)
        if key not in cache:  # replicated params: every device asks for the same block
          if stacked:
            layers = range(*index[0].indices(len(by_layer)))
            out = np.stack([by_layer[i](index[1:]) for i in layers])
          else:
            out = by_layer[None](index)
          cache[key] = np.ascontiguousarray(out.astype(dtype))
        return cache[key]

      shape = ((len(by_layer),) if stacked else ()) + shapes[param_path]
      sharding = _get_path(shardings, param_path)
      _set_path(params, param_path, jax.make_array_from_callback(shape, sharding, block))
  finally:
    handles.clear()
  return params


# ---------------------------------------------------------------------------------------------
# Export.


def _shard_file_name(i: int, n: int) -> str:
  return SINGLE_FILE if n == 1 else f'model-{i + 1:05d}-of-{n:05d}.safetensors'


def save_hf_checkpoint(params: Params, cfg: model_lib.ModelConfig, out_dir: str,
                       tokenizer_dir: str | None = None,
                       max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
                       dtype: str | None = None, model_type: str | None = None,
                       config_overrides: Mapping[str, Any] | None = None) -> list[str]:
  """Writes `params` as a transformers checkpoint in `out_dir`; returns the files written.

  dtype: the stored dtype ('float32' | 'bfloat16' | 'float16'; default cfg.param_dtype).
  model_type: 'qwen2' | 'qwen3' | 'llama' (default: qwen3 when cfg.qk_norm, qwen2 when
  cfg.qkv_bias, else llama).
  config_overrides: extra config.json fields (e.g. bos_token_id / eos_token_id).
  Every process must call this (parameters are gathered per tensor); process 0 writes.
  """
  dtype = dtype or cfg.param_dtype
  if dtype not in _NP_DTYPES:
    raise ValueError(f'dtype={dtype!r}: use one of {sorted(_NP_DTYPES)}.')
  if max_shard_bytes <= 0:
    raise ValueError(f'max_shard_bytes={max_shard_bytes} must be positive.')
  hf_config = hf_config_from_model_config(cfg, model_type, dtype, **(config_overrides or {}))
  write = processes.is_writer()
  specs = _tensor_specs(cfg)
  if hf_config['model_type'] == 'qwen2' and not cfg.qkv_bias:  # Qwen2 always has biases.
    specs = specs + [dataclasses.replace(s, hf_name=s.hf_name.replace('.weight', '.bias'),
                                         kind='bias_heads', shape=s.shape[1:], path=())
                     for s in specs if s.kind == 'in_heads']
  itemsize = np.dtype(_NP_DTYPES[dtype]).itemsize
  groups: list[list[_Tensor]] = [[]]
  size = 0
  for spec in specs:
    nbytes = math.prod(spec.shape) * itemsize
    if groups[-1] and size + nbytes > max_shard_bytes:
      groups.append([])
      size = 0
    groups[-1].append(spec)
    size += nbytes
  if write:
    os.makedirs(out_dir, exist_ok=True)
    # Shards of an earlier export with another shard count would sit beside the new index.
    stale = glob.glob(os.path.join(out_dir, 'model-*-of-*.safetensors')) + [
        os.path.join(out_dir, SINGLE_FILE), os.path.join(out_dir, INDEX_FILE)]
    for path in stale:
      if os.path.exists(path):
        os.remove(path)
  written, weight_map, total = [], {}, 0
  host: dict[tuple[str, ...], np.ndarray] = {}  # one gather per (stacked) parameter
  for i, group in enumerate(groups):
    name = _shard_file_name(i, len(groups))
    tensors = {}
    for spec in group:
      if spec.path:
        if spec.path not in host:
          host[spec.path] = np.asarray(sharding_lib.to_host(_get_path(params, spec.path)))
        ours = host[spec.path] if spec.layer is None else host[spec.path][spec.layer]
      else:
        ours = np.zeros(spec.shape, np.float32)
      tensors[spec.hf_name] = np.ascontiguousarray(spec.to_hf(ours).astype(_NP_DTYPES[dtype]))
      weight_map[spec.hf_name] = name
      total += tensors[spec.hf_name].nbytes
    if write:
      save_file(tensors, os.path.join(out_dir, name), metadata={'format': 'pt'})
    written.append(os.path.join(out_dir, name))
  if write:
    if len(groups) > 1:
      with open(os.path.join(out_dir, INDEX_FILE), 'w') as f:
        json.dump({'metadata': {'total_size': total}, 'weight_map': weight_map}, f, indent=2)
      written.append(os.path.join(out_dir, INDEX_FILE))
    with open(os.path.join(out_dir, 'config.json'), 'w') as f:
      json.dump(hf_config, f, indent=2)
    written.append(os.path.join(out_dir, 'config.json'))
    if tokenizer_dir:
      for file in TOKENIZER_FILES:
        src, dst = os.path.join(tokenizer_dir, file), os.path.join(out_dir, file)
        if os.path.isfile(src):
          if not (os.path.exists(dst) and os.path.samefile(src, dst)):
            shutil.copyfile(src, dst)
          written.append(dst)
  return written
