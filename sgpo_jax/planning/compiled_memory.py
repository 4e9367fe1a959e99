"""Compiled memory of the run's own jitted programs at the config's real shapes, no weights.

The dry run's verdict. `compile_programs` builds the sampler and the learner exactly as
`train.setup` / `train.restore_or_init` do (`generate.engines.make_sampler`, `learner.Learner`), then
lowers and compiles their jitted functions on `jax.ShapeDtypeStruct` arguments with the
run's shardings and reads XLA's `memory_analysis()`. So the numbers follow the code (KV
cache layout, attention, remat, micro-batching, packing) as it changes, on the present
backend; nothing is allocated but the compiler's own memory.

Per program and device:  peak = arguments + outputs + temp - aliased (donated) bytes,
plus what stays resident in device memory while it runs without being an argument: the
AdamW moments during sampling and log-prob passes, and the reference policy when
`train.kl_coef > 0`. Programs:
- sampler: one rollout call (`train.rows_per_batch` rows; static engine at the largest
  prompt bucket, continuous engine with its `sampling.decode_slots`). Profiling and eval
  call this same executable (evaluate.py uses the run's sampler), so it is their peak too.
- train_step: one optimizer update on the [R, T] batch (or the packed buffers).
- logprobs: the reference / old-policy log-prob pass (only when kl_coef > 0 or mu > 1).
"""

from __future__ import annotations

import dataclasses
import math
import time
import types
from typing import Any

import jax
import jax.numpy as jnp
import optax

from sgpo_jax.generate import engines
from sgpo_jax.generate import sampling_dtype as sampling_dtype_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import devices
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.rl import learner as learner_lib

# Shapes never depend on token ids, so the sampler is built with a stand-in tokenizer.
_SHAPE_TOKENIZER = types.SimpleNamespace(stop_token_ids=[0], pad_id=0, bos_id=0)


@dataclasses.dataclass
class Program:
  name: str
  jitted: Any  # a jax.jit-wrapped function
  args: tuple  # ShapeDtypeStructs (with shardings)
  resident_bytes: int  # per device, alive during the call but not an argument
  fixed_bytes: int  # per device, the part that no batch setting shrinks (weights, state)
  note: str = ''


