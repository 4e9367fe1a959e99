"""Tests for sgpo_jax.generate.sampler: greedy/log-prob parity with a full forward, stop tokens,
traced sampling knobs, compile counts per prompt bucket, per-row randomness, early exit."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import BOS, EOS, PAD, forward_fn, random_tokens

from sgpo_jax.generate import sampler as sampling

ROWS, MAX_PROMPT, N_NEW = 4, 8, 6


def _prompts(seed: int, lengths) -> list[list[int]]:
  return [[BOS] + random_tokens(seed + i, n - 1, 16).tolist() for i, n in enumerate(lengths)]


@pytest.fixture(scope='module')
def sampler(cfg, mesh1, param_shardings1):
  """Buckets (4, 8). Shared by the whole module: compile counts are checked as deltas."""
  return sampling.Sampler(cfg, mesh1, param_shardings1, rows=ROWS, max_prompt_len=MAX_PROMPT,
                          max_new_tokens=N_NEW, stop_ids=[EOS], pad_id=PAD, bos_id=BOS,
                          min_prompt_bucket=4)


def _full_sequence(sampler, prompts, out):
  """Left-padded prompt + completion as one [R, P + N] batch, with the prompt width P."""
  prompt_RxP, prompt_mask_RxP = sampler.pad_prompts(prompts)
  rows = len(prompts)
  tokens_RxT = np.concatenate([prompt_RxP[:rows], out.tokens_RxN], 1)
  mask_RxT = np.concatenate([prompt_mask_RxP[:rows], np.ones_like(out.tokens_RxN)], 1)
  return tokens_RxT, mask_RxT, prompt_RxP.shape[1]


def _completion_logits(cfg, params, sampler, prompts, out):
  """Logits that predicted each completion token, from one full forward: [R, N, V]."""
  tokens_RxT, mask_RxT, p = _full_sequence(sampler, prompts, out)
  logits_RxTxV = np.asarray(forward_fn(cfg)(params, tokens_RxT, mask_RxT))
  return logits_RxTxV[:, p - 1:p - 1 + N_NEW]


def _greedy_by_full_forward(cfg, params, sampler, prompts):
  """Argmax decoding by repeated full forwards over a fixed [R, P + N] buffer (causality
  makes the not-yet-generated tail irrelevant), truncated after the first EOS."""
  prompt_RxP, prompt_mask_RxP = sampler.pad_prompts(prompts)
  p = prompt_RxP.shape[1]
  tokens_RxT = np.concatenate([prompt_RxP, np.full((ROWS, N_NEW), PAD, np.int32)], 1)
  mask_RxT = np.concatenate([prompt_mask_RxP, np.ones((ROWS, N_NEW), np.int32)], 1)
  for t in range(N_NEW):
    logits_RxTxV = np.asarray(forward_fn(cfg)(params, tokens_RxT, mask_RxT))
    tokens_RxT[:, p + t] = logits_RxTxV[:, p + t - 1].argmax(-1)
  expected_RxN = tokens_RxT[:len(prompts), p:].copy()
  for row in expected_RxN:
    stops = np.flatnonzero(row == EOS)
    if stops.size:
      row[stops[0] + 1:] = PAD
  return expected_RxN


def _check_stop_invariants(out, stop_ids):
  """After the first stop token: PAD, mask 0, log-prob 0; lengths count up to the stop."""
  for tokens_N, mask_N, length, logps_N in zip(out.tokens_RxN, out.mask_RxN, out.lengths_R,
                                               out.logprobs_RxN):
    stops = np.flatnonzero(np.isin(tokens_N, stop_ids))
    expected_len = stops[0] + 1 if stops.size else N_NEW
    assert length == expected_len
    np.testing.assert_array_equal(mask_N, np.arange(N_NEW) < expected_len)
    assert (tokens_N[expected_len:] == PAD).all()
    assert (logps_N[expected_len:] == 0).all()
    assert (logps_N[:expected_len] < 0).all()


def test_greedy_equals_argmax_of_full_forward(cfg, params, sampler):
  prompts = _prompts(0, [4, 2, 3, 1])
  out = sampler.sample(params, prompts, [0, 1, 2, 3], jax.random.key(0), temperature=0.0)
  np.testing.assert_array_equal(out.tokens_RxN,
                                _greedy_by_full_forward(cfg, params, sampler, prompts))
  _check_stop_invariants(out, [EOS])
  # Greedy log-probs are those of the T = 1 distribution.
  logits_RxNxV = _completion_logits(cfg, params, sampler, prompts, out)
  logp_RxN = np.take_along_axis(jax.nn.log_softmax(logits_RxNxV), out.tokens_RxN[..., None],
                                -1)[..., 0]
  np.testing.assert_allclose(out.logprobs_RxN, np.where(out.mask_RxN > 0, logp_RxN, 0),
                             atol=1e-5)


@pytest.mark.parametrize('temperature', [1.0, 0.7])
def test_logprobs_equal_recomputed_log_softmax(cfg, params, sampler, temperature):
  prompts = _prompts(10, [3, 4, 2, 4])
  out = sampler.sample(params, prompts, [5, 6, 7, 8], jax.random.key(1),
                       temperature=temperature)
  logits_RxNxV = _completion_logits(cfg, params, sampler, prompts, out)
  logp_RxN = np.take_along_axis(jax.nn.log_softmax(logits_RxNxV / temperature),
                                out.tokens_RxN[..., None], -1)[..., 0]
  real_RxN = out.mask_RxN > 0
  np.testing.assert_allclose(out.logprobs_RxN[real_RxN], logp_RxN[real_RxN], atol=1e-5)
  assert (out.logprobs_RxN[~real_RxN] == 0).all()
  _check_stop_invariants(out, [EOS])


def test_knobs_change_output_not_compile_count(cfg, params, sampler):
  prompts = _prompts(20, [4, 4, 3, 2])
  ids, key = [0, 1, 2, 3], jax.random.key(2)
  base = sampler.sample(params, prompts, ids, key)
  count = sampler.compile_count
  variants = {'temperature': dict(temperature=0.3), 'top_p': dict(top_p=0.3),
              'top_k': dict(top_k=2), 'greedy': dict(temperature=0.0)}
  outs = {name: sampler.sample(params, prompts, ids, key, **kw) for name, kw in variants.items()}
  assert sampler.compile_count == count
  for name, out in outs.items():
    assert (out.tokens_RxN != base.tokens_RxN).any(), name

  # Every top-k / top-p token lies inside the set those knobs allow (up to the first stop).
  for name, allowed in (('top_k', _top_k_allowed(2)), ('top_p', _top_p_allowed(0.3))):
    out = outs[name]
    logits_RxNxV = _completion_logits(cfg, params, sampler, prompts, out)
    ok_RxNxV = allowed(logits_RxNxV)
    ok_RxN = np.take_along_axis(ok_RxNxV, out.tokens_RxN[..., None], -1)[..., 0]
    assert ok_RxN[out.mask_RxN > 0].all(), name


def _top_k_allowed(k):
  return lambda logits_RxNxV: logits_RxNxV >= np.sort(logits_RxNxV, -1)[..., -k:][..., :1]


def _top_p_allowed(p):
  def allowed(logits_RxNxV):
    probs_RxNxV = np.asarray(jax.nn.softmax(logits_RxNxV))
    order = np.argsort(-probs_RxNxV, -1)
    sorted_probs = np.take_along_axis(probs_RxNxV, order, -1)
    mass_before = np.cumsum(sorted_probs, -1) - sorted_probs
    keep_sorted = mass_before < p + 1e-6
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return keep
  return allowed


def test_top_k_1_equals_greedy(params, sampler):
  prompts = _prompts(30, [4, 1, 2, 3])
  greedy = sampler.sample(params, prompts, [0, 1, 2, 3], jax.random.key(3), temperature=0.0)
  top1 = sampler.sample(params, prompts, [0, 1, 2, 3], jax.random.key(3), top_k=1)
  np.testing.assert_array_equal(top1.tokens_RxN, greedy.tokens_RxN)
  np.testing.assert_allclose(top1.logprobs_RxN, greedy.logprobs_RxN, atol=1e-6)


def test_compiles_once_per_prompt_bucket(params, sampler):
  assert sampler.buckets == (4, 8)
  short, long = _prompts(40, [3, 4]), _prompts(41, [7, 2, 8])
  sampler.sample(params, short, [0, 1], jax.random.key(4))
  count = sampler.compile_count
  sampler.sample(params, short, [0, 1], jax.random.key(5), temperature=0.5)
  assert sampler.compile_count == count  # same shapes: no recompilation
  sampler.sample(params, long, [0, 1, 2], jax.random.key(4))
  assert sampler.compile_count <= count + 1  # new bucket: at most one more
  count_after_long = sampler.compile_count
  sampler.sample(params, long[:1] + short, [0, 1, 2], jax.random.key(6), top_p=0.5)
  sampler.sample(params, short, [0, 1], jax.random.key(7))
  assert sampler.compile_count == count_after_long
  assert sampler.compile_count <= len(sampler.buckets)
  with pytest.raises(ValueError, match='max_prompt_len=8'):
    sampler.sample(params, _prompts(42, [9]), [0], jax.random.key(0))


def test_same_row_id_same_completion_anywhere(params, sampler):
  prompts = _prompts(50, [4, 3, 4, 2])
  ids = [10, 11, 12, 13]
  key = jax.random.key(8)
  batch = sampler.sample(params, prompts, ids, key)
  alone = sampler.sample(params, prompts[2:3], ids[2:3], key)
  np.testing.assert_array_equal(alone.tokens_RxN[0], batch.tokens_RxN[2])
  np.testing.assert_allclose(alone.logprobs_RxN[0], batch.logprobs_RxN[2], atol=1e-6)
  order = [3, 2, 0, 1]
  shuffled = sampler.sample(params, [prompts[i] for i in order], [ids[i] for i in order], key)
  np.testing.assert_array_equal(shuffled.tokens_RxN, batch.tokens_RxN[order])
  # Other row ids (or another key) give other completions for the same prompt.
  other_id = sampler.sample(params, prompts, [20, 21, 22, 23], key)
  assert (other_id.tokens_RxN != batch.tokens_RxN).any()
  other_key = sampler.sample(params, prompts, ids, jax.random.key(9))
  assert (other_key.tokens_RxN != batch.tokens_RxN).any()
  # Identical prompts with distinct row ids are independent samples.
  same = sampler.sample(params, [prompts[0]] * 4, ids, key)
  assert len({tuple(row) for row in same.tokens_RxN}) > 1


class _CountingModel:
  """Wraps the sampler's model and counts its applications at run time (prefill + steps)."""

  def __init__(self, model):
    self.model, self.calls = model, 0

  def apply(self, *args, **kwargs):
    jax.debug.callback(self._count)
    return self.model.apply(*args, **kwargs)

  def _count(self):
    self.calls += 1


