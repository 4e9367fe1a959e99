"""The sGPO profiling pass: k samples per training query under the initial policy -> p_hat.

Results are appended to `profile.jsonl` as each chunk of queries finishes, so a killed
pass resumes where it stopped and never re-samples a finished query (rows with a
`n_correct` are final). After allocation `train.py` rewrites the file with each query's
`group_size` and `phase` (docs/outputs.md).

Row ids for the sampler's per-row RNG are `query_index * k + j`, so a query's samples do
not depend on chunking or on which queries were already done.

Standalone: `python -m sgpo_jax.main --stage profile --config default --workdir
DIR` builds the initial policy, profiles the pool, and writes profile.jsonl and
plots/p_hat_histogram.png.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from sgpo_jax.generate.evaluate import count_generation, decode_rows
from sgpo_jax.generate.sampler import Sampler
from sgpo_jax.outputs import metrics as metrics_lib
from sgpo_jax.parallel import processes

PROFILE_FILE = 'profile.jsonl'
PROFILE_STREAM = 0x9F0F


def read_profile(path: str) -> dict[int, dict]:
  """Finished queries from a (partial) profile.jsonl: {pool index: row}."""
  return {int(r['id']): r for r in metrics_lib.read_jsonl(path) if r.get('n_correct') is not None}


def profile_queries(sampler: Sampler, params, queries: Sequence, tokenizer, reward_fn, *,
                    num_samples: int, temperature: float, seed: int, path: str, ledger=None,
                    queries_per_flush: int | None = None, show_progress: bool = True,
                    settled: Callable[[int, int], bool] | None = None
                    ) -> dict[str, np.ndarray]:
  """Profiles every query not yet in `path`; returns arrays over the whole pool.

  settled(n_correct, n_drawn) -> True stops sampling a query early (profile.early_stop):
  samples are then drawn one per query per round, and a query leaves the round robin once
  settled, so its row in profile.jsonl has n_samples < num_samples. Sample j of a query is
  row id query_index * k + j with or without early stopping.

  Returns {'query_index', 'n_samples', 'n_correct', 'p_hat'} ordered by pool index.
  """
  # Process 0's view: it may already be appending while another process would read.
  done = {int(k): v for k, v in processes.broadcast_from_writer(
      {str(k): v for k, v in read_profile(path).items()} if processes.is_writer() else None
  ).items()}
  todo = [i for i in range(len(queries)) if i not in done]
  if ledger is not None and done:
    # A pass finished (or killed) in an earlier process already paid for these queries.
    ledger.add('profile', sum(r.get('flops_computed', 0.0) for r in done.values()),
               sum(r.get('flops_useful', 0.0) for r in done.values()))
  rng = jax.random.fold_in(jax.random.key(seed), PROFILE_STREAM)
  per_call = max(1, sampler.rows // num_samples)
  # Early stop shrinks the rows of later rounds; a chunk spanning several sampler calls
  # per round is what turns fewer rows into fewer (FLOPs-counted) calls.
  per_flush = queries_per_flush or (per_call * 8 if settled is None else sampler.rows * 8)
  round_size = num_samples if settled is None else 1
  bar = tqdm(total=len(queries), initial=len(done), desc='profile', unit='q',
             disable=not show_progress)
  # closed on any exit, so a one-line error never lands on the bar's unfinished line
  with bar:
    start = time.time()
    for chunk_start in range(0, len(todo), per_flush):
      chunk = todo[chunk_start:chunk_start + per_flush]
      drawn = dict.fromkeys(chunk, 0)
      correct = dict.fromkeys(chunk, 0)
      flops_before = (0.0, 0.0) if ledger is None else (ledger.computed('profile'),
                                                        ledger.useful('profile'))
      active = list(chunk)
      while active:
        prompts, row_ids, row_queries, row_q = [], [], [], []
        for qi in active:
          prompt = tokenizer.encode_prompt(queries[qi].prompt)
          for j in range(drawn[qi], drawn[qi] + round_size):
            prompts.append(prompt)
            row_ids.append(qi * num_samples + j)
            row_queries.append(queries[qi])
            row_q.append(qi)
        out = sampler.sample(params, prompts, row_ids, rng, temperature=temperature)
        count_generation(ledger, 'profile', sampler, out, len(prompts))
        rewards = processes.score_across_processes(
            reward_fn, decode_rows(tokenizer, out.tokens_RxN, out.mask_RxN), row_queries)
        for qi, ok in zip(row_q, np.asarray(rewards) >= 1.0):
          correct[qi] += int(ok)
        for qi in active:
          drawn[qi] += round_size
        active = [qi for qi in active if drawn[qi] < num_samples
                  and not (settled is not None and settled(correct[qi], drawn[qi]))]
      rows = []
      flops_after = flops_before if ledger is None else (ledger.computed('profile'),
                                                         ledger.useful('profile'))
      for qi in chunk:
        rows.append({'id': qi, 'n_samples': drawn[qi], 'n_correct': correct[qi],
                     'p_hat': correct[qi] / drawn[qi], 'group_size': None, 'phase': None,
                     # The chunk's FLOPs, shared out, so a later process can count them.
                     'flops_computed': (flops_after[0] - flops_before[0]) / len(chunk),
                     'flops_useful': (flops_after[1] - flops_before[1]) / len(chunk)})
      metrics_lib.append_jsonl(path, rows)
      done.update({r['id']: r for r in rows})
      bar.update(len(chunk))
      bar.set_postfix(q_per_s=f'{(chunk_start + len(chunk)) / max(time.time() - start, 1e-9):.1f}')
  index = np.arange(len(queries))
  n_samples = np.array([done[i]['n_samples'] for i in index], np.int64)
  n_correct = np.array([done[i]['n_correct'] for i in index], np.int64)
  return {'query_index': index, 'n_samples': n_samples, 'n_correct': n_correct,
          'p_hat': n_correct / np.maximum(n_samples, 1)}
