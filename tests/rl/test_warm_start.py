"""The warm-start cache under concurrency: runs sharing a cache build each policy once."""

from __future__ import annotations

import fcntl
import json
import lzma
import os
import threading

import flax.linen as nn
import jax
import numpy as np
import pytest
import safetensors.numpy

from sgpo_jax import configs
from sgpo_jax.config import defaults as default_config
from sgpo_jax.config.args import load_config_module
from sgpo_jax.rl import warm_start


def _tiny_config(cache_dir: str):
  c = default_config.get_config('runlocal=1')
  c.model.d_model, c.model.n_layers, c.model.d_ff = 16, 1, 32
  c.model.n_heads, c.model.n_kv_heads, c.model.head_dim = 2, 1, 8
  c.data.num_train, c.data.num_eval = 64, 16
  c.warm_start.steps = 12
  c.warm_start.cache_dir = cache_dir
  return c


def _build(config, workdir):
  return warm_start.policy_for_config(config, workdir, show_progress=False)


@pytest.mark.slow
def test_concurrent_runs_build_a_shared_warm_start_once(tmp_path):
  config = _tiny_config(str(tmp_path / 'cache'))
  path = os.path.join(str(tmp_path / 'cache'), warm_start.cache_key(config))
  os.makedirs(os.path.dirname(path))
  results: dict[int, tuple] = {}

  def run(i):
    results[i] = _build(config, str(tmp_path / f'run{i}'))

  # Hold the lock as a running build would, start two runs, then let them go: both must
  # wait, and exactly one of them may train (the other reuses its policy).
  with open(path + '.lock', 'w') as held:
    fcntl.flock(held, fcntl.LOCK_EX)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
      t.start()
    threads[0].join(timeout=3.0)
    assert not results, 'a run went ahead while another held the warm-start lock'
    fcntl.flock(held, fcntl.LOCK_UN)
  for t in threads:
    t.join(timeout=300)
  assert sorted(info['cached'] for _, info in results.values()) == [False, True]
  (p0, _), (p1, _) = results[0], results[1]
  for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(p1)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # A later run reuses the cache without waiting (the lock is free again).
  _, info = _build(config, str(tmp_path / 'run2'))
  assert info['cached'] is True


@pytest.mark.slow
def test_shipped_copy_loads_the_same_policy_without_training(tmp_path, monkeypatch):
  config = _tiny_config(str(tmp_path / 'built'))
  built, info = _build(config, str(tmp_path / 'run0'))
  assert info['cached'] is False and 'shipped' not in info
  key = warm_start.cache_key(config)
  shipped_dir = str(tmp_path / 'shipped')
  warm_start.export_shipped(built, info, key, shipped_dir)
  monkeypatch.setattr(warm_start, 'SHIPPED_DIR', shipped_dir)
  monkeypatch.setattr(warm_start, 'train_sft', lambda *a, **k: pytest.fail('trained'))
  # A fresh cache: the shipped copy is loaded (no SFT), bit for bit, and cached for later.
  config.warm_start.cache_dir = str(tmp_path / 'fresh')
  assert warm_start.cache_key(config) == key  # where it comes from is not part of the key
  loaded, info2 = _build(config, str(tmp_path / 'run1'))
  assert info2['shipped'] is True and info2['final_loss'] == info['final_loss']
  assert info2['environment'] == info['environment'] and 'loaded_on' in info2
  assert jax.tree.structure(loaded) == jax.tree.structure(built)
  for a, b in zip(jax.tree.leaves(built), jax.tree.leaves(loaded)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert _build(config, str(tmp_path / 'run2'))[1]['cached'] is True
  # shipped=False trains, whatever is shipped.
  config.warm_start.shipped = False
  config.warm_start.cache_dir = str(tmp_path / 'fresh2')
  with pytest.raises(pytest.fail.Exception, match='trained'):
    _build(config, str(tmp_path / 'run3'))


@pytest.mark.slow
def test_a_shipped_copy_of_another_model_is_refused(tmp_path, monkeypatch):
  config = _tiny_config(str(tmp_path / 'built'))
  built, info = _build(config, str(tmp_path / 'run0'))
  shipped_dir = str(tmp_path / 'shipped')
  other = dict(built)
  other.pop(sorted(other)[0])  # a tensor missing: another architecture
  monkeypatch.setattr(warm_start, 'SHIPPED_DIR', shipped_dir)
  config.warm_start.cache_dir = str(tmp_path / 'fresh')
  warm_start.export_shipped(other, info, warm_start.cache_key(config), shipped_dir)
  with pytest.raises(ValueError, match='warm_start.shipped=False'):
    _build(config, str(tmp_path / 'run1'))


def test_the_readme_run_and_every_regime_have_a_shipped_warm_start():
  # The committed results start from these (first machine: SFT final loss 0.249 for the
  # README run, default and small_pool; 0.037 for paper_like). A config change that moves a
  # cache key would leave its regime training a new warm start: this names it.
  default_file = load_config_module(configs.path('default'))
  expected = {'': 0.249, 'regime=default': 0.249, 'regime=small_pool': 0.249,
              'regime=paper_like': 0.037}
  for arg, loss in expected.items():
    path = warm_start.shipped_file(warm_start.cache_key(default_file.get_config(arg)))
    assert path is not None, f'no shipped warm start for {arg!r}'
    with open(warm_start.shipped_info_file(path)) as f:
      assert round(json.load(f)['final_loss'], 3) == loss, arg
  # Adapters attach after the (fully fine-tuned) warm start: LoRA settings keep the key.
  lora = default_file.get_config('')
  lora.model.lora_rank, lora.model.lora_base_dtype = 8, 'int8'
  assert warm_start.cache_key(lora) == warm_start.cache_key(default_file.get_config(''))


def _per_layer(params):
  """The layout of before the layers were scanned: 'layers_0' ... instead of stacked 'layers'."""
  layers = params['layers']
  n = jax.tree.leaves(layers)[0].shape[0]
  out = {k: v for k, v in params.items() if k != 'layers'}
  out.update({f'layers_{i}': jax.tree.map(lambda x, i=i: np.asarray(x)[i], layers)
              for i in range(n)})
  return out


def _target(config):
  from sgpo_jax.model import transformer as model_lib
  from sgpo_jax.parallel import sharding as sharding_lib
  cfg = model_lib.ModelConfig.from_config(config.model)
  mesh = sharding_lib.make_mesh(config.mesh, jax.devices()[:1])
  abstract = model_lib.abstract_params(cfg)
  shardings = sharding_lib.param_shardings(abstract, mesh)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      nn.meta.unbox(abstract), shardings)


