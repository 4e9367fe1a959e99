"""Math answers as text: extraction, normalization, screening and the plain-number fast path.

Pure and cheap; runs in the calling process before anything is sent to a math-verify
worker (`math_worker.py`, scheduled by `math_reward.MathVerifier`).

1. `extract_answer`: the last `\\boxed{...}` (or `\\fbox`) wins; else the last `#### ...`
   line; else the text after the last "answer is" / "answer:"; else (fallback='last_number')
   the last number in the text. NUL and other control characters are removed first. A last
   box with unbalanced braces yields no answer (reward 0).
2. `normalize_answer`: strips `$`/`\\(`/`\\[` wrappers, a trailing period, `\\!` spacing;
   bare `%` becomes `\\%`; a plain `1.5e3` becomes `1.5\\times10^{3}`.
3. `screen_answer`: rejects (reward 0), deterministically, every answer whose parse or
   verification could come near the workers' time bounds: longer than `MAX_ANSWER_CHARS`,
   bracket nesting deeper than `MAX_NESTING`, more than `MAX_POWERS` powers, power towers
   (`9^{9^9}`, `9**9**9`), exponent literals of 5+ digits, exponents above
   `MAX_SYMBOLIC_EXPONENT` (or a total above `MAX_SYMBOLIC_DEGREE`) on non-numeric bases,
   factorials of non-literals or of literals >= 1000, `\\int \\sum \\prod \\lim`. So a
   verdict is a function of (answer, gold) alone, not of machine load.
4. `fast_verdict`: when both sides are plain numbers (integers, decimals, thousands
   separators, `a/b`, `\\frac{a}{b}`) equal values score 1 and clearly different values
   score 0, with no parsing.
"""

from __future__ import annotations

import re
from fractions import Fraction

# Screen limits. Every answer the screen admits must parse and verify far inside the
# workers' time bounds even on a heavily loaded machine, so that a verdict depends on
# (answer, gold) only. Measured with math-verify 0.8 on a 2-core machine at load ~20 (about
# 10x slower than idle): nesting 12 parses in 5-19 s, nesting 5 in ~3.5 s, a 255-character
# flat sum in ~1 s, `(x+1)^{99}` verifies in ~3 s and `(x+1)^{999}` in ~67 s.
MAX_ANSWER_CHARS = 160  # longest MATH / GSM8K gold answers are well under 100 characters
MAX_NESTING = 5  # {([ depth; real answers reach 3-4 (\sqrt{\frac{\sqrt{2}}{2}} is 3)
MAX_POWERS = 12
# An exponent literal with 3+ digits is admitted only on a plain integer base (2^{2023} is
# exact integer arithmetic; (x+1)^{999} is a huge symbolic expansion).
MAX_SYMBOLIC_EXPONENT = 30
# Total degree of exponents on non-numeric bases, e.g. (x+1)^{30}(x+2)^{30}(x+3)^{2} is 62.
MAX_SYMBOLIC_DEGREE = 60

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
# A power and its base: the character before `^`/`**` and an integer exponent literal.
_POWER_RE = re.compile(r'(\S?)\s*(?:\^|\*\*)\s*\{?\s*\(?\s*[+-]?(\d+)')
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
  symbolic_degree = 0
  for match in _POWER_RE.finditer(answer):
    base, exponent = match.group(1), int(match.group(2))
    if not base.isdigit():
      if exponent > MAX_SYMBOLIC_EXPONENT:
        return 'symbolic_power'
      symbolic_degree += exponent
  if symbolic_degree > MAX_SYMBOLIC_DEGREE:
    return 'symbolic_power'
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
