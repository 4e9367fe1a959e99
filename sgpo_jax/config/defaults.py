"""The embedded default config (the schema every config is checked against).

Embedded default: a ~0.8M-parameter policy on the package's own arithmetic task.

Runs end to end on a 2-core CPU in about ten minutes, no downloads:

    python -m sgpo_jax.main --config default --workdir /tmp/sgpo_default

Variants (arg string, parsed strictly by `config.args.parse_arg`; an unknown key is an
error): `default:method=grpo,runlocal=1`
  method=sgpo_bayes|sgpo|grpo|dapo|greso|knapsack   which allocator drives the RL loop
                          (default sgpo_bayes, G in {2, 4}: the recommended path)
  runlocal=1              shrink everything for a smoke run (tests, notebooks)
Any field can be overridden: `--config.train.num_steps=50 --config.seed=1`.

The comparison regimes (pool, initial policy, FLOPs budget, eval size and cadence of one
comparison run) are set on top of this config by `sgpo_jax/configs/regimes.py`.
"""

import ml_collections

from sgpo_jax import allocators
from sgpo_jax.config.args import parse_arg


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', runlocal=False)
  c = ml_collections.ConfigDict()
  c.method = args['method']  # sgpo_bayes|sgpo|grpo|dapo|greso|knapsack: RL allocator
  c.regime = ''  # '' = the README run; else the comparison regime (sgpo_jax/configs/regimes.py)
  c.seed = 0
  c.dry_run = False  # build abstractly, print memory/FLOPs table, exit
  # The dry run judges memory against this device ('' = the one it runs on): h100-80gb |
  # h200 | l4 | t4 | v5e | v4 | cpu (sgpo_jax/parallel/devices.py).
  c.dry_run_device = ''

  # Queries. `source='arithmetic'` generates the embedded task from `seed`; other sources
  # (jsonl, parquet, tfds, hf) read files (see sgpo_jax/data/loading.py).
  c.data = ml_collections.ConfigDict()
  c.data.source = 'arithmetic'
  c.data.seed = 0  # pool / eval split / warm start: shared by every method and RL seed
  c.data.path = ''  # file / directory for jsonl|parquet|tfds|hf sources (hf: or a Hub id)
  c.data.split = 'train'
  c.data.eval_path = ''  # eval file for file sources ('' = eval_split of the same source)
  c.data.eval_split = 'test'
  c.data.id_field = 'id'
  c.data.prompt_field = 'prompt'
  c.data.answer_field = 'answer'
  c.data.bad_rows = 'error'  # error | skip
  c.data.num_train = 4096  # arithmetic: training pool size (large: sGPO overfits a small one)
  c.data.rl_pool_size = 0  # >0: profile and train RL on the first this-many queries only
  # with rl_pool_size > 0: one weight per difficulty level -> a stratified RL pool (first
  # queries of each level); () = the prefix. The warm start still sees the whole pool.
  c.data.rl_difficulty_weights = ()
  c.data.num_eval = 2048  # arithmetic: held-out eval problems (disjoint from train; SE <= 1.1 pt)
  c.data.min_digits = 1  # arithmetic difficulty knob: digits per operand
  c.data.max_digits = 4
  # arithmetic: one weight per difficulty level (largest operand's digits, min..max_digits);
  # () = each operand's digit count drawn uniformly (tasks/arithmetic.py)
  c.data.difficulty_weights = ()
  # arithmetic: '' = the compact '12+34=' prompt; a chat phrasing such as
  # 'What is {expression}?' ('12 + 34') for instruct models (pair it with reward='math').
  c.data.question_template = ''
  # arithmetic | math (math-verify with bounded time) | module.path:function | a weighted sum
  # 'mod:fmt=0.2,mod:correct=1.0' (sgpo_jax/tasks/rewards.py; docs/methods.md)
  c.data.reward = 'arithmetic'
  c.data.format_reward = 0.0  # optional bonus for a well-formed answer; 0 = off
  c.data.math_workers = 2  # math reward: killable math-verify worker processes

  c.tokenizer = ml_collections.ConfigDict()
  c.tokenizer.kind = 'char'  # char | hf
  c.tokenizer.path = ''  # local HF tokenizer directory for kind='hf'
  c.tokenizer.chat_template = False
  c.tokenizer.system_prompt = ''
  c.tokenizer.enable_thinking = True  # passed to the chat template (Qwen3: False = no <think>)
  c.tokenizer.stop_strings = ()  # extra stop strings -> stop token ids for the sampler

  c.model = ml_collections.ConfigDict()
  c.model.vocab_size = 16  # char tokenizer: 10 digits + '+=' + PAD/BOS/EOS (+1 spare)
  c.model.d_model = 128
  c.model.n_layers = 4
  c.model.n_heads = 4
  c.model.n_kv_heads = 4
  c.model.head_dim = 32
  c.model.d_ff = 512
  c.model.rope_theta = 10000.0
  c.model.rope_type = 'default'  # default | linear | llama3 (HF formulas; sgpo_jax/model/transformer.py)
  c.model.rope_factor = 1.0  # linear / llama3 scaling factor
  c.model.rope_low_freq_factor = 1.0  # llama3 only
  c.model.rope_high_freq_factor = 4.0  # llama3 only
  c.model.rope_original_max_len = 8192  # llama3 only: pre-extension context length
  c.model.rms_eps = 1e-6
  c.model.tie_embeddings = True
  c.model.qkv_bias = False
  c.model.qk_norm = False  # Qwen3: per-head RMSNorm on queries and keys
  c.model.max_len = 32  # positions the model supports
  c.model.dtype = 'float32'  # compute dtype
  c.model.param_dtype = 'float32'
  c.model.remat = False
  # Attention kernel (sgpo_jax/model/attention.py): chunked online softmax | full | dot_product.
  c.model.attention_impl = 'chunked'
  c.model.attention_q_chunk = 128  # chunked: queries per block
  c.model.attention_kv_chunk = 512  # chunked: keys per block
  c.model.scan_unroll = 1  # layers per step of the layer scan (1: a loop; n_layers: unrolled)
  c.model.init_std = 0.02
  c.model.hf_path = ''  # local HF checkpoint to start from (sgpo_jax/model/hf.py)
  # a catalog name (sgpo_jax/pretrained/catalog.py): fetched into hf_path on first use
  c.model.pretrained = ''
  # LoRA / QLoRA through qwix (sgpo_jax/model/lora.py): only the adapters train.
  c.model.lora_rank = 0  # 0 = full fine-tuning
  c.model.lora_alpha = 16.0  # adapter scale = lora_alpha / lora_rank
  c.model.lora_targets = 'q,k,v,o,gate,up,down'  # projections that get adapters
  c.model.lora_base_dtype = ml_collections.config_dict.placeholder(str)  # None | int8 | nf4

  # Mesh: shape over axes; -1 = the rest of the devices.
  c.mesh = ml_collections.ConfigDict()
  c.mesh.shape = (-1, 1, 1)
  c.mesh.axes = ('data', 'fsdp', 'tp')

  c.sampling = ml_collections.ConfigDict()
  c.sampling.max_prompt_len = 12  # BOS + 'dddd+dddd='
  c.sampling.max_new_tokens = 8  # reversed sum digits + EOS
  c.sampling.min_prompt_bucket = 16  # prompt buckets: powers of two from here up to max_prompt_len
  c.sampling.temperature = 1.0
  c.sampling.top_p = 1.0
  c.sampling.top_k = 0  # 0 = off
  # Weights (and compute) of generation: auto = bfloat16 on GPU/TPU, float32 on CPU; the
  # optimizer keeps float32 masters (sgpo_jax/generate/sampling_dtype.py).
  c.sampling.param_dtype = 'auto'
  # How a token is drawn from the softmax: gumbel = jax.random.categorical (V random numbers
  # per row and step); blocked = the same distribution from ~2 sqrt(V) of them, a different
  # random stream (generate/sampler.py: blocked_categorical; on CPU at vocab 152k it is the
  # cheaper half of a decode step).
  c.sampling.draw = 'gumbel'  # gumbel | blocked
  # static: one batch runs until its longest row stops; continuous: `decode_slots` slots that
  # take the next prompt as soon as their row stops (same completions per row id).
  c.sampling.engine = 'static'  # static | continuous (profiling, rollouts and eval)
  # continuous: rows decoded together per data-parallel shard (on a pure data mesh every
  # data shard runs its own slots over its own rows; with fsdp/tp > 1 one schedule)
  c.sampling.decode_slots = 32
  c.sampling.prefill_step = 16  # continuous: prefill buckets are multiples of this

  # Supervised warm start that makes the "pretrained" initial policy (cached).
  c.warm_start = ml_collections.ConfigDict()
  c.warm_start.steps = 1500
  c.warm_start.batch_size = 64
  c.warm_start.learning_rate = 1e-3
  c.warm_start.schedule = 'constant'  # constant | cosine (decay to 0 over `steps`)
  # True: where the package ships this warm start (sgpo_jax/rl/warm_starts/, matched by cache
  # key: the README run's and the regimes'), load it instead of training it, so every CPU
  # type starts RL from the reference machine's policy; False: always train (SFT).
  c.warm_start.shipped = True
  c.warm_start.cache_dir = ''  # '' = <workdir>/warm_start; shared dir to reuse across runs
  # One fraction per difficulty level (min_digits..max_digits): SFT sees only the first
  # that-share of each level's pool queries, so a level it rarely sees stays mostly beyond
  # the initial policy, as hard problems are for a real LLM. () = the whole pool.
  c.warm_start.level_fractions = ()

  c.profile = ml_collections.ConfigDict()
  c.profile.num_samples = 8  # k samples per query under the initial policy
  c.profile.temperature = 1.0
  c.profile.early_stop = False  # stop sampling a query once its bucket is certain

  # One section per registered allocator (sgpo, sgpo_bayes, grpo, dapo, greso, knapsack):
  # its fields, defaults and range checks live in the allocator's settings dataclass
  # (`Settings` of each class in sgpo_jax/allocators/).
  for name, settings in allocators.registered_settings():
    c[name] = ml_collections.ConfigDict(settings.defaults())

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 300
  c.train.flops_budget = 0.0  # >0: stop once cumulative FLOPs (profiling included) reach it
  c.train.rows_per_batch = 128  # R: rows per RL batch, a multiple of every group size
  c.train.learning_rate = 2e-4
  c.train.warmup_steps = 5
  c.train.schedule = 'constant'  # constant | cosine
  c.train.weight_decay = 0.0
  c.train.grad_clip = 1.0
  c.train.micro_batches = 1
  c.train.mu = 1  # policy-gradient iterations per rollout batch
  c.train.advantage = 'grpo'  # grpo | dr_grpo | rloo
  c.train.std_eps = 1e-6
  c.train.loss_agg = 'token_mean'  # token_mean | seq_mean_token_mean | seq_mean_token_sum_norm
  c.train.policy_loss = 'ppo'  # ppo | cispo (sgpo_jax/rl/losses.py POLICY_LOSSES)
  c.train.importance_level = 'token'  # token | sequence (GSPO; rl/losses.py IMPORTANCE_RATIOS)
  # ppo: ratio clip; cispo: IS-weight clip. Unset (None) = the paper's bounds for the chosen
  # policy_loss x importance_level (rl/losses.py DEFAULT_CLIP_BOUNDS): ppo/token 0.2 / 0.28,
  # GSPO (sequence) 3e-4 / 4e-4, cispo 1.0 (no lower bound) / 0.28. A value set wins.
  c.train.clip_eps_low = ml_collections.config_dict.placeholder(float)
  c.train.clip_eps_high = ml_collections.config_dict.placeholder(float)
  c.train.logratio_clamp = 20.0
  c.train.kl_coef = 0.0  # 0 = no reference model kept or run
  c.train.kl_form = 'k3'  # k1 | k3
  c.train.logprob_chunk = 0  # tokens per chunk for log-probs; 0 = whole sequence
  # DAPO's overlong handling (sgpo_jax/rl/overlong.py): completions cut at max_new_tokens
  # leave the loss (overlong_mask), and/or a soft length penalty over the last
  # overlong_penalty_len tokens of the budget is added to the reward (0 = off).
  c.train.overlong_mask = False
  c.train.overlong_penalty_len = 0
  # Packed train step: real tokens only, rows laid end to end with segment ids (same loss).
  # Each data-parallel shard (mesh batch axes, over devices and processes) packs its own
  # rows_per_batch / shards rows into its own buffers: a buffer is [shards * pack_rows,
  # pack_len] tokens split over the batch axes.
  c.train.packing = True
  c.train.pack_rows = 8  # packed rows per buffer and data-parallel shard (a scan runs over buffers)
  c.train.pack_len = 0  # tokens per packed row; 0 = max_prompt_len + max_new_tokens
  c.train.early_stop = ml_collections.ConfigDict()
  # Off by default (comparison runs must reach their budget); how each rule was validated:
  # docs/scaling_law_validation.md. 'bound' holds only for regimes its calibration set has
  # runs of (not the README run's). The settings below are the validated ones.
  c.train.early_stop.enabled = False
  # 'trend': on eval accuracy, stop once a line through the evals of the last
  # window_fraction of the run gains < epsilon by its end (validated: README, Scaling law);
  # 'forecast': on train reward, the curve-fit stopper (replayed, it stopped too early).
  c.train.early_stop.rule = 'trend'
  c.train.early_stop.epsilon = 0.04  # accuracy (trend) or reward (forecast) gain
  c.train.early_stop.min_fraction = 0.5  # never stop before this fraction of the run
  c.train.early_stop.window_fraction = 0.3  # trend: evals of this last fraction of the run
  c.train.early_stop.confidence = 0.9  # forecast only
  c.train.early_stop.confirm_evals = 1  # trend: flat at this many evals in a row
  # trend: stop only at an eval at most this far below the best eval so far (inf = off)
  c.train.early_stop.peak_tolerance = 0.01
  # 'bound': at the first eval at or after each of bound_fractions of the run, stop once the
  # calibrated upper bound (bound_confidence) of the final accuracy, forecast from the prefix
  # and the runs of `calibration` ('' = the shipped 80 comparison runs), is within bound_delta
  # of the reading. The run's config in the calibration set is its `config_group`
  # ('' = <parent folder>/<workdir without _seed<k>>, as sweeps name runs).
  c.train.early_stop.bound_fractions = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75,
                                        0.8)
  c.train.early_stop.bound_confidence = 0.9
  c.train.early_stop.bound_delta = 0.035
  c.train.early_stop.calibration = ''
  c.train.early_stop.config_group = ''

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every_steps = 50
  c.checkpoint.keep = 2
  c.checkpoint.async_save = False

  c.eval = ml_collections.ConfigDict()
  c.eval.every_steps = 25
  # Also evaluate at the first step whose cumulative FLOPs reach each of these fractions of
  # train.flops_budget (needs a budget): runs of different methods are then read at the same
  # compute, densely where the strong arms cross a target (the comparison regimes' schedule).
  c.eval.at_budget_fractions = ()
  c.eval.pass_k = 0  # >0: also pass@k at temperature sampling.temperature

  # Where the scalars of metrics.jsonl go besides tensorboard/ (process 0 only, same steps).
  c.logging = ml_collections.ConfigDict()
  c.logging.wandb_project = ''  # '' = off; else this Weights & Biases project (pip install wandb)

  if args['runlocal']:
    shrink_for_local_run(c)
  return c


def shrink_for_local_run(c: ml_collections.ConfigDict) -> None:
  """`runlocal=1`: a smaller pool, eval and warm start and a few steps (tests, notebooks)."""
  c.data.num_train = 512
  c.data.num_eval = 128
  c.warm_start.steps = 150
  c.train.num_steps = 6
  c.train.rows_per_batch = 32
  c.eval.every_steps = 3
  c.checkpoint.every_steps = 3
