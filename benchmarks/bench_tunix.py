"""sgpo_jax vs Tunix's GRPO learner: seconds per RL step on the same shapes, one run.

    bash benchmarks/setup_tunix.sh                  # once: Tunix in its own venv
    python benchmarks/bench_tunix.py                # both shapes, prints a JSON line each
    python benchmarks/bench_tunix.py --shapes fixed --steps 2   # quicker

Tunix (google-tunix 0.1.7) pins its own transformers / safetensors, so it never enters this
project's environment: this driver runs each side in its own subprocess, Tunix with the
venv's python (`--tunix_python`, default /work/venv_tunix/bin/python), sgpo_jax with the
current interpreter, one after the other for each shape.

Both sides: the tiny Qwen2 shape (4 layers, d=128, 4 query / 2 KV heads of 32, MLP 512, tied
embeddings, vocab 512, fp32, random init), 8 prompts x 8 samples, temperature 1, GRPO with
no KL term (beta 0), one policy-gradient iteration per batch, AdamW, one device. Prompts are
random token strings of exactly `prompt_len` tokens; completions run to `new_tokens` (a
random policy over 512 tokens rarely samples EOS). Shapes: fixed = prompt 12, 32 new
tokens (the issue's earlier side by side); long = prompt 64, 256 new tokens.

Timing: a step's time is the interval between consecutive calls of the reward function
(once per RL step on both sides), median over the steps after the first two (which compile).
sgpo_jax runs its own RL step (sampler -> reward -> jitted train step) with the engine and
packing given by --engine / --packing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402  (stdlib only: imports in both venvs)

SHAPES = {'fixed': (12, 32), 'long': (64, 256)}
VOCAB, PROMPTS, SAMPLES = 512, 8, 8
PAD, BOS, EOS = 0, 1, 2


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--side', choices=('driver', 'tunix', 'sgpo'), default='driver')
  p.add_argument('--shapes', default='fixed,long')
  p.add_argument('--shape', default='fixed', help='(side runs) one of ' + ', '.join(SHAPES))
  p.add_argument('--steps', type=int, default=5, help='RL steps per side, incl. 2 warm-up')
  p.add_argument('--engine', default='static', choices=('static', 'continuous'),
                 help='(sgpo side) sampler engine')
  p.add_argument('--packing', type=int, default=0, help='(sgpo side) packed train step')
  p.add_argument('--variants', default='static,continuous+packed',
                 help='(driver) sgpo_jax variants to run against the one Tunix run per shape')
  p.add_argument('--slots', type=int, default=32)
  p.add_argument('--tunix_python', default='/work/venv_tunix/bin/python')
  p.add_argument('--out', default='')
  return p.parse_args(argv)


def prompt_strings(prompt_len: int, seed: int = 0) -> list[str]:
  """Space-separated 'wN' words, one token each (BOS added by neither tokenizer)."""
  import numpy as np
  rng = np.random.default_rng(seed)
  return [' '.join(f'w{t}' for t in rng.integers(3, VOCAB, prompt_len)) for _ in range(PROMPTS)]


class WordTokenizer:
  """'wN' <-> id N: encode / decode / bos_id / eos_id / pad_id, what Tunix's adapter asks."""

  def encode(self, text, **kwargs) -> list[int]:
    del kwargs
    text = str(text)  # Tunix hands over numpy strings
    return [int(w[1:]) for w in text.split()]

  def decode(self, ids, **kwargs) -> str:
    del kwargs
    return ' '.join(f'w{int(i)}' for i in ids)

  def bos_id(self) -> int:
    return BOS

  def eos_id(self) -> int:
    return EOS

  def pad_id(self) -> int:
    return PAD


class StepClock:
  """Reward function that records when it is called: once per RL step on both sides."""

  def __init__(self):
    self.stamps: list[float] = []

  def __call__(self, completions) -> list[float]:
    self.stamps.append(time.perf_counter())
    return [float(zlib.crc32(str(c).encode()) % 2) for c in completions]

  def seconds_per_step(self) -> float:
    gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:])][1:]  # drop the compile gap
    if not gaps:
      raise SystemExit(f'need --steps >= 3 to time a step; got {len(self.stamps)} steps')
    return statistics.median(gaps)


