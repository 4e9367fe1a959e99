"""The sampling engine a config asks for (`sampling.engine`): the static bucketed sampler or
continuous batching, built with the sampling dtype, and the prompt lengths it compiles for.

One factory for the trainer and the dry run, so the dry run compiles the programs a run
will execute.
"""

from __future__ import annotations

from sgpo_jax.generate import continuous
from sgpo_jax.generate import sampler as sampler_lib
from sgpo_jax.generate import sampling_dtype as sampling_dtype_lib


def prompt_buckets(config) -> tuple[int, ...]:
  """The prompt lengths the sampler compiles for (`sampling.engine`'s buckets)."""
  s = config.sampling
  if s.get('engine', 'static') == 'continuous':
    return continuous.prefill_buckets(s.max_prompt_len, s.prefill_step)
  return sampler_lib.prompt_buckets(s.max_prompt_len, s.min_prompt_bucket)


def make_sampler(config, model_cfg, mesh, shardings, tokenizer) -> sampler_lib.Sampler | continuous.ContinuousSampler:
  """The generator behind profiling, rollouts and eval (`sampling.engine`)."""
  s = config.sampling
  model_cfg = sampling_dtype_lib.sampling_model_config(
      model_cfg, sampling_dtype_lib.resolve(s.get('param_dtype', 'auto')))
  common = dict(max_prompt_len=s.max_prompt_len, max_new_tokens=s.max_new_tokens,
                stop_ids=tokenizer.stop_token_ids, pad_id=tokenizer.pad_id,
                bos_id=tokenizer.bos_id, draw=s.get('draw', 'gumbel'))
  if s.get('engine', 'static') == 'continuous':
    return continuous.ContinuousSampler(model_cfg, mesh, shardings, slots=s.decode_slots,
                                        queue_rows=config.train.rows_per_batch,
                                        prefill_step=s.prefill_step, **common)
  return sampler_lib.Sampler(model_cfg, mesh, shardings, rows=config.train.rows_per_batch,
                             min_prompt_bucket=s.min_prompt_bucket, **common)
