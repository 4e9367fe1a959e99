"""What each process of a multi-process run (one controller per host, `jax.distributed`) does
apart: starting `jax.distributed` (`initialize_distributed`), writing files (`is_writer()`:
process 0 only), sharing what process 0 read (`broadcast_from_writer`) and scoring each row
once, on one process (`score_across_processes`), so host-side decisions never diverge.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils


def is_writer() -> bool:
  """Only process 0 writes files (metrics, reports, plots, profile)."""
  return jax.process_index() == 0


def broadcast_from_writer(obj: Any) -> Any:
  """A JSON-able value as process 0 sees it, on every process.

  Used for state read from the workdir (a partial profile, metrics rows, a warm-start
  cache hit): process 0 may already be appending to those files while another process
  reads them, and on hosts without a shared disk only process 0 has them.
  """
  if jax.process_count() == 1:
    return obj
  blob = np.frombuffer(json.dumps(obj).encode(), np.uint8) if is_writer() else None
  size = int(multihost_utils.broadcast_one_to_all(
      np.int64(0 if blob is None else blob.size)))
  data = np.zeros(size, np.uint8) if blob is None else blob
  data = np.asarray(multihost_utils.broadcast_one_to_all(data), np.uint8)
  return json.loads(data.tobytes().decode())


def score_across_processes(score_fn: Callable[[list, list], Any], completions: Sequence,
                           queries: Sequence) -> np.ndarray:
  """float32 rewards of all rows on every process; each row is scored once, on one process.

  Scoring splits the CPU cost over hosts, and since a reward with timeouts (math-verify) can
  differ between two evaluations of the same text, scoring once keeps every process's
  allocation decisions identical.
  """
  n, count, me = len(completions), jax.process_count(), jax.process_index()
  if count == 1:
    return np.asarray(score_fn(list(completions), list(queries)), np.float32).reshape(n)
  per = -(-n // count)
  lo, hi = min(n, me * per), min(n, (me + 1) * per)
  local = np.zeros(per, np.float32)
  if hi > lo:
    local[:hi - lo] = np.asarray(score_fn(list(completions[lo:hi]), list(queries[lo:hi])),
                                 np.float32)
  return np.asarray(multihost_utils.process_allgather(local)).reshape(-1)[:n]


def initialize_distributed() -> bool:
  """Starts `jax.distributed` when a launcher asked for it; call before any jax computation.

  - JAX_COORDINATOR_ADDRESS + JAX_NUM_PROCESSES + JAX_PROCESS_ID set (`sgpo_jax.launch`,
    multi-node GPU, any hand-rolled launcher): explicit initialization.
  - SGPO_DISTRIBUTED=1: bare `jax.distributed.initialize()`, which auto-detects Cloud TPU
    pods, SLURM, Open MPI and Kubernetes.
  - SGPO_DISTRIBUTED=0 or neither: single process.
  Returns True when initialized.
  """
  mode = os.environ.get('SGPO_DISTRIBUTED', 'auto').lower()
  if mode in ('0', 'false', 'off') or jax.distributed.is_initialized():
    return False
  explicit = all(os.environ.get(k) for k in ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES',
                                             'JAX_PROCESS_ID'))
  if not explicit and mode not in ('1', 'true', 'on'):
    return False
  try:  # gloo is jax 0.10's default for CPU collectives; older/newer lines may differ
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  except (AttributeError, ValueError, KeyError):
    pass
  if explicit:
    jax.distributed.initialize(coordinator_address=os.environ['JAX_COORDINATOR_ADDRESS'],
                               num_processes=int(os.environ['JAX_NUM_PROCESSES']),
                               process_id=int(os.environ['JAX_PROCESS_ID']))
  else:
    jax.distributed.initialize()
  return True