def run_tunix(args) -> dict:
  import jax
  import optax
  from flax import nnx
  from tunix.models.qwen2 import model as qwen2
  from tunix.rl import rl_cluster as rl_cluster_lib
  from tunix.rl.grpo import grpo_learner
  from tunix.rl.rollout import base_rollout

  prompt_len, new_tokens = SHAPES[args.shape]
  cfg = qwen2.ModelConfig(num_layers=4, vocab_size=VOCAB, embed_dim=128, hidden_dim=512,
                          num_heads=4, head_dim=32, num_kv_heads=2, rope_theta=10000,
                          norm_eps=1e-6, use_tied_embedding=True)
  mesh = jax.make_mesh((1, 1), ('fsdp', 'tp'), devices=jax.devices()[:1],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with mesh:
    actor = qwen2.Qwen2(cfg, rngs=nnx.Rngs(0))
  clock = StepClock()
  training = rl_cluster_lib.RLTrainingConfig(
      actor_optimizer=optax.adamw(1e-5), eval_every_n_steps=10_000, max_steps=args.steps)
  rollout = base_rollout.RolloutConfig(
      max_tokens_to_generate=new_tokens, max_prompt_length=prompt_len,
      # Tunix pads prompts to a bucket (up to 2x) before its cache check.
      kv_cache_size=2 * prompt_len + new_tokens + 64, temperature=1.0, top_p=1.0, top_k=None)
  roles = rl_cluster_lib.Role
  cluster = rl_cluster_lib.RLCluster(
      actor=actor, reference=actor, tokenizer=WordTokenizer(),
      cluster_config=rl_cluster_lib.ClusterConfig(
          role_to_mesh={roles.ACTOR: mesh, roles.REFERENCE: mesh, roles.ROLLOUT: mesh},
          rollout_engine='vanilla', offload_to_cpu=False, training_config=training,
          rollout_config=rollout))
  learner = grpo_learner.GRPOLearner(
      cluster, grpo_learner.GRPOConfig(num_generations=SAMPLES, num_iterations=1, beta=0.0,
                                       epsilon=0.2),
      reward_fns=[lambda prompts, completions, **kw: clock(completions)])
  import numpy as np
  batch = {'prompts': np.asarray(prompt_strings(prompt_len))}
  learner.train([dict(batch) for _ in range(args.steps)])
  return {'side': 'tunix', 'shape': args.shape, 'steps': len(clock.stamps),
          'seconds_per_rl_step': clock.seconds_per_step()}


def run_sgpo(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  import numpy as np

  from sgpo_jax.config import defaults as default_config
  from sgpo_jax.generate import continuous as continuous_sampling
  from sgpo_jax.generate import sampler as sampling
  from sgpo_jax.model import transformer as model_lib
  from sgpo_jax.parallel import sharding as sharding_lib
  from sgpo_jax.rl import learner as learner_lib

  prompt_len, new_tokens = SHAPES[args.shape]
  rows = PROMPTS * SAMPLES
  cfg = model_lib.ModelConfig(vocab_size=VOCAB, d_model=128, n_layers=4, n_heads=4,
                              n_kv_heads=2, head_dim=32, d_ff=512,
                              max_len=prompt_len + new_tokens)
  c = default_config.get_config()
  c.train.rows_per_batch = rows
  c.sampling.max_prompt_len, c.sampling.max_new_tokens = prompt_len, new_tokens
  c.train.learning_rate, c.train.warmup_steps = 1e-5, 0
  c.train.loss_agg = 'seq_mean_token_mean'  # Tunix's default aggregation
  c.train.packing = bool(args.packing)
  mesh = sharding_lib.make_mesh(c.mesh, jax.devices()[:1])
  params, shardings = model_lib.init_sharded_params(cfg, mesh, jax.random.key(0))
  common = dict(max_prompt_len=prompt_len, max_new_tokens=new_tokens, stop_ids=[EOS],
                pad_id=PAD, bos_id=BOS)
  if args.engine == 'continuous':
    sampler = continuous_sampling.ContinuousSampler(cfg, mesh, shardings, slots=args.slots,
                                                    queue_rows=rows, prefill_step=16, **common)
  else:
    sampler = sampling.Sampler(cfg, mesh, shardings, rows=rows, **common)
  learner = learner_lib.Learner(cfg, mesh, shardings, c, num_steps=100)
  state = learner.init_state(params)
  tok = WordTokenizer()
  prompts = [tok.encode(p) for p in prompt_strings(prompt_len) for _ in range(SAMPLES)]
  clock = StepClock()
  key = jax.random.key(0)
  for step in range(args.steps):
    out = sampler.sample(state['params'], prompts, list(range(rows)),
                         jax.random.fold_in(key, step))
    completions = [tok.decode(row[:n]) for row, n in zip(out.tokens_RxN, out.lengths_R)]
    rewards = np.asarray(clock(completions), np.float32)
    batch = learner_lib.layout_batch(prompts, out.tokens_RxN, out.mask_RxN, out.logprobs_RxN,
                                     prompt_len, PAD)
    batch.update(rewards_R=rewards, group_id_R=np.repeat(np.arange(PROMPTS), SAMPLES),
                 valid_R=np.ones(rows, bool))
    state, metrics = learner.train_step(state, batch)
    jax.block_until_ready(metrics)
  clock.stamps.append(time.perf_counter())  # closes the last step
  return {'side': 'sgpo', 'shape': args.shape, 'engine': args.engine,
          'packing': bool(args.packing), 'steps': args.steps,
          'seconds_per_rl_step': clock.seconds_per_step()}


def run_side(python: str, side: str, shape: str, args, engine: str = 'static',
             packing: bool = False, slots: int = 32) -> dict:
  cmd = [python, os.path.abspath(__file__), '--side', side, '--shape', shape,
         '--steps', str(args.steps), '--engine', engine, '--packing', str(int(packing)),
         '--slots', str(slots)]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
  lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
  if proc.returncode or not lines:
    return {'side': side, 'shape': shape, 'error': (proc.stderr or proc.stdout)[-3000:]}
  return json.loads(lines[-1])


def main(argv=None) -> list[dict]:
  args = parse_args(argv)
  if args.side == 'tunix':
    print(json.dumps(run_tunix(args)))
    return []
  if args.side == 'sgpo':
    print(json.dumps(run_sgpo(args)))
    return []
  if not os.path.exists(args.tunix_python):
    raise SystemExit(f'--tunix_python={args.tunix_python} does not exist; run '
                     'bash benchmarks/setup_tunix.sh first.')
  results = []
  for shape in args.shapes.split(','):
    if shape not in SHAPES:
      raise SystemExit(f'unknown shape {shape!r}; use {sorted(SHAPES)}')
    load_before = os.getloadavg()
    ours = {}
    for variant in args.variants.split(','):
      # 'static', 'continuous+packed', 'continuous@64+packed' (@N: N decode slots)
      engine = 'continuous' if variant.startswith('continuous') else 'static'
      slots = int(variant.split('@')[1].split('+')[0]) if '@' in variant else args.slots
      ours[variant] = run_side(sys.executable, 'sgpo', shape, args, engine,
                               packing=variant.endswith('packed'), slots=slots)
    theirs = run_side(args.tunix_python, 'tunix', shape, args)
    row = {'shape': shape, 'prompt_len': SHAPES[shape][0], 'new_tokens': SHAPES[shape][1],
           'sgpo': ours, 'tunix': theirs, 'load_average': os.getloadavg()[0],
           'load_average_before': load_before, 'load_average_after': os.getloadavg(),
           'commit': provenance.git_commit()}
    for variant, result in ours.items():
      if 'error' not in result and 'error' not in theirs:
        row[f'speedup_vs_tunix[{variant}]'] = (theirs['seconds_per_rl_step'] /
                                               result['seconds_per_rl_step'])
    results.append(row)
    print(json.dumps(row))
  if args.out:
    with open(args.out, 'w') as fh:
      json.dump(results, fh, indent=2)
  return results


if __name__ == '__main__':
  main()
