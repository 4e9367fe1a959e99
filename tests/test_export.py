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


def fake_run(workdir: str, hf_dir: str, steps: dict[int, object], opt_state: bool = False) -> None:
  """A workdir as a run leaves it: config.json (model block), tokenizer/, checkpoints (with an
  AdamW state beside the params when `opt_state`)."""
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
    state = {'params': params}
    if opt_state:
      import optax
      state['opt_state'] = optax.adamw(1e-3).init(params)
    ckpt.save(step, state, {'step': step})
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


def test_export_restores_a_run_whose_checkpoint_holds_optimizer_state(tiny, tmp_path):
  """A run saves optax namedtuples beside the params; export restores without a target, so
  they come back as dicts, and the checksum must still match (outputs/test_checkpoint.py)."""
  hf_dir, cfg, params = tiny
  workdir = str(tmp_path / 'run')
  fake_run(workdir, hf_dir, {5: _host(params)}, opt_state=True)
  loaded, _, step = export.load_policy(workdir)
  assert step == 5
  np.testing.assert_array_equal(loaded['embedding'], _host(params)['embedding'])


@pytest.mark.parametrize('flags, fragments', [
    (['--dtype', 'float8'], ["--dtype='float8': use one of ['float32', 'bfloat16', 'float16']"]),
    (['--peft_out', 'adapters'], ["--peft_out='adapters': the run in", '(model.lora_rank=0)']),
    (['--step', '9'], ['--step=9: ', 'has checkpoints at steps [2]']),
])
def test_cli_refuses_a_bad_request_in_one_line_before_restoring(tiny, tmp_path, capsys,
                                                                monkeypatch, flags, fragments):
  hf_dir, _, params = tiny
  workdir = str(tmp_path / 'run')
  fake_run(workdir, hf_dir, {2: _host(params)})
  monkeypatch.setattr(export, 'load_policy', lambda *a: pytest.fail('restored first'))
  code = export.main(['--workdir', workdir, '--out', str(tmp_path / 'hf'), *flags])
  err = capsys.readouterr().err
  assert code == 2 and err.startswith('error: ') and err.count('\n') == 1, err
  assert all(f in err for f in fragments), err


def test_cli_names_a_folder_that_is_not_a_run(tmp_path, capsys):
  assert export.main(['--workdir', str(tmp_path), '--out', str(tmp_path / 'hf')]) == 2
  err = capsys.readouterr().err
  assert err.startswith('error: ') and 'has no config.json' in err and err.count('\n') == 1


def test_export_of_a_gs_workdir_keeps_its_tokenizer(tiny, tmp_path, fake_gcs, monkeypatch):
  """A run on gs:// (config.json and tokenizer/ in the object store): the exported folder has
  the tokenizer and the chat's special-token ids, read through a local download."""
  from sgpo_jax.outputs import paths
  hf_dir, cfg, params = tiny
  local_run, out = str(tmp_path / 'run'), str(tmp_path / 'hf')
  fake_run(local_run, hf_dir, {})
  paths.copy_tree(local_run, fake_gcs)  # no checkpoints/ to copy: orbax's arrays skip fsspec
  monkeypatch.setattr(export, 'load_policy', lambda workdir, step, checked: (
      _host(params), checked, 3) if workdir == fake_gcs else pytest.fail(workdir))
  files = export.export_run(fake_gcs, out)
  assert os.path.join(out, 'tokenizer_config.json') in files
  from transformers import AutoTokenizer
  eos = AutoTokenizer.from_pretrained(hf_dir).convert_tokens_to_ids('<|im_end|>')
  with open(os.path.join(out, 'generation_config.json')) as f:
    assert json.load(f)['eos_token_id'] == eos
  assert AutoTokenizer.from_pretrained(out).chat_template
