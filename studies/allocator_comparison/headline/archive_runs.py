"""Keeps the headline sweep resumable across machines, in one compressed file: `save` adds each
finished run's config.json, summary.json and the metrics rows the analysis reads (eval curve,
batch diagnostics) from RUNS to archive.tar.xz beside this file; `restore` writes them back into
RUNS (runs already there are left alone), so `python -m sgpo_jax.compare run` skips those runs
and its report covers them.

  python studies/allocator_comparison/headline/archive_runs.py save RUNS [ARCHIVE]
  python studies/allocator_comparison/headline/archive_runs.py restore RUNS [ARCHIVE]

ARCHIVE (default: archive.tar.xz beside this file) lets another study keep its own archive
with the same format (studies/allocator_comparison/select/ does).

The archive holds `<regime>/<arm>_seed<s>/{config.json,metrics.jsonl,summary.json}`, written
in sorted order with fixed metadata, so the same runs always give the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHIVE = os.path.join(HERE, 'archive.tar.xz')
FILES = ('config.json', 'metrics.jsonl', 'summary.json')
# What sgpo_jax.compare.analysis (read_curve, batch_diagnostics) and .diagnostics read from
# metrics.jsonl. The 140 headline runs were archived before padding_fraction, train_rounds and
# filled_share were kept, so their diagnostics from the archive leave the padding columns
# blank and their filled share n/a (summary.json, kept whole, has no pool_coverage either).
METRIC_KEYS = ('step', 'flops_total', 'eval_accuracy', 'reward_mean', 'rounds', 'train_rounds',
               'dapo_dropped_groups', 'dapo_kept_groups', 'frac_zero_std', 'greso_skipped',
               'padding_fraction', 'filled_share', 'skipped_step')


def _finished(root: str):
  for regime in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    if not os.path.isdir(os.path.join(root, regime)):
      continue
    for name in sorted(os.listdir(os.path.join(root, regime))):
      run = os.path.join(root, regime, name)
      if os.path.isfile(os.path.join(run, 'summary.json')):
        yield regime, name, run


def read_archive(path: str = ARCHIVE) -> dict[str, bytes]:
  """Every file in the archive: '<regime>/<run>/<file>' -> its bytes ({} if there is none)."""
  if not os.path.isfile(path):
    return {}
  with tarfile.open(path, 'r:xz') as tar:
    return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def write_archive(files: dict[str, bytes], path: str = ARCHIVE) -> None:
  tmp = path + '.tmp'
  with tarfile.open(tmp, 'w:xz', preset=9, format=tarfile.PAX_FORMAT) as tar:
    for name in sorted(files):
      info = tarfile.TarInfo(name)
      info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
      tar.addfile(info, io.BytesIO(files[name]))
  os.replace(tmp, path)


def _metrics_rows(path: str) -> bytes:
  out = []
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      kept = {k: row[k] for k in METRIC_KEYS if k in row}
      if len(kept) > 1:
        out.append(json.dumps(kept) + '\n')
  return ''.join(out).encode()


def save(runs_dir: str, archive: str = ARCHIVE) -> int:
  files = read_archive(archive)
  n = 0
  for regime, name, run in _finished(runs_dir):
    key = f'{regime}/{name}'
    if f'{key}/summary.json' in files:
      continue
    for file in ('config.json', 'summary.json'):
      with open(os.path.join(run, file), 'rb') as f:
        files[f'{key}/{file}'] = f.read()
    files[f'{key}/metrics.jsonl'] = _metrics_rows(os.path.join(run, 'metrics.jsonl'))
    n += 1
  if n:
    write_archive(files, archive)
  return n


def restore(runs_dir: str, archive: str = ARCHIVE) -> int:
  files = read_archive(archive)
  runs = sorted({name.rsplit('/', 1)[0] for name in files
                 if name.endswith('/summary.json')})
  n = 0
  for key in runs:
    out = os.path.join(runs_dir, *key.split('/'))
    if os.path.exists(out):
      continue
    os.makedirs(out)
    for file in FILES:  # summary.json last: it marks the run finished
      with open(os.path.join(out, file), 'wb') as f:
        f.write(files[f'{key}/{file}'])
    n += 1
  return n


if __name__ == '__main__':
  if len(sys.argv) not in (3, 4) or sys.argv[1] not in ('save', 'restore'):
    sys.exit(__doc__)
  count = {'save': save, 'restore': restore}[sys.argv[1]](*sys.argv[2:])
  print(f'{sys.argv[1]}: {count} runs')
