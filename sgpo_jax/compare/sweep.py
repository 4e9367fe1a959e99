"""Generic sweep: one `sgpo_jax.main` process per override set, results in one table.

    python -m sgpo_jax.compare sweep SWEEP.json --out runs/my_sweep
    python -m sgpo_jax.compare sweep SWEEP.py --out runs/my_sweep [--config default]

A sweep file is a JSON list of dicts, or a Python file defining `SWEEP` (a list of dicts)
or `get_sweep()` returning one. Each dict maps dotted config fields to values
({'method': 'grpo', 'seed': 1, 'train.num_steps': 80}); the optional key 'name' names the
run's workdir (default: the overrides joined). Runs go one after another (two processes on
a 2-core CPU only slow each other down); a run whose workdir already holds summary.json is
skipped, and an unfinished one resumes from its checkpoint. Every run's summary.json is
collected into OUT/sweep.md (Markdown) and OUT/sweep.csv.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

# The folder above the package: the runs execute there and import the package from it.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CONFIG = 'default'  # a shipped config name (sgpo_jax/configs/)
COLUMNS = ('name', 'method', 'seed', 'steps', 'eval_accuracy_initial', 'eval_accuracy_final',
           'flops_total', 'flops_profile', 'padding_fraction', 'wall_seconds', 'stop_reason',
           'overrides')


def load_sweep(path: str) -> list[dict[str, Any]]:
  if path.endswith('.json'):
    with open(path) as f:
      entries = json.load(f)
  else:
    spec = importlib.util.spec_from_file_location('sweep_file', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entries = module.get_sweep() if hasattr(module, 'get_sweep') else module.SWEEP
  if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
    raise ValueError(f'{path}: a sweep is a list of dicts of dotted overrides')
  return entries


def run_name(entry: dict[str, Any]) -> str:
  if 'name' in entry:
    return str(entry['name'])
  parts = [f'{k.split(".")[-1]}={v}' for k, v in entry.items()]
  return '_'.join(parts).replace('/', '-') or 'default'


def _flag_value(value: Any) -> str:
  if isinstance(value, (tuple, list)):
    return '(' + ','.join(str(v) for v in value) + (',)' if len(value) == 1 else ')')
  return str(value)


def command_for(entry: dict[str, Any], workdir: str, config: str = DEFAULT_CONFIG) -> list[str]:
  cmd = [sys.executable, '-m', 'sgpo_jax.main', '--config', config, '--workdir', workdir]
  cmd += [f'--config.{k}={_flag_value(v)}' for k, v in entry.items() if k != 'name']
  return cmd


def run_sweep(entries: list[dict[str, Any]], out: str, config: str = DEFAULT_CONFIG,
              log=print) -> list[dict[str, Any]]:
  """Runs every entry (skipping finished ones); returns one table row per entry."""
  os.makedirs(out, exist_ok=True)
  names = [run_name(e) for e in entries]
  if len(set(names)) != len(names):
    raise ValueError(f'sweep run names are not unique: {names}; add a "name" key')
  for entry, name in zip(entries, names):
    workdir = os.path.join(out, name)
    if os.path.exists(os.path.join(workdir, 'summary.json')):
      log(f'[sweep] {name}: done already, skipped')
      continue
    cmd = command_for(entry, workdir, config)
    log(f'[sweep] {name}: ' + ' '.join(cmd[1:]))
    os.makedirs(workdir, exist_ok=True)
    start = time.time()
    with open(os.path.join(workdir, 'stdout.log'), 'a') as fh:
      proc = subprocess.run(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=REPO))
    log(f'[sweep] {name}: exit {proc.returncode} after {time.time() - start:.0f} s')
    if proc.returncode != 0:
      raise RuntimeError(f'run {name} failed (exit {proc.returncode}); see '
                         f'{workdir}/stdout.log')
  rows = collect(entries, out)
  write_table(rows, out)
  return rows


def collect(entries: list[dict[str, Any]], out: str) -> list[dict[str, Any]]:
  rows = []
  for entry in entries:
    name = run_name(entry)
    path = os.path.join(out, name, 'summary.json')
    if not os.path.exists(path):
      continue
    with open(path) as f:
      s = json.load(f)
    rows.append({
        'name': name, 'method': s['method'], 'seed': s['seed'], 'steps': s['steps'],
        'eval_accuracy_initial': s['eval_accuracy_initial'],
        'eval_accuracy_final': s['eval_accuracy_final'],
        'flops_total': s['flops']['total'], 'flops_profile': s['flops']['profile'],
        'padding_fraction': s['padding_fraction'], 'wall_seconds': s['wall_seconds'],
        'stop_reason': s.get('stop_reason') or '',
        'overrides': ' '.join(f'{k}={_flag_value(v)}' for k, v in entry.items()
                              if k != 'name'),
    })
  return rows


def _cell(v: Any) -> str:
  if isinstance(v, float):
    return f'{v:.4g}'
  return str(v)


def write_table(rows: list[dict[str, Any]], out: str) -> None:
  with open(os.path.join(out, 'sweep.csv'), 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=COLUMNS)
    w.writeheader()
    w.writerows(rows)
  lines = ['| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)]
  lines += ['| ' + ' | '.join(_cell(r[c]) for c in COLUMNS) + ' |' for r in rows]
  with open(os.path.join(out, 'sweep.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
