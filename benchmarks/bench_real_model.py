"""Speed on the real model (SmolLM2-135M-Instruct, the smollm2_135m_arith config) on this CPU,
against transformers' `generate` and TRL's `GRPOTrainer`, both sides in one process.

    python benchmarks/bench_real_model.py                       # the job's shape: decode,split,trl
    python benchmarks/bench_real_model.py --which tunix         # after bash benchmarks/setup_tunix.sh
    python benchmarks/bench_real_model.py --which decode --rows 16 --max_new 96
    python benchmarks/bench_real_model.py --rows 4 --group 2 --max_new 4 --steps 1  # smoke

Our side is built by `train.setup` on the real config (method=grpo) with the shape
overrides: the same sampler, reward, learner and prompts a run uses. Prompts are the config's
chat-templated arithmetic questions (the first `--rows`, or `--rows / --group` prompts x G).
Threads: `--threads` N is enforced for XLA by pinning the process to N CPUs (when fewer than
are available; XLA's CPU pool sizes itself from the affinity mask) and for torch by
`torch.set_num_threads(N)`. Each comparison warms up both sides once (untimed: our first call
compiles), then runs `--steps` repeats interleaved ours / theirs, so both see the same load.

Comparisons (`--which`, each appends ONE JSON line to `--results` and prints it; the last
printed line is the last comparison's):
  decode  tokens/s of our sampler (`sampler.sample`, as a rollout calls it) against
          transformers' `generate` (do_sample, same temperature / top-p / top-k, same stop
          ids, same prompt token ids left-padded, same rows and max_new_tokens). tokens/s =
          generated real tokens (up to and including the stop token) / wall seconds, summed
          over the repeats; `speedup` = ours / transformers (issue target >= 1.5).
  split   one RL step of ours at the job's shape cut into sample (the sampler call), verify
          (the reward function on the decoded completions), train (batch layout +
          learner.train_step, blocked until done) and other (the rest: allocator, decoding
          text, casting params for the sampler); medians over the repeats.
  trl     one whole GRPO step against TRL's GRPOTrainer (use_cpu, same model folder and
          dtype, same prompts as chat messages, num_generations = G, rows completions per
          step, same max_completion_length, temperature, learning rate, beta=0, no
          mixed precision, gradient checkpointing as our model.remat, reward = the same
          verifier). TRL's step = on_step_begin -> on_step_end of a TrainerCallback, which
          also runs one of our steps after each TRL step (interleaved); the first step of
          each side is the untimed warm-up. `speedup` = TRL median step s / ours (issue
          target >= 2). Our step is train.rl_step's path (allocator fill_batch -> rollout
          -> train_batch -> train_step) without the skip of an all-equal batch: like TRL,
          every step trains.
  tunix   tokens/s of our sampler against Tunix's (`tunix.generate.sampler.Sampler`, as
          its RL rollout calls it) on the same model: Tunix's Llama3 loaded from the same
          safetensors folder by its own loader (tied embeddings), same prompt token ids (no BOS
          added), temperature / top-p / top-k, stop ids, rows and max_new_tokens, float32.
          Tunix runs in its own virtualenv (`--tunix_python`; `bash benchmarks/setup_tunix.sh`
          makes it) as a subprocess pinned to the same threads: our repeats first, then its
          warm-up and repeats. Checks that Tunix runs the same model: its full-prompt logits
          of the first prompt against transformers' (`tunix_logits_max_abs_diff`), and how many
          of the first prompts both greedy-decode to the same tokens (`greedy_match`; a
          near-tie can part them). tokens/s counted as in decode; `speedup` = ours / Tunix
          (target >= 1.5).
Every line carries the git commit, the load average before and after, the shapes and the
thread count; compare only lines taken at similar load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
RESULTS = os.path.join(REPO, 'benchmarks', 'results', 'bench_real_model.jsonl')
WHICH = ('decode', 'split', 'trl', 'tunix')
DEFAULT_WHICH = WHICH[:3]  # tunix needs its own virtualenv (setup_tunix.sh): asked for by name
DTYPES = ('float32', 'bfloat16')


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--which', default=','.join(DEFAULT_WHICH),
                 help=f"comma list of {', '.join(WHICH)} (default %(default)s)")
  p.add_argument('--rows', type=int, default=16, help='completions per call / per RL step')
  p.add_argument('--group', type=int, default=4, help='G: completions per prompt (split, trl)')
  p.add_argument('--max_new', type=int, default=96, help='max new tokens per completion')
  p.add_argument('--steps', type=int, default=3, help='timed repeats per side, after warm-up')
  p.add_argument('--threads', type=int, default=2, help='CPU threads for XLA and torch')
  p.add_argument('--rank', type=int, default=0, help='LoRA rank; 0 = full fine-tuning')
  p.add_argument('--dtype', default='float32', choices=DTYPES,
                 help='compute dtype (ours: model.dtype and sampling.param_dtype; torch: '
                      'the weights are loaded in it)')
  p.add_argument('--draw', default='gumbel', choices=('gumbel', 'blocked'),
                 help="our sampler's sampling.draw (the shipped config's: gumbel)")
  p.add_argument('--scan_unroll', type=int, default=0,
                 help='our model.scan_unroll (layers per step of the layer scan; 0: the '
                      "config's)")
  p.add_argument('--results', default=RESULTS, help='JSONL file the lines are appended to')
  p.add_argument('--tunix_python', default='/work/venv_tunix/bin/python',
                 help='(tunix) a python with Tunix: bash benchmarks/setup_tunix.sh')
  p.add_argument('--tunix_spec', default='', help=argparse.SUPPRESS)  # the Tunix side's input
  args = p.parse_args(argv)
  if args.tunix_spec:
    return args
  args.which = tuple(w for w in args.which.split(',') if w)
  unknown = sorted(set(args.which) - set(WHICH))
  if unknown or not args.which:
    p.error(f'--which={",".join(args.which)}: use a comma list of {", ".join(WHICH)}')
  if min(args.rows, args.group, args.max_new, args.steps, args.threads) < 1 or args.rank < 0:
    p.error('--rows, --group, --max_new, --steps, --threads must be >= 1 and --rank >= 0')
  if 'tunix' in args.which and not os.path.exists(args.tunix_python):
    p.error(f'--tunix_python={args.tunix_python} does not exist: run bash '
            'benchmarks/setup_tunix.sh first, or drop tunix from --which')
  if args.rows % args.group:
    p.error(f'--rows={args.rows} must be a multiple of --group={args.group}')
  if args.rank and 'trl' in args.which:
    try:
      import peft  # noqa: F401
    except ImportError:
      p.error(f'--rank={args.rank} with --which trl needs peft (LoRA on TRL\'s side), which '
              'is not installed; use --rank 0 or drop trl from --which')
  return args


def pin_threads(threads: int) -> int:
  """Pins this process to `threads` CPUs when fewer than it may use; returns the CPUs it may
  use. Called before JAX starts its CPU client, which sizes its pool from the affinity."""
  cpus = sorted(os.sched_getaffinity(0))
  if threads < len(cpus):
    os.sched_setaffinity(0, cpus[:threads])
  return len(os.sched_getaffinity(0))


def git_commit() -> str:
  def git(*cmd):
    return subprocess.run(['git', *cmd], check=False, cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
  commit = git('rev-parse', 'HEAD') or 'unknown'
  return commit + ('-dirty' if git('status', '--porcelain', '--untracked-files=no') else '')


def real_config(args):
  """The shipped smollm2_135m_arith config (method=grpo) at the benchmark's shape."""
  from sgpo_jax import configs
  from sgpo_jax.config.args import load_config_module
  module = load_config_module(configs.path('smollm2_135m_arith'))
  c = module.get_config(f'method=grpo,rank={args.rank},steps={args.steps + 2}')
  c.train.rows_per_batch = args.rows
  c.grpo.group_size = args.group
  c.sampling.max_new_tokens = args.max_new
  c.sampling.temperature = 1.0
  c.model.dtype = args.dtype
  c.sampling.param_dtype = args.dtype
  c.sampling.draw = args.draw
  if args.scan_unroll:
    c.model.scan_unroll = args.scan_unroll
  c.train.kl_coef, c.train.mu = 0.0, 1  # TRL: beta=0, num_iterations=1
  c.train.warmup_steps = 0
  c.eval.every_steps = 10**6
  c.checkpoint.every_steps = 10**6
  return c


