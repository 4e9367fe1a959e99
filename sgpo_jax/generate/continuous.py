"""Continuous-batching generation: a fixed set of decode slots that take the next prompt as
soon as their row stops, so the decode batch stays full while completion lengths are skewed.

One jitted call serves a queue of `queue_rows` prompts (left-padded to `max_prompt_len`):

    while a slot is busy or a prompt waits:
      while a slot is free and a prompt waits: prefill it into that slot   (one prompt at a time)
      one decode step for the first `width` slots, each at its own cache position

Once the queue is empty the batch drains: whenever at most half of the current width is
busy, busy slots are moved to the front (cache rows included) and the width halves
(slots, slots/2, ..., 1: one `lax.switch` branch each), so a long last row does not keep
`slots` rows of decode running.

The KV cache is `[slots, max_prompt_len + max_new_tokens]`; a prompt is prefilled as a
`[1, b]` forward in the smallest static prefill bucket b that holds it (`prefill_buckets`,
multiples of `prefill_step`), one `lax.switch` branch per bucket, and its keys/values land
right-aligned in the slot's prompt region, so generated token t always sits at cache slot
max_prompt_len + t. Every shape is static: one compilation per sampler, whatever the
prompt lengths, completion lengths or number of prompts (`compile_count` counts traces).

Randomness is the static sampler's: token t of row r uses `fold_in(fold_in(rng, r), t)`,
and the logits a row sees do not depend on its neighbours (masked attention gives the
other slots and the padding exactly zero weight), so a row's completion is the one
`sampling.Sampler` draws for the same row id, at any temperature / top-p / top-k (up to
float summation order in differently shaped matmuls; tests compare token for token).

Work done per call is returned (prefills per bucket, decode steps, busy slot-steps) so the
FLOPs ledger counts what ran ('computed') and the real tokens inside it ('useful').

Devices and processes: on a pure data-parallel mesh (every axis but 'data' of size 1) each
of the D data shards runs this loop on its own queue of `queue_rows / D` rows with its own
`slots` decode slots (`sampling.decode_slots` counts slots per shard), under `shard_map`;
rows are dealt to shards round-robin, so a short last chunk stays balanced. Where fsdp or
tp split the parameters, one schedule runs replicated over the mesh. Inputs are global
arrays and outputs come back to every process (`sharding.to_host`), so a run gives the same
completions on 1 process or several; on one device the layout is exactly the unsharded one.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from sgpo_jax.generate.sampler import SampleOutput, check_draw, pick_tokens
from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib


def prefill_buckets(max_prompt_len: int, step: int) -> tuple[int, ...]:
  """Multiples of `step` below max_prompt_len, then max_prompt_len itself."""
  if step < 1:
    raise ValueError(f'sampling.prefill_step={step} must be >= 1.')
  return tuple(range(step, max_prompt_len, step)) + (max_prompt_len,)


def decode_widths(slots: int) -> tuple[int, ...]:
  """slots, slots // 2, ... down to 1: the decode batch widths of the drain phase."""
  widths = [slots]
  while widths[-1] > 1:
    widths.append(widths[-1] // 2)
  return tuple(widths)


class ContinuousSampler:
  """Drop-in for `sampling.Sampler` where runs call it (`sample`, `rows`, `compile_count`)."""

  def __init__(self, cfg: model_lib.ModelConfig, mesh: Mesh, param_shardings, *, slots: int,
               queue_rows: int, max_prompt_len: int, max_new_tokens: int,
               stop_ids: Sequence[int], pad_id: int, bos_id: int | None = None,
               prefill_step: int = 16, draw: str = 'gumbel'):
    if slots < 1 or queue_rows < 1:
      raise ValueError(f'sampling.decode_slots={slots} and queue rows={queue_rows} must be >= 1.')
    self.shards = sharding_lib.data_parallel_shards(mesh)
    if queue_rows % self.shards:
      raise ValueError(f'train.rows_per_batch={queue_rows} does not split over the '
                       f'{self.shards} data-parallel shards of the continuous sampler; use a '
                       f'multiple of {self.shards}.')
    self.cfg, self.mesh = cfg, mesh
    self.draw = check_draw(draw)
    self.slots, self.rows = slots, queue_rows
    self.max_prompt_len, self.max_new_tokens = max_prompt_len, max_new_tokens
    self.stop_ids = np.asarray(sorted(set(stop_ids)), np.int32)
    self.pad_id = pad_id
    self.bos_id = pad_id if bos_id is None else bos_id
    self.buckets = prefill_buckets(max_prompt_len, prefill_step)
    self.widths = decode_widths(slots)
    self.model = lora_lib.make_model(cfg)
    self.traces = 0
    rep = sharding_lib.replicated(mesh)
    generate = self._generate
    if self.shards == 1:
      self.row_sharding = self.cache_sharding = self.shard_sharding = rep
    else:
      spec = jax.sharding.PartitionSpec
      self.row_sharding = jax.sharding.NamedSharding(mesh, spec('data'))
      self.shard_sharding = self.row_sharding
      self.cache_sharding = jax.sharding.NamedSharding(mesh, spec(None, 'data'))
      rows, cache = spec('data'), spec(None, 'data')

      def generate(params, cache_, prompts, lengths, ids, n_real_D, *knobs):
        out = self._generate(params, cache_, prompts, lengths, ids, n_real_D[0], *knobs)
        *arrays, work, cache_ = out
        return (*arrays, jax.tree.map(lambda x: x[None], work), cache_)

      generate = jax.shard_map(
          generate, mesh=mesh, in_specs=(spec(), cache, rows, rows, rows, rows) + (spec(),) * 4,
          out_specs=(rows,) * 5 + (cache,), check_vma=False)
    # The KV cache is its own jit's output, donated, so prefill and decode write it in place.
    self._init_cache_jit = jax.jit(model_lib.init_cache, static_argnums=(0, 1, 2),
                                   out_shardings=(self.cache_sharding,) * 2)
    self._generate_jit = jax.jit(
        generate, in_shardings=(param_shardings, (self.cache_sharding,) * 2) +
        (self.row_sharding,) * 3 + (self.shard_sharding,) + (rep,) * 4,
        out_shardings=(self.row_sharding,) * 4 + (self.shard_sharding,
                                                   (self.cache_sharding,) * 2),
        donate_argnums=(1,))

  @property
  def compile_count(self) -> int:
    return self.traces

  def bucket_index(self, prompt_len: int) -> int:
    for i, bucket in enumerate(self.buckets):
      if prompt_len <= bucket:
        return i
    raise ValueError(f'prompt of {prompt_len} tokens exceeds sampling.max_prompt_len='
                     f'{self.max_prompt_len}; raise max_prompt_len or filter long prompts.')

  # ------------------------------------------------------------------ device side

  def _prefill_branch(self, params, bucket: int, prompts_QxP, prompt_len_Q, q):
    """[1, bucket] forward of queue row q -> (last logits [1, V], k and v [L, 1, bucket, K, E]).
    """
    cfg, P = self.cfg, self.max_prompt_len
    tokens_1xb = jax.lax.dynamic_slice(prompts_QxP, (q, P - bucket), (1, bucket))
    mask_1xb = (jnp.arange(bucket) >= bucket - prompt_len_Q[q])[None, :]
    cache = model_lib.init_cache(cfg, 1, bucket)
    hidden, (k, v) = self.model.apply({'params': params}, tokens_1xb,
                                      model_lib.positions_from_mask(mask_1xb), mask_1xb, cache, 0)
    logits_1xV = model_lib.logits_from_hidden(params, cfg, hidden[:, -1:])[:, 0]
    return logits_1xV, k, v

  def _generate(self, params, cache, prompts_QxP, prompt_len_Q, row_ids_Q, n_real, rng, temperature,
                top_p, top_k):
    self.traces += 1
    cfg, S, N, P = self.cfg, self.slots, self.max_new_tokens, self.max_prompt_len
    Q, C = prompts_QxP.shape[0], P + N
    stop_ids = jnp.asarray(self.stop_ids)
    buckets = jnp.asarray(self.buckets, jnp.int32)
    widths = jnp.asarray(self.widths, jnp.int32)
    branches = [functools.partial(self._prefill_branch, params, b) for b in self.buckets]
    key_of = lambda row, t: jax.random.fold_in(jax.random.fold_in(rng, row), t)  # noqa: E731

    def write_prefill(branch, bucket, prompts_QxP, prompt_len_Q, q, slot, k_cache, v_cache):
      """Prefill of row q in `bucket`, its keys/values written right-aligned in the prompt
      region of `slot` (slots [0, P - bucket) keep an earlier occupant's: the mask hides them).
      """
      logits_1xV, k, v = branch(prompts_QxP, prompt_len_Q, q)
      at = (0, slot, P - bucket, 0, 0)
      return (logits_1xV, jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), at),
              jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), at))

    def prefill_one(st):
      slot = jnp.argmax(st['slot_q_S'] < 0)
      q = st['next_q']
      plen = prompt_len_Q[q]
      b_idx = jnp.sum(buckets < plen)
      k_cache, v_cache = st['cache']
      logits_1xV, k_cache, v_cache = jax.lax.switch(
          b_idx, [functools.partial(write_prefill, branch, b) for branch, b in
                  zip(branches, self.buckets)], prompts_QxP, prompt_len_Q, q, slot, k_cache,
          v_cache)
      cache = (k_cache, v_cache)
      token_1, logp_1 = pick_tokens(logits_1xV, key_of(row_ids_Q[q], 0)[None], temperature, top_p,
                                    top_k, self.draw)
      done = jnp.isin(token_1[0], stop_ids) | (N == 1)
      return dict(
          st, cache=cache, next_q=q + 1,
          kv_mask_SxC=st['kv_mask_SxC'].at[slot].set(jnp.arange(C) >= P - plen),
          slot_q_S=st['slot_q_S'].at[slot].set(jnp.where(done, -1, q)),
          slot_t_S=st['slot_t_S'].at[slot].set(1),
          token_S=st['token_S'].at[slot].set(token_1[0]),
          plen_S=st['plen_S'].at[slot].set(plen),
          tokens_QxN=st['tokens_QxN'].at[q, 0].set(token_1[0]),
          logps_QxN=st['logps_QxN'].at[q, 0].set(logp_1[0]),
          mask_QxN=st['mask_QxN'].at[q, 0].set(1),
          prefills_B=st['prefills_B'].at[b_idx].add(1))

    def can_prefill(st):
      return jnp.any(st['slot_q_S'] < 0) & (st['next_q'] < n_real)

    def decode_width(width, st):
      """One decode step for slots [0, width); the others are idle (tail mode)."""
      part = lambda x: x[:width]  # noqa: E731
      active_W = part(st['slot_q_S']) >= 0
      t_W = jnp.where(active_W, part(st['slot_t_S']), 1)
      # The model reads and writes cache rows [0, width) of the full cache, in place.
      hidden, cache = self.model.apply(
          {'params': params}, part(st['token_S'])[:, None], (part(st['plen_S']) + t_W - 1)[:, None],
          part(st['kv_mask_SxC']), st['cache'], P + t_W - 1)
      logits_WxV = model_lib.logits_from_hidden(params, cfg, hidden)[:, 0]
      rows_W = row_ids_Q[jnp.maximum(part(st['slot_q_S']), 0)]
      new_W, logp_W = pick_tokens(logits_WxV, jax.vmap(key_of)(rows_W, t_W), temperature, top_p,
                                  top_k, self.draw)
      q_W = jnp.where(active_W, part(st['slot_q_S']), Q)  # Q: out of range, write dropped
      done_W = active_W & (jnp.isin(new_W, stop_ids) | (t_W + 1 >= N))
      return dict(
          st, cache=cache, token_S=st['token_S'].at[:width].set(new_W),
          slot_t_S=st['slot_t_S'].at[:width].set(t_W + 1),
          slot_q_S=st['slot_q_S'].at[:width].set(jnp.where(done_W, -1, part(st['slot_q_S']))),
          tokens_QxN=st['tokens_QxN'].at[q_W, t_W].set(new_W, mode='drop'),
          logps_QxN=st['logps_QxN'].at[q_W, t_W].set(logp_W, mode='drop'),
          mask_QxN=st['mask_QxN'].at[q_W, t_W].set(1, mode='drop'),
          decode_steps=st['decode_steps'] + 1,
          decode_slot_steps=st['decode_slot_steps'] + width,
          busy_slot_steps=st['busy_slot_steps'] + jnp.sum(active_W.astype(jnp.int32)))

    def compact(st):
      """Queue empty and at most half the width busy: busy slots first, narrower width."""
      active_S = st['slot_q_S'] >= 0
      order_S = jnp.argsort(~active_S, stable=True)
      n_active = jnp.sum(active_S.astype(jnp.int32))
      width = jnp.min(jnp.where(widths >= n_active, widths, S))
      moved = {k: st[k][order_S] for k in ('kv_mask_SxC', 'slot_q_S', 'slot_t_S', 'token_S',
                                           'plen_S')}

      def permute_layer(layer, cache):  # one layer at a time: the copy is 1/L of the cache
        return tuple(c.at[layer].set(c[layer][order_S]) for c in cache)

      cache = jax.lax.fori_loop(0, cfg.n_layers, permute_layer, st['cache'])
      return dict(st, cache=cache, width=width, **moved)

    def decode_step(st):
      n_active = jnp.sum((st['slot_q_S'] >= 0).astype(jnp.int32))
      shrink = (st['next_q'] >= n_real) & (2 * n_active <= st['width']) & (st['width'] > 1)
      st = jax.lax.cond(shrink, compact, lambda x: x, st)
      w_idx = jnp.argmax(widths == st['width'])
      return jax.lax.switch(w_idx, [functools.partial(decode_width, w) for w in self.widths], st)

    def body(st):
      st = jax.lax.while_loop(can_prefill, prefill_one, st)
      return jax.lax.cond(jnp.any(st['slot_q_S'] >= 0), decode_step, lambda s: s, st)

    def cond(st):
      return jnp.any(st['slot_q_S'] >= 0) | (st['next_q'] < n_real)

    state = dict(
        cache=cache, next_q=jnp.int32(0),
        kv_mask_SxC=jnp.zeros((S, C), bool), slot_q_S=jnp.full((S,), -1, jnp.int32),
        slot_t_S=jnp.ones((S,), jnp.int32), token_S=jnp.zeros((S,), jnp.int32),
        plen_S=jnp.zeros((S,), jnp.int32),
        tokens_QxN=jnp.full((Q, N), self.pad_id, jnp.int32),
        logps_QxN=jnp.zeros((Q, N), jnp.float32), mask_QxN=jnp.zeros((Q, N), jnp.int32),
        prefills_B=jnp.zeros((len(self.buckets),), jnp.int32), decode_steps=jnp.int32(0),
        decode_slot_steps=jnp.int32(0), busy_slot_steps=jnp.int32(0), width=jnp.int32(S))
    st = jax.lax.while_loop(cond, body, state)
    work = {k: st[k] for k in ('prefills_B', 'decode_steps', 'decode_slot_steps',
                               'busy_slot_steps')}
    return (st['tokens_QxN'], st['mask_QxN'], jnp.sum(st['mask_QxN'], axis=1), st['logps_QxN'],
            work, st['cache'])

  # ------------------------------------------------------------------ host side

  def new_cache(self):
    """A zeroed [L, shards * slots, max_prompt_len + max_new_tokens, K, E] KV cache (donated),
    each data shard's slots on its own devices."""
    return self._init_cache_jit(self.cfg, self.shards * self.slots,
                                self.max_prompt_len + self.max_new_tokens)

  def queue_order(self) -> np.ndarray:
    """Queue position -> chunk row: shard d's queue (positions [d * q, (d + 1) * q)) holds
    chunk rows d, d + D, d + 2D, ..., so real rows stay a prefix of every shard's queue."""
    return np.arange(self.rows).reshape(-1, self.shards).T.reshape(-1)

  def pad_prompts(self, prompts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Left-pads to max_prompt_len and fills to `rows` (filler rows are never prefilled)."""
    if len(prompts) > self.rows:
      raise ValueError(f'{len(prompts)} prompts exceed sampler rows={self.rows}.')
    tokens = np.full((self.rows, self.max_prompt_len), self.pad_id, np.int32)
    lengths = np.zeros((self.rows,), np.int32)
    for r, prompt in enumerate(prompts):
      self.bucket_index(len(prompt))  # raises on an over-long prompt
      if not prompt:
        raise ValueError(f'prompt {r} is empty; every prompt needs at least one token (BOS).')
      tokens[r, self.max_prompt_len - len(prompt):] = prompt
      lengths[r] = len(prompt)
    return tokens, lengths

  def sample(self, params, prompts: Sequence[Sequence[int]], row_ids: Sequence[int], rng, *,
             temperature=1.0, top_p=1.0, top_k=0) -> SampleOutput:
    """Any number of prompts -> host arrays (same contract as `Sampler.sample`)."""
    outputs, works = [], []
    rng = sharding_lib.replicate(self.mesh, rng)
    rep = sharding_lib.replicated(self.mesh)
    knobs = sharding_lib.put_host_values(
        (np.float32(temperature), np.float32(top_p), np.int32(top_k)), (rep,) * 3)
    order = self.queue_order()
    back = np.argsort(order)
    for start in range(0, len(prompts), self.rows):
      chunk = list(prompts[start:start + self.rows])
      ids = np.full(self.rows, -1, np.int32)
      ids[:len(chunk)] = row_ids[start:start + self.rows]
      tokens, lengths = self.pad_prompts(chunk)
      n_real_D = (order < len(chunk)).reshape(self.shards, -1).sum(1).astype(np.int32)
      inputs = sharding_lib.put_host_values(
          (tokens[order], lengths[order], ids[order],
           n_real_D if self.shards > 1 else n_real_D[0]),
          (self.row_sharding,) * 3 + (self.shard_sharding,))
      out = sharding_lib.to_host(self._generate_jit(params, self.new_cache(), *inputs, rng,
                                                    *knobs)[:5])
      *arrays, work = out
      arrays = [x[back] for x in arrays]
      # Summed over shards: what every device computed together.
      work = {k: np.asarray(v).sum(0) if self.shards > 1 else np.asarray(v)
              for k, v in work.items()}
      work['prompt_lens'] = [len(p) for p in chunk]
      work['completion_lens'] = np.asarray(arrays[2][:len(chunk)])
      works.append(work)
      outputs.append([x[:len(chunk)] for x in arrays])
    n = self.max_new_tokens
    if not outputs:
      return SampleOutput(np.zeros((0, n), np.int32), np.zeros((0, n), np.int32),
                          np.zeros((0,), np.int32), np.zeros((0, n), np.float32))
    tokens, mask, lengths, logps = (np.concatenate(parts) for parts in zip(*outputs))
    return SampleOutput(tokens, mask, lengths, logps, calls=works,
                        prompt_lens_R=np.asarray([len(p) for p in prompts], np.int32))

  def count_generation(self, ledger, category: str, out: SampleOutput, num_prompts: int) -> None:
    """Ledger entry of every call behind `out`: computed = prefills in their buckets plus
    the decode width of every step over the full cache; useful = the real prompt tokens and
    the fed-back generated tokens inside that work."""
    del num_prompts
    cfg, cache_len = self.cfg, self.max_prompt_len + self.max_new_tokens
    decode_flops = flops_lib.forward_flops_per_token(cfg, cache_len)
    for work in out.calls:
      computed = useful = 0.0
      computed_tokens = useful_tokens = 0
      for b_idx, bucket in enumerate(self.buckets):  # a prefill attends over its bucket
        computed += int(work['prefills_B'][b_idx]) * flops_lib.prefill_flops(cfg, bucket, bucket)
        computed_tokens += int(work['prefills_B'][b_idx]) * bucket
      for plen in work['prompt_lens']:
        bucket = self.buckets[self.bucket_index(plen)]
        useful += flops_lib.prefill_flops(cfg, plen, bucket)
        useful_tokens += plen
      decode_slots = int(work['decode_slot_steps'])
      fed_back = int(np.sum(np.maximum(work['completion_lens'] - 1, 0)))
      computed += decode_slots * decode_flops
      useful += fed_back * decode_flops
      computed_tokens += decode_slots
      useful_tokens += fed_back
      ledger.add(category, computed, useful)
      ledger.add_tokens(category, computed_tokens, useful_tokens)
