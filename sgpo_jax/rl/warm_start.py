"""Supervised warm start: the "pretrained" initial policy for the embedded task.

SFT on the task's canonical completions (loss on completion tokens and EOS only), stopped
early on purpose: a policy that solves some problems always, some never and many partly is
what gives sGPO a spread of p_hat to exploit. The result is cached under a key derived from
everything that shapes it (model, data, warm_start, tokenizer config), so repeated runs
(other methods, other RL seeds, the comparison sweep) start from the very same policy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax import traverse_util
from safetensors.numpy import load, save
from tqdm.auto import tqdm

from sgpo_jax import tasks
from sgpo_jax.data import loading as loading_lib
from sgpo_jax.data import tokenizer as tokenizer_lib
from sgpo_jax.model import hf as hf_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.outputs import environment
from sgpo_jax.parallel import processes
from sgpo_jax.parallel import sharding as sharding_lib


def cache_key(config) -> str:
  relevant = {k: config[k].to_dict() for k in ('model', 'data', 'warm_start', 'tokenizer')}
  relevant['warm_start'].pop('cache_dir', None)
  for name in ('attention_impl', 'attention_q_chunk', 'attention_kv_chunk', 'scan_unroll'):
    relevant['model'].pop(name, None)  # how the model is computed, not which policy it is
  for name in ('lora_rank', 'lora_alpha', 'lora_targets', 'lora_base_dtype'):
    relevant['model'].pop(name, None)  # the warm start is fully fine-tuned; adapters come after
  relevant['warm_start'].pop('shipped', None)  # where the policy comes from, not what it is
  if not relevant['warm_start'].get('level_fractions', ()):
    relevant['warm_start'].pop('level_fractions', None)  # keys of whole-pool caches stay as they were
  if relevant['warm_start'].get('schedule', 'constant') == 'constant':
    relevant['warm_start'].pop('schedule', None)  # keys of constant-lr caches stay as they were
  # Fields added since the shipped caches, at their off value, leave the key as it was.
  for section, name in (('model', 'pretrained'), ('data', 'question_template')):
    if not relevant[section].get(name):
      relevant[section].pop(name, None)
  relevant['data'].pop('rl_pool_size', None)  # SFT always sees the whole pool
  relevant['data'].pop('rl_difficulty_weights', None)
  data = config.data
  if data.source == 'arithmetic' and data.num_eval > 512:
    # Pools drawn with an eval set past the excluded core (tasks/arithmetic.py EVAL_CORE)
    # differ from those of earlier versions, which drew the pool around the whole eval set.
    relevant['eval_core'] = 512
    # Every eval size past the core leaves the pool (so the SFT) as it is: key them all as
    # the default's 2048, so a larger comparison eval reuses the README run's warm start.
    relevant['data']['num_eval'] = 2048
  blob = json.dumps(relevant, sort_keys=True, default=str)
  return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sft_queries(queries, ws_config, min_level: int = 1) -> list:
  """The pool queries the warm start trains on, in pool order: all of them, or with
  `ws_config.level_fractions` the last round(f * n) of each level's n queries (level
  `min_level + i` gets fraction i). The last: the RL pool is a prefix of the pool
  (`data.rl_pool_size`), so the few problems SFT sees of a partly-seen level are not ones RL
  is scored on having learnt."""
  fractions = tuple(ws_config.get('level_fractions', ()))
  if not fractions:
    return list(queries)
  per_level: dict[int, int] = {}
  for q in queries:
    per_level[q.difficulty] = per_level.get(q.difficulty, 0) + 1
  keep = {d: round(fractions[d - min_level] * n) for d, n in per_level.items()}
  seen = {d: 0 for d in keep}
  kept = []
  for q in queries:
    seen[q.difficulty] += 1
    if seen[q.difficulty] > per_level[q.difficulty] - keep[q.difficulty]:
      kept.append(q)
  if not kept:
    raise ValueError(f'warm_start.level_fractions={fractions} leaves no pool query to train '
                     'on; raise a fraction or set () (the whole pool).')
  return kept


def sft_examples(queries, tokenizer, data_config, max_prompt_len: int, max_new_tokens: int):
  """[N, T] tokens (prompt left-padded to max_prompt_len), real-token mask, loss mask [N, T-1]."""
  t_len = max_prompt_len + max_new_tokens
  n = len(queries)
  tokens = np.full((n, t_len), tokenizer.pad_id, np.int32)
  mask = np.zeros((n, t_len), np.int32)
  loss_mask = np.zeros((n, t_len - 1), np.float32)
  for i, q in enumerate(queries):
    prompt = tokenizer.encode_prompt(q.prompt)
    target = tokenizer.encode(tasks.target_text(q, data_config)) + [tokenizer.eos_id]
    if len(target) > max_new_tokens:
      raise ValueError(f'target of {q.id!r} has {len(target)} tokens > sampling.max_new_tokens='
                       f'{max_new_tokens}; raise max_new_tokens.')
    tokens[i, max_prompt_len - len(prompt):max_prompt_len] = prompt
    tokens[i, max_prompt_len:max_prompt_len + len(target)] = target
    mask[i, max_prompt_len - len(prompt):max_prompt_len + len(target)] = 1
    loss_mask[i, max_prompt_len - 1:max_prompt_len - 1 + len(target)] = 1.0
  return tokens, mask, loss_mask


def train_sft(cfg: model_lib.ModelConfig, params, shardings, mesh, examples, ws_config,
              seed: int, show_progress: bool = True, callback=None, callback_every: int = 0):
  """SFT for ws_config.steps steps; returns (params, final loss).

  callback(steps_done, params) runs every `callback_every` steps (probes of the warm start's
  strength along one SFT trajectory, e.g.
  `python -m studies.regime_histograms.regime_histograms --sft-probe`).
  """
  tokens_NxT, mask_NxT, loss_mask_NxT1 = examples
  model = model_lib.Transformer(cfg)
  lr = float(ws_config.learning_rate)
  schedule = ws_config.get('schedule', 'constant') if hasattr(ws_config, 'get') else 'constant'
  if schedule == 'cosine':  # decays to 0 at the last step: the policy settles
    lr = optax.cosine_decay_schedule(lr, max(int(ws_config.steps), 1))
  elif schedule != 'constant':
    raise ValueError(f"warm_start.schedule={schedule!r} is not 'constant' or 'cosine'")
  optimizer = optax.adamw(lr)
  opt_state = sharding_lib.init_optimizer_state(optimizer, params)
  state_shardings = jax.tree.map(lambda x: x.sharding, (params, opt_state))
  b2 = sharding_lib.batch_sharding(mesh, 2)

  def loss_fn(p, tokens, mask, loss_mask):
    inputs, in_mask = tokens[:, :-1], mask[:, :-1]
    hidden, _ = model.apply({'params': p}, inputs, model_lib.positions_from_mask(in_mask),
                            in_mask.astype(bool))
    logits = model_lib.logits_from_hidden(p, cfg, hidden)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1)[..., 0]
    return -jnp.sum(logp * loss_mask) / jnp.maximum(jnp.sum(loss_mask), 1.0)

  @jax.jit
  def step(state, tokens, mask, loss_mask):
    p, o = state
    loss, grads = jax.value_and_grad(loss_fn)(p, tokens, mask, loss_mask)
    updates, o = optimizer.update(grads, o, p)
    return (optax.apply_updates(p, updates), o), loss

  step = jax.jit(step.__wrapped__, in_shardings=(state_shardings, b2, b2, b2),
                 out_shardings=(state_shardings, sharding_lib.replicated(mesh)), donate_argnums=0)
  rng = np.random.default_rng(seed)
  batch = int(ws_config.batch_size)
  state = (params, opt_state)
  bar = tqdm(range(int(ws_config.steps)), desc='warm start (SFT)', disable=not show_progress)
  loss = None
  multi_process = jax.process_count() > 1
  with bar:  # closed on any exit: a one-line error starts its own line
    for i in bar:
      idx = rng.integers(0, tokens_NxT.shape[0], batch)
      b = sharding_lib.shard_batch(mesh, (tokens_NxT[idx], mask_NxT[idx], loss_mask_NxT1[idx]))
      state, loss = step(state, *b)
      if multi_process:
        # One step in flight at a time: queued steps' cross-process collectives on CPU (gloo)
        # can interleave across a process's devices and hang the run.
        loss.block_until_ready()
      if i % 50 == 0 or i == int(ws_config.steps) - 1:
        bar.set_postfix(loss=f'{float(loss):.3f}')
      if callback is not None and callback_every and (i + 1) % callback_every == 0:
        callback(i + 1, state[0])
  return state[0], (None if loss is None else float(loss))


def initial_policy(config, cfg: model_lib.ModelConfig, mesh, tokenizer, train_queries, workdir,
                   show_progress: bool = True):
  """Params of the policy RL starts from (HF checkpoint, cached warm start, or fresh SFT).

  Returns (params, shardings, info dict for summary.json).
  """
  abstract = model_lib.abstract_params(cfg)
  shardings = sharding_lib.param_shardings(abstract, mesh)
  if config.model.hf_path:
    params = hf_lib.load_hf_params(config.model.hf_path, cfg, mesh)
    return params, shardings, {'source': 'hf', 'path': config.model.hf_path}
  if config.warm_start.steps <= 0:
    params, _ = model_lib.init_sharded_params(cfg, mesh, jax.random.key(config.data.seed))
    return params, shardings, {'source': 'random_init'}
  cache_root = config.warm_start.cache_dir or os.path.join(workdir, 'warm_start')
  path = os.path.abspath(os.path.join(cache_root, cache_key(config)))
  target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        nn.meta.unbox(abstract), shardings)
  with _build_lock(path):
    return _restore_or_build(config, cfg, mesh, tokenizer, train_queries, path, target,
                             shardings, show_progress)


@contextlib.contextmanager
def _build_lock(path: str):
  """Holds `<path>.lock` (writer process only) while this run restores or builds the warm
  start at `path`, so two runs sharing a cache (a sweep's parallel processes) never both spend
  an SFT on it or write it at once: the second waits, then reuses the first one's policy."""
  if not processes.is_writer():
    yield
    return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.lock', 'w') as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      logging.info('warm start: another run is building %s; waiting for it', path)
      fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


def _restore_or_build(config, cfg, mesh, tokenizer, train_queries, path, target, shardings,
                      show_progress):
  checkpointer = ocp.StandardCheckpointer()
  info_path = os.path.join(path, 'info.json')
  cached = None
  if (processes.is_writer() and os.path.exists(info_path) and
      os.path.exists(os.path.join(path, 'params'))):
    with open(info_path) as f:
      cached = json.load(f)
  # One decision for all processes: restore and SFT are both collective.
  info = processes.broadcast_from_writer(cached)
  if info is not None:
    params = restore_params(checkpointer, os.path.join(path, 'params'), target)
    info['cached'] = True
    logging.info('warm start: reused cached policy %s', path)
    return params, shardings, info
  shipped = shipped_file(cache_key(config)) if config.warm_start.get('shipped', True) else None
  if shipped is not None:
    params, info = load_shipped(shipped, target)
    info.update(path=path, cached=False)
    logging.info('warm start: the package ships this policy (%s); no SFT', shipped)
  else:
    params, info = _train(config, cfg, mesh, tokenizer, train_queries, path, shardings,
                          show_progress)
  os.makedirs(path, exist_ok=True)
  checkpointer.save(os.path.join(path, 'params'), params, force=True)
  checkpointer.wait_until_finished()
  if processes.is_writer():
    with open(info_path, 'w') as f:
      json.dump(info, f)
  return params, shardings, info


def restore_params(checkpointer, path: str, target):
  """Orbax params at `path` onto `target`; a cache written in the per-layer layout of before
  the layers were scanned is restored as such and stacked (`transformer.stack_layers`)."""
  try:
    return checkpointer.restore(path, target)
  except (ValueError, KeyError):
    saved = checkpointer.metadata(path)
    saved = getattr(saved, 'item_metadata', saved)
    if not model_lib.has_per_layer_layout(_as_dict(saved)):
      raise
  host = model_lib.stack_layers(_as_dict(checkpointer.restore(path)))
  return jax.tree.map(lambda x, t: jax.make_array_from_callback(
      t.shape, t.sharding, lambda idx, x=np.asarray(x, t.dtype): x[idx]), host, target)


def _as_dict(tree):
  """Orbax metadata/restore trees -> plain nested dicts."""
  if hasattr(tree, 'items'):
    return {k: _as_dict(v) for k, v in tree.items()}
  return tree


def _train(config, cfg, mesh, tokenizer, train_queries, path, shardings, show_progress):
  start = time.time()
  params, _ = model_lib.init_sharded_params(cfg, mesh, jax.random.key(config.data.seed))
  sft_pool = sft_queries(train_queries, config.warm_start, config.data.min_digits)
  examples = sft_examples(sft_pool, tokenizer, config.data, config.sampling.max_prompt_len,
                          config.sampling.max_new_tokens)
  params, final_loss = train_sft(cfg, params, shardings, mesh, examples, config.warm_start,
                                 config.data.seed, show_progress)
  # The environment: a cache built elsewhere rounds differently (environment.py).
  info = {'source': 'warm_start', 'steps': int(config.warm_start.steps),
          'final_loss': final_loss, 'seconds': time.time() - start, 'path': path,
          'cached': False, 'environment': environment.describe()}
  return params, info


def policy_for_config(config, workdir: str, show_progress: bool = True):
  """(params, info) of `config`'s initial policy, built outside a run: its mesh, tokenizer,
  model and training queries, then `initial_policy` (tools and tests that need only that)."""
  mesh = sharding_lib.make_mesh(config.mesh)
  tokenizer = tokenizer_lib.load_tokenizer(config.tokenizer)
  cfg = model_lib.ModelConfig.from_config(config.model)
  queries = loading_lib.load_queries(config.data, 'train', seed=config.data.seed,
                                     tokenizer=tokenizer,
                                     max_prompt_len=config.sampling.max_prompt_len)
  params, _, info = initial_policy(config, cfg, mesh, tokenizer, queries, workdir,
                                   show_progress)
  return params, info


# ----------------------------------------------------------------------------------------
# Shipped warm starts: the regimes' initial policies as built on the reference machine.
# XLA:CPU rounds differently on other CPU types, so the same SFT elsewhere ends at another
# policy (README, "Reproducibility across machines"); a shipped copy makes every machine start
# RL from the very policy the committed results started from. Files: <key>.safetensors.xz (the
# params, '/'-joined paths; xz takes 8% off float32 weights, 0.6 MB of the repository's two)
# and <key>.json (the build's info.json, its environment included), written by
# sgpo_jax/ship_warm_start.py.

SHIPPED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'warm_starts')
SHIPPED_SUFFIX = '.safetensors.xz'


