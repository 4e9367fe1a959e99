"""studies/scaling_law/final_window.py: the final window it sets (and puts back), its
scores against the calibration scripts' own scoring of the same records, the summary by hand,
and the committed report against its JSON."""

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from sgpo_jax.scaling_law import runs as runs_module
from sgpo_jax.scaling_law.calibration import CalibrationSet
from sgpo_jax.scaling_law.runs import RunRecord

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / 'experiments' / 'results' / 'scaling_law_final_window'


def _script(name='scaling_law_final_window'):
  sys.path.insert(0, os.path.join(REPO, 'experiments'))
  return importlib.import_module(name)


def test_final_window_sets_the_window_and_puts_it_back():
  window = _script()
  steps = np.arange(1, 21, dtype=float)
  record = RunRecord(run_dir=Path('.'), name='r', model='m', params_nonembed=None,
                     total_steps=20, metric='reward_mean', steps=steps, values=steps / 20,
                     flops_total=steps)
  before = runs_module.ACTUAL_FINAL_WINDOW
  # 5% of 20 steps: from step 19 (0.95, 1.0); 20%: from step 16 (0.80 ... 1.0).
  assert record.actual_final == pytest.approx(0.975)
  with window.final_window(0.2):
    assert record.actual_final == pytest.approx(0.9)
    assert record.final_readings.size == 5
  assert runs_module.ACTUAL_FINAL_WINDOW == before and record.actual_final == pytest.approx(0.975)
  with pytest.raises(RuntimeError), window.final_window(0.5):
    raise RuntimeError('inside')
  assert runs_module.ACTUAL_FINAL_WINDOW == before
  with pytest.raises(ValueError, match='window=1.5'):
    with window.final_window(1.5):
      pass


def test_scores_match_the_calibration_scripts_scoring_of_the_same_records():
  """The same design and test records scored here and by scaling_law_extend_calibration.score
  (the path the fourth to seventh tests' pool checks used)."""
  window = _script()
  extend = _script('scaling_law_extend_calibration')
  shipped = CalibrationSet.load(REPO / 'sgpo_jax' / 'scaling_law' / 'calibration_runs.json')
  at_30 = [r for r in shipped.records if r.observe_fraction == 0.3 and r.regime == 'default']
  seed = lambda r: window.cal.seed_number(r.run)  # noqa: E731
  design = [r for r in at_30 if seed(r) is not None and seed(r) <= 14]
  test = [r for r in at_30 if seed(r) in (15, 16)]
  rows = window.score_rows(design, test, config_scores_min=9)
  theirs = extend.score(design, test, config_scores_min=9)
  assert {r['metric'] for r in rows} == set(theirs)
  for metric, expected in theirs.items():
    mine = [r for r in rows if r['metric'] == metric]
    assert len(mine) == expected['n']
    assert np.mean([r['err'] for r in mine]) == pytest.approx(expected['err'], rel=1e-12)
    assert np.mean([r['flat_err'] for r in mine]) == pytest.approx(expected['flat'], rel=1e-12)
    assert np.mean([r['covered'] for r in mine]) == pytest.approx(expected['coverage'])


def test_summarise_by_hand():
  window = _script()
  rows = [{'seed': 1, 'err': 0.02, 'flat_err': 0.05, 'covered': True},
          {'seed': 1, 'err': 0.04, 'flat_err': 0.07, 'covered': False},
          {'seed': 2, 'err': 0.03, 'flat_err': 0.03, 'covered': True}]
  summary = window.summarise(rows, np.random.default_rng(0), draws=200)
  assert summary['n'] == 3 and summary['seeds'] == 2
  assert summary['err'] == pytest.approx(0.03) and summary['flat'] == pytest.approx(0.05)
  assert summary['ratio'] == pytest.approx(0.6) and summary['coverage'] == pytest.approx(2 / 3)
  # Resampling seeds: the error lies between seed 2's alone (0.03) and seed 1's alone (0.03),
  # the ratio between 0.03 / 0.03 = 1 and 0.03 / 0.06 = 0.5.
  assert summary['ci95']['ratio'][0] == pytest.approx(0.5)
  assert summary['ci95']['ratio'][1] == pytest.approx(1.0)


def test_committed_report_matches_its_json():
  result = json.loads((OUT / 'results.json').read_text())
  report = (OUT / 'results.md').read_text()
  assert result['command'] in report
  windows = sorted({r['window'] for r in result['rows']})
  assert windows[0] == 0.05 and len(windows) >= 2
  for row in result['rows']:
    assert f"| {100 * row['window']:.0f}% | {row['metric']} | {row['n']} |" in report
    assert f"**{row['err']:.3f}**" in report
  # Every window scores the same runs.
  for metric in {r['metric'] for r in result['rows']}:
    assert len({r['n'] for r in result['rows'] if r['metric'] == metric}) == 1


def test_calibration_scripts_final_window_helpers_follow_the_window():
  """scaling_law_calibrate's noise floor and late-level gap read the window where it is set."""
  window = _script()
  cal = window.cal
  steps = np.arange(1, 21, dtype=float)
  values = np.tile([0.45, 0.55], 10)
  record = RunRecord(run_dir=Path('.'), name='r', model='m', params_nonembed=None,
                     total_steps=20, metric='reward_mean', steps=steps, values=values,
                     flops_total=steps)
  sigma = cal.reading_noise(record)
  assert cal.noise_floor(record) == pytest.approx(sigma * np.sqrt(2 / np.pi) / np.sqrt(2))
  # Late readings: steps 10-18 (from 50% to the window's first reading, step 19): mean 0.5
  # minus 0.45 and 0.55 alternating from step 10 -> 0.55, 0.45, ... 0.55 (step 18): 5 x 0.55,
  # 4 x 0.45 = 0.5056; final (steps 19, 20) 0.5.
  assert cal.above_late_level(record) == pytest.approx(0.5 - (5 * 0.55 + 4 * 0.45) / 9)
  with window.final_window(0.2):  # from step 16: 5 readings
    assert cal.noise_floor(record) == pytest.approx(sigma * np.sqrt(2 / np.pi) / np.sqrt(5))
    # Late: steps 10-15 (3 x 0.55, 3 x 0.45 = 0.5); final: steps 16-20 (0.55, 0.45, 0.55,
    # 0.45, 0.55 = 0.51).
    assert cal.above_late_level(record) == pytest.approx(0.51 - 0.5)
