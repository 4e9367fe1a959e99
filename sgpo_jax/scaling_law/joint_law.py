"""The joint law across runs: plateau and timescales as power laws in model size N
(non-embedding parameters) and initial reward R0, so a new run can be forecast from N
and R0 alone and its fit regularised while its first steps arrive.

    R_inf - R0 = a·(1 - R0)·N^b          (gain fraction g = (R_inf - R0)/(1 - R0) = a·N^b)
    timescale  = c·N^d                    (tau; or t_mid and width, each its own c, d)

Both are fitted by ordinary least squares in log space over per-run fits of one form.
With one run, or runs that all share one N, the exponents cannot be fitted: b = d = 0
(plateau gain fraction and timescales are the runs' geometric means) and a warning says so.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from typing import Any, Sequence

import numpy as np

from sgpo_jax.scaling_law.trajectory import FormPrior, TrajectoryFit, get_form

# Log-sd used when there are too few runs to measure the scatter around the law
# (a factor of ~1.65 either way), and the floor that keeps the prior from being trusted
# more than a handful of runs can justify.
DEFAULT_LOG_SD = 0.5
MIN_LOG_SD = 0.05
MIN_GAIN_FRACTION = 1e-3
MIN_REWARD_SD = 0.02


@dataclasses.dataclass(frozen=True)
class PowerLaw:
  """value = coef · N^exponent, with the log-space scatter of the runs around it."""

  coef: float
  exponent: float
  log_sd: float

  def __call__(self, params_nonembed: float) -> float:
    return self.coef * params_nonembed**self.exponent


def _fit_power_law(sizes: np.ndarray, values: np.ndarray) -> tuple[PowerLaw, bool]:
  """Returns the law and whether the exponent was fitted (False: exponent fixed at 0)."""
  log_n, log_v = np.log(sizes), np.log(values)
  if np.ptp(log_n) > 1e-9:
    exponent, intercept = np.polyfit(log_n, log_v, 1)
    dof, fitted = sizes.size - 2, True
  else:
    exponent, intercept = 0.0, float(np.mean(log_v))
    dof, fitted = sizes.size - 1, False
  scatter = log_v - (intercept + exponent * log_n)
  log_sd = math.sqrt(float(np.sum(scatter**2)) / dof) if dof > 0 else DEFAULT_LOG_SD
  return PowerLaw(float(math.exp(intercept)), float(exponent), max(log_sd, MIN_LOG_SD)), fitted


@dataclasses.dataclass(frozen=True)
class JointLaw:
  """Plateau gain fraction and timescales of one form as power laws in N."""

  form: str
  gain_fraction: PowerLaw  # (R_inf - R0)/(1 - R0) = a·N^b
  timescales: dict[str, PowerLaw]  # per timescale parameter: c·N^d (progress units)
  n_runs: int
  notes: tuple[str, ...] = ()

  def predict_params(self, params_nonembed: float, r0: float) -> dict[str, float]:
    """Zero-shot curve parameters for a run of size N starting at reward R0."""
    _check_size(params_nonembed)
    gain = self.gain_fraction(params_nonembed)
    predicted = {'r0': float(r0), 'r_inf': float(min(max(r0 + gain * (1 - r0), 0.0), 1.0))}
    predicted.update({name: law(params_nonembed) for name, law in self.timescales.items()})
    return predicted

  def prior(self, params_nonembed: float, r0: float, r0_sd: float = 0.05) -> FormPrior:
    """Prior for fitting a new run's prefix: law prediction ± the runs' scatter."""
    predicted = self.predict_params(params_nonembed, r0)
    gain = predicted['r_inf'] - r0
    # Delta method: sd of R_inf from the log-sd of the gain fraction.
    r_inf_sd = max(abs(gain) * self.gain_fraction.log_sd, MIN_REWARD_SD)
    params = {'r0': (float(r0), float(r0_sd)), 'r_inf': (predicted['r_inf'], r_inf_sd)}
    params.update({name: (predicted[name], law.log_sd) for name, law in self.timescales.items()})
    return FormPrior(form=self.form, params=params)

  def to_dict(self) -> dict[str, Any]:
    return {
        'form': self.form, 'n_runs': self.n_runs,
        'gain_fraction': dataclasses.asdict(self.gain_fraction),
        'timescales': {name: dataclasses.asdict(law) for name, law in self.timescales.items()},
        'notes': list(self.notes),
    }


def _check_size(params_nonembed: float) -> None:
  if not (isinstance(params_nonembed, numbers.Real) and math.isfinite(params_nonembed)
          and params_nonembed > 0):
    raise ValueError(f'params_nonembed={params_nonembed!r} must be a positive number of '
                     'non-embedding parameters (write params_nonembed in summary.json)')


def fit_joint_law(params_nonembed: Sequence[float], fits: Sequence[TrajectoryFit]) -> JointLaw:
  """Fits the joint law to per-run fits (all of one form) of runs with sizes N."""
  if len(params_nonembed) != len(fits):
    raise ValueError(f'got {len(params_nonembed)} model sizes for {len(fits)} fits; '
                     'pass one size per run')
  if not fits:
    raise ValueError('the joint law needs at least one fitted run, got none')
  forms = {fit.form for fit in fits}
  if len(forms) != 1:
    raise ValueError(f'runs were fitted with different forms {sorted(forms)}; refit them all '
                     'with one form')
  for size in params_nonembed:
    _check_size(size)
  spec = get_form(fits[0].form)
  notes = []
  gains = []
  for size, fit in zip(params_nonembed, fits):
    r0, r_inf = fit.params['r0'], fit.params['r_inf']
    gain = (r_inf - r0) / (1 - r0) if r0 < 1 - 1e-9 else 0.0
    if gain < MIN_GAIN_FRACTION:
      notes.append(f'run with N={size:.3g} gains {gain:.3g} of its headroom; counted as '
                   f'{MIN_GAIN_FRACTION} so the power law stays defined')
    gains.append(max(gain, MIN_GAIN_FRACTION))
  sizes = np.asarray(params_nonembed, dtype=float)
  gain_law, fitted = _fit_power_law(sizes, np.array(gains))
  timescales = {}
  for name in spec.timescale_params:
    timescales[name], _ = _fit_power_law(sizes, np.array([fit.params[name] for fit in fits]))
  if not fitted:
    message = (f'joint law from {len(fits)} run(s) of one model size N={sizes[0]:.3g}: size '
               'exponents cannot be fitted, using b = d = 0 (no size dependence); add runs '
               'of other sizes')
    warnings.warn(message, stacklevel=2)
    notes.append(message)
  return JointLaw(form=spec.name, gain_fraction=gain_law, timescales=timescales,
                  n_runs=len(fits), notes=tuple(notes))
