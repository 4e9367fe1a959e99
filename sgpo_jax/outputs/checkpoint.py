"""Orbax checkpoints of a run: train state (sharded arrays) + a JSON `meta` item.

`meta` holds everything else a resume needs to continue exactly: step, allocator cursor /
RNG / phase / posterior, FLOPs ledger, profile table, timing, and any stage markers. The
RNG of step t is derived from (seed, t), so no key needs saving.

Saves are collective across processes (orbax coordinates); keep-last-N and async saving
come from `config.checkpoint`.

Integrity: orbax stores arrays zstd-compressed without a checksum, so flipped bytes in a
data file restore silently as wrong values. `meta['state_checksum']` holds, per leaf, the
sum of the leaf's 32-bit words mod 2**32 (integer addition: exact in any order, so a
restore onto another mesh matches); `restore_latest` checks it. A checkpoint that fails to
restore (truncated or garbled files, missing items, checksum mismatch) is reported in one
line and renamed `<step>.corrupt-<time>` (kept for inspection, never deleted), and the next
older one is tried. A save that runs out of disk raises `DiskFullError`: orbax writes into a
temporary directory and removes older checkpoints only after a save commits, so the
previous checkpoint stays intact.
"""

from __future__ import annotations

import contextlib
import logging as std_logging
import os
import re
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from sgpo_jax import errors
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.outputs import paths

CHECKSUM_KEY = 'state_checksum'


class NoIntactCheckpoint(errors.UserError):
  """Every checkpoint of the run failed to restore (each was moved aside)."""


def _leaf_words_sum(x: jax.Array) -> jax.Array:
  """Sum of the leaf's bits as unsigned words, in uint32 (wraps mod 2**32)."""
  x = jnp.asarray(x)
  if jnp.issubdtype(x.dtype, jax.dtypes.extended):  # typed PRNG keys: their uint32 data
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    return jnp.sum(x.astype(jnp.uint32), dtype=jnp.uint32)
  # 8-byte words bitcast to uint32 gain a trailing axis of 2: summed all the same.
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  words = jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)
  return jnp.sum(words, dtype=jnp.uint32)


_tree_checksum = jax.jit(lambda tree: jax.tree.map(_leaf_words_sum, tree))


# keystr writes a namedtuple field (optax states) as `.count`; restored without a target (export)
# the same leaf comes back under a dict key, `['count']`. Checksums compare in the dict form.
_ATTRIBUTE_KEY = re.compile(r"(?<=\])\.([A-Za-z_]\w*)")


def _dict_form(path: str) -> str:
  # Repeated: a chain of attributes (a quantized array's `.array.qvalue`) converts one
  # link per pass, since each match needs a `]` before it.
  while (converted := _ATTRIBUTE_KEY.sub(r"['\1']", path)) != path:
    path = converted
  return path


def _comparable_paths(checksums: dict[str, int]) -> dict[str, int]:
  return {_dict_form(path): value for path, value in checksums.items()}


def state_checksum(state: Any) -> dict[str, int]:
  """{leaf path: sum of its 32-bit words mod 2**32}: equal for equal bits on any sharding."""
  sums = _tree_checksum(state)
  flat, _ = jax.tree_util.tree_flatten_with_path(sums)
  # Replicated scalars: every process reads its own copy (no cross-host fetch).
  return {jax.tree_util.keystr(path): int(np.asarray(leaf.addressable_data(0)))
          for path, leaf in flat}


def _reason(exc: BaseException) -> str:
  text = errors.one_line(f'{type(exc).__name__}: {exc}')
  return text if len(text) <= 160 else text[:157] + '...'


