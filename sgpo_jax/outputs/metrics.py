"""Run outputs that record numbers: metrics.jsonl, TensorBoard events, JSON files.

Only process 0 writes (`sharding.is_writer`). TensorBoard event files are written with
tensorboardX, which needs no TensorFlow. Paths may be local or remote (gs://): files go
through `outputs/paths.py` (etils.epath). On resume, `metrics.jsonl` is cut back to the
restored step so a run killed between checkpoints never leaves duplicate or orphan steps.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

import numpy as np

from sgpo_jax.model import sharding
from sgpo_jax.outputs import paths


def to_jsonable(value: Any) -> Any:
  if isinstance(value, dict):
    return {str(k): to_jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_jsonable(v) for v in value]
  if isinstance(value, (np.integer,)):
    return int(value)
  if isinstance(value, (np.floating, float)):
    value = float(value)
    return value if math.isfinite(value) else None
  if isinstance(value, np.ndarray) or hasattr(value, 'shape'):
    arr = np.asarray(value)
    return to_jsonable(arr.item() if arr.ndim == 0 else arr.tolist())
  return value


def write_json(path: str, obj: Any) -> None:
  if not sharding.is_writer():
    return
  tmp = path + '.tmp'
  paths.write_text(tmp, json.dumps(to_jsonable(obj), indent=2, sort_keys=True))
  paths.replace(tmp, path)


def read_jsonl(path: str) -> list[dict]:
  if not paths.exists(path):
    return []
  rows = []
  with paths.open_file(path) as f:
    for line in f:
      line = line.strip()
      if not line:
        continue
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError:
        break  # a torn last line from a killed writer
  return rows


def truncate_jsonl(path: str, keep) -> list[dict]:
  """Rewrites `path` keeping the rows for which keep(row) is true; returns them."""
  rows = [r for r in read_jsonl(path) if keep(r)]
  if sharding.is_writer() and paths.exists(path):
    tmp = path + '.tmp'
    paths.write_text(tmp, ''.join(json.dumps(r) + '\n' for r in rows))
    paths.replace(tmp, path)
  return rows


class MetricsWriter:
  """Appends one JSON line per step and mirrors scalars to TensorBoard."""

  def __init__(self, workdir: str, resume_step: int | None = None):
    self.path = paths.join(workdir, 'metrics.jsonl')
    self.rows: list[dict] = []
    if resume_step is not None:
      # Process 0's rows for everyone: other hosts may not see the file, and must not read it
      # while process 0 rewrites it.
      self.rows = sharding.broadcast_from_writer(
          truncate_jsonl(self.path, lambda r: r.get('step', 0) <= resume_step)
          if sharding.is_writer() else None)
    elif sharding.is_writer() and paths.exists(self.path):
      paths.remove(self.path)
    self._tb = None
    if sharding.is_writer():
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(paths.join(workdir, 'tensorboard'))

  def write(self, row: dict) -> None:
    row = to_jsonable(row)
    self.rows.append(row)
    if not sharding.is_writer():
      return
    paths.append_text(self.path, json.dumps(row) + '\n')
    step = int(row['step'])
    for key, value in row.items():
      if key != 'step' and isinstance(value, (int, float)) and not isinstance(value, bool):
        self._tb.add_scalar(key, value, step)

  def close(self) -> None:
    if sharding.is_writer():
      self._tb.close()


def append_jsonl(path: str, rows: Iterable[dict]) -> None:
  if not sharding.is_writer():
    return
  paths.append_text(path, ''.join(json.dumps(to_jsonable(r)) + '\n' for r in rows))
