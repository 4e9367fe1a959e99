"""Dry run: what a config will cost before any weights exist (`config.dry_run=True`).

The verdict is compiled, not estimated: `compiled_memory` lowers and compiles the run's
own jitted programs (sampler, train step, log-prob pass) at the config's shapes on the
present backend and reads XLA's memory analysis; each program's peak bytes per device is
compared with the device's usable memory (the present device's allocator limit, or the
`config.dry_run_device` table entry in `devices.py`), and `DoesNotFit` is raised with the
settings to change (decode slots, rows per batch, micro-batches, remat, log-prob chunk)
when one will not fit. Input paths (model.hf_path, tokenizer.path, data) are checked and
listed (`data/inputs.py`), without stopping the dry run. The analytic table below stays as
the breakdown (what is params, optimizer, KV cache, activations), not the verdict.

Two views, labelled as such wherever they are shown: the printed table heads the formulas'
block "analytic bytes per device" and the compiler's "compiled peak per device, the verdict";
they differ by design (the analytic activations are an order-of-magnitude estimate, the
compiled temp buffers are XLA's, of the present backend's compiler). A figure quoted
elsewhere names its view (`benchmarks/dry_run_record.py` keeps both in one results file).

Owns `dry_run(config) -> dict` (and its printed table): parameter counts, bytes per device
for parameters, gradients, AdamW state, the sampler's KV cache and train-step activations,
and the FLOPs of one RL step. Nothing is allocated: the model is built with
`model.abstract_params` (eval_shape) and each parameter's per-device shard shape comes from
`sharding.param_shardings` on the configured mesh.

Mesh. When `config.mesh.shape` fits the local devices the real mesh is built
(`sharding.make_mesh`). Otherwise (e.g. fsdp=8 checked on a 1-device laptop) the numbers
are computed analytically on a `jax.sharding.AbstractMesh` of the configured shape, with
each -1 axis taken as `num_devices // (product of the fixed axes)` when `num_devices` is
given, else as 1. The shard shapes are the same ones the real mesh would give, since the
sharding rules only look at axis sizes.

Estimates (per device; B = batch shards = data * fsdp, T = max_prompt_len + max_new_tokens):
- params: the parameter shards in `model.param_dtype`; gradients the same again.
- optimizer: AdamW mu and nu in float32, sharded like the parameters (2 x 4 bytes/param).
- KV cache: R x T x L x 2 x K x hd x compute-dtype bytes / B, for the sampler's R =
  `train.rows_per_batch` rows (tp may shard KV heads further; not counted).
- activations: b = rows_per_batch / micro_batches / B rows. Without remat each layer keeps
  about (4D + 2*H*hd + 2*K*hd + 3F) compute-dtype values per token plus the attention scores
  (f32) and probabilities (compute dtype), H*T per token; with `model.remat` each layer keeps
  only its D-wide input and one layer is live at a time during the backward pass. Plus the
  f32 logits and their gradient over a `train.logprob_chunk`-token chunk (0 = all T).
  An order-of-magnitude estimate for choosing micro_batches / remat, not a measurement.
- FLOPs per RL step (sgpo_jax/model/flops.py): sampling = R x (prefill of max_prompt_len +
  max_new_tokens decode steps over the T-slot cache); reference forward R x T tokens when
  `train.kl_coef > 0`; training = mu x R x T tokens x 3 x forward. Profiling is per query:
  `profile.num_samples` generations.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import jax
import ml_collections
from jax.sharding import AbstractMesh

from sgpo_jax.data import inputs as inputs_lib
from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import hf as hf_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import devices as devices_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.planning import compiled_memory

_BYTES = {'float32': 4, 'bfloat16': 2, 'float16': 2}


def _mesh_for(mesh_config: Any, num_devices: int | None) -> tuple[Any, str]:
  """The real mesh when the configured shape fits the local devices, else an abstract one."""
  axes = tuple(mesh_config.axes)
  shape = sharding_lib.mesh_shape_spec(mesh_config.shape, axes)
  if num_devices is None:
    try:
      return sharding_lib.make_mesh(mesh_config), 'placed'
    except ValueError:
      pass
  if num_devices is None:
    num_devices = math.prod(s for s in shape if s != -1)  # a -1 axis counts as 1
  resolved = sharding_lib.resolve_mesh_shape(shape, axes, num_devices)
  return AbstractMesh(resolved, axes), 'analytic'


def _per_device_elements(abstract_params: Any, mesh: Any, rules: Any) -> tuple[int, int]:
  """(elements per device, total elements) over all parameters."""
  shardings = sharding_lib.param_shardings(abstract_params, mesh, rules)
  shapes = jax.tree.leaves(model_lib.nn.meta.unbox(abstract_params))
  per_device = sum(math.prod(s.shard_shape(x.shape)) for s, x in
                   zip(jax.tree.leaves(shardings), shapes))
  return per_device, sum(math.prod(x.shape) for x in shapes)


def activation_bytes(cfg: model_lib.ModelConfig, rows: int, seq_len: int,
                     logprob_chunk: int) -> int:
  """Documented estimate of one train micro-batch's saved activations (module docstring)."""
  act = _BYTES[cfg.dtype]
  d, f, h, k, e = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  per_token_layer = (4 * d + 2 * h * e + 2 * k * e + 3 * f) * act + h * seq_len * (4 + act)
  full_layer = rows * seq_len * per_token_layer
  if cfg.remat:
    layers = cfg.n_layers * rows * seq_len * d * act + full_layer
  else:
    layers = cfg.n_layers * full_layer
  chunk = seq_len if logprob_chunk <= 0 else min(logprob_chunk, seq_len)
  logits = 2 * rows * chunk * cfg.vocab_size * 4
  return layers + logits


