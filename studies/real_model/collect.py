"""The real-model job's result file: `python studies/real_model/collect.py RUN_DIR [OUT]`.

Reads a finished `--config smollm2_135m_arith` run (summary.json, metrics.jsonl,
config_history.jsonl) and writes `studies/real_model/result.json`: the result line the job
printed, held-out accuracy at start and end with standard errors and the gain's, the step
times, the training reward and completion-length trajectory (every 5th step), the config
changes made while it ran and the machine's load average sampled beside it (`load.log`). The README quotes this file (a test checks it).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from sgpo_jax.outputs import report  # noqa: E402


def _jsonl(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def collect(run_dir: str) -> dict:
  with open(os.path.join(run_dir, 'summary.json')) as f:
    summary = json.load(f)
  rows = _jsonl(os.path.join(run_dir, 'metrics.jsonl'))
  steps = [r for r in rows if 'reward_mean' in r]
  a0, a1 = summary['eval_accuracy_initial'], summary['eval_accuracy_final']
  se0, se1 = summary['eval_accuracy_initial_se'], summary['eval_accuracy_final_se']
  seconds = [r['seconds'] for r in steps]
  commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO,
                          capture_output=True, text=True).stdout.strip()
  return {
      'command': 'python -m sgpo_jax.main --config smollm2_135m_arith --workdir runs/smollm2',
      'result_line': report.result_line('runs/smollm2', summary),
      'commit_collected': commit,
      'num_eval': summary['num_eval'],
      'accuracy_initial': a0, 'accuracy_initial_se': se0,
      'accuracy_final': a1, 'accuracy_final_se': se1,
      'gain_points': 100 * (a1 - a0),
      'gain_se_points': 100 * math.sqrt(se0 ** 2 + se1 ** 2),
      'by_digits': {k: [r.get(k) for r in rows if 'eval_accuracy' in r]
                    for k in ('eval_accuracy_d1', 'eval_accuracy_d2')},
      'rl_steps': summary['steps'],
      'skipped_steps': summary.get('skipped_steps', 0),
      'wall_seconds': summary['wall_seconds'],
      'step_seconds_median': statistics.median(seconds) if seconds else None,
      'params_total': summary['params_total'],
      'trainable_params': summary['trainable_params'],
      'flops_total': summary['flops']['total'],
      'trajectory': [{k: r.get(k) for k in ('step', 'reward_mean', 'completion_len_mean',
                                             'truncated_fraction', 'seconds')}
                     for r in steps if r['step'] % 5 == 0 or r['step'] == 1],
      'config_changes': _jsonl(os.path.join(run_dir, 'config_history.jsonl')),
      'load_average_1min': _load(os.path.join(run_dir, 'load.log')),
  }


def _load(path: str) -> dict | None:
  """min / median / max of the 1-minute load average sampled beside the run (a `load.log`
  of '<unix time> <1 min> <5 min> <15 min>' lines), or None when none was kept."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    ones = [float(line.split()[1]) for line in f if len(line.split()) >= 2]
  if not ones:
    return None
  return {'samples': len(ones), 'min': min(ones), 'median': statistics.median(ones),
          'max': max(ones)}


def main() -> None:
  run_dir = sys.argv[1]
  out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, 'result.json')
  result = collect(run_dir)
  with open(out, 'w') as f:
    json.dump(result, f, indent=1)
  print(json.dumps({k: result[k] for k in ('result_line', 'gain_points', 'gain_se_points')}))


if __name__ == '__main__':
  main()
