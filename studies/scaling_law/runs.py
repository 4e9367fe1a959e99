"""Reward trajectories for validating the scaling law on our own runs: three model sizes of
the embedded arithmetic task x {sGPO, GRPO} x seeds, one `sgpo_jax.main` process at a time.

    python -m studies.scaling_law.runs --seeds 0 1     # the 12 runs of scaling_law.md
    python -m studies.scaling_law.runs --sizes tiny base --methods grpo
    python -m studies.scaling_law.runs --list          # print the commands only
    python -m studies.scaling_law.runs --regime weak --runs-dir /tmp/sl  # weak start

Runs land in runs/scaling/<size>_<method>_seed<seed>/ (not committed); each
model size gets its own cached SFT warm start under runs/warm_start_cache/
(keyed by the config hash). A run whose workdir holds summary.json is skipped; an
unfinished one resumes from its checkpoint. Every process runs under `nice -n 15` so the
comparison experiments keep the CPU. Then:

    python -m studies.scaling_law.validate runs/scaling/*/ \
        --discussion studies/scaling_law/results/scaling_law_discussion.md

The model, data, warm-start, RL and eval fields that shape these runs are set here
explicitly, so retuning the embedded default does not change them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = os.path.join(REPO, 'runs', 'scaling')
CACHE = os.path.join(REPO, 'runs', 'warm_start_cache')

# Four layers each, width varies; n_heads * head_dim == d_model, d_ff = 4 d_model.
# Non-embedding params 148k / 263k / 591k (SwiGLU MLP). 'base' (the d=128 default) is
# defined but not run by default. Tried first and dropped: a 2-layer d=64 model on the
# 4-digit task (held-out accuracy ~3% after 2500 SFT steps; RL moved nothing) and the
# d=128 default (its 1000-step SFT took 12 min on the contended CPU and also ends near 0%
# on 4 digits; see studies/scaling_law/results/scaling_law.md).
SIZES = {
    'xs': {'model.d_model': 48, 'model.n_layers': 4, 'model.n_heads': 4,
           'model.n_kv_heads': 4, 'model.head_dim': 12, 'model.d_ff': 192},
    'tiny': {'model.d_model': 64, 'model.n_layers': 4, 'model.n_heads': 4,
             'model.n_kv_heads': 4, 'model.head_dim': 16, 'model.d_ff': 256},
    'small': {'model.d_model': 96, 'model.n_layers': 4, 'model.n_heads': 4,
              'model.n_kv_heads': 4, 'model.head_dim': 24, 'model.d_ff': 384},
    'base': {'model.d_model': 128, 'model.n_layers': 4, 'model.n_heads': 4,
             'model.n_kv_heads': 4, 'model.head_dim': 32, 'model.d_ff': 512},
}
# One SFT budget for every size (same data, steps, lr): R0 grows with size, as for
# pretrained models of one family, and enters the joint law as a covariate.
WARM_START = {name: {'warm_start.steps': 500, 'warm_start.learning_rate': 2e-3}
              for name in SIZES}
# Regimes: 'standard' is the 500-step SFT above; 'weak' starts RL from a barely trained
# policy (250 SFT steps: greedy accuracy 0.02 (xs) to 0.05 (tiny)), to see whether a
# slow-start phase (a logistic knee) appears; 'vweak' (100 SFT steps) starts at ~1%.
REGIMES = {'standard': {}, 'weak': {'warm_start.steps': 250}, 'vweak': {'warm_start.steps': 100}}
# Shared by every run. RL lr 2e-4 (the default): at 1e-3 the tiny model collapsed (reward
# 0.3 -> 0.0 within 100 steps, greedy accuracy 59% -> 2%).
COMMON = {
    # Operands of 1-2 digits: on 4 digits no size reached a usable R0 within CPU minutes.
    'data.num_train': 4096, 'data.num_eval': 256, 'data.min_digits': 1, 'data.max_digits': 2,
    'data.seed': 0, 'data.rl_pool_size': 2048,
    'warm_start.batch_size': 64,
    'train.num_steps': 150, 'train.rows_per_batch': 128, 'train.learning_rate': 2e-4,
    'train.warmup_steps': 5, 'train.schedule': 'constant', 'train.mu': 1,
    'train.kl_coef': 0.0, 'train.flops_budget': 0.0, 'train.early_stop.enabled': False,
    'profile.num_samples': 8, 'profile.early_stop': False, 'grpo.group_size': 8,
    'sgpo.trivial_threshold': 0.75, 'sgpo.unsolved_keep_fraction': 0.10,
    'sgpo.phase_epochs': 1.0, 'sgpo.curriculum': True,
    'sampling.temperature': 1.0,
    'eval.every_steps': 10, 'eval.pass_k': 0, 'checkpoint.every_steps': 1000,
}


def entries(sizes, methods, seeds, regime='standard'):
  prefix = '' if regime == 'standard' else f'{regime}_'
  for seed in seeds:
    for size in sizes:
      for method in methods:
        name = f'{prefix}{size}_{method}_seed{seed}'
        yield name, {'method': method, 'seed': seed, **SIZES[size], **WARM_START[size],
                     **REGIMES[regime], **COMMON}


def command(name: str, overrides: dict, runs: str = RUNS, cache: str = CACHE) -> list[str]:
  cmd = ['nice', '-n', '15', sys.executable, '-m', 'sgpo_jax.main', '--config',
         'sgpo_jax/configs/default.py', '--workdir', os.path.join(runs, name),
         f'--config.warm_start.cache_dir={cache}']
  return cmd + [f'--config.{key}={value}' for key, value in overrides.items()]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes', nargs='+', default=['xs', 'tiny', 'small'], choices=list(SIZES))
  parser.add_argument('--methods', nargs='+', default=['grpo', 'sgpo'])
  parser.add_argument('--seeds', nargs='+', type=int, default=[0])
  parser.add_argument('--regime', default='standard', choices=list(REGIMES))
  parser.add_argument('--runs-dir', default=RUNS, help=f'where run folders go (default {RUNS})')
  parser.add_argument('--list', action='store_true', help='print the commands, run nothing')
  args = parser.parse_args(argv)
  runs = os.path.abspath(args.runs_dir)
  cache = CACHE if runs == RUNS else os.path.join(runs, 'warm_start_cache')
  os.makedirs(runs, exist_ok=True)
  for name, overrides in entries(args.sizes, args.methods, args.seeds, args.regime):
    workdir = os.path.join(runs, name)
    cmd = command(name, overrides, runs, cache)
    if args.list:
      print(' '.join(cmd))
      continue
    if os.path.exists(os.path.join(workdir, 'summary.json')):
      print(f'[scaling] {name}: done already, skipped', flush=True)
      continue
    print(f'[scaling] {name}: started {time.strftime("%H:%M:%S")}', flush=True)
    start = time.time()
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, 'stdout.log'), 'a') as log:
      code = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, TQDM_MININTERVAL='10'))
    print(f'[scaling] {name}: exit {code} after {time.time() - start:.0f}s', flush=True)
    if code != 0:
      return code
  return 0


if __name__ == '__main__':
  sys.exit(main())
