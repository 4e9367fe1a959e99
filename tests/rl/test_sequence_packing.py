"""Packed training: the packer's layout, and a packed step whose loss and gradients equal the
padded step's on the same rows (fp32), with one compilation for every batch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import optax
import pytest

from sgpo_jax.model import flops as flops_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib
from sgpo_jax.rl import learner as learner_lib
from sgpo_jax.rl import sequence_packing as packing_lib
from tests.conftest import mesh_config, tiny_config
from tests.rl.test_learner import N, P, R, make_batch, run_config


def test_pack_batch_layout_by_hand():
  # Row 0: prompt [1, 5] + completion [7, 2]; row 1: prompt [1] + completion [9]; row 2 invalid.
  batch = learner_lib.layout_batch([[1, 5], [1], [1, 4]], np.array([[7, 2], [9, 0], [3, 3]]),
                                   np.array([[1, 1], [1, 0], [1, 1]]),
                                   np.array([[-0.5, -0.25], [-1.0, 0.0], [-2.0, -2.0]],
                                            np.float32), 2, 0)
  batch.update(rewards_R=np.array([1, 0, 1], np.float32), group_id_R=np.array([0, 0, 1]),
               valid_R=np.array([True, True, False]))
  shape = packing_lib.PackShape.for_batch(3, 4, pack_rows=1, pack_len=8)
  assert shape == packing_lib.PackShape(buffers=2, rows=1, length=8)
  packed = packing_lib.pack_batch(batch, shape, pad_id=0)
  np.testing.assert_array_equal(packed['tokens_MxBxL'][0, 0], [1, 5, 7, 2, 1, 9, 0, 0])
  np.testing.assert_array_equal(packed['segment_ids_MxBxL'][0, 0], [1, 1, 1, 1, 2, 2, 0, 0])
  np.testing.assert_array_equal(packed['positions_MxBxL'][0, 0], [0, 1, 2, 3, 0, 1, 0, 0])
  # Targets: 5<-1, 7<-5 (completion), 2<-7 (completion), none at a segment end, 9<-1.
  np.testing.assert_array_equal(packed['completion_mask_MxBxL1'][0, 0], [0, 1, 1, 0, 1, 0, 0])
  np.testing.assert_allclose(packed['old_logp_MxBxL1'][0, 0], [0, -0.5, -0.25, 0, -1.0, 0, 0])
  np.testing.assert_array_equal(packed['row_MxBxL1'][0, 0, :5], [0, 0, 0, 0, 1])
  np.testing.assert_array_equal(packed['used_M'], [True, False])
  np.testing.assert_array_equal(packed['completion_len_R'], [2, 1, 0])
  # 7 input slots; useful: 4 - 1 + 2 - 1 = 4 (each row's last token predicts nothing).
  assert packing_lib.token_counts(packed) == (7, 4)
  assert packing_lib.padded_token_counts(batch) == (3 * 3, 4)


def test_each_data_shard_packs_its_own_rows():
  """4 rows over 2 shards: rows 0-1 pack into shard 0's buffer rows, rows 2-3 into shard 1's
  (dim 1 = [shard 0's pack_rows, shard 1's]); the row indices stay the batch's own."""
  batch = learner_lib.layout_batch([[1], [1, 5], [1], [1, 4]],
                                   np.array([[7, 2], [9, 2], [3, 2], [6, 2]]),
                                   np.array([[1, 1], [1, 1], [1, 0], [1, 1]]),
                                   np.full((4, 2), -0.5, np.float32), 2, 0)
  batch.update(rewards_R=np.ones(4, np.float32), group_id_R=np.array([0, 0, 1, 1]),
               valid_R=np.array([True, True, True, True]))
  shape = packing_lib.PackShape.for_batch(4, 4, pack_rows=1, pack_len=8, shards=2)
  assert shape == packing_lib.PackShape(buffers=1, rows=1, length=8, shards=2)
  packed = packing_lib.pack_batch(batch, shape, pad_id=0)
  assert packed['tokens_MxBxL'].shape == (1, 2, 8)
  np.testing.assert_array_equal(packed['tokens_MxBxL'][0, 0], [1, 5, 9, 2, 1, 7, 2, 0])
  np.testing.assert_array_equal(packed['tokens_MxBxL'][0, 1], [1, 4, 6, 2, 1, 3, 0, 0])
  # Target positions (none at a segment's last token): rows 1, 0 | rows 3, 2.
  np.testing.assert_array_equal(packed['row_MxBxL1'][0, 0, :6], [1, 1, 1, 0, 0, 0])
  np.testing.assert_array_equal(packed['segment_ids_MxBxL'][0, 0], [1, 1, 1, 1, 2, 2, 2, 0])
  np.testing.assert_array_equal(packed['row_MxBxL1'][0, 1, :5], [3, 3, 3, 0, 2])
  # One shard: the same rows in one buffer row's worth per pack row, as before sharding.
  one = packing_lib.pack_batch(batch, packing_lib.PackShape.for_batch(4, 4, 2, 8), pad_id=0)
  assert one['tokens_MxBxL'].shape == (1, 2, 8)
  with pytest.raises(ValueError, match=r'train.rows_per_batch=4 does not split over 3 data'):
    packing_lib.PackShape.for_batch(4, 4, pack_rows=1, pack_len=8, shards=3)