def tree_bytes_per_device(tree: Any) -> int:
  """Bytes of one device's shards of a tree of ShapeDtypeStructs / arrays with shardings."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    shape = leaf.shape if leaf.sharding is None else leaf.sharding.shard_shape(leaf.shape)
    total += math.prod(shape) * leaf.dtype.itemsize
  return total


def _jitted(owner: Any, name: str) -> Any:
  """`owner.<name>`, the jax.jit object the trainer calls; a clear error if it was renamed."""
  fn = getattr(owner, name, None)
  if fn is None or not hasattr(fn, 'lower'):
    raise AttributeError(f'compiled_memory compiles {type(owner).__name__}.{name}, which is '
                         'gone or not a jax.jit function; point sgpo_jax/planning/compiled_memory.py '
                         'at the jitted function that class calls now.')
  return fn


def _sds(shape, dtype, sharding=None) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=sharding)


def abstract_params(cfg: model_lib.ModelConfig, mesh) -> tuple[Any, Any]:
  """(params as sharded ShapeDtypeStructs, their shardings), as `sharding.init_sharded_params`
  (with LoRA: as `lora.attach_sharded`, adapters beside the possibly quantized base)."""
  if lora_lib.enabled(cfg):
    key = jax.random.key(0)
    shapes = jax.eval_shape(lambda: lora_lib.attach(cfg, model_lib.init_params(cfg, key), key))
    shardings = lora_lib.shardings(cfg, mesh)
    return jax.tree.map(lambda x, s: _sds(x.shape, x.dtype, s), shapes, shardings), shardings
  boxed = model_lib.abstract_params(cfg)
  shardings = sharding_lib.param_shardings(boxed, mesh)
  params = jax.tree.map(lambda x, s: _sds(x.shape, x.dtype, s), model_lib.nn.meta.unbox(boxed),
                        shardings)
  return params, shardings


def abstract_opt_state(optimizer, params, mesh) -> Any:
  """`optimizer.init(params)` abstractly, sharded as `sharding.init_optimizer_state` does."""
  shapes = jax.eval_shape(optimizer.init, params)
  shardings = optax.tree_map_params(
      optimizer, lambda _, s: s, shapes, jax.tree.map(lambda x: x.sharding, params),
      transform_non_params=lambda _: sharding_lib.replicated(mesh))
  return jax.tree.map(lambda x, s: _sds(x.shape, x.dtype, s), shapes, shardings)


def _sampling_config(config):
  """`config` with sampling.param_dtype='auto' resolved for the target device
  (config.dry_run_device), not for the backend the dry run compiles on."""
  name = config.get('dry_run_device', '')
  if not name or config.sampling.get('param_dtype', 'auto') != 'auto':
    return config
  config = config.copy_and_resolve_references()
  config.sampling.param_dtype = sampling_dtype_lib.resolve(
      'auto', backend=devices.spec(name).platform)
  return config


def _sampler_program(config, cfg, mesh, params, shardings, resident: int) -> Program:
  sampler = engines.make_sampler(_sampling_config(config), cfg, mesh, shardings, _SHAPE_TOKENIZER)
  # The sampler reads a copy of the weights in its dtype (one per RL step, resident beside
  # the float32 masters while it runs) and a KV cache it is given and donates.
  sampling_params = jax.tree.map(
      lambda x: _sds(x.shape, jnp.dtype(sampler.cfg.dtype), x.sharding), params)
  if sampler.cfg.dtype != jax.tree.leaves(params)[0].dtype:
    resident += tree_bytes_per_device(params)
  rep = sharding_lib.replicated(mesh)
  key = jax.eval_shape(lambda: jax.random.key(0))
  key = _sds(key.shape, key.dtype, rep)
  scalars = (_sds((), jnp.float32, rep), _sds((), jnp.float32, rep), _sds((), jnp.int32, rep))
  rows = int(sampler.rows)
  if config.sampling.get('engine', 'static') == 'continuous':
    p = int(sampler.max_prompt_len)
    cache = jax.eval_shape(sampler.new_cache)
    by_row, shards = sampler.row_sharding, sampler.shards
    n_real = (_sds((shards,), jnp.int32, sampler.shard_sharding) if shards > 1
              else _sds((), jnp.int32, rep))
    args = (sampling_params, cache, _sds((rows, p), jnp.int32, by_row),
            _sds((rows,), jnp.int32, by_row), _sds((rows,), jnp.int32, by_row), n_real,
            key) + scalars
    note = f'continuous: {sampler.slots} decode slots, {rows} queued rows' + (
        f' (each of {shards} data shards: {sampler.slots} slots, {rows // shards} rows)'
        if shards > 1 else '')
  else:
    p = int(sampler.buckets[-1])
    b2, b1 = sharding_lib.batch_sharding(mesh, 2), sharding_lib.batch_sharding(mesh, 1)
    cache = jax.eval_shape(lambda: sampler.new_cache(p))
    args = (sampling_params, cache, _sds((rows, p), jnp.int32, b2),
            _sds((rows, p), jnp.int32, b2), _sds((rows,), jnp.int32, b1), key) + scalars
    note = f'static: {rows} rows x ({p} prompt + {sampler.max_new_tokens} new) tokens'
  return Program('sampler', _jitted(sampler, '_generate_jit'), args, resident,
                 tree_bytes_per_device(sampling_params) + resident, note)


def _batch_args(learner, config) -> tuple[Any, str]:
  """The train batch as sharded ShapeDtypeStructs, from the learner's one batch schema."""
  t = config.train
  rows, seq, micro = learner.rows, learner.seq_len, int(t.micro_batches)
  note = (f'packed buffers of {learner.pack_shape}' if learner.pack_shape is not None else
          f'{rows} rows x {seq} tokens, {micro} micro-batches of {rows // max(micro, 1)} rows')
  return learner.batch_schema(), note


def build_programs(config, cfg: model_lib.ModelConfig, mesh) -> list[Program]:
  """The run's jitted programs with abstract arguments; see the module docstring."""
  t, s = config.train, config.sampling
  params, shardings = abstract_params(cfg, mesh)
  learner = learner_lib.Learner(cfg, mesh, shardings, config, int(t.num_steps))
  # With LoRA the optimizer holds moments for the adapters only (Learner.init_state).
  opt_state = abstract_opt_state(learner.optimizer, learner.trainable(params)[0], mesh)
  state = {'params': params, 'opt_state': opt_state}
  learner.build(state)  # the same jit the trainer's init_state builds, on abstract state
  param_bytes, opt_bytes = tree_bytes_per_device(params), tree_bytes_per_device(opt_state)
  ref_bytes = param_bytes if t.kl_coef > 0 else 0
  programs = [_sampler_program(config, cfg, mesh, params, shardings, opt_bytes + ref_bytes)]
  batch, note = _batch_args(learner, config)
  programs.append(Program('train_step', _jitted(learner, 'step_jit'), (state, batch), ref_bytes,
                          param_bytes + opt_bytes + ref_bytes, note))
  if t.kl_coef > 0 or t.mu > 1:
    rows, seq = int(t.rows_per_batch), int(s.max_prompt_len) + int(s.max_new_tokens)
    b2 = sharding_lib.batch_sharding(mesh, 2)
    tok = _sds((rows, seq), jnp.int32, b2)
    programs.append(Program('logprobs', _jitted(learner, 'logprob_jit'), (params, tok, tok),
                            opt_bytes + ref_bytes, param_bytes + opt_bytes + ref_bytes,
                            f'{rows} rows x {seq} tokens (reference / old policy)'))
  return programs


