"""Static-shape batched generation with a KV cache: profiling, rollouts and eval all use it.

Shapes are fixed per sampler: `rows` per call and `max_new_tokens`; prompts are
left-padded into a few length buckets (powers of two from `min_prompt_bucket` up to
`max_prompt_len`), so the number of compilations is at most the number of buckets.
Temperature, top-p and top-k are traced values: changing them never recompiles.

Randomness is per row: row r's key is `fold_in(rng, row_id[r])`, so a completion depends
only on its own row id, not on how rows are split over devices or calls. A negative row id
marks an unused (filler) row: it starts done, so it never holds up the early exit once every
real row has stopped, and it returns PAD with mask 0.

Returned log-probs are those of each sampled token under the temperature-scaled,
untruncated distribution (log_softmax(logits / T); T = 0 counts as T = 1). That is the
behaviour policy the train step recomputes, so importance ratios start at exactly 1.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib


@dataclasses.dataclass
class SampleOutput:
  tokens_RxN: np.ndarray  # sampled tokens, PAD after the first stop token
  mask_RxN: np.ndarray  # 1 for generated tokens up to and including the stop token
  lengths_R: np.ndarray
  logprobs_RxN: np.ndarray  # 0 where mask is 0
  # Per call: (prompt bucket length, tokens generated before the loop exited). The loop
  # stops when every real row of the call is done (filler rows start done), so this is what the
  # hardware computed; the FLOPs ledger counts it.
  calls: list = dataclasses.field(default_factory=list)
  prompt_lens_R: np.ndarray | None = None  # real prompt tokens per row (useful-token counts)


def prompt_buckets(max_prompt_len: int, min_prompt_bucket: int = 16) -> tuple[int, ...]:
  buckets, size = [], max(1, min_prompt_bucket)
  while size < max_prompt_len:
    buckets.append(size)
    size *= 2
  return tuple(buckets) + (max_prompt_len,)


def _filter_logits(logits_RxV, top_p, top_k):
  """Masks tokens outside top-k (k <= 0: off), then outside the top-p nucleus of what is
  left, renormalised (p >= 1: off): the order of transformers' and vLLM's samplers."""
  sorted_RxV = jnp.sort(logits_RxV, axis=-1)[:, ::-1]
  vocab = logits_RxV.shape[-1]
  k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
  kth_R = jnp.take_along_axis(sorted_RxV, jnp.broadcast_to(k - 1, (logits_RxV.shape[0], 1)),
                              axis=-1)
  # The nucleus is taken over the top-k tokens' renormalised probabilities (ties at the k-th
  # value stay in, as top-k keeps them).
  probs_RxV = jax.nn.softmax(jnp.where(sorted_RxV >= kth_R, sorted_RxV, -jnp.inf), axis=-1)
  before_RxV = jnp.cumsum(probs_RxV, axis=-1) - probs_RxV  # mass strictly above each token
  keep_RxV = (before_RxV < top_p) | (jnp.arange(vocab) == 0)
  nucleus_min_R = jnp.min(jnp.where(keep_RxV, sorted_RxV, jnp.inf), axis=-1, keepdims=True)
  threshold_R = jnp.maximum(kth_R, nucleus_min_R)
  return jnp.where(logits_RxV >= threshold_R, logits_RxV, -jnp.inf)


DRAWS = ('gumbel', 'blocked')
DRAW_BLOCK = 512  # tokens per block of the 'blocked' draw


def blocked_categorical(key, logits_V, block: int = DRAW_BLOCK):
  """One draw from softmax(logits_V), exact in distribution, from about V / block + block
  random numbers instead of V: a block of `block` consecutive tokens is drawn by its total
  mass (its logsumexp), then a token inside it by its logit. P(i) = P(block of i) *
  P(i | block) = softmax(logits)_i. On CPU the V Gumbel variates of `jax.random.categorical`
  cost as much as the LM head's matmul per decode step (benchmarks/bench_tunix_decode.py)."""
  v = logits_V.shape[-1]
  n = -(-v // block)
  blocks_NxB = jnp.pad(logits_V, (0, n * block - v), constant_values=-jnp.inf).reshape(n, block)
  key_block, key_token = jax.random.split(key)
  b = jax.random.categorical(key_block, jax.nn.logsumexp(blocks_NxB, axis=-1))
  return b * block + jax.random.categorical(key_token, blocks_NxB[b])


def check_draw(draw: str) -> str:
  if draw not in DRAWS:
    raise ValueError(f'sampling.draw={draw!r} is unknown; use one of {DRAWS}.')
  return draw


def pick_tokens(logits_RxV, keys_R, temperature, top_p, top_k, draw: str = 'gumbel'):
  """Sampled (or greedy: temperature <= 0) tokens and their log-probs under the temperature;
  `draw` (static): 'gumbel' = `jax.random.categorical` over the vocabulary, 'blocked' =
  `blocked_categorical` (same distribution, another random stream, far fewer variates)."""
  greedy = temperature <= 0.0
  scaled_RxV = logits_RxV / jnp.where(greedy, 1.0, temperature)
  logp_all_RxV = jax.nn.log_softmax(scaled_RxV, axis=-1)
  needs_filter = (top_k > 0) | (top_p < 1.0)
  filtered_RxV = jax.lax.cond(needs_filter, lambda x: _filter_logits(x, top_p, top_k),
                              lambda x: x, scaled_RxV)
  categorical = blocked_categorical if check_draw(draw) == 'blocked' else jax.random.categorical
  sampled_R = jax.vmap(categorical)(keys_R, filtered_RxV)
  tokens_R = jnp.where(greedy, jnp.argmax(logits_RxV, axis=-1), sampled_R).astype(jnp.int32)
  logp_R = jnp.take_along_axis(logp_all_RxV, tokens_R[:, None], axis=-1)[:, 0]
  return tokens_R, logp_R


class Sampler:
  """Jitted generator for one policy config on one mesh; see the module docstring."""

  def __init__(self, cfg: model_lib.ModelConfig, mesh: Mesh, param_shardings, *, rows: int,
               max_prompt_len: int, max_new_tokens: int, stop_ids: Sequence[int], pad_id: int,
               bos_id: int | None = None, min_prompt_bucket: int = 16, draw: str = 'gumbel'):
    multiple = sharding_lib.batch_size_multiple(mesh)
    if rows % multiple:
      raise ValueError(f'sampler rows={rows} is not a multiple of the mesh batch axes size '
                       f'{multiple}; choose train.rows_per_batch divisible by {multiple}.')
    self.cfg, self.mesh, self.rows = cfg, mesh, rows
    self.draw = check_draw(draw)
    self.max_prompt_len, self.max_new_tokens = max_prompt_len, max_new_tokens
    self.stop_ids = np.asarray(sorted(set(stop_ids)), np.int32)
    self.pad_id = pad_id
    self.bos_id = pad_id if bos_id is None else bos_id
    self.buckets = prompt_buckets(max_prompt_len, min_prompt_bucket)
    self.model = lora_lib.make_model(cfg)
    self.traces = 0
    rows_2d = sharding_lib.batch_sharding(mesh, 2)
    rows_1d = sharding_lib.batch_sharding(mesh, 1)
    rep = sharding_lib.replicated(mesh)
    cache_2 = (sharding_lib.cache_sharding(mesh),) * 2
    # The KV cache is made by its own jit and donated, so the decode loop writes it in place
    # and the generator's temp memory holds no copy of it.
    self._init_cache_jit = jax.jit(model_lib.init_cache, static_argnums=(0, 1, 2),
                                   out_shardings=cache_2)
    self._generate_jit = jax.jit(
        self._generate,
        in_shardings=(param_shardings, cache_2, rows_2d, rows_2d, rows_1d, rep, rep, rep, rep),
        out_shardings=(rows_2d, rows_2d, rows_1d, rows_2d, cache_2), donate_argnums=(1,))

  @property
  def compile_count(self) -> int:
    """Number of times the generator was traced (= compiled): one per prompt bucket used."""
    return self.traces

  def _generate(self, params, cache, prompt_RxP, prompt_mask_RxP, row_ids_R, rng, temperature,
                top_p, top_k):
    self.traces += 1
    cfg, n_new = self.cfg, self.max_new_tokens
    rows, prompt_len = prompt_RxP.shape
    kv_mask_RxS = jnp.concatenate([prompt_mask_RxP.astype(bool), jnp.ones((rows, n_new), bool)],
                                  axis=1)
    variables = {'params': params}
    hidden_RxPxD, cache = self.model.apply(
        variables, prompt_RxP, model_lib.positions_from_mask(prompt_mask_RxP), kv_mask_RxS,
        cache, 0)
    logits_RxV = model_lib.logits_from_hidden(params, cfg, hidden_RxPxD[:, -1:])[:, 0]
    row_keys = jax.vmap(lambda i: jax.random.fold_in(rng, i))(row_ids_R)
    step_keys = lambda t: jax.vmap(lambda k: jax.random.fold_in(k, t))(row_keys)  # noqa: E731
    stop_ids = jnp.asarray(self.stop_ids)
    prompt_len_R = jnp.sum(prompt_mask_RxP.astype(jnp.int32), axis=1)

    token_R, logp_R = pick_tokens(logits_RxV, step_keys(0), temperature, top_p, top_k,
                                   self.draw)
    used_R = row_ids_R >= 0
    token_R = jnp.where(used_R, token_R, self.pad_id)
    tokens_RxN = jnp.full((rows, n_new), self.pad_id, jnp.int32).at[:, 0].set(token_R)
    logps_RxN = jnp.zeros((rows, n_new), jnp.float32).at[:, 0].set(jnp.where(used_R, logp_R, 0.0))
    mask_RxN = jnp.zeros((rows, n_new), jnp.int32).at[:, 0].set(used_R.astype(jnp.int32))
    done_R = ~used_R | jnp.isin(token_R, stop_ids)

    def cond(state):
      t, _, _, done_R, *_ = state
      return (t < n_new) & ~jnp.all(done_R)

    def body(state):
      t, cache, token_R, done_R, tokens_RxN, logps_RxN, mask_RxN = state
      positions_Rx1 = (prompt_len_R + t - 1)[:, None]
      hidden_Rx1xD, cache = self.model.apply(variables, token_R[:, None], positions_Rx1,
                                             kv_mask_RxS, cache, prompt_len + t - 1)
      logits_RxV = model_lib.logits_from_hidden(params, cfg, hidden_Rx1xD)[:, 0]
      new_R, logp_R = pick_tokens(logits_RxV, step_keys(t), temperature, top_p, top_k,
                                   self.draw)
      active_R = ~done_R
      new_R = jnp.where(active_R, new_R, self.pad_id)
      tokens_RxN = tokens_RxN.at[:, t].set(new_R)
      logps_RxN = logps_RxN.at[:, t].set(jnp.where(active_R, logp_R, 0.0))
      mask_RxN = mask_RxN.at[:, t].set(active_R.astype(jnp.int32))
      done_R = done_R | (active_R & jnp.isin(new_R, stop_ids))
      return t + 1, cache, new_R, done_R, tokens_RxN, logps_RxN, mask_RxN

    state = (jnp.int32(1), cache, token_R, done_R, tokens_RxN, logps_RxN, mask_RxN)
    _, cache, _, _, tokens_RxN, logps_RxN, mask_RxN = jax.lax.while_loop(cond, body, state)
    return tokens_RxN, mask_RxN, jnp.sum(mask_RxN, axis=1), logps_RxN, cache

  def bucket_for(self, prompt_len: int) -> int:
    for bucket in self.buckets:
      if prompt_len <= bucket:
        return bucket
    raise ValueError(f'prompt of {prompt_len} tokens exceeds sampling.max_prompt_len='
                     f'{self.max_prompt_len}; raise max_prompt_len or filter long prompts.')

  def pad_prompts(self, prompts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Left-pads token lists into the smallest bucket that fits the longest; fills to `rows`."""
    if len(prompts) > self.rows:
      raise ValueError(f'{len(prompts)} prompts exceed sampler rows={self.rows}.')
    empty = [r for r, prompt in enumerate(prompts) if not len(prompt)]
    if empty:  # its first token would be read from a query that sees no key
      raise ValueError(f'prompt {empty[0]} of {len(prompts)} is empty; every prompt needs at '
                       'least one token (a chat template or BOS).')
    bucket = self.bucket_for(max(len(p) for p in prompts))
    tokens = np.full((self.rows, bucket), self.pad_id, np.int32)
    mask = np.zeros((self.rows, bucket), np.int32)
    for r, prompt in enumerate(prompts):
      tokens[r, bucket - len(prompt):] = prompt
      mask[r, bucket - len(prompt):] = 1
    # Filler rows get a lone BOS so they are well-defined; callers ignore them.
    tokens[len(prompts):, -1] = self.bos_id
    mask[len(prompts):, -1] = 1
    return tokens, mask

  def generate(self, params, prompt_RxP, prompt_mask_RxP, row_ids_R, rng, *, temperature=1.0,
               top_p=1.0, top_k=0):
    """One call on arrays of exactly `rows` rows (row id < 0: unused row); returns device
    arrays."""
    batch = sharding_lib.shard_batch(
        self.mesh, (np.asarray(prompt_RxP, np.int32), np.asarray(prompt_mask_RxP, np.int32),
                    np.asarray(row_ids_R, np.int32)))
    # A committed key on one device would not match the replicated in_sharding on a bigger mesh.
    rng = sharding_lib.replicate(self.mesh, rng)
    cache = self.new_cache(np.shape(prompt_RxP)[1])
    return self._generate_jit(params, cache, *batch, rng, jnp.float32(temperature),
                              jnp.float32(top_p), jnp.int32(top_k))[:4]

  def new_cache(self, prompt_len: int):
    """A zeroed KV cache for one call at prompt bucket `prompt_len` (donated to it)."""
    return self._init_cache_jit(self.cfg, self.rows, prompt_len + self.max_new_tokens)

  def sample(self, params, prompts: Sequence[Sequence[int]], row_ids: Sequence[int], rng, *,
             temperature=1.0, top_p=1.0, top_k=0) -> SampleOutput:
    """Any number of prompts (token lists) -> host arrays, in calls of `rows` rows."""
    outputs, calls = [], []
    for start in range(0, len(prompts), self.rows):
      chunk = list(prompts[start:start + self.rows])
      ids = np.full(self.rows, -1, np.int32)  # filler rows: unused, done from the start
      ids[:len(chunk)] = row_ids[start:start + self.rows]
      tokens, mask = self.pad_prompts(chunk)
      out = sharding_lib.to_host(self.generate(params, tokens, mask, ids, rng,
                                               temperature=temperature, top_p=top_p, top_k=top_k))
      calls.append((tokens.shape[1], int(out[2].max())))
      outputs.append([x[:len(chunk)] for x in out])
    if not outputs:
      n = self.max_new_tokens
      return SampleOutput(np.zeros((0, n), np.int32), np.zeros((0, n), np.int32),
                          np.zeros((0,), np.int32), np.zeros((0, n), np.float32))
    tokens, mask, lengths, logps = (np.concatenate(parts) for parts in zip(*outputs))
    return SampleOutput(tokens, mask, lengths, logps, calls,
                        np.asarray([len(p) for p in prompts], np.int32))