QUANT_BYTES = {'int8': 1, 'nf4': 1}  # nf4 codes are stored one per byte (model/lora.py)


def memory_breakdown(cfg: model_lib.ModelConfig, rows: int, seq_len: int,
                     kv_dtype: str = 'bfloat16') -> dict[str, int]:
  """Analytic bytes of parameters, gradients, AdamW state and the sampler's KV cache for
  `rows` x `seq_len` tokens on one device, under `cfg`'s mode: full fine-tuning
  (lora_rank 0), LoRA (adapters train, base frozen in param_dtype) or QLoRA (target
  kernels of the base in int8 / nf4 plus a float32 scale per output channel)."""
  pbytes = _BYTES[cfg.param_dtype]
  total = flops_lib.param_counts(dataclasses.replace(cfg, lora_rank=0))['total']
  kv = rows * seq_len * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * _BYTES[kv_dtype]
  if not lora_lib.enabled(cfg):
    return {'params': total * pbytes, 'grads': total * pbytes, 'optimizer': total * 8,
            'kv_cache': kv, 'trainable': total}
  d, f, h, k, e, n = (cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                      cfg.n_layers)
  shapes = {'q': (d, h * e), 'k': (d, k * e), 'v': (d, k * e), 'o': (h * e, d),
            'gate': (d, f), 'up': (d, f), 'down': (f, d)}
  target = n * sum(a * b for a, b in (shapes[t] for t in cfg.lora_targets))
  scales = n * sum(shapes[t][1] for t in cfg.lora_targets)
  adapters = lora_lib.expected_adapter_count(cfg)
  if cfg.lora_base_dtype is None:
    base = total * pbytes
  else:
    base = (total - target) * pbytes + target * QUANT_BYTES[cfg.lora_base_dtype] + scales * 4
  return {'params': base + adapters * pbytes, 'grads': adapters * pbytes,
          'optimizer': adapters * 8, 'kv_cache': kv, 'trainable': adapters}