class _DropOrbaxDiskFull(std_logging.Filter):
  """Orbax logs a failed write with its traceback from each writer thread; a full disk is
  reported once, by DiskFullError, so those records are dropped."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return not ('orbax' in record.pathname and exc is not None
                and errors.find_enospc(exc) is not None)


std_logging.getLogger('absl').addFilter(_DropOrbaxDiskFull())


def _wait_for_orbax_threads(timeout_s: float = 60.0) -> None:
  """Lets orbax's writer threads of a failed save end before its error propagates: still
  running at interpreter exit, each prints a traceback (hundreds of lines on a full disk)."""
  deadline = time.time() + timeout_s
  for thread in threading.enumerate():
    if thread is not threading.current_thread() and type(thread).__module__.startswith('orbax'):
      thread.join(max(0.0, deadline - time.time()))


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def latest_step_on_disk(directory: str) -> int | None:
  """The newest committed step under `directory` without opening orbax (committed step
  directories are named by their step; in-progress ones carry a suffix), or None."""
  try:
    steps = [int(name) for name in os.listdir(directory) if name.isdigit()]
  except OSError:
    return None
  return max(steps) if steps else None


class Checkpointer:

  def __init__(self, directory: str, keep: int = 2, async_save: bool = False):
    self.directory = paths.absolute(directory)  # gs:// stays a URL (orbax uses epath)
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                           enable_async_checkpointing=async_save)
    self.manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={'state': ocp.StandardCheckpointHandler(),
                       'meta': ocp.JsonCheckpointHandler()})

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state: Any, meta: dict, replace: bool = False) -> None:
    """Saves `state` with `meta` (plus its checksum); a full disk raises DiskFullError.
    replace=True: a checkpoint already at `step` is deleted first (orbax never overwrites a
    step); until the new one is committed, a resume takes the one before it."""
    if replace and step in self.manager.all_steps():
      self.manager.wait_until_finished()
      self.manager.delete(step)
    meta = {**meta, CHECKSUM_KEY: state_checksum(state)}
    with self._disk_full_as_error(exclude=step):
      self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                      meta=ocp.args.JsonSave(meta)),
                        force=True)

  @contextlib.contextmanager
  def _disk_full_as_error(self, exclude: int | None = None):
    """An ENOSPC raised inside orbax (often wrapped) -> DiskFullError naming the step a
    rerun resumes from (the newest checkpoint other than the one being written)."""
    try:
      yield
    except Exception as e:
      full = errors.find_enospc(e)
      if full is None or isinstance(e, errors.UserError):
        raise
      _wait_for_orbax_threads()
      try:
        intact = [s for s in self.all_steps() if s != exclude]
      except Exception:  # noqa: BLE001  listing must not hide the disk-full error
        intact = []
      raise errors.DiskFullError(full.filename or self.directory,
                                 max(intact) if intact else None) from e

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """Restores onto the shardings of `abstract_state` (arrays or ShapeDtypeStructs); None:
    as saved, on the host (export, which has no learner to shape a target)."""
    if abstract_state is None:
      restored = self.manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
      return restored['state'], dict(restored['meta'])
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), abstract_state)
    try:
      restored = self.manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
    except (ValueError, KeyError) as error:
      # Saved before the layers were scanned (per-layer params): restore that, then stack.
      old = model_lib.per_layer_target(target)
      if old == target:
        raise
      try:
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(old), meta=ocp.args.JsonRestore()))
      except (ValueError, KeyError):
        raise error from None
      # Its checksum names the per-layer paths: check it here, in the layout it was saved
      # in; the stacked state handed back carries no checksum to check again (restore_latest
      # would otherwise call an intact checkpoint corrupt and move it aside).
      meta = dict(restored['meta'])
      self.verify(restored['state'], meta)
      meta.pop(CHECKSUM_KEY, None)
      stacked = model_lib.stack_layers(jax.device_get(restored['state']))
      state = jax.tree.map(lambda x, t: jax.make_array_from_callback(
          t.shape, t.sharding, lambda idx, x=x: np.asarray(x)[idx]), stacked, target)
      return state, meta
    return restored['state'], dict(restored['meta'])

  def verify(self, state: Any, meta: dict) -> None:
    """Raises ValueError when `state` does not match the checksum saved in `meta` (a
    checkpoint written before checksums existed has none and passes)."""
    saved = meta.get(CHECKSUM_KEY)
    if saved is None:
      return
    saved, actual = _comparable_paths(saved), _comparable_paths(state_checksum(state))
    bad = sorted(k for k in set(saved) | set(actual) if saved.get(k) != actual.get(k))
    if bad:
      raise ValueError(f'checksum mismatch in {len(bad)} arrays, e.g. {bad[0]}')

  def restore_latest(self, abstract_state: Any, move_aside: bool = True
                     ) -> tuple[int, Any, dict] | None:
    """(step, state, meta) of the newest checkpoint that restores and matches its checksum;
    None when there is no checkpoint. Each newer one that fails is reported in one line and
    moved aside (`move_aside=False`, for readers such as export: only skipped); when none is
    intact, raises NoIntactCheckpoint saying how to start fresh."""
    moved = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        state, meta = self.restore(step, abstract_state)
        self.verify(state, meta)
        return step, state, meta
      except Exception as e:  # noqa: BLE001  any failure to read back is a bad checkpoint ...
        if isinstance(e, MemoryError) or 'RESOURCE_EXHAUSTED' in str(e):
          raise  # ... except running out of memory, which says nothing about the files
        if move_aside:
          moved.append(self._move_aside(step, _reason(e)))
        else:
          logging.warning('checkpoint step %d cannot be restored (%s); trying the next older '
                          'one', step, _reason(e))
          moved.append(str(step))
    if moved:
      raise NoIntactCheckpoint(
          f'no checkpoint in {self.directory} restores (moved aside: '
          f'{", ".join(os.path.basename(m) for m in moved)}); rerun to start this run over in '
          'the same workdir, or use a new --workdir.')
    return None

  def _move_aside(self, step: int, reason: str) -> str:
    """Renames checkpoint `step` to `<step>.corrupt-<time>` (process 0) and reports it."""
    source = os.path.join(self.directory, str(step))
    target = f"{source}.corrupt-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    if jax.process_index() == 0:
      os.rename(source, target)
    _sync(f'checkpoint_moved_aside_{step}')
    self.manager.reload()
    logging.warning('checkpoint step %d cannot be restored (%s); moved aside to %s, trying '
                    'the next older one', step, reason, target)
    return target

  def restore_meta(self, step: int) -> dict:
    restored = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return dict(restored['meta'])

  def wait(self) -> None:
    with self._disk_full_as_error():  # an async save's failure surfaces here
      self.manager.wait_until_finished()

  def close(self) -> None:
    self.wait()
    self.manager.close()
