"""Orbax checkpoints of a run: train state (sharded arrays) + a JSON `meta` item.

`meta` holds everything else a resume needs to continue exactly: step, allocator cursor /
RNG / phase / posterior, FLOPs ledger, profile table, timing, and any stage markers. The
RNG of step t is derived from (seed, t), so no key needs saving.

Saves are collective across processes (orbax coordinates); keep-last-N and async saving
come from `config.checkpoint`.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from sgpo_jax.model import transformer as model_lib


class Checkpointer:

  def __init__(self, directory: str, keep: int = 2, async_save: bool = False):
    self.directory = os.path.abspath(directory)
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                           enable_async_checkpointing=async_save)
    self.manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={'state': ocp.StandardCheckpointHandler(),
                       'meta': ocp.JsonCheckpointHandler()})

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, meta: dict) -> None:
    self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                    meta=ocp.args.JsonSave(meta)), force=True)

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """Restores onto the shardings of `abstract_state` (arrays or ShapeDtypeStructs)."""
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
      stacked = model_lib.stack_layers(jax.device_get(restored['state']))
      state = jax.tree.map(lambda x, t: jax.make_array_from_callback(
          t.shape, t.sharding, lambda idx, x=x: np.asarray(x)[idx]), stacked, target)
      return state, dict(restored['meta'])
    return restored['state'], dict(restored['meta'])

  def restore_meta(self, step: int) -> dict:
    restored = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return dict(restored['meta'])

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()