class Timed:
  """Wraps a callable, summing the wall seconds of its calls (`seconds`, reset by the caller)."""

  def __init__(self, fn):
    self.fn, self.seconds = fn, 0.0

  def __call__(self, *a, **kw):
    start = time.perf_counter()
    try:
      return self.fn(*a, **kw)
    finally:
      self.seconds += time.perf_counter() - start

  def __getattr__(self, name):  # close() and friends of the reward function
    return getattr(self.fn, name)


class Ours:
  """The project's run pieces, built by train.setup / train.restore_or_init."""

  def __init__(self, args, workdir: str):
    from sgpo_jax import allocators as allocators_lib
    from sgpo_jax import train
    self.args, self.train = args, train
    self.config = real_config(args)
    self.su = train.setup(self.config, workdir, show_progress=False)
    self.su.reward_fn = Timed(self.su.reward_fn)
    self.su.sampler.sample = Timed(self.su.sampler.sample)
    self.rs = train.restore_or_init(self.su, show_progress=False)
    self.rs.allocator = allocators_lib.make_allocator(
        self.config, len(self.su.train_queries), None,
        [q.difficulty for q in self.su.train_queries])
    self.steps: list[dict] = []  # timed steps: sample / verify / train / other / step seconds

  def decode(self, rng_index: int) -> tuple[int, float]:
    """(real tokens generated, wall seconds) of one sampler call on the first `rows` prompts."""
    import jax
    su, s = self.su, self.config.sampling
    rows = self.args.rows
    prompts = [su.prompt_tokens[i % len(su.prompt_tokens)] for i in range(rows)]
    params = su.sampling_params(su.params)
    jax.block_until_ready(params)
    start = time.perf_counter()
    out = su.sampler.sample(params, prompts, list(range(rows)),
                            jax.random.fold_in(jax.random.key(7), rng_index),
                            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
    return int(out.mask_RxN.sum()), time.perf_counter() - start

  def rl_step(self, timed: bool = True) -> dict:
    """One GRPO step on train.rl_step's path, always training (no all-equal skip)."""
    import jax
    train, su, rs = self.train, self.su, self.rs
    su.sampler.sample.seconds = su.reward_fn.seconds = 0.0
    start = time.perf_counter()
    params = rs.train_state['params']
    filled = rs.allocator.fill_batch(train.make_rollout_fn(su, su.sampling_params(params),
                                                           rs.step))
    rolled = time.perf_counter()
    batch = train.train_batch(su, filled.layout, filled.rollout)
    rs.train_state, metrics = rs.learner.train_step(rs.train_state, batch)
    jax.block_until_ready((rs.train_state, metrics))
    done = time.perf_counter()
    rs.step += 1
    row = {'sample': su.sampler.sample.seconds, 'verify': su.reward_fn.seconds,
           'train': done - rolled, 'step': done - start,
           'completion_tokens': int(filled.rollout.mask_RxN.sum()),
           'reward_mean': float(filled.rollout.rewards_R.mean())}
    row['other'] = row['step'] - row['sample'] - row['verify'] - row['train']
    if timed:
      self.steps.append(row)
    return row

  def close(self) -> None:
    self.rs.ckpt.close()
    getattr(self.su.reward_fn, 'close', lambda: None)()


def hf_dtype(name: str):
  import torch
  return {'float32': torch.float32, 'bfloat16': torch.bfloat16}[name]


def decode_comparison(args, ours: Ours) -> dict:
  import torch
  import transformers
  su, s = ours.su, ours.config.sampling
  model = transformers.AutoModelForCausalLM.from_pretrained(
      ours.config.model.hf_path, dtype=hf_dtype(args.dtype)).eval()
  prompts = [su.prompt_tokens[i % len(su.prompt_tokens)] for i in range(args.rows)]
  width = max(map(len, prompts))
  pad = su.tokenizer.pad_id
  ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
  mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
  stop_ids = list(su.tokenizer.stop_token_ids)

  def theirs(rng_index: int) -> tuple[int, float]:
    torch.manual_seed(rng_index)
    start = time.perf_counter()
    with torch.no_grad():
      out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=s.temperature,
                           top_p=s.top_p, top_k=s.top_k, max_new_tokens=args.max_new,
                           min_new_tokens=0, eos_token_id=stop_ids, pad_token_id=pad)
    seconds = time.perf_counter() - start
    new = out[:, width:].tolist()
    tokens = 0
    for row in new:  # real tokens: up to and including the first stop token
      stops = [i for i, t in enumerate(row) if t in stop_ids]
      tokens += stops[0] + 1 if stops else len(row)
    return tokens, seconds

  ours.decode(10_000), theirs(10_000)  # warm-up: our compile, torch's first call
  totals = {'ours': [0, 0.0], 'transformers': [0, 0.0]}
  for rep in range(args.steps):
    for name, call in (('ours', ours.decode), ('transformers', theirs)):
      tokens, seconds = call(rep)
      totals[name][0] += tokens
      totals[name][1] += seconds
  rate = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
  return {'ours_tokens_per_s': rate['ours'],
          'transformers_tokens_per_s': rate['transformers'],
          'speedup': rate['ours'] / rate['transformers'], 'target': 1.5,
          'ours_tokens': totals['ours'][0], 'transformers_tokens': totals['transformers'][0],
          'ours_seconds': totals['ours'][1],
          'transformers_seconds': totals['transformers'][1],
          'prompt_len_max': width, 'sampler_compiles': su.sampler.compile_count}



