"""The jitted train step: one compile for every group layout, exact micro-batching, sharding."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.config import defaults as default_config
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.rl import learner as learner_lib
from tests.conftest import BOS, EOS, PAD, mesh_config, tiny_config

R, P, N = 16, 6, 5  # rows, max prompt len, new tokens


def run_config(**train):
  c = default_config.get_config()
  c.train.rows_per_batch = R
  c.sampling.max_prompt_len, c.sampling.max_new_tokens = P, N
  c.train.learning_rate, c.train.warmup_steps = 1e-2, 0
  c.train.grad_clip = 0.0
  c.train.packing = False  # the padded step unless a test asks for packing
  for k, v in train.items():
    c.train[k] = v
  return c


def make_batch(group_sizes, seed=0):
  """A host batch of R rows with the given group sizes (rest padding)."""
  rng = np.random.default_rng(seed)
  layout = rows_lib.layout_rows(np.arange(len(group_sizes)), np.asarray(group_sizes), R)
  prompts = [list(rng.integers(3, 16, rng.integers(2, P + 1))) for _ in range(R)]
  lengths = rng.integers(1, N + 1, R)
  mask = (np.arange(N)[None] < lengths[:, None]).astype(np.int32)
  completions = np.where(mask > 0, rng.integers(3, 16, (R, N)), 0).astype(np.int32)
  logps = np.where(mask > 0, -rng.uniform(0.5, 3.0, (R, N)), 0.0).astype(np.float32)
  batch = learner_lib.layout_batch(prompts, completions, mask, logps, P, 0)
  batch.update(rewards_R=rng.integers(0, 2, R).astype(np.float32),
               group_id_R=layout.group_id_R.astype(np.int32), valid_R=layout.valid_R)
  return batch


def make_learner(config, mesh=None):
  cfg = tiny_config()
  mesh = mesh or sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  params, shardings = model_lib.init_sharded_params(cfg, mesh, jax.random.key(0))
  learner = learner_lib.Learner(cfg, mesh, shardings, config, num_steps=10)
  return learner, learner.init_state(params)


@pytest.mark.parametrize('temperature', [1.0, 0.7])
def test_learner_recomputes_the_samplers_logprobs(cfg, params, mesh1, param_shardings1,
                                                  temperature):
  """The behaviour policy the loss's ratio divides by is the sampler's (temperature-scaled,
  untruncated) log-prob: the learner's recomputation must equal it token for token."""
  from sgpo_jax.generate import sampler as sampling
  from sgpo_jax.model import lora as lora_lib
  sampler = sampling.Sampler(cfg, mesh1, param_shardings1, rows=4, max_prompt_len=8,
                             max_new_tokens=6, stop_ids=[EOS], pad_id=PAD, bos_id=BOS,
                             min_prompt_bucket=8)
  prompts = [[BOS, 3, 4, 5], [BOS, 7], [BOS, 9, 9, 9, 9, 9], [BOS, 4, 4]]
  out = sampler.sample(params, prompts, [0, 1, 2, 3], jax.random.key(0),
                       temperature=temperature)
  prompt_RxP, prompt_mask_RxP = sampler.pad_prompts(prompts)
  tokens_RxT = np.concatenate([prompt_RxP, out.tokens_RxN], 1)
  mask_RxT = np.concatenate([prompt_mask_RxP, out.mask_RxN], 1)
  logp_RxT1, _ = learner_lib.sequence_logprobs(lora_lib.make_model(cfg), params, tokens_RxT,
                                               mask_RxT, temperature, 0)
  completion_RxN = np.asarray(logp_RxT1)[:, prompt_RxP.shape[1] - 1:]  # t predicts t + 1
  real_RxN = out.mask_RxN > 0
  assert real_RxN.sum() >= 8
  np.testing.assert_allclose(completion_RxN[real_RxN], out.logprobs_RxN[real_RxN], atol=1e-5)


def test_layout_batch_places_prompt_left_and_completion_targets():
  batch = learner_lib.layout_batch([[1, 5, 6]], np.array([[7, 2, 0]]), np.array([[1, 1, 0]]),
                                   np.array([[-0.5, -0.25, 0.0]], np.float32), 4, 0)
  np.testing.assert_array_equal(batch['tokens_RxT'], [[0, 1, 5, 6, 7, 2, 0]])
  np.testing.assert_array_equal(batch['mask_RxT'], [[0, 1, 1, 1, 1, 1, 0]])
  # Target t is token t+1: the completion starts at target index max_prompt_len - 1 = 3.
  np.testing.assert_array_equal(batch['completion_mask_RxT1'], [[0, 0, 0, 1, 1, 0]])
  np.testing.assert_allclose(batch['old_logp_RxT1'], [[0, 0, 0, -0.5, -0.25, 0]])


def test_train_step_compiles_once_for_every_group_layout():
  learner, state = make_learner(run_config())
  for sizes in ([2] * 8, [4] * 4, [8] * 2, [8], [1, 2, 3, 8]):  # last two: padded, uneven
    state, metrics = learner.train_step(state, make_batch(sizes))
    assert np.isfinite(float(metrics['loss']))
  assert learner.compile_count == 1


def test_half_padded_batch_counts_only_valid_groups():
  learner, state = make_learner(run_config())
  _, metrics = learner.train_step(state, make_batch([4, 4]))
  assert float(metrics['num_valid_rows']) == 8
  assert float(metrics['num_valid_groups']) == 2


