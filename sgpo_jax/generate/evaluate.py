"""Held-out evaluation: greedy accuracy (and optional pass@k) with the run's sampler.

Every accuracy comes with its binomial standard error `eval_accuracy_se` =
sqrt(p (1 - p) / n) over the n held-out problems (n = 2048 keeps it <= 1.1 points).
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np

from sgpo_jax.generate.sampler import Sampler
from sgpo_jax.parallel import processes


def decode_rows(tokenizer, tokens_RxN: np.ndarray, mask_RxN: np.ndarray) -> list[str]:
  return [tokenizer.decode([int(t) for t, m in zip(row, mrow) if m])
          for row, mrow in zip(tokens_RxN, mask_RxN)]


def accuracy_se(accuracy: float, n: int) -> float:
  """Binomial standard error sqrt(p (1 - p) / n) of an accuracy p measured on n problems."""
  if n <= 0:
    raise ValueError(f'n={n} problems: an accuracy needs at least one')
  if not 0.0 <= accuracy <= 1.0:
    raise ValueError(f'accuracy={accuracy} is outside [0, 1]')
  return math.sqrt(accuracy * (1.0 - accuracy) / n)


def evaluate(sampler: Sampler, params, queries: Sequence, tokenizer, reward_fn, rng, *,
             pass_k: int = 0, temperature: float = 1.0, ledger=None) -> dict[str, float]:
  """Greedy accuracy over `queries`; with pass_k > 0 also pass@k at `temperature`.

  Eval FLOPs go to the ledger's 'eval' category, which is reported but kept out of the
  training total (every method pays the same eval cost).
  """
  prompts = [tokenizer.encode_prompt(q.prompt) for q in queries]
  out = sampler.sample(params, prompts, list(range(len(prompts))), rng, temperature=0.0)
  rewards = processes.score_across_processes(
      reward_fn, decode_rows(tokenizer, out.tokens_RxN, out.mask_RxN), list(queries))
  count_generation(ledger, 'eval', sampler, out, len(prompts))
  accuracy = float(np.mean(rewards >= 1.0)) if len(rewards) else 0.0
  result = {'eval_accuracy': accuracy,
            'eval_accuracy_se': accuracy_se(accuracy, len(rewards)) if len(rewards) else 0.0}
  by_difficulty: dict[int, list[float]] = {}
  for q, r in zip(queries, rewards):
    if q.difficulty is not None:
      by_difficulty.setdefault(int(q.difficulty), []).append(float(r >= 1.0))
  for d, values in sorted(by_difficulty.items()):
    result[f'eval_accuracy_d{d}'] = float(np.mean(values))
  if pass_k > 0:
    rep_prompts = [p for p in prompts for _ in range(pass_k)]
    rep_queries = [q for q in queries for _ in range(pass_k)]
    out = sampler.sample(params, rep_prompts, list(range(len(rep_prompts))),
                         jax.random.fold_in(rng, 1), temperature=temperature)
    solved = processes.score_across_processes(
        reward_fn, decode_rows(tokenizer, out.tokens_RxN, out.mask_RxN), rep_queries) >= 1.0
    result[f'eval_pass@{pass_k}'] = float(np.mean(solved.reshape(-1, pass_k).any(axis=1)))
    count_generation(ledger, 'eval', sampler, out, len(rep_prompts))
  return result


def count_generation(ledger, category: str, sampler: Sampler, out, num_prompts: int) -> None:
  """Adds the FLOPs of every sampler call behind `out` (filler rows included as computed)."""
  if ledger is None:
    return
  if hasattr(sampler, 'count_generation'):  # the continuous sampler counts its own work
    sampler.count_generation(ledger, category, out, num_prompts)
    return
  lengths = np.asarray(out.lengths_R)
  prompt_lens = (np.zeros_like(lengths) if out.prompt_lens_R is None
                 else np.asarray(out.prompt_lens_R))
  for call, (bucket, steps) in enumerate(out.calls):
    valid = min(sampler.rows, num_prompts - call * sampler.rows)
    # The prefill emits the first token; the loop ran steps - 1 single-token decode steps.
    ledger.add_generation(category, rows=sampler.rows, prompt_len=bucket,
                          new_tokens=max(steps - 1, 0),
                          valid_rows=valid, cache_len=bucket + sampler.max_new_tokens)
    # Token slots: the prefill rectangle plus every row per decode step; useful: the real
    # prompt tokens and the generated tokens fed back (each but the last).
    lens = lengths[call * sampler.rows:call * sampler.rows + valid]
    ledger.add_tokens(category, sampler.rows * (bucket + max(steps - 1, 0)),
                      int(np.sum(prompt_lens[call * sampler.rows:call * sampler.rows + valid]))
                      + int(np.sum(np.maximum(lens - 1, 0))))
