"""Tests for sgpo_jax.generate.continuous: the same completions as the static sampler for
the same row ids (greedy, temperature, top-p, top-k), one compilation for every workload,
slot reuse, and a ledger whose useful tokens are exactly the real ones."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from conftest import BOS, EOS, PAD, random_tokens

from sgpo_jax.generate import continuous as continuous_sampling
from sgpo_jax.generate import sampler as sampling
from sgpo_jax.model import flops

MAX_PROMPT, N_NEW = 8, 6
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _prompts(seed: int, lengths) -> list[list[int]]:
  return [[BOS] + random_tokens(seed + i, n - 1, 16).tolist() for i, n in enumerate(lengths)]


@pytest.fixture(scope='module')
def static(cfg, mesh1, param_shardings1):
  return sampling.Sampler(cfg, mesh1, param_shardings1, rows=4, max_prompt_len=MAX_PROMPT,
                          max_new_tokens=N_NEW, stop_ids=[EOS], pad_id=PAD, bos_id=BOS,
                          min_prompt_bucket=4)


@pytest.fixture(scope='module')
def continuous(cfg, mesh1, param_shardings1):
  """3 slots for a queue of 8 rows: slots must be refilled; prefill buckets (4, 8)."""
  return continuous_sampling.ContinuousSampler(
      cfg, mesh1, param_shardings1, slots=3, queue_rows=8, max_prompt_len=MAX_PROMPT,
      max_new_tokens=N_NEW, stop_ids=[EOS], pad_id=PAD, bos_id=BOS, prefill_step=4)


LENGTHS = [3, 8, 1, 5, 7, 2, 4, 6, 8, 3, 5]  # 11 rows: two queue chunks, both buckets


@pytest.mark.slow
@pytest.mark.parametrize('knobs', [dict(temperature=0.0), dict(temperature=1.0),
                                   dict(temperature=0.7, top_p=0.8),
                                   dict(temperature=1.3, top_k=3)])
def test_same_completions_as_static_sampler(params, static, continuous, knobs):
  prompts = _prompts(7, LENGTHS)
  row_ids = [5 * i + 3 for i in range(len(prompts))]
  rng = jax.random.key(11)
  a = static.sample(params, prompts, row_ids, rng, **knobs)
  b = continuous.sample(params, prompts, row_ids, rng, **knobs)
  np.testing.assert_array_equal(b.tokens_RxN, a.tokens_RxN)
  np.testing.assert_array_equal(b.mask_RxN, a.mask_RxN)
  np.testing.assert_array_equal(b.lengths_R, a.lengths_R)
  np.testing.assert_allclose(b.logprobs_RxN, a.logprobs_RxN, atol=1e-5)
  # Not a trivial pass: lengths vary (some rows stop early) and rows differ.
  if knobs.get('temperature', 1.0) > 0:
    assert len(set(a.lengths_R.tolist())) > 1


def test_one_compilation_whatever_the_workload(params, continuous):
  rng = jax.random.key(0)
  continuous.sample(params, _prompts(1, [2, 3]), [0, 1], rng)
  count = continuous.compile_count
  assert count >= 1
  for seed, lengths in enumerate([[8] * 8, [1, 2, 3], [4] * 13, [7, 1]]):
    continuous.sample(params, _prompts(seed, lengths), list(range(len(lengths))), rng,
                      temperature=0.5 + seed * 0.1, top_k=seed)
  assert continuous.compile_count == count == 1


def test_row_depends_only_on_its_id(params, continuous):
  """Moving a row to another queue position, chunk or neighbourhood leaves it unchanged."""
  prompts = _prompts(3, [5, 2, 7, 4, 6, 3, 8, 2, 5])
  ids = list(range(100, 109))
  rng = jax.random.key(4)
  full = continuous.sample(params, prompts, ids, rng)
  order = [8, 3, 0, 6]
  part = continuous.sample(params, [prompts[i] for i in order], [ids[i] for i in order], rng)
  np.testing.assert_array_equal(part.tokens_RxN, full.tokens_RxN[order])


def test_ledger_counts_real_tokens(cfg, params, continuous):
  prompts = _prompts(9, [3, 8, 5, 1, 6])
  out = continuous.sample(params, prompts, list(range(5)), jax.random.key(2))
  ledger = flops.FlopsLedger(cfg)
  continuous.count_generation(ledger, 'rollout', out, len(prompts))
  (work,) = out.calls
  computed, useful = ledger.tokens('rollout')
  # Useful: every prompt token plus every generated token but each row's last one.
  assert useful == sum([3, 8, 5, 1, 6]) + int(np.sum(out.lengths_R - 1))
  # Computed: prompts in their buckets (4 or 8) plus the decode width of each step (3, then
  # narrower once the queue is empty: widths 3, 1).
  assert computed == (4 * 2 + 8 * 3) + int(work['decode_slot_steps'])
  assert int(work['decode_steps']) <= int(work['decode_slot_steps']) <= 3 * int(
      work['decode_steps'])
  assert work['prefills_B'].tolist() == [2, 3]
  # Busy slot-steps are exactly the fed-back tokens: no slot decodes past its stop.
  assert int(work['busy_slot_steps']) == int(np.sum(out.lengths_R - 1))
  assert 0 < ledger.useful('rollout') < ledger.computed('rollout')


def test_over_long_prompt_is_refused(params, continuous):
  with pytest.raises(ValueError, match='max_prompt_len'):
    continuous.sample(params, [[BOS] * (MAX_PROMPT + 1)], [0], jax.random.key(0))


def test_rows_deal_round_robin_to_data_shards(cfg, param_shardings1):
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ('data',))
  one = continuous_sampling.ContinuousSampler(
      cfg, mesh, param_shardings1, slots=2, queue_rows=6, max_prompt_len=MAX_PROMPT,
      max_new_tokens=N_NEW, stop_ids=[EOS], pad_id=PAD)
  assert one.shards == 1 and one.queue_order().tolist() == list(range(6))
  one.shards = 3  # the order a 3-way data mesh uses: shard d holds rows d, d + 3
  assert one.queue_order().tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.slow
def test_data_shards_give_the_one_device_completions():
  """4 devices as a pure data mesh (4 slot schedules, shard_map) and as data x tp (one
  replicated schedule): the 1-device completions token for token, and the work counts of
  the 4 shards add up to each shard's own."""
  script = textwrap.dedent('''
      import os
      os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=4'
      import jax, numpy as np
      from sgpo_jax.generate import continuous
      from sgpo_jax.model import transformer as model_lib
      from sgpo_jax.parallel import sharding as sharding_lib
      from tests.conftest import BOS, EOS, PAD, mesh_config, params_for, random_tokens, tiny_config
      cfg = tiny_config()
      prompts = [[BOS] + random_tokens(7 + i, n - 1, 16).tolist()
                 for i, n in enumerate([3, 8, 1, 5, 7, 2, 4, 6, 8, 3, 5])]
      ids = [5 * i + 3 for i in range(len(prompts))]
      outs = []
      for shape in ((1, 1, 1), (4, 1, 1), (2, 1, 2)):
        mesh = sharding_lib.make_mesh(mesh_config(shape), jax.devices()[:int(np.prod(shape))])
        shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh)
        params = jax.device_put(params_for(cfg), shardings)
        sampler = continuous.ContinuousSampler(
            cfg, mesh, shardings, slots=2, queue_rows=8, max_prompt_len=8, max_new_tokens=6,
            stop_ids=[EOS], pad_id=PAD, bos_id=BOS, prefill_step=4)
        assert sampler.shards == (4 if shape == (4, 1, 1) else 1)
        outs.append(sampler.sample(params, prompts, ids, jax.random.key(11), temperature=0.9))
        assert sampler.compile_count == 1
      for out in outs[1:]:
        np.testing.assert_array_equal(out.tokens_RxN, outs[0].tokens_RxN)
        np.testing.assert_array_equal(out.lengths_R, outs[0].lengths_R)
        np.testing.assert_allclose(out.logprobs_RxN, outs[0].logprobs_RxN, atol=1e-5)
        for w, w0 in zip(out.calls, outs[0].calls):
          assert w['prefills_B'].tolist() == w0['prefills_B'].tolist()
          assert int(w['busy_slot_steps']) == int(w0['busy_slot_steps'])
      assert len(set(outs[0].lengths_R.tolist())) > 1
      print('OK')
  ''')
  out = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0 and 'OK' in out.stdout, out.stderr[-3000:]
