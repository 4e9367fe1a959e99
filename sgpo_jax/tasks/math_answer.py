"""Math answers as text: extraction, normalization, screening and the plain-number fast path.

Pure and cheap; runs in the calling process before anything is sent to a math-verify
worker (`math_worker.py`, scheduled by `math_reward.MathVerifier`).

1. `extract_answer`: the last `\\boxed{...}` (or `\\fbox`) wins; else the last `#### ...`
   line; else the text after the last "answer is" / "answer:"; else (fallback='last_number')
   the last number in the text. NUL and other control characters become spaces first (so
   `4<NUL>2` is two numbers, never 42). A last box with unbalanced braces yields no answer.
2. `normalize_answer`: strips `$`/`\\(`/`\\[` wrappers, a trailing period, `\\!` spacing;
   bare `%` becomes `\\%`; a plain `1.5e3` becomes `1.5\\times10^{3}`.
3. `screen_answer`: rejects (reward 0), deterministically, every answer whose parse or
   verification could come near the workers' time bounds: longer than `MAX_ANSWER_CHARS`,
   bracket nesting deeper than `MAX_NESTING`, more than `MAX_POWERS` powers, power towers
   (`9^{9^9}`, `9**9**9`, `10^{10^{10}}`), exponents of 5+ digits or whose literals multiply
   past `MAX_EXPONENT_LITERAL` (`2^{9999 \\cdot 9999}`), exponents above
   `MAX_SYMBOLIC_EXPONENT` (or a total above `MAX_SYMBOLIC_DEGREE`) on non-numeric bases,
   factorials of non-literals or of literals >= `MAX_COMBINATORIAL_ARG`, `\\binom` /
   `\\choose` / `\\Gamma` whose arguments are not sums of names and literals below
   `MAX_COMBINATORIAL_ARG` (`\\binom{999999}{499999}`, `\\Gamma(10^{8})`), exact integers of
   more than `MAX_INTEGER_DIGITS` digits (`\\sqrt{9999^{9999}}`, `999!`, `(99!)^{30}`), and
   `\\int \\sum \\prod \\lim`. So parse + verify stays far below the timeouts and a verdict
   is a function of (answer, gold) alone, not of machine load.
   It also rejects answers that are not one value: arrows and implications (`41 \\to 42`,
   `\\implies`, `\\Rightarrow`, `=>`, `->`), chained equations (`x = 41 = 42`; chained
   inequalities such as `1 < x \\le 3` stay), an equation with no name on its left (`41 = 42`,
   `6 \\times 8 = 42`; `x = 5` stays), and digits split by spaces (`4 2`). math-verify would
   read each of these as its last side and accept it against 42.
4. `fast_verdict`: when both sides are plain numbers (integers, decimals, thousands
   separators, `a/b`, `\\frac{a}{b}`) it decides by exact rational comparison.

Numeric tolerance. A rational gold (a plain number) is compared exactly: `0.333333` is not
1/3, `0.5` = `1/2` = `\\frac{2}{4}`. Plain-number answers are decided here; other answer
forms go to math-verify with `float_rounding=15` (a float must agree to 15 decimal places,
the precision of its float arithmetic). Against any other gold (`\\pi`, `\\sqrt{2}`)
math-verify's default applies: a float answer matches when both round to the same 6 decimal
places (`1.414214` equals `\\sqrt{2}`, `1.4142` does not). See `math_worker.check_pair`.
"""

from __future__ import annotations

import math
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
# Factorials, binomials and Gamma evaluate exactly to integers with ~n log10(n) digits:
# \binom{999999}{499999} needs the full 5 s parse timeout, \binom{200000}{100000} 1.9 s on
# an idle machine, \binom{20000}{10000} 0.13 s at load 7. Their arguments (literal sums)
# must stay below 1000, where each takes milliseconds.
MAX_COMBINATORIAL_ARG = 1000
# An exponent group's literals multiplied (2^{9999 \cdot 9999}) must stay below this, as a
# single exponent literal must (5+ digits are refused as towers).
MAX_EXPONENT_LITERAL = 10_000
# Digits of the exact integers an answer denotes (9999^{249}, 449!, \binom{999}{499}...):
# \sqrt{9999^{N}} against 9999^{(N-1)/2}\sqrt{9999} verifies in 0.2 s at 1000 digits and
# 0.75 s at 3000 on a 2-core machine at load 11, and takes over 20 s at 40000.
MAX_INTEGER_DIGITS = 1000

