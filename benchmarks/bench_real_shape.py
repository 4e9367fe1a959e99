"""The policy at Qwen3-0.6B widths on CPU: sampler memory, prefill memory, compile time against
depth, decode and train throughput; this tree against an earlier commit, in one run.

    python benchmarks/bench_real_shape.py                       # this tree vs commit 09e509c
    python benchmarks/bench_real_shape.py --baseline_ref ''     # this tree only
    python benchmarks/bench_real_shape.py --quick               # smaller shapes, minutes
    python benchmarks/bench_real_shape.py --out benchmarks/results/bench_real_shape.json

Widths are Qwen3-0.6B's (d 1024, 16 query heads and 8 KV heads of 128, MLP 3072, QK-norm,
vocab 151936); layers and rows are scaled down so it runs on a small CPU machine. Each side
runs in its own subprocess (`--measure`) with PYTHONPATH on its tree; the baseline tree is a
`git worktree` of `--baseline_ref` made in a temporary directory. Prints one JSON line per
side, then a last line with both sides and the ratios (ours / baseline).

Figures (memory from XLA's compiled `memory_analysis()`, nothing allocated for them):
- sampler_temp_over_cache: temp bytes of the compiled static sampler (prefill + decode loop)
  over the bytes of its KV cache, at `--mem_layers` layers, `--mem_rows` rows, prompt 512,
  1024 new tokens.
- prefill_peak_bytes: temp bytes of one compiled prefill forward (T = 512 into a 1536-slot
  cache) at `--mem_rows` rows.
- compile_s_28_over_4 (train step and sampler): compile seconds at 28 layers over 4 layers
  (after one throwaway compile, so backend start-up is not counted).
The sides run one after the other: throughput ratios are only as good as the machine's
quiet; their load averages are printed.
- decode_tokens_per_s: generated tokens per second of the static sampler (`--run_layers`
  layers, `--run_rows` rows, prompt 64, `--new_tokens` new tokens), median of 3 after warm-up.
- decode_tokens_per_s_bfloat16 (trees with sampling.param_dtype): the same on a bfloat16
  copy of the weights with bfloat16 compute.
- train_tokens_per_s: tokens per second of a jitted AdamW step on a token loss (rows x 256).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN3_0_6B = dict(vocab_size=151936, d_model=1024, n_heads=16, n_kv_heads=8, head_dim=128,
                  d_ff=3072, qk_norm=True, rope_theta=1000000.0, max_len=4096)


def _model_cfg(model_lib, n_layers: int, **extra):
  names = {f.name for f in dataclasses.fields(model_lib.ModelConfig)}
  fields = {k: v for k, v in {**QWEN3_0_6B, **extra}.items() if k in names}
  return model_lib.ModelConfig(n_layers=n_layers, **fields)


def _abstract_params(model_lib, cfg):
  import flax.linen as nn
  import jax
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                      nn.meta.unbox(model_lib.abstract_params(cfg)))


def _sampler(cfg, rows, prompt_len, new_tokens):
  import jax
  import ml_collections

  from sgpo_jax.generate import sampler as sampling
  from sgpo_jax.model import transformer as model_lib
  from sgpo_jax.parallel import sharding as sharding_lib
  mesh = sharding_lib.make_mesh(ml_collections.ConfigDict(
      {'shape': (1, 1, 1), 'axes': ('data', 'fsdp', 'tp')}), jax.devices()[:1])
  shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh)
  return sampling.Sampler(cfg, mesh, shardings, rows=rows, max_prompt_len=prompt_len,
                          max_new_tokens=new_tokens, stop_ids=[2], pad_id=0, bos_id=1,
                          min_prompt_bucket=prompt_len)


def _sampler_args(sampler, params, rows, prompt_len):
  """Arguments of the compiled generator: (params, [cache,] prompt, mask, ids, rng, knobs)."""
  import jax
  import jax.numpy as jnp
  i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)  # noqa: E731
  args = [params]
  if hasattr(sampler, 'new_cache'):  # the cache is a donated argument
    cache = jax.eval_shape(lambda: sampler.new_cache(prompt_len))
    args.append(cache)
  args += [i32(rows, prompt_len), i32(rows, prompt_len), i32(rows),
           jax.eval_shape(lambda: jax.random.key(0)), jax.ShapeDtypeStruct((), jnp.float32),
           jax.ShapeDtypeStruct((), jnp.float32), i32()]
  return args


def _cache_bytes(cfg, rows, slots):
  import numpy as np
  return 2 * cfg.n_layers * rows * slots * cfg.n_kv_heads * cfg.head_dim * np.dtype(
      cfg.dtype).itemsize


def sampler_memory(model_lib, layers, rows, prompt_len=512, new_tokens=1024):
  cfg = _model_cfg(model_lib, layers)
  sampler = _sampler(cfg, rows, prompt_len, new_tokens)
  args = _sampler_args(sampler, _abstract_params(model_lib, cfg), rows, prompt_len)
  compiled = sampler._generate_jit.lower(*args).compile()
  temp = compiled.memory_analysis().temp_size_in_bytes
  cache = _cache_bytes(cfg, rows, prompt_len + new_tokens)
  return {'sampler_temp_bytes': int(temp), 'kv_cache_bytes': int(cache),
          'sampler_temp_over_cache': temp / cache}


def prefill_memory(model_lib, layers, rows, prompt_len=512, slots=1536):
  import jax
  import jax.numpy as jnp
  cfg = _model_cfg(model_lib, layers)
  model = model_lib.Transformer(cfg)
  params = _abstract_params(model_lib, cfg)
  cache = jax.eval_shape(lambda: model_lib.init_cache(cfg, rows, slots))

  def prefill(params, cache, tokens, mask):
    positions = model_lib.positions_from_mask(mask)
    kv_mask = jnp.concatenate([mask.astype(bool), jnp.ones((rows, slots - prompt_len), bool)], 1)
    hidden, cache = model.apply({'params': params}, tokens, positions, kv_mask, cache, 0)
    return model_lib.logits_from_hidden(params, cfg, hidden[:, -1:]), cache

  tokens = jax.ShapeDtypeStruct((rows, prompt_len), jnp.int32)
  compiled = jax.jit(prefill, donate_argnums=(1,)).lower(params, cache, tokens, tokens).compile()
  return {'prefill_peak_bytes': int(compiled.memory_analysis().temp_size_in_bytes)}


def _train_step(model_lib, cfg):
  import jax
  import jax.numpy as jnp
  import optax
  model = model_lib.Transformer(cfg)
  optimizer = optax.adamw(1e-5)

  def loss_fn(params, tokens, mask):
    logits = model_lib.forward(model, params, tokens[:, :-1], mask[:, :-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    return -jnp.sum(picked * mask[:, 1:]) / jnp.sum(mask[:, 1:])

  def step(params, opt_state, tokens, mask):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, mask)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return jax.jit(step, donate_argnums=(0, 1)), optimizer


def compile_seconds(model_lib, layers, rows=2, seq=256, prompt_len=64, new_tokens=64):
  import jax
  import jax.numpy as jnp
  cfg = _model_cfg(model_lib, layers, remat=True)
  params = _abstract_params(model_lib, cfg)
  step, optimizer = _train_step(model_lib, cfg)
  opt_state = jax.eval_shape(optimizer.init, params)
  tokens = jax.ShapeDtypeStruct((rows, seq), jnp.int32)
  start = time.perf_counter()
  step.lower(params, opt_state, tokens, tokens).compile()
  train_s = time.perf_counter() - start
  sampler = _sampler(_model_cfg(model_lib, layers), rows, prompt_len, new_tokens)
  args = _sampler_args(sampler, params, rows, prompt_len)
  start = time.perf_counter()
  sampler._generate_jit.lower(*args).compile()
  return {'train_compile_s': train_s, 'sampler_compile_s': time.perf_counter() - start}


def decode_rate(model_lib, cfg, params, rows, new_tokens, prompt_len=64) -> float:
  """Generated tokens per second of the static sampler, median of 3 calls after a warm-up."""
  import jax
  import numpy as np
  sampler = _sampler(cfg, rows, prompt_len, new_tokens)
  prompts = np.random.default_rng(0).integers(3, 1000, (rows, prompt_len)).astype(np.int32)
  mask = np.ones_like(prompts)
  ids = np.arange(rows, dtype=np.int32)

  def sample():
    out = sampler.generate(params, prompts, mask, ids, jax.random.key(1), temperature=1.0)
    jax.block_until_ready(out)
    return int(np.asarray(out[2]).sum())

  sample()
  times, tokens = [], 0
  for _ in range(3):
    start = time.perf_counter()
    tokens = sample()
    times.append(time.perf_counter() - start)
  return tokens / statistics.median(times)


def throughput(model_lib, layers, rows, new_tokens, train_rows=2, train_seq=256):
  import jax
  import numpy as np
  cfg = _model_cfg(model_lib, layers)
  params = model_lib.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  out = {'decode_tokens_per_s': decode_rate(model_lib, cfg, params, rows, new_tokens)}
  try:  # sampling.param_dtype: the same sampler on a bfloat16 copy (trees that have it)
    from sgpo_jax.generate import sampling_dtype
  except ImportError:
    sampling_dtype = None
  if sampling_dtype is not None:
    bf16_cfg = sampling_dtype.sampling_model_config(cfg, 'bfloat16')
    out['decode_tokens_per_s_bfloat16'] = decode_rate(
        model_lib, bf16_cfg, sampling_dtype.cast_params(params, 'bfloat16'), rows, new_tokens)
  step, optimizer = _train_step(model_lib, dataclasses.replace(cfg, remat=True))
  opt_state = optimizer.init(params)
  batch = rng.integers(3, 1000, (train_rows, train_seq)).astype(np.int32)
  bmask = np.ones_like(batch)
  params, opt_state, loss = step(params, opt_state, batch, bmask)
  jax.block_until_ready(loss)
  times = []
  for _ in range(3):
    start = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, batch, bmask)
    jax.block_until_ready(loss)
    times.append(time.perf_counter() - start)
  out['train_tokens_per_s'] = train_rows * train_seq / statistics.median(times)
  return out


def measure(args) -> dict:
  import jax

  from sgpo_jax.model import transformer as model_lib
  jax.config.update('jax_platforms', 'cpu')
  out = {'tree': os.path.dirname(os.path.dirname(model_lib.__file__))}
  jax.jit(lambda x: x + 1).lower(1.0).compile()  # backend start-up is not a compile second
  out.update(sampler_memory(model_lib, args.mem_layers, args.mem_rows))
  out.update(prefill_memory(model_lib, args.mem_layers, args.mem_rows))
  shallow = compile_seconds(model_lib, 4)
  deep = compile_seconds(model_lib, 28)
  out.update({f'{k}_4': v for k, v in shallow.items()})
  out.update({f'{k}_28': v for k, v in deep.items()})
  out['compile_s_28_over_4'] = {k: deep[k] / shallow[k] for k in shallow}
  out.update(throughput(model_lib, args.run_layers, args.run_rows, args.new_tokens))
  out['load_average'] = os.getloadavg()
  return out


def _run_side(tree: str, args) -> dict:
  env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS='cpu')
  cmd = [sys.executable, os.path.abspath(__file__), '--measure'] + [
      f'--{k}={getattr(args, k)}' for k in ('mem_layers', 'mem_rows', 'run_layers', 'run_rows',
                                            'new_tokens')]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  if proc.returncode:
    raise RuntimeError(f'measurement in {tree} failed:\n{proc.stderr[-3000:]}')
  return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--measure', action='store_true', help='measure the tree on PYTHONPATH')
  parser.add_argument('--baseline_ref', default='09e509c')
  parser.add_argument('--mem_layers', type=int, default=28)
  parser.add_argument('--mem_rows', type=int, default=4)
  parser.add_argument('--run_layers', type=int, default=2)
  parser.add_argument('--run_rows', type=int, default=8)
  parser.add_argument('--new_tokens', type=int, default=64)
  parser.add_argument('--quick', action='store_true')
  parser.add_argument('--out', default='',
                      help='also write the last line, with the commit and the load average '
                           'before and after, to this results file')
  args = parser.parse_args()
  if args.quick:
    args.mem_rows, args.run_rows, args.new_tokens = 2, 4, 16
  if args.measure:
    print(json.dumps(measure(args)))
    return
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import provenance
  load_before = provenance.load_average()
  ours = _run_side(REPO, args)
  print(json.dumps({'side': 'ours', **ours}), flush=True)
  result = {'ours': ours, 'commit': provenance.git_commit(), 'load_average_before': load_before,
            'args': vars(args)}
  if args.baseline_ref:
    with tempfile.TemporaryDirectory() as tmp:
      tree = os.path.join(tmp, 'baseline')
      subprocess.run(['git', '-C', REPO, 'worktree', 'add', '--detach', tree, args.baseline_ref],
                     check=True, capture_output=True)
      try:
        base = _run_side(tree, args)
      finally:
        subprocess.run(['git', '-C', REPO, 'worktree', 'remove', '--force', tree], check=False,
                       capture_output=True)
    print(json.dumps({'side': 'baseline', 'ref': args.baseline_ref, **base}), flush=True)
    result['baseline'] = base
    result['baseline_ref'] = args.baseline_ref
    result['ratio'] = {k: ours[k] / base[k] for k in (
        'sampler_temp_over_cache', 'prefill_peak_bytes', 'decode_tokens_per_s',
        'train_tokens_per_s')}
    result['ratio']['compile_s_28_over_4'] = {
        k: ours['compile_s_28_over_4'][k] / base['compile_s_28_over_4'][k]
        for k in ours['compile_s_28_over_4']}
  result['load_average_after'] = provenance.load_average()
  print(json.dumps(result))
  if args.out:
    with open(args.out, 'w') as fh:
      json.dump(result, fh, indent=1)
      fh.write('\n')


if __name__ == '__main__':
  main()
