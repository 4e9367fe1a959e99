"""The 'blocked' token draw (`sampling.draw`): the softmax distribution exactly (frequencies
of many draws against hand-set probabilities, filtered tokens never drawn), and the static
and continuous samplers agreeing row for row with it, as they do with 'gumbel'."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import BOS, EOS, PAD, random_tokens

from sgpo_jax.generate import continuous as continuous_sampling
from sgpo_jax.generate import sampler as sampling


def _frequencies(logits_V, block, n=40_000):
  keys = jax.random.split(jax.random.key(5), n)
  draws = jax.jit(jax.vmap(lambda k: sampling.blocked_categorical(k, logits_V, block)))(keys)
  return np.bincount(np.asarray(draws), minlength=logits_V.shape[0]) / n


def test_blocked_draw_has_the_softmax_distribution():
  """10 tokens in blocks of 4 (the last block padded by 2): probabilities 0.3, 0.2, 0.1,
  0.1, 0.05 x 4, 0.1, 0 (a -inf logit). With 40k draws a frequency's standard deviation is
  <= 0.0023, so 0.01 is over 4 of them."""
  probs = np.array([0.3, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.1, 0.0])
  with np.errstate(divide='ignore'):
    logits = jnp.asarray(np.log(probs) + 1.7, jnp.float32)
  freq = _frequencies(logits, block=4)
  np.testing.assert_allclose(freq, probs, atol=0.01)
  assert freq[9] == 0.0


def test_blocked_draw_skips_a_fully_filtered_block():
  logits = jnp.asarray([-jnp.inf] * 4 + [0.0, 1.0, -jnp.inf, 2.0], jnp.float32)
  freq = _frequencies(logits, block=4, n=20_000)
  want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
  assert freq[[0, 1, 2, 3, 6]].sum() == 0.0
  np.testing.assert_allclose(freq[[4, 5, 7]], want, atol=0.015)


def test_unknown_draw_is_refused(cfg, mesh1, param_shardings1):
  with pytest.raises(ValueError, match="sampling.draw='fast'"):
    sampling.Sampler(cfg, mesh1, param_shardings1, rows=2, max_prompt_len=4, max_new_tokens=2,
                     stop_ids=[EOS], pad_id=PAD, draw='fast')


@pytest.mark.slow
@pytest.mark.parametrize('knobs', [dict(temperature=1.0), dict(temperature=0.7, top_p=0.8)])
def test_static_and_continuous_samplers_agree_with_the_blocked_draw(
    params, cfg, mesh1, param_shardings1, knobs):
  """Same completions per row id on both engines; the draw differs from 'gumbel' (another
  random stream) and the returned log-probs are those of the drawn tokens either way."""
  common = dict(max_prompt_len=8, max_new_tokens=6, stop_ids=[EOS], pad_id=PAD, bos_id=BOS)
  static = sampling.Sampler(cfg, mesh1, param_shardings1, rows=4, min_prompt_bucket=4,
                            draw='blocked', **common)
  continuous = continuous_sampling.ContinuousSampler(
      cfg, mesh1, param_shardings1, slots=3, queue_rows=8, prefill_step=4, draw='blocked',
      **common)
  gumbel = sampling.Sampler(cfg, mesh1, param_shardings1, rows=4, min_prompt_bucket=4, **common)
  prompts = [[BOS] + random_tokens(40 + i, n - 1, 16).tolist()
             for i, n in enumerate([3, 8, 1, 5, 7, 2])]
  row_ids, rng = [4 * i + 1 for i in range(6)], jax.random.key(3)
  a = static.sample(params, prompts, row_ids, rng, **knobs)
  b = continuous.sample(params, prompts, row_ids, rng, **knobs)
  np.testing.assert_array_equal(b.tokens_RxN, a.tokens_RxN)
  np.testing.assert_array_equal(b.lengths_R, a.lengths_R)
  np.testing.assert_allclose(b.logprobs_RxN, a.logprobs_RxN, atol=1e-5)
  g = gumbel.sample(params, prompts, row_ids, rng, **knobs)
  assert not np.array_equal(g.tokens_RxN, a.tokens_RxN)
  assert np.all(a.logprobs_RxN[a.mask_RxN > 0] <= 0.0)