_CONTROL_RE = re.compile(r'[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]')
_BOX_RE = re.compile(r'\\(?:boxed|fbox)')
_HASHES_RE = re.compile(r'####')
_ANSWER_IS_RE = re.compile(r'answer\s*(?:is|:)\s*:?', re.IGNORECASE)
_NUMBER_RE = re.compile(r'[-\u2212]?\d[\d,]*(?:\.\d+)?(?:/\d+)?%?')  # U+2212: a minus sign
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
# Layout between a power operator and its exponent, which math-verify reads through
# (2^\left(99999999\right), 2^\,{999999999}): dropped before the power checks see it.
_EXPONENT_LAYOUT_RE = re.compile(r'(\^|\*\*)(?:\s|\\(?:left(?![a-zA-Z])|[,;:! ]))+')
# An exponent that opens with a command the checks cannot bound (2^\frac{99999}{2}); a few
# constants are fine.
_COMMAND_EXPONENT_RE = re.compile(
    r'(?:\^|\*\*)\s*\\(?!(?:pi|circ|prime|infty)(?![a-zA-Z]))')
# A power and its base: the character before `^`/`**` and an integer exponent literal.
_POWER_RE = re.compile(r'(\S?)\s*(?:\^|\*\*)\s*\{?\s*\(?\s*[+-]?(\d+)')
_FORBIDDEN_RE = re.compile(r'\\(?:int|iint|oint|sum|prod|lim)(?![a-zA-Z])')
_FACTORIAL_RE = re.compile(r'(\d*)\s*!(?!=)')
# Exponent groups `^{...}` / `**{...}` without nested groups (nested ones are towers).
_EXPONENT_GROUP_RE = re.compile(r'(?:\^|\*\*)\s*\{([^{}]*)\}')
_INT_LITERAL_RE = re.compile(r'\d+')
# An integer literal raised to an integer exponent: 9999^{749}, 2**10, 3^(5).
_INT_POWER_RE = re.compile(r'(?<![\d.])(\d+)\s*(?:\^|\*\*)\s*(\{[^{}]*\}|\(?\s*\d+)')
_LITERAL_RE = re.compile(r'\d+(?:\.\d*)?')
# Arguments of binomials / Gamma: names, literals, + and -; nothing that multiplies.
_SMALL_ARGUMENT_RE = re.compile(r'[\s\w.+\-\\]*')
_SPECIAL_RE = re.compile(r'\\(?:[dt]?binom|choose|Gamma|gamma|left|right)(?![a-zA-Z])')
_PRODUCT_RE = re.compile(r'\\(?:cdot|times|ast|div|frac|dfrac|tfrac)(?![a-zA-Z])')
_TOKEN_RE = re.compile(r'\d+(?:\.\d+)?|\\[a-zA-Z]+|\w')
_BINOM_RE = re.compile(r'\\[dt]?binom(?![a-zA-Z])')
_CHOOSE_RE = re.compile(r'\\choose(?![a-zA-Z])')
_GAMMA_RE = re.compile(r'\\(?:Gamma|gamma)(?![a-zA-Z])')
# 4 2 (was 4<NUL>2): not one number. A sub/superscript digit may precede one (\log_2 5).
_SPLIT_NUMBER_RE = re.compile(r'(?<![\d_^])\d+\s+\d')
# Between alternatives (x = 5 \text{ or } x = -5), like a top-level comma.
_ALTERNATIVES_RE = re.compile(
    r'\\text\{\s*(?:or|and)\s*\}|\\(?:q?quad|lor|vee)(?![a-zA-Z])|\b(?:or|and)\b')
