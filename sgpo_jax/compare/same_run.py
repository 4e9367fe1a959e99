"""Are two runs the same run? Diffs metrics.jsonl (and profile.jsonl) of two workdirs.

Timing fields (wall-clock dependent) are ignored; every other field of every row must be
equal exactly (floats compared as written, no tolerance). Used to check that a refactor
preserves behaviour:

    python -m sgpo_jax.compare same-run runs/baseline_default runs/refactor_default

Exit status 0 when identical, 1 otherwise (the first differences are printed).
"""

from __future__ import annotations

import json
import os

TIMING_FIELDS = frozenset({'seconds', 'tokens_per_second'})


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def diff_rows(a: list[dict], b: list[dict], ignore: frozenset[str] = TIMING_FIELDS,
              limit: int = 10) -> list[str]:
  """Human-readable differences between two lists of rows (empty = identical)."""
  out = []
  if len(a) != len(b):
    out.append(f'{len(a)} rows vs {len(b)} rows')
  for i, (ra, rb) in enumerate(zip(a, b)):
    keys = (set(ra) | set(rb)) - ignore
    for key in sorted(keys):
      if ra.get(key, '<missing>') != rb.get(key, '<missing>'):
        out.append(f"row {i} (step {ra.get('step')}): {key}: {ra.get(key, '<missing>')!r} "
                   f"vs {rb.get(key, '<missing>')!r}")
        if len(out) >= limit:
          return out
  return out


def compare_workdirs(a: str, b: str, files: tuple[str, ...] = ('metrics.jsonl',
                                                               'profile.jsonl')) -> dict:
  """{file: differences} for each file present in `a`; a file missing in `b` differs."""
  result = {}
  for name in files:
    path_a, path_b = os.path.join(a, name), os.path.join(b, name)
    if not os.path.exists(path_a):
      continue
    if not os.path.exists(path_b):
      result[name] = [f'{path_b} is missing']
      continue
    result[name] = diff_rows(read_jsonl(path_a), read_jsonl(path_b))
  return result