def test_stop_tokens_end_rows_and_all_done_exits_loop(cfg, mesh1, param_shardings1, params):
  # Half the vocabulary stops a row, so rows end after a few tokens at T = 2. The set avoids
  # every token of the greedy completion of a lone BOS (7 7 7 1 8 14 for these params).
  stop_ids = [2, 3, 4, 5, 6, 9, 10, 11]
  sampler = sampling.Sampler(cfg, mesh1, param_shardings1, rows=ROWS, max_prompt_len=4,
                             max_new_tokens=N_NEW, stop_ids=stop_ids, pad_id=PAD, bos_id=BOS,
                             min_prompt_bucket=4)
  counting = sampler.model = _CountingModel(sampler.model)

  def run(prompts, temperature, seed=0):
    counting.calls = 0
    out = sampler.sample(params, prompts, list(range(len(prompts))), jax.random.key(seed),
                         temperature=temperature)
    jax.effects_barrier()
    _check_stop_invariants(out, stop_ids)
    return out

  prompts = _prompts(60, [4, 3, 2, 4])
  calls = []
  for seed in range(3):
    out = run(prompts, 2.0, seed)
    # One prefill, then one step per token after the first until every row has stopped.
    assert counting.calls == out.lengths_R.max(), (counting.calls, out.lengths_R)
    calls.append(counting.calls)
  assert min(calls) < N_NEW, calls  # the loop did exit early at least once

  # Filler rows (fewer prompts than rows: a lone BOS) must not keep the loop running. Greedy
  # from a lone BOS never stops here, while prompt 2 stops at its first greedy token.
  assert run([[BOS]], 0.0).lengths_R.tolist() == [N_NEW] and counting.calls == N_NEW
  assert run(prompts[2:3], 0.0).lengths_R.tolist() == [1]
  assert counting.calls == 1, counting.calls
  assert sampler.compile_count == 1


def test_an_empty_prompt_is_refused_before_sampling(sampler):
  """Its first token would come from a query that attends to no key (padding's mean)."""
  with pytest.raises(ValueError, match='prompt 1 of 2 is empty'):
    sampler.pad_prompts([[BOS, 3], []])


def test_top_p_applies_to_the_renormalised_top_k():
  """transformers' and vLLM's order: probabilities .4/.3/.2/.1 with k=2 renormalise to
  .57/.43, so p=0.5 keeps the first token alone (over the whole distribution the mass above
  the second is .4 < .5, which would have kept both)."""
  import jax.numpy as jnp
  logits = jnp.log(jnp.array([[0.4, 0.3, 0.2, 0.1]]))
  kept = np.isfinite(np.asarray(sampling._filter_logits(logits, 0.5, 2)))
  np.testing.assert_array_equal(kept, [[True, False, False, False]])
  kept = np.isfinite(np.asarray(sampling._filter_logits(logits, 0.5, 0)))  # no top-k
  np.testing.assert_array_equal(kept, [[True, True, False, False]])
  kept = np.isfinite(np.asarray(sampling._filter_logits(logits, 1.0, 3)))  # no top-p
  np.testing.assert_array_equal(kept, [[True, True, True, False]])
