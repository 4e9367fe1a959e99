"""Run outputs through etils.epath: local folders and gs:// workdirs.

The gs:// branch runs against fsspec's in-memory filesystem registered as `gs` (what
gcsfs provides on a TPU VM), and TensorBoard's gs writer is swapped for one writing
through epath; a missing backend is simulated by making its import fail.
"""

import json
import os
import sys

import numpy as np
import pytest
from etils import epath

from sgpo_jax import train
from sgpo_jax.config import defaults
from sgpo_jax.data import tokenizer as tokenizer_lib
from sgpo_jax.outputs import metrics as metrics_lib
from sgpo_jax.outputs import paths
from sgpo_jax.outputs import report as report_lib


def test_scheme_join_absolute():
  assert paths.scheme('gs://b/x') == 'gs' and paths.scheme('/tmp/x') == ''
  assert paths.join('gs://b/run', 'metrics.jsonl') == 'gs://b/run/metrics.jsonl'
  assert paths.absolute('gs://b/run') == 'gs://b/run'  # os.path.abspath would give .../gs:/b


def test_missing_gcs_backend_is_one_line_at_startup(tmp_path, monkeypatch):
  for module in ('gcsfs', 'tensorflow'):  # an import of either now fails
    monkeypatch.setitem(sys.modules, module, None)
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match=r'needs a gs:// backend.*pip install -e \.\[gcs\]') as err:
    paths.check_workdir('gs://bucket/run')
  assert '\n' not in str(err.value)
  paths.check_workdir(str(tmp_path / 'local'))  # local: nothing needed
  with pytest.raises(ValueError, match='pip install'):
    train.setup(defaults.get_config(), 'gs://bucket/run', show_progress=False)
  assert not (tmp_path / 'gs:').exists()  # no local folder named after the scheme


def test_remote_workdir_with_a_local_warm_start_needs_a_cache_dir(monkeypatch):
  monkeypatch.setattr(paths, '_module_available', lambda name: True)
  config = defaults.get_config()  # arithmetic: warm start built under the workdir
  with pytest.raises(ValueError, match='warm_start.cache_dir'):
    paths.check_workdir('gs://bucket/run', config)
  config.warm_start.cache_dir = '/tmp/ws'
  paths.check_workdir('gs://bucket/run', config)


@pytest.mark.parametrize('remote', [False, True])
def test_metrics_json_and_resume_truncation(remote, tmp_path, fake_gcs):
  workdir = fake_gcs if remote else str(tmp_path / 'run')
  paths.makedirs(workdir)
  writer = metrics_lib.MetricsWriter(workdir)
  for step in range(1, 5):
    writer.write({'step': step, 'loss': 1.0 / step, 'x': np.float32(2.0)})
  writer.close()
  path = paths.join(workdir, 'metrics.jsonl')
  assert [r['step'] for r in metrics_lib.read_jsonl(path)] == [1, 2, 3, 4]
  # A resume at step 2 cuts the later rows, then appends after them.
  writer = metrics_lib.MetricsWriter(workdir, resume_step=2)
  writer.write({'step': 3, 'loss': 0.5})
  writer.close()
  assert [(r['step'], r['loss']) for r in metrics_lib.read_jsonl(path)] == [
      (1, 1.0), (2, 0.5), (3, 0.5)]
  metrics_lib.write_json(paths.join(workdir, 'summary.json'), {'a': np.int64(3)})
  assert json.loads(epath.Path(paths.join(workdir, 'summary.json')).read_text()) == {'a': 3}
  assert not paths.exists(paths.join(workdir, 'summary.json.tmp'))
  events = list(epath.Path(paths.join(workdir, 'tensorboard')).iterdir())
  assert events and all(e.read_bytes() for e in events)


@pytest.mark.parametrize('remote', [False, True])
def test_report_plots_and_tokenizer(remote, tmp_path, fake_gcs):
  workdir = fake_gcs if remote else str(tmp_path / 'run')
  paths.makedirs(workdir)
  rows = [{'step': s, 'reward_mean': 0.1 * s, 'flops_total': 1e9 * s,
           'eval_accuracy': 0.2, 'eval_accuracy_se': 0.01} for s in range(1, 4)]
  summary = {'method': 'grpo', 'seed': 0, 'steps': 3, 'wall_seconds': 1.0,
             'eval_accuracy_initial': 0.1, 'eval_accuracy_final': 0.2,
             'flops': {'total': 3e9, 'useful_total': 2e9, 'eval': 1e8, 'rollout': 1e9,
                       'train': 2e9},
             'padding_fraction': 0.0, 'compiles': {'train_step': 1, 'sampler': 1}}
  report_lib.write_report(workdir, summary, rows, None)
  report = epath.Path(paths.join(workdir, 'report.md')).read_text()
  assert report.startswith('# Run report: grpo (seed 0)')
  png = epath.Path(paths.join(workdir, 'plots', 'eval_accuracy_vs_flops.png')).read_bytes()
  assert png[:8] == b'\x89PNG\r\n\x1a\n'
  tok = tokenizer_lib.CharTokenizer()
  paths.save_tokenizer(tok, paths.join(workdir, 'tokenizer'))
  with paths.local_copy(paths.join(workdir, 'tokenizer')) as local:
    assert not paths.is_remote(local) and (local == paths.join(workdir, 'tokenizer')) != remote
    loaded = tokenizer_lib.load_saved_tokenizer(local)
  assert loaded.encode('12+3=') == tok.encode('12+3=')
  assert not os.path.exists(local) or not remote  # the download is removed on exit



def test_local_copy_brings_a_remote_tree_down_and_removes_it(tmp_path, fake_gcs):
  src = tmp_path / 'src'
  (src / 'sub').mkdir(parents=True)
  (src / 'a.json').write_text('{"a": 1}')
  (src / 'sub' / 'b.bin').write_bytes(b'\x00\x01')
  remote = paths.join(fake_gcs, 'tokenizer')
  paths.copy_tree(str(src), remote)
  with paths.local_copy(remote) as local:
    files = sorted(os.path.relpath(os.path.join(root, f), local)
                   for root, _, names in os.walk(local) for f in names)
    assert files == ['a.json', os.path.join('sub', 'b.bin')]
    assert open(os.path.join(local, 'sub', 'b.bin'), 'rb').read() == b'\x00\x01'
  assert not os.path.exists(local)
  with paths.local_copy(paths.join(fake_gcs, 'absent')) as local:
    assert os.listdir(local) == []  # a run without a saved tokenizer: nothing to copy
  with paths.local_copy(str(src)) as local:
    assert local == str(src)  # a local folder is used in place