@pytest.mark.parametrize('packing', [False, True])
def test_train_step_is_a_pure_function_with_its_shardings_beside_it(packing):
  """The module-level step: the batch schema (also the dry run's) matches the batch the
  Learner builds; jitted by hand it gives the same metrics twice from one state (nothing is
  mutated) and the same as `make_train_step`'s sharded, donating jit, which compiled once."""
  learner, state = make_learner(run_config(packing=packing, pack_rows=2))
  batch = learner.device_batch(make_batch([2, 2, 4, 8]))
  schema = learner_lib.batch_schema(R, P + N, learner.pack_shape)
  assert {k: (v.shape, v.dtype) for k, v in schema.items()} == {
      k: (np.shape(x), jax.dtypes.canonicalize_dtype(np.asarray(x).dtype))
      for k, x in batch.items()}
  step = jax.jit(functools.partial(learner_lib.train_step, model=learner.model,
                                   optimizer=learner.optimizer, settings=learner.settings))
  _, m_a = step(state, batch)
  _, m_b = step(state, batch)
  jitted, shardings = learner_lib.make_train_step(
      learner.model, learner.optimizer, learner.settings, learner.mesh,
      jax.tree.map(lambda x: x.sharding, state), packed=packing)
  _, m_c = jitted(jax.tree.map(jnp.copy, state), sharding_lib.put_host_values(batch, shardings))
  assert jitted._cache_size() == 1
  for key in m_a:
    assert float(m_a[key]) == float(m_b[key]), key
    np.testing.assert_allclose(float(m_c[key]), float(m_a[key]), rtol=1e-6, err_msg=key)


# The policy losses (sgpo_jax/rl/losses.py registries): PPO token-level (the default), CISPO
# without a lower bound, GSPO with the paper's bounds.
LOSSES = {
    'ppo': {},
    'cispo': {'policy_loss': 'cispo', 'clip_eps_low': 1.0, 'clip_eps_high': 0.28},
    'gspo': {'importance_level': 'sequence', 'clip_eps_low': 3e-4, 'clip_eps_high': 4e-4,
             'loss_agg': 'seq_mean_token_mean'},
}


@pytest.mark.slow
def test_micro_batched_step_equals_full_batch_step():
  # Exactness for every registered loss is pinned per element of the gradient in
  # test_losses.py::test_micro_batched_gradient_equals_full_batch; here the learner's wiring.
  batch = make_batch([2, 2, 4, 8])
  full, state_full = make_learner(run_config(micro_batches=1))
  micro, state_micro = make_learner(run_config(micro_batches=4))
  state_full, m_full = full.train_step(state_full, batch)
  state_micro, m_micro = micro.train_step(state_micro, batch)
  np.testing.assert_allclose(float(m_full['loss']), float(m_micro['loss']), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(float(m_full['grad_norm']), float(m_micro['grad_norm']), rtol=1e-4)
  assert_one_step_params_close(state_full['params'], state_micro['params'])


def assert_one_step_params_close(params_a, params_b, lr: float = 1e-2):
  """Params after one AdamW step from the same start, by two summation orders. Adam's first
  step moves a parameter by lr * g / (|g| + eps): an element whose gradient is at eps's scale
  (1e-8) turns rounding into a visible move, so a handful may differ by a few hundredths of
  lr; every other element agrees to 1e-4."""
  far = 0
  for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_b)):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=0, atol=0.05 * lr)
    far += int(np.sum(~np.isclose(a, b, rtol=1e-4, atol=1e-6)))
  assert far <= 3, far


@pytest.mark.parametrize('loss', sorted(LOSSES))
def test_policy_gradient_step_moves_logprobs_with_advantage_sign(loss):
  config = run_config(learning_rate=1e-3, **{'loss_agg': 'seq_mean_token_mean', **LOSSES[loss]})
  learner, state = make_learner(config)
  batch = make_batch([4, 4, 4, 4], seed=3)
  batch['rewards_R'] = np.tile([1.0, 0.0, 0.0, 0.0], 4).astype(np.float32)
  before = np.asarray(learner.logprobs(state['params'], batch['tokens_RxT'], batch['mask_RxT']))
  batch['old_logp_RxT1'] = before * batch['completion_mask_RxT1']
  state, _ = learner.train_step(state, batch)
  after = np.asarray(learner.logprobs(state['params'], batch['tokens_RxT'], batch['mask_RxT']))
  seq_change = ((after - before) * batch['completion_mask_RxT1']).sum(axis=1)
  positive = batch['rewards_R'] > 0
  assert np.all(seq_change[positive] > 0)
  assert np.mean(seq_change[~positive] < 0) >= 0.75


def test_nonfinite_metrics_raise_named_error():
  with pytest.raises(learner_lib.NonFiniteError, match='step 7: loss=nan'):
    learner_lib.check_finite({'loss': np.nan, 'grad_norm': 1.0}, 7)


@pytest.mark.slow
def test_sharded_step_on_8_devices_equals_single_device():
  script = textwrap.dedent('''
      import os
      os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'
      import jax, numpy as np
      from sgpo_jax.parallel import sharding as sharding_lib
      from tests.conftest import mesh_config
      from tests.rl.test_learner import (assert_one_step_params_close, make_batch, make_learner,
                                         run_config)
      batch = make_batch([2, 2, 4, 8])
      results = []
      for shape in ((1, 1, 1), (8, 1, 1), (2, 2, 2)):
        devices = jax.devices()[:int(np.prod(shape))]
        mesh = sharding_lib.make_mesh(mesh_config(shape), devices)
        learner, state = make_learner(run_config(), mesh)
        state, metrics = learner.train_step(state, batch)
        results.append((float(metrics['loss']), jax.tree.map(np.asarray, state['params'])))
      for loss, params in results[1:]:
        np.testing.assert_allclose(loss, results[0][0], rtol=1e-5, atol=1e-7)
        assert_one_step_params_close(params, results[0][1])
      print('OK')
  ''')
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  out = subprocess.run([sys.executable, '-c', script], cwd=repo, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0 and 'OK' in out.stdout, out.stderr[-3000:]
