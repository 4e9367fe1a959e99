"""Where an allocator's FLOPs went, per arm (seed means): a companion table to compare.md.

    python -m sgpo_jax.compare diagnose --runs-dir RUNS --regime default \
        --arms grpo,dapo,sgpo_bayes --seeds 0-2 --out RESULTS/diagnostics_default.md

Per arm: final accuracy, the FLOPs shares (profile / probes, rollout, train; eval left out,
as in the budget), generation calls per step (profile + training rounds), training rounds
per step, the share of rolled-out groups with all-equal rewards (and, for sgpo_bayes, the
share its posterior expected when planning them), the share of trained
groups with all-equal rewards (what the learner got no signal from), padding, and for
sgpo_bayes its allocator block (overflow groups and skipped refills per step, revisits and
the share that came back), the share of steps padded to 3/4 or more, epoch cuts
(sgpo_bayes.epoch_cut), the share of the pool never sampled and the mean filled share of the
batches, and where the learning came from: the share of the pool trained on with reward
spread and the share of those groups from the most-trained tenth of the pool (runs from
before the trainer counted them read n/a). Reads each run's summary.json and metrics.jsonl only.

A second table puts the arms on the optimizer-step axis: budgeted FLOPs per step and the
held-out accuracy at steps 10, 20, 40 and 80. It separates what a step teaches from what it
costs: two arms with the same accuracy by step but different FLOPs per step differ only in
the price of a step (issue 53's diagnosis: a fuller batch did not teach more per step).

`where_flops_go` gives compare.json's block of the same name per arm: wasted (all-equal)
rolled-out groups, the pool never sampled, rounds per step and the filled share of batches,
each a seed mean; a number the runs did not record (runs archived before the trainer kept
pool coverage and filled_share) is None, printed n/a.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from sgpo_jax.compare.arms import parse_seeds


def sparse_share(padding_fractions, threshold: float = 0.75) -> float:
  """Share of steps that trained on at most 1 - threshold of their rows (padding >= 3/4 by
  default): steps paid in full for a handful of informative groups."""
  pad = np.asarray(padding_fractions, float)
  return float(np.mean(pad >= threshold)) if pad.size else float('nan')


def run_wall_seconds(summary: dict[str, Any]) -> float:
  """Wall seconds of the run's RL loop, profiling and evals included, summed over every
  sitting of a resumed run (train.py checkpoints the running total).

  The initial policy is built or loaded before that clock starts, so nothing is subtracted:
  its `seconds` may come from another machine (a shipped warm start records the reference
  machine's build time), which once made this negative.
  """
  seconds = float(summary['wall_seconds'])
  if not seconds > 0:
    raise ValueError(f"summary wall_seconds={seconds!r}: a finished run's wall clock must be "
                     '> 0; rerun it (its workdir is incomplete or was edited).')
  return seconds


def read_run(workdir: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """A finished run's summary.json and its step rows of metrics.jsonl (evals-only rows out)."""
  with open(os.path.join(workdir, 'summary.json')) as f:
    summary = json.load(f)
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [r for r in map(json.loads, f) if 'reward_mean' in r]
  return summary, rows


def rolled_all_equal(summary: dict[str, Any], rows: list[dict[str, Any]]) -> float:
  """Share of the rolled-out groups whose rewards were all equal: generation that taught
  nothing. An allocator that counts its own groups (sgpo_bayes, sgpo_select; overflow
  included) gives it; DAPO-style rounds count their dropped groups; single-round methods
  train on every group, so it is the learner's frac_zero_std (a skipped step had no group
  with reward spread: 1). NaN when the run recorded none of these."""
  alloc = summary.get('allocator') or {}
  if 'expected_informative_share' in alloc:
    return 1.0 - alloc['informative_group_share']
  if not rows:
    return float('nan')
  if 'dapo_dropped_groups' in rows[0]:
    dropped = sum(r['dapo_dropped_groups'] for r in rows)
    return dropped / max(dropped + sum(r['dapo_kept_groups'] for r in rows), 1)
  return float(np.mean([r.get('frac_zero_std', 1.0 if r.get('skipped_step') else np.nan)
                        for r in rows]))


def filled_share(row: dict[str, Any]) -> float:
  """Trained (valid) rows / rows_per_batch of one step's batch: the logged filled_share, or
  1 - padding_fraction for runs logged before it; NaN when neither is there."""
  if 'filled_share' in row:
    return float(row['filled_share'])
  return 1.0 - row['padding_fraction'] if 'padding_fraction' in row else float('nan')


def _mean(values) -> float:
  """Mean of the finite values; NaN when there are none."""
  finite = [float(v) for v in values if np.isfinite(v)]
  return float(np.mean(finite)) if finite else float('nan')


def flops_breakdown(summary: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, float]:
  """Where one run's FLOPs went, NaN where the run did not record it: the all-equal share
  of its rolled-out groups (wasted), the share of its pool never sampled (summary.json's
  pool_coverage), generation rounds per step (probe rounds included) and training rounds,
  and the mean filled share of its batches."""
  coverage = summary.get('pool_coverage') or {}
  return {
      'all_equal_share': rolled_all_equal(summary, rows),
      'never_sampled_share': float(coverage.get('never_sampled_share', np.nan)),
      'rounds_per_step': _mean([r.get('rounds', 1) for r in rows]),
      'train_rounds_per_step': _mean([r.get('train_rounds', r.get('rounds', 1)) for r in rows]),
      'filled_share': _mean([filled_share(r) for r in rows]),
  }


def where_flops_go(workdirs: list[str]) -> dict[str, float | None]:
  """compare.json's `where_flops_go` of one arm: each `flops_breakdown` number averaged over
  the seeds that recorded it; None where none did."""
  runs = [flops_breakdown(*read_run(w)) for w in workdirs]
  out: dict[str, float | None] = {}
  for key in ('all_equal_share', 'never_sampled_share', 'rounds_per_step',
              'train_rounds_per_step', 'filled_share'):
    mean = _mean([r[key] for r in runs])
    out[key] = mean if np.isfinite(mean) else None
  return out


def run_diagnostics(workdir: str) -> dict[str, float]:
  """One run's numbers (see the module docstring)."""
  summary, rows = read_run(workdir)
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
  breakdown = flops_breakdown(summary, rows)
  out['rolled_all_equal'] = breakdown['all_equal_share']
  out['never_sampled_share'] = breakdown['never_sampled_share']
  out['filled_share'] = breakdown['filled_share']
  coverage = summary.get('pool_coverage') or {}
  out['trained_prompts_share'] = float(coverage.get('trained_prompts_share', np.nan))
  out['top_decile_trained_share'] = float(coverage.get('top_decile_trained_share', np.nan))
  alloc = summary.get('allocator') or {}
  if 'overflow_groups' in alloc:
    out['overflow_per_step'] = alloc['overflow_groups'] / len(rows)
    out['refills_skipped_per_step'] = alloc.get('refills_skipped', 0) / len(rows)
  if 'expected_informative_share' in alloc:  # the posterior's calibration, same groups
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
           ('never_sampled_share', 'pool never sampled', '{:.1%}'),
           ('filled_share', 'filled share', '{:.1%}'),
           ('trained_prompts_share', 'pool trained on', '{:.1%}'),
           ('top_decile_trained_share', 'trained groups from top 10% of prompts', '{:.1%}'),
           ('sparse_steps', 'steps >= 3/4 padding', '{:.1%}'), ('steps', 'steps', '{:.0f}'),
           ('overflow_per_step', 'overflow groups/step', '{:.2f}'),
           ('refills_skipped_per_step', 'refills skipped/step', '{:.2f}'),
           ('epoch_cuts', 'epoch cuts', '{:.0f}'), ('revisits', 'revisits', '{:.0f}'),
           ('revisit_back_share', 'revisits back', '{:.1%}'),
           ('wall_s', 'wall s', '{:.0f}')]
