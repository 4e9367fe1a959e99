"""experiments/compare_metrics.py: two runs are the same run up to timing fields."""

import importlib.util
import json
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('compare_metrics',
                                              REPO / 'experiments/compare_metrics.py')
compare_metrics = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_metrics)


def _write(workdir, rows):
  workdir.mkdir()
  (workdir / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))


def test_timing_fields_are_ignored_and_everything_else_is_exact(tmp_path):
  base = [{'step': 0, 'flops_total': 1.0}, {'step': 1, 'loss': 0.25, 'seconds': 3.0,
                                            'tokens_per_second': 10.0}]
  _write(tmp_path / 'a', base)
  _write(tmp_path / 'b', [base[0], dict(base[1], seconds=9.0, tokens_per_second=1.0)])
  _write(tmp_path / 'c', [base[0], dict(base[1], loss=0.25 + 1e-12)])
  _write(tmp_path / 'd', base[:1])
  assert compare_metrics.compare_workdirs(tmp_path / 'a', tmp_path / 'b') == {
      'metrics.jsonl': []}
  assert compare_metrics.main([str(tmp_path / 'a'), str(tmp_path / 'b')]) == 0
  diffs = compare_metrics.compare_workdirs(tmp_path / 'a', tmp_path / 'c')['metrics.jsonl']
  assert len(diffs) == 1 and 'loss' in diffs[0]
  assert compare_metrics.main([str(tmp_path / 'a'), str(tmp_path / 'd')]) == 1
