"""Pool coverage: which training queries a run sampled, and which ones it learned from.

The trainer keeps it, not an allocator, so every method is counted the same way:
- `sampled_Q` (bool [Q]): queries any generation call sampled (profile, probe rounds,
  training rounds); summary.json's `pool_coverage` gives the share never sampled.
- `trained_Q` (int64 [Q]): per query, the trained groups that had reward spread (the groups
  a group-relative advantage learns from), so the summary can say how much of the pool the
  policy learned from and how concentrated that learning was: the share of those groups
  from the most-trained tenth of the pool (0.1 when spread evenly, 1.0 when a tenth of the
  pool took all of it).
Both go into the checkpoint's meta, so a resumed run reports what an uninterrupted one does;
a checkpoint written before a count existed restores None for it (not reported).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sgpo_jax.allocators import dynamic_sampling

SAMPLED_KEY = 'sampled_query_index'  # meta: the sampled queries' indices
TRAINED_KEY = 'trained_groups_per_query'  # meta: sparse [query, count] pairs


def mark_sampled(sampled_Q: np.ndarray, layout) -> None:
  """Marks the queries of a generation call's valid rows."""
  valid_R = np.asarray(layout.valid_R, bool)
  sampled_Q[np.asarray(layout.row_query_index_R)[valid_R]] = True


def mark_trained(trained_Q: np.ndarray, layout, rewards_R: np.ndarray) -> None:
  """Adds one per group of a trained batch that had reward spread to its query's count."""
  kept_R = dynamic_sampling.keep_informative_groups(rewards_R, layout.group_id_R,
                                                    layout.valid_R, layout.num_groups)
  _, first = np.unique(np.asarray(layout.group_id_R)[kept_R], return_index=True)
  np.add.at(trained_Q, np.asarray(layout.row_query_index_R)[kept_R][first], 1)


def pool_coverage(sampled_Q: np.ndarray, trained_Q: np.ndarray | None = None
                  ) -> dict[str, Any]:
  """summary.json's `pool_coverage`: the pool's size, how many of its queries were sampled
  and the share never sampled; with `trained_Q`, the trained groups with reward spread, the
  share of the pool they came from, and the share of them from its most-trained tenth."""
  pool_size, sampled = int(sampled_Q.size), int(np.count_nonzero(sampled_Q))
  out: dict[str, Any] = {'pool_size': pool_size, 'sampled': sampled,
                         'never_sampled_share': 1.0 - sampled / pool_size if pool_size else 0.0}
  if trained_Q is not None and pool_size:
    groups = int(trained_Q.sum())
    top = np.sort(trained_Q)[::-1][:max(1, int(np.ceil(0.1 * pool_size)))]
    out.update(trained_groups=groups,
               trained_prompts_share=float(np.count_nonzero(trained_Q)) / pool_size,
               top_decile_trained_share=float(top.sum()) / groups if groups else 0.0)
  return out


def to_meta(meta: dict, sampled_Q: np.ndarray | None, trained_Q: np.ndarray | None) -> None:
  """Writes the counts into a checkpoint's meta (JSON-ready)."""
  if sampled_Q is not None:
    meta[SAMPLED_KEY] = np.flatnonzero(sampled_Q).tolist()
  if trained_Q is not None:
    meta[TRAINED_KEY] = [[int(q), int(trained_Q[q])] for q in np.flatnonzero(trained_Q)]


def from_meta(meta: dict, resumed: bool, pool_size: int
              ) -> tuple[np.ndarray | None, np.ndarray | None]:
  """(sampled_Q, trained_Q) of a fresh run (zeros) or a resumed one (from its meta; None
  where its checkpoint predates that count)."""
  sampled_Q = trained_Q = None
  if not resumed or SAMPLED_KEY in meta:
    sampled_Q = np.zeros(pool_size, bool)
    sampled_Q[np.asarray(meta.get(SAMPLED_KEY, []), np.int64)] = True
  if not resumed or TRAINED_KEY in meta:
    trained_Q = np.zeros(pool_size, np.int64)
    for q, n in meta.get(TRAINED_KEY, []):
      trained_Q[q] = n
  return sampled_Q, trained_Q
