"""RL-step throughput on a length-skewed workload: static sampler + padded train step vs
continuous-batching sampler + packed train step, side by side in one process.

    python benchmarks/bench_rl_step.py                 # the issue's workload (minutes on CPU)
    python benchmarks/bench_rl_step.py --prompts 2 --samples 2 --max_new 16 --max_prompt 16 \
        --min_prompt 4 --d_model 32 --layers 1 --steps 1   # smoke size (tests)

Workload. `prompts` random prompts of 8-64 tokens (uniform), `samples` completions each,
`max_new` = 256. The policy is the tiny Qwen2 shape (4 layers, d=128, 4 query / 2 KV heads,
MLP 512, untied head) with random weights, made length-skewed by a planted EOS bias:
embedding column 0 is a constant, so after the final RMSNorm hidden unit 0 is (nearly)
the same at every position, and the head's EOS entry on that unit alone is set so that
P(EOS) = 1 / mean_len at every step. Completion lengths are then geometric (hazard
1 / mean_len) capped at max_new: most rows stop within tens of tokens, a few run to 256,
the shape of real reasoning rollouts (median << max). Rewards are a deterministic hash of
each completion (the train step only needs numbers).

One RL step = rollout of all rows + the policy update on them. Each path gets one
untimed warm-up step (compilation), then `steps` timed steps interleaved static / fast, so
both see the same machine load. Printed per path: seconds per RL step (median), rollout
and train seconds, tokens/s (generated tokens per RL-step second), useful-token shares
(real tokens over token slots computed, from the FLOPs ledger) and FLOPs shares. The last
line is JSON: useful_share_rollout and useful_share_train of the fast path, and
speedup_vs_static = static seconds per step / fast seconds per step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sgpo_jax.config import defaults as default_config  # noqa: E402
from sgpo_jax.generate import continuous as continuous_sampling  # noqa: E402
from sgpo_jax.generate import sampler as sampling  # noqa: E402
from sgpo_jax.generate.evaluate import count_generation  # noqa: E402
from sgpo_jax.model import flops  # noqa: E402
from sgpo_jax.model import transformer as model_lib  # noqa: E402
from sgpo_jax.parallel import sharding as sharding_lib  # noqa: E402
from sgpo_jax.rl import learner as learner_lib  # noqa: E402

PAD, BOS, EOS = 0, 1, 2


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--prompts', type=int, default=8)
  p.add_argument('--samples', type=int, default=8, help='completions per prompt (G)')
  p.add_argument('--min_prompt', type=int, default=8)
  p.add_argument('--max_prompt', type=int, default=64)
  p.add_argument('--max_new', type=int, default=256)
  p.add_argument('--mean_len', type=float, default=48.0,
                 help='1 / P(EOS) per step: the mean of the (uncapped) geometric lengths')
  p.add_argument('--vocab', type=int, default=512)
  p.add_argument('--d_model', type=int, default=128)
  p.add_argument('--layers', type=int, default=4)
  p.add_argument('--heads', type=int, default=4)
  p.add_argument('--kv_heads', type=int, default=2)
  p.add_argument('--d_ff', type=int, default=512)
  p.add_argument('--slots', type=int, default=16, help='continuous sampler decode slots')
  p.add_argument('--prefill_step', type=int, default=8)
  p.add_argument('--pack_rows', type=int, default=1)
  p.add_argument('--pack_len', type=int, default=0, help='0 = max_prompt + max_new')
  p.add_argument('--steps', type=int, default=3, help='timed RL steps per path')
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--out', default='', help='also write the JSON result here')
  args = p.parse_args(argv)
  if not 1 <= args.min_prompt <= args.max_prompt:
    p.error(f'--min_prompt={args.min_prompt} must lie in [1, --max_prompt={args.max_prompt}]')
  if args.mean_len <= 1:
    p.error(f'--mean_len={args.mean_len} must be > 1 (it is 1 / P(EOS))')
  return args


def skewed_policy(cfg: model_lib.ModelConfig, mean_len: float, seed: int):
  """Random params with a planted constant EOS logit bias (see the module docstring)."""
  params = model_lib.init_params(cfg, jax.random.key(seed))
  params['embedding'] = params['embedding'].at[:, 0].set(1.0)
  params['lm_head'] = params['lm_head'].at[0, :].set(0.0)
  tokens = jax.random.randint(jax.random.key(seed + 1), (4, 32), 3, cfg.vocab_size)
  mask = jnp.ones_like(tokens)
  hidden, _ = model_lib.Transformer(cfg).apply(
      {'params': params}, tokens, model_lib.positions_from_mask(mask), mask.astype(bool))
  unit0 = float(jnp.mean(hidden[..., 0]))
  hazard = 1.0 / mean_len
  bias = np.log(hazard * (cfg.vocab_size - 1) / (1.0 - hazard))
  params['lm_head'] = params['lm_head'].at[0, EOS].set(bias / unit0)
  return params


def run_config(args, rows: int, packing: bool):
  c = default_config.get_config()
  c.train.rows_per_batch = rows
  c.sampling.max_prompt_len, c.sampling.max_new_tokens = args.max_prompt, args.max_new
  c.train.learning_rate, c.train.warmup_steps, c.train.grad_clip = 1e-5, 0, 1.0
  c.train.packing, c.train.pack_rows, c.train.pack_len = packing, args.pack_rows, args.pack_len
  return c


class Path:
  """One sampler + learner pair with its own params, ledger and timings."""

  def __init__(self, name, sampler, learner, params):
    self.name, self.sampler, self.learner = name, sampler, learner
    self.state = learner.init_state(jax.tree.map(jnp.copy, params))
    self.ledger = flops.FlopsLedger(learner.cfg)
    self.times: list[tuple[float, float]] = []  # (rollout s, train s) per timed step
    self.generated = 0

  def step(self, prompts, row_ids, group_id_R, rng, args, timed: bool) -> None:
    ledger = self.ledger if timed else flops.FlopsLedger(self.learner.cfg)
    start = time.perf_counter()
    out = self.sampler.sample(self.state['params'], prompts, row_ids, rng)
    rolled = time.perf_counter()
    count_generation(ledger, 'rollout', self.sampler, out, len(prompts))
    rewards = np.array([zlib.crc32(row[:n].tobytes()) % 2 for row, n in
                        zip(out.tokens_RxN, out.lengths_R)], np.float32)
    batch = learner_lib.layout_batch(prompts, out.tokens_RxN, out.mask_RxN, out.logprobs_RxN,
                                     args.max_prompt, PAD)
    batch.update(rewards_R=rewards, group_id_R=group_id_R, valid_R=np.ones(len(prompts), bool))
    self.state, metrics = self.learner.train_step(self.state, batch)
    jax.block_until_ready(metrics)
    done = time.perf_counter()
    rows = len(prompts)
    self.learner.count_train(ledger, rows, batch['tokens_RxT'].shape[1] - 1, rows)
    if timed:  # train time includes the host-side layout (and packing) of the batch
      self.times.append((rolled - start, done - rolled))
      self.generated += int(out.lengths_R.sum())

  def summary(self) -> dict:
    rollout_s = [t[0] for t in self.times]
    train_s = [t[1] for t in self.times]
    step_s = [a + b for a, b in self.times]
    led = self.ledger
    return {
        'seconds_per_rl_step': statistics.median(step_s),
        'rollout_seconds': statistics.median(rollout_s),
        'train_seconds': statistics.median(train_s),
        'tokens_per_second': self.generated / sum(step_s),
        'rollout_tokens_per_second': self.generated / sum(rollout_s),
        'useful_share_rollout': led.useful_token_share('rollout'),
        'useful_share_train': led.useful_token_share('train'),
        'useful_flops_share_rollout': led.useful('rollout') / led.computed('rollout'),
        'useful_flops_share_train': led.useful('train') / led.computed('train'),
        'compiles_sampler': self.sampler.compile_count,
        'compiles_train_step': self.learner.compile_count,
    }


def main(argv=None) -> dict:
  args = parse_args(argv)
  rows = args.prompts * args.samples
  cfg = model_lib.ModelConfig(
      vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
      n_kv_heads=args.kv_heads, head_dim=args.d_model // args.heads, d_ff=args.d_ff,
      tie_embeddings=False, max_len=args.max_prompt + args.max_new)
  mesh = sharding_lib.make_mesh(default_config.get_config().mesh, jax.devices()[:1])
  shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh)
  params = jax.device_put(skewed_policy(cfg, args.mean_len, args.seed), shardings)

  rng = np.random.default_rng(args.seed)
  base = [[BOS] + rng.integers(3, args.vocab, n - 1).tolist()
          for n in rng.integers(args.min_prompt, args.max_prompt + 1, args.prompts)]
  prompts = [p for p in base for _ in range(args.samples)]
  row_ids = list(range(rows))
  group_id_R = np.repeat(np.arange(args.prompts), args.samples).astype(np.int32)
  common = dict(max_prompt_len=args.max_prompt, max_new_tokens=args.max_new, stop_ids=[EOS],
                pad_id=PAD, bos_id=BOS)
  static = Path('static + padded',
                sampling.Sampler(cfg, mesh, shardings, rows=rows, **common),
                learner_lib.Learner(cfg, mesh, shardings, run_config(args, rows, False), 100),
                params)
  fast = Path('continuous + packed',
              continuous_sampling.ContinuousSampler(
                  cfg, mesh, shardings, slots=min(args.slots, rows), queue_rows=rows,
                  prefill_step=args.prefill_step, **common),
              learner_lib.Learner(cfg, mesh, shardings, run_config(args, rows, True), 100),
              params)
  paths = (static, fast)
  key = jax.random.key(args.seed)
  for path in paths:  # warm-up: compilation
    path.step(prompts, row_ids, group_id_R, jax.random.fold_in(key, 10_000), args, timed=False)
  for step in range(args.steps):
    for path in paths:  # interleaved: both paths see the same load
      path.step(prompts, row_ids, group_id_R, jax.random.fold_in(key, step), args, timed=True)

  results = {path.name: path.summary() for path in paths}
  out = fast.sampler.sample(fast.state['params'], prompts, row_ids, jax.random.fold_in(key, 0))
  lengths = out.lengths_R
  print(f'workload: {args.prompts} prompts x {args.samples} samples, prompts '
        f'{args.min_prompt}-{args.max_prompt} tokens, completions: mean {lengths.mean():.1f}, '
        f'median {np.median(lengths):.0f}, max {lengths.max()} of {args.max_new}; '
        f'load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs')
  header = f"{'path':<22}{'s/step':>8}{'rollout s':>10}{'train s':>9}{'tok/s':>8}" \
           f"{'useful rollout':>16}{'useful train':>14}"
  print(header)
  for name, r in results.items():
    print(f"{name:<22}{r['seconds_per_rl_step']:>8.3f}{r['rollout_seconds']:>10.3f}"
          f"{r['train_seconds']:>9.3f}{r['tokens_per_second']:>8.0f}"
          f"{r['useful_share_rollout']:>16.1%}{r['useful_share_train']:>14.1%}")
  s, f = results['static + padded'], results['continuous + packed']
  summary = {
      'useful_share_rollout': f['useful_share_rollout'],
      'useful_share_train': f['useful_share_train'],
      'speedup_vs_static': s['seconds_per_rl_step'] / f['seconds_per_rl_step'],
      'rollout_speedup': s['rollout_seconds'] / f['rollout_seconds'],
      'train_speedup': s['train_seconds'] / f['train_seconds'],
      'static_useful_share_rollout': s['useful_share_rollout'],
      'static_useful_share_train': s['useful_share_train'],
      'completion_len_mean': float(lengths.mean()),
      'completion_len_max': int(lengths.max()),
      'load_average': os.getloadavg()[0],
      'paths': results, 'args': vars(args),
  }
  if args.out:
    with open(args.out, 'w') as fh:
      json.dump(summary, fh, indent=2, sort_keys=True)
  print(json.dumps({k: v for k, v in summary.items() if k not in ('paths', 'args')},
                   sort_keys=True))
  return summary


if __name__ == '__main__':
  main()
