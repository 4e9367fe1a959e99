"""The embedded verifiable task: integer addition with the sum written reversed.

Owns query generation, the target completion and the exact-match reward.

- Prompt: operands joined by '+' then '=', e.g. '123+45='. Each operand's digit count is
  drawn independently and uniformly from [min_digits, max_digits], then the operand uniformly
  among numbers with that many digits (1 digit: 0..9). Difficulty = the largest digit count.
- `Query.answer` is the sum as a canonical decimal string ('168'); the model must emit the
  digits reversed, least significant first ('861'), then EOS: reversal lets a tiny model
  produce carries in the order it computes them.
- Reward: 1.0 iff the decoded completion (text before EOS) equals the reversed sum exactly;
  otherwise `format_reward` if it is a non-empty digit string, else 0.0.

Difficulty mix (`difficulty_weights`, one weight per level min_digits..max_digits): the pool
holds exactly round(num * w_d / sum(w)) queries of level d (largest remainder), each drawn
with operand digit counts uniform in [min_digits, d] conditioned on the largest being d,
then the levels are shuffled together. Empty weights keep the plain independent draw above.

Determinism and disjointness: `generate_queries` is a pure function of its arguments.
`train_eval_queries` draws the eval set first from the seed's eval stream, then the train
set from the train stream excluding every eval prompt, so the two never overlap and the eval
set does not depend on `num_train`.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from sgpo_jax.tasks.query import Query

_DIGITS_RE = re.compile(r'[0-9]+')
_EVAL_STREAM, _TRAIN_STREAM = 1, 0


def _operand_count(digits: int) -> int:
  return 10 if digits == 1 else 9 * 10 ** (digits - 1)


def _problem_space(min_digits: int, max_digits: int, num_operands: int) -> int:
  return sum(_operand_count(d) for d in range(min_digits, max_digits + 1)) ** num_operands


def make_query(operands: list[int]) -> Query:
  """The query for `operands` (non-negative ints); id = prompt without the '='."""
  expression = '+'.join(str(x) for x in operands)
  return Query(id=expression, prompt=expression + '=', answer=str(sum(operands)),
               difficulty=max(len(str(x)) for x in operands))


def phrase_query(query: Query, template: str) -> Query:
  """`query` asked in words for a chat model: `template` with `{expression}` ('12 + 34'),
  e.g. 'What is {expression}?'. The id and answer stay (ids stay unique across phrasings);
  the reward must read a written answer (data.reward='math'), not the reversed digits."""
  if '{expression}' not in template:
    raise ValueError(f'data.question_template={template!r} has no {{expression}} field; '
                     "write it like 'What is {expression}?'.")
  expression = query.prompt.rstrip('=').replace('+', ' + ')
  return dataclasses.replace(query, prompt=template.replace('{expression}', expression))


def generate_queries(num: int, seed: int, min_digits: int = 1, max_digits: int = 4,
                     exclude: set[str] | None = None, num_operands: int = 2) -> list[Query]:
  """`num` distinct addition queries, deterministic from `seed`.

  Prompts in `exclude` (e.g. the eval set's prompts) are never returned. Raises ValueError
  when fewer than `num` distinct problems exist outside `exclude`.
  """
  if not 1 <= min_digits <= max_digits:
    raise ValueError(f'min_digits={min_digits}, max_digits={max_digits}: need '
                     '1 <= min_digits <= max_digits')
  if num_operands < 2:
    raise ValueError(f'num_operands={num_operands} must be >= 2')
  exclude = exclude or set()
  space = _problem_space(min_digits, max_digits, num_operands)
  excluded_in_space = sum(
      1 for p in exclude
      if re.fullmatch(r'(\d+\+){%d}\d+=' % (num_operands - 1), p)
      and all(min_digits <= len(x) <= max_digits and (x == '0' or x[0] != '0')
              for x in p[:-1].split('+')))
  if num > space - excluded_in_space:
    raise ValueError(
        f'num={num} distinct problems requested but only {space - excluded_in_space} exist with '
        f'{num_operands} operands of {min_digits}..{max_digits} digits outside `exclude`; '
        'lower num_train/num_eval or raise max_digits')
  rng = np.random.default_rng(seed)
  queries, seen = [], set(exclude)
  while len(queries) < num:
    batch = max(64, 2 * (num - len(queries)))
    digits_BxN = rng.integers(min_digits, max_digits + 1, size=(batch, num_operands))
    _take_new_queries(rng, digits_BxN, seen, queries, num - len(queries))
  return queries


def _take_new_queries(rng: np.random.Generator, digits_BxN: np.ndarray, seen: set[str],
                      queries: list[Query], limit: int) -> int:
  """Draws operands with the given digit counts and appends up to `limit` queries whose
  prompts are not in `seen` (updated in place); returns how many were appended."""
  low_BxN = np.where(digits_BxN == 1, 0, 10 ** (digits_BxN - 1))
  operands_BxN = rng.integers(low_BxN, 10 ** digits_BxN)
  taken = 0
  for row in operands_BxN.tolist():
    if taken == limit:
      break
    query = make_query(row)
    if query.prompt in seen:
      continue
    seen.add(query.prompt)
    queries.append(query)
    taken += 1
  return taken


def level_space(level: int, min_digits: int, num_operands: int = 2) -> int:
  """Distinct problems whose largest operand has exactly `level` digits."""
  def upto(d: int) -> int:  # operand values of min_digits..d digits
    return sum(_operand_count(k) for k in range(min_digits, d + 1))

  return upto(level) ** num_operands - upto(level - 1) ** num_operands


def level_counts(num: int, weights: tuple[float, ...] | list[float], min_digits: int,
                 max_digits: int) -> dict[int, int]:
  """{level: queries of that level}: `num` split by `weights` (largest remainder, ties to
  the easier level). One weight per level min_digits..max_digits."""
  levels = list(range(min_digits, max_digits + 1))
  w = np.asarray(weights, dtype=np.float64)
  if w.shape != (len(levels),) or not np.all(np.isfinite(w)) or w.min() < 0 or w.sum() <= 0:
    raise ValueError(f'difficulty_weights={tuple(weights)} must be {len(levels)} non-negative '
                     f'weights (one per level {levels[0]}..{levels[-1]} digits) with a '
                     'positive sum, e.g. (1,) * levels, or () for the plain draw')
  exact = num * w / w.sum()
  counts = np.floor(exact).astype(np.int64)
  order = sorted(range(len(levels)), key=lambda i: (-(exact[i] - counts[i]), i))
  for i in order[:num - int(counts.sum())]:
    counts[i] += 1
  return {d: int(n) for d, n in zip(levels, counts)}


def generate_mixed_queries(num: int, seed: int, weights: tuple[float, ...] | list[float],
                           min_digits: int = 1, max_digits: int = 4,
                           exclude: set[str] | None = None, num_operands: int = 2
                           ) -> list[Query]:
  """`num` distinct queries with exactly `level_counts(...)` of each difficulty level.

  Deterministic from `seed`; prompts in `exclude` are never returned. Raises ValueError,
  naming the level, when a level has fewer distinct problems than its share.
  """
  if not 1 <= min_digits <= max_digits:
    raise ValueError(f'min_digits={min_digits}, max_digits={max_digits}: need '
                     '1 <= min_digits <= max_digits')
  counts = level_counts(num, weights, min_digits, max_digits)
  exclude = exclude or set()
  excluded_by_level: dict[int, int] = {}
  for p in exclude:
    parts = p[:-1].split('+') if p.endswith('=') else []
    if len(parts) == num_operands and all(
        x.isdigit() and min_digits <= len(x) <= max_digits and (x == '0' or x[0] != '0')
        for x in parts):
      level = max(len(x) for x in parts)
      excluded_by_level[level] = excluded_by_level.get(level, 0) + 1
  for d, n in counts.items():
    room = level_space(d, min_digits, num_operands) - excluded_by_level.get(d, 0)
    if n > room:
      raise ValueError(
          f'difficulty level {d} needs {n} distinct problems (difficulty_weights='
          f'{tuple(weights)}, num={num}) but only {room} exist outside `exclude`; lower that '
          'level\'s weight or the pool size')
  rng = np.random.default_rng(seed)
  queries, seen = [], set(exclude)
  for d, n in counts.items():
    taken = 0
    while taken < n:
      batch = max(64, 4 * (n - taken))
      digits_BxN = rng.integers(min_digits, d + 1, size=(batch, num_operands))
      digits_BxN = digits_BxN[digits_BxN.max(axis=1) == d]
      taken += _take_new_queries(rng, digits_BxN, seen, queries, n - taken)
  order = rng.permutation(len(queries))
  return [queries[i] for i in order]


def stream_seed(seed: int, stream: int) -> int:
  """An independent 63-bit seed for `stream` (train=0, eval=1) derived from `seed`."""
  return int(np.random.SeedSequence([seed, stream]).generate_state(2, np.uint64)[0] >> 1)


# The first EVAL_CORE eval problems are the ones the training pool excludes; the rest of
# the eval set is drawn afterwards, excluding the pool. So the pool (and the warm start SFT
# on it) does not move when num_eval grows past EVAL_CORE.
EVAL_CORE = 512
_EVAL_EXTRA_STREAM = 2


def train_eval_queries(num_train: int, num_eval: int, seed: int, min_digits: int = 1,
                       max_digits: int = 4, num_operands: int = 2,
                       difficulty_weights: tuple[float, ...] | list[float] = ()
                       ) -> tuple[list[Query], list[Query]]:
  """Disjoint (train, eval) sets.

  The first min(num_eval, EVAL_CORE) eval problems are drawn first and the train pool
  excludes them; the remaining eval problems are drawn last, excluding the pool and the
  core. Non-empty `difficulty_weights` give every set the same difficulty mix
  (`generate_mixed_queries`).
  """
  if len(difficulty_weights):
    def draw(num, stream, exclude=None):
      return generate_mixed_queries(num, stream_seed(seed, stream), difficulty_weights,
                                    min_digits, max_digits, exclude, num_operands)
  else:
    def draw(num, stream, exclude=None):
      return generate_queries(num, stream_seed(seed, stream), min_digits, max_digits, exclude,
                              num_operands)
  core = draw(min(num_eval, EVAL_CORE), _EVAL_STREAM)
  train_queries = draw(num_train, _TRAIN_STREAM, {q.prompt for q in core})
  extra = []
  if num_eval > EVAL_CORE:
    extra = draw(num_eval - EVAL_CORE, _EVAL_EXTRA_STREAM,
                 {q.prompt for q in core} | {q.prompt for q in train_queries})
  return train_queries, core + extra


def target_text(query: Query) -> str:
  """The completion the model must emit (before EOS): the sum's digits reversed."""
  return query.answer[::-1]


def reward(completion_text: str, query: Query, format_reward: float = 0.0) -> float:
  """1.0 iff `completion_text` (decoded, before EOS) is exactly the reversed sum.

  A wrong but well-formed answer (non-empty digit string) earns `format_reward`.
  """
  if completion_text == target_text(query):
    return 1.0
  if format_reward and _DIGITS_RE.fullmatch(completion_text):
    return float(format_reward)
  return 0.0


def score(completions: list[str], queries: list[Query], format_reward: float = 0.0
          ) -> np.ndarray:
  """Batched `reward`: float32[len(completions)]."""
  if len(completions) != len(queries):
    raise ValueError(f'{len(completions)} completions but {len(queries)} queries; '
                     'pass one query per completion (repeat each query G times)')
  return np.array([reward(c, q, format_reward) for c, q in zip(completions, queries)],
                  dtype=np.float32)