_SIMPLE_FRAC_RE = re.compile(r'\\[dt]?frac\s*\{([\w\s.]*)\}\s*\{[\w\s.]*\}')
_ARROW_RE = re.compile(
    r'\\(?:to|implies|impliedby|iff|[Rr]ightarrow|[Ll]ongrightarrow|[Ll]eftrightarrow|'
    r'[Ll]ongleftrightarrow|[Ll]eftarrow|[Ll]ongleftarrow|mapsto|longmapsto|gets|therefore|'
    r'because)(?![a-zA-Z])|=>|->|[\u2190-\u21ff\u27f5-\u27ff\u2234\u2235]')
# `=` not part of <=, >=, != (those are inequalities), and the equality-like commands.
_EQUALITY_RE = re.compile(r'(?<![<>!=])==?(?!=)|\\(?:approx|equiv|cong|simeq)(?![a-zA-Z])')
_INEQUALITY_RE = re.compile(r'<=|>=|!=|[<>\u2264\u2265\u2260]|'
                            r'\\(?:le|ge|leq|geq|lt|gt|ne|neq|leqslant|geqslant)(?![a-zA-Z])')
# Commands that denote numbers or arithmetic, removed before looking for a name on the left.
_NUMERIC_COMMAND_RE = re.compile(
    r'\\(?:[dt]?frac|sqrt|times|cdot|div|pi|left|right|circ|pm|mp|[,;:! %$])(?![a-zA-Z])')
_NAME_RE = re.compile(r'[a-zA-Z\\]')


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
  # A space, not nothing: deleting a control character would join what it separates
  # (4<NUL>2 would read 42); as a space the screen refuses the split number.
  text = _CONTROL_RE.sub(' ', completion)
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
    window = text[-4 * MAX_ANSWER_CHARS:]
    if len(text) > len(window):  # do not start the window inside a number (1234567 -> 567)
      window = re.sub(r'^[\d,.]+', '', window)
    numbers = _NUMBER_RE.findall(window)
    return numbers[-1].rstrip(',').replace('\u2212', '-') if numbers else None
  if fallback != 'none':
    raise ValueError(f"fallback={fallback!r} must be 'last_number' or 'none'")
  return None


def normalize_answer(answer: str) -> str:
  """Strips math-mode wrappers and sentence punctuation that break parsing."""
  answer = _CONTROL_RE.sub(' ', answer).strip()
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
  # The power checks read the exponent as math-verify will: past \left and spacing.
  answer = _EXPONENT_LAYOUT_RE.sub(r'\1', answer)
  if _COMMAND_EXPONENT_RE.search(answer):
    return 'power_tower'
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
  for match in _EXPONENT_GROUP_RE.finditer(answer):
    if _literal_product(match.group(1)) >= MAX_EXPONENT_LITERAL:
      return 'power_tower'  # 2^{9999 \cdot 9999}: each literal is small, the exponent is not
  if _FORBIDDEN_RE.search(answer):
    return 'unbounded_operator'
  for match in _FACTORIAL_RE.finditer(answer):
    if not match.group(1) or int(match.group(1)) >= MAX_COMBINATORIAL_ARG:
      return 'factorial'
  reason = _screen_special_functions(answer)
  if reason is not None:
    return reason
  if _integer_digits(answer) > MAX_INTEGER_DIGITS:
    return 'huge_integer'
  if _SPLIT_NUMBER_RE.search(answer):
    return 'split_number'
  return _screen_relations(answer)


def _literal_product(text: str) -> int:
  """Product of the integer literals in `text` (1 when there are none)."""
  product = 1
  for literal in _INT_LITERAL_RE.findall(text):
    product *= max(int(literal), 1)
    if product >= MAX_EXPONENT_LITERAL:
      break
  return product


def _log10_factorial(n: float) -> float:
  return math.lgamma(n + 1.0) / math.log(10.0)


