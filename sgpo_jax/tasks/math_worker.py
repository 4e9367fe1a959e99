"""The math-verify worker process and its line protocol.

A worker is `python -c 'worker_main(parse_timeout, verify_timeout)'` in its own session
(so the whole process group can be killed). Protocol: the parent writes one JSON line per
batch, `[[index, gold, answer], ...]`; the worker answers one line `index verdict soft` per
item, in order (verdict 0/1; soft 1 when one of math-verify's soft timeouts fired during the
check, so its verdict depended on the time bound), after a single `ready` line once
math-verify is imported and warm. Stray library prints go to stderr so they cannot corrupt
the protocol stream. `check_pair` is the check itself (also used in-process by
`MathVerifier(num_workers=0)`).

Scheduling, batching and the watchdog that kills a silent worker live in
`math_reward.MathVerifier`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from sgpo_jax.tasks.math_answer import fast_verdict, plain_value

# Decimal places to which math-verify rounds a float before comparing it (its `float_rounding`).
# Against a rational gold (a plain integer, decimal or fraction) a float answer must agree to
# 15 places, the precision of math-verify's float arithmetic: 0.333333 is not 1/3. Plain-number
# answers are compared exactly (`math_answer.fast_verdict`), here too.
# Against any other gold (pi, \sqrt{2}) math-verify's default applies: 6 places, so 1.414214
# equals \sqrt{2}.
RATIONAL_GOLD_FLOAT_ROUNDING = 15
DEFAULT_FLOAT_ROUNDING = 6


class SoftTimeoutCounter(logging.Handler):
  """Counts math-verify's soft timeouts (it writes no record anywhere itself).

  math-verify catches its own `TimeoutException` and returns an empty parse or False, the
  same value as an unparseable or wrong answer; its only trace is a warning 'Timeout during
  parsing' / 'Timeout during comparison' (math_verify.parser, math_verify.grader; pinned in
  requirements.txt, the message checked by tests/tasks/test_math_verify.py). Installed on the
  'math_verify' logger. In a worker (`silence=True`) that logger is set to WARNING and
  neither prints nor propagates, so no library record reaches stderr. In process
  (`MathVerifier(num_workers=0)`, for debugging) the user's logging is left as it is: the
  counter sees the timeouts only while that logger is enabled for WARNING (the default).
  """

  def __init__(self):
    super().__init__(logging.WARNING)
    self.count = 0

  def emit(self, record: logging.LogRecord) -> None:
    if str(record.msg).startswith('Timeout during'):
      self.count += 1

  @classmethod
  def install(cls, silence: bool = False) -> SoftTimeoutCounter:
    """The counter on the 'math_verify' logger (the same one on a second call)."""
    logger = logging.getLogger('math_verify')
    if silence:  # a worker process: its logging is ours
      logger.setLevel(logging.WARNING)  # the counter must see the timeout warnings
      logger.propagate = False
    for handler in logger.handlers:
      if isinstance(handler, cls):
        return handler
    handler = cls()
    logger.addHandler(handler)
    return handler


def check_pair(gold: str, answer: str, gold_cache: dict, parse_timeout: int | None,
                verify_timeout: int | None) -> bool:
  """Whether answer equals gold. A soft timeout reads as False here: callers that must tell
  it apart read `SoftTimeoutCounter.install().count` before and after."""
  import math_verify  # deferred: heavy (sympy); only the worker processes load it

  exact = fast_verdict(gold, answer)  # two plain numbers: exact, whichever path sent them
  if exact is not None:
    return exact

  def parse(text: str) -> list:
    return math_verify.parse('\\boxed{' + text + '}', parsing_timeout=parse_timeout or None)

  parsed_gold = gold_cache.get(gold)
  if parsed_gold is None:
    parsed = parse(gold)
    # An unparseable reference still matches the identical string. It is not cached: an
    # empty parse may be a parse timeout under load, which must not stick for the worker's
    # life (every later answer to that reference would then need the gold's exact text).
    parsed_gold = parsed or [gold]
    if parsed:
      if len(gold_cache) > 100_000:
        gold_cache.clear()
      gold_cache[gold] = parsed_gold
  parsed_answer = parse(answer)
  if not parsed_answer:
    return answer == gold
  float_rounding = (RATIONAL_GOLD_FLOAT_ROUNDING if plain_value(gold) is not None
                    else DEFAULT_FLOAT_ROUNDING)
  return bool(math_verify.verify(parsed_gold, parsed_answer, float_rounding=float_rounding,
                                 timeout_seconds=verify_timeout or None))


def worker_main(parse_timeout: int, verify_timeout: int) -> None:
  """Worker loop: reads JSON batches on stdin, writes 'index verdict soft' lines, one per
  item."""
  protocol_out = os.fdopen(os.dup(1), 'w', buffering=1)
  os.dup2(2, 1)  # Stray prints from libraries must not corrupt the protocol stream.
  logging.getLogger('latex2sympy2_extended').setLevel(logging.CRITICAL)
  soft_timeouts = SoftTimeoutCounter.install(silence=True)
  # deferred: heavy (sympy); loaded here, once its loggers are quiet, before 'ready'
  import math_verify  # noqa: F401

  gold_cache: dict = {}
  check_pair('1', 'x+1', {}, None, None)  # sympy's lazy imports, also before 'ready'
  protocol_out.write('ready\n')
  for line in sys.stdin:
    for index, gold, answer in json.loads(line):
      before = soft_timeouts.count
      try:
        verdict = check_pair(gold, answer, gold_cache, parse_timeout, verify_timeout)
      except Exception:  # noqa: BLE001  a failed check is a wrong answer, never a crash
        verdict = False
      protocol_out.write(f'{index} {int(verdict)} {int(soft_timeouts.count > before)}\n')


class WorkerProcess:
  """One worker subprocess and its line-buffered stdout."""

  def __init__(self, parse_timeout: int, verify_timeout: int):
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in (package_root, env.get('PYTHONPATH')) if p)
    code = (f'from sgpo_jax.tasks.math_worker import worker_main; '
            f'worker_main({parse_timeout}, {verify_timeout})')
    self.proc = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=env, start_new_session=True)
    self.buffer = b''
    self.ready = False
    self.started = time.monotonic()

  def fileno(self) -> int:
    return self.proc.stdout.fileno()

  def send(self, items: Sequence[tuple[int, str, str]]) -> None:
    self.proc.stdin.write((json.dumps(list(items)) + '\n').encode())
    self.proc.stdin.flush()

  def read_lines(self) -> list[str] | None:
    """Complete lines available now; None when the worker has exited."""
    chunk = os.read(self.fileno(), 1 << 16)
    if not chunk:
      return None
    self.buffer += chunk
    *lines, self.buffer = self.buffer.split(b'\n')
    return [line.decode() for line in lines]

  def kill(self) -> None:
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
    self.proc.wait()
    for stream in (self.proc.stdin, self.proc.stdout):
      try:
        stream.close()
      except OSError:
        pass
