"""Qwen2.5-0.5B-Instruct on GSM8K with LoRA adapters: sGPO on one 16-24 GB GPU (Colab T4 / L4).

The Qwen2.5-Math-1.5B GSM8K config (`sgpo_jax/configs/qwen2_5_math_1_5b_gsm8k.py`: data, reward,
sampling lengths, clip bounds) with the model swapped for Qwen2.5-0.5B-Instruct, a one-GPU
mesh and batch sizes a T4's memory holds, and LoRA adapters of rank 16 on all seven
projections (q, k, v, o, gate, up, down): the optimizer holds state for the adapters only and
the base weights stay frozen. Notebook: `notebooks/colab_qwen_gsm8k_lora.ipynb`.

Model: dims from the published config.json of Qwen/Qwen2.5-0.5B-Instruct: model_type qwen2,
hidden_size 896, num_hidden_layers 24, num_attention_heads 14, num_key_value_heads 2
(head_dim 64), intermediate_size 4864, vocab_size 151936, tie_word_embeddings true,
rope_theta 1000000, rms_norm_eps 1e-6, max_position_embeddings 32768, QKV bias.
494,032,768 parameters.

Inputs (local, nothing is downloaded at run time):
  model.hf_path     a checkpoint dir of Qwen/Qwen2.5-0.5B-Instruct (e.g.
                    `huggingface_hub.snapshot_download('Qwen/Qwen2.5-0.5B-Instruct')`); the
                    tokenizer is read from it too.
  data.path         train.jsonl + test.jsonl of openai/gsm8k 'main' (see the Qwen2.5-Math
                    config); a shorter test.jsonl makes each held-out eval cheaper.

Launch:
  python -m sgpo_jax.main --config qwen2_5_0_5b_gsm8k_lora \
      --config.dry_run=True --config.dry_run_device=t4
  python -m sgpo_jax.main --config qwen2_5_0_5b_gsm8k_lora \
      --config.model.hf_path=/content/Qwen2.5-0.5B-Instruct \
      --config.tokenizer.path=/content/Qwen2.5-0.5B-Instruct \
      --config.data.path=/content/gsm8k --workdir /content/runs/q05_lora

Memory: the dry run compiles the sampler and the train step at these shapes (no weights)
and judges them against `--config.dry_run_device=t4|l4` (usable = nvidia-smi memory x jax's
GPU memory fraction 0.75); `rank=0` gives full fine-tuning for comparison, which fits a T4
only with one row per packed train buffer.

Learning rate: LoRA wants about ten times the full fine-tuning rate (1e-6 in the 1.5B
config), so 1e-5.

Variants (`qwen2_5_0_5b_gsm8k_lora:method=sgpo,rank=0`):
  method=sgpo_bayes|sgpo|grpo|dapo   allocator (default sgpo_bayes: no profile pass over
                          the 7,473 training questions, which a Colab session cannot afford)
  rank=R                  LoRA rank (default 16); 0 = full fine-tuning of every weight
"""

import ml_collections

from sgpo_jax.config.args import load_sibling_config, parse_arg

HF_PATH = '/path/to/Qwen2.5-0.5B-Instruct'  # placeholder: a local checkpoint directory
LORA_TARGETS = 'q,k,v,o,gate,up,down'  # every projection of every layer


def set_qwen2_5_0_5b(c: ml_collections.ConfigDict, hf_path: str = HF_PATH) -> None:
  """The model and tokenizer blocks of Qwen/Qwen2.5-0.5B(-Instruct) (its config.json values)."""
  m = c.model
  m.vocab_size = 151936
  m.d_model = 896
  m.n_layers = 24
  m.n_heads = 14
  m.n_kv_heads = 2
  m.head_dim = 64
  m.d_ff = 4864
  m.rope_theta = 1e6
  m.rope_type = 'default'
  m.rms_eps = 1e-6
  m.tie_embeddings = True
  m.qkv_bias = True
  m.qk_norm = False
  m.max_len = 32768  # max_position_embeddings
  m.dtype = 'bfloat16'  # compute
  m.param_dtype = 'float32'
  m.remat = True
  m.hf_path = hf_path
  c.tokenizer.kind = 'hf'
  c.tokenizer.path = hf_path
  c.tokenizer.chat_template = True
  c.warm_start.steps = 0  # the checkpoint is the initial policy


def set_lora(c: ml_collections.ConfigDict, rank: int) -> None:
  """LoRA of `rank` on every projection (alpha = 2 x rank); rank 0 = full fine-tuning."""
  if rank < 0:
    raise ValueError(f'config arg rank={rank}: use 0 (full fine-tuning) or a positive rank.')
  if 'lora_rank' not in c.model:
    if rank:
      raise ValueError(f'config arg rank={rank}: this checkout has no LoRA '
                       '(config.model.lora_rank); use rank=0.')
    return
  c.model.lora_rank = rank
  c.model.lora_alpha = 2.0 * rank
  c.model.lora_targets = LORA_TARGETS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', rank=16)
  base = load_sibling_config(__file__, 'qwen2_5_math_1_5b_gsm8k')
  c = base.get_config(f"method={args['method']},gpu=1")
  set_qwen2_5_0_5b(c)
  c.tokenizer.system_prompt = base.SYSTEM_PROMPT
  set_lora(c, args['rank'])

  c.mesh.shape = 'auto'  # one GPU: 1x1x1; more: data-parallel over them
  c.sampling.max_new_tokens = 512  # the Instruct model answers GSM8K in ~150-300 tokens
  c.sampling.param_dtype = 'bfloat16'  # generation weights (f32 masters stay in the learner)
  c.sgpo.group_sizes = (2, 4, 8)
  c.train.num_steps = 40
  c.train.rows_per_batch = 64  # a multiple of every group size
  c.train.micro_batches = 4  # 16 rows per micro-batch
  c.train.learning_rate = 1e-5 if args['rank'] else 1e-6
  if not args['rank']:
    # Full fine-tuning (f32 grads and AdamW moments for every weight): the train step fits a
    # T4 with one row per packed buffer (CPU-compiled dry run: 10.60 GiB of 11.25 usable;
    # 8 rows: 15.11 GiB, 2 rows: 11.28 GiB).
    c.train.pack_rows = 1
  c.train.logprob_chunk = 256
  c.checkpoint.every_steps = 10
  c.eval.every_steps = 10
  return c
