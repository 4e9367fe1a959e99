"""Where a measured number came from: the git commit of the tree that made it, the machine's
CPU count and the load average around the measurement. Every results file a README number
is quoted from carries these (benchmarks/README.md)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit() -> str:
  """HEAD's full hash, with '-dirty' when tracked files differ from it; 'unknown' outside git."""
  def git(*cmd: str) -> str:
    return subprocess.run(['git', *cmd], check=False, cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
  commit = git('rev-parse', 'HEAD') or 'unknown'
  return commit + ('-dirty' if git('status', '--porcelain', '--untracked-files=no') else '')


def load_average() -> list[float]:
  """The 1, 5 and 15-minute load averages."""
  return [round(x, 2) for x in os.getloadavg()]


def measured(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
  """Runs `fn` and returns its dict with the commit, CPU count, load average before and after,
  wall seconds and the time it ended."""
  before, start = load_average(), time.perf_counter()
  result = fn()
  seconds = time.perf_counter() - start
  return {**result, 'commit': git_commit(), 'cpus': os.cpu_count(),
          'load_average_before': before, 'load_average_after': load_average(),
          'seconds': seconds, 'time': time.strftime('%Y-%m-%dT%H:%M:%S')}
