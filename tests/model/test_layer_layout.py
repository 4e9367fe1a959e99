"""Checkpoints of the per-layer layout (before the layers were scanned) restore stacked."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import params_for, tiny_config

from sgpo_jax.model import transformer as model_lib
from sgpo_jax.outputs import checkpoint as checkpoint_lib


def _per_layer(tree):
  """Concrete stacked tree -> the per-layer layout, in every dict (params and moments)."""
  def convert(x):
    if not isinstance(x, dict):
      return x
    out = {k: convert(v) for k, v in x.items() if k != 'layers'}
    if 'layers' in x:
      n = jax.tree.leaves(x['layers'])[0].shape[0]
      out.update({f'layers_{i}': jax.tree.map(lambda a, i=i: a[i], x['layers'])
                  for i in range(n)})
    return out
  return jax.tree.map(convert, tree, is_leaf=lambda x: isinstance(x, dict))


def test_stack_layers_inverts_the_per_layer_layout():
  params = params_for(tiny_config(n_layers=3))
  old = _per_layer(params)
  assert sorted(old) == ['embedding', 'final_norm', 'layers_0', 'layers_1', 'layers_2']
  assert model_lib.has_per_layer_layout(old) and not model_lib.has_per_layer_layout(params)
  back = model_lib.stack_layers(old)
  assert jax.tree.structure(back) == jax.tree.structure(params)
  jax.tree.map(np.testing.assert_array_equal, back, params)


@pytest.mark.slow
def test_a_train_state_checkpoint_of_the_per_layer_layout_restores_stacked(tmp_path):
  """Params and Adam moments saved per layer come back stacked, value for value."""
  params = params_for(tiny_config(n_layers=3))
  optimizer = optax.adam(1e-2)
  opt_state = optimizer.init(params)
  grads = jax.tree.map(lambda x: jnp.sin(x) + 1.0, params)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  state = {'params': params, 'opt_state': opt_state}
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'ckpt'))
  ckpt.save(3, _per_layer(state), {'step': 3})
  ckpt.wait()
  restored, meta = ckpt.restore(3, state)
  assert meta['step'] == 3
  assert jax.tree.structure(restored) == jax.tree.structure(state)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               restored, state)
  mu = restored['opt_state'][0].mu['layers']['attn']['q']['kernel']
  assert mu.shape[0] == 3 and float(jnp.abs(mu[2]).max()) > 0
  ckpt.close()


@pytest.mark.slow
def test_restore_latest_keeps_an_intact_per_layer_checkpoint(tmp_path, monkeypatch):
  """Its checksum names per-layer paths: checked in that layout, it passes (it used to be
  compared with the stacked paths, fail, and be moved aside as corrupt); a flipped value in
  it still fails."""
  params = params_for(tiny_config(n_layers=2))
  state = {'params': params}
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'ckpt'))
  ckpt.save(3, _per_layer(state), {'step': 3})
  ckpt.wait()
  step, restored, meta = ckpt.restore_latest(state)
  assert step == 3 and checkpoint_lib.CHECKSUM_KEY not in meta
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               restored, state)
  good = checkpoint_lib.state_checksum(_per_layer(state))
  bad = _per_layer(state)
  bad['params']['layers_1'] = jax.tree.map(lambda x: x + 1.0, bad['params']['layers_1'])
  monkeypatch.setattr(checkpoint_lib, 'state_checksum', lambda s: good)  # values drifted
  ckpt.save(4, bad, {'step': 4})
  ckpt.wait()
  monkeypatch.undo()
  with pytest.raises(ValueError, match='checksum mismatch'):
    ckpt.restore(4, state)
  ckpt.close()
