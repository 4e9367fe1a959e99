"""Where an allocator's FLOPs went, per arm (seed means): a companion table to compare.md.

    python -m sgpo_jax.compare diagnose --runs-dir RUNS --regime default \
        --arms grpo,dapo,sgpo_bayes --seeds 0-2 --out RESULTS/diagnostics_default.md

Per arm: final accuracy, the FLOPs shares (profile / probes, rollout, train; eval left out,
as in the budget), generation calls per step (profile + training rounds), training rounds
per step, the share of rolled-out groups with all-equal rewards (and, for sgpo_bayes, the
share its posterior expected when planning them), the share of trained
groups with all-equal rewards (what the learner got no signal from), padding, and for
sgpo_bayes its allocator block (overflow groups and skipped refills per step, revisits and
the share that came back), the share of steps padded to 3/4 or more, and epoch cuts
(sgpo_bayes.epoch_cut). Reads each run's summary.json and metrics.jsonl only.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from sgpo_jax.compare.analysis import run_wall_seconds
from sgpo_jax.compare.arms import parse_seeds


def sparse_share(padding_fractions, threshold: float = 0.75) -> float:
  """Share of steps that trained on at most 1 - threshold of their rows (padding >= 3/4 by
  default): steps paid in full for a handful of informative groups."""
  pad = np.asarray(padding_fractions, float)
  return float(np.mean(pad >= threshold)) if pad.size else float('nan')


def run_diagnostics(workdir: str) -> dict[str, float]:
  """One run's numbers (see the module docstring)."""
  with open(os.path.join(workdir, 'summary.json')) as f:
    summary = json.load(f)
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [r for r in map(json.loads, f) if 'reward_mean' in r]
  flops = summary['flops']
  spent = flops['total']
  # Archived runs (studies/.../archive_runs.py before it kept the field) lack padding: blank.
  padding = [r['padding_fraction'] for r in rows if 'padding_fraction' in r]  # the budgeted FLOPs: eval is tracked apart, outside the total
  out = {
      'final_acc': 100 * summary['eval_accuracy_final'],
      'profile_share': flops.get('profile', 0.0) / spent,
      'rollout_share': flops.get('rollout', 0.0) / spent,
      'train_share': flops.get('train', 0.0) / spent,
      'calls_per_step': float(np.mean([r.get('rounds', 1) for r in rows])),
      'train_rounds_per_step': float(np.mean([r.get('train_rounds', r.get('rounds', 1))
                                              for r in rows])),
      'trained_all_equal': float(np.mean([r.get('frac_zero_std', np.nan) for r in rows])),
      'padding': float(np.mean(padding)) if padding else float('nan'),
      'sparse_steps': sparse_share(padding),
      'steps': float(len(rows)),
      'wall_s': run_wall_seconds(summary),
  }
  if 'dapo_dropped_groups' in rows[0]:
    dropped = sum(r['dapo_dropped_groups'] for r in rows)
    out['rolled_all_equal'] = dropped / max(dropped + sum(r['dapo_kept_groups'] for r in rows),
                                            1)
  else:
    out['rolled_all_equal'] = out['trained_all_equal']
  alloc = summary.get('allocator') or {}
  if 'overflow_groups' in alloc:
    out['overflow_per_step'] = alloc['overflow_groups'] / len(rows)
    out['refills_skipped_per_step'] = alloc.get('refills_skipped', 0) / len(rows)
  if 'expected_informative_share' in alloc:  # the posterior's calibration, same groups
    out['rolled_all_equal'] = 1.0 - alloc['informative_group_share']  # overflow included
    out['expected_all_equal'] = 1.0 - alloc['expected_informative_share']
  if 'epoch_cuts' in alloc:
    out['epoch_cuts'] = float(alloc['epoch_cuts'])
  if 'revisits' in alloc:
    out['revisits'] = float(alloc['revisits'])
    out['revisit_back_share'] = alloc['revisits_back'] / max(alloc['revisits'], 1)
  return out


COLUMNS = [('final_acc', 'final acc %', '{:.1f}'), ('profile_share', 'profile FLOPs', '{:.1%}'),
           ('rollout_share', 'rollout FLOPs', '{:.1%}'), ('train_share', 'train FLOPs', '{:.1%}'),
           ('calls_per_step', 'gen calls/step', '{:.2f}'),
           ('train_rounds_per_step', 'train rounds/step', '{:.2f}'),
           ('rolled_all_equal', 'all-equal rolled out', '{:.1%}'),
           ('expected_all_equal', 'all-equal expected', '{:.1%}'),
           ('trained_all_equal', 'all-equal trained on', '{:.1%}'),
           ('padding', 'padding', '{:.1%}'),
           ('sparse_steps', 'steps >= 3/4 padding', '{:.1%}'), ('steps', 'steps', '{:.0f}'),
           ('overflow_per_step', 'overflow groups/step', '{:.2f}'),
           ('refills_skipped_per_step', 'refills skipped/step', '{:.2f}'),
           ('epoch_cuts', 'epoch cuts', '{:.0f}'), ('revisits', 'revisits', '{:.0f}'),
           ('revisit_back_share', 'revisits back', '{:.1%}'),
           ('wall_s', 'wall s', '{:.0f}')]


def table(per_arm: dict[str, list[dict[str, float]]]) -> str:
  lines = ['| arm | seeds | ' + ' | '.join(c[1] for c in COLUMNS) + ' |',
           '|---|---|' + '---|' * len(COLUMNS)]
  for arm, runs in per_arm.items():
    cells = []
    for key, _, fmt in COLUMNS:
      values = [r[key] for r in runs if key in r and np.isfinite(r[key])]
      cells.append(fmt.format(float(np.mean(values))) if values else '')
    lines.append(f'| {arm} | {len(runs)} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def diagnose(runs_dir: str, regime: str, arms: list[str], seeds: str) -> str:
  """The Markdown table of the finished runs RUNS_DIR/<regime>/<arm>_seed<s>."""
  per_arm: dict[str, list[dict[str, Any]]] = {}
  for arm in arms:
    dirs = [os.path.join(runs_dir, regime, f'{arm}_seed{s}') for s in parse_seeds(seeds)]
    per_arm[arm] = [run_diagnostics(d) for d in dirs
                    if os.path.exists(os.path.join(d, 'summary.json'))]
  return (f'# Where the FLOPs went: regime `{regime}`, seeds {seeds}\n\n'
          'Generated by `python -m sgpo_jax.compare diagnose` (seed means; FLOPs shares of the '
          'budgeted FLOPs, eval left out).\n\n' + table(per_arm) + '\n')
