"""Keeps the headline sweep resumable across machines: `save` copies each finished run's
config.json, summary.json and (gzipped) the metrics rows the analysis reads (eval curve, batch
diagnostics) from RUNS into archive/ beside this file; `restore` copies them back into an empty
RUNS folder, so `python -m sgpo_jax.compare run` skips those runs and its report covers them.

  python studies/allocator_comparison/headline/archive_runs.py save RUNS
  python studies/allocator_comparison/headline/archive_runs.py restore RUNS
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHIVE = os.path.join(HERE, 'archive')
# What sgpo_jax.compare.analysis reads from metrics.jsonl (read_curve, batch_diagnostics).
METRIC_KEYS = ('step', 'flops_total', 'eval_accuracy', 'reward_mean', 'rounds',
               'dapo_dropped_groups', 'dapo_kept_groups', 'frac_zero_std', 'greso_skipped')


def _finished(root: str):
  for regime in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    for name in sorted(os.listdir(os.path.join(root, regime))):
      run = os.path.join(root, regime, name)
      if os.path.isfile(os.path.join(run, 'summary.json')):
        yield regime, name, run


def save(runs_dir: str) -> int:
  n = 0
  for regime, name, run in _finished(runs_dir):
    out = os.path.join(ARCHIVE, regime, name)
    if os.path.isfile(os.path.join(out, 'summary.json')):
      continue
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(run, 'config.json'), out)
    with open(os.path.join(run, 'metrics.jsonl')) as f, \
         gzip.open(os.path.join(out, 'metrics.jsonl.gz'), 'wt') as g:
      for line in f:
        row = json.loads(line)
        kept = {k: row[k] for k in METRIC_KEYS if k in row}
        if len(kept) > 1:
          g.write(json.dumps(kept) + '\n')
    shutil.copy(os.path.join(run, 'summary.json'), out)  # last: it marks the run finished
    n += 1
  return n


def restore(runs_dir: str) -> int:
  n = 0
  for regime, name, run in _finished(ARCHIVE):
    out = os.path.join(runs_dir, regime, name)
    if os.path.exists(out):
      continue
    os.makedirs(out)
    for name in ('config.json', 'summary.json'):
      shutil.copy(os.path.join(run, name), out)
    with gzip.open(os.path.join(run, 'metrics.jsonl.gz'), 'rt') as f, \
         open(os.path.join(out, 'metrics.jsonl'), 'w') as g:
      g.write(f.read())
    n += 1
  return n


if __name__ == '__main__':
  if len(sys.argv) != 3 or sys.argv[1] not in ('save', 'restore'):
    sys.exit(__doc__)
  count = {'save': save, 'restore': restore}[sys.argv[1]](sys.argv[2])
  print(f'{sys.argv[1]}: {count} runs')
