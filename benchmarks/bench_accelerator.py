"""Train-step MFU and decode tokens/s against the HBM roofline, on one accelerator.

    bash benchmarks/bench_accelerator.sh          # Qwen2.5-0.5B shape, bf16, <= 8 minutes
    python benchmarks/bench_accelerator.py --hidden 32 --layers 1 --heads 2 --kv_heads 1 \
        --head_dim 16 --intermediate 64 --vocab 128 --train_rows 2 --train_len 32 \
        --decode_rows 2 --prompt_len 8 --decode_len 8 --peak_tflops 1 --hbm_gbps 10  # CPU smoke

The policy is randomly initialised with the Qwen2.5-0.5B shape (hidden 896, 24 layers, 14
query / 2 KV heads of 64, MLP 4864, vocab 151936, QKV bias, tied embeddings), compute in
bfloat16 (parameters float32 for training, bfloat16 for decoding).

- Train: the package's jitted GRPO train step (forward + backward + AdamW) on a full
  [train_rows, train_len] batch. MFU = analytic train FLOPs (`flops.train_flops_per_token`,
  attention over the whole static length) / step time / the chip's peak bf16 FLOP/s.
- Decode: the package's static sampler, no stop token, `decode_len` new tokens per row.
  Decode time = (prefill + decode) - (prefill alone). The HBM roofline of one decode step is
  (bf16 parameter bytes + KV-cache bytes read at the mean context) / HBM bandwidth; its
  tokens/s is decode_rows over that time.

Peak FLOP/s and HBM bandwidth come from a small table keyed by the device kind, or from
--peak_tflops / --hbm_gbps. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sgpo_jax.config import defaults as default_config  # noqa: E402
from sgpo_jax.generate import sampler as sampling  # noqa: E402
from sgpo_jax.model import flops  # noqa: E402
from sgpo_jax.model import transformer as model_lib  # noqa: E402
from sgpo_jax.parallel import sharding as sharding_lib  # noqa: E402
from sgpo_jax.rl import learner as learner_lib  # noqa: E402

# device kind substring -> (dense bf16 TFLOP/s, HBM GB/s), vendor data-sheet numbers.
CHIPS = {
    'H200': (989.0, 4800.0), 'H100': (989.0, 3350.0), 'A100': (312.0, 2039.0),
    'L4': (121.0, 300.0), 'A10': (125.0, 600.0), 'TPU v6': (918.0, 1640.0),
    'TPU v5p': (459.0, 2765.0), 'TPU v5': (197.0, 819.0), 'TPU v4': (275.0, 1228.0),
}


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--hidden', type=int, default=896)
  p.add_argument('--layers', type=int, default=24)
  p.add_argument('--heads', type=int, default=14)
  p.add_argument('--kv_heads', type=int, default=2)
  p.add_argument('--head_dim', type=int, default=64)
  p.add_argument('--intermediate', type=int, default=4864)
  p.add_argument('--vocab', type=int, default=151936)
  p.add_argument('--train_rows', type=int, default=16)
  p.add_argument('--train_len', type=int, default=1024)
  p.add_argument('--logprob_chunk', type=int, default=256)
  p.add_argument('--remat', type=int, default=0)
  p.add_argument('--decode_rows', type=int, default=256)
  p.add_argument('--prompt_len', type=int, default=128)
  p.add_argument('--decode_len', type=int, default=256)
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--peak_tflops', type=float, default=0.0, help='0 = from the device table')
  p.add_argument('--hbm_gbps', type=float, default=0.0, help='0 = from the device table')
  return p.parse_args(argv)


def chip_numbers(args) -> tuple[str, float, float]:
  kind = jax.devices()[0].device_kind
  peak, hbm = next((v for k, v in CHIPS.items() if k.lower() in kind.lower()), (0.0, 0.0))
  peak, hbm = args.peak_tflops or peak, args.hbm_gbps or hbm
  if not peak or not hbm:
    raise SystemExit(f'device kind {kind!r} is not in the table {sorted(CHIPS)}; pass '
                     '--peak_tflops and --hbm_gbps.')
  return kind, peak * 1e12, hbm * 1e9


def best_time(fn, repeats: int) -> float:
  jax.block_until_ready(fn())  # compile + warm up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return min(times)


def main(argv=None) -> dict:
  args = parse_args(argv)
  kind, peak, hbm = chip_numbers(args)
  fields = dict(vocab_size=args.vocab, d_model=args.hidden, n_layers=args.layers,
                n_heads=args.heads, n_kv_heads=args.kv_heads, head_dim=args.head_dim,
                d_ff=args.intermediate, qkv_bias=True, tie_embeddings=True,
                rope_theta=1e6, max_len=max(args.train_len, args.prompt_len + args.decode_len),
                dtype='bfloat16', remat=bool(args.remat))
  mesh = sharding_lib.make_mesh(default_config.get_config().mesh, jax.devices()[:1])
  result: dict = {'device_kind': kind, 'peak_tflops': peak / 1e12, 'hbm_gbps': hbm / 1e9}

  # ---------------------------------------------------------------- train step MFU
  train_cfg = model_lib.ModelConfig(param_dtype='float32', **fields)
  params, shardings = model_lib.init_sharded_params(train_cfg, mesh, jax.random.key(0))
  c = default_config.get_config()
  c.train.rows_per_batch = args.train_rows
  c.sampling.max_prompt_len = args.train_len // 2
  c.sampling.max_new_tokens = args.train_len - args.train_len // 2
  c.train.logprob_chunk = args.logprob_chunk
  learner = learner_lib.Learner(train_cfg, mesh, shardings, c, num_steps=100)
  state = learner.init_state(params)
  rng = np.random.default_rng(0)
  R, T = args.train_rows, args.train_len
  P = c.sampling.max_prompt_len
  batch = {
      'tokens_RxT': rng.integers(3, args.vocab, (R, T)).astype(np.int32),
      'mask_RxT': np.ones((R, T), np.int32),
      'completion_mask_RxT1': (np.arange(T - 1)[None] >= P - 1).repeat(R, 0).astype(np.int32),
      'old_logp_RxT1': np.full((R, T - 1), -12.0, np.float32),
      'rewards_R': rng.integers(0, 2, R).astype(np.float32),
      'group_id_R': (np.arange(R) // 4).astype(np.int32), 'valid_R': np.ones(R, bool),
  }
  holder = {'state': state}

  def train_once():
    holder['state'], metrics = learner.train_step(holder['state'], batch)
    return metrics
  step_s = best_time(train_once, args.repeats)
  train_flops = R * (T - 1) * flops.train_flops_per_token(train_cfg, T - 1)
  result.update(train_step_seconds=step_s, train_tokens_per_second=R * (T - 1) / step_s,
                train_tflops=train_flops / step_s / 1e12, train_mfu=train_flops / step_s / peak)
  state = holder = learner = params = None  # free the train step's buffers before decode

  # ---------------------------------------------------------------- decode vs HBM roofline
  dec_cfg = model_lib.ModelConfig(param_dtype='bfloat16', **fields)
  params, shardings = model_lib.init_sharded_params(dec_cfg, mesh, jax.random.key(1))
  prompts = rng.integers(3, args.vocab, (args.decode_rows, args.prompt_len)).astype(np.int32)
  mask = np.ones_like(prompts)
  ids = np.arange(args.decode_rows, dtype=np.int32)
  key = jax.random.key(2)

  def timed(new_tokens: int) -> float:
    sampler = sampling.Sampler(dec_cfg, mesh, shardings, rows=args.decode_rows,
                               max_prompt_len=args.prompt_len, max_new_tokens=new_tokens,
                               stop_ids=[], pad_id=0)
    return best_time(lambda: sampler.generate(params, prompts, mask, ids, key), args.repeats)
  prefill_s = timed(1)
  full_s = timed(args.decode_len)
  decode_s = full_s - prefill_s
  decode_steps = args.decode_len - 1
  counts = flops.param_counts(dec_cfg)
  param_bytes = 2 * (counts['total'])
  mean_context = args.prompt_len + args.decode_len / 2
  kv_bytes = (args.decode_rows * mean_context * args.layers * 2 * args.kv_heads * args.head_dim
              * 2)
  roofline_step_s = (param_bytes + kv_bytes) / hbm
  roofline_tps = args.decode_rows / roofline_step_s
  # At smoke sizes timing noise can exceed the decode time itself: then no decode rate.
  decode_tps = args.decode_rows * decode_steps / decode_s if decode_s > 0 else None
  result.update(decode_seconds=decode_s, prefill_seconds=prefill_s,
                decode_tokens_per_second=decode_tps, roofline_tokens_per_second=roofline_tps,
                decode_fraction_of_roofline=None if decode_tps is None else
                decode_tps / roofline_tps,
                param_bytes_bf16=param_bytes, kv_bytes_per_step=kv_bytes,
                args=vars(args))
  print(json.dumps(result, sort_keys=True))
  return result


if __name__ == '__main__':
  jnp.zeros(())  # initialise the backend before timing anything
  main()
