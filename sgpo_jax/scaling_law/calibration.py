"""Calibrated forecasts of a run's final value: a point forecast learnt across finished
runs and a jackknife interval from those runs' leave-one-out errors (conformal.py: coverage
measured, not guaranteed).

What a forecast sees of a run (`PrefixFeatures`, computed by `prefix_features`) is its
first `observe_fraction` of steps: the flat level there (mean of the last third of the
observed points: "it stays where it is") and the fitted trajectory curve's final value.
Point predictors (`PREDICTORS`), each fitted on calibration runs only:

- flat:  the flat level.
- curve: the fitted form's value at the end of the run (flat when no form could be fitted).
- drift: flat + the median over calibration runs of (final - flat): how much runs like
  this one still moved after the same fraction; over the other seeds of the run's own
  config (`group`) when at least MIN_GROUP_RECORDS of them are calibration runs.
- blend: flat + a + b·(curve - flat), a and b by least squares over calibration runs
  (b clipped to [0, 1]): the curve's extrapolation, shrunk by how well it has done.
- pooled (the default; a hierarchical "joint law" over runs): with at least
  MIN_REGRESSION_RECORDS calibration runs of the run's own regime, final = a + b·flat by
  least squares over them (b clipped to [0, 1]: a run's prefix is a noisy estimate of its
  level, so the forecast shrinks it towards the regime's), plus an offset: the mean
  leave-one-out residual of the regime's other seeds of the run's config (when there are
  MIN_GROUP_RECORDS of them), else of its method's runs, shrunk by k/(k + lambda) for k
  such runs. lambda = within-group / between-group variance of those residuals over the
  regime's configs (or methods), estimated from the calibration runs by one-way
  random-effects moments (`offset_shrinkage`): offsets shrink little where configs
  really differ and seeds agree, fully where they do not (METHOD_SHRINKAGE when too few
  groups have two runs). With MIN_REGIME_DRIFT_RECORDS to
  MIN_REGRESSION_RECORDS - 1 runs of the regime, and otherwise over every calibration run:
  flat + s·median((final - flat)/s) with s = `residual_scale` (moves of runs at other
  levels, rescaled to this run's). A regime's runs count only when the run
  `matches_regime`: its first reading and flat level lie within their range.

Scores are normalised (Lei et al. 2018): each residual is divided by a scale known before
the run ends, sqrt(p(1 - p)) of the flat level p for accuracies and rewards (floored at
MIN_SCALE), and the target's interval is its quantile times the target's own scale: runs
near 0 or 1 move less than runs near 0.5, so pooled runs of different levels share one
calibrated quantile without the quiet ones' small errors narrowing the busy ones' intervals.

Calibration runs: those of the run's metric and observe fraction; of its regime (same task,
model and budget) when at least MIN_POOL_RECORDS of them exist, else of its method when
MIN_METHOD_RECORDS exist, else all. Intervals: the predictor's absolute errors on the
calibration runs, each forecast by the predictor fitted without that run (leave-one-out),
are the conformal scores (see `conformal`). A run is never in its own calibration set
(`CalibrationSet.without`); with leave_out_group neither is any seed of its config, and each
score is then leave-group-out too (a forecast for an unseen config misses by more than one
whose other seeds are known, and its interval must say so).

A run's regime comes from its config.json `regime` (the comparison protocol's named
regimes) unless given; a run without one is forecast from the method or whole pool.

Sets are JSON files; a name ending in `.xz` is read and written xz-compressed (the shipped
sets are, to keep the repository small).
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from sgpo_jax.scaling_law.conformal import conformal_interval, conformal_quantile
from sgpo_jax.scaling_law.forecasting import forecast
from sgpo_jax.scaling_law.trajectory import DEFAULT_FORMS

# Range of each metric; intervals are cut to it (they always keep their point).
METRIC_BOUNDS = {'eval_accuracy': (0.0, 1.0), 'reward_mean': (0.0, 1.0),
                 'reward_over_profile': (-1.0, 1.0)}
DEFAULT_PREDICTOR = 'pooled'
# Calibrate on runs of the run's own regime when at least this many exist (the fewest that
# give a finite 90% conformal interval), else of its method, else on all.
MIN_POOL_RECORDS = 9
MIN_METHOD_RECORDS = 10
# The drift predictor uses the other seeds of the run's own config when this many exist.
MIN_GROUP_RECORDS = 2
FLAT_TAIL = 1 / 3  # the flat level is the mean of the last third of the observed points
MIN_SCALE = 0.1  # floor of the residual scale sqrt(p(1 - p)) (reached at p ~ 0.01)
# pooled: a regression of final on flat needs this many runs of the regime (as many as a
# finite 90% conformal interval needs), a regime median move this many.
MIN_REGRESSION_RECORDS = 9
MIN_REGIME_DRIFT_RECORDS = 4
# pooled: the fallback lambda of an offset's k / (k + lambda) shrinkage (pseudo-runs at
# offset 0) when `offset_shrinkage` cannot estimate it (fewer than two groups of two runs).
METHOD_SHRINKAGE = 4.0
# A regime's runs calibrate a run only when its flat level lies within their flat levels'
# range widened by this fraction of the range on each side (at least MIN_SUPPORT_MARGIN):
# a run outside it (e.g. a regime retuned since the calibration set was built) is not
# shrunk towards a level its regime no longer has.
SUPPORT_MARGIN = 1.0
MIN_SUPPORT_MARGIN = 0.02


@dataclasses.dataclass(frozen=True)
class PrefixFeatures:
  """What a forecast from the first `observe_fraction` of a run can use, and (for a
  finished run) the value it should have predicted."""

  run: str
  metric: str
  method: str | None
  observe_fraction: float
  total_steps: int
  observed_until_step: float
  n_observed: int
  flat: float
  curve: float | None  # None: no form could be fitted to the prefix
  form: str | None
  actual: float | None  # final value (mean of the last 5% of steps); None while running
  group: str = ''  # runs sharing a group (e.g. the seeds of one config) are held out together
  regime: str = ''  # runs of one task, model and budget: the preferred calibration pool
  initial: float | None = None  # first reading (the initial policy's, for eval_accuracy)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def flat_level(values: Sequence[float]) -> float:
  """Mean of the last third (at least one) of the observed values."""
  values = np.asarray(values, dtype=float)
  if values.size == 0:
    raise ValueError('no observed values; observe a larger fraction of the run')
  tail = max(1, int(math.ceil(values.size * FLAT_TAIL)))
  return float(np.mean(values[-tail:]))


def metric_is_bounded(metric: str) -> bool:
  """Whether curve fits may confine the metric to [0, 1] (reward_over_profile can be < 0)."""
  return METRIC_BOUNDS.get(metric) == (0.0, 1.0)


def prefix_features(run: Any, observe_fraction: float, *, forms: Sequence[str] = DEFAULT_FORMS,
                    bounded: bool = True, group: str = '', regime: str = '') -> PrefixFeatures:
  """Features of `run` (a `runs.RunRecord`) seen from its first `observe_fraction` of steps."""
  bounded = bounded and metric_is_bounded(run.metric)
  if not 0 < observe_fraction <= 1:
    raise ValueError(f'observe_fraction={observe_fraction} must be in (0, 1]')
  cut = observe_fraction * run.total_steps + 1e-9
  seen = run.steps <= cut
  if not seen.any():
    raise ValueError(f'{run.name}: no {run.metric} logged at or before step {cut:.0f} '
                     f'({observe_fraction:g} of {run.total_steps} steps)')
  regime = regime or getattr(run, 'regime', '')
  curve = form = None
  try:
    result = forecast(run.steps, run.values, run.total_steps, observe_fraction, forms=forms,
                      bounded=bounded, n_samples=50)
    curve, form = float(result.predicted_final_reward), result.form
  except ValueError:
    pass
  return PrefixFeatures(
      run=run.name, metric=run.metric, method=run.method, observe_fraction=observe_fraction,
      total_steps=int(run.total_steps), observed_until_step=float(run.steps[seen][-1]),
      n_observed=int(seen.sum()), flat=flat_level(run.values[seen]), curve=curve, form=form,
      actual=float(run.actual_final) if run.finished else None, group=group, regime=regime,
      initial=float(run.values[0]))


# A predictor: (target, calibration records) -> point forecast.
Predictor = Callable[[PrefixFeatures, Sequence[PrefixFeatures]], float]


def _curve_or_flat(record: PrefixFeatures) -> float:
  return record.flat if record.curve is None else record.curve


def predict_flat(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> float:
  del records
  return target.flat


def predict_curve(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> float:
  del records
  return _curve_or_flat(target)


def predict_drift(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> float:
  known = [record for record in records if record.actual is not None]
  siblings = [record for record in known if target.group and record.group == target.group]
  if len(siblings) >= MIN_GROUP_RECORDS:
    known = siblings
  moves = [record.actual - record.flat for record in known]
  return target.flat + (float(np.median(moves)) if moves else 0.0)


def blend_coefficients(records: Sequence[PrefixFeatures]) -> tuple[float, float]:
  """(a, b) minimising sum (final - flat - a - b·(curve - flat))^2, b clipped to [0, 1]."""
  known = [record for record in records if record.actual is not None]
  if not known:
    return 0.0, 0.0
  moves = np.array([record.actual - record.flat for record in known])
  leads = np.array([_curve_or_flat(record) - record.flat for record in known])
  if len(known) < 3 or np.ptp(leads) < 1e-12:
    return float(np.mean(moves)), 0.0
  design = np.stack([np.ones_like(leads), leads], axis=1)
  (a, b), *_ = np.linalg.lstsq(design, moves, rcond=None)
  if not 0.0 <= b <= 1.0:
    b = float(np.clip(b, 0.0, 1.0))
    a = float(np.mean(moves - b * leads))
  return float(a), float(b)


def predict_blend(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> float:
  a, b = blend_coefficients(records)
  return target.flat + a + b * (_curve_or_flat(target) - target.flat)


def shrinkage_line(records: Sequence[PrefixFeatures]) -> tuple[float, float]:
  """(a, b) minimising sum (final - a - b·flat)^2 over finished records, b clipped to
  [0, 1] (a refitted for a clipped b); (mean final, 0) when the flat levels do not vary."""
  known = [record for record in records if record.actual is not None]
  if not known:
    raise ValueError('shrinkage_line needs at least one finished record')
  flats = np.array([record.flat for record in known])
  finals = np.array([record.actual for record in known])
  if len(known) < 2 or np.ptp(flats) < 1e-12:
    return float(np.mean(finals)), 0.0
  b = float(np.sum((flats - flats.mean()) * (finals - finals.mean()))
            / np.sum((flats - flats.mean()) ** 2))
  b = float(np.clip(b, 0.0, 1.0))
  return float(np.mean(finals - b * flats)), b


def scaled_drift(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> float:
  """flat + s·median((final - flat)/s) over finished records, s = `residual_scale`."""
  known = [record for record in records if record.actual is not None]
  if not known:
    return target.flat
  moves = [(record.actual - record.flat) / residual_scale(record) for record in known]
  return target.flat + residual_scale(target) * float(np.median(moves))


def within_range(value: float, values: Sequence[float]) -> bool:
  """Whether `value` lies within the range of `values`, widened on each side by
  SUPPORT_MARGIN of the range (at least MIN_SUPPORT_MARGIN)."""
  if len(values) == 0:
    return False
  low, high = min(values), max(values)
  margin = max(SUPPORT_MARGIN * (high - low), MIN_SUPPORT_MARGIN)
  return low - margin <= value <= high + margin


def matches_regime(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> bool:
  """Whether `target` looks like a run of the regime `records` come from: its flat level,
  and its first reading when all of them have one (runs of one regime share their initial
  policy), are `within_range` of theirs."""
  if not records or not within_range(target.flat, [record.flat for record in records]):
    return False
  initials = [record.initial for record in records]
  if target.initial is None or any(value is None for value in initials):
    return True
  return within_range(target.initial, initials)


def loo_line_offsets(records: Sequence[PrefixFeatures]) -> np.ndarray:
  """Each finished record's residual from the `shrinkage_line` fitted on the others.

  In closed form from the sums minus each record's own terms (O(n), not n refits): the
  pooled predictor needs every regime run's offset for every forecast and conformal score.
  """
  flats = np.array([record.flat for record in records], dtype=float)
  finals = np.array([record.actual for record in records], dtype=float)
  n = flats.size
  if n < 2:
    raise ValueError('loo_line_offsets needs at least two finished records')
  m = n - 1
  sx, sy = flats.sum() - flats, finals.sum() - finals
  mean_x, mean_y = sx / m, sy / m
  sxx = np.sum(flats ** 2) - flats ** 2 - m * mean_x ** 2
  sxy = np.sum(flats * finals) - flats * finals - m * mean_x * mean_y
  # shrinkage_line's "flat levels do not vary" case, on the others' range.
  order = np.argsort(flats)
  top = np.where(np.arange(n) == order[-1], flats[order[-2]], flats[order[-1]])
  bottom = np.where(np.arange(n) == order[0], flats[order[1]], flats[order[0]])
  spread = (m >= 2) & (top - bottom >= 1e-12)
  b = np.where(spread, np.clip(sxy / np.where(spread, sxx, 1.0), 0.0, 1.0), 0.0)
  return finals - (mean_y - b * mean_x) - b * flats


def offset_shrinkage(offsets: Sequence[float], labels: Sequence[str]) -> float | None:
  """lambda = sigma_w^2 / tau^2 of a one-way random-effects model offset = effect(label) +
  noise, by the method of moments over the labels with at least two offsets: sigma_w^2 =
  pooled within-label variance, tau^2 = variance of the label means minus the mean of
  sigma_w^2 / k. A label's mean offset over k runs is then shrunk by k / (k + lambda) (its
  posterior mean). inf when the means vary no more than their noise (tau^2 <= 0); None
  when fewer than two labels have two offsets."""
  offsets, labels = np.asarray(offsets, dtype=float), np.asarray(labels)
  groups = [offsets[labels == label] for label in dict.fromkeys(labels.tolist())]
  groups = [group for group in groups if group.size >= 2]
  if len(groups) < 2:
    return None
  within = (sum(float(np.sum((group - group.mean()) ** 2)) for group in groups)
            / sum(group.size - 1 for group in groups))
  means = np.array([group.mean() for group in groups])
  sizes = np.array([group.size for group in groups], dtype=float)
  tau2 = float(np.var(means, ddof=1) - np.mean(within / sizes))
  return within / tau2 if tau2 > 0 else math.inf


def predict_pooled(target: PrefixFeatures, records: Sequence[PrefixFeatures]) -> float:
  known = [record for record in records if record.actual is not None]
  regime = [record for record in known if target.regime and record.regime == target.regime]
  if not matches_regime(target, regime):
    regime = []
  if len(regime) >= MIN_REGRESSION_RECORDS:
    a, b = shrinkage_line(regime)
    siblings = [i for i, record in enumerate(regime)
                if target.group and record.group == target.group]
    if len(siblings) >= MIN_GROUP_RECORDS:
      chosen, labels = siblings, [record.group for record in regime]
    else:
      chosen = [i for i, record in enumerate(regime)
                if target.method is not None and record.method == target.method]
      labels = [str(record.method) for record in regime]
    k = len(chosen)
    if not k:
      return a + b * target.flat
    offsets = loo_line_offsets(regime)
    lam = offset_shrinkage(offsets, labels)
    lam = METHOD_SHRINKAGE if lam is None else lam
    offset = float(np.mean(offsets[chosen])) * (k / (k + lam) if math.isfinite(lam) else 0.0)
    return a + b * target.flat + offset
  if len(regime) >= MIN_REGIME_DRIFT_RECORDS:
    return scaled_drift(target, regime)
  return scaled_drift(target, known)


PREDICTORS: dict[str, Predictor] = {'flat': predict_flat, 'curve': predict_curve,
                                    'drift': predict_drift, 'blend': predict_blend,
                                    'pooled': predict_pooled}


def get_predictor(name: str) -> Predictor:
  if name not in PREDICTORS:
    raise ValueError(f'unknown predictor {name!r}; choose one of {sorted(PREDICTORS)}')
  return PREDICTORS[name]


def loo_residuals(records: Sequence[PrefixFeatures], predictor: str = DEFAULT_PREDICTOR,
                  leave_out_group: bool = False) -> np.ndarray:
  """actual - forecast for each finished record, the predictor fitted on the others (with
  `leave_out_group`, on the records of other groups only: the scores then measure what a
  forecast for an unseen config misses by)."""
  predict = get_predictor(predictor)
  known = [record for record in records if record.actual is not None]
  residuals = []
  for i, record in enumerate(known):
    others = known[:i] + known[i + 1:]
    if leave_out_group and record.group:
      others = [other for other in others if other.group != record.group]
    residuals.append(record.actual - predict(record, others))
  return np.array(residuals)


def residual_scale(record: PrefixFeatures) -> float:
  """sqrt(p(1 - p)) of the flat level for metrics in [0, 1], floored at MIN_SCALE; 1 else."""
  if not metric_is_bounded(record.metric):
    return 1.0
  p = min(max(record.flat, 0.0), 1.0)
  return max(math.sqrt(p * (1.0 - p)), MIN_SCALE)


def normalised_scores(records: Sequence[PrefixFeatures], predictor: str = DEFAULT_PREDICTOR,
                      leave_out_group: bool = False) -> np.ndarray:
  """Leave-one-out (or leave-group-out) residuals divided by each record's
  `residual_scale`."""
  known = [record for record in records if record.actual is not None]
  scales = np.array([residual_scale(record) for record in known])
  return (loo_residuals(known, predictor, leave_out_group) / scales if known
          else np.zeros(0))


@dataclasses.dataclass
class CalibrationSet:
  """Finished runs' prefix features at one observe fraction: what predictors learn from and
  what their intervals are calibrated on."""

  records: list[PrefixFeatures]
  source: str = ''  # where the records came from (a file, or run folders)
  # > 0: a target whose config group has at least this many scores in its pool takes its
  # interval from those alone (`calibrated_forecasts`); 0: from the whole pool. Stored in the
  # set's file, so a set is shipped with the interval rule it was tested with.
  config_scores_min: int = 0

  def __post_init__(self) -> None:
    if not (isinstance(self.config_scores_min, int) and self.config_scores_min >= 0):
      raise ValueError(f'config_scores_min={self.config_scores_min!r} must be an int >= 0 '
                       '(0: intervals from the whole pool)')

  def without(self, run: str, group: str = '') -> 'CalibrationSet':
    """The set minus `run` (and minus every run of `group` when given)."""
    kept = [record for record in self.records
            if record.run != run and not (group and record.group == group)]
    return dataclasses.replace(self, records=kept)

  def select(self, metric: str, observe_fraction: float, method: str | None = None,
             regime: str = '', target: PrefixFeatures | None = None
             ) -> tuple[list[PrefixFeatures], str]:
    """Finished records of `metric` at the fraction nearest `observe_fraction`; of `regime`
    when there are MIN_POOL_RECORDS of them (and, given a `target` run, it
    `matches_regime`), else of `method` when there are MIN_METHOD_RECORDS.
    Returns (records, description)."""
    usable = [r for r in self.records if r.metric == metric and r.actual is not None]
    if not usable:
      return [], f'no calibration runs for {metric}'
    nearest = min({r.observe_fraction for r in usable},
                  key=lambda fraction: abs(fraction - observe_fraction))
    usable = [r for r in usable if r.observe_fraction == nearest]
    same_regime = [r for r in usable if regime and r.regime == regime]
    own = [r for r in usable if method is not None and r.method == method]
    note = ''
    if (len(same_regime) >= MIN_POOL_RECORDS and target is not None
        and not matches_regime(target, same_regime)):
      note = (f' (not of regime {regime}: the run\'s first reading or flat level is outside '
              'the range of its runs\'; was the regime retuned?)')
      same_regime = []
    if len(same_regime) >= MIN_POOL_RECORDS:
      usable, which = same_regime, f'runs of regime {regime}'
    elif len(own) >= MIN_METHOD_RECORDS:
      usable, which = own, f'{method} runs'
    else:
      which = 'runs of every method'
    return usable, (f'{len(usable)} {which} of {self.source or "the calibration set"}, '
                    f'{metric} from the first {nearest:g}{note}')

  def to_json(self) -> str:
    extra = {'config_scores_min': self.config_scores_min} if self.config_scores_min else {}
    return json.dumps({'source': self.source, **extra,
                       'records': [record.to_dict() for record in self.records]}, indent=1)

  @classmethod
  def from_json(cls, text: str, source: str = '') -> 'CalibrationSet':
    data = json.loads(text)
    records = [PrefixFeatures(**record) for record in data['records']]
    return cls(records, source or data.get('source', ''),
               config_scores_min=int(data.get('config_scores_min', 0)))

  @classmethod
  def load(cls, path: str | Path) -> 'CalibrationSet':
    path = Path(path)
    if not path.exists():
      raise ValueError(f'calibration file {path} does not exist; write one with '
                       '`python -m sgpo_jax.scaling_law calibrate-set` or pass run folders')
    # Named by the JSON it holds: calibration_runs.json whether or not it is compressed.
    return cls.from_json(read_json_text(path), source=path.name.removesuffix('.xz'))

  def save(self, path: str | Path) -> None:
    write_json_text(path, self.to_json())


def read_json_text(path: str | Path) -> str:
  """The text of a JSON file, decompressed when its name ends in `.xz`."""
  path = Path(path)
  if path.suffix == '.xz':
    with lzma.open(path, 'rt', encoding='utf-8') as handle:
      return handle.read()
  return path.read_text()


def write_json_text(path: str | Path, text: str) -> None:
  """Writes `text` to `path`, xz-compressed when its name ends in `.xz`."""
  path = Path(path)
  if path.suffix == '.xz':
    with lzma.open(path, 'wt', encoding='utf-8', preset=9 | lzma.PRESET_EXTREME) as handle:
      handle.write(text)
  else:
    path.write_text(text)


@dataclasses.dataclass(frozen=True)
class CalibratedForecast:
  """A point forecast of the final value with its conformal interval."""

  predicted_final: float
  interval: tuple[float, float]  # inf-wide (cut to the metric's range) with too few runs
  confidence: float
  predictor: str
  n_calibration: int
  calibration: str  # which runs calibrated it
  half_width: float


def calibrated_forecast(target: PrefixFeatures, calibration: CalibrationSet, *,
                        predictor: str = DEFAULT_PREDICTOR, confidence: float = 0.9,
                        leave_out_group: bool = False,
                        config_scores_min: int | None = None) -> CalibratedForecast:
  """Forecast `target`'s final value from calibration runs: never `target` itself, and with
  `leave_out_group` no run of its group (the other seeds of its config) either."""
  return calibrated_forecasts(target, calibration, predictor=predictor,
                              confidences=(confidence,), leave_out_group=leave_out_group,
                              config_scores_min=config_scores_min)[0]


def calibrated_forecasts(target: PrefixFeatures, calibration: CalibrationSet, *,
                         predictor: str = DEFAULT_PREDICTOR,
                         confidences: Sequence[float] = (0.9,),
                         leave_out_group: bool = False,
                         config_scores_min: int | None = None) -> list[CalibratedForecast]:
  """`calibrated_forecast` at each of `confidences`, the point forecast and the conformal
  scores (n leave-one-out forecasts) computed once.

  config_scores_min (None: the set's own `CalibrationSet.config_scores_min`) > 0: when the
  target's config group has at least that many scores in the pool, the interval uses only
  theirs (a conformal interval per config: seeds of one config are exchangeable, configs of
  one regime need not be, e.g. sGPO and the tighter `sgpo_g48_k2`); the point forecast is
  the same either way."""
  if config_scores_min is None:
    config_scores_min = calibration.config_scores_min
  pool = calibration.without(target.run, target.group if leave_out_group else '')
  records, description = pool.select(target.metric, target.observe_fraction, target.method,
                                     target.regime, target)
  point = get_predictor(predictor)(target, records)
  bounds = METRIC_BOUNDS.get(target.metric, (-math.inf, math.inf))
  point = float(np.clip(point, *bounds))
  scores = normalised_scores(records, predictor, leave_out_group) * residual_scale(target)
  if config_scores_min > 0 and target.group:
    own = np.array([r.group == target.group for r in records if r.actual is not None], bool)
    if own.sum() >= config_scores_min:
      scores = scores[own]
      description += f'; interval from the {int(own.sum())} runs of config {target.group}'
  return [CalibratedForecast(
      predicted_final=point, interval=conformal_interval(point, scores, confidence, bounds),
      confidence=confidence, predictor=predictor, n_calibration=len(records),
      calibration=description, half_width=conformal_quantile(scores, confidence))
          for confidence in confidences]
