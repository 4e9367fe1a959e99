"""LoRA and QLoRA on the policy through qwix: settings, the wrapped model, the parameter
partition (trainable adapters / frozen base), the KL reference and the merged weights.

With `model.lora_rank` = r > 0 every target projection W (q, k, v, o, gate, up, down; each a
stacked [L, ...] kernel of the scanned layers) gets two adapters beside its kernel,
`kernel_lora_a` [L, fan_in, r] and `kernel_lora_b` [L, r, fan_out] (qwix's LoraProvider
names and layout), and computes x W + (alpha / r) (x A) B. B starts at zero, so the adapted
model starts as the base model. Only the adapters train: `split` cuts a parameter tree into
(adapters, base) and the learner differentiates and keeps optimizer moments for the first
alone; the base comes out of every step untouched (bit-identical).

QLoRA (`model.lora_base_dtype` 'int8' or 'nf4'): the target kernels of the base are stored
quantized (qwix QArray in a WithAux: int8 values or nf4 codes plus a float scale per output
channel) and the adapters stay in the parameter dtype. qwix 0.1.8 derives the quantization
recipe per layer but, for a scanned model, quantizes the [L, ...] stack with it (and loses
the attention adapters when it quantizes during `init`); so the base is quantized here,
layer by layer (`jax.vmap` over the stack), from the recipe qwix reports for one layer.

The KL reference policy is the base model: the same parameters with every B zeroed
(`reference_params`), so it needs no second copy of the weights. `merged_params` folds the
adapters into plain kernels of the unwrapped Transformer (HF export); `peft_tensors` are the
adapters alone in the PEFT layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.model.lora_settings import (  # noqa: F401
  BASE_DTYPES,
  TARGETS,
  check,
  check_family,
  enabled,
  parse_targets,
)
from sgpo_jax.parallel import sharding as sharding_lib

ADAPTER_SUFFIXES = ('_lora_a', '_lora_b')
NF4_STORAGE = jnp.uint8  # orbax cannot write 4-bit arrays: nf4 codes are kept one per byte


def _provider(cfg: model_lib.ModelConfig, quantized: bool):
  import qwix  # deferred: qwix is slow to import; LoRA models only
  paths = '|'.join(TARGETS[t] for t in cfg.lora_targets)
  return qwix.LoraProvider(
      module_path=f'{model_lib.LAYERS}/({paths})', rank=int(cfg.lora_rank),
      alpha=float(cfg.lora_alpha), weight_qtype=cfg.lora_base_dtype if quantized else None)


class _Nf4Policy:
  """The qwix-wrapped module, whose `apply` first views the stored nf4 codes as uint4."""

  def __init__(self, module):
    self.module = module
    self.cfg = module.cfg

  def apply(self, variables, *args, **kwargs):
    variables = dict(variables, params=_nf4_codes(variables['params']))
    return self.module.apply(variables, *args, **kwargs)


def make_model(cfg: model_lib.ModelConfig):
  """The policy module: the Transformer, wrapped by qwix LoRA when lora_rank > 0."""
  model = model_lib.Transformer(cfg)
  if not enabled(cfg):
    return model
  import qwix  # deferred: qwix is slow to import; LoRA models only
  model = qwix.apply_lora_to_model(model, _provider(cfg, quantized=cfg.lora_base_dtype is not None))
  return _Nf4Policy(model) if cfg.lora_base_dtype == 'nf4' else model


# ------------------------------------------------------------------------------------------
# The parameter tree


def is_adapter_path(path) -> bool:
  last = path[-1]
  name = getattr(last, 'key', getattr(last, 'name', str(last)))
  return isinstance(name, str) and name.endswith(ADAPTER_SUFFIXES)


def split(params) -> tuple[dict, dict]:
  """(adapters, base): two nested dicts that `merge` puts back together. Without adapters
  the first is empty."""
  def go(tree):
    if not isinstance(tree, dict):
      return None, tree
    train, frozen = {}, {}
    for k, v in tree.items():
      if isinstance(k, str) and k.endswith(ADAPTER_SUFFIXES):
        train[k] = v
        continue
      t, f = go(v)
      if t:
        train[k] = t
      if f is not None and not (isinstance(f, dict) and not f and isinstance(v, dict) and t):
        frozen[k] = f
    return train, frozen
  train, frozen = go(params)
  return train or {}, frozen


def merge(adapters, base):
  """The inverse of `split`."""
  if not isinstance(adapters, dict) or not adapters:
    return base
  out = dict(base)
  for k, v in adapters.items():
    out[k] = merge(v, base[k]) if k in base and isinstance(v, dict) else v
  return out


def reference_params(params):
  """The base policy for the KL term: every B zeroed (A and the base are shared, not copied)."""
  adapters, base = split(params)
  zeroed = jax.tree_util.tree_map_with_path(
      lambda p, x: jnp.zeros_like(x) if str(p[-1]).find('_lora_b') >= 0 else x, adapters)
  return merge(zeroed, base)


def _leaf_size(x) -> int:
  return int(np.prod(x.shape))


def param_counts(params) -> dict[str, int]:
  """{'trainable_params', 'total_params'}: adapters (all params without LoRA) and every
  weight of the model (a quantized kernel counts its elements once, not its scales)."""
  adapters, base = split(params)
  def count(tree):
    n = 0
    for leaf in jax.tree.leaves(tree, is_leaf=_is_quantized):
      n += _leaf_size(leaf.array.qvalue if _is_quantized(leaf) else leaf)
    return n
  n_adapters, n_base = count(adapters), count(base)
  return {'trainable_params': n_adapters if adapters else n_base,
          'total_params': n_adapters + n_base}


def expected_adapter_count(cfg: model_lib.ModelConfig) -> int:
  """r * (fan_in + fan_out) per target per layer, by hand from the config."""
  return flops_lib.lora_params(cfg)


# ------------------------------------------------------------------------------------------
# Building LoRA parameters from base parameters


def _is_quantized(x) -> bool:
  return type(x).__name__ == 'WithAux'


def _tokens():
  t = jnp.zeros((1, 1), jnp.int32)
  return t, t, t.astype(bool)


def abstract_params(cfg: model_lib.ModelConfig):
  """Boxed abstract parameters of the LoRA model (full-precision base, adapters with their
  logical names); the quantized base's leaves are added by `quantize_base`."""
  fp_model = model_lib.Transformer(cfg)
  if enabled(cfg):
    import qwix  # deferred: qwix is slow to import; LoRA models only
    fp_model = qwix.apply_lora_to_model(fp_model, _provider(cfg, quantized=False))
  return jax.eval_shape(lambda: fp_model.init(jax.random.key(0), *_tokens())['params'])


