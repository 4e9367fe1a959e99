"""Rewrites committed compare.json files in the form the comparison report now writes.

`sgpo_jax.compare.report.dump_results` writes compare.json compact: no indentation, the
accuracy curves to 4 decimals, the FLOPs grid to 4 significant digits, every other number as
computed. A compare.json written before, whose runs are gone, is rewritten here the same way
(same keys, same values but the rounded curves and grid; older layouts too, such as
512eval.json's); a format change of a generated file, not an edit of its results. A file is
left as it is if anything but a curve or the grid would change, or if the compare.md the
current report renders from it would:

    python -m studies.compact_json FILE.json [FILE.json ...]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Sequence

from sgpo_jax.compare import report

CURVES = ('mean_curve', 'band_curve', 'grid_flops')


def _without_curves(value: Any) -> Any:
  if isinstance(value, dict):
    return {k: None if k in CURVES else _without_curves(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_without_curves(v) for v in value]
  return value


def compact(path: str) -> tuple[int, int]:
  """Rewrites the compare.json at `path` compact; (bytes before, bytes after)."""
  before = os.path.getsize(path)
  with open(path) as f:
    results = json.load(f)
  rewritten = json.loads(json.dumps(report.compact_results(results)))
  if _without_curves(rewritten) != _without_curves(results):
    raise ValueError(f'{path}: more than the curves would change; left as it is')
  if 'regimes' in results and report.render(rewritten) != report.render(results):
    raise ValueError(f'{path}: compare.md would change; left as it is')
  report.dump_results(results, path)
  return before, os.path.getsize(path)


def main(argv: Sequence[str] | None = None) -> int:
  paths = list(sys.argv[1:] if argv is None else argv)
  if not paths:
    print(__doc__, file=sys.stderr)
    return 2
  for path in paths:
    before, after = compact(path)
    print(f'{path}: {before} -> {after} bytes', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
