"""Foundation throughput: sampler tokens/s and a train-shaped forward+backward tokens/s.

Uses the default tiny policy of the shipped default config on whatever devices are visible (the
mesh comes from the config). Compile time is measured separately (`lower().compile()` for the
train step, first call minus a steady call for the sampler) and excluded from tokens/s.

    python benchmarks/bench_foundation.py [--iters 10] [--rows 256] [--batch 128 --seq 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import jax
import jax.numpy as jnp
import numpy as np

from sgpo_jax import configs
from sgpo_jax.generate import sampler as sampling
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib

PAD, BOS = 0, 1


def load_default_config():
  spec = importlib.util.spec_from_file_location('default_config', configs.path('default'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def bench_sampler(cfg, mesh, shardings, params, config, rows: int, iters: int) -> dict:
  s = config.sampling
  # No stop ids: every row generates max_new_tokens, so the loop never exits early.
  sampler = sampling.Sampler(cfg, mesh, shardings, rows=rows, max_prompt_len=s.max_prompt_len,
                             max_new_tokens=s.max_new_tokens, stop_ids=[], pad_id=PAD,
                             bos_id=BOS, min_prompt_bucket=s.min_prompt_bucket)
  rng = np.random.default_rng(0)
  prompts = [[BOS] + rng.integers(3, cfg.vocab_size, s.max_prompt_len - 1).tolist()
             for _ in range(rows)]
  tokens_RxP, mask_RxP = sampler.pad_prompts(prompts)
  row_ids_R = np.arange(rows, dtype=np.int32)

  def call(seed):
    out = sampler.generate(params, tokens_RxP, mask_RxP, row_ids_R, jax.random.key(seed),
                           temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
    jax.block_until_ready(out)

  start = time.perf_counter()
  call(0)
  first = time.perf_counter() - start
  start = time.perf_counter()
  for i in range(iters):
    call(i + 1)
  steady = (time.perf_counter() - start) / iters
  new_tokens = rows * s.max_new_tokens
  return {'rows': rows, 'prompt_len': tokens_RxP.shape[1], 'new_tokens': s.max_new_tokens,
          'compile_s': first - steady, 'step_s': steady, 'tokens_per_s': new_tokens / steady,
          'compiles': sampler.compile_count}


def bench_train_shape(cfg, mesh, params, batch: int, seq: int, iters: int) -> dict:
  model = model_lib.Transformer(cfg)

  def loss_fn(params, tokens_BxT, mask_BxT):
    logits_BxTxV = model_lib.forward(model, params, tokens_BxT, mask_BxT)
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV[:, :-1])
    nll_BxT = -jnp.take_along_axis(logp_BxTxV, tokens_BxT[:, 1:, None], -1)[..., 0]
    weight_BxT = (mask_BxT[:, 1:] * mask_BxT[:, :-1]).astype(jnp.float32)
    return jnp.sum(nll_BxT * weight_BxT) / jnp.maximum(jnp.sum(weight_BxT), 1.0)

  step = jax.jit(jax.value_and_grad(loss_fn))
  rng = np.random.default_rng(1)
  tokens_BxT = rng.integers(3, cfg.vocab_size, (batch, seq)).astype(np.int32)
  mask_BxT = np.ones((batch, seq), np.int32)
  tokens_BxT, mask_BxT = sharding_lib.shard_batch(mesh, (tokens_BxT, mask_BxT))
  start = time.perf_counter()
  compiled = step.lower(params, tokens_BxT, mask_BxT).compile()
  compile_s = time.perf_counter() - start
  jax.block_until_ready(compiled(params, tokens_BxT, mask_BxT))  # warm-up
  start = time.perf_counter()
  for _ in range(iters):
    out = compiled(params, tokens_BxT, mask_BxT)
  jax.block_until_ready(out)
  steady = (time.perf_counter() - start) / iters
  return {'batch': batch, 'seq': seq, 'compile_s': compile_s, 'step_s': steady,
          'tokens_per_s': batch * seq / steady, 'loss': float(out[0])}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--iters', type=int, default=10)
  parser.add_argument('--rows', type=int, default=0, help='0 = config.train.rows_per_batch')
  parser.add_argument('--batch', type=int, default=128)
  parser.add_argument('--seq', type=int, default=20)
  args = parser.parse_args()

  config = load_default_config()
  cfg = model_lib.ModelConfig.from_config(config.model)
  cfg.validate()
  mesh = sharding_lib.make_mesh(config.mesh)
  start = time.perf_counter()
  params, shardings = model_lib.init_sharded_params(cfg, mesh, jax.random.key(config.seed))
  jax.block_until_ready(params)
  init_s = time.perf_counter() - start
  n_params = sum(x.size for x in jax.tree.leaves(params))
  print(f'devices={len(jax.devices())} ({jax.devices()[0].platform}) mesh={dict(mesh.shape)} '
        f'params={n_params:,} init(incl. compile)={init_s:.2f}s')

  rows = args.rows or config.train.rows_per_batch  # what train.py's sampler runs
  rows -= rows % sharding_lib.batch_size_multiple(mesh)
  r = bench_sampler(cfg, mesh, shardings, params, config, rows, args.iters)
  print(f"sampler: {r['rows']} rows x {r['new_tokens']} new tokens (prompt bucket "
        f"{r['prompt_len']}): {r['step_s'] * 1e3:.1f} ms/call, {r['tokens_per_s']:,.0f} tokens/s; "
        f"compile {r['compile_s']:.2f}s ({r['compiles']} compilation)")

  t = bench_train_shape(cfg, mesh, params, args.batch, args.seq, args.iters)
  print(f"train-shaped fwd+bwd: [{t['batch']}, {t['seq']}] tokens: "
        f"{t['step_s'] * 1e3:.1f} ms/step, {t['tokens_per_s']:,.0f} tokens/s; "
        f"compile {t['compile_s']:.2f}s (loss {t['loss']:.3f})")


if __name__ == '__main__':
  main()