def dry_run(config: ml_collections.ConfigDict, num_devices: int | None = None,
            print_table: bool = True, compile: bool = True) -> dict[str, Any]:
  """Memory and FLOPs of `config` without weights; see the module docstring.

  compile: also lower and compile the run's programs (`compiled_memory`) and raise
  `DoesNotFit` (after printing) when one exceeds the device's memory.

  num_devices: resolve a -1 mesh axis for this many devices (analytic mode); default: the
  local devices when the configured mesh fits them.
  """
  cfg = model_lib.ModelConfig.from_config(config.model)
  cfg.validate()
  hf_checked = False
  hf_path = config.model.get('hf_path', '')
  if hf_path and os.path.isfile(os.path.join(hf_path, 'config.json')):
    hf_lib.check_matches_checkpoint(cfg, hf_path)
    hf_checked = True

  mesh, mode = _mesh_for(config.mesh, num_devices)
  abstract = model_lib.abstract_params(cfg)
  param_elems_dev, param_elems = _per_device_elements(abstract, mesh,
                                                      sharding_lib.DEFAULT_RULES)
  counts = flops_lib.param_counts(cfg)
  if counts['total'] != param_elems:
    raise AssertionError(f'flops.param_counts total {counts["total"]} != model parameters '
                         f'{param_elems}; flops.py and transformer.py disagree.')

  mesh_shape = dict(mesh.shape)
  batch_shards = math.prod(mesh_shape.get(a, 1) for a in sharding_lib.BATCH_AXES)
  s, t = config.sampling, config.train
  rows = int(t.rows_per_batch)
  seq_len = int(s.max_prompt_len) + int(s.max_new_tokens)
  micro_rows = math.ceil(rows / max(1, int(t.micro_batches)) / batch_shards)
  pbytes = _BYTES[cfg.param_dtype]
  # With LoRA only the adapters have gradients and AdamW moments (spread like the weights).
  trainable = lora_lib.expected_adapter_count(cfg) if lora_lib.enabled(cfg) else param_elems
  trainable_dev = math.ceil(trainable * param_elems_dev / param_elems)
  kv = (rows * seq_len * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * _BYTES[cfg.dtype]
        / batch_shards)
  memory = {
      'params': (param_elems_dev + (trainable_dev if trainable != param_elems else 0)) * pbytes,
      'grads': trainable_dev * pbytes,
      'optimizer': trainable_dev * 2 * 4,
      'kv_cache': math.ceil(kv),
      'activations': activation_bytes(cfg, micro_rows, seq_len, int(t.logprob_chunk)),
  }
  # Sampling and training do not overlap: peak is the larger of the two phases.
  memory['peak_train'] = (memory['params'] + memory['grads'] + memory['optimizer']
                          + memory['activations'])
  memory['peak_sample'] = memory['params'] + memory['optimizer'] + memory['kv_cache']
  memory['peak'] = max(memory['peak_train'], memory['peak_sample'])

  prompt, new = int(s.max_prompt_len), int(s.max_new_tokens)
  gen_per_row = (flops_lib.prefill_flops(cfg, prompt, seq_len)  # the static sampler's
                 + new * flops_lib.forward_flops_per_token(cfg, seq_len))
  step_flops = {
      'sampling': float(rows * gen_per_row),
      'reference': float(rows * seq_len * flops_lib.forward_flops_per_token(cfg, seq_len)
                         if t.kl_coef > 0 else 0.0),
      'train': float(int(t.mu) * rows * seq_len * flops_lib.train_flops_per_token(cfg, seq_len)),
  }
  step_flops['total'] = sum(step_flops.values())
  result = {
      'model': {'params_total': counts['total'], 'params_nonembed': counts['nonembed'],
                'embedding': counts['embedding'], 'lm_head': counts['lm_head'],
                'trainable': trainable,
                'param_dtype': cfg.param_dtype, 'dtype': cfg.dtype, 'remat': cfg.remat},
      'mesh': {'shape': mesh_shape, 'mode': mode, 'devices': math.prod(mesh_shape.values()),
               'batch_shards': batch_shards},
      'shapes': {'rows_per_batch': rows, 'seq_len': seq_len, 'micro_batch_rows_per_device':
                 micro_rows},
      'bytes_per_device': memory,
      'flops_per_step': step_flops,
      'flops_run': {'rl_steps': float(step_flops['total'] * int(t.num_steps)),
                    'profile_per_query': float(int(config.profile.num_samples) * gen_per_row)},
      'hf_config_checked': hf_checked,
  }
  result['inputs'] = inputs_lib.path_problems(config)
  if compile:
    _compile_and_judge(config, cfg, mesh, mode, batch_shards, result)
  if print_table:
    print(format_table(result))
  failing = [n for n, m in (result.get('compiled') or {}).items() if not m['fits']]
  if failing:
    budget = result['device']['usable_bytes']
    raise DoesNotFit('\n'.join(
        [f"dry run: {', '.join(failing)} will not fit on {result['device']['name']}:"]
        + [compiled_memory.advice(n, result['compiled'][n], budget, config, batch_shards)
           for n in failing]))
  return result


class DoesNotFit(RuntimeError):
  """A program's compiled peak exceeds the device's memory; the message says what to set."""


def device_budget(device_name: str) -> dict[str, Any]:
  """The memory the dry run judges against: `config.dry_run_device`'s, or the present one's."""
  backend = jax.default_backend()
  if device_name:
    spec = devices_lib.spec(device_name)
    usable = devices_lib.usable_bytes(spec)
    note = ''
    if spec.platform == 'gpu':
      note = (f'{device_name}: {spec.hbm_bytes / 1024**3:.1f} GiB HBM x jax\'s GPU memory '
              f'fraction {devices_lib.gpu_memory_fraction()} (XLA_PYTHON_CLIENT_MEM_FRACTION).')
    if spec.platform != backend:
      note += (f' Compiled by XLA:{backend.upper()}, not the {spec.platform.upper()} compiler: '
               'fusion and temp buffers differ, so run the dry run on the device for the '
               'final word.')
    return {'name': device_name, 'usable_bytes': usable, 'backend': backend,
            'note': note.strip()}
  label, usable = devices_lib.present_memory(jax.devices()[0])
  return {'name': label, 'usable_bytes': usable, 'backend': backend, 'note': ''}


