"""Config validation: every mistake a config can hold fails here, before any compute.

The schema is `configs/default.py`: a field it does not have is unknown (a typo), and a
value whose type differs from the default's is wrong (ints are accepted where floats are
expected). Cross-field checks name the field and the fix.
"""

from __future__ import annotations

from typing import Any

import ml_collections

METHODS = ('sgpo', 'grpo', 'dapo', 'greso', 'knapsack', 'sgpo_bayes')


def default_config() -> ml_collections.ConfigDict:
  """The schema: the embedded default, `sgpo_jax/default_config.py`."""
  from sgpo_jax import default_config as default_lib
  return default_lib.get_config()


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
    elif not _type_ok(value, default):
      raise ValueError(f'config.{name}={value!r} has type {type(value).__name__}; expected '
                       f'{type(default).__name__} like the default {default!r}.')


def check_config(config: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
  """Raises ValueError naming the field and the fix; call before building anything."""
  check_schema(config, default_config())
  if config.method not in METHODS:
    raise ValueError(f'config.method={config.method!r}: choose one of {METHODS}.')
  m, s, t = config.model, config.sampling, config.train
  total_len = s.max_prompt_len + s.max_new_tokens
  if total_len > m.max_len:
    raise ValueError(
        f'sampling.max_prompt_len + sampling.max_new_tokens = {s.max_prompt_len} + '
        f'{s.max_new_tokens} = {total_len} exceeds model.max_len={m.max_len}; shorten '
        'the sampling lengths or raise model.max_len.')
  for name in ('max_prompt_len', 'max_new_tokens'):
    if s[name] < 1:
      raise ValueError(f'sampling.{name}={s[name]} must be >= 1.')
  if config.method == 'greso':
    from sgpo_jax import greso
    greso.GRESOSettings.from_config(config.greso)  # typed, range-checked
  if config.method == 'knapsack':
    from sgpo_jax import knapsack
    ks = knapsack.KnapsackSettings.from_config(config.knapsack)
    if ks.max_group_size > t.rows_per_batch:
      raise ValueError(f'knapsack.max_group_size={ks.max_group_size} exceeds '
                       f'train.rows_per_batch={t.rows_per_batch}; lower it.')
  group_sizes = _group_sizes(config)
  for g in group_sizes:
    if g < 1 or t.rows_per_batch % g:
      raise ValueError(f'train.rows_per_batch={t.rows_per_batch} is not a multiple of the group '
                       f'size {g} ({config.method}); choose a multiple of '
                       f'{max(group_sizes)}.')
  if t.micro_batches < 1 or t.rows_per_batch % t.micro_batches:
    raise ValueError(f'train.micro_batches={t.micro_batches} must divide train.rows_per_batch='
                     f'{t.rows_per_batch}.')
  if t.mu < 1:
    raise ValueError(f'train.mu={t.mu} must be >= 1.')
  if not 0.0 <= config.sgpo.unsolved_keep_fraction <= 1.0:
    raise ValueError(f'sgpo.unsolved_keep_fraction={config.sgpo.unsolved_keep_fraction} must be '
                     'in [0, 1].')
  if config.method == 'sgpo_bayes':
    from sgpo_jax import bayes_allocator
    bayes_allocator.BayesSettings.from_config(config.sgpo_bayes)  # range checks, before compute
  if config.profile.num_samples < 1:
    raise ValueError(f'profile.num_samples={config.profile.num_samples} must be >= 1.')
  if num_devices is not None:
    from sgpo_jax import sharding
    shape = sharding.resolve_mesh_shape(config.mesh.shape, config.mesh.axes, num_devices)
    batch = 1
    for axis, size in zip(config.mesh.axes, shape):
      if axis in sharding.BATCH_AXES:
        batch *= size
    rows_mb = t.rows_per_batch // t.micro_batches
    if rows_mb % batch:
      raise ValueError(f'train.rows_per_batch / train.micro_batches = {rows_mb} rows are not '
                       f'divisible by the mesh batch axes size {batch} (mesh.shape={shape}); '
                       f'use a multiple of {batch}.')


def _group_sizes(config) -> tuple[int, ...]:
  if config.method == 'sgpo':
    return tuple(int(g) for g in config.sgpo.group_sizes)
  if config.method == 'grpo':
    return (int(config.grpo.group_size),)
  if config.method == 'sgpo_bayes':
    return tuple(int(g) for g in config.sgpo_bayes.group_sizes)
  if config.method == 'greso':
    return (int(config.greso.group_size),)
  if config.method == 'knapsack':  # any size in [min, max] fits: R only bounds the sum
    return (int(config.knapsack.group_size),)
  return (int(config.dapo.group_size),)
