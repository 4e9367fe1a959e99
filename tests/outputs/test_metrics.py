"""outputs/metrics.py's TensorBoard mirror: what TensorBoard shows of a run that stopped and
resumed is exactly its metrics.jsonl (the event files are read back record by record, and
TensorBoard's purge rule is applied as its reader does)."""

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
  """The scalars TensorBoard shows: files in name order (as its directory loader reads
  them); a SessionLog START at step s hides every event read before it with step >= s
  (EventAccumulator's orphaned-data purge)."""
  shown: list[tuple[int, str, float]] = []
  for path in sorted(glob.glob(os.path.join(logdir, 'events.out.tfevents.*'))):
    for event in read_events(path):
      if event.HasField('session_log') and event.session_log.status == event.session_log.START:
        shown = [s for s in shown if s[0] < event.step]
      for value in event.summary.value:
        shown.append((event.step, value.tag, round(value.simple_value, 6)))
  return sorted(shown)


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


def test_tensorboard_shows_a_resumed_run_once_and_a_fresh_start_alone(tmp_path):
  workdir = str(tmp_path)
  logdir = os.path.join(workdir, 'tensorboard')
  write(workdir, [{'step': s, 'loss': 1.0 + s} for s in range(4)])
  # Stopped after step 3, resumed from the checkpoint of step 1 (same second: no overwrite).
  write(workdir, [{'step': s, 'loss': 0.5 + s} for s in (2, 3)], resume_step=1)
  assert len(glob.glob(os.path.join(logdir, 'events.out.tfevents.*'))) == 2
  assert tensorboard_view(logdir) == jsonl_view(workdir) == [
      (0, 'loss', 1.0), (1, 'loss', 2.0), (2, 'loss', 2.5), (3, 'loss', 3.5)]
  write(workdir, [{'step': 0, 'eval_accuracy': 0.25}])  # a fresh start in the same workdir
  assert tensorboard_view(logdir) == jsonl_view(workdir) == [(0, 'eval_accuracy', 0.25)]