# Columns whose missing value is a run that predates the field (n/a), not one where the
# number does not apply (blank).
NOT_RECORDED = ('never_sampled_share', 'filled_share', 'trained_prompts_share',
                'top_decile_trained_share')


def table(per_arm: dict[str, list[dict[str, float]]]) -> str:
  lines = ['| arm | seeds | ' + ' | '.join(c[1] for c in COLUMNS) + ' |',
           '|---|---|' + '---|' * len(COLUMNS)]
  for arm, runs in per_arm.items():
    cells = []
    for key, _, fmt in COLUMNS:
      values = [r[key] for r in runs if key in r and np.isfinite(r[key])]
      cells.append(fmt.format(float(np.mean(values))) if values
                   else 'n/a' if key in NOT_RECORDED else '')
    lines.append(f'| {arm} | {len(runs)} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


STEP_MARKS = (10, 20, 40, 80)


def accuracy_at_steps(workdir: str, marks=STEP_MARKS) -> dict[int, float]:
  """Held-out accuracy % of one run at each optimizer step in `marks`, linear between its
  evals (which sit at fractions of the FLOPs budget, not at steps); NaN past its last eval."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    evals = [(r['step'], r['eval_accuracy']) for r in map(json.loads, f)
             if 'eval_accuracy' in r]
  if not evals:
    return {m: float('nan') for m in marks}
  steps, accs = (np.asarray(x, float) for x in zip(*sorted(evals)))
  return {m: float(100 * np.interp(m, steps, accs)) if m <= steps[-1] else float('nan')
          for m in marks}


def step_table(per_arm_dirs: dict[str, list[str]], marks=STEP_MARKS) -> str:
  """Markdown: per arm, budgeted FLOPs per optimizer step and the seed-mean accuracy at each
  mark (over the seeds that reached it; '(n)' when not all did)."""
  lines = ['| arm | seeds | FLOPs per step | ' + ' | '.join(f'acc % at step {m}' for m in marks)
           + ' |', '|---|---|---|' + '---|' * len(marks)]
  for arm, dirs in per_arm_dirs.items():
    per_step = []
    for d in dirs:
      summary, rows = read_run(d)
      per_step.append(summary['flops']['total'] / max(len(rows), 1))
    at = [accuracy_at_steps(d, marks) for d in dirs]
    cells = [f'{np.mean(per_step):.3g}' if dirs else '']
    for m in marks:
      values = [a[m] for a in at if np.isfinite(a[m])]
      cell = f'{np.mean(values):.1f}' if values else ''
      cells.append(cell + (f' ({len(values)})' if values and len(values) < len(dirs) else ''))
    lines.append(f'| {arm} | {len(dirs)} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def calibration_table(per_arm_dirs: dict[str, list[str]]) -> str:
  """Markdown: for the arms whose allocator reports `calibration` (sgpo_select), per kind of
  evidence, the groups rolled out (summed over seeds; their share of the arm's), the
  informative share the posterior expected and the share that was; '' when no arm does."""
  lines = []
  for arm, dirs in per_arm_dirs.items():
    blocks = [read_run(d)[0].get('allocator', {}).get('calibration') for d in dirs]
    blocks = [b for b in blocks if b]
    if not blocks:
      continue
    total = sum(v['groups'] for b in blocks for v in b.values())
    for kind in blocks[0]:
      n = sum(b[kind]['groups'] for b in blocks)
      if not n:
        continue
      # Shares weighted by each seed's groups (a seed without any has None shares).
      exp, got = (sum(b[kind][share] * b[kind]['groups'] for b in blocks if b[kind]['groups'])
                  / n for share in ('expected_informative_share', 'informative_share'))
      lines.append(f'| {arm} | {len(blocks)} | {kind} | {n} ({n / total:.1%}) | {exp:.1%} | '
                   f'{got:.1%} |')
  if not lines:
    return ''
  return ('\n\n## The posterior\'s calibration\n\nGroups rolled out by what their prompt\'s '
          'evidence predates (unseen: never rolled out; trained_since: trained on since its last '
          'rollout; untrained_since: neither), summed over seeds: the informative share the '
          'posterior expected (its mean, as planned) against the share that was.\n\n'
          '| arm | seeds | evidence | groups | expected informative | informative |\n'
          '|---|---|---|---|---|---|\n' + '\n'.join(lines))


def diagnose(runs_dir: str, regime: str, arms: list[str], seeds: str) -> str:
  """The Markdown table of the finished runs RUNS_DIR/<regime>/<arm>_seed<s>."""
  per_arm: dict[str, list[dict[str, Any]]] = {}
  per_arm_dirs: dict[str, list[str]] = {}
  for arm in arms:
    dirs = [os.path.join(runs_dir, regime, f'{arm}_seed{s}') for s in parse_seeds(seeds)]
    per_arm_dirs[arm] = [d for d in dirs if os.path.exists(os.path.join(d, 'summary.json'))]
    per_arm[arm] = [run_diagnostics(d) for d in per_arm_dirs[arm]]
  return (f'# Where the FLOPs went: regime `{regime}`, seeds {seeds}\n\n'
          'Generated by `python -m sgpo_jax.compare diagnose` (seed means; FLOPs shares of the '
          'budgeted FLOPs, eval left out).\n\n' + table(per_arm) + '\n\n'
          '## By optimizer step\n\nWhat a step costs and what it teaches: budgeted FLOPs per '
          'step, and held-out accuracy at fixed steps (linear between evals, which sit at '
          'fractions of the budget; seed means).\n\n' + step_table(per_arm_dirs)
          + calibration_table(per_arm_dirs) + '\n')
