"""Config validation: every mistake a config can hold fails here, before any compute.

The schema is the embedded default (`defaults.get_config()`): a field it does not have is
unknown (a typo), and a value whose type differs from the default's is wrong (ints are
accepted where floats are expected). Each allocator section is checked by its settings
class, through the allocator registry. Cross-field checks name the field and the fix.
"""

from __future__ import annotations

import math
from typing import Any

import ml_collections

from sgpo_jax import allocators, tasks
from sgpo_jax.config import defaults as default_lib
from sgpo_jax.data import loading as loading_lib
from sgpo_jax.parallel import devices, sharding
from sgpo_jax.rl import losses, sequence_packing
from sgpo_jax.scaling_law import early_stop


def default_config() -> ml_collections.ConfigDict:
  """The schema: the embedded default, `sgpo_jax/config/defaults.py`."""
  return default_lib.get_config()


def _require(ok: bool, message: str) -> None:
  if not ok:
    raise ValueError(message)


def check_allocator_sections(config: ml_collections.ConfigDict) -> None:
  """Every allocator's section through its settings' range checks (the registry's), so a
  bad value fails even in a section config.method does not use."""
  for name, settings in allocators.registered_settings():
    settings.from_config(config[name])


def _type_ok(value: Any, default: Any) -> bool:
  if default is None or value is None:
    return True
  if isinstance(default, bool):
    return isinstance(value, bool)
  if isinstance(default, float):
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if isinstance(default, int):
    return isinstance(value, int) and not isinstance(value, bool)
  if isinstance(default, (tuple, list)):
    return isinstance(value, (tuple, list))
  return isinstance(value, type(default))


# Tuple fields that may also be a string: mesh.shape='auto:fsdp=8' (sharding.mesh_shape_spec).
_TUPLE_OR_STRING = ('mesh.shape',)


def check_schema(config: ml_collections.ConfigDict, schema: ml_collections.ConfigDict,
                 prefix: str = '') -> None:
  for key, value in config.items():
    name = f'{prefix}{key}'
    if key not in schema:
      known = ', '.join(sorted(schema.keys()))
      raise ValueError(f'Unknown config field {name!r}. Known fields here: {known}. '
                       'Fix the spelling or remove it.')
    default = schema[key]
    if isinstance(default, ml_collections.ConfigDict):
      if not isinstance(value, ml_collections.ConfigDict):
        raise ValueError(f'config.{name} must be a section (ConfigDict), got {value!r}.')
      check_schema(value, default, name + '.')
    elif not (_type_ok(value, default)
              or (name in _TUPLE_OR_STRING and isinstance(value, str))):
      raise ValueError(f'config.{name}={value!r} has type {type(value).__name__}; expected '
                       f'{type(default).__name__} like the default {default!r}.')


def _check_eval_fractions(fractions: tuple, budget: float) -> None:
  """eval.at_budget_fractions: increasing fractions in (0, 1] of a positive FLOPs budget."""
  if not fractions:
    return
  _require(budget > 0,
           f'eval.at_budget_fractions={fractions} needs train.flops_budget > 0 (got {budget}): '
           'the fractions are of the budget. Set a budget or use eval.every_steps alone.')
  _require(all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1
               for f in fractions),
           f'eval.at_budget_fractions={fractions} must be numbers in (0, 1] (fractions of '
           'train.flops_budget).')
  _require(all(a < b for a, b in zip(fractions, fractions[1:])),
           f'eval.at_budget_fractions={fractions} must be strictly increasing.')


def _choice(name: str, value: Any, choices: Any) -> None:
  _require(value in choices, f'{name}={value!r} is not one of {tuple(choices)}.')


# Float fields where inf is a setting (documented in defaults.py), not a mistake.
INF_ALLOWED = ('train.early_stop.peak_tolerance',)


def check_finite(config: ml_collections.ConfigDict, prefix: str = '') -> None:
  """Every float field (and float in a tuple) is finite, but inf where INF_ALLOWED: a
  non-finite rate or coefficient passes `> 0` checks and only fails steps later as NaN."""
  for key, value in config.items():
    name = f'{prefix}{key}'
    if isinstance(value, ml_collections.ConfigDict):
      check_finite(value, name + '.')
      continue
    values = value if isinstance(value, (tuple, list)) else (value,)
    for v in values:
      if isinstance(v, float) and not math.isfinite(v) and not (
          name in INF_ALLOWED and math.isinf(v)):
        raise ValueError(f'config.{name}={value!r} is not finite; give a finite number.')


def _check_wandb(project: str) -> None:
  if project:
    try:
      # deferred: optional dependency (pip install sgpo_jax[wandb]); only W&B runs need it
      import wandb  # noqa: F401
    except ImportError:
      raise ValueError(f'logging.wandb_project={project!r} needs wandb: pip install wandb') \
          from None


