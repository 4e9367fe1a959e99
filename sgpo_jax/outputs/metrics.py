"""Run outputs that record numbers: metrics.jsonl, TensorBoard events, W&B, JSON files.

Only process 0 writes (`processes.is_writer`). TensorBoard event files are written with
tensorboardX, which needs no TensorFlow. Paths may be local or remote (gs://): files go
through `outputs/paths.py` (etils.epath). On resume, `metrics.jsonl` is cut back to the
restored step so a run killed between checkpoints never leaves duplicate or orphan steps.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Iterable

import numpy as np

from sgpo_jax.outputs import paths
from sgpo_jax.parallel import processes


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
  if not processes.is_writer():
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
  if processes.is_writer() and paths.exists(path):
    tmp = path + '.tmp'
    paths.write_text(tmp, ''.join(json.dumps(r) + '\n' for r in rows))
    paths.replace(tmp, path)
  return rows


def scalars(row: dict) -> dict[str, float]:
  """The numeric fields of a metrics row but `step`: what TensorBoard and W&B receive."""
  return {k: v for k, v in row.items()
          if k != 'step' and isinstance(v, (int, float)) and not isinstance(v, bool)}


WANDB_ID_FILE = 'wandb_run_id'


def start_wandb(workdir: str, project: str, config: dict | None, resumed: bool):
  """A W&B run for this workdir; a resumed run continues the W&B run its workdir names."""
  # deferred: optional dependency (pip install sgpo_jax[wandb]), needed only when a project
  # is set (the config check has already said so in one line when it is missing).
  import wandb

  id_path = paths.join(workdir, WANDB_ID_FILE)
  run_id = paths.read_text(id_path).strip() if resumed and paths.exists(id_path) else ''
  run_id = run_id or uuid.uuid4().hex[:12]
  paths.write_text(id_path, run_id + '\n')
  name = workdir.rstrip('/').rsplit('/', 1)[-1]
  return wandb.init(project=project, id=run_id, name=name, config=config, resume='allow')


class MetricsWriter:
  """Appends one JSON line per step and mirrors its scalars to TensorBoard (and W&B when
  `wandb_project` is set)."""

  def __init__(self, workdir: str, resume_step: int | None = None, wandb_project: str = '',
               wandb_config: dict | None = None):
    self.path = paths.join(workdir, 'metrics.jsonl')
    self.rows: list[dict] = []
    if resume_step is not None:
      # Process 0's rows for everyone: other hosts may not see the file, and must not read it
      # while process 0 rewrites it.
      self.rows = processes.broadcast_from_writer(
          truncate_jsonl(self.path, lambda r: r.get('step', 0) <= resume_step)
          if processes.is_writer() else None)
    elif processes.is_writer() and paths.exists(self.path):
      paths.remove(self.path)
    self._tb = None
    if processes.is_writer():
      from tensorboardX import SummaryWriter  # deferred: heavy (it loads torch when present)
      # The events are rewritten from metrics.jsonl's rows, so TensorBoard shows exactly what
      # it holds: earlier event files go (a fresh start's and a stopped run's steps past the
      # checkpoint), and the kept rows are logged again. purge_step would only hide them from
      # TensorBoard's Python loader; its default (Rust) loader ignores that marker.
      tb_dir = paths.join(workdir, 'tensorboard')
      for path in paths.glob(tb_dir, 'events.out.tfevents.*'):
        paths.remove(path)
      self._tb = SummaryWriter(tb_dir)
      for row in self.rows:
        self._log_tensorboard(row)
    self._wandb = None
    if processes.is_writer() and wandb_project:
      self._wandb = start_wandb(workdir, wandb_project, wandb_config, resume_step is not None)

  def write(self, row: dict) -> None:
    row = to_jsonable(row)
    self.rows.append(row)
    if not processes.is_writer():
      return
    paths.append_text(self.path, json.dumps(row) + '\n')
    self._log_tensorboard(row)
    if self._wandb is not None:
      self._wandb.log(scalars(row), step=int(row['step']))

  def _log_tensorboard(self, row: dict) -> None:
    for key, value in scalars(row).items():
      self._tb.add_scalar(key, value, int(row['step']))

  def close(self) -> None:
    if processes.is_writer():
      self._tb.close()
      if self._wandb is not None:
        self._wandb.finish()
        self._wandb = None


def append_jsonl(path: str, rows: Iterable[dict]) -> None:
  if not processes.is_writer():
    return
  paths.append_text(path, ''.join(json.dumps(to_jsonable(r)) + '\n' for r in rows))