def _quantize_recipes(cfg: model_lib.ModelConfig) -> dict[tuple[str, ...], Any]:
  """{path of a target kernel: qwix HowToQuantize for one layer} from qwix's own init."""
  import qwix  # deferred: qwix is slow to import; LoRA models only
  model = qwix.apply_lora_to_model(model_lib.Transformer(cfg), _provider(cfg, quantized=True))
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *_tokens())['params'])
  recipes = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(shapes, is_leaf=_is_quantized)[0]:
    if _is_quantized(leaf):
      recipes[tuple(p.key for p in path)] = leaf.how
  return recipes


def quantize_kernel(kernel_LxS, how):
  """One stacked kernel -> WithAux(QArray) quantized layer by layer (nf4 codes as uint8)."""
  # deferred: qwix is slow to import; LoRA models only
  from qwix._src.core import qarray
  from qwix._src.providers import ptq
  q = jax.vmap(lambda w: qarray.quantize(w, how))(kernel_LxS)
  if how.qtype == 'nf4':
    q = dataclasses.replace(q, qvalue=q.qvalue.astype(NF4_STORAGE))
  return ptq.WithAux(q, how)


def dequantize_kernel(w):
  """WithAux(QArray) stacked kernel -> float32 array of the kernel's shape."""
  # deferred: qwix is slow to import; LoRA models only
  from qwix._src.core import qarray
  q = w.array
  if q.qtype == 'nf4':
    q = dataclasses.replace(q, qvalue=q.qvalue.astype(jnp.uint4))
  return jax.vmap(qarray.dequantize)(q).astype(jnp.float32)


