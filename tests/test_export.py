"""`sgpo_jax.export`: the checkpoint it reads (the same fallback as a resume) and the
special-token ids the exported folder keeps (a tiny Qwen2 fixture with a chat template)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil

import jax
import numpy as np
import pytest
from conftest import mesh_config

from sgpo_jax import export
from sgpo_jax.model import hf
from sgpo_jax.outputs import checkpoint as checkpoint_lib
from sgpo_jax.parallel import sharding as sharding_lib

pytest.importorskip('torch')


def fake_run(workdir: str, hf_dir: str, steps: dict[int, object]) -> None:
  """A workdir as a run leaves it: config.json (model block), tokenizer/, checkpoints."""
  cfg = hf.model_config_from_hf(hf_dir, param_dtype='float32', dtype='float32')
  os.makedirs(workdir)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    json.dump({'model': {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in dataclasses.asdict(cfg).items()}}, f)
  tok_dir = os.path.join(workdir, 'tokenizer')
  os.makedirs(tok_dir)
  for file in hf.TOKENIZER_FILES:
    if os.path.isfile(os.path.join(hf_dir, file)) and file != 'generation_config.json':
      shutil.copy(os.path.join(hf_dir, file), tok_dir)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=len(steps))
  for step, params in steps.items():
    ckpt.save(step, {'params': params}, {'step': step})
  ckpt.close()


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  from sgpo_jax.model import hf_fixture
  hf_dir = hf_fixture.build_tiny_qwen2(str(tmp_path_factory.mktemp('qwen')),
                                       ['what is 1 + 2 ?', 'the answer is 3'] * 8)
  cfg = hf.model_config_from_hf(hf_dir, param_dtype='float32', dtype='float32')
  mesh = sharding_lib.make_mesh(mesh_config(), jax.devices()[:1])
  return hf_dir, cfg, hf.load_hf_params(hf_dir, cfg, mesh)


def _host(params):
  return jax.tree.map(np.asarray, params)


def test_export_falls_back_past_a_corrupt_newest_checkpoint(tiny, tmp_path):
  hf_dir, cfg, params = tiny
  older = _host(params)
  newer = jax.tree.map(lambda x: x + 1.0, older)
  workdir = str(tmp_path / 'run')
  fake_run(workdir, hf_dir, {1: older, 2: newer})
  # Flip bytes in every array file of step 2: it restores as other numbers (or not at all).
  for path in glob.glob(os.path.join(workdir, 'checkpoints', '2', 'state', '**', '*'),
                        recursive=True):
    if os.path.isfile(path) and os.path.getsize(path) > 1024 and 'd/' in path:
      with open(path, 'r+b') as f:
        f.seek(512)
        f.write(b'\x7f' * 64)
  loaded, _, step = export.load_policy(workdir)
  assert step == 1
  np.testing.assert_array_equal(loaded['embedding'], older['embedding'])
  assert os.path.isdir(os.path.join(workdir, 'checkpoints', '2'))  # skipped, not moved
  # An explicit --step is checked too.
  with pytest.raises(ValueError, match='checksum mismatch'):
    export.load_policy(workdir, step=2)


def test_export_keeps_special_token_ids_and_a_generation_config(tiny, tmp_path):
  hf_dir, cfg, params = tiny
  workdir, out = str(tmp_path / 'run'), str(tmp_path / 'hf')
  fake_run(workdir, hf_dir, {3: _host(params)})
  export.export_run(workdir, out)
  from transformers import AutoTokenizer, GenerationConfig
  tok = AutoTokenizer.from_pretrained(hf_dir)
  eos = tok.convert_tokens_to_ids('<|im_end|>')
  with open(os.path.join(out, 'config.json')) as f:
    config = json.load(f)
  assert config['eos_token_id'] == eos and config['pad_token_id'] == tok.pad_token_id
  generation = GenerationConfig.from_pretrained(out)
  assert generation.eos_token_id == eos and generation.pad_token_id == tok.pad_token_id
  assert AutoTokenizer.from_pretrained(out).chat_template


def test_export_restores_a_checkpoint_with_optimizer_state(tmp_path):
  """A run's state holds optax namedtuples: keystr names their fields `.mu`, a restore without
  a target (export) hands them back as dict keys `['mu']`; the checksum still matches."""
  import optax
  params = {'w': np.arange(6, dtype=np.float32).reshape(2, 3)}
  state = {'params': params, 'opt_state': optax.adamw(1e-3).init(params)}
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'checkpoints'))
  ckpt.save(4, state, {'step': 4})
  ckpt.wait()
  restored, meta = ckpt.restore(4, None)
  ckpt.verify(restored, meta)
  restored['params']['w'] = restored['params']['w'] + 1
  with pytest.raises(ValueError, match='checksum mismatch'):
    ckpt.verify(restored, meta)
  ckpt.close()


def test_checksum_paths_compare_in_dict_form_through_attribute_chains():
  """A QLoRA base's quantized leaf is `.array.qvalue` under keystr when saved and
  `['array']['qvalue']` when restored without a target: both links must convert."""
  saved = {"['params']['k']['kernel'].array.qvalue": 7, "['opt'][0].count": 1}
  restored = {"['params']['k']['kernel']['array']['qvalue']": 7, "['opt'][0]['count']": 1}
  assert checkpoint_lib._comparable_paths(saved) == checkpoint_lib._comparable_paths(restored)
