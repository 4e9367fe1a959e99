"""Math answer reward: extract a completion's final answer and verify it, in bounded time.

Owns answer extraction, input screening and the `MathVerifier` (a persistent pool of killable
worker processes running the `math-verify` library).

Pipeline per (completion, reference) pair:
1. `extract_answer`: the last `\\boxed{...}` (or `\\fbox`) wins; else the last `#### ...` line;
   else the text after the last "answer is" / "answer:"; else (fallback='last_number') the
   last number in the text. NUL and other control characters are removed first. A last box
   with unbalanced braces yields no answer (reward 0).
2. `normalize_answer`: strips `$`/`\\(`/`\\[` wrappers, a trailing period, `\\!` spacing;
   bare `%` becomes `\\%`; a plain `1.5e3` becomes `1.5\\times10^{3}`.
3. `screen_answer`: rejects (reward 0) answers math-verify could spend unbounded CPU on:
   longer than `max_answer_chars`, brace/paren nesting deeper than 12, power towers
   (`9^{9^9}`, `9**9**9`), exponent literals of 5+ digits, factorials of non-literals or of
   literals >= 1000, `\\int \\sum \\prod \\lim`, more than 12 powers.
4. Fast path in the calling process: when both sides are plain numbers (integers, decimals,
   thousands separators, `a/b`, `\\frac{a}{b}`) equal values score 1 and clearly different
   values score 0, with no parsing.
5. Otherwise `math_verify.parse` + `verify` run in worker processes, with math-verify's own
   whole-second soft timeouts (valid there: each worker runs checks in its main thread) and a
   hard per-item watchdog in the parent: a worker silent for `item_timeout_s` is killed and
   restarted; the item it was on scores 0, the rest of its items are resent.
   Items are routed to workers by a hash of the reference, so each worker parses a given
   reference once and caches it. Identical (reference, answer) pairs are checked once.

Equivalences come from math-verify: `50%` equals both 50 and 0.5, `1,000` equals 1000,
`x = 5` equals 5, `\\frac{1}{2}` equals 0.5 and 1/2, symbolic forms are compared with sympy.
Text is never `eval`-ed or `exec`-ed anywhere.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

MAX_ANSWER_CHARS = 256
MAX_NESTING = 12
MAX_POWERS = 12

_CONTROL_RE = re.compile(r'[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]')
_BOX_RE = re.compile(r'\\(?:boxed|fbox)')
_HASHES_RE = re.compile(r'####')
_ANSWER_IS_RE = re.compile(r'answer\s*(?:is|:)\s*:?', re.IGNORECASE)
_NUMBER_RE = re.compile(r'-?\d[\d,]*(?:\.\d+)?(?:/\d+)?%?')
_SCI_RE = re.compile(r'([+-]?\d+(?:\.\d+)?)[eE]([+-]?\d{1,3})')
_INT_RE = r'[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)'
_DECIMAL_RE = re.compile(_INT_RE + r'(?:\.\d+)?|[+-]?\.\d+')
_SLASH_FRAC_RE = re.compile(r'([+-]?\d+)\s*/\s*(\d+)')
_TEX_FRAC_RE = re.compile(r'([+-]?)\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}')
_TOWER_RES = (
    re.compile(r'\^\s*\{[^{}]*(?:\^|\*\*|!)'),  # exponent group holding a power or factorial
    re.compile(r'\^\s*\{[^{}]*\{'),  # nested group inside an exponent
    re.compile(r'\^\s*\(?\s*[\w.]+\s*\)?\s*\^'),  # 9^9^9
    re.compile(r'\*\*\s*\(?\s*[\w.]+\s*\)?\s*(?:\*\*|\^)'),  # 9**9**9
    re.compile(r'(?:\^|\*\*)\s*\{?\s*\(?\s*[+-]?\d{5,}'),  # exponent literal >= 10000
)
_FORBIDDEN_RE = re.compile(r'\\(?:int|iint|oint|sum|prod|lim)(?![a-zA-Z])')
_FACTORIAL_RE = re.compile(r'(\d*)\s*!(?!=)')


# --- extraction and screening (pure, cheap, run in the calling process) -----------------------


def _balanced_group(text: str, open_pos: int) -> str | None:
  """Content of the `{...}` group opening at `open_pos`, or None if unbalanced."""
  depth = 0
  for pos in range(open_pos, len(text)):
    char = text[pos]
    if char == '{':
      depth += 1
    elif char == '}':
      depth -= 1
      if depth == 0:
        return text[open_pos + 1:pos]
  return None


def _first_sentence(text: str) -> str:
  line = text.split('\n', 1)[0]
  return re.split(r'\.\s', line, maxsplit=1)[0]


def extract_answer(completion: str, fallback: str = 'last_number') -> str | None:
  """The final answer text of `completion`, or None; see the module docstring for the order."""
  text = _CONTROL_RE.sub('', completion)
  boxes = list(_BOX_RE.finditer(text))
  if boxes:
    end = boxes[-1].end()
    rest = text[end:end + 1 + MAX_ANSWER_CHARS * 4].lstrip()
    if rest.startswith('{'):
      return _balanced_group(rest, 0)
    token = rest.split(None, 1)[0] if rest.strip() else ''
    return token.rstrip('$') or None
  hashes = list(_HASHES_RE.finditer(text))
  if hashes:
    return text[hashes[-1].end():].split('\n', 1)[0].strip() or None
  answer_is = list(_ANSWER_IS_RE.finditer(text))
  if answer_is:
    return _first_sentence(text[answer_is[-1].end():]).strip() or None
  if fallback == 'last_number':
    numbers = _NUMBER_RE.findall(text[-4 * MAX_ANSWER_CHARS:])
    return numbers[-1].rstrip(',') if numbers else None
  if fallback != 'none':
    raise ValueError(f"fallback={fallback!r} must be 'last_number' or 'none'")
  return None


def normalize_answer(answer: str) -> str:
  """Strips math-mode wrappers and sentence punctuation that break parsing."""
  answer = _CONTROL_RE.sub('', answer).strip()
  for left, right in (('$$', '$$'), ('$', '$'), ('\\(', '\\)'), ('\\[', '\\]')):
    if len(answer) >= len(left) + len(right) and answer.startswith(left) \
        and answer.endswith(right):
      answer = answer[len(left):len(answer) - len(right)].strip()
  answer = answer.replace('\\!', '').rstrip('.').strip()
  answer = re.sub(r'(?<!\\)%', r'\\%', answer)
  if _SCI_RE.fullmatch(answer):
    answer = _SCI_RE.sub(r'\1\\times10^{\2}', answer)
  return answer


def screen_answer(answer: str, max_answer_chars: int = MAX_ANSWER_CHARS) -> str | None:
  """Why `answer` is refused before parsing (a short reason), or None if it may be parsed."""
  if not answer:
    return 'empty'
  if len(answer) > max_answer_chars:
    return 'too_long'
  depth = max_depth = 0
  for char in answer:
    if char in '{([':
      depth += 1
      max_depth = max(max_depth, depth)
    elif char in '})]':
      depth -= 1
      if depth < 0:
        return 'unbalanced'
  if depth != 0 and answer.count('{') != answer.count('}'):
    return 'unbalanced'
  if max_depth > MAX_NESTING:
    return 'nesting'
  if answer.count('^') + answer.count('**') > MAX_POWERS:
    return 'powers'
  if any(pattern.search(answer) for pattern in _TOWER_RES):
    return 'power_tower'
  if _FORBIDDEN_RE.search(answer):
    return 'unbounded_operator'
  for match in _FACTORIAL_RE.finditer(answer):
    if not match.group(1) or len(match.group(1)) > 3:
      return 'factorial'
  return None


def _plain_number(answer: str) -> tuple[Fraction, bool] | None:
  """(value, is_integer_form) for plain numeric answers, else None."""
  text = answer.replace(' ', '')
  if _DECIMAL_RE.fullmatch(text):
    return Fraction(text.replace(',', '')), '.' not in text
  match = _SLASH_FRAC_RE.fullmatch(text) or _TEX_FRAC_RE.fullmatch(text)
  if match:
    if match.re is _TEX_FRAC_RE:
      numerator, denominator = int(match.group(1) + match.group(2)), int(match.group(3))
    else:
      numerator, denominator = int(match.group(1)), int(match.group(2))
    if denominator == 0:
      return None
    return Fraction(numerator, denominator), False
  match = _SCI_RE.fullmatch(text)
  if match:
    return Fraction(match.group(1)) * Fraction(10) ** int(match.group(2)), False
  return None


def fast_verdict(gold: str, answer: str) -> bool | None:
  """Exact verdict for plain numbers (True/False), None when math-verify must decide."""
  g, a = _plain_number(gold), _plain_number(answer)
  if g is None or a is None:
    return None
  (g_value, g_int), (a_value, a_int) = g, a
  if g_value == a_value:
    return True
  if g_int and a_int:
    return False
  # math-verify rounds to ~6 significant decimals; farther apart can never match.
  if abs(g_value - a_value) > Fraction(1, 10 ** 4) * max(1, abs(g_value), abs(a_value)):
    return False
  return None


def prepare_gold(reference: str) -> str:
  """Reference answer text: extracted when it holds a box / '####' marker, then normalized."""
  if _BOX_RE.search(reference) or '####' in reference:
    extracted = extract_answer(reference, fallback='none')
    if extracted is not None:
      reference = extracted
  return normalize_answer(reference)


# --- worker process ---------------------------------------------------------------------------


def _check_pair(gold: str, answer: str, gold_cache: dict, parse_timeout: int | None,
                verify_timeout: int | None) -> bool:
  import math_verify

  def parse(text: str) -> list:
    return math_verify.parse('\\boxed{' + text + '}', parsing_timeout=parse_timeout or None)

  parsed_gold = gold_cache.get(gold)
  if parsed_gold is None:
    # An unparseable reference still matches the identical string.
    parsed_gold = parse(gold) or [gold]
    if len(gold_cache) > 100_000:
      gold_cache.clear()
    gold_cache[gold] = parsed_gold
  parsed_answer = parse(answer)
  if not parsed_answer:
    return answer == gold
  return bool(math_verify.verify(parsed_gold, parsed_answer,
                                 timeout_seconds=verify_timeout or None))


def _worker_main(parse_timeout: int, verify_timeout: int) -> None:
  """Worker loop: reads JSON batches on stdin, writes 'index verdict' lines, one per item."""
  protocol_out = os.fdopen(os.dup(1), 'w', buffering=1)
  os.dup2(2, 1)  # Stray prints from libraries must not corrupt the protocol stream.
  for name in ('math_verify', 'latex2sympy2_extended'):
    logging.getLogger(name).setLevel(logging.CRITICAL)
  import math_verify  # noqa: F401  (import cost paid before 'ready')

  protocol_out.write('ready\n')
  gold_cache: dict = {}
  for line in sys.stdin:
    for index, gold, answer in json.loads(line):
      try:
        verdict = _check_pair(gold, answer, gold_cache, parse_timeout, verify_timeout)
      except Exception:  # noqa: BLE001  a failed check is a wrong answer, never a crash
        verdict = False
      protocol_out.write(f'{index} {int(verdict)}\n')


class _Worker:
  """One worker subprocess and its line-buffered stdout."""

  def __init__(self, parse_timeout: int, verify_timeout: int):
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in (package_root, env.get('PYTHONPATH')) if p)
    code = (f'from sgpo_jax.tasks.math_reward import _worker_main; '
            f'_worker_main({parse_timeout}, {verify_timeout})')
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
  `stats` counts items by path: fast, cached, pool, screened, no_answer, timeouts, restarts.
  """

  def __init__(self, num_workers: int | None = None, item_timeout_s: float = 3.0,
               parse_timeout_s: int = 1, verify_timeout_s: int = 1, startup_timeout_s: float = 60.0,
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
        ('fast', 'cached', 'pool', 'screened', 'no_answer', 'timeouts', 'restarts'), 0)
    self._workers: list[_Worker | None] = [None] * num_workers
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
        verdicts = self._check_pairs(pairs)
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
      results = []
      for gold, answer in pairs:
        try:
          results.append(_check_pair(gold, answer, self._gold_cache, parse_t, verify_t))
        except Exception:  # noqa: BLE001
          results.append(False)
      return results

    verdicts = [False] * len(pairs)
    queues: list[deque] = [deque() for _ in range(self.num_workers)]
    for index, (gold, answer) in enumerate(pairs):
      queues[zlib.crc32(gold.encode('utf-8', 'replace')) % self.num_workers].append(
          (index, gold, answer))
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
            index, verdict = line.split()
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
      self._workers[w] = _Worker(self.parse_timeout_s, self.verify_timeout_s)

  def _send(self, w: int, queue: deque) -> None:
    try:
      self._workers[w].send(list(queue))
    except (BrokenPipeError, OSError):
      self._workers[w].kill()
      self._workers[w] = _Worker(self.parse_timeout_s, self.verify_timeout_s)
      self._workers[w].send(list(queue))
