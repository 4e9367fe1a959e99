"""Decode tokens/s of sgpo_jax's sampler against Tunix's own sampler, same Qwen3 shape and batch.

    bash benchmarks/setup_tunix.sh                  # once: Tunix in its own venv
    python benchmarks/bench_tunix_decode.py         # prints one JSON line
    python benchmarks/bench_tunix_decode.py --layers 8 --rows 16 --out results.json

Model: Qwen3-0.6B widths (d 1024, 16 query / 8 KV heads of 128, MLP 3072, QK-norm, vocab
151936, tied embeddings, rope theta 1e6), `--layers` layers (28 in the real model), random
weights, float32 weights and compute on both sides (sgpo_jax's sampling dtype on CPU).
Batch: `--rows` prompts of exactly `--prompt_len` tokens, temperature 1, no top-p / top-k
filter (both samplers draw from the full softmax).

sgpo_jax runs once per `--draws` entry (`sampling.draw`: 'gumbel' draws with
`jax.random.categorical`, as Tunix does; 'blocked' draws the same distribution from ~2
sqrt(V) random numbers, `generate/sampler.py: blocked_categorical`).

Each side runs in its own subprocess (Tunix with the venv's python, `--tunix_python`), one
after the other. Decode time is measured as a difference, the same way on both sides: the
median wall time of a whole sampling call with N = `--new_tokens` new tokens minus that of
a call with 1 new token (prefill and first token cancel, so does host-side work per call);
decode tokens/s = rows x (N - 1) / difference. Each call is warmed up (compiled) first and
then timed `--repeats` times. sgpo_jax: `generate.sampler.Sampler.generate` (prefill and
decode loop in one jitted call, donated cache). Tunix: `tunix.generate.sampler.Sampler`
called as its RL rollout calls it (`max_prompt_length` fixed, `seed` given).

The JSON line holds both rates, their ratio (ours / Tunix) and the load average before and
after; on a shared machine rerun and compare only runs made at similar load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN3_0_6B = dict(vocab=151936, d=1024, heads=16, kv_heads=8, head_dim=128, mlp=3072,
                  rope_theta=1_000_000, eps=1e-6)
# The RL-step benchmark's word tokenizer and special ids (stdlib only: imports in both venvs).
from bench_tunix import BOS, EOS, PAD, WordTokenizer, provenance  # noqa: E402,F401


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--side', choices=('driver', 'tunix', 'sgpo'), default='driver')
  p.add_argument('--layers', type=int, default=4)
  p.add_argument('--rows', type=int, default=8)
  p.add_argument('--prompt_len', type=int, default=64)
  p.add_argument('--new_tokens', type=int, default=64)
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--draw', default='gumbel', help="(sgpo side) sampling.draw")
  p.add_argument('--draws', default='gumbel,blocked', help='(driver) sgpo_jax draws to run')
  p.add_argument('--tunix_python', default='/work/venv_tunix/bin/python')
  p.add_argument('--out', default='', help='also write the JSON line to this file')
  return p.parse_args(argv)


def prompt_ids(rows: int, prompt_len: int):
  """[rows, prompt_len] prompts, each BOS then random tokens (Tunix's sampler adds the BOS)."""
  import numpy as np
  ids = np.random.default_rng(0).integers(3, 1000, (rows, prompt_len)).astype(np.int32)
  ids[:, 0] = BOS
  return ids


def decode_rate(call, rows: int, new_tokens: int, repeats: int) -> dict:
  """{decode_tokens_per_s, seconds_n, seconds_1} from call(n) = one timed sampling call."""
  def median_seconds(n):
    call(n)  # compile
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      call(n)
      times.append(time.perf_counter() - start)
    return statistics.median(times)
  seconds_1, seconds_n = median_seconds(1), median_seconds(new_tokens)
  return {'decode_tokens_per_s': rows * (new_tokens - 1) / (seconds_n - seconds_1),
          'seconds_n': seconds_n, 'seconds_1': seconds_1}


def run_sgpo(args) -> dict:
  sys.path.insert(0, REPO)
  import jax
  import ml_collections
  import numpy as np

  from sgpo_jax.generate import sampler as sampling
  from sgpo_jax.model import transformer as model_lib
  from sgpo_jax.parallel import sharding as sharding_lib

  q = QWEN3_0_6B
  cfg = model_lib.ModelConfig(
      vocab_size=q['vocab'], d_model=q['d'], n_layers=args.layers, n_heads=q['heads'],
      n_kv_heads=q['kv_heads'], head_dim=q['head_dim'], d_ff=q['mlp'],
      rope_theta=float(q['rope_theta']), rms_eps=q['eps'], qk_norm=True, tie_embeddings=True,
      max_len=4096)
  mesh = sharding_lib.make_mesh(ml_collections.ConfigDict(
      {'shape': (1, 1, 1), 'axes': ('data', 'fsdp', 'tp')}), jax.devices()[:1])
  params, shardings = model_lib.init_sharded_params(cfg, mesh, jax.random.key(0))
  prompts = prompt_ids(args.rows, args.prompt_len)
  mask, ids = np.ones_like(prompts), np.arange(args.rows, dtype=np.int32)
  samplers = {}

  def call(n):
    if n not in samplers:
      samplers[n] = sampling.Sampler(cfg, mesh, shardings, rows=args.rows,
                                     max_prompt_len=args.prompt_len, max_new_tokens=n,
                                     stop_ids=[EOS], pad_id=PAD, bos_id=BOS,
                                     min_prompt_bucket=args.prompt_len, draw=args.draw)
    out = samplers[n].generate(params, prompts, mask, ids, jax.random.key(1), temperature=1.0)
    jax.block_until_ready(out)

  rate = decode_rate(call, args.rows, args.new_tokens, args.repeats)
  return {'side': 'sgpo', 'draw': args.draw, **rate}


def run_tunix(args) -> dict:
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from tunix.generate import sampler as tunix_sampler
  from tunix.models.qwen3 import model as qwen3

  q = QWEN3_0_6B
  cfg = qwen3.ModelConfig(
      num_layers=args.layers, vocab_size=q['vocab'], embed_dim=q['d'], hidden_dim=q['mlp'],
      num_heads=q['heads'], head_dim=q['head_dim'], num_kv_heads=q['kv_heads'],
      rope_theta=q['rope_theta'], norm_eps=q['eps'], use_tied_embedding=True,
      dtype=jnp.float32, param_dtype=jnp.float32)
  mesh = jax.make_mesh((1, 1), ('fsdp', 'tp'), devices=jax.devices()[:1],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with mesh:
    model = qwen3.Qwen3(cfg, rngs=nnx.Rngs(0))
  sampler = tunix_sampler.Sampler(
      model, WordTokenizer(), tunix_sampler.CacheConfig(
          cache_size=args.prompt_len + args.new_tokens, num_layers=args.layers,
          num_kv_heads=q['kv_heads'], head_dim=q['head_dim']))
  texts = [' '.join(f'w{t}' for t in row[1:]) for row in prompt_ids(args.rows, args.prompt_len)]

  def call(n):
    with mesh:
      out = sampler(texts, max_generation_steps=n, max_prompt_length=args.prompt_len,
                    temperature=1.0, top_p=1.0, seed=1, eos_tokens=[EOS])
    jax.block_until_ready(out.tokens)

  return {'side': 'tunix', **decode_rate(call, args.rows, args.new_tokens, args.repeats)}


def run_side(python: str, side: str, args, draw: str = 'gumbel') -> dict:
  cmd = [python, os.path.abspath(__file__), '--side', side, '--draw', draw,
         '--layers', str(args.layers),
         '--rows', str(args.rows), '--prompt_len', str(args.prompt_len),
         '--new_tokens', str(args.new_tokens), '--repeats', str(args.repeats)]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                        env=dict(os.environ, JAX_PLATFORMS='cpu'))
  lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
  if proc.returncode or not lines:
    return {'side': side, 'error': (proc.stderr or proc.stdout)[-3000:]}
  return json.loads(lines[-1])


def main(argv=None) -> dict:
  args = parse_args(argv)
  if args.side != 'driver':
    print(json.dumps((run_sgpo if args.side == 'sgpo' else run_tunix)(args)))
    return {}
  if not os.path.exists(args.tunix_python):
    raise SystemExit(f'--tunix_python={args.tunix_python} does not exist; run '
                     'bash benchmarks/setup_tunix.sh first.')
  load_before = os.getloadavg()
  ours = {draw: run_side(sys.executable, 'sgpo', args, draw) for draw in args.draws.split(',')}
  theirs = run_side(args.tunix_python, 'tunix', args)
  row = {'model': 'qwen3-0.6B widths', 'layers': args.layers, 'rows': args.rows,
         'prompt_len': args.prompt_len, 'new_tokens': args.new_tokens, 'dtype': 'float32',
         'sgpo': ours, 'tunix': theirs, 'commit': provenance.git_commit()}
  for draw, result in ours.items():
    if 'error' not in result and 'error' not in theirs:
      row[f'decode_speedup_vs_tunix[{draw}]'] = (result['decode_tokens_per_s'] /
                                                 theirs['decode_tokens_per_s'])
  row['load_average_before'], row['load_average_after'] = load_before, os.getloadavg()
  print(json.dumps(row))
  if args.out:
    with open(args.out, 'w') as fh:
      fh.write(json.dumps(row, indent=2) + '\n')
  return row


if __name__ == '__main__':
  main()
