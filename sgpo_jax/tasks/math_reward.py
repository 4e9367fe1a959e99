"""Math answer reward: `MathVerifier`, a batched reward with a hard time bound per check.

Pipeline per (completion, reference) pair:
1. `math_answer`: extract the final answer, normalize it, screen out (reward 0) anything
   whose check could come near the time bounds, and decide plain-number pairs exactly.
2. Otherwise `math_verify.parse` + `verify` run in worker processes (`math_worker`), with
   math-verify's own whole-second soft timeouts (valid there: each worker runs checks in
   its main thread) and a hard per-item watchdog here: a worker silent for `item_timeout_s`
   is killed and restarted; the item it was on scores 0, the rest of its items are resent.
   The bounds are a safety net far above what a screened answer needs, so verdicts do not
   depend on machine load. The items of one `score` call are dealt round robin over the
   workers (one group's completions share a reference and must not queue on one worker);
   each worker caches the references it has parsed. Identical (reference, answer) pairs are
   checked once; an answer whose normalized text equals the reference's scores 1 unchecked.

Equivalences come from math-verify: `50%` equals both 50 and 0.5, `1,000` equals 1000,
`x = 5` equals 5, `\\frac{1}{2}` equals 0.5 and 1/2, symbolic forms are compared with sympy.
Text is never `eval`-ed or `exec`-ed anywhere.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import logging

from sgpo_jax.tasks.math_answer import (
  MAX_ANSWER_CHARS,
  extract_answer,
  fast_verdict,
  normalize_answer,
  prepare_gold,
  screen_answer,
)
from sgpo_jax.tasks.math_worker import SoftTimeoutCounter, WorkerProcess, check_pair

__all__ = ['MathVerifier', 'extract_answer', 'fast_verdict', 'normalize_answer',
           'prepare_gold', 'screen_answer']


class MathVerifier:
  """Batched math reward with a hard time bound; call it like `get_reward_fn`'s result.

  Args:
    num_workers: worker processes; None = min(8, CPU count). 0 = check in this process (no
      hard bound, soft timeouts only in the main thread; for debugging). Throughput of
      non-trivial (symbolic) checks scales with it.
    item_timeout_s: hard bound on one check (a silent worker is killed after this long).
    parse_timeout_s / verify_timeout_s: math-verify's own whole-second soft timeouts
      (0 = none: only the hard bound applies).
    startup_timeout_s: how long a fresh worker may take to import math-verify.
    fallback: 'last_number' (a completion without an answer marker is judged by its last
      number) or 'none' (no marker, reward 0).
    use_fast_path: decide plain-number pairs without math-verify.
    screen: refuse risky answers before parsing (turn off only to test the hard bound).
  `stats` counts items by path: fast, cached, pool, screened, no_answer, timeouts (the
  watchdog killed a worker), restarts, soft_timeouts (a math-verify soft timeout fired during
  a check, whose verdict then came from a fallback (an empty parse or False): one that
  depended on machine load; never expected for an answer the screen admits, and logged as a
  warning when it happens).
  """

  def __init__(self, num_workers: int | None = None, item_timeout_s: float = 20.0,
               parse_timeout_s: int = 5, verify_timeout_s: int = 5,
               startup_timeout_s: float = 60.0,
               fallback: str = 'last_number', max_answer_chars: int = MAX_ANSWER_CHARS,
               use_fast_path: bool = True, screen: bool = True):
    if num_workers is None:
      num_workers = min(8, os.cpu_count() or 1)
    if num_workers < 0:
      raise ValueError(f'num_workers={num_workers} must be >= 0')
    if int(parse_timeout_s) != parse_timeout_s or int(verify_timeout_s) != verify_timeout_s:
      raise ValueError(f'parse_timeout_s={parse_timeout_s}, verify_timeout_s={verify_timeout_s}: '
                       'math-verify timeouts are whole seconds (signal.alarm); pass ints')
    if fallback not in ('last_number', 'none'):
      raise ValueError(f"fallback={fallback!r} must be 'last_number' or 'none'")
    self.num_workers = num_workers
    self.item_timeout_s = item_timeout_s
    self.parse_timeout_s = int(parse_timeout_s)
    self.verify_timeout_s = int(verify_timeout_s)
    self.startup_timeout_s = startup_timeout_s
    self.fallback = fallback
    self.max_answer_chars = max_answer_chars
    self.use_fast_path = use_fast_path
    self.screen = screen
    self.stats: dict[str, int] = dict.fromkeys(
        ('fast', 'cached', 'pool', 'screened', 'no_answer', 'timeouts', 'restarts',
         'soft_timeouts'), 0)
    self._workers: list[WorkerProcess | None] = [None] * num_workers
    self._gold_cache: dict = {}  # num_workers=0 only
    self._lock = threading.Lock()

  # -- public API --

  def __call__(self, completions: list[str], queries: Sequence[Any]) -> np.ndarray:
    """float32[len(completions)]: 1.0 where the completion's answer matches `query.answer`."""
    return self.score(completions, [q.answer for q in queries])

  def score(self, completions: list[str], references: list[str]) -> np.ndarray:
    """float32[len(completions)] rewards against reference answer strings."""
    if len(completions) != len(references):
      raise ValueError(f'{len(completions)} completions but {len(references)} references; pass '
                       'one reference per completion')
    rewards_N = np.zeros(len(completions), dtype=np.float32)
    pending: dict[tuple[str, str], list[int]] = {}
    gold_cache: dict[str, str] = {}
    for i, (completion, reference) in enumerate(zip(completions, references)):
      gold = gold_cache.get(reference)
      if gold is None:
        gold = gold_cache[reference] = prepare_gold(str(reference))
      answer = extract_answer(completion, self.fallback)
      if answer is None:
        self.stats['no_answer'] += 1
        continue
      answer = normalize_answer(answer)
      if answer and answer == gold:  # Identical text is correct whatever it holds (even a
        # form the screen refuses, e.g. a reference `x \to \infty`).
        self.stats['fast'] += 1
        rewards_N[i] = 1.0
        continue
      if self.screen and screen_answer(answer, self.max_answer_chars) is not None:
        self.stats['screened'] += 1
        continue
      verdict = fast_verdict(gold, answer) if self.use_fast_path else None
      if verdict is not None:
        self.stats['fast'] += 1
        rewards_N[i] = float(verdict)
        continue
      if (gold, answer) in pending:
        self.stats['cached'] += 1
      pending.setdefault((gold, answer), []).append(i)
    if pending:
      pairs = list(pending)
      self.stats['pool'] += len(pairs)
      with self._lock:
        soft_before = self.stats['soft_timeouts']
        verdicts = self._check_pairs(pairs)
        if self.stats['soft_timeouts'] > soft_before:
          logging.warning('math-verify soft timeouts in %d of %d checks: their verdicts came '
                          'from its fallback (empty parse / False) and depend on machine load',
                          self.stats['soft_timeouts'] - soft_before, len(pairs))
      for pair, verdict in zip(pairs, verdicts):
        rewards_N[pending[pair]] = float(verdict)
    return rewards_N

  def close(self) -> None:
    """Stops the worker processes (they are restarted on the next call)."""
    for w, worker in enumerate(self._workers):
      if worker is not None:
        worker.kill()
        self._workers[w] = None

  def __enter__(self) -> MathVerifier:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  def __del__(self) -> None:
    try:
      self.close()
    except Exception:  # noqa: BLE001  interpreter shutdown
      pass

  # -- checking --

  def _check_pairs(self, pairs: list[tuple[str, str]]) -> list[bool]:
    if self.num_workers == 0:
      in_main = threading.current_thread() is threading.main_thread()
      parse_t, verify_t = (self.parse_timeout_s, self.verify_timeout_s) if in_main else (None,) * 2
      counter = SoftTimeoutCounter.install()
      results = []
      for gold, answer in pairs:
        before = counter.count
        try:
          results.append(check_pair(gold, answer, self._gold_cache, parse_t, verify_t))
        except Exception:  # noqa: BLE001
          results.append(False)
        self.stats['soft_timeouts'] += int(counter.count > before)
      return results

    verdicts = [False] * len(pairs)
    queues: list[deque] = [deque() for _ in range(self.num_workers)]
    # Round robin, not by reference: one group's completions share a reference, and routing by
    # it queued all of them on one worker. A verdict does not depend on the worker.
    for index, (gold, answer) in enumerate(pairs):
      queues[index % self.num_workers].append((index, gold, answer))
    last_progress = [time.monotonic()] * self.num_workers
    for w, queue in enumerate(queues):
      if queue:
        self._ensure_worker(w)
        self._send(w, queue)
        last_progress[w] = time.monotonic()

    while any(queues):
      busy = [w for w, queue in enumerate(queues) if queue]
      now = time.monotonic()
      deadlines = {w: last_progress[w] + self._allowance(w) for w in busy}
      timeout = max(0.0, min(deadlines.values()) - now)
      readable, _, _ = select.select([self._workers[w] for w in busy], [], [], timeout)
      for worker in readable:
        w = self._workers.index(worker)
        lines = worker.read_lines()
        if lines is None:  # Crashed: treat like a timeout of the current item.
          self._fail_current_item(w, queues)
          continue
        for line in lines:
          if line == 'ready':
            worker.ready = True
          else:
            index, verdict, soft = line.split()
            self.stats['soft_timeouts'] += int(soft == '1')
            queue = queues[w]
            while queue and queue[0][0] != int(index):  # Defensive: never expected.
              queue.popleft()
            if queue:
              queue.popleft()
            verdicts[int(index)] = verdict == '1'
        last_progress[w] = time.monotonic()
      now = time.monotonic()
      for w in busy:
        if queues[w] and now > last_progress[w] + self._allowance(w):
          self._fail_current_item(w, queues)
          last_progress[w] = time.monotonic()
    return verdicts

  def _allowance(self, w: int) -> float:
    worker = self._workers[w]
    return self.item_timeout_s if worker is not None and worker.ready else (
        self.startup_timeout_s + self.item_timeout_s)

  def _fail_current_item(self, w: int, queues: list[deque]) -> None:
    """Kills worker `w`; its current item scores 0; the rest go to a fresh worker."""
    worker = self._workers[w]
    if worker is not None and not worker.ready:
      raise RuntimeError(f'math-verify worker failed to start within {self.startup_timeout_s}s '
                         f'(exit code {worker.proc.poll()}); check that math-verify imports in '
                         f'{sys.executable}')
    if queues[w]:
      queues[w].popleft()
    self.stats['timeouts'] += 1
    self.stats['restarts'] += 1
    worker.kill()
    self._workers[w] = None
    if queues[w]:
      self._ensure_worker(w)
      self._send(w, queues[w])

  def _ensure_worker(self, w: int) -> None:
    worker = self._workers[w]
    if worker is None or worker.proc.poll() is not None:
      self._workers[w] = WorkerProcess(self.parse_timeout_s, self.verify_timeout_s)

  def _send(self, w: int, queue: deque) -> None:
    try:
      self._workers[w].send(list(queue))
    except (BrokenPipeError, OSError):
      self._workers[w].kill()
      self._workers[w] = WorkerProcess(self.parse_timeout_s, self.verify_timeout_s)
      self._workers[w].send(list(queue))