def _compile_and_judge(config, cfg, mesh, mode: str, batch_shards: int,
                       result: dict[str, Any]) -> None:
  if mode != 'placed':
    result['compile_skipped'] = (
        f'the mesh {dict(mesh.shape)} needs more than the {jax.device_count()} local devices; '
        'run on the target machine, or on CPU with XLA_FLAGS=--xla_force_host_platform_'
        f'device_count={math.prod(dict(mesh.shape).values())} set before python starts.')
    return
  result['device'] = device_budget(config.get('dry_run_device', ''))
  compiled = compiled_memory.compile_programs(config, cfg, mesh)
  for m in compiled.values():
    m['fits'] = m['peak'] <= result['device']['usable_bytes']
  result['compiled'] = compiled


def _gib(n: float) -> str:
  return f'{n / 1024**3:10.2f} GiB'


def format_table(result: dict[str, Any]) -> str:
  m, mesh, mem = result['model'], result['mesh'], result['bytes_per_device']
  f, shapes = result['flops_per_step'], result['shapes']
  lines = [
      (f"dry run  mesh {mesh['shape']} ({mesh['mode']}, {mesh['devices']} devices, "
       f"batch shards {mesh['batch_shards']})"),
      (f"  params       {m['params_total'] / 1e6:10.1f} M total, "
       f"{m['params_nonembed'] / 1e6:.1f} M non-embedding "
       f"(param {m['param_dtype']}, compute {m['dtype']}, remat {m['remat']})"),
      f"  trainable    {m['trainable'] / 1e6:10.2f} M" + (
          ' (LoRA adapters)' if m['trainable'] != m['params_total'] else ''),
      (f"  batch        {shapes['rows_per_batch']} rows x {shapes['seq_len']} tokens, "
       f"{shapes['micro_batch_rows_per_device']} rows per device per micro-batch"),
      ('  analytic bytes per device (formulas, no compiler: the breakdown'
       + ('; the verdict is the compiled peak below)' if result.get('compiled') else ')')),
  ]
  for key in ('params', 'grads', 'optimizer', 'kv_cache', 'activations', 'peak_train',
              'peak_sample', 'peak'):
    lines.append(f'    {key:12s} {_gib(mem[key])}')
  lines.append('  FLOPs per RL step')
  for key in ('sampling', 'reference', 'train', 'total'):
    lines.append(f'    {key:12s} {f[key]:14.3e}')
  lines.append(f"  FLOPs run    {result['flops_run']['rl_steps']:14.3e} (RL steps), "
               f"{result['flops_run']['profile_per_query']:.3e} per profiled query")
  lines += format_inputs(result.get('inputs'))
  if result.get('compiled') is not None or result.get('compile_skipped'):
    lines += format_compiled(result)
  return '\n'.join(lines)


def format_inputs(problems: list[str] | None) -> list[str]:
  if problems is None:
    return []
  if not problems:
    return ['  inputs       model.hf_path, tokenizer.path and data paths exist']
  return ['  inputs (a real run stops on these; the dry run goes on)'] + [
      f'    {p}' for p in problems]


def format_compiled(result: dict[str, Any]) -> list[str]:
  if result.get('compile_skipped'):
    return [f"  compiled     skipped: {result['compile_skipped']}"]
  dev = result['device']
  lines = [f"  compiled peak per device, the verdict (XLA:{dev['backend'].upper()}, the run's "
           f"jitted programs, abstract inputs) vs {_gib(dev['usable_bytes']).strip()} usable on "
           f"{dev['name']}",
           f"    {'program':11s} {'args':>10s} {'outputs':>10s} {'temp':>10s} {'aliased':>10s} "
           f"{'resident':>10s} {'peak':>10s}  fits"]
  for name, m in result['compiled'].items():
    cells = ' '.join(f'{m[k] / 1024**3:10.2f}' for k in ('argument', 'output', 'temp', 'alias',
                                                          'resident', 'peak'))
    lines.append(f"    {name:11s} {cells}  {'yes' if m['fits'] else 'NO'}   ({m['note']})")
  lines.append('    (GiB; peak = args + outputs + temp - aliased + resident; resident = AdamW '
               'moments / reference policy alive but not an argument)')
  if dev.get('note'):
    lines.append(f"    {dev['note']}")
  return lines