GREEDY_ROWS = 4  # prompts both sides greedy-decode for the same-model check


def real_tokens(rows: list[list[int]], stop_ids: list[int], max_new: int) -> int:
  """Generated tokens up to and including the first stop token, summed over rows (a row
  cut short of max_new without its stop token, as Tunix returns them, ended on one)."""
  total = 0
  for row in rows:
    stops = [i for i, t in enumerate(row) if t in stop_ids]
    total += stops[0] + 1 if stops else min(len(row) + 1, max_new)
  return total


def tunix_comparison(args, ours: Ours) -> dict:
  import jax
  import numpy as np
  import torch
  import transformers
  su, s = ours.su, ours.config.sampling
  prompts = [su.prompt_tokens[i % len(su.prompt_tokens)] for i in range(args.rows)]
  stop_ids = list(su.tokenizer.stop_token_ids)
  spec = {'model_dir': ours.config.model.hf_path, 'prompts': prompts, 'max_new': args.max_new,
          'temperature': s.temperature, 'top_p': s.top_p, 'top_k': s.top_k,
          'stop_ids': stop_ids, 'pad_id': su.tokenizer.pad_id, 'steps': args.steps,
          'threads': args.threads}
  ours.decode(10_000)  # warm-up: our compile
  tokens, seconds = 0, 0.0
  for rep in range(args.steps):
    t, sec = ours.decode(rep)
    tokens, seconds = tokens + t, seconds + sec
  params = su.sampling_params(su.params)
  greedy = su.sampler.sample(params, prompts[:GREEDY_ROWS], list(range(GREEDY_ROWS)),
                             jax.random.key(0), temperature=0.0, top_p=1.0, top_k=0)
  ours_greedy = [row[:n].tolist() for row, n in zip(greedy.tokens_RxN, greedy.mask_RxN.sum(1))]
  # One folder for the exchange (the spec in, Tunix's first-prompt logits out), removed after.
  with tempfile.TemporaryDirectory() as exchange:
    spec['logits_out'] = os.path.join(exchange, 'logits.npy')
    spec_path = os.path.join(exchange, 'spec.json')
    with open(spec_path, 'w') as fh:
      json.dump(spec, fh)
    proc = subprocess.run([args.tunix_python, os.path.abspath(__file__), '--tunix_spec', spec_path],
                          capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS='cpu'))
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{')]
    if proc.returncode or not lines:
      raise SystemExit(f'the Tunix side failed ({proc.returncode}):\n{proc.stderr[-3000:]}')
    theirs = json.loads(lines[-1])
    tunix_logits = np.load(spec['logits_out'])
  model = transformers.AutoModelForCausalLM.from_pretrained(ours.config.model.hf_path,
                                                            dtype=torch.float32).eval()
  with torch.no_grad():
    want = model(torch.tensor([prompts[0]])).logits[0].numpy()
  # Ours stops at the stop token (kept); Tunix cuts before it: compare without it.
  strip = lambda row: [t for t in row if t not in stop_ids]  # noqa: E731
  match = [strip(a) == strip(b) for a, b in zip(ours_greedy, theirs['greedy'])]
  rate_ours, rate_theirs = tokens / seconds, theirs['tokens'] / theirs['seconds']
  return {'ours_tokens_per_s': rate_ours, 'tunix_tokens_per_s': rate_theirs,
          'speedup': rate_ours / rate_theirs, 'target': 1.5, 'ours_tokens': tokens,
          'tunix_tokens': theirs['tokens'], 'ours_seconds': seconds,
          'tunix_seconds': theirs['seconds'], 'greedy_match': f'{sum(match)}/{len(match)}',
          'tunix_logits_max_abs_diff': float(np.abs(tunix_logits - want).max()),
          'tunix_version': theirs['version'], 'tunix_threads': theirs['cpus'],
          'greedy_first_row': {'ours': ours_greedy[0], 'tunix': theirs['greedy'][0]}}


def tunix_side(spec_path: str) -> dict:
  """Runs in Tunix's virtualenv (stdlib, numpy, jax and Tunix only): loads the model with
  Tunix's own Llama3 loader and times its sampler on the spec's prompts."""
  import functools
  from importlib import metadata

  import jax
  import jax.numpy as jnp
  import numpy as np
  from tunix.generate import sampler as tunix_sampler
  from tunix.models.llama3 import model as llama3
  from tunix.models.llama3 import params as llama3_params
  with open(spec_path) as fh:
    spec = json.load(fh)
  cpus = pin_threads(spec['threads'])
  with open(os.path.join(spec['model_dir'], 'config.json')) as fh:
    hf = json.load(fh)
  cfg = llama3.ModelConfig(
      num_layers=hf['num_hidden_layers'], vocab_size=hf['vocab_size'],
      embed_dim=hf['hidden_size'], hidden_dim=hf['intermediate_size'],
      num_heads=hf['num_attention_heads'],
      head_dim=hf.get('head_dim') or hf['hidden_size'] // hf['num_attention_heads'],
      num_kv_heads=hf['num_key_value_heads'], rope_theta=int(hf['rope_theta']),
      norm_eps=hf['rms_norm_eps'], weight_tying=bool(hf.get('tie_word_embeddings')))
  # Tunix 0.1.7's Llama3 attention calls apply_rope without the config's rope_theta, so every
  # model gets its default, 1e6; SmolLM2's is 1e5 (its greedy tokens then differ from the
  # model's within ~10 tokens). Bound here to the config's value, what the model needs.
  llama3.apply_rope = functools.partial(llama3.apply_rope, rope_theta=cfg.rope_theta)
  mesh = jax.make_mesh((1, 1), ('fsdp', 'tp'), devices=jax.devices()[:1],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  model = llama3_params.create_model_from_safe_tensors(spec['model_dir'], cfg, mesh,
                                                       dtype=jnp.float32)
  width = max(map(len, spec['prompts']))

  class IdTokenizer:
    """'wN' words <-> token id N, no BOS added: Tunix sees the very ids we sample from."""

    def encode(self, text, **kwargs) -> list[int]:
      return [int(w[1:]) for w in str(text).split()]

    def decode(self, ids, **kwargs) -> str:
      return ' '.join(f'w{int(i)}' for i in ids)

    def bos_id(self):
      return None

    def eos_id(self) -> int:
      return spec['stop_ids'][0]

    def pad_id(self) -> int:
      return spec['pad_id']

  sampler = tunix_sampler.Sampler(model, IdTokenizer(), tunix_sampler.CacheConfig(
      cache_size=width + spec['max_new'], num_layers=cfg.num_layers,
      num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim))
  texts = [' '.join(f'w{t}' for t in p) for p in spec['prompts']]

  def call(texts, seed, temperature, top_p=None, top_k=None):
    with mesh:
      out = sampler(texts, max_generation_steps=spec['max_new'], max_prompt_length=width,
                    temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                    eos_tokens=spec['stop_ids'])
    return [list(map(int, t)) for t in out.tokens]

  sampled = dict(temperature=spec['temperature'], top_p=spec['top_p'],
                 top_k=spec['top_k'] or None)
  call(texts, 10_000, **sampled)  # warm-up: compile
  tokens, seconds = 0, 0.0
  for rep in range(spec['steps']):
    start = time.perf_counter()
    rows = call(texts, rep, **sampled)
    seconds += time.perf_counter() - start
    tokens += real_tokens(rows, spec['stop_ids'], spec['max_new'])
  greedy = call(texts[:GREEDY_ROWS], 0, temperature=0.0)
  first = jnp.asarray([spec['prompts'][0]])
  length = first.shape[1]
  with mesh:
    out = model(first, jnp.arange(length)[None], None, jnp.tril(jnp.ones((length, length), bool))[None])
  np.save(spec['logits_out'], np.asarray((out[0] if isinstance(out, tuple) else out)[0], np.float32))
  return {'tokens': tokens, 'seconds': seconds, 'greedy': greedy, 'cpus': cpus,
          'version': metadata.version('google-tunix')}

def medians(steps: list[dict]) -> dict:
  return {f'{k}_seconds': statistics.median(s[k] for s in steps)
          for k in ('sample', 'verify', 'train', 'other', 'step')}


def split_comparison(args, ours: Ours) -> dict:
  ours.rl_step(timed=False)  # warm-up: sampler and train step compile
  ours.steps.clear()
  for _ in range(args.steps):
    ours.rl_step()
  result = medians(ours.steps)
  result['shares'] = {k: result[f'{k}_seconds'] / result['step_seconds']
                      for k in ('sample', 'verify', 'train', 'other')}
  result['completion_tokens_mean'] = statistics.mean(s['completion_tokens'] for s in ours.steps)
  result['compiles'] = {'sampler': ours.su.sampler.compile_count,
                        'train_step': ours.rs.learner.compile_count}
  return result


def trl_messages(su, query) -> list[dict]:
  """`query`'s prompt as the chat messages our tokenizer renders (tokenizer.prompt_text)."""
  prompt = query.prompt
  messages = ([{'role': 'user', 'content': prompt}] if isinstance(prompt, str)
              else [dict(m) for m in prompt])
  if su.tokenizer.system_prompt and messages[0].get('role') != 'system':
    messages.insert(0, {'role': 'system', 'content': su.tokenizer.system_prompt})
  return messages


def trl_reward(reward_fn, pool):
  """TRL's reward function over our verifier: `reward_fn(texts, queries)` (tasks.RewardFn)
  on each completion's text, its query found by the dataset's `query_index` column."""
  def reward(prompts, completions, query_index, **kwargs):
    del prompts, kwargs
    texts = [c[-1]['content'] if isinstance(c, list) else c for c in completions]
    return [float(r) for r in reward_fn(texts, [pool[i] for i in query_index])]
  reward.__name__ = 'verifier'
  return reward


def trl_comparison(args, ours: Ours, workdir: str) -> dict:
  import datasets
  import transformers
  import trl
  su, config = ours.su, ours.config
  folder = config.model.hf_path
  tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  pool = su.train_queries
  n_prompts = (args.steps + 1) * (args.rows // args.group)
  records = [{'prompt': trl_messages(su, pool[i % len(pool)]), 'query_index': i % len(pool)}
             for i in range(n_prompts)]
  rendered = tokenizer.apply_chat_template(records[0]['prompt'], tokenize=False,
                                           add_generation_prompt=True)
  same_prompt = rendered == su.tokenizer.prompt_text(pool[records[0]['query_index']].prompt)

  peft_config = None
  if args.rank:
    import peft
    names = {'q': 'q_proj', 'k': 'k_proj', 'v': 'v_proj', 'o': 'o_proj', 'gate': 'gate_proj',
             'up': 'up_proj', 'down': 'down_proj'}
    targets = [names[t] for t in str(config.model.lora_targets).split(',')]
    peft_config = peft.LoraConfig(r=args.rank, lora_alpha=float(config.model.lora_alpha),
                                  target_modules=targets, lora_dropout=0.0)
  trl_args = trl.GRPOConfig(  # one generation per optimizer step, as ours
      output_dir=os.path.join(workdir, 'trl'), use_cpu=True, report_to='none',
      save_strategy='no', logging_steps=10**6, disable_tqdm=True, seed=int(config.seed),
      per_device_train_batch_size=args.rows, gradient_accumulation_steps=1,
      steps_per_generation=1, num_generations=args.group, num_iterations=1,
      max_completion_length=args.max_new, temperature=config.sampling.temperature,
      top_p=config.sampling.top_p, top_k=config.sampling.top_k,
      learning_rate=config.train.learning_rate, lr_scheduler_type='constant', warmup_steps=0,
      beta=0.0, bf16=False, fp16=False, gradient_checkpointing=bool(config.model.remat),
      max_steps=args.steps + 1, dataloader_num_workers=0)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=hf_dtype(args.dtype))

  class Interleave(transformers.TrainerCallback):
    """TRL's step wall times; after each TRL step, one of ours (outside TRL's window)."""

    def __init__(self):
      self.seconds: list[float] = []
      self.start = 0.0

    def on_step_begin(self, *a, **kw):
      self.start = time.perf_counter()

    def on_step_end(self, *a, **kw):
      self.seconds.append(time.perf_counter() - self.start)
      ours.rl_step(timed=len(self.seconds) > 1)  # the first of each side: warm-up

  timer = Interleave()
  trainer = trl.GRPOTrainer(model=model, reward_funcs=[trl_reward(su.reward_fn.fn, pool)],
                            args=trl_args,
                            train_dataset=datasets.Dataset.from_list(records),
                            processing_class=tokenizer, callbacks=[timer],
                            peft_config=peft_config)
  ours.steps.clear()
  trainer.train()
  theirs = statistics.median(timer.seconds[1:])
  mine = medians(ours.steps)
  # TRL's mean over all its steps (logged once, at the end of train: logging_steps is huge).
  logged = [h for h in trainer.state.log_history if 'completions/mean_length' in h]
  del trainer, model
  return {'trl_step_seconds': theirs, 'ours_step_seconds': mine['step_seconds'],
          'speedup': theirs / mine['step_seconds'], 'target': 2.0,
          'trl_steps_seconds': timer.seconds, 'ours': mine,
          'ours_completion_len_mean': statistics.mean(
              s['completion_tokens'] for s in ours.steps) / args.rows,
          'trl_completion_len_mean': (float(logged[-1]['completions/mean_length'])
                                      if logged else None),
          'trl_prompt_text_matches': same_prompt, 'trl_version': trl.__version__,
          'gradient_checkpointing': bool(config.model.remat)}


def main(argv=None) -> list[dict]:
  args = parse_args(argv)
  if args.tunix_spec:  # the Tunix side, in Tunix's virtualenv
    print(json.dumps(tunix_side(args.tunix_spec)), flush=True)
    return []
  cpus = pin_threads(args.threads)
  import torch
  torch.set_num_threads(args.threads)
  workdir = tempfile.mkdtemp(prefix='bench_real_model_')
  load_before = os.getloadavg()
  common = {'model': 'smollm2-135m-instruct', 'commit': git_commit(), 'rows': args.rows,
            'group': args.group, 'max_new': args.max_new, 'steps': args.steps,
            'threads': args.threads, 'cpus_usable': cpus, 'rank': args.rank,
            'dtype': args.dtype, 'draw': args.draw, 'scan_unroll': args.scan_unroll or None}
  lines = []
  ours = Ours(args, os.path.join(workdir, 'run'))
  try:
    for which in args.which:
      before = os.getloadavg()
      if which == 'decode':
        result = decode_comparison(args, ours)
      elif which == 'split':
        result = split_comparison(args, ours)
      elif which == 'tunix':
        result = tunix_comparison(args, ours)
      else:
        result = trl_comparison(args, ours, workdir)
      line = {'comparison': which, **common, **result, 'load_average_before': before,
              'load_average_after': os.getloadavg(), 'run_load_average_before': load_before,
              'time': time.strftime('%Y-%m-%dT%H:%M:%S')}
      os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
      with open(args.results, 'a') as fh:
        fh.write(json.dumps(line) + '\n')
      lines.append(line)
      print(json.dumps(line), flush=True)
  finally:
    ours.close()
    shutil.rmtree(workdir, ignore_errors=True)
  return lines


if __name__ == '__main__':
  main()
