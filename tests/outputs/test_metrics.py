"""outputs/metrics.py's TensorBoard mirror: the event files of a run that stopped and resumed,
or started afresh in a used workdir, hold exactly its metrics.jsonl, read back record by record
with no purge rule applied (TensorBoard's default loader applies none)."""

from __future__ import annotations

import glob
import json
import os
import struct

from tensorboardX.proto import event_pb2

from sgpo_jax.outputs import metrics as metrics_lib


def read_events(path: str) -> list[event_pb2.Event]:
  """The Event records of one TFRecord file (length, crc, data, crc; crcs not checked)."""
  events, data = [], open(path, 'rb').read()
  at = 0
  while at < len(data):
    (length,) = struct.unpack('<Q', data[at:at + 8])
    events.append(event_pb2.Event.FromString(data[at + 12:at + 12 + length]))
    at += 12 + length + 4
  return events


def tensorboard_view(logdir: str) -> list[tuple[int, str, float]]:
  """Every scalar of every event file in the folder, as (step, tag, value), sorted."""
  return sorted((event.step, value.tag, round(value.simple_value, 6))
                for path in glob.glob(os.path.join(logdir, 'events.out.tfevents.*'))
                for event in read_events(path) for value in event.summary.value)


def jsonl_view(workdir: str) -> list[tuple[int, str, float]]:
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return sorted((r['step'], k, round(v, 6)) for r in rows
                for k, v in metrics_lib.scalars(r).items())


def write(workdir, rows, resume_step=None):
  writer = metrics_lib.MetricsWriter(workdir, resume_step=resume_step)
  for row in rows:
    writer.write(row)
  writer.close()


def test_tensorboard_events_are_metrics_jsonl_after_resume_and_fresh_start(tmp_path):
  workdir = str(tmp_path)
  logdir = os.path.join(workdir, 'tensorboard')
  write(workdir, [{'step': s, 'loss': 1.0 + s, 'skipped_step': 1} for s in range(4)])
  # Stopped after step 3, resumed from the checkpoint of step 1: steps 2-3 are redone (here
  # with other values and without `skipped_step`, so stale points would show).
  write(workdir, [{'step': s, 'loss': 0.5 + s} for s in (2, 3)], resume_step=1)
  assert len(glob.glob(os.path.join(logdir, 'events.out.tfevents.*'))) == 1
  assert tensorboard_view(logdir) == jsonl_view(workdir) == [
      (0, 'loss', 1.0), (0, 'skipped_step', 1.0), (1, 'loss', 2.0), (1, 'skipped_step', 1.0),
      (2, 'loss', 2.5), (3, 'loss', 3.5)]
  write(workdir, [{'step': 0, 'eval_accuracy': 0.25}])  # a fresh start in the same workdir
  assert tensorboard_view(logdir) == jsonl_view(workdir) == [(0, 'eval_accuracy', 0.25)]
