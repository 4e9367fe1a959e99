"""Qwen2.5-Math-1.5B on GSM8K: sGPO (or GRPO / DAPO) from the base checkpoint.

Built on the embedded default (`sgpo_jax/config/defaults.py`), so it has exactly the default's
field names; only values change.

Inputs (local, nothing is downloaded at run time):
  model.hf_path     a Hugging Face checkpoint dir of Qwen/Qwen2.5-Math-1.5B (config.json,
                    model.safetensors, tokenizer files); the tokenizer is read from it too.
  data.path         a directory with train.jsonl and test.jsonl of openai/gsm8k 'main', rows
                    {"question": ..., "answer": "... #### 72"} (the reward reads the gold
                    answer after '####'). E.g. `datasets.load_dataset('openai/gsm8k', 'main')`
                    then `ds[split].to_json(f'{dir}/{split}.jsonl')` on a machine with access.

Launch:
  # check memory / FLOPs first (no weights needed; prints the table and exits)
  python -m sgpo_jax.main --config qwen2_5_math_1_5b_gsm8k --config.dry_run=True
  # TPU v5e-8 (one host, 8 chips of 16 GB): fsdp=8
  python -m sgpo_jax.main --config qwen2_5_math_1_5b_gsm8k \
      --config.model.hf_path=/data/Qwen2.5-Math-1.5B \
      --config.tokenizer.path=/data/Qwen2.5-Math-1.5B \
      --config.data.path=/data/gsm8k --workdir gs://bucket/runs/q15_gsm8k_sgpo
  # one 80-140 GB GPU: `:gpu=1` (mesh auto: 1x1x1 on one GPU, 8 micro-batches); or --config.method=grpo
  python -m sgpo_jax.main --config qwen2_5_math_1_5b_gsm8k:gpu=1,method=grpo ...

Memory: `--config.dry_run=True` compiles this config's sampler, train step and log-prob
pass at its real shapes (no weights) and prints each one's peak bytes per device against
the device (`--config.dry_run_device=h100-80gb|h200|v5e|v4` from another machine); it exits
non-zero with the settings to change when one does not fit.

Parameter dtype: float32 master weights, bfloat16 compute. RL learning rates (1e-6) give
updates far below bfloat16's 2^-8 relative precision, so bf16 weights would round most
updates away; f32 costs 6 GB more in total, which both targets have.

Variants (`qwen2_5_math_1_5b_gsm8k:method=grpo,gpu=1`):
  method=sgpo_bayes|sgpo|grpo|dapo   allocator (default sgpo_bayes)
  gpu=1                   single 80-140 GB GPU mesh and micro-batching
"""

import ml_collections

from sgpo_jax.config import defaults as default_config
from sgpo_jax.config.args import parse_arg

HF_PATH = '/path/to/Qwen2.5-Math-1.5B'  # placeholder: a local checkpoint directory
SYSTEM_PROMPT = 'Please reason step by step, and put your final answer within \\boxed{}.'


def set_qwen2_5_math_1_5b(c: ml_collections.ConfigDict) -> None:
  """The model and tokenizer blocks for Qwen/Qwen2.5-Math-1.5B (its config.json values)."""
  m = c.model
  m.vocab_size = 151936
  m.d_model = 1536
  m.n_layers = 28
  m.n_heads = 12
  m.n_kv_heads = 2
  m.head_dim = 128
  m.d_ff = 8960
  m.rope_theta = 10000.0
  m.rms_eps = 1e-6
  m.tie_embeddings = True
  m.qkv_bias = True
  m.max_len = 4096  # max_position_embeddings
  m.dtype = 'bfloat16'  # compute
  m.param_dtype = 'float32'  # master weights; see the module docstring
  m.remat = True  # per-layer rematerialisation: attention scores are T x T per head
  m.attention_impl = 'auto'  # splash on TPU, cuDNN on GPU, chunked on CPU (model/attention.py)
  m.hf_path = HF_PATH
  c.tokenizer.kind = 'hf'
  c.tokenizer.path = HF_PATH
  c.tokenizer.chat_template = True
  c.tokenizer.system_prompt = SYSTEM_PROMPT
  c.warm_start.steps = 0  # the checkpoint is the initial policy


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', gpu=False)
  c = default_config.get_config(f"method={args['method']}")
  set_qwen2_5_math_1_5b(c)

  c.data.source = 'jsonl'
  c.data.path = '/path/to/gsm8k'  # train.jsonl + test.jsonl
  c.data.split = 'train'
  c.data.eval_split = 'test'
  c.data.id_field = ''  # GSM8K rows carry no id: ids become '<split>-<row>'
  c.data.prompt_field = 'question'
  c.data.answer_field = 'answer'
  c.data.reward = 'math'

  with c.ignore_type():  # a string: sizes follow the device count (sharding.mesh_shape_spec)
    c.mesh.shape = 'auto:fsdp=8'  # FSDP over 8 chips (v5e-8: 1x8x1), data-parallel over the rest
  c.mesh.axes = ('data', 'fsdp', 'tp')

  c.sampling.max_prompt_len = 512
  c.sampling.max_new_tokens = 1024
  c.sampling.min_prompt_bucket = 128  # buckets 128, 256, 512: three sampler compilations
  c.sampling.temperature = 1.0
  c.sampling.top_p = 1.0
  c.sampling.top_k = 0

  c.profile.num_samples = 8
  c.profile.temperature = 1.0

  c.sgpo.trivial_threshold = 0.75
  c.sgpo.unsolved_keep_fraction = 0.10
  c.sgpo.group_sizes = (2, 4, 8, 16)
  c.grpo.group_size = 8
  c.dapo.group_size = 16
  c.dapo.max_rounds = 4

  c.train.num_steps = 200
  c.train.rows_per_batch = 256  # a multiple of every group size and of the 8 batch shards
  c.train.micro_batches = 16  # 2 rows per chip per micro-batch on v5e-8
  c.train.learning_rate = 1e-6
  c.train.warmup_steps = 10
  c.train.schedule = 'constant'
  c.train.weight_decay = 0.0
  c.train.grad_clip = 1.0
  c.train.mu = 1
  c.train.loss_agg = 'token_mean'
  c.train.clip_eps_low = 0.2
  c.train.clip_eps_high = 0.28
  c.train.kl_coef = 0.0
  c.train.logprob_chunk = 256  # never a full f32 [rows, 1536, 151936] logits tensor

  c.checkpoint.every_steps = 25
  c.checkpoint.keep = 2
  c.eval.every_steps = 25

  if args['gpu']:
    c.mesh.shape = 'auto'  # data-parallel over the GPUs there are (one: 1x1x1)
    c.train.micro_batches = 8  # 32 rows per micro-batch
  return c