def test_per_layer_checkpoints_load_stacked(tmp_path):
  """A warm start cached (orbax) or shipped (safetensors) in the per-layer layout of before
  loads into the stacked layout, layer i of every tensor from 'layers_i'."""
  import orbax.checkpoint as ocp
  config = _tiny_config(str(tmp_path / 'built'))
  config.model.n_layers = 3
  target = _target(config)
  rng = np.random.default_rng(0)
  stacked = jax.tree.map(lambda t: rng.normal(size=t.shape).astype(t.dtype), target)
  old = _per_layer(stacked)
  assert 'layers' not in old and old['layers_2']['attn']['q']['kernel'].shape == (16, 2, 8)

  checkpointer = ocp.StandardCheckpointer()
  path = str(tmp_path / 'cached' / 'params')
  checkpointer.save(path, old)
  checkpointer.wait_until_finished()
  restored = warm_start.restore_params(checkpointer, path, target)
  shipped_dir = str(tmp_path / 'shipped')
  file = warm_start.export_shipped(old, {'source': 'warm_start'}, 'old', shipped_dir)
  loaded, _ = warm_start.load_shipped(file, target)
  for got in (restored, loaded):
    assert jax.tree.structure(got) == jax.tree.structure(stacked)
    for a, b in zip(jax.tree.leaves(stacked), jax.tree.leaves(got)):
      np.testing.assert_array_equal(a, np.asarray(b))
    assert np.asarray(got['layers']['mlp']['up']['kernel'][1]).tolist() == (
        old['layers_1']['mlp']['up']['kernel'].tolist())


def test_the_committed_shipped_warm_start_loads_into_the_stacked_layout():
  config = default_config.get_config('')
  path = warm_start.shipped_file(warm_start.cache_key(config))
  loaded, info = warm_start.load_shipped(path, _target(config))
  assert path.endswith('.safetensors.xz') and os.path.basename(path) == info['shipped_file']
  with lzma.open(path) as f:
    flat = safetensors.numpy.load(f.read())
  for i in range(config.model.n_layers):
    np.testing.assert_array_equal(np.asarray(loaded['layers']['attn']['q']['kernel'][i]),
                                  flat[f'layers_{i}/attn/q/kernel'])
