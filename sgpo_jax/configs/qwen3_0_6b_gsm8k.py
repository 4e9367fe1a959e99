"""Qwen3-0.6B on GSM8K: sGPO (or GRPO / DAPO), with PPO, GSPO or CISPO as the policy loss.

The Qwen2.5-Math-1.5B GSM8K config (`sgpo_jax/configs/qwen2_5_math_1_5b_gsm8k.py`: data, mesh,
sampling, optimiser) with the model and tokenizer blocks swapped for Qwen3-0.6B.

Model: dims from the published config.json of Qwen/Qwen3-0.6B (Qwen/Qwen3-0.6B-Base has the
same architecture): model_type qwen3, hidden_size 1024, num_hidden_layers 28,
num_attention_heads 16, num_key_value_heads 8, head_dim 128 (not 1024 / 16 = 64),
intermediate_size 3072, vocab_size 151936, tie_word_embeddings true, rope_theta 1000000,
rope_scaling null, rms_norm_eps 1e-6, max_position_embeddings 40960, attention_bias false,
QK-norm on every layer. 596,049,920 parameters (440,467,456 without the embedding).

Inputs (local, nothing is downloaded at run time):
  model.hf_path     a checkpoint dir of Qwen/Qwen3-0.6B (config.json, model.safetensors,
                    tokenizer files, generation_config.json: its eos ids become stop tokens).
  data.path         train.jsonl + test.jsonl of openai/gsm8k 'main' (see the Qwen2.5 config).

Launch:
  python -m sgpo_jax.main --config qwen3_0_6b_gsm8k --config.dry_run=True
  # TPU v5e-8 (fsdp=8)
  python -m sgpo_jax.main --config qwen3_0_6b_gsm8k \
      --config.model.hf_path=/data/Qwen3-0.6B --config.tokenizer.path=/data/Qwen3-0.6B \
      --config.data.path=/data/gsm8k --workdir gs://bucket/runs/qwen3_06b_gsm8k_sgpo
  # one GPU, GRPO with GSPO's sequence-level ratio
  python -m sgpo_jax.main --config qwen3_0_6b_gsm8k:gpu=1,method=grpo,loss=gspo ...

Memory: `--config.dry_run=True` compiles this config's sampler, train step and log-prob
pass at its real shapes (no weights) and prints each one's peak bytes per device against
the device (`--config.dry_run_device=h100-80gb|h200|v5e|v4` from another machine); it exits
non-zero with the settings to change when one does not fit.

Variants (`qwen3_0_6b_gsm8k:method=grpo,gpu=1,loss=cispo,thinking=1`):
  method=sgpo_bayes|sgpo|grpo|dapo   allocator (default sgpo_bayes)
  gpu=1                   mesh auto (data-parallel over the GPUs; one GPU: 1x1x1)
  loss=ppo|gspo|cispo     ppo: token-level clipped surrogate (0.2 / 0.28 clip-higher);
                          gspo: importance_level=sequence, the GSPO paper's bounds 3e-4 / 4e-4,
                          seq_mean_token_mean (= plain GSPO); cispo: policy_loss=cispo with no
                          lower bound (clip_eps_low=1.0, as MiniMax-M1) and clip_eps_high=0.28
  thinking=1              keep Qwen3's <think> mode (default off: the template pre-fills an
                          empty <think></think>, so 1024 new tokens suffice for GSM8K)
"""


import ml_collections

from sgpo_jax.config.args import load_sibling_config, parse_arg

HF_PATH = '/path/to/Qwen3-0.6B'  # placeholder: a local checkpoint directory
LOSSES = {
    'ppo': {'policy_loss': 'ppo', 'importance_level': 'token', 'clip_eps_low': 0.2,
            'clip_eps_high': 0.28, 'loss_agg': 'token_mean'},
    # GSPO runs on the packed step like the others (each sequence's ratio by segment sums).
    'gspo': {'policy_loss': 'ppo', 'importance_level': 'sequence', 'clip_eps_low': 3e-4,
             'clip_eps_high': 4e-4, 'loss_agg': 'seq_mean_token_mean'},
    'cispo': {'policy_loss': 'cispo', 'importance_level': 'token', 'clip_eps_low': 1.0,
              'clip_eps_high': 0.28, 'loss_agg': 'token_mean'},
}


def _sibling_config(name: str):
  return load_sibling_config(__file__, name)


def set_qwen3(c: ml_collections.ConfigDict, d_model: int = 1024, d_ff: int = 3072,
              hf_path: str = HF_PATH) -> None:
  """The model and tokenizer blocks of a dense Qwen3 (0.6B dims by default)."""
  m = c.model
  m.vocab_size = 151936
  m.d_model = d_model
  m.n_layers = 28
  m.n_heads = 16
  m.n_kv_heads = 8
  m.head_dim = 128
  m.d_ff = d_ff
  m.rope_theta = 1e6
  m.rope_type = 'default'
  m.rms_eps = 1e-6
  m.tie_embeddings = True
  m.qkv_bias = False
  m.qk_norm = True
  m.max_len = 40960  # max_position_embeddings
  m.dtype = 'bfloat16'  # compute
  m.param_dtype = 'float32'  # master weights (see the Qwen2.5 config's docstring)
  m.attention_impl = 'auto'  # splash on TPU, cuDNN on GPU, chunked on CPU (model/attention.py)
  m.remat = True
  m.hf_path = hf_path
  c.tokenizer.kind = 'hf'
  c.tokenizer.path = hf_path
  c.tokenizer.chat_template = True
  c.tokenizer.enable_thinking = False
  c.warm_start.steps = 0  # the checkpoint is the initial policy


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', gpu=False, loss='ppo', thinking=False)
  if args['loss'] not in LOSSES:
    raise ValueError(f"config arg loss={args['loss']!r}: use one of {sorted(LOSSES)}.")
  base = _sibling_config('qwen2_5_math_1_5b_gsm8k')
  c = base.get_config(f"method={args['method']},gpu={int(args['gpu'])}")
  set_qwen3(c)
  c.tokenizer.system_prompt = base.SYSTEM_PROMPT
  c.tokenizer.enable_thinking = args['thinking']
  c.train.update(LOSSES[args['loss']])
  c.train.micro_batches = 8  # 4 rows per chip per micro-batch on v5e-8; 32 on one GPU
  return c
