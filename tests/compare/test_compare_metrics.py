"""`python -m sgpo_jax.compare same-run`: two runs are the same run up to timing fields."""

import json

from sgpo_jax.compare import __main__ as cli
from sgpo_jax.compare import same_run as same_run_lib


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
  assert same_run_lib.compare_workdirs(tmp_path / 'a', tmp_path / 'b') == {
      'metrics.jsonl': []}
  assert cli.main(['same-run', str(tmp_path / 'a'), str(tmp_path / 'b')]) == 0
  diffs = same_run_lib.compare_workdirs(tmp_path / 'a', tmp_path / 'c')['metrics.jsonl']
  assert len(diffs) == 1 and 'loss' in diffs[0]
  assert cli.main(['same-run', str(tmp_path / 'a'), str(tmp_path / 'd')]) == 1
