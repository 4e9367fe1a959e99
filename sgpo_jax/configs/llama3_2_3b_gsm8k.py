"""Llama-3.2-3B on GSM8K (the scaling-law paper's size): sGPO / GRPO / DAPO from the base model.

The Qwen2.5-Math-1.5B GSM8K config (`sgpo_jax/configs/qwen2_5_math_1_5b_gsm8k.py`: data, mesh,
sampling, optimiser) with the model and tokenizer blocks swapped for Llama 3.2 3B.

Model: dims from the published config.json of meta-llama/Llama-3.2-3B (the -Instruct
checkpoint has the same architecture): model_type llama, hidden_size 3072,
num_hidden_layers 28, num_attention_heads 24, num_key_value_heads 8, head_dim 128,
intermediate_size 8192, vocab_size 128256, tie_word_embeddings true, rope_theta 500000,
rope_scaling {rope_type llama3, factor 32, low_freq_factor 1, high_freq_factor 4,
original_max_position_embeddings 8192}, rms_norm_eps 1e-5, max_position_embeddings 131072,
attention_bias false, mlp_bias false. 3,212,749,824 parameters (2,818,747,392 without the
embedding).

Inputs (local): model.hf_path, tokenizer.path: a checkpoint dir of meta-llama/Llama-3.2-3B
(or -Instruct with `instruct=1`); data.path: GSM8K jsonl as in the Qwen2.5 config.

Launch:
  python -m sgpo_jax.main --config llama3_2_3b_gsm8k --config.dry_run=True
  # TPU v5e-8 (fsdp=8)
  python -m sgpo_jax.main --config llama3_2_3b_gsm8k \
      --config.model.hf_path=/data/Llama-3.2-3B --config.tokenizer.path=/data/Llama-3.2-3B \
      --config.data.path=/data/gsm8k --workdir gs://bucket/runs/llama32_3b_gsm8k_sgpo
  # one 80-141 GB GPU: 128 rows per batch
  python -m sgpo_jax.main --config llama3_2_3b_gsm8k:gpu=1,method=grpo ...

Memory: `--config.dry_run=True` compiles this config's sampler, train step and log-prob
pass at its real shapes (no weights) and prints each one's peak bytes per device against
the device (`--config.dry_run_device=h100-80gb|h200|v5e|v4` from another machine); it exits
non-zero with the settings to change when one does not fit.

Variants (`llama3_2_3b_gsm8k:method=grpo,gpu=1,instruct=1,loss=gspo`):
  method=sgpo_bayes|sgpo|grpo|dapo, gpu=1, loss=ppo|gspo|cispo   as in `qwen3_0_6b_gsm8k.py`
  instruct=1   Llama-3.2-3B-Instruct: apply its chat template (the base model has none, so
               the default sends the bare question)
"""


import ml_collections

from sgpo_jax.config.args import load_sibling_config, parse_arg

HF_PATH = '/path/to/Llama-3.2-3B'  # placeholder: a local checkpoint directory


def _sibling_config(name: str):
  return load_sibling_config(__file__, name)


def set_llama3_2_3b(c: ml_collections.ConfigDict, hf_path: str = HF_PATH) -> None:
  """The model and tokenizer blocks for meta-llama/Llama-3.2-3B (its config.json values)."""
  m = c.model
  m.vocab_size = 128256
  m.d_model = 3072
  m.n_layers = 28
  m.n_heads = 24
  m.n_kv_heads = 8
  m.head_dim = 128
  m.d_ff = 8192
  m.rope_theta = 500000.0
  m.rope_type = 'llama3'
  m.rope_factor = 32.0
  m.rope_low_freq_factor = 1.0
  m.rope_high_freq_factor = 4.0
  m.rope_original_max_len = 8192
  m.rms_eps = 1e-5
  m.tie_embeddings = True
  m.qkv_bias = False
  m.qk_norm = False
  m.max_len = 131072  # max_position_embeddings
  m.dtype = 'bfloat16'
  m.param_dtype = 'float32'
  m.attention_impl = 'auto'  # splash on TPU, cuDNN on GPU, chunked on CPU (model/attention.py)
  m.remat = True
  m.hf_path = hf_path
  c.tokenizer.kind = 'hf'
  c.tokenizer.path = hf_path
  c.tokenizer.chat_template = False
  c.tokenizer.system_prompt = ''
  c.warm_start.steps = 0


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', gpu=False, loss='ppo', instruct=False)
  losses = _sibling_config('qwen3_0_6b_gsm8k').LOSSES
  if args['loss'] not in losses:
    raise ValueError(f"config arg loss={args['loss']!r}: use one of {sorted(losses)}.")
  base = _sibling_config('qwen2_5_math_1_5b_gsm8k')
  c = base.get_config(f"method={args['method']},gpu={int(args['gpu'])}")
  set_llama3_2_3b(c)
  if args['instruct']:
    c.tokenizer.chat_template = True
    c.tokenizer.system_prompt = base.SYSTEM_PROMPT
  c.train.update(losses[args['loss']])
  if args['gpu']:
    c.train.rows_per_batch = 128
    c.train.micro_batches = 8  # 16 rows per micro-batch
  return c
