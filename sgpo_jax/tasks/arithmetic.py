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

Determinism and disjointness: `generate_queries` is a pure function of its arguments.
`train_eval_queries` draws the eval set first from the seed's eval stream, then the train
set from the train stream excluding every eval prompt, so the two never overlap and the eval
set does not depend on `num_train`.
"""

from __future__ import annotations

import re

import numpy as np

from sgpo_jax.query import Query

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
    low_BxN = np.where(digits_BxN == 1, 0, 10 ** (digits_BxN - 1))
    operands_BxN = rng.integers(low_BxN, 10 ** digits_BxN)
    for row in operands_BxN.tolist():
      query = make_query(row)
      if query.prompt in seen:
        continue
      seen.add(query.prompt)
      queries.append(query)
      if len(queries) == num:
        break
  return queries


def stream_seed(seed: int, stream: int) -> int:
  """An independent 63-bit seed for `stream` (train=0, eval=1) derived from `seed`."""
  return int(np.random.SeedSequence([seed, stream]).generate_state(2, np.uint64)[0] >> 1)


def train_eval_queries(num_train: int, num_eval: int, seed: int, min_digits: int = 1,
                       max_digits: int = 4, num_operands: int = 2
                       ) -> tuple[list[Query], list[Query]]:
  """Disjoint (train, eval) sets: eval drawn first, train excludes eval prompts."""
  eval_queries = generate_queries(num_eval, stream_seed(seed, _EVAL_STREAM), min_digits,
                                  max_digits, num_operands=num_operands)
  train_queries = generate_queries(num_train, stream_seed(seed, _TRAIN_STREAM), min_digits,
                                   max_digits, exclude={q.prompt for q in eval_queries},
                                   num_operands=num_operands)
  return train_queries, eval_queries


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
