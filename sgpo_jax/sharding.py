"""The device mesh, logical->mesh axis rules, sharded parameter creation, host<->mesh data.

Sharding is data, not code: every parameter carries logical axis names (model.py) and
`DEFAULT_RULES` maps each name to mesh axes. A logical axis whose size does not divide the
mesh axes it maps to is replicated instead (e.g. a 16-token vocabulary over tp=3), so tiny
test models run on any mesh. Batches shard their rows over `BATCH_AXES`.

Multi-process: `shard_batch` builds global arrays from each process's local rows with
`jax.make_array_from_process_local_data`; `is_writer()` is True on process 0 only.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from sgpo_jax import model as model_lib

BATCH_AXES = ('data', 'fsdp')
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ('batch', BATCH_AXES),
    ('vocab', 'tp'),
    ('embed', 'fsdp'),
    ('heads', 'tp'),
    ('kv_heads', 'tp'),
    ('mlp', 'tp'),
    ('head_dim', None),
    ('norm', None),
)


def resolve_mesh_shape(shape: Sequence[int], axes: Sequence[str], num_devices: int
                       ) -> tuple[int, ...]:
  """Replaces one -1 by the rest of the devices; raises naming `mesh.shape` if it can't fit."""
  shape = tuple(int(s) for s in shape)
  if len(shape) != len(axes):
    raise ValueError(f'mesh.shape={shape} has {len(shape)} entries but mesh.axes={tuple(axes)} '
                     f'has {len(axes)}: give one size per axis.')
  if shape.count(-1) > 1:
    raise ValueError(f'mesh.shape={shape}: at most one -1 ("the rest of the devices").')
  if any(s == 0 or s < -1 for s in shape):
    raise ValueError(f'mesh.shape={shape}: sizes must be positive or -1.')
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    if num_devices % known:
      raise ValueError(f'mesh.shape={shape} does not fit {num_devices} devices: the fixed axes '
                       f'multiply to {known}, which does not divide {num_devices}. Use sizes '
                       f'whose product divides {num_devices}.')
    shape = tuple(num_devices // known if s == -1 else s for s in shape)
  if math.prod(shape) != num_devices:
    raise ValueError(f'mesh.shape={shape} needs {math.prod(shape)} devices but '
                     f'{num_devices} are visible; set mesh.shape so the product is '
                     f'{num_devices} (or use -1 for one axis).')
  return shape


def make_mesh(mesh_config, devices: Sequence[Any] | None = None) -> Mesh:
  devices = list(devices if devices is not None else jax.devices())
  shape = resolve_mesh_shape(mesh_config.shape, mesh_config.axes, len(devices))
  device_array = np.asarray(devices).reshape(shape)
  return Mesh(device_array, tuple(mesh_config.axes))


def _mesh_axes_for(name: str | None, dim: int, mesh: Mesh, rules) -> Any:
  if name is None:
    return None
  rule = dict(rules).get(name)
  if rule is None:
    return None
  axes = (rule,) if isinstance(rule, str) else tuple(rule)
  axes = tuple(a for a in axes if a in mesh.shape and mesh.shape[a] > 1)
  size = math.prod(mesh.shape[a] for a in axes)
  if not axes or dim % size:
    return None
  return axes if len(axes) > 1 else axes[0]


def logical_to_sharding(logical_spec: P, shape: Sequence[int], mesh: Mesh, rules=DEFAULT_RULES
                        ) -> NamedSharding:
  used: set[str] = set()
  mesh_axes = []
  for name, dim in zip(tuple(logical_spec) + (None,) * (len(shape) - len(logical_spec)), shape):
    axes = _mesh_axes_for(name, dim, mesh, rules)
    flat = (axes,) if isinstance(axes, str) else (axes or ())
    if any(a in used for a in flat):  # a mesh axis may shard only one dimension
      axes = None
    else:
      used.update(flat)
    mesh_axes.append(axes)
  return NamedSharding(mesh, P(*mesh_axes))


def param_shardings(boxed_abstract_params, mesh: Mesh, rules=DEFAULT_RULES):
  """Shardings for every parameter, from its logical names and shape."""
  specs = nn.get_partition_spec(boxed_abstract_params)
  shapes = nn.meta.unbox(boxed_abstract_params)
  return jax.tree.map(lambda spec, leaf: logical_to_sharding(spec, leaf.shape, mesh, rules),
                      specs, shapes, is_leaf=lambda x: isinstance(x, P))


def init_sharded_params(cfg: model_lib.ModelConfig, mesh: Mesh, rng, rules=DEFAULT_RULES):
  """Creates parameters directly on the mesh with their target shardings."""
  shardings = param_shardings(model_lib.abstract_params(cfg), mesh, rules)
  init = jax.jit(lambda key: model_lib.init_params(cfg, key), out_shardings=shardings)
  return init(rng), shardings


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  """Rows over the batch axes, everything else replicated."""
  axes = tuple(a for a in BATCH_AXES if a in mesh.shape)
  return NamedSharding(mesh, P(axes if axes else None, *([None] * (ndim - 1))))


def batch_size_multiple(mesh: Mesh) -> int:
  return math.prod(mesh.shape[a] for a in BATCH_AXES if a in mesh.shape)


def shard_batch(mesh: Mesh, batch: Any) -> Any:
  """Host numpy arrays (this process's rows, or all rows on one process) -> global arrays.

  With several processes each passes its own contiguous slice of rows; on one process this
  is a plain sharded device_put.
  """
  def put(x):
    x = np.asarray(x)
    sharding = batch_sharding(mesh, x.ndim)
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    return jax.make_array_from_process_local_data(sharding, x)
  return jax.tree.map(put, batch)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def to_host(x: Any) -> Any:
  """Global array -> numpy on every process (gathers across processes when needed)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(x, tiled=True))
  return jax.tree.map(np.asarray, x)


def is_writer() -> bool:
  """Only process 0 writes files (metrics, reports, plots, profile)."""
  return jax.process_index() == 0
