"""The README's own commands, rerun and recorded, so that what README.md says about them is
quoted from a file (tests/project/test_readme_numbers.py checks the README against it):

    python benchmarks/readme_commands.py default      # the default job (~3 min, 2 cores)
    python benchmarks/readme_commands.py sgpo_paper   # the paper's sGPO, one config away
    python benchmarks/readme_commands.py tests        # the fast tier (`python -m pytest -q`)
    python benchmarks/readme_commands.py install      # pip install -r requirements.txt, fresh venv

Each writes `benchmarks/results/readme_commands/<target>.json` (or `--out`): the command, the
git commit (`-dirty` when tracked files differ), the CPU count, the load average before and
after, the wall seconds, and what the command reported:

- default, sgpo_paper: `python -m sgpo_jax.main --config NAME --workdir TMP` in a fresh
  temporary workdir (a rerun in the README's `runs/NAME` would resume instead); the result
  line as the README's workdir would print it, and the summary's held-out accuracy before and
  after with its standard error, problems, steps, FLOPs and the run's own wall seconds.
  `--config-arg runlocal=1` makes a smoke run (not a README figure).
- tests: pytest's counts (passed, skipped, deselected = the slow tier's size, ...) and its
  seconds; `--slow` runs `-m slow` instead.
- install: a new virtualenv, then the README's `pip install -r requirements.txt` in it, timed
  (pip's download cache is whatever the machine has: say so beside the number).

Run on a quiet machine: the seconds are only as good as its quiet, which the load averages
record. Accuracy and FLOPs repeat bit for bit on one machine type (README, "Results").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import provenance  # noqa: E402

REPO = provenance.REPO
RESULTS = os.path.join(HERE, 'results', 'readme_commands')
JOBS = ('default', 'sgpo_paper')
TARGETS = JOBS + ('tests', 'install')
SUMMARY_KEYS = ('eval_accuracy_initial', 'eval_accuracy_initial_se', 'eval_accuracy_final',
                'eval_accuracy_final_se', 'num_eval', 'steps', 'skipped_steps', 'wall_seconds',
                'method', 'seed')


def job(name: str, config_arg: str) -> dict[str, Any]:
  """The README's command for shipped config `name`, in a fresh workdir."""
  from sgpo_jax.outputs import report
  config = f'{name}:{config_arg}' if config_arg else name
  shown = f'runs/{name}'
  with tempfile.TemporaryDirectory() as workdir:
    cmd = [sys.executable, '-m', 'sgpo_jax.main', '--config', config, '--workdir', workdir]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode:
      raise SystemExit(f'{" ".join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}')
    with open(os.path.join(workdir, 'summary.json')) as f:
      summary = json.load(f)
  return {'target': name,
          'command': f'python -m sgpo_jax.main --config {config} --workdir {shown}',
          'result_line': report.result_line(shown, summary),
          'summary': {**{k: summary.get(k) for k in SUMMARY_KEYS},
                      'flops_total': summary['flops']['total']}}


PYTEST_COUNT = re.compile(r'(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)')
PYTEST_SECONDS = re.compile(r' in ([\d.]+)s')


def pytest_counts(last_line: str) -> dict[str, Any]:
  """{'passed': n, ..., 'pytest_seconds': s} from pytest's last line, e.g.
  '846 passed, 3 skipped, 142 deselected in 234.12s (0:03:54)'."""
  counts: dict[str, Any] = {word.rstrip('s') if word.startswith('error') else word: int(n)
                            for n, word in PYTEST_COUNT.findall(last_line)}
  seconds = PYTEST_SECONDS.search(last_line)
  counts['pytest_seconds'] = float(seconds.group(1)) if seconds else None
  return counts


def tests(slow: bool) -> dict[str, Any]:
  cmd = [sys.executable, '-m', 'pytest', '-q'] + (['-m', 'slow'] if slow else [])
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  shown = 'python -m pytest -q' + (' -m slow' if slow else '')
  return {'target': 'tests', 'command': shown, 'tier': 'slow' if slow else 'fast',
          'returncode': proc.returncode, 'last_line': lines[-1] if lines else '',
          **pytest_counts(lines[-1] if lines else '')}


def install() -> dict[str, Any]:
  with tempfile.TemporaryDirectory() as root:
    venv = os.path.join(root, 'venv')
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
    cmd = [os.path.join(venv, 'bin', 'python'), '-m', 'pip', 'install', '-q', '-r',
           'requirements.txt']
    start = time.perf_counter()
    returncode = subprocess.run(cmd, cwd=REPO, check=False).returncode
    seconds = time.perf_counter() - start
  return {'target': 'install', 'command': 'pip install -r requirements.txt',
          'pip_seconds': seconds, 'returncode': returncode}


def main(argv: list[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('target', choices=TARGETS)
  p.add_argument('--config-arg', default='', help="the job's config arg, e.g. 'runlocal=1'")
  p.add_argument('--slow', action='store_true', help='tests: run the slow tier (-m slow)')
  p.add_argument('--out', default='', help='default: results/readme_commands/<target>.json')
  args = p.parse_args(argv)
  if args.target in JOBS:
    result = provenance.measured(lambda: job(args.target, args.config_arg))
  elif args.target == 'tests':
    result = provenance.measured(lambda: tests(args.slow))
  else:
    result = provenance.measured(install)
  out = args.out or os.path.join(
      RESULTS, args.target + ('_slow' if args.target == 'tests' and args.slow else '') + '.json')
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out, 'w') as f:
    json.dump(result, f, indent=1)
    f.write('\n')
  print(json.dumps(result))
  return result


if __name__ == '__main__':
  main()
