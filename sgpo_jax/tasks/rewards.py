"""Rewards by name: the built-in registry and user callables, spelled in `data.reward`.

`data.reward` is one term or a comma-separated weighted sum of terms:

    'arithmetic'                                  a built-in, registered by `register_reward`
    'my_rewards:correct'                          `correct` from module `my_rewards`
    'my_rewards:fmt=0.2,my_rewards:correct=1.0'   0.2 * fmt + 1.0 * correct

A term is a registered name or `module.path:function`, the module importable from the
working directory or any installed package; `=weight` is optional (default 1). A lone term
without a weight is used as is (a built-in computes exactly what it always did).

A user function is called with keyword arguments, one list entry per completion, like TRL's
`reward_funcs`: `completions` (decoded text), `prompts` (each query's prompt: a string or
a list of chat messages), `answer`, `id`, `difficulty`, and every other column of the rows
under its own name (None where a row lacks it); a function without `**kwargs` receives only
the arguments it names. It returns one finite float per completion. Eval accuracy and the
profile's solve rate count a reward >= 1 as correct.

The contract is enforced twice: `startup_check` calls each user function once on a probe
batch of training queries before any compute (a bad result is a `ConfigError`), and every
call checks length and finiteness (a `RewardError` naming the row). An exception inside the
function is re-raised as one line naming it and the first row that raises on its own.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sgpo_jax.errors import ConfigError, UserError, one_line
from sgpo_jax.tasks import arithmetic, math_reward
from sgpo_jax.tasks.query import Query

RewardFn = Callable[[list[str], list[Query]], np.ndarray]
_BUILTINS: dict[str, Callable[[Any], RewardFn]] = {}
RESERVED_ARGS = ('completions', 'prompts', 'answer', 'id', 'difficulty')
PROBE_QUERIES = 4  # startup check: the first few training queries, gold and empty completions


class RewardError(UserError):
  """A user reward broke its contract during the run (one line, naming the row)."""


def register_reward(name: str):
  """Registers `factory(data_config) -> RewardFn` as the built-in reward `name`."""
  def wrap(factory):
    if name in _BUILTINS:
      raise ValueError(f'reward {name!r} is registered twice')
    _BUILTINS[name] = factory
    return factory
  return wrap


def registered_rewards() -> tuple[str, ...]:
  return tuple(sorted(_BUILTINS))


@dataclasses.dataclass(frozen=True)
class RewardTerm:
  spec: str  # a registered name or 'module.path:function'
  weight: float | None  # None: no weight given


def _spelling_help() -> str:
  return (f"give a built-in ({', '.join(registered_rewards())}), module.path:function, or a "
          "weighted list 'pkg.mod:fmt=0.2,pkg.mod:correct=1.0'")


def parse_reward_spec(text: str) -> list[RewardTerm]:
  """The terms of `data.reward`; ValueError (one line, naming the term) on a bad spelling."""
  if not isinstance(text, str) or not text.strip():
    raise ValueError(f'data.reward={text!r} is empty; {_spelling_help()}.')
  terms = []
  for raw in text.split(','):
    term = raw.strip()
    spec, weight = term, None
    if '=' in term:
      spec, weight_text = (part.strip() for part in term.rsplit('=', 1))
      try:
        weight = float(weight_text)
      except ValueError:
        weight = math.nan
      if not math.isfinite(weight):
        raise ValueError(f'data.reward term {term!r}: weight {weight_text!r} is not a finite '
                         'number; write module.path:function=0.5.')
    if not spec:
      raise ValueError(f'data.reward={text!r} has an empty term; {_spelling_help()}.')
    if spec not in _BUILTINS:
      module, _, name = spec.partition(':')
      if not (module and name) or ':' in name:
        raise ValueError(f'data.reward={spec!r} is neither a built-in reward nor '
                         f'module.path:function; {_spelling_help()}.')
    terms.append(RewardTerm(spec, weight))
  return terms


def import_reward(spec: str) -> Callable[..., Any]:
  """The callable `module.path:function` names; ValueError (one line) if it cannot be had."""
  module_name, _, attr = spec.partition(':')
  cwd = os.getcwd()
  if cwd not in sys.path and '' not in sys.path:  # 'python -m' puts it first; pytest may not
    sys.path.insert(0, cwd)
  try:
    module = importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    raise ValueError(f'data.reward term {spec!r}: cannot import {module_name!r} ({e}); put '
                     f'{module_name.replace(".", "/")}.py in the working directory {cwd} or '
                     'install its package.') from None
  except Exception as e:  # noqa: BLE001  the user's module failed while importing
    raise ValueError(f'data.reward term {spec!r}: importing {module_name!r} raised '
                     f'{type(e).__name__}: {one_line(e)}; fix the module.') from None
  fn: Any = module
  for part in attr.split('.'):
    if not hasattr(fn, part):
      defined = [n for n, v in vars(module).items() if callable(v) and not n.startswith('_')
                 and getattr(v, '__module__', None) == module.__name__]
      raise ValueError(f'data.reward term {spec!r}: module {module_name!r} has no {attr!r} '
                       f'(its functions: {", ".join(defined) or "none"}); fix the name.')
    fn = getattr(fn, part)
  if not callable(fn):  # a ValueError like every config check's (errors.config_errors)
    raise ValueError(  # noqa: TRY004
        f'data.reward term {spec!r} is a {type(fn).__name__}, not callable; name a function.')
  return fn


def _wanted_args(fn: Callable[..., Any]) -> tuple[str, ...] | None:
  """The keyword arguments `fn` names, or None when it takes **kwargs (gets everything)."""
  try:
    params = inspect.signature(fn).parameters.values()
  except (TypeError, ValueError):  # a builtin without a signature: give it everything
    return None
  if any(p.kind is p.VAR_KEYWORD for p in params):
    return None
  return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def reward_kwargs(completions: Sequence[str], queries: Sequence[Query]) -> dict[str, list]:
  """The keyword arguments a user reward receives for a batch (module docstring)."""
  columns: dict[str, list] = {}
  for i, q in enumerate(queries):
    for key in q.metadata:
      if key not in RESERVED_ARGS and key not in columns:
        columns[key] = [None] * i  # rows before the first that has it
    for key, values in columns.items():
      values.append(q.metadata.get(key))
  return {'completions': list(completions), 'prompts': [q.prompt for q in queries],
          'answer': [q.answer for q in queries], 'id': [q.id for q in queries],
          'difficulty': [q.difficulty for q in queries], **columns}


def _row(queries: Sequence[Query], i: int) -> str:
  return f'row {i} (query id {queries[i].id!r})'


class CallableReward:
  """A user function as a `RewardFn`: its contract checked on every call."""

  def __init__(self, spec: str, fn: Callable[..., Any]):
    self.spec, self.fn = spec, fn
    self.wanted = _wanted_args(fn)

  def _call(self, completions: Sequence[str], queries: Sequence[Query]) -> Any:
    kwargs = reward_kwargs(completions, queries)
    if self.wanted is not None:
      missing = [name for name in self.wanted if name not in kwargs]
      if missing:
        raise RewardError(f'reward {self.spec}: takes {missing[0]!r} but the rows have no such '
                          f'column (it gets: {", ".join(kwargs)}); rename the parameter or add '
                          '**kwargs.')
      kwargs = {name: kwargs[name] for name in self.wanted}
    return self.fn(**kwargs)

  def _raised(self, error: Exception, completions: Sequence[str],
              queries: Sequence[Query]) -> RewardError:
    where = f'on a batch of {len(completions)}'
    for i in range(len(completions)):  # the first row that fails on its own, if one does
      try:
        self._call(completions[i:i + 1], queries[i:i + 1])
      except Exception:  # noqa: BLE001
        where = f'on {_row(queries, i)}, completion {completions[i][:40]!r}'
        break
    return RewardError(f'reward {self.spec} raised {type(error).__name__}: {one_line(error)} '
                       f'{where}; fix the function (--verbose shows the traceback).')

  def __call__(self, completions: list[str], queries: list[Query]) -> np.ndarray:
    try:
      out = self._call(completions, queries)
    except RewardError:
      raise
    except Exception as e:  # the user's code: one line naming it
      raise self._raised(e, completions, queries) from e
    return self.check_output(out, queries)

  def check_output(self, out: Any, queries: Sequence[Query]) -> np.ndarray:
    n = len(queries)
    try:
      values = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
      raise RewardError(f'reward {self.spec} returned {type(out).__name__} {str(out)[:60]} that '
                        'is not numbers; return one float per completion.') from None
    if values.shape != (n,):
      raise RewardError(f'reward {self.spec} returned shape {values.shape} for {n} completions; '
                        f'return a list or 1-D array of {n} floats, one per completion.')
    # Checked as float32, the dtype the run keeps: 1e39 is finite in float64, inf in float32.
    bad = np.flatnonzero(~np.isfinite(values.astype(np.float32)))
    if bad.size:
      raise RewardError(f'reward {self.spec} returned {values[bad[0]]} for {_row(queries, bad[0])}'
                        f' ({bad.size} non-finite of {n} in float32); return finite floats.')
    return values.astype(np.float32)

  def startup_check(self, queries: Sequence[Query]) -> None:
    probe = list(queries[:PROBE_QUERIES]) * 2
    completions = [q.answer for q in queries[:PROBE_QUERIES]] + [''] * len(probe[len(probe) // 2:])
    try:
      self(completions, probe)
    except RewardError as e:
      raise ConfigError(f'startup check of data.reward on {len(probe)} probe completions (gold '
                        f'answers and empty strings): {e}') from e

  def close(self) -> None:
    closer = getattr(self.fn, 'close', None)
    if callable(closer):
      closer()


class WeightedReward:
  """sum_i weight_i * reward_i, float32[N]."""

  def __init__(self, terms: Sequence[tuple[float, RewardFn]]):
    self.terms = list(terms)

  def __call__(self, completions: list[str], queries: list[Query]) -> np.ndarray:
    total = np.zeros(len(completions), np.float64)
    for weight, fn in self.terms:
      total += weight * np.asarray(fn(completions, queries), np.float64).reshape(len(completions))
    out = total.astype(np.float32)
    if not np.isfinite(out).all():  # each term is finite; their weighted sum may not be
      raise RewardError(f'the weighted reward sum is {out[~np.isfinite(out)][0]} for a completion; '
                        'lower the weights or the terms\' scale.')
    return out

  def startup_check(self, queries: Sequence[Query]) -> None:
    for _, fn in self.terms:
      check = getattr(fn, 'startup_check', None)
      if check is not None:
        check(queries)

  def close(self) -> None:
    for _, fn in self.terms:
      closer = getattr(fn, 'close', None)
      if callable(closer):
        closer()


def check_reward_spec(text: str) -> None:
  """Config check: the spelling parses and every user term imports as a callable."""
  for term in parse_reward_spec(text):
    if term.spec not in _BUILTINS:
      import_reward(term.spec)


def build_term(spec: str, data_config: Any) -> RewardFn:
  if spec in _BUILTINS:
    return _BUILTINS[spec](data_config)
  return CallableReward(spec, import_reward(spec))


def get_reward_fn(data_config: Any) -> RewardFn:
  """The batched reward `data.reward` spells: `fn(completions, queries) -> float32[N]`."""
  terms = parse_reward_spec(data_config.reward)
  if len(terms) == 1 and terms[0].weight is None:
    return build_term(terms[0].spec, data_config)
  return WeightedReward([(1.0 if t.weight is None else t.weight, build_term(t.spec, data_config))
                         for t in terms])


def startup_check(reward_fn: RewardFn, queries: Sequence[Query]) -> None:
  """Runs the reward's contract check on a probe batch, if it has one (user rewards do)."""
  check = getattr(reward_fn, 'startup_check', None)
  if check is not None and queries:
    check(queries)


# --- built-ins ---------------------------------------------------------------------------------


@register_reward('arithmetic')
def _arithmetic(data_config: Any) -> RewardFn:
  """The embedded task's exact match (+ `data.format_reward` for a well-formed answer)."""
  return functools.partial(arithmetic.score, format_reward=float(data_config.format_reward))


@register_reward('math')
def _math(data_config: Any) -> RewardFn:
  """`MathVerifier`: answer extraction + math-verify in killable workers."""
  return math_reward.MathVerifier(num_workers=int(data_config.math_workers))