def _nf4_codes(params):
  """nf4 kernels with their codes as uint4 (what qwix's kernels read)."""
  def fix(x):
    if _is_quantized(x) and x.array.qtype == 'nf4' and x.array.qvalue.dtype != jnp.uint4:
      return x.replace(array=dataclasses.replace(x.array, qvalue=x.array.qvalue.astype(jnp.uint4)))
    return x
  return jax.tree.map(fix, params, is_leaf=_is_quantized)


def attach(cfg: model_lib.ModelConfig, base_params, rng):
  """Base Transformer params -> LoRA params: adapters added (A random, B zero) and, for
  QLoRA, the target kernels quantized. Unsharded (jit it with `shardings` for a mesh)."""
  if not enabled(cfg):
    return base_params
  import qwix  # deferred: qwix is slow to import; LoRA models only
  fp_model = qwix.apply_lora_to_model(model_lib.Transformer(cfg), _provider(cfg, quantized=False))
  fresh = nn.meta.unbox(fp_model.init(rng, *_tokens())['params'])
  adapters, _ = split(fresh)
  params = merge(adapters, base_params)
  if cfg.lora_base_dtype is None:
    return params
  for path, how in _quantize_recipes(cfg).items():
    node = params
    for key in path[:-1]:
      node = node[key]
    node[path[-1]] = quantize_kernel(node[path[-1]], how)
  return params


def _copy_tree(tree):
  return {k: _copy_tree(v) for k, v in tree.items()} if isinstance(tree, dict) else tree


