"""What a person reads after a run: report.md and plots/*.png.

Plots: p_hat and G histograms (sGPO), reward per step, eval accuracy vs cumulative FLOPs
(profiling included, so the x axis is the honest cost of each point).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from sgpo_jax.model import flops as flops_lib
from sgpo_jax.outputs import paths


def _figure(figsize):
  """A pyplot-free figure: rendering reports never changes a notebook's backend."""
  fig = Figure(figsize=figsize)
  return fig, fig.subplots()


def _save(fig, path: str) -> None:
  fig.tight_layout()
  with paths.open_file(path, 'wb') as f:  # local or gs:// (outputs/paths.py)
    fig.savefig(f, dpi=110, format='png')


def plot_profile(workdir: str, allocation) -> None:
  plots = paths.join(workdir, 'plots')
  paths.makedirs(plots)
  fig, ax = _figure((5, 3.2))
  n_samples = allocation.n_samples
  k = int(n_samples.max()) if n_samples is not None and n_samples.size else 8
  counts = np.bincount(np.rint(allocation.p_hat * k).astype(int), minlength=k + 1)
  ax.bar([f'{i}/{k}' for i in range(k + 1)], counts, color='tab:blue')
  ax.set_xlabel('p̂ (correct / samples) under the initial policy')
  ax.set_ylabel('queries')
  ax.set_title(f'Profile of {allocation.n_queries} training queries')
  _save(fig, paths.join(plots, 'p_hat_histogram.png'))

  fig, ax = _figure((5, 3.2))
  labels = ['dropped'] + [f'G={g}' for g in sorted(set(allocation.group_size.tolist()) - {0})]
  values = [int(np.sum(allocation.group_size == 0))] + [
      int(np.sum(allocation.group_size == int(lbl[2:]))) for lbl in labels[1:]]
  ax.bar(labels, values, color=['tab:gray'] + ['tab:green'] * (len(labels) - 1))
  ax.set_ylabel('queries')
  ax.set_title('Group size per query (sGPO allocation)')
  _save(fig, paths.join(plots, 'group_size_histogram.png'))


def plot_curves(workdir: str, rows: list[dict]) -> None:
  plots = paths.join(workdir, 'plots')
  paths.makedirs(plots)
  steps = [r for r in rows if 'reward_mean' in r]
  if steps:
    fig, ax = _figure((6, 3.5))
    ax.plot([r['step'] for r in steps], [r['reward_mean'] for r in steps], lw=1, label='batch reward')
    ax.plot([r['step'] for r in steps], [r.get('frac_zero_std', np.nan) for r in steps], lw=1,
            alpha=0.7, label='all-equal groups')
    ax.set_xlabel('RL step')
    ax.legend()
    ax.set_title('Training reward per step')
    _save(fig, paths.join(plots, 'reward_per_step.png'))
  evals = [r for r in rows if 'eval_accuracy' in r]
  if evals:
    fig, ax = _figure((6, 3.5))
    xs, ys = [r['flops_total'] for r in evals], np.array([r['eval_accuracy'] for r in evals])
    ax.plot(xs, ys, 'o-')
    se = np.array([r.get('eval_accuracy_se', np.nan) for r in evals])
    if np.isfinite(se).all():
      ax.fill_between(xs, ys - 2 * se, ys + 2 * se, alpha=0.2, lw=0, label='± 2 SE')
      ax.legend()
    ax.set_xlabel('cumulative FLOPs (profiling + rollouts + training)')
    ax.set_ylabel('held-out greedy accuracy')
    ax.set_title('Eval accuracy vs compute')
    _save(fig, paths.join(plots, 'eval_accuracy_vs_flops.png'))


def _fmt(x: float) -> str:
  return f'{x:.3g}'