@pytest.mark.slow
def test_packed_step_on_4_devices_equals_padded_single_device():
  """The packed step over a data mesh and data x fsdp (4 shards each): loss and one AdamW
  step equal to the padded step on one device."""
  script = textwrap.dedent('''
      import os
      os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=4'
      import jax, numpy as np
      from sgpo_jax.parallel import sharding as sharding_lib
      from tests.conftest import mesh_config
      from tests.rl.test_learner import (assert_one_step_params_close, make_batch, make_learner,
                                         run_config, P, N)
      batch = make_batch([2, 2, 4, 1], seed=3)
      results = []
      for shape, packing in (((1, 1, 1), False), ((4, 1, 1), True), ((2, 2, 1), True)):
        devices = jax.devices()[:int(np.prod(shape))]
        mesh = sharding_lib.make_mesh(mesh_config(shape), devices)
        learner, state = make_learner(run_config(packing=packing, pack_rows=1,
                                                 pack_len=2 * (P + N)), mesh)
        state, metrics = learner.train_step(state, batch)
        if packing:
          assert learner.pack_shape.shards == shape[0] * shape[1], learner.pack_shape
        results.append((float(metrics['loss']), jax.tree.map(np.asarray, state['params'])))
      for loss, params in results[1:]:
        np.testing.assert_allclose(loss, results[0][0], rtol=2e-5, atol=1e-7)
        assert_one_step_params_close(params, results[0][1])
      print('OK')
  ''')
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  out = subprocess.run([sys.executable, '-c', script], cwd=repo, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0 and 'OK' in out.stdout, out.stderr[-3000:]


def test_pack_len_shorter_than_a_row_is_refused():
  with pytest.raises(ValueError, match='train.pack_len=5'):
    packing_lib.PackShape.for_batch(8, 11, pack_rows=1, pack_len=5)


def _sgd_learner(config):
  """SGD with lr 1 and no clipping: params_before - params_after is exactly the gradient."""
  cfg = tiny_config()
  mesh = sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  params, shardings = model_lib.init_sharded_params(cfg, mesh, jax.random.key(0))
  learner = learner_lib.Learner(cfg, mesh, shardings, config, num_steps=10)
  learner.optimizer = optax.sgd(1.0)
  before = jax.tree.map(np.asarray, params)
  return learner, learner.init_state(params), before


@pytest.mark.slow
@pytest.mark.parametrize('loss_agg,kl_coef,importance_level', [
    ('token_mean', 0.0, 'token'), ('seq_mean_token_mean', 0.1, 'token'),
    # GSPO: each sequence's ratio is a mean over its own tokens, found by segment sums over
    # the packed tokens' row ids (several sequences share a buffer row).
    ('seq_mean_token_mean', 0.0, 'sequence')])
def test_packed_step_equals_padded_step(loss_agg, kl_coef, importance_level):
  batch = make_batch([2, 2, 4, 1], seed=5)  # 9 valid rows of 16, mixed lengths
  batch['old_logp_RxT1'] = batch['old_logp_RxT1'] * 0.9  # ratios != 1: clipping matters
  rng = np.random.default_rng(1)
  batch['ref_logp_RxT1'] = (-rng.uniform(0.5, 3.0, batch['old_logp_RxT1'].shape) *
                            batch['completion_mask_RxT1']).astype(np.float32)
  batch['rewards_R'] = rng.uniform(0, 1, R).astype(np.float32)
  common = dict(loss_agg=loss_agg, kl_coef=kl_coef, clip_eps_low=0.05, clip_eps_high=0.05,
                importance_level=importance_level)
  padded, s_pad, before = _sgd_learner(run_config(packing=False, **common))
  packed, s_pack, _ = _sgd_learner(run_config(packing=True, pack_rows=2, pack_len=2 * (P + N),
                                              **common))
  s_pad, m_pad = padded.train_step(s_pad, batch)
  s_pack, m_pack = packed.train_step(s_pack, batch)
  for key in ('loss', 'grad_norm', 'token_count', 'seq_count', 'clip_frac_low',
              'clip_frac_high', 'ratio_mean', 'ratio_max', 'ratio_min', 'entropy_mean',
              'num_valid_rows'):
    np.testing.assert_allclose(float(m_pack[key]), float(m_pad[key]), rtol=2e-5, atol=1e-7,
                               err_msg=key)
  assert float(m_pad['clip_frac_high']) + float(m_pad['clip_frac_low']) > 0
  if importance_level == 'sequence':  # one ratio per sequence, several per buffer row
    assert float(m_pack['ratio_max']) > float(m_pack['ratio_min'])
  grads_pad = jax.tree.map(lambda b, a: b - np.asarray(a), before, s_pad['params'])
  grads_pack = jax.tree.map(lambda b, a: b - np.asarray(a), before, s_pack['params'])
  for g_pad, g_pack in zip(jax.tree.leaves(grads_pad), jax.tree.leaves(grads_pack)):
    assert np.abs(g_pad).max() > 0
    # Summation order differs (other matmul shapes): tolerance relative to the leaf's scale.
    np.testing.assert_allclose(g_pack, g_pad, rtol=1e-4, atol=1e-4 * np.abs(g_pad).max())
  # Packed rows are the real tokens only; the padded step runs the whole rectangle.
  assert packed.last_tokens[1] == padded.last_tokens[1]
  assert packed.last_tokens[0] < padded.last_tokens[0]


@pytest.mark.slow
def test_packed_step_compiles_once_and_ledger_counts_real_tokens():
  learner, state, _ = _sgd_learner(run_config(packing=True, pack_rows=2, pack_len=P + N,
                                              learning_rate=1e-3))
  learner.optimizer = optax.sgd(1e-3)
  state = learner.init_state(state['params'])
  ledger = flops_lib.FlopsLedger(learner.cfg)
  for sizes in ([2] * 8, [8], [1, 2, 3, 8], [4]):
    batch = make_batch(sizes, seed=len(sizes))
    state, metrics = learner.train_step(state, batch)
    assert np.isfinite(float(metrics['loss']))
    learner.count_train(ledger, R, P + N - 1, int(batch['valid_R'].sum()))
  assert learner.compile_count == 1
  computed, useful = ledger.tokens('train')
  assert 0 < useful <= computed
  assert ledger.useful('train') / ledger.computed('train') == pytest.approx(useful / computed)


def test_gspo_with_packing_passes_the_config_check():
  """Packing is the default; GSPO (importance_level=sequence) runs on the packed step."""
  from sgpo_jax.config import check as config_check
  c = run_config(packing=True, importance_level='sequence')
  config_check.check_config(c)
  settings = learner_lib.LossSettings.from_config(c)
  assert settings.packing and settings.importance_level == 'sequence'