def check_ranges(config: ml_collections.ConfigDict) -> None:
  """Value ranges and choices of the non-allocator sections."""
  d, s, t, es = config.data, config.sampling, config.train, config.train.early_stop
  _choice('data.source', d.source, loading_lib.SOURCES)
  tasks.check_reward_spec(d.reward)  # built-in name or module.path:function, importable
  _require(config.warm_start.steps <= 0 or bool(config.model.hf_path)
           or tasks.has_target_text(d),
           f'warm_start.steps={config.warm_start.steps} trains on the arithmetic task\'s '
           f'answers, but data.source={d.source!r} with data.reward={d.reward!r} has none; set '
           'model.hf_path to start from a checkpoint, or warm_start.steps=0.')
  _choice('data.bad_rows', d.bad_rows, ('error', 'skip'))
  # A wrong answer's bonus must stay below a right answer's 1: eval counts reward >= 1 solved.
  _require(0.0 <= d.format_reward < 1.0,
           f'data.format_reward={d.format_reward} must be in [0, 1): a well-formed wrong answer '
           'would score as solved.')
  _check_wandb(config.logging.wandb_project)
  _choice('tokenizer.kind', config.tokenizer.kind, ('char', 'hf'))
  _choice('dry_run_device', config.dry_run_device, ('',) + tuple(sorted(devices.DEVICES)))
  _choice('train.schedule', t.schedule, ('constant', 'cosine'))
  _choice('train.advantage', t.advantage, sorted(losses.ADVANTAGE_ESTIMATORS))
  _choice('train.loss_agg', t.loss_agg, sorted(losses.LOSS_AGGREGATIONS))
  _choice('train.kl_form', t.kl_form, sorted(losses.KL_FORMS))
  _choice('train.policy_loss', t.policy_loss, sorted(losses.POLICY_LOSSES))
  _choice('train.importance_level', t.importance_level, sorted(losses.IMPORTANCE_RATIOS))
  for name, value, low in (
      ('sampling.max_prompt_len', s.max_prompt_len, 1),
      ('sampling.max_new_tokens', s.max_new_tokens, 1),
      ('sampling.top_k', s.top_k, 0),
      ('train.num_steps', t.num_steps, 1), ('train.rows_per_batch', t.rows_per_batch, 1),
      ('train.mu', t.mu, 1), ('train.warmup_steps', t.warmup_steps, 0),
      ('train.logprob_chunk', t.logprob_chunk, 0),
      ('profile.num_samples', config.profile.num_samples, 1),
      ('eval.every_steps', config.eval.every_steps, 1), ('eval.pass_k', config.eval.pass_k, 0),
      ('checkpoint.every_steps', config.checkpoint.every_steps, 1),
      ('checkpoint.keep', config.checkpoint.keep, 1),
      ('data.math_workers', d.math_workers, 0), ('data.rl_pool_size', d.rl_pool_size, 0),
      ('train.flops_budget', t.flops_budget, 0), ('train.kl_coef', t.kl_coef, 0),
      ('train.grad_clip', t.grad_clip, 0), ('train.weight_decay', t.weight_decay, 0),
      ('train.std_eps', t.std_eps, 0)):
    _require(value >= low, f'{name}={value} must be >= {low}.')
  _require(t.learning_rate > 0, f'train.learning_rate={t.learning_rate} must be > 0.')
  # Unset bounds (None) take the chosen loss's defaults; the resolved values are checked.
  clip_eps_low, clip_eps_high = losses.resolve_clip_bounds(
      t.policy_loss, t.importance_level, t.clip_eps_low, t.clip_eps_high)
  _require(clip_eps_high >= 0, f'train.clip_eps_high={clip_eps_high} must be >= 0.')
  _require(0 <= clip_eps_low <= 1,
           f'train.clip_eps_low={clip_eps_low} must be in [0, 1] (1.0 = no lower ratio '
           'bound, as CISPO in MiniMax-M1).')
  # A length-normalised sequence ratio moves ~1e-3 per update; token-sized bounds (0.2 /
  # 0.28) would never clip it, silently turning GSPO into unclipped policy gradient.
  _require(t.importance_level != 'sequence' or clip_eps_high <= 0.05,
           f'train.importance_level=sequence with train.clip_eps_high={clip_eps_high}: the '
           'sequence ratio s_i = exp(mean log ratio) moves ~1e-3 per update, so token-sized '
           'bounds never clip. Use GSPO-sized bounds (leave clip_eps_low/high unset for the '
           "paper's 3e-4 / 4e-4), or importance_level=token.")
  _require(0 <= t.overlong_penalty_len <= s.max_new_tokens,
           f'train.overlong_penalty_len={t.overlong_penalty_len} must be in [0, '
           f'sampling.max_new_tokens={s.max_new_tokens}] (0 = no soft overlong penalty; DAPO '
           'uses 4096 of 20480).')
  _check_eval_fractions(tuple(config.eval.at_budget_fractions), t.flops_budget)
  _require(0 < s.top_p <= 1, f'sampling.top_p={s.top_p} must be in (0, 1].')
  _require(s.temperature >= 0, f'sampling.temperature={s.temperature} must be >= 0 (0 = greedy).')
  _require(es.epsilon > 0, f'train.early_stop.epsilon={es.epsilon} must be > 0.')
  _require(0 <= es.min_fraction <= 1,
           f'train.early_stop.min_fraction={es.min_fraction} must be in [0, 1].')
  _require(0 < es.confidence < 1,
           f'train.early_stop.confidence={es.confidence} must be in (0, 1).')
  _choice('train.early_stop.rule', es.rule, ('bound', 'forecast', 'trend'))
  if es.enabled and es.rule == 'bound':
    early_stop.check_bound_options(tuple(es.bound_fractions), es.bound_confidence,
                                   es.bound_delta)
    early_stop.stop_calibration_path(es.calibration)  # a missing file fails before compute
  _require(0 < es.window_fraction <= 1,
           f'train.early_stop.window_fraction={es.window_fraction} must be in (0, 1].')
  _require(es.confirm_evals >= 1,
           f'train.early_stop.confirm_evals={es.confirm_evals} must be >= 1 (1 = stop at the '
           'first flat eval).')
  _require(es.peak_tolerance >= 0,
           f'train.early_stop.peak_tolerance={es.peak_tolerance} must be >= 0 (inf = off).')
  fractions = tuple(config.warm_start.level_fractions)
  levels = d.max_digits - d.min_digits + 1
  _require(not fractions or d.source == 'arithmetic',
           f'warm_start.level_fractions={fractions} needs data.source=arithmetic (only its '
           f'queries carry a difficulty level), not {d.source!r}; set it to ().')
  _require(not fractions or (len(fractions) == levels and all(0 <= f <= 1 for f in fractions)
                             and any(f > 0 for f in fractions)),
           f'warm_start.level_fractions={fractions} must be {levels} fractions in [0, 1] (one '
           f'per level {d.min_digits}..{d.max_digits} digits), not all 0, or () for the whole '
           'pool.')


