"""Qwen3-1.7B on GSM8K: the Qwen3-0.6B config (`sgpo_jax/configs/qwen3_0_6b_gsm8k.py`) at 1.7B.

Model: dims from the published config.json of Qwen/Qwen3-1.7B (Qwen/Qwen3-1.7B-Base has the
same architecture): model_type qwen3, hidden_size 2048, num_hidden_layers 28,
num_attention_heads 16, num_key_value_heads 8, head_dim 128, intermediate_size 6144,
vocab_size 151936, tie_word_embeddings true, rope_theta 1000000, rope_scaling null,
rms_norm_eps 1e-6, max_position_embeddings 40960, QK-norm. 1,720,574,976 parameters
(1,409,410,048 without the embedding). Only d_model and d_ff differ from 0.6B.

Launch:
  python -m sgpo_jax.main --config qwen3_1_7b_gsm8k --config.dry_run=True
  python -m sgpo_jax.main --config qwen3_1_7b_gsm8k \
      --config.model.hf_path=/data/Qwen3-1.7B --config.tokenizer.path=/data/Qwen3-1.7B \
      --config.data.path=/data/gsm8k --workdir gs://bucket/runs/qwen3_17b_gsm8k_sgpo
  python -m sgpo_jax.main --config qwen3_1_7b_gsm8k:gpu=1,loss=cispo ...

Memory: `--config.dry_run=True` compiles this config's sampler, train step and log-prob
pass at its real shapes (no weights) and prints each one's peak bytes per device against
the device (`--config.dry_run_device=h100-80gb|h200|v5e|v4` from another machine); it exits
non-zero with the settings to change when one does not fit.

Variants: as `sgpo_jax/configs/qwen3_0_6b_gsm8k.py` (method, gpu, loss, thinking).
"""


import ml_collections

from sgpo_jax.config.args import load_sibling_config, parse_arg

HF_PATH = '/path/to/Qwen3-1.7B'  # placeholder: a local checkpoint directory


def _sibling_config(name: str):
  return load_sibling_config(__file__, name)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  small = _sibling_config('qwen3_0_6b_gsm8k')
  c = small.get_config(arg)  # parses (and checks) the same variants
  thinking = c.tokenizer.enable_thinking
  small.set_qwen3(c, d_model=2048, d_ff=6144, hf_path=HF_PATH)
  c.tokenizer.enable_thinking = thinking
  gpu = parse_arg(arg, method='sgpo_bayes', gpu=False, loss='ppo', thinking=False)['gpu']
  c.train.micro_batches = 8 if gpu else 16  # 32 rows per GPU / 2 per v5e chip
  return c
