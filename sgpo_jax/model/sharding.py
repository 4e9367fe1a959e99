"""The device mesh, logical->mesh axis rules, sharded parameter creation, host<->mesh data.

Sharding is data, not code: every parameter carries logical axis names (transformer.py) and
`DEFAULT_RULES` maps each name to mesh axes. A logical axis whose size does not divide the
mesh axes it maps to is replicated instead (e.g. a 16-token vocabulary over tp=3), so tiny
test models run on any mesh. Batches shard their rows over `BATCH_AXES`.

Multi-process (one controller per host, `jax.distributed`): every process holds the same
full host batch (built deterministically from seed, profile and gathered rewards) and
`shard_batch` hands `jax.make_array_from_process_local_data` only the rows its own devices
hold. Device outputs come back to every host with `to_host`; rewards are scored once per
row (`score_across_processes`) so host-side decisions never diverge; state read from files
comes from process 0 (`broadcast_from_writer`); `is_writer()` is True on process 0 only.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from sgpo_jax.model import transformer as model_lib

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


def run_mesh_context(config) -> Any:
  """`jax.set_mesh(the run's mesh)` where attention needs it to pick the splash kernel (a
  multi-chip TPU, `attention.needs_mesh_context`), else a no-op context: elsewhere tracing
  stays exactly as it was."""
  import contextlib

  from sgpo_jax.model import attention
  if not attention.needs_mesh_context(config.model.attention_impl, jax.default_backend(),
                                      jax.device_count()):
    return contextlib.nullcontext()
  try:
    mesh = make_mesh(config.mesh)
  except ValueError:  # a mesh larger than this host: the dry run's analytic mode says so
    return contextlib.nullcontext()
  return jax.set_mesh(mesh)


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


def init_optimizer_state(optimizer, params) -> Any:
  """`optimizer.init(params)` on the params' mesh: moments take their parameter's sharding,
  everything else (step counts) is replicated. Left to itself jit puts a count on one device,
  which a multi-process jit rejects next to mesh-wide arrays."""
  import optax
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
    from jax.experimental import multihost_utils
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(x, tiled=True))
  return jax.tree.map(np.asarray, x)


def is_writer() -> bool:
  """Only process 0 writes files (metrics, reports, plots, profile)."""
  return jax.process_index() == 0


def broadcast_from_writer(obj: Any) -> Any:
  """A JSON-able value as process 0 sees it, on every process.

  Used for state read from the workdir (a partial profile, metrics rows, a warm-start
  cache hit): process 0 may already be appending to those files while another process
  reads them, and on hosts without a shared disk only process 0 has them.
  """
  if jax.process_count() == 1:
    return obj
  from jax.experimental import multihost_utils
  blob = np.frombuffer(json.dumps(obj).encode(), np.uint8) if is_writer() else None
  size = int(multihost_utils.broadcast_one_to_all(
      np.int64(0 if blob is None else blob.size)))
  data = np.zeros(size, np.uint8) if blob is None else blob
  data = np.asarray(multihost_utils.broadcast_one_to_all(data), np.uint8)
  return json.loads(data.tobytes().decode())


def score_across_processes(score_fn: Callable[[list, list], Any], completions: Sequence,
                           queries: Sequence) -> np.ndarray:
  """float32 rewards of all rows on every process; each row is scored once, on one process.

  Scoring splits the CPU cost over hosts, and since a reward with timeouts (math-verify) can
  differ between two evaluations of the same text, scoring once keeps every process's
  allocation decisions identical.
  """
  n, count, me = len(completions), jax.process_count(), jax.process_index()
  if count == 1:
    return np.asarray(score_fn(list(completions), list(queries)), np.float32).reshape(n)
  from jax.experimental import multihost_utils
  per = -(-n // count)
  lo, hi = min(n, me * per), min(n, (me + 1) * per)
  local = np.zeros(per, np.float32)
  if hi > lo:
    local[:hi - lo] = np.asarray(score_fn(list(completions[lo:hi]), list(queries[lo:hi])),
                                 np.float32)
  return np.asarray(multihost_utils.process_allgather(local)).reshape(-1)[:n]


def initialize_distributed() -> bool:
  """Starts `jax.distributed` when a launcher asked for it; call before any jax computation.

  - JAX_COORDINATOR_ADDRESS + JAX_NUM_PROCESSES + JAX_PROCESS_ID set (`sgpo_jax.launch`,
    multi-node GPU, any hand-rolled launcher): explicit initialization.
  - SGPO_DISTRIBUTED=1: bare `jax.distributed.initialize()`, which auto-detects Cloud TPU
    pods, SLURM, Open MPI and Kubernetes.
  - SGPO_DISTRIBUTED=0 or neither: single process.
  Returns True when initialized.
  """
  mode = os.environ.get('SGPO_DISTRIBUTED', 'auto').lower()
  if mode in ('0', 'false', 'off') or jax.distributed.is_initialized():
    return False
  explicit = all(os.environ.get(k) for k in ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES',
                                             'JAX_PROCESS_ID'))
  if not explicit and mode not in ('1', 'true', 'on'):
    return False
  try:  # gloo is jax 0.10's default for CPU collectives; older/newer lines may differ
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  except (AttributeError, ValueError, KeyError):
    pass
  if explicit:
    jax.distributed.initialize(coordinator_address=os.environ['JAX_COORDINATOR_ADDRESS'],
                               num_processes=int(os.environ['JAX_NUM_PROCESSES']),
                               process_id=int(os.environ['JAX_PROCESS_ID']))
  else:
    jax.distributed.initialize()
  return True
