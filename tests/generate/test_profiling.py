"""The profiling pass: p_hat is a direct count, and a killed pass resumes without re-sampling."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from sgpo_jax.data.tokenizer import CharTokenizer
from sgpo_jax.generate import profiling as profile_lib
from sgpo_jax.generate.continuous import ContinuousSampler
from sgpo_jax.generate.evaluate import decode_rows
from sgpo_jax.generate.sampler import Sampler
from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.tasks import arithmetic
from tests.conftest import mesh_config, params_for, tiny_config

K = 4


class Killed(RuntimeError):
  pass


@pytest.fixture(scope='module')
def setup():
  cfg = tiny_config(init_std=0.5)
  mesh = sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  params = params_for(cfg)
  shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh)
  tok = CharTokenizer()
  sampler = Sampler(cfg, mesh, shardings, rows=16, max_prompt_len=8, max_new_tokens=4,
                    stop_ids=tok.stop_token_ids, pad_id=tok.pad_id, bos_id=tok.bos_id,
                    min_prompt_bucket=8)
  queries = arithmetic.generate_queries(12, seed=0, min_digits=1, max_digits=1)
  return sampler, params, queries, tok


def reward_true_if_contains_digit(completions, queries):
  # The tiny random policy never adds correctly; a lenient reward gives a spread of p_hat.
  return np.array([float(any(ch in c for ch in '0123')) for c in completions], np.float32)


@pytest.mark.slow
def test_p_hat_equals_direct_count(setup, tmp_path):
  sampler, params, queries, tok = setup
  ledger = flops_lib.FlopsLedger(sampler.cfg)
  out = profile_lib.profile_queries(
      sampler, params, queries, tok, reward_true_if_contains_digit, num_samples=K,
      temperature=1.0, seed=3, path=str(tmp_path / 'profile.jsonl'), ledger=ledger,
      queries_per_flush=4, show_progress=False)
  # Direct count: re-sample every (query, j) row with the same per-row ids in one call each.
  rng = jax.random.fold_in(jax.random.key(3), profile_lib.PROFILE_STREAM)
  for qi, q in enumerate(queries):
    prompts = [tok.encode_prompt(q.prompt)] * K
    sample = sampler.sample(params, prompts, [qi * K + j for j in range(K)], rng, temperature=1.0)
    direct = reward_true_if_contains_digit(decode_rows(tok, sample.tokens_RxN, sample.mask_RxN),
                                           [q] * K)
    assert out['n_correct'][qi] == int(direct.sum())
    assert out['p_hat'][qi] == direct.sum() / K
  assert 0 < out['p_hat'].mean() < 1, 'the lenient reward should give a spread'
  assert ledger.computed('profile') > 0
  lines = [json.loads(x) for x in open(tmp_path / 'profile.jsonl')]
  assert sorted(r['id'] for r in lines) == list(range(12))


def test_killed_profile_resumes_without_resampling(setup, tmp_path):
  sampler, params, queries, tok = setup
  kwargs = dict(num_samples=K, temperature=1.0, seed=3, queries_per_flush=4,
                show_progress=False)
  full = profile_lib.profile_queries(sampler, params, queries, tok, reward_true_if_contains_digit,
                                     path=str(tmp_path / 'full.jsonl'), **kwargs)
  scored = []

  def dies_on_second_chunk(completions, qs):
    if len(scored) == 1:
      raise Killed()
    scored.append(len(completions))
    return reward_true_if_contains_digit(completions, qs)

  path = str(tmp_path / 'killed.jsonl')
  with pytest.raises(Killed):
    profile_lib.profile_queries(sampler, params, queries, tok, dies_on_second_chunk, path=path,
                                **kwargs)
  assert len(profile_lib.read_profile(path)) == 4  # the first chunk was flushed

  resumed_rows = []

  def counting(completions, qs):
    resumed_rows.append(len(completions))
    return reward_true_if_contains_digit(completions, qs)

  resumed = profile_lib.profile_queries(sampler, params, queries, tok, counting, path=path,
                                        **kwargs)
  assert sum(resumed_rows) == (12 - 4) * K  # only unfinished queries were sampled
  for key in ('n_correct', 'p_hat', 'n_samples'):
    np.testing.assert_array_equal(resumed[key], full[key])


def test_finished_profile_reused_by_a_new_process_still_counts_its_flops(setup, tmp_path):
  sampler, params, queries, tok = setup
  kwargs = dict(num_samples=K, temperature=1.0, seed=3, queries_per_flush=4,
                show_progress=False, path=str(tmp_path / 'profile.jsonl'))
  first = flops_lib.FlopsLedger(sampler.cfg)
  profile_lib.profile_queries(sampler, params, queries, tok, reward_true_if_contains_digit,
                              ledger=first, **kwargs)
  second = flops_lib.FlopsLedger(sampler.cfg)

  def must_not_sample(completions, qs):
    raise AssertionError('a finished profile must not be re-sampled')

  profile_lib.profile_queries(sampler, params, queries, tok, must_not_sample, ledger=second,
                              **kwargs)
  assert second.computed('profile') == pytest.approx(first.computed('profile'))
  assert second.useful('profile') == pytest.approx(first.useful('profile'))


@pytest.mark.slow
def test_continuous_engine_profiles_exactly_like_static(setup, tmp_path):
  """sampling.engine='continuous' for the profiling pass: the same p_hat for every query,
  and its ledger computes fewer padded token slots for the same useful tokens."""
  sampler, params, queries, tok = setup
  shardings = sharding_lib.param_shardings(model_lib.abstract_params(sampler.cfg),
                                           sampler.mesh)
  continuous = ContinuousSampler(sampler.cfg, sampler.mesh, shardings, slots=4, queue_rows=16,
                                 max_prompt_len=8, max_new_tokens=4,
                                 stop_ids=tok.stop_token_ids, pad_id=tok.pad_id,
                                 bos_id=tok.bos_id, prefill_step=4)
  results, ledgers = [], []
  for name, s in (('static', sampler), ('continuous', continuous)):
    ledger = flops_lib.FlopsLedger(sampler.cfg)
    results.append(profile_lib.profile_queries(
        s, params, queries, tok, reward_true_if_contains_digit, num_samples=K,
        temperature=1.0, seed=3, path=str(tmp_path / f'{name}.jsonl'), ledger=ledger,
        show_progress=False))
    ledgers.append(ledger)
  np.testing.assert_array_equal(results[1]['n_correct'], results[0]['n_correct'])
  assert 0 < results[0]['n_correct'].sum() < K * len(queries)
  assert ledgers[1].tokens('profile')[1] == ledgers[0].tokens('profile')[1]
  assert ledgers[1].useful_token_share('profile') > ledgers[0].useful_token_share('profile')
