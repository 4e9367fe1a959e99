"""The dtype generation runs in (`sampling.param_dtype`) and the copy of the weights in it.

The optimizer keeps float32 masters; profiling, rollouts and eval read a copy of them cast
once per RL step (`cast_params`), and the sampler's model computes in that dtype (its
activations and KV cache too: `sampling_model_config`). 'auto' is bfloat16 on GPU/TPU and
float32 on CPU, where XLA:CPU runs bfloat16 matmuls no faster than float32 ones
(benchmarks/bench_real_shape.py measures both). 'float32' on a float32 model is the identity:
no copy is made and the sampler's log-probs are exactly the train step's.

A narrower sampling dtype makes the behaviour policy's log-probs (returned by the sampler)
differ from the train step's float32 recomputation by rounding, so importance ratios start
near 1 rather than at exactly 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

SAMPLING_DTYPES = ('auto', 'float32', 'bfloat16', 'float16')


def resolve(name: str, backend: str | None = None) -> str:
  """'auto' -> bfloat16 on gpu/tpu, float32 on cpu; other names are checked and returned."""
  if name not in SAMPLING_DTYPES:
    raise ValueError(f'sampling.param_dtype={name!r} is unknown; use one of {SAMPLING_DTYPES}.')
  if name != 'auto':
    return name
  backend = backend or jax.default_backend()
  return 'float32' if backend == 'cpu' else 'bfloat16'


def sampling_model_config(cfg, dtype: str):
  """The model config the sampler runs: compute and parameter dtype `dtype`."""
  if cfg.dtype == dtype and cfg.param_dtype == dtype:
    return cfg
  return dataclasses.replace(cfg, dtype=dtype, param_dtype=dtype)


def cast_params(params: Any, dtype: str, shardings: Any = None) -> Any:
  """`params` in `dtype` (same shardings), or `params` itself when every leaf already is."""
  target = jnp.dtype(dtype)
  # Integer leaves (a QLoRA base's quantized values: model/lora.py) keep their dtype.
  floats = [x for x in jax.tree.leaves(params) if jnp.issubdtype(x.dtype, jnp.floating)]
  if all(x.dtype == target for x in floats):
    return params
  cast = jax.jit(lambda p: jax.tree.map(
      lambda x: x.astype(target) if jnp.issubdtype(x.dtype, jnp.floating) else x, p),
      out_shardings=shardings)
  return cast(params)
