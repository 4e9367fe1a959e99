"""studies/scaling_law/pooled.py: which fresh runs are held out from each shipped set, the
binomial bound on the share of runs over 3 points, and the check of recomputed rows against
the rows each test stored."""

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from sgpo_jax.scaling_law.calibration import CalibrationSet

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / 'experiments' / 'results'
SEVENTH = 'scaling_law_fresh_seeds45-49'


def _script():
  sys.path.insert(0, os.path.join(REPO, 'experiments'))
  return importlib.import_module('scaling_law_pooled')


def test_upper_share_by_hand():
  pooled = _script()
  # k = 0: the bound solves (1 - u)^n = 0.05.
  assert pooled.upper_share(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
  # Clopper-Pearson's upper bound u solves P(X <= k | u) = 0.05; for k = n - 1 that is
  # 1 - u^n = 0.05.
  assert pooled.upper_share(2, 3) == pytest.approx(0.95 ** (1 / 3), rel=1e-9)
  assert pooled.upper_share(5, 5) == 1.0
  assert pooled.upper_share(2, 400) > 2 / 400


def test_held_out_leaves_out_every_seed_of_the_calibration_set_whole():
  pooled = _script()
  calibration = CalibrationSet.load(
      REPO / 'sgpo_jax' / 'scaling_law' / 'stop_calibration_runs.json')  # seeds 5-9
  runs = [{'name': f'{regime}/{arm}_seed{seed}', 'seed_group': f'{arm}/seed{seed}'}
          for regime in ('default', 'paper_like') for arm in ('grpo', 'sgpo')
          for seed in (4, 5, 9, 10)]
  kept, left_out = pooled.held_out(runs, calibration)
  assert left_out == ['seed5', 'seed9']
  assert sorted({r['name'].rsplit('_seed', 1)[1] for r in kept}) == ['10', '4']
  assert len(kept) == 8


def test_a_run_in_two_tests_is_refused():
  pooled = _script()
  path = f'{SEVENTH}/sgpo_grpo_seeds45-54_candidate/trajectories.json'
  one = pooled.Test('a', '.', (path,))
  runs = pooled.load_tests((one,))
  assert len(runs) == 40 and {r['test'] for r in runs} == {'a'}
  with pytest.raises(ValueError, match='is in two tests'):
    pooled.load_tests((one, pooled.Test('b', '.', (path,))))


def test_recomputed_rows_match_the_stored_ones_and_a_difference_is_reported():
  pooled = _script()
  fresh, transfer, stop_trainer = pooled.fresh, pooled.transfer, pooled.stop_trainer
  runs = pooled.load_tests(tuple(t for t in pooled.TESTS if t.folder == SEVENTH))
  picked = [r for r in runs if r['name'] in ('default/grpo_seed45', 'paper_like/sgpo_seed46')]
  assert len(picked) == 2
  calibration = CalibrationSet.load(pooled.cal.CALIBRATION_PATH)
  rows = fresh.forecast_rows(picked, calibration, variants=pooled.CLI_VARIANT)
  stop_cal = CalibrationSet.load(pooled.STOP_CALIBRATION_PATH)
  setting = stop_trainer.default_setting()
  stops = [dict(transfer.trainer_outcome(r, stop_cal, setting), run=r['name']) for r in picked]
  checks = pooled.stored_checks(rows, stops)
  by_file = {c['file']: c for c in checks}
  stored_all = by_file[f'{SEVENTH}/all_seeds45-49_previous/results.json']
  assert stored_all['compared'] == 4 and stored_all['differ'] == []  # 2 runs x 2 metrics
  stop = by_file[f'{SEVENTH}/stop/stop_results.json']
  assert stop['compared'] == 2 and stop['differ'] == []
  # Files of other tests hold none of these runs.
  assert all(c['compared'] == 0 for f, c in by_file.items() if not f.startswith(SEVENTH))
  # A row that is not what the test stored is reported by name.
  rows[0]['group']['predicted'] += 0.01
  stops[1]['loss'] += 0.01
  checks = {c['file']: c for c in pooled.stored_checks(rows, stops)}
  assert checks[f'{SEVENTH}/all_seeds45-49_previous/results.json']['differ'] == [rows[0]['run']]
  assert checks[f'{SEVENTH}/stop/stop_results.json']['differ'] == [stops[1]['run']]


def test_committed_report_matches_its_json():
  """The committed pooled report says what its JSON holds (both written by main)."""
  out = RESULTS / 'scaling_law_pooled'
  result = json.loads((out / 'results.json').read_text())
  report = (out / 'results.md').read_text()
  assert result['command'] in report
  accuracy = next(s for s in result['cli']['summaries']
                  if s['metric'] == 'eval_accuracy' and s['label'] == 'balanced seeds')
  assert f"**{accuracy['group_err']:.3f}**" in report
  assert all(not c['differ'] for c in result['checks'])
  pooled = _script()
  # The seed lists are printed as spans of the JSON's seed labels, never as 'none' for a list
  # that holds seeds.
  for part, key in (('cli', 'seeds'), ('cli', 'left_out_seeds'), ('stop', 'balanced_seeds')):
    assert pooled.seed_span(result[part][key]) in report
  assert result['cli']['seeds'] and 'runs of seeds none' not in report


def test_seed_span_formats_seed_labels():
  pooled = _script()
  assert pooled.seed_span(['seed9', 'seed5', 'seed6', 'seed7']) == '5-7, 9'
  assert pooled.seed_span([]) == 'none'
