"""Conformal-style intervals over runs: pure functions, pinned by hand-computed tests.

A forecaster is scored on calibration runs it was not fitted on; the absolute errors are
the scores, and the interval is point ± q, q the ceil((n + 1)·confidence)-th smallest of n
scores. With a point forecaster fitted on other runs than the scores' (split conformal),
a new run exchangeable with those is covered with probability >= confidence (Vovk et al.;
Lei et al. 2018). calibration.py fits the point forecast on all n calibration runs and takes
the scores from their leave-one-out forecasts: that is the jackknife interval, which has no
such finite-sample guarantee (jackknife+ has 1 - 2(1 - confidence); Barber et al. 2021), so
its coverage is measured on held-out runs (docs/forecasting.md) rather than promised. It
covers whatever the scores saw: curve-form error, run-to-run variation and the noise of the
final value, not just parameter noise.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def conformal_rank(n_scores: int, confidence: float) -> int:
  """1-based rank of the score that is the conformal quantile: ceil((n + 1)·confidence).

  It exceeds n when there are too few scores for the confidence (n < confidence/(1 -
  confidence), e.g. n < 9 at 90%): no finite interval has the guarantee then.
  """
  if not 0 < confidence < 1:
    raise ValueError(f'confidence={confidence} must be in (0, 1), e.g. 0.9')
  if n_scores < 0:
    raise ValueError(f'n_scores={n_scores} must be >= 0')
  # The small epsilon keeps e.g. (9 + 1)·0.9 = 9.000000000000002 at rank 9.
  return int(math.ceil((n_scores + 1) * confidence - 1e-9))


def conformal_quantile(scores: Sequence[float], confidence: float) -> float:
  """The conformal quantile of |scores| (non-finite scores dropped); inf when too few."""
  values = np.sort(np.abs(np.asarray(scores, dtype=float).ravel()))
  values = values[np.isfinite(values)]
  rank = conformal_rank(values.size, confidence)
  if rank > values.size:
    return math.inf
  return float(values[max(rank, 1) - 1])


def conformal_interval(point: float, scores: Sequence[float], confidence: float,
                       bounds: tuple[float, float] = (-math.inf, math.inf)
                       ) -> tuple[float, float]:
  """point ± conformal quantile, cut to `bounds` (a metric's range); always holds `point`."""
  if not math.isfinite(point):
    raise ValueError(f'point={point} must be finite')
  low_bound, high_bound = bounds
  if not low_bound <= high_bound:
    raise ValueError(f'bounds={bounds} must be (low, high) with low <= high')
  half_width = conformal_quantile(scores, confidence)
  low = max(point - half_width, low_bound)
  high = min(point + half_width, high_bound)
  return min(low, point), max(high, point)


def interval_contains(interval: tuple[float, float], value: float) -> bool:
  """low <= value <= high (closed interval)."""
  low, high = interval
  return bool(low <= value <= high)


def coverage(intervals: Sequence[tuple[float, float]], values: Sequence[float]) -> float:
  """Fraction of values inside their intervals; NaN for none."""
  if len(intervals) != len(values):
    raise ValueError(f'got {len(intervals)} intervals but {len(values)} values')
  if not intervals:
    return math.nan
  return float(np.mean([interval_contains(i, v) for i, v in zip(intervals, values)]))
