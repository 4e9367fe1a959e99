"""Tests for sgpo_jax.parallel.sharding: mesh shapes, parameter placement, and multi-device parity.

The multi-device checks need 8 fake CPU devices, which XLA only creates if XLA_FLAGS is set
before jax is imported, so they run this file as a script in a subprocess. That script
computes everything on a 1-device mesh and on each multi-device mesh in the same process and
prints the results as JSON; the tests compare them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

MULTI_MESHES = ((8, 1, 1), (2, 2, 2))
ROWS, MAX_PROMPT, N_NEW = 8, 8, 5


def _multi_device_results() -> dict:
  """Runs in the subprocess (8 fake devices): forward logits, greedy and sampled tokens, and
  parameter specs per mesh shape, plus the 1-device reference."""
  import jax
  from conftest import (
    BOS,
    EOS,
    PAD,
    forward_fn,
    left_pad,
    mesh_config,
    params_for,
    random_tokens,
    tiny_config,
  )

  from sgpo_jax.generate import sampler as sampling
  from sgpo_jax.model import transformer as model_lib
  from sgpo_jax.parallel import sharding as sharding_lib

  assert len(jax.devices()) == 8, jax.devices()
  cfg = tiny_config()
  # Uneven on tp=2: vocab 17 and a single KV head cannot be split, so they are replicated.
  uneven_cfg = tiny_config(vocab_size=17, n_kv_heads=1)
  prompts = [[BOS] + random_tokens(i, n, 16).tolist()
             for i, n in enumerate([3, 7, 1, 5, 6, 2, 4, 7])]
  tokens_BxT, mask_BxT = left_pad(prompts, MAX_PROMPT)
  results = {}
  meshes = [((1, 1, 1), jax.devices()[:1])] + [(s, jax.devices()) for s in MULTI_MESHES]
  for shape, devices in meshes:
    mesh = sharding_lib.make_mesh(mesh_config(shape), devices)
    out = results[str(shape)] = {}
    # data=8 cannot split any parameter, so the uneven model only runs where tp > 1.
    tp = mesh.shape['tp'] > 1 or shape == (1, 1, 1)
    for name, model_cfg in (('even', cfg), ('uneven', uneven_cfg))[:2 if tp else 1]:
      shardings = sharding_lib.param_shardings(model_lib.abstract_params(model_cfg), mesh)
      params = jax.device_put(params_for(model_cfg), shardings)
      batch = sharding_lib.shard_batch(mesh, (tokens_BxT, mask_BxT))
      logits = forward_fn(model_cfg)(params, *batch)
      out['batch_spec'] = _spec(batch[0])
      out[f'{name}_logits'] = sharding_lib.to_host(logits).tolist()
      out[f'{name}_specs'] = {
          'embedding': _spec(params['embedding']),
          'q': _spec(params['layers']['attn']['q']['kernel']),
          'k': _spec(params['layers']['attn']['k']['kernel']),
          'o': _spec(params['layers']['attn']['o']['kernel']),
          'up': _spec(params['layers']['mlp']['up']['kernel']),
          'norm': _spec(params['final_norm']['scale']),
      }
    if tp:
      initialised, _ = model_lib.init_sharded_params(cfg, mesh, jax.random.key(0))
      out['init_embedding'] = sharding_lib.to_host(initialised['embedding']).tolist()
      out['init_embedding_spec'] = _spec(initialised['embedding'])
    shardings = sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh)
    sampler = sampling.Sampler(cfg, mesh, shardings, rows=ROWS, max_prompt_len=MAX_PROMPT,
                               max_new_tokens=N_NEW, stop_ids=[EOS], pad_id=PAD, bos_id=BOS,
                               min_prompt_bucket=MAX_PROMPT)
    params = jax.device_put(params_for(cfg), shardings)
    ids = list(range(100, 100 + len(prompts)))
    greedy = sampler.sample(params, prompts, ids, jax.random.key(1), temperature=0.0)
    sampled = sampler.sample(params, prompts, ids, jax.random.key(1), temperature=1.0)
    out['greedy'] = greedy.tokens_RxN.tolist()
    out['sampled'] = sampled.tokens_RxN.tolist()
    out['sampled_logprobs'] = sampled.logprobs_RxN.tolist()
    out['compiles'] = sampler.compile_count
  return results


def _spec(x) -> list:
  return [list(a) if isinstance(a, tuple) else a for a in x.sharding.spec]


@pytest.fixture(scope='module')
def multi():
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=8',
             JAX_PLATFORMS='cpu')
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env['PYTHONPATH'] = os.pathsep.join([root, os.path.join(root, 'tests'),
                                       env.get('PYTHONPATH', '')])
  proc = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, cwd=root,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize('shape, name', [((8, 1, 1), 'even'), ((2, 2, 2), 'even'),
                                         ((2, 2, 2), 'uneven')])
def test_forward_logits_match_single_device(multi, shape, name):
  single = np.asarray(multi[str((1, 1, 1))][f'{name}_logits'])
  sharded = np.asarray(multi[str(shape)][f'{name}_logits'])
  np.testing.assert_allclose(sharded, single, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize('shape', MULTI_MESHES)
def test_sampler_matches_single_device(multi, shape):
  single, sharded = multi[str((1, 1, 1))], multi[str(shape)]
  np.testing.assert_array_equal(sharded['greedy'], single['greedy'])
  # Per-row keys: a completion does not depend on which device its row lands on.
  np.testing.assert_array_equal(sharded['sampled'], single['sampled'])
  np.testing.assert_allclose(sharded['sampled_logprobs'], single['sampled_logprobs'], atol=1e-5)
  assert sharded['compiles'] == 1


@pytest.mark.slow
def test_sharded_init_matches_single_device(multi):
  single, sharded = multi[str((1, 1, 1))], multi[str((2, 2, 2))]
  assert sharded['init_embedding_spec'] == ['tp', 'fsdp']
  # Same seed, same values, whatever the mesh (threefry is partitionable).
  np.testing.assert_allclose(sharded['init_embedding'], single['init_embedding'], atol=1e-7)


@pytest.mark.slow
def test_params_and_outputs_are_sharded(multi):
  specs = multi[str((2, 2, 2))]['even_specs']
  assert specs['embedding'] == ['tp', 'fsdp']
  # Stacked layers: the leading layer axis is never sharded.
  assert specs['q'] == [None, 'fsdp', 'tp', None]
  assert specs['k'] == [None, 'fsdp', 'tp', None]
  assert specs['o'] == [None, 'tp', None, 'fsdp']
  assert specs['up'] == [None, 'fsdp', 'tp']
  assert specs['norm'] in ([], [None])
  assert multi[str((2, 2, 2))]['batch_spec'] == [['data', 'fsdp'], None]
  # data=8 shards no parameter dimension: params are replicated, rows are split.
  assert all(a is None for spec in multi[str((8, 1, 1))]['even_specs'].values() for a in spec)


@pytest.mark.slow
def test_uneven_dims_fall_back_to_replication(multi):
  specs = multi[str((2, 2, 2))]['uneven_specs']
  assert specs['embedding'] == [None, 'fsdp']  # vocab 17 over tp=2
  assert specs['k'] == [None, 'fsdp', None, None]  # 1 KV head over tp=2
  assert specs['q'] == [None, 'fsdp', 'tp', None]  # 4 query heads still split


# ---------------------------------------------------------------- in-process, 1 device


@pytest.mark.parametrize('shape, axes, devices, message', [
    ((3, 1, 1), ('data', 'fsdp', 'tp'), 8, r'mesh.shape=\(3, 1, 1\) needs 3 devices'),
    ((-1, 3, 1), ('data', 'fsdp', 'tp'), 8, r'mesh.shape=\(-1, 3, 1\) does not fit 8 devices'),
    ((-1, -1, 2), ('data', 'fsdp', 'tp'), 8, r'mesh.shape=\(-1, -1, 2\): at most one -1'),
    ((8, 1), ('data', 'fsdp', 'tp'), 8, r'mesh.shape=\(8, 1\) has 2 entries'),
    ((4, 0, 2), ('data', 'fsdp', 'tp'), 8, r'mesh.shape=\(4, 0, 2\): sizes must be positive'),
])
def test_resolve_mesh_shape_errors(shape, axes, devices, message):
  from sgpo_jax.parallel import sharding as sharding_lib
  with pytest.raises(ValueError, match=message):
    sharding_lib.resolve_mesh_shape(shape, axes, devices)


def test_resolve_mesh_shape_fills_the_rest():
  from sgpo_jax.parallel import sharding as sharding_lib
  axes = ('data', 'fsdp', 'tp')
  assert sharding_lib.resolve_mesh_shape((-1, 1, 1), axes, 8) == (8, 1, 1)
  assert sharding_lib.resolve_mesh_shape((2, -1, 2), axes, 8) == (2, 2, 2)
  assert sharding_lib.resolve_mesh_shape((1, 1, 1), axes, 1) == (1, 1, 1)


@pytest.mark.parametrize('shape, devices, expected', [
    ('auto', 8, (8, 1, 1)),
    ('auto', 1, (1, 1, 1)),
    ('auto:fsdp=8', 8, (1, 8, 1)),  # the real-model configs on a v5e-8
    ('auto:fsdp=8', 32, (4, 8, 1)),  # ... and on a 32-chip pod slice
    ('auto:fsdp=-1', 16, (1, 16, 1)),
    ('auto: tp=2, fsdp=2', 8, (2, 2, 2)),
    ('1,8,1', 8, (1, 8, 1)),  # a command-line override of a string shape
    ('(-1, 2, 1)', 8, (4, 2, 1)),
])
def test_auto_mesh_shape_follows_the_device_count(shape, devices, expected):
  from sgpo_jax.parallel import sharding as sharding_lib
  assert sharding_lib.resolve_mesh_shape(shape, ('data', 'fsdp', 'tp'), devices) == expected


@pytest.mark.parametrize('shape, message', [
    ('auto:fsdb=8', r"mesh.shape='auto:fsdb=8': 'fsdb=8' is not AXIS=N with AXIS one of "
                    r"mesh.axes=\('data', 'fsdp', 'tp'\)"),
    ('auto:fsdp', r"'fsdp' is not AXIS=N"),
    ('auto:fsdp=2,fsdp=4', r"'fsdp=4' is not AXIS=N .*\(each once\)"),
    ('auto:fsdp=x', r"mesh.shape='auto:fsdp=x': fsdp='x' is not an int"),
    ('automatic', r"mesh.shape='automatic' is neither sizes \(1,8,1\) nor auto"),
    ('auto:fsdp=3', r'mesh.shape=\(-1, 3, 1\) does not fit 8 devices'),
])
def test_auto_mesh_shape_errors(shape, message):
  from sgpo_jax.parallel import sharding as sharding_lib
  with pytest.raises(ValueError, match=message):
    sharding_lib.resolve_mesh_shape(shape, ('data', 'fsdp', 'tp'), 8)


def test_config_check_rejects_a_bad_auto_shape_before_any_device():
  from sgpo_jax.config import check as config_check
  from sgpo_jax.config import defaults
  c = defaults.get_config()
  with c.ignore_type():
    c.mesh.shape = 'auto:dp=2'
  with pytest.raises(ValueError, match=r"mesh.shape='auto:dp=2'"):
    config_check.check_config(c)


def test_make_mesh_on_one_device():
  import jax
  from conftest import mesh_config

  from sgpo_jax.parallel import sharding as sharding_lib
  mesh = sharding_lib.make_mesh(mesh_config((-1, 1, 1)), jax.devices()[:1])
  assert dict(mesh.shape) == {'data': 1, 'fsdp': 1, 'tp': 1}
  with pytest.raises(ValueError, match=r'mesh.shape=\(2, 1, 1\)'):
    sharding_lib.make_mesh(mesh_config((2, 1, 1)), jax.devices()[:1])


if __name__ == '__main__':
  print(json.dumps(_multi_device_results()))
