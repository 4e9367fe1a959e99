"""Smoke tests of the study scripts (studies/): each runs on a tiny synthetic input and writes
its summary. What a study measured is in its folder's README, not asserted here."""

import dataclasses
import json
from pathlib import Path

import numpy as np

from sgpo_jax.scaling_law.calibration_set import dump_trajectories
from sgpo_jax.scaling_law.runs import RunRecord, write_synthetic_run


def _reward(name, values, metric='reward_mean'):
  values = np.asarray(values, float)
  steps = np.arange(1, values.size + 1, dtype=float)
  return RunRecord(run_dir=Path('.'), name=name, model='m', params_nonembed=None,
                   total_steps=values.size, metric=metric, steps=steps, values=values,
                   flops_total=steps * 10.0)


def test_reward_noise_study_writes_its_summary(tmp_path):
  from studies.scaling_law import reward_noise
  rng = np.random.default_rng(0)
  runs = []
  for i in range(3):
    reward = _reward(f'r/a_seed{i}', 0.5 + rng.normal(0, 0.05, 100))
    runs.append({'name': reward.name, 'dir': Path('.'), 'regime': 'r', 'group': 'r/a',
                 'seed_group': f'r/seed{i}', 'reward': reward,
                 'eval': dataclasses.replace(reward, metric='eval_accuracy')})
  dump_trajectories(runs, tmp_path / 'all.json')
  out = tmp_path / 'noise'
  assert reward_noise.main([str(tmp_path / 'all.json'), '--out', str(out)]) == 0
  result = json.loads(out.with_suffix('.json').read_text())
  assert result['summary']['reward_mean']['runs'] == 3
  assert '| reward_mean | 3 |' in out.with_suffix('.md').read_text()


def test_calibration_study_writes_its_report_from_run_folders(tmp_path):
  from studies.scaling_law import calibrate
  dirs = []
  for seed in (0, 1):
    for k, arm in enumerate(('grpo', 'dapo')):
      run = write_synthetic_run(tmp_path / 'default' / f'{arm}_seed{seed}', 'exponential',
                                {'r0': 0.5, 'r_inf': 0.6 + 0.02 * k + 0.01 * seed,
                                 'tau': 0.2}, 60, eval_every=3, seed=seed)
      (run / 'config.json').write_text(json.dumps({'method': arm, 'regime': 'default'}))
      dirs.append(str(run))
  out = tmp_path / 'out'
  assert calibrate.main(dirs + ['--out', str(out)]) == 0
  result = json.loads((out / 'scaling_law_calibrated.json').read_text())
  assert result['n_runs'] == 4 and result['regime_counts'] == {'default': 4}
  assert (out / 'scaling_law_calibrated.md').read_text().startswith('#')