def shipped_file(key: str, shipped_dir: str | None = None) -> str | None:
  path = os.path.join(shipped_dir or SHIPPED_DIR, key + SHIPPED_SUFFIX)
  return path if os.path.exists(path) else None


def shipped_info_file(path: str) -> str:
  """The build-info JSON beside a shipped params file."""
  return path[:-len(SHIPPED_SUFFIX)] + '.json'


def export_shipped(params, info: dict, key: str, shipped_dir: str | None = None) -> str:
  """Writes a warm start's params and build info as the shipped copy for cache key `key`."""
  out = shipped_dir or SHIPPED_DIR
  os.makedirs(out, exist_ok=True)
  flat = traverse_util.flatten_dict(jax.device_get(params), sep='/')
  path = os.path.join(out, key + SHIPPED_SUFFIX)
  with lzma.open(path, 'wb', preset=9 | lzma.PRESET_EXTREME) as f:
    f.write(save({k: np.ascontiguousarray(v) for k, v in flat.items()}))
  kept = {k: info[k] for k in ('source', 'steps', 'final_loss', 'seconds', 'environment')
          if k in info}
  with open(shipped_info_file(path), 'w') as f:
    json.dump(kept, f, indent=1, sort_keys=True)
  return path


def load_shipped(path: str, target) -> tuple[Any, dict]:
  """(params laid out as `target`'s shapes, dtypes and shardings, the build's info plus
  shipped=True). A file whose tensors do not match the model raises, naming the tensor."""
  with lzma.open(path) as f:
    flat = load(f.read())
  if any(name.startswith('layers_0/') for name in flat):  # shipped before the layers were scanned
    flat = traverse_util.flatten_dict(
        model_lib.stack_layers(traverse_util.unflatten_dict(flat, sep='/')), sep='/')
  want = traverse_util.flatten_dict(target, sep='/')
  if set(flat) != set(want):
    raise ValueError(f'{path} holds tensors {sorted(set(flat) ^ set(want))[:4]} that the '
                     'model does not (or lacks them): it was shipped for another model; set '
                     'warm_start.shipped=False to train this warm start instead.')
  arrays = {}
  for name, spec in want.items():
    x = flat[name]
    if x.shape != spec.shape or x.dtype != spec.dtype:
      raise ValueError(f'{path}: {name} is {x.dtype}{list(x.shape)}, the model wants '
                       f'{spec.dtype}{list(spec.shape)}; set warm_start.shipped=False.')
    arrays[name] = jax.make_array_from_callback(spec.shape, spec.sharding,
                                                lambda idx, x=x: x[idx])
  with open(shipped_info_file(path)) as f:
    info = json.load(f)
  info.update(shipped=True, shipped_file=os.path.basename(path),
              loaded_on=environment.describe())
  return traverse_util.unflatten_dict(arrays, sep='/'), info