def check_data_shards(config: ml_collections.ConfigDict, shape: tuple[int, ...],
                      num_processes: int = 1) -> None:
  """Every data-parallel shard (the mesh's batch axes) needs its own rows of each batch, and
  the packed step packs each shard's rows into its own buffers."""
  t = config.train
  shards = math.prod(size for axis, size in zip(config.mesh.axes, shape)
                     if axis in sharding.BATCH_AXES)
  where = f'mesh.shape={shape}' + (f' over {num_processes} processes' if num_processes > 1
                                   else '')
  _require(t.rows_per_batch >= shards,
           f'train.rows_per_batch={t.rows_per_batch} is fewer than the {shards} data-parallel '
           f'shards ({where}): every shard needs rows of its own; set train.rows_per_batch to '
           f'a multiple of {shards}, or run on fewer devices or processes.')
  rows_mb = t.rows_per_batch // t.micro_batches
  _require(rows_mb % shards == 0,
           f'train.rows_per_batch / train.micro_batches = {rows_mb} rows are not divisible by '
           f'the mesh batch axes size {shards} ({where}); use a multiple of {shards}.')
  if t.packing:
    sequence_packing.PackShape.for_batch(
        t.rows_per_batch, config.sampling.max_prompt_len + config.sampling.max_new_tokens,
        t.pack_rows, t.pack_len, shards=shards)


def check_config(config: ml_collections.ConfigDict, num_devices: int | None = None,
                 num_processes: int = 1) -> None:
  """Raises ValueError naming the field and the fix; call before building anything."""
  check_schema(config, default_config())
  check_finite(config)
  if config.method not in allocators.registered():
    raise ValueError(f'config.method={config.method!r}: choose one of '
                     f'{allocators.registered()}.')
  m, s, t = config.model, config.sampling, config.train
  total_len = s.max_prompt_len + s.max_new_tokens
  if total_len > m.max_len:
    raise ValueError(
        f'sampling.max_prompt_len + sampling.max_new_tokens = {s.max_prompt_len} + '
        f'{s.max_new_tokens} = {total_len} exceeds model.max_len={m.max_len}; shorten '
        'the sampling lengths or raise model.max_len.')
  for name in ('max_prompt_len', 'max_new_tokens', 'decode_slots', 'prefill_step'):
    if s[name] < 1:
      raise ValueError(f'sampling.{name}={s[name]} must be >= 1.')
  if s.engine not in ('static', 'continuous'):
    raise ValueError(f"sampling.engine={s.engine!r}: choose 'static' or 'continuous'.")
  sequence_packing.PackShape.for_batch(t.rows_per_batch, total_len, t.pack_rows, t.pack_len)
  check_allocator_sections(config)
  check_ranges(config)
  settings = allocators.allocator_class(config.method).Settings
  settings.from_config(config[config.method]).check_rows_per_batch(t.rows_per_batch)
  if t.micro_batches < 1 or t.rows_per_batch % t.micro_batches:
    raise ValueError(f'train.micro_batches={t.micro_batches} must divide train.rows_per_batch='
                     f'{t.rows_per_batch}.')
  if isinstance(config.mesh.shape, str):  # `auto[:AXIS=N]`: its syntax, before any device
    sharding.mesh_shape_spec(config.mesh.shape, config.mesh.axes)
  if num_devices is not None:
    shape = sharding.resolve_mesh_shape(config.mesh.shape, config.mesh.axes, num_devices)
    check_data_shards(config, shape, num_processes)
