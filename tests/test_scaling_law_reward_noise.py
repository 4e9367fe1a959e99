"""studies/scaling_law/reward_noise.py: the noise floor of a final training-reward value."""

import dataclasses
import importlib
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from sgpo_jax.scaling_law.runs import RunRecord

REPO = Path(__file__).resolve().parent.parent


def _script(name='scaling_law_reward_noise'):
  sys.path.insert(0, os.path.join(REPO, 'experiments'))
  return importlib.import_module(name)


def _reward(name, values, metric='reward_mean'):
  values = np.asarray(values, float)
  steps = np.arange(1, values.size + 1, dtype=float)
  return RunRecord(run_dir=Path('.'), name=name, model='m', params_nonembed=None,
                   total_steps=values.size, metric=metric, steps=steps, values=values,
                   flops_total=steps * 10.0)


def test_floor_by_hand_on_an_alternating_reward():
  noise = _script()
  # 20 steps alternating 0.45 / 0.55: after 60% (steps 13-20) every difference is +-0.1, so
  # sigma^2 = 0.01 / 2; the last 5% of 20 steps (from step 19) holds 2 readings.
  row = noise.run_noise(_reward('a', [0.45, 0.55] * 10))
  assert row['sigma'] == pytest.approx(math.sqrt(0.005))
  assert row['n_final'] == 2
  assert row['sd_final'] == pytest.approx(math.sqrt(0.005) / math.sqrt(2))
  assert row['floor'] == pytest.approx(math.sqrt(2 / math.pi) * 0.05)
  assert row['rho'] < -0.9  # alternating: anti-correlated, not the independence assumed
  # A steady rise has no noise around its level: sigma is only the step (0.01 / sqrt(2)).
  rise = noise.run_noise(_reward('b', np.linspace(0.3, 0.49, 20)))
  assert rise['sigma'] == pytest.approx(0.01 / math.sqrt(2))
  assert noise.run_noise(_reward('c', [0.5, 0.5, 0.5, 0.5, 0.5])) is None  # 2 late readings


def test_main_counts_a_run_once_and_reports_per_metric(tmp_path, capsys):
  noise = _script()
  calibrate = _script('scaling_law_calibrate')
  rng = np.random.default_rng(0)
  runs = []
  for i, metric in enumerate(['reward_mean'] * 3 + ['reward_over_profile']):
    reward = _reward(f'r/a_seed{i}', 0.5 + rng.normal(0, 0.05, 100), metric)
    runs.append({'name': reward.name, 'dir': Path('.'), 'regime': 'r', 'group': 'r/a',
                 'seed_group': f'r/seed{i}', 'reward': reward,
                 'eval': dataclasses.replace(reward, metric='eval_accuracy')})
  calibrate.dump_trajectories(runs, tmp_path / 'all.json')
  calibrate.dump_trajectories(runs[:1], tmp_path / 'again.json')
  out = tmp_path / 'noise'
  assert noise.main([str(tmp_path / 'all.json'), str(tmp_path / 'again.json'),
                     '--out', str(out)]) == 0
  result = json.loads(out.with_suffix('.json').read_text())
  assert result['summary']['reward_mean']['runs'] == 3  # seed 0's run counted once
  assert result['summary']['reward_over_profile']['runs'] == 1
  expected = np.mean([r['floor'] for r in result['per_run'] if r['metric'] == 'reward_mean'])
  assert result['summary']['reward_mean']['floor_mean'] == pytest.approx(expected)
  # Normal noise of sd 0.05, 5 readings in the final window: floor near 0.8 * 0.05 / sqrt(5).
  assert expected == pytest.approx(math.sqrt(2 / math.pi) * 0.05 / math.sqrt(5), rel=0.3)
  assert '| reward_mean | 3 |' in out.with_suffix('.md').read_text()
  short = [{**runs[0], 'reward': _reward('r/short', [0.5, 0.6, 0.5])}]
  calibrate.dump_trajectories(short, tmp_path / 'short.json')
  with pytest.raises(SystemExit):
    noise.main([str(tmp_path / 'short.json'), '--out', str(tmp_path / 'none')])
  assert 'has 4 or more reward readings' in capsys.readouterr().err
