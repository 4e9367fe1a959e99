"""Smoke tests of the study scripts (studies/): each runs on a tiny synthetic input and writes
its summary. What a study measured is in its folder's README, not asserted here; the README's
headline block is, both from the committed compare.json and rebuilt from the archived runs."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


def _arm(final, std, vs_dapo, ci):
  return {'seeds': [0, 1], 'final_accuracy': {'mean': final, 'std': std},
          'at_dapo_final': {'ratio_vs_dapo': {'point': vs_dapo, 'ci95': ci}},
          'ratio_vs_grpo': {'point': 1.5, 'ci95': [0.0, 3.0]}}


def test_headline_readme_block_states_each_pre_registered_verdict():
  from studies.allocator_comparison.headline import readme_table
  block = {'seeds_planned': [0, 1, 2], 'arms': {
      'grpo': _arm(0.70, 0.01, 0.0, [0.0, 0.0]), 'dapo': _arm(0.80, 0.01, 1.0, [1.0, 1.0]),
      'dapo_g4': _arm(0.805, 0.01, 1.4, [0.9, 2.0]),
      'sgpo': _arm(0.72, 0.02, 0.0, [0.0, 0.0]),
      'sgpo_bayes_g24': _arm(0.81, 0.005, 1.8, [1.2, 2.5])},
      'head_to_head': {'arm': 'sgpo_bayes_g24', 'control': 'dapo_g4', 'verdict': 'ahead',
                       'final_accuracy_diff': {'point': 0.005, 'ci95': [0.001, 0.009]},
                       'flops_ratio_at_dapo_final': {'point': 1.3, 'ci95': [0.8, None]}}}
  text = readme_table.render({'regimes': {'paper_like': block}})
  assert '| arm | `paper_like` (PARTIAL: 2 of 3 seeds) |' in text
  assert '| `sgpo_bayes`, G in {2, 4} (default) | **81.0** ± 0.5; 1.80x [1.20, 2.50] |' in text
  assert '| GRPO, G=8 | 70.0 ± 1.0; never |' in text
  assert ('`sgpo_bayes` saves compute vs DAPO (1.80x [1.20, 2.50]; at GRPO\'s final accuracy '
          '1.50x [0.00, 3.00] vs GRPO); vs DAPO at G=4: ahead '
          "(final accuracy +0.50 points [+0.10, +0.90], FLOPs to DAPO's final 1.30x "
          "[0.80, inf]); the paper's sGPO does not reproduce the paper's saving vs GRPO "
          "(1.50x [0.00, 3.00] at GRPO's final accuracy).") in text
  block['arms']['sgpo_bayes_g24']['at_dapo_final']['ratio_vs_dapo']['ci95'] = [0.9, 2.5]
  block['arms']['sgpo']['ratio_vs_grpo'] = {'point': 3.0, 'ci95': [2.0, 4.0]}
  text = readme_table.render({'regimes': {'paper_like': block}})
  assert '`sgpo_bayes` does not save compute vs DAPO' in text
  assert "the paper's sGPO reproduces the paper's saving" in text
  block.update(reference_learned=False, initial_accuracy=0.71, target_accuracy=0.70)
  text = readme_table.render({'regimes': {'paper_like': block}})
  assert "no ratio at GRPO's final accuracy" in text
  assert ("GRPO ended below its initial policy (71.0% -> 70.0%), so every ratio at GRPO's "
          'final accuracy is void here.') in text


def test_readme_headline_is_the_block_rendered_from_the_committed_compare_json():
  from studies.allocator_comparison.headline import readme_table
  root = Path(__file__).resolve().parents[2]
  results = json.loads((root / 'studies/allocator_comparison/headline/compare.json').read_text())
  block = readme_table.render(results)
  assert 'PARTIAL' not in block  # every pre-registered seed has run
  assert block in (root / 'README.md').read_text()


@pytest.mark.slow
def test_readme_headline_regenerates_from_the_archived_runs(tmp_path):
  """The 140 archived headline runs (archive.tar.xz) give the README's block again."""
  from studies.allocator_comparison.headline import archive_runs, readme_table
  root = Path(__file__).resolve().parents[2]
  assert archive_runs.restore(str(tmp_path / 'runs')) == 140
  subprocess.run(
      [sys.executable, '-m', 'sgpo_jax.compare', 'report', '--runs-dir', str(tmp_path / 'runs'),
       '--regimes', 'paper_like,default,small_pool',
       '--arms', 'grpo,dapo,dapo_g4,greso,knapsack,sgpo,sgpo_bayes_g24', '--seeds', '100-104',
       '--regime-seeds', 'paper_like=100-109', '--results-dir', str(tmp_path / 'out')],
      cwd=root, check=True, capture_output=True, timeout=1200)
  results = json.loads((tmp_path / 'out' / 'compare.json').read_text())
  assert readme_table.render(results) in (root / 'README.md').read_text()