def _integer_digits(answer: str) -> float:
  """Upper bound on the decimal digits of the exact integers `answer` denotes: integer powers
  (e * log10 b), factorials (log10 n!), binomials (n log10 2) and Gamma (log10 (n-1)!), all
  times the largest exponent on a non-literal base ((99!)^{30} is 30 times 99!'s 156 digits)."""
  digits = 0.0
  for match in _INT_POWER_RE.finditer(answer):
    base, exponent = int(match.group(1)), match.group(2)
    if base >= 2:
      digits += _literal_product(exponent) * math.log10(base)
  for match in _FACTORIAL_RE.finditer(answer):
    if match.group(1):
      digits += _log10_factorial(min(int(match.group(1)), MAX_COMBINATORIAL_ARG))
  for match in _SPECIAL_RE.finditer(answer):
    name = match.group(0)
    if name in ('\\left', '\\right'):
      continue
    if name == '\\choose':
      arguments = (answer[:match.start()].rsplit('{', 1)[-1] + ' '
                   + answer[match.end():].split('}', 1)[0])
    else:
      first, end = _argument_after(answer, match.end())
      arguments = first or ''
      if name.endswith('binom'):
        arguments += ' ' + (_argument_after(answer, end)[0] or '')
    total = min(sum(float(x) for x in _LITERAL_RE.findall(arguments)), MAX_COMBINATORIAL_ARG)
    if name.endswith(('binom', 'choose')):
      digits += total * math.log10(2.0)  # C(n, k) < 2^n
    else:
      digits += _log10_factorial(max(total - 1.0, 0.0))  # Gamma(n) = (n - 1)!
  symbolic_exponent = max((int(match.group(2)) for match in _POWER_RE.finditer(answer)
                           if not match.group(1).isdigit()), default=1)
  return digits * max(symbolic_exponent, 1)


def _small_argument(text: str | None) -> bool:
  """True when `text` is a sum of names and literals whose total stays below the bound."""
  if text is None:
    return False
  text = _SIMPLE_FRAC_RE.sub(r' \1 ', text)  # \frac{1}{2}: no larger than its numerator
  if (not _SMALL_ARGUMENT_RE.fullmatch(text) or _SPECIAL_RE.search(text)
      or _PRODUCT_RE.search(text)):
    return False
  return sum(float(x) for x in _LITERAL_RE.findall(text)) < MAX_COMBINATORIAL_ARG


def _argument_after(answer: str, pos: int) -> tuple[str | None, int]:
  """(argument, end) for the argument starting at `pos`: a bracketed group's content or one
  token, and the position after it; (None, pos) when there is none."""
  while pos < len(answer) and answer[pos].isspace():
    pos += 1
  if answer.startswith('\\left', pos):
    pos += len('\\left')
  if pos >= len(answer):
    return None, pos
  opening = answer[pos]
  closing = {'{': '}', '(': ')', '[': ']'}.get(opening)
  if closing is None:
    token = _TOKEN_RE.match(answer, pos)
    return (token.group(0), token.end()) if token else (None, pos)
  depth = 0
  for end in range(pos, len(answer)):
    if answer[end] == opening:
      depth += 1
    elif answer[end] == closing:
      depth -= 1
      if depth == 0:
        return answer[pos + 1:end].replace('\\right', ''), end + 1
  return None, pos


def _screen_special_functions(answer: str) -> str | None:
  """Binomials and Gamma evaluate exactly to huge integers: their arguments must be small."""
  for match in _BINOM_RE.finditer(answer):
    upper, end = _argument_after(answer, match.end())
    lower, _ = _argument_after(answer, end)
    if not (_small_argument(upper) and _small_argument(lower)):
      return 'special_function'
  for match in _CHOOSE_RE.finditer(answer):
    # {n \choose k}: the operands are the rest of the innermost group around \choose.
    left = answer[:match.start()].rsplit('{', 1)[-1]
    right = answer[match.end():].split('}', 1)[0]
    if not (_small_argument(left) and _small_argument(right)):
      return 'special_function'
  for match in _GAMMA_RE.finditer(answer):
    after = answer[match.end():].lstrip()
    if after.startswith(('(', '{', '[', '\\left')):  # a function call, not the letter
      if not _small_argument(_argument_after(answer, match.end())[0]):
        return 'special_function'
    elif after.startswith(('^', '_')) or after[:1].isdigit():
      return 'special_function'
  return None