def compile_program(program: Program) -> dict[str, Any]:
  """Lowers and compiles one program; its memory per device (module docstring)."""
  start = time.time()
  compiled = program.jitted.lower(*program.args).compile()
  stats = compiled.memory_analysis()
  seconds = time.time() - start
  if stats is None:
    raise RuntimeError(f'{program.name}: this backend ({jax.default_backend()}) returns no '
                       'memory_analysis(); the dry run cannot measure it here.')
  out = {'argument': int(stats.argument_size_in_bytes), 'output': int(stats.output_size_in_bytes),
         'temp': int(stats.temp_size_in_bytes), 'alias': int(stats.alias_size_in_bytes)}
  out['compiled_peak'] = out['argument'] + out['output'] + out['temp'] - out['alias']
  out['resident'] = program.resident_bytes
  out['peak'] = out['compiled_peak'] + program.resident_bytes
  out['fixed'] = program.fixed_bytes
  out['compile_seconds'] = seconds
  out['note'] = program.note
  return out


def compile_programs(config, cfg: model_lib.ModelConfig, mesh) -> dict[str, dict[str, Any]]:
  return {p.name: compile_program(p) for p in build_programs(config, cfg, mesh)}


def _divisor_at_least(n: int, low: float) -> int | None:
  for d in range(max(1, math.ceil(low)), n + 1):
    if n % d == 0:
      return d
  return None


def advice(name: str, memory: dict[str, Any], budget: int, config, batch_shards: int) -> str:
  """Concrete settings that bring `name`'s peak under `budget` bytes (per device).

  Assumes the variable part (peak - fixed) scales linearly with the rows a call holds.
  """
  t, s = config.train, config.sampling
  peak, fixed = memory['peak'], memory['fixed']
  variable = max(peak - fixed, 1)
  gib = lambda n: f'{n / 1024**3:.2f} GiB'  # noqa: E731
  if fixed >= budget:
    return (f'{name}: weights and optimizer state alone need {gib(fixed)} per device of '
            f'{gib(budget)}: shard them over more devices (mesh.shape with a larger fsdp axis) '
            'or use a smaller model.')
  scale = (budget - fixed) / variable  # < 1: the fraction of today's rows that fit
  lines = [f'{name}: peak {gib(peak)} > {gib(budget)} per device.']
  if name == 'sampler':
    if s.get('engine', 'static') == 'continuous':
      slots = max(1, int(int(s.decode_slots) * scale))
      lines.append(f'  set sampling.decode_slots <= {slots} (now {s.decode_slots}).')
    else:
      rows = int(int(t.rows_per_batch) * scale) // batch_shards * batch_shards
      lines.append(f"  set sampling.engine='continuous' with sampling.decode_slots <= "
                   f'{max(1, rows)} (decodes that many rows at a time from the same batch), or '
                   f'train.rows_per_batch <= {rows} (now {t.rows_per_batch}).')
  else:
    rows = int(t.rows_per_batch)
    micro = int(t.micro_batches)
    need = _divisor_at_least(rows // batch_shards if rows % batch_shards == 0 else rows,
                             micro / scale)
    if need is not None and need > micro:
      lines.append(f'  set train.micro_batches >= {need} (now {micro}; {rows // need} rows per '
                   'micro-batch).')
    if not config.model.remat:
      lines.append('  set model.remat=True (keeps one layer\'s activations for the backward).')
    if int(t.logprob_chunk) == 0:
      lines.append('  set train.logprob_chunk (e.g. 256): without it the f32 logits of every '
                   'token of a micro-batch are live at once.')
    if name == 'train_step' or len(lines) == 1:
      lines.append(f'  or lower train.rows_per_batch to <= '
                   f'{max(batch_shards, int(rows * scale) // batch_shards * batch_shards)}.')
  return '\n'.join(lines)