def test_readme_quotes_the_real_job_result_file():
  """The README's real-model figures are studies/real_model/result.json's (collect.py writes
  it from the run), and that file describes the shipped config's run: 512 held-out
  problems, 40 steps, the real model's parameter count."""
  root = Path(__file__).resolve().parents[2]
  result = json.loads((root / 'studies' / 'real_model' / 'result.json').read_text())
  readme = (root / 'README.md').read_text()
  assert result['result_line'] in readme
  assert f"+{result['gain_points']:.1f} points (SE {result['gain_se_points']:.1f})" in readme
  assert result['num_eval'] >= 512 and result['rl_steps'] == 40
  assert result['params_total'] == 134_515_008
  from sgpo_jax.configs import smollm2_135m_arith
  config = smollm2_135m_arith.get_config()
  assert (config.train.num_steps, config.data.num_eval) == (40, result['num_eval'])
  assert result['command'] in readme


def test_results_archive_round_trips_with_fixed_bytes(tmp_path):
  """`add` then `unpack` gives the files back at their paths; the same files give the same
  archive bytes; a file that differs from its archived copy is left unless forced."""
  from studies import results_archive
  root = tmp_path / 'repo'
  (root / 'study' / 'a').mkdir(parents=True)
  (root / 'study' / 'a' / 'results.md').write_text('# a\n')
  (root / 'study' / 'b.json').write_text('{"x": 1}\n')
  paths = [str(root / 'study' / 'b.json'), str(root / 'study' / 'a' / 'results.md')]
  one, two = tmp_path / 'one.tar.xz', tmp_path / 'two.tar.xz'
  assert results_archive.add(str(one), paths, root=str(root)) == 2
  results_archive.add(str(two), paths[::-1], root=str(root))
  assert one.read_bytes() == two.read_bytes()
  assert results_archive.read_archive(str(one)) == {'study/a/results.md': b'# a\n',
                                                     'study/b.json': b'{"x": 1}\n'}
  out = tmp_path / 'out'
  (out / 'study').mkdir(parents=True)
  (out / 'study' / 'b.json').write_text('changed\n')
  assert results_archive.unpack(str(one), root=str(out)) == ['study/b.json']
  assert (out / 'study' / 'a' / 'results.md').read_text() == '# a\n'
  assert (out / 'study' / 'b.json').read_text() == 'changed\n'
  assert results_archive.unpack(str(one), root=str(out), force=True) == []
  assert (out / 'study' / 'b.json').read_text() == '{"x": 1}\n'
  with pytest.raises(ValueError, match='outside'):
    results_archive.add(str(one), [str(tmp_path / 'one.tar.xz')], root=str(root))


def test_study_archives_hold_the_reports_the_tree_no_longer_keeps():
  """Each study's results.tar.xz holds paths from the repository root under the study's
  folder; a report the README quotes stays in the tree, a machine dump is archived."""
  from studies import results_archive
  root = Path(__file__).resolve().parents[2]
  for study in ('allocator_comparison', 'scaling_law'):
    files = results_archive.read_archive(str(root / 'studies' / study / 'results.tar.xz'))
    assert files and all(name.startswith(f'studies/{study}/') for name in files)
  archived = results_archive.read_archive(str(root / 'studies/scaling_law/results.tar.xz'))
  assert 'studies/scaling_law/results/scaling_law_calibrated_dense.md' in archived
  assert 'studies/scaling_law/results/scaling_law_pooled/results.md' not in archived
