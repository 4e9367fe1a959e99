"""Qwen3-0.6B-shaped sampler and train step on one accelerator: peak memory, decode speed
against the HBM roofline, train-step MFU, and the dry run's prediction beside them.

    bash benchmarks/accelerator_real_shape.sh            # one GPU / TPU chip, <= 8 minutes
    python benchmarks/accelerator_real_shape.py --smoke  # tiny shape, CPU (the test runs it)

The config is `qwen3_0_6b_gsm8k:gpu=1` (1x1x1 mesh, its dtypes, remat and
log-prob chunk) with random weights (`model.hf_path=''`) and the batch sizes below; the
sampler and learner are the trainer's own (`generate.engines.make_sampler`, `rl.learner.Learner`), so
the numbers follow the code. Prints a few lines, then one JSON object as the last line.

- decode: the static sampler with no stop token, `--decode_rows` rows of `--prompt_len`
  prompt tokens, `--new_tokens` new tokens. Decode time = (prompt + N new) - (prompt + 1
  new): the prefill cancels. The HBM roofline of one decode step reads every weight once
  (in the dtype the sampler is given: the trainer passes its master params) plus the KV
  cache up to the mean context, `rows x (P + N/2) x L x 2 x K x hd x 2 bytes (bf16)`;
  roofline tokens/s = rows / (bytes / HBM bandwidth). Reported: measured / roofline.
- train: one optimizer step of the learner on `--train_rows` rows x `--train_len` tokens.
  MFU = model FLOPs (`model/flops.py`: train_flops_per_token over T - 1 targets; remat's
  recomputation is not model FLOPs) / step time / the chip's peak dense bf16 FLOP/s.
- memory: `device.memory_stats()['peak_bytes_in_use']` after each phase (null on CPU),
  next to `planning/compiled_memory.py`'s compiled peak of the same programs (the dry run).

Bandwidth and peak FLOP/s come from `parallel/devices.py` by device kind (H100 SXM 3.35 TB/s,
H200 4.8 TB/s, 989 TFLOP/s bf16), or --hbm_gbps / --peak_tflops.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from bench_accelerator import best_time  # noqa: E402  (this folder is on sys.path)

from sgpo_jax import configs  # noqa: E402
from sgpo_jax.config.args import load_config_module  # noqa: E402
from sgpo_jax.generate import engines  # noqa: E402
from sgpo_jax.model import flops  # noqa: E402
from sgpo_jax.model import transformer as model_lib  # noqa: E402
from sgpo_jax.parallel import devices  # noqa: E402
from sgpo_jax.parallel import sharding as sharding_lib  # noqa: E402
from sgpo_jax.planning import compiled_memory  # noqa: E402
from sgpo_jax.rl import learner as learner_lib  # noqa: E402

# A tiny model of the same structure (QK-norm, GQA, tied embeddings) for --smoke.
SMOKE_MODEL = dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                   head_dim=16, d_ff=128)


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--smoke', action='store_true', help='tiny shape and batch (CPU test)')
  p.add_argument('--decode_rows', type=int, default=64)
  p.add_argument('--prompt_len', type=int, default=512)
  p.add_argument('--new_tokens', type=int, default=512)
  p.add_argument('--train_rows', type=int, default=8)
  p.add_argument('--train_len', type=int, default=1536)  # the config's 512 + 1024
  p.add_argument('--micro_batches', type=int, default=1)
  p.add_argument('--repeats', type=int, default=3)
  p.add_argument('--no_predict', action='store_true', help="skip the dry run's compile")
  p.add_argument('--peak_tflops', type=float, default=0.0, help='0: from parallel/devices.py')
  p.add_argument('--hbm_gbps', type=float, default=0.0, help='0: from parallel/devices.py')
  args = p.parse_args(argv)
  if args.smoke:
    args.decode_rows, args.prompt_len, args.new_tokens = 2, 8, 8
    args.train_rows, args.train_len, args.repeats = 2, 16, 1
  return args


def make_config(args):
  c = load_config_module(configs.path('qwen3_0_6b_gsm8k')).get_config('gpu=1')
  c.model.hf_path = ''  # random weights
  if args.smoke:
    c.model.update(SMOKE_MODEL)
  c.train.rows_per_batch = args.train_rows
  c.train.micro_batches = args.micro_batches
  c.sampling.max_prompt_len = args.train_len // 3
  c.sampling.max_new_tokens = args.train_len - args.train_len // 3
  c.train.logprob_chunk = min(int(c.train.logprob_chunk), args.train_len)
  return c


def chip(args) -> dict:
  device = jax.devices()[0]
  spec = devices.spec_for_kind(device.device_kind)
  peak = args.peak_tflops * 1e12 or (spec.peak_bf16_flops if spec else 0.0)
  hbm = args.hbm_gbps * 1e9 or (spec.hbm_bandwidth if spec else 0.0)
  return {'device_kind': device.device_kind, 'device': spec.name if spec else None,
          'peak_bf16_flops': peak or None, 'hbm_bandwidth': hbm or None}


def peak_bytes() -> int | None:
  stats = jax.devices()[0].memory_stats()
  return int(stats['peak_bytes_in_use']) if stats and 'peak_bytes_in_use' in stats else None


def decode_roofline(cfg: model_lib.ModelConfig, weight_bytes: int, rows: int, prompt_len: int,
                    new_tokens: int, hbm_bandwidth: float | None) -> dict:
  """Bytes one decode step must read and the tokens/s that allows (module docstring)."""
  mean_context = prompt_len + new_tokens / 2
  kv_bytes = rows * mean_context * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * 2
  step_bytes = weight_bytes + kv_bytes
  tps = rows / (step_bytes / hbm_bandwidth) if hbm_bandwidth else None
  return {'weight_bytes': weight_bytes, 'kv_bytes_per_step': kv_bytes,
          'bytes_per_decode_step': step_bytes, 'roofline_tokens_per_second': tps}


def run_decode(args, config, cfg, mesh, params, shardings, hw) -> dict:
  rng = np.random.default_rng(0)
  vocab = cfg.vocab_size
  prompts = rng.integers(3, vocab, (args.decode_rows, args.prompt_len)).astype(np.int32)
  mask, ids, key = np.ones_like(prompts), np.arange(args.decode_rows, dtype=np.int32), \
      jax.random.key(2)
  no_stop = types.SimpleNamespace(stop_token_ids=[], pad_id=0, bos_id=0)

  def timed(new_tokens: int) -> float:
    c = config.copy_and_resolve_references()
    c.train.rows_per_batch = args.decode_rows
    c.sampling.max_prompt_len, c.sampling.max_new_tokens = args.prompt_len, new_tokens
    c.sampling.engine = 'static'
    sampler = engines.make_sampler(c, cfg, mesh, shardings, no_stop)
    return best_time(lambda: sampler.generate(params, prompts, mask, ids, key), args.repeats)
  prefill_s = timed(1)
  full_s = timed(args.new_tokens)
  decode_s = full_s - prefill_s
  weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  out = decode_roofline(cfg, weight_bytes, args.decode_rows, args.prompt_len, args.new_tokens,
                        hw['hbm_bandwidth'])
  # At smoke sizes timing noise can exceed the decode time itself: then no decode rate.
  tps = args.decode_rows * (args.new_tokens - 1) / decode_s if decode_s > 0 else None
  out.update(prefill_seconds=prefill_s, decode_seconds=decode_s, decode_tokens_per_second=tps,
             decode_fraction_of_roofline=(tps / out['roofline_tokens_per_second']
                                          if tps and out['roofline_tokens_per_second'] else None),
             peak_bytes_after_decode=peak_bytes())
  return out


def run_train(args, config, cfg, mesh, params, shardings, hw) -> dict:
  learner = learner_lib.Learner(cfg, mesh, shardings, config, num_steps=100)
  holder = {'state': learner.init_state(params)}
  rng = np.random.default_rng(1)
  rows, seq = args.train_rows, args.train_len
  prompt = config.sampling.max_prompt_len
  batch = {
      'tokens_RxT': rng.integers(3, cfg.vocab_size, (rows, seq)).astype(np.int32),
      'mask_RxT': np.ones((rows, seq), np.int32),
      'completion_mask_RxT1': np.repeat((np.arange(seq - 1) >= prompt - 1)[None], rows,
                                        0).astype(np.int32),
      'old_logp_RxT1': np.full((rows, seq - 1), -12.0, np.float32),
      'rewards_R': rng.integers(0, 2, rows).astype(np.float32),
      'group_id_R': (np.arange(rows) // 2).astype(np.int32), 'valid_R': np.ones(rows, bool)}

  def once():
    holder['state'], metrics = learner.train_step(holder['state'], batch)
    return metrics
  step_s = best_time(once, args.repeats)
  model_flops = rows * (seq - 1) * flops.train_flops_per_token(cfg, seq - 1)
  peak = hw['peak_bf16_flops']
  return {'train_step_seconds': step_s, 'train_model_flops': model_flops,
          'train_tokens_per_second': rows * (seq - 1) / step_s,
          'train_mfu': model_flops / step_s / peak if peak else None,
          'peak_bytes_after_train': peak_bytes()}


def main(argv=None) -> dict:
  args = parse_args(argv)
  hw = chip(args)
  config = make_config(args)
  cfg = model_lib.ModelConfig.from_config(config.model)
  cfg.validate()
  mesh = sharding_lib.make_mesh(config.mesh, jax.devices()[:1])
  result = {**hw, 'params': flops.param_counts(cfg)['total'], 'param_dtype': cfg.param_dtype,
            'dtype': cfg.dtype, 'remat': cfg.remat, 'args': vars(args)}
  if not args.no_predict:  # the dry run's compiled peaks for the train step's shapes
    predicted = compiled_memory.compile_programs(config, cfg, mesh)
    result['predicted_peak_bytes'] = {k: v['peak'] for k, v in predicted.items()}
  params, shardings = model_lib.init_sharded_params(cfg, mesh, jax.random.key(0))
  result.update(run_decode(args, config, cfg, mesh, params, shardings, hw))
  print(f"decode: {result['decode_tokens_per_second']} tok/s, roofline "
        f"{result['roofline_tokens_per_second']} tok/s", flush=True)
  result.update(run_train(args, config, cfg, mesh, params, shardings, hw))
  print(f"train: {result['train_step_seconds']:.3f} s/step, MFU {result['train_mfu']}",
        flush=True)
  print(json.dumps(result, sort_keys=True, default=float))
  return result


if __name__ == '__main__':
  main()
