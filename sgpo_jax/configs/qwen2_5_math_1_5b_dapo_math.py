"""Qwen2.5-Math-1.5B on competition math (MATH / DAPO-Math style), long completions.

The GSM8K config (`sgpo_jax/configs/qwen2_5_math_1_5b_gsm8k.py`: model, tokenizer, mesh, optimiser)
with DAPO-style RL settings: clip-higher (0.2 / 0.28), token-mean loss, no KL, larger groups,
3072 new tokens, and `method=dapo` available as the dynamic-sampling baseline.

Inputs (local):
  data.path       a `datasets` save_to_disk directory or a .parquet/.jsonl file with a
                  'problem' string and a 'solution' holding the answer in \\boxed{}
                  (hendrycks MATH / MATH-lighteval train). DAPO-Math-17k stores the prompt as
                  chat messages and the answer under reward_model.ground_truth: flatten it
                  first, e.g. `ds.map(lambda r: {'problem': r['prompt'][0]['content'],
                  'solution': '\\\\boxed{' + r['reward_model']['ground_truth'] + '}'})`.
  data.eval_path  MATH-500 (HuggingFaceH4/MATH-500 test, same fields).

Launch:
  python -m sgpo_jax.main --config qwen2_5_math_1_5b_dapo_math --config.dry_run=True
  python -m sgpo_jax.main --config qwen2_5_math_1_5b_dapo_math:method=dapo \
      --config.model.hf_path=/data/Qwen2.5-Math-1.5B \
      --config.tokenizer.path=/data/Qwen2.5-Math-1.5B \
      --config.data.path=/data/math/train --config.data.eval_path=/data/math500/test.jsonl \
      --workdir gs://bucket/runs/q15_math_dapo
  one 80-140 GB GPU: append `,gpu=1` to the config argument.

Memory: `--config.dry_run=True` compiles this config's sampler, train step and log-prob
pass at its real shapes (no weights) and prints each one's peak bytes per device against
the device (`--config.dry_run_device=h100-80gb|h200|v5e|v4` from another machine); it exits
non-zero with the settings to change when one does not fit.
Qwen2.5-Math-1.5B supports 4096 positions, so prompt + completion stays at 3584.
"""

import importlib.util
import os

import ml_collections

from sgpo_jax.config.args import parse_arg


def _gsm8k_config_module():
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'qwen2_5_math_1_5b_gsm8k.py')
  spec = importlib.util.spec_from_file_location('qwen2_5_math_1_5b_gsm8k', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', gpu=False)
  c = _gsm8k_config_module().get_config(f"method={args['method']}")

  c.data.source = 'hf'
  c.data.path = '/path/to/math/train'  # save_to_disk dir or a local parquet / jsonl file
  c.data.eval_path = '/path/to/math500/test.jsonl'
  c.data.split = 'train'
  c.data.eval_split = 'test'
  c.data.id_field = ''
  c.data.prompt_field = 'problem'
  c.data.answer_field = 'solution'  # gold = its last \boxed{...}
  c.data.reward = 'math'

  c.sampling.max_prompt_len = 512
  c.sampling.max_new_tokens = 3072
  c.sampling.min_prompt_bucket = 128

  c.profile.num_samples = 16  # harder problems: finer p_hat resolution (1/16)
  c.sgpo.group_sizes = (4, 8, 16)
  c.grpo.group_size = 16
  c.dapo.group_size = 16
  c.dapo.max_rounds = 3

  c.train.num_steps = 300
  c.train.rows_per_batch = 256  # 16 prompts x 16 completions
  c.train.micro_batches = 32  # 1 row per chip per micro-batch on v5e-8
  c.train.learning_rate = 1e-6
  c.train.loss_agg = 'token_mean'
  c.train.clip_eps_low = 0.2
  c.train.clip_eps_high = 0.28
  c.train.kl_coef = 0.0
  c.train.logprob_chunk = 256
  c.eval.every_steps = 20

  if args['gpu']:
    c.mesh.shape = 'auto'  # data-parallel over the GPUs there are (one: 1x1x1)
    c.train.micro_batches = 32  # 8 rows per micro-batch
  return c
