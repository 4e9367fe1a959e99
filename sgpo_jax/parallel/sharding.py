"""The device mesh, logical->mesh axis rules, sharded parameters, host<->mesh data.

Sharding is data, not code: every parameter carries logical axis names
(model/transformer.py) and `DEFAULT_RULES` maps each name to mesh axes. A logical axis
whose size does not divide the mesh axes it maps to is replicated instead (e.g. a 16-token
vocabulary over tp=3), so tiny test models run on any mesh. Batches shard their rows over
`BATCH_AXES`.

Multi-process (one controller per host, `jax.distributed`): every process holds the same
full host batch (built deterministically from seed, profile and gathered rewards) and
`shard_batch` hands `jax.make_array_from_process_local_data` only the rows its own devices
hold. Device outputs come back to every host with `to_host`. What each process does apart
(who writes, scoring once per row, starting `jax.distributed`) is `processes.py`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

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
    ('layers', None),  # the scanned layer axis of stacked parameters (model/transformer.py)
)


def mesh_shape_spec(shape: Sequence[int] | str, axes: Sequence[str]) -> tuple[int, ...]:
  """`mesh.shape` as one size per axis, -1 for "the rest of the devices".

  A tuple passes through. A string is `auto` (every device on 'data': (-1, 1, 1)),
  `auto:fsdp=8` or `auto:fsdp=-1,tp=2` (the named axes fixed, the rest 1, and 'data' the rest
  of the devices unless a named axis is -1), or sizes `1,8,1` / `(1,8,1)` (a command-line
  override of a config whose shape is a string).
  """
  if not isinstance(shape, str):
    return tuple(int(s) for s in shape)
  text = shape.strip()
  head, sep, rest = text.partition(':')
  if head.strip() != 'auto':
    try:
      return tuple(int(s) for s in text.strip('()[] ').split(',') if s.strip())
    except ValueError:
      raise ValueError(f'mesh.shape={shape!r} is neither sizes (1,8,1) nor auto[:AXIS=N,...]; '
                       f'e.g. auto or auto:fsdp=8 over mesh.axes={tuple(axes)}.') from None
  sizes = {}
  for item in rest.split(',') if sep else ():
    name, eq, value = (part.strip() for part in item.partition('='))
    if name not in axes or not eq or name in sizes:
      raise ValueError(f'mesh.shape={shape!r}: {item.strip()!r} is not AXIS=N with AXIS one '
                       f'of mesh.axes={tuple(axes)} (each once); e.g. auto:fsdp=8.')
    try:
      sizes[name] = int(value)
    except ValueError:
      raise ValueError(f'mesh.shape={shape!r}: {name}={value!r} is not an int; give a size '
                       'or -1 (the rest of the devices).') from None
  if 'data' in axes and 'data' not in sizes and -1 not in sizes.values():
    sizes['data'] = -1
  return tuple(sizes.get(axis, 1) for axis in axes)


def resolve_mesh_shape(shape: Sequence[int] | str, axes: Sequence[str], num_devices: int
                       ) -> tuple[int, ...]:
  """Replaces one -1 by the rest of the devices; raises naming `mesh.shape` if it can't fit.
  `shape` may be a string (`auto`, `auto:fsdp=8`: `mesh_shape_spec`)."""
  shape = mesh_shape_spec(shape, axes)
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


def init_optimizer_state(optimizer, params) -> Any:
  """`optimizer.init(params)` on the params' mesh: moments take their parameter's sharding,
  everything else (step counts) is replicated. Left to itself jit puts a count on one device,
  which a multi-process jit rejects next to mesh-wide arrays."""
  mesh = jax.tree.leaves(params)[0].sharding.mesh
  shardings = optax.tree_map_params(
      optimizer, lambda _, s: s, jax.eval_shape(optimizer.init, params),
      jax.tree.map(lambda x: x.sharding, params),
      transform_non_params=lambda _: replicated(mesh))
  return jax.jit(optimizer.init, out_shardings=shardings)(params)


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  """Rows over the batch axes, everything else replicated."""
  axes = tuple(a for a in BATCH_AXES if a in mesh.shape)
  return NamedSharding(mesh, P(axes if axes else None, *([None] * (ndim - 1))))


def cache_sharding(mesh: Mesh) -> NamedSharding:
  """The stacked KV cache [L, B, S, K, E]: rows over the batch axes, the rest replicated."""
  axes = tuple(a for a in BATCH_AXES if a in mesh.shape)
  return NamedSharding(mesh, P(None, axes if axes else None, None, None, None))


def packed_rows_sharding(mesh: Mesh) -> NamedSharding:
  """Packed buffers [M, S * B, L]: dim 1 (each shard's own buffer rows) over the batch axes."""
  axes = tuple(a for a in BATCH_AXES if a in mesh.shape)
  return NamedSharding(mesh, P(None, axes if axes else None, None))


def data_parallel_shards(mesh: Mesh) -> int:
  """Shards that each hold whole parameters: mesh.shape['data'] when every other axis is
  size 1 (pure data parallelism), else 1 (parameters split: one replicated schedule)."""
  if any(size > 1 for axis, size in mesh.shape.items() if axis != 'data'):
    return 1
  return int(mesh.shape.get('data', 1))


def batch_size_multiple(mesh: Mesh) -> int:
  return math.prod(mesh.shape[a] for a in BATCH_AXES if a in mesh.shape)


def process_local_rows(sharding: NamedSharding, shape: Sequence[int]) -> np.ndarray:
  """Indices (ascending, unique) of the dim-0 rows this process's devices hold."""
  rows: set[int] = set()
  for index in sharding.addressable_devices_indices_map(tuple(shape)).values():
    rows.update(range(*index[0].indices(shape[0])))
  return np.asarray(sorted(rows), np.int64)


def shard_batch(mesh: Mesh, batch: Any) -> Any:
  """Full host numpy batch (identical on every process) -> global arrays, rows sharded.

  With several processes each passes only the rows its own devices hold, so no host
  uploads another host's rows.
  """
  def put(x):
    x = np.asarray(x)
    sharding = batch_sharding(mesh, x.ndim)
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    local = x[process_local_rows(sharding, x.shape)]
    return jax.make_array_from_process_local_data(sharding, local, x.shape)
  return jax.tree.map(put, batch)


def put_host_values(tree: Any, shardings: Any) -> Any:
  """Host numpy values, identical on every process -> global arrays with `shardings` (a tree
  of the same structure); each process uploads only the slices its own devices hold."""
  def put(x, sharding):
    x = np.asarray(x)
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
  return jax.tree.map(put, tree, shardings)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def replicate(mesh: Mesh, x: Any) -> Any:
  """A value that is the same on every process (numpy, scalar, PRNG key) -> replicated on mesh.

  `jax.device_put` refuses a sharding with other processes' devices; this does not.
  """
  sharding = replicated(mesh)
  if jax.process_count() == 1:
    return jax.device_put(x, sharding)
  if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    data = replicate(mesh, np.asarray(jax.random.key_data(x)))
    wrap = lambda d: jax.random.wrap_key_data(d, impl=jax.random.key_impl(x))  # noqa: E731
    return jax.jit(wrap, out_shardings=sharding)(data)
  x = np.asarray(x)
  return jax.make_array_from_process_local_data(sharding, x, x.shape)


def to_host(x: Any) -> Any:
  """Global array -> numpy on every process (gathers across processes when needed)."""
  if jax.process_count() > 1:
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(x, tiled=True))
  return jax.tree.map(np.asarray, x)