def result_line(workdir: str, summary: dict[str, Any]) -> str:
  """The line `python -m sgpo_jax.main` prints when a run ends: held-out accuracy before and
  after (± binomial SE), steps, total FLOPs, wall time and where the report is."""
  init, final = summary['eval_accuracy_initial'], summary['eval_accuracy_final']
  se = summary.get('eval_accuracy_final_se')
  stopped = f", stopped: {summary['stop_reason']}" if summary.get('stop_reason') else ''
  return (f"result: held-out greedy accuracy {init:.1%} -> {final:.1%}"
          + (f' (± {100 * se:.1f})' if se is not None else '')
          + f" on {summary.get('num_eval', '?')} problems; {summary['steps']} RL steps, "
          f"{summary['flops']['total']:.3g} FLOPs, {summary['wall_seconds']:.0f} s wall{stopped}; "
          f"report: {paths.join(workdir, 'report.md')}")


def write_report(workdir: str, summary: dict[str, Any], rows: list[dict], allocation) -> None:
  plot_curves(workdir, rows)
  f = summary['flops']
  init, final = summary['eval_accuracy_initial'], summary['eval_accuracy_final']
  se = lambda key: (f" ± {100 * summary[key]:.1f}" if key in summary else '')  # noqa: E731
  lines = [
      f"# Run report: {summary['method']} (seed {summary['seed']})", '',
      f"Held-out greedy accuracy went from **{init:.1%}**{se('eval_accuracy_initial_se')} to "
      f"**{final:.1%}**{se('eval_accuracy_final_se')} ({(final - init) * 100:+.1f} points) in "
      f"{summary['steps']} RL steps and {summary['wall_seconds']:.0f} s of wall time"
      + (f" (± = binomial standard error over {summary['num_eval']} held-out problems)"
         if 'num_eval' in summary else '') + '.', '',
      '## Compute (FLOPs, analytic; padding counted as computed)', '',
      '| stage | FLOPs | share |', '|---|---|---|',
  ]
  total = max(f['total'], 1.0)
  for stage in flops_lib.TOTAL_CATEGORIES:
    if stage not in f:  # a summary written before the category existed
      continue
    lines.append(f"| {stage} | {_fmt(f[stage])} | {f[stage] / total:.1%} |")
  lines += [f"| **total** | {_fmt(f['total'])} | 100% |", '',
            f"Useful (non-padding) FLOPs: {_fmt(f['useful_total'])}; eval (not in total): "
            f"{_fmt(f['eval'])}. Mean padding fraction per batch: "
            f"{summary['padding_fraction']:.1%}.", '',
            *([f"Trainable parameters: {summary['trainable_params']:,} of "
               f"{summary['total_params']:,} ({summary['trainable_params'] / max(summary['total_params'], 1):.2%}"
               "; LoRA adapters when model.lora_rank > 0).", '']
              if 'trainable_params' in summary else []),
            f"Compilations: train step {summary['compiles']['train_step']}, sampler "
            f"{summary['compiles']['sampler']}.", '']
  init_info = summary.get('initial_policy', {})
  if init_info:
    lines += ['## Initial policy', '', f"Source: {init_info.get('source')}"
              + (f", {init_info.get('steps')} SFT steps, cached={init_info.get('cached')}"
                 if init_info.get('source') == 'warm_start' else '') + '.', '']
  if allocation is not None:
    p = summary['profile']
    lines += ['## sGPO profile and allocation', '',
              f"{p['n_queries']} training queries profiled. Dropped as trivial "
              f"(p̂ > threshold): {p['n_trivial']}. Unsolved (p̂ = 0): {p['n_unsolved']}, of "
              f"which {p['n_unsolved_kept']} kept. Prompts per schedule pass by group size: "
              f"{p['group_size_histogram']}.", '',
              '![p_hat](plots/p_hat_histogram.png) ![G](plots/group_size_histogram.png)', '']
  if summary.get('stop_reason'):
    lines += [f"Stopped: {summary['stop_reason']}.", '']
  lines += ['## Curves', '', '![eval vs flops](plots/eval_accuracy_vs_flops.png)',
            '![reward](plots/reward_per_step.png)', '']
  paths.write_text(paths.join(workdir, 'report.md'), '\n'.join(lines))
