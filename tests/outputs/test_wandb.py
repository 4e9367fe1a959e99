"""logging.wandb_project: W&B receives the scalars TensorBoard receives, at the same steps
(the real wandb in offline mode, with a spy on what the writer passes to `run.log`)."""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np
import pytest

from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config
from sgpo_jax.outputs import metrics as metrics_lib

wandb = pytest.importorskip('wandb')


@pytest.fixture
def wandb_spy(tmp_path, monkeypatch):
  """Offline wandb under tmp_path/wandb_files; returns (init kwargs, logged (step, values))."""
  monkeypatch.setenv('WANDB_MODE', 'offline')
  monkeypatch.setenv('WANDB_DIR', str(tmp_path / 'wandb_files'))
  monkeypatch.setenv('WANDB_SILENT', 'true')
  os.makedirs(tmp_path / 'wandb_files')
  inits, logged = [], []
  real_init = wandb.init

  def init(**kwargs):
    run = real_init(**kwargs)
    inits.append(kwargs)
    real_log = run.log

    def log(values, step=None):
      logged.append((step, dict(values)))
      return real_log(values, step=step)
    run.log = log
    return run

  monkeypatch.setattr(wandb, 'init', init)
  return inits, logged


def tensorboard_spy(monkeypatch) -> list[tuple[int, str, float]]:
  from tensorboardX import SummaryWriter
  scalars = []
  real = SummaryWriter.add_scalar

  def add_scalar(self, tag, value, step, *args, **kwargs):
    scalars.append((step, tag, value))
    return real(self, tag, value, step, *args, **kwargs)
  monkeypatch.setattr(SummaryWriter, 'add_scalar', add_scalar)
  return scalars


def by_step(logged) -> list[tuple[int, str, float]]:
  return sorted((step, k, v) for step, values in logged for k, v in values.items())


def test_writer_logs_the_tensorboard_scalars_and_resumes_the_run(tmp_path, monkeypatch,
                                                                 wandb_spy):
  inits, logged = wandb_spy
  tb = tensorboard_spy(monkeypatch)
  workdir = str(tmp_path / 'run')
  os.makedirs(workdir)
  writer = metrics_lib.MetricsWriter(workdir, wandb_project='proj', wandb_config={'seed': 3})
  rows = [{'step': 0, 'eval_accuracy': 0.5, 'method': 'grpo'},
          {'step': 1, 'loss': np.float32(0.25), 'stopped': False, 'nan': float('nan')},
          {'step': 2, 'loss': 0.125, 'flops_total': 7}]
  for row in rows:
    writer.write(row)
  writer.close()
  assert by_step(logged) == sorted(tb) == [
      (0, 'eval_accuracy', 0.5), (1, 'loss', 0.25), (2, 'flops_total', 7), (2, 'loss', 0.125)]
  assert [step for step, _ in logged] == [0, 1, 2]
  assert inits[0]['project'] == 'proj' and inits[0]['name'] == 'run'
  assert inits[0]['config'] == {'seed': 3}
  run_id = inits[0]['id']
  files = glob.glob(str(tmp_path / 'wandb_files' / 'wandb' / f'offline-run-*-{run_id}' / '*.wandb'))
  assert files and os.path.getsize(files[0]) > 0

  resumed = metrics_lib.MetricsWriter(workdir, resume_step=1, wandb_project='proj')
  resumed.write({'step': 2, 'loss': 0.0625})
  resumed.close()
  assert inits[1]['id'] == run_id  # the same W&B run continues
  fresh = metrics_lib.MetricsWriter(workdir, wandb_project='proj')
  fresh.close()
  assert inits[2]['id'] != run_id  # a fresh run (no resume) is a new W&B run


def test_without_wandb_the_config_check_says_how_to_install(monkeypatch):
  config = default_config.get_config()
  config.logging.wandb_project = 'x'
  monkeypatch.setitem(sys.modules, 'wandb', None)  # `import wandb` raises ImportError
  with pytest.raises(ValueError) as info:
    config_check.check_ranges(config)
  assert str(info.value) == "logging.wandb_project='x' needs wandb: pip install wandb"
  config.logging.wandb_project = ''
  config_check.check_ranges(config)  # off: wandb is not needed


@pytest.mark.slow
def test_tiny_run_logs_every_metrics_row_to_wandb(tmp_path, monkeypatch, wandb_spy):
  from sgpo_jax import train
  inits, logged = wandb_spy
  tb = tensorboard_spy(monkeypatch)
  config = default_config.get_config('method=grpo,runlocal=1')
  config.grpo.group_size, config.train.rows_per_batch, config.train.num_steps = 4, 8, 2
  config.eval.every_steps = config.checkpoint.every_steps = 2
  config.data.num_train, config.data.num_eval, config.warm_start.steps = 16, 8, 0
  config.model.n_layers, config.model.d_model, config.model.d_ff = 2, 32, 64
  config.model.head_dim = 8
  config.logging.wandb_project = 'tiny'
  workdir = str(tmp_path / 'run')
  train.run(config, workdir, show_progress=False)
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  expected = sorted((r['step'], k, v) for r in rows for k, v in metrics_lib.scalars(r).items())
  assert [r['step'] for r in rows] == [0, 1, 2]
  assert by_step(logged) == sorted(tb) == expected
  assert 'reward_mean' in logged[1][1] and 'eval_accuracy' in logged[-1][1]
  assert len(inits) == 1 and inits[0]['config']['logging']['wandb_project'] == 'tiny'