def _top_level_parts(answer: str) -> list[str]:
  """`answer` split at commas, semicolons and `or` / `and` / `\\quad` outside brackets
  (x = 1, y = 2 is two parts)."""
  answer = _ALTERNATIVES_RE.sub(',', answer)
  parts, depth, start = [], 0, 0
  for pos, char in enumerate(answer):
    if char in '{([':
      depth += 1
    elif char in '})]':
      depth -= 1
    elif char in ',;' and depth == 0:
      parts.append(answer[start:pos])
      start = pos + 1
  parts.append(answer[start:])
  return parts


def _screen_relations(answer: str) -> str | None:
  """Arrows, chained equations and equations between numbers are not a final answer.

  math-verify reads `x = 41 = 42`, `41 = 42` and `41 \\to 42` as their last side (42); a
  demanding grader reads a false or multi-step statement, which scores 0. One equation with a
  name on the left (`x = 5`, `f(2) = 7`) and chained inequalities (`1 < x \\le 3`) stay.
  """
  if _ARROW_RE.search(answer):
    return 'arrow'
  for part in _top_level_parts(answer):
    equalities = len(_EQUALITY_RE.findall(part))
    if equalities == 0:
      continue
    if equalities + len(_INEQUALITY_RE.findall(part)) > 1:
      return 'chained_relation'
    lhs, rhs = _EQUALITY_RE.split(part, maxsplit=1)
    if not _NAME_RE.search(_NUMERIC_COMMAND_RE.sub(' ', lhs)):
      # 41 = 42, 6 \times 8 = 42: a value left of `=`; only a true one between two plain
      # numbers (\frac{1}{2} = 0.5) is decidable here and stays.
      lhs_value = plain_value(lhs)
      if lhs_value is None or lhs_value != plain_value(rhs):
        return 'numeric_equation'
  return None


def plain_value(answer: str) -> Fraction | None:
  """The exact value of a plain number (integer, decimal, `a/b`, `\\frac{a}{b}`), else None."""
  # Spaces only at the ends: `4 2` is not the number 42 (a space inside stays for the screen).
  text = answer.strip()
  if _DECIMAL_RE.fullmatch(text):
    return Fraction(text.replace(',', ''))
  match = _SLASH_FRAC_RE.fullmatch(text) or _TEX_FRAC_RE.fullmatch(text)
  if match:
    if match.re is _TEX_FRAC_RE:
      numerator, denominator = int(match.group(1) + match.group(2)), int(match.group(3))
    else:
      numerator, denominator = int(match.group(1)), int(match.group(2))
    return Fraction(numerator, denominator) if denominator else None
  match = _SCI_RE.fullmatch(text)
  if match:
    return Fraction(match.group(1)) * Fraction(10) ** int(match.group(2))
  return None


def fast_verdict(gold: str, answer: str) -> bool | None:
  """Exact verdict when both sides are plain numbers, None when math-verify must decide.

  Exact rational comparison: 0.333333 is not 1/3 (math-verify's default would round both to
  6 decimal places and accept it); 0.5, 1/2 and \\frac{2}{4} are equal.
  """
  g_value, a_value = plain_value(gold), plain_value(answer)
  if g_value is None or a_value is None:
    return None
  return g_value == a_value


def prepare_gold(reference: str) -> str:
  """Reference answer text: extracted when it holds a box / '####' marker, then normalized."""
  if _BOX_RE.search(reference) or '####' in reference:
    extracted = extract_answer(reference, fallback='none')
    if extracted is not None:
      reference = extracted
  return normalize_answer(reference)