def shardings(cfg: model_lib.ModelConfig, mesh, rules=None):
  """Shardings of `attach`'s output: each leaf from its logical names (a quantized kernel's
  values and scales take the kernel's names, with dimensions that do not divide replicated)."""
  rules = rules or sharding_lib.DEFAULT_RULES
  boxed = abstract_params(cfg)
  specs = nn.get_partition_spec(boxed)
  shapes = nn.meta.unbox(boxed)
  out = jax.tree.map(lambda spec, leaf: sharding_lib.logical_to_sharding(spec, leaf.shape, mesh, rules),
                     specs, shapes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  if cfg.lora_base_dtype is None:
    return out
  abstract = jax.eval_shape(lambda: attach(cfg, model_lib.init_params(cfg, jax.random.key(0)),
                                           jax.random.key(0)))
  out = _copy_tree(out)
  for path, leaf in jax.tree_util.tree_flatten_with_path(abstract, is_leaf=_is_quantized)[0]:
    if not _is_quantized(leaf):
      continue
    keys = tuple(p.key for p in path)
    spec = specs
    node = out
    for key in keys:
      spec = spec[key]
    for key in keys[:-1]:
      node = node[key]
    node[keys[-1]] = jax.tree.map(
        lambda x, spec=spec: sharding_lib.logical_to_sharding(spec, x.shape, mesh, rules), leaf)
  return out


def restore_structure(cfg: model_lib.ModelConfig, raw):
  """A checkpoint's params restored without a target (nested dicts) -> the LoRA tree:
  quantized kernels (dicts of qvalue/scale) become WithAux(QArray) again."""
  if not enabled(cfg) or cfg.lora_base_dtype is None:
    return raw
  # deferred: qwix is slow to import; LoRA models only
  from qwix._src.core import qarray
  from qwix._src.providers import ptq
  out = _copy_tree(raw)
  for path, how in _quantize_recipes(cfg).items():
    node = out
    for key in path[:-1]:
      node = node[key]
    leaf = node[path[-1]]
    if isinstance(leaf, dict):
      arr = leaf['array']
      node[path[-1]] = ptq.WithAux(qarray.QArray(
          qvalue=jnp.asarray(arr['qvalue']), scale=jnp.asarray(arr['scale']),
          zero_point=None, qtype=how.qtype), how)
  return out


def attach_sharded(cfg: model_lib.ModelConfig, base_params, mesh, rng):
  """`attach` on the mesh: (LoRA params, their shardings)."""
  out_shardings = shardings(cfg, mesh)
  params = jax.jit(lambda p, key: attach(cfg, _copy_tree(p), key),
                   out_shardings=out_shardings)(base_params, rng)
  return params, out_shardings


# ------------------------------------------------------------------------------------------
# Merged weights and PEFT adapters


def _target_nodes(cfg: model_lib.ModelConfig, params):
  layers = params[model_lib.LAYERS]
  for t in cfg.lora_targets:
    group, name = TARGETS[t].split('/')
    yield t, layers[group][name]


def merged_params(cfg: model_lib.ModelConfig, params):
  """Plain Transformer params (float32 target kernels): W (dequantized) + alpha/r A B."""
  if not enabled(cfg):
    return params
  _, base = split(params)
  out = jax.tree.map(lambda x: x, base, is_leaf=_is_quantized)
  out = _copy_tree(out)
  scale = float(cfg.lora_alpha) / int(cfg.lora_rank)
  for t in cfg.lora_targets:
    group, name = TARGETS[t].split('/')
    node = params[model_lib.LAYERS][group][name]
    kernel = node['kernel']
    w = dequantize_kernel(kernel) if _is_quantized(kernel) else jnp.asarray(kernel, jnp.float32)
    a, b = jnp.asarray(node['kernel_lora_a'], jnp.float32), jnp.asarray(node['kernel_lora_b'],
                                                                         jnp.float32)
    delta = jnp.einsum('lir,lro->lio', a, b) * scale
    dtype = jnp.float32 if _is_quantized(kernel) else kernel.dtype
    out[model_lib.LAYERS][group][name]['kernel'] = (w + delta.reshape(w.shape)).astype(dtype)
  return out


HF_NAMES = {'q': 'self_attn.q_proj', 'k': 'self_attn.k_proj', 'v': 'self_attn.v_proj',
            'o': 'self_attn.o_proj', 'gate': 'mlp.gate_proj', 'up': 'mlp.up_proj',
            'down': 'mlp.down_proj'}


def peft_tensors(cfg: model_lib.ModelConfig, params) -> dict[str, np.ndarray]:
  """The adapters in PEFT's layout: lora_A.weight [r, in], lora_B.weight [out, r] per layer
  and target (HF flattens heads x head_dim in the same order as our kernels)."""
  out = {}
  for t in cfg.lora_targets:
    group, name = TARGETS[t].split('/')
    node = params[model_lib.LAYERS][group][name]
    a = np.asarray(jax.device_get(node['kernel_lora_a']), np.float32)
    b = np.asarray(jax.device_get(node['kernel_lora_b']), np.float32)
    for i in range(a.shape[0]):
      prefix = f'base_model.model.model.layers.{i}.{HF_NAMES[t]}'
      out[f'{prefix}.lora_A.weight'] = np.ascontiguousarray(a[i].T)
      out[f'{prefix}.lora_B.weight'] = np.ascontiguousarray(b[i].T)
  return out


def peft_config(cfg: model_lib.ModelConfig, base_model: str) -> dict:
  return {'peft_type': 'LORA', 'task_type': 'CAUSAL_LM', 'r': int(cfg.lora_rank),
          'lora_alpha': float(cfg.lora_alpha), 'lora_dropout': 0.0, 'bias': 'none',
          'fan_in_fan_out': False, 'base_model_name_or_path': base_model,
          'target_modules': sorted(HF_NAMES[t].split('.')[1] for t in cfg.lora_targets)}


def save_peft(cfg: model_lib.ModelConfig, params, out_dir: str, base_model: str = '') -> None:
  """adapter_model.safetensors + adapter_config.json in `out_dir`."""
  os.makedirs(out_dir, exist_ok=True)
  save_file(peft_tensors(cfg, params), os.path.join(out_dir, 'adapter_model.safetensors'))
  with open(os.path.join(out_dir, 'adapter_config.json'), 'w') as f:
    json.dump(peft_config(cfg, base_model), f, indent=2)
