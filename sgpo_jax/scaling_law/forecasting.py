"""Forecasts of a run's reward trajectory: final reward, plateau, plateau step and the step
to stop at, each with a confidence interval, from an observed prefix (and optionally a
joint-law prior), or zero-shot from the joint law alone.

Steps are raw trainer steps; they are divided by `total_steps` (the planned run length)
to get the progress t the curves use. "Remaining gain" is the predicted rise from the
current fitted value to the plateau R_inf (negative when the reward is predicted to fall);
the plateau step is the first step where it drops below `epsilon`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from sgpo_jax.scaling_law.trajectory import (
  DEFAULT_FORMS,
  FormPrior,
  TrajectoryFit,
  clean_points,
  get_form,
  sample_parameters,
  select_form,
)


@dataclasses.dataclass
class Forecast:
  """What the fitted curve predicts for the rest of a run (rewards in metric units)."""

  form: str
  total_steps: int
  observed_until_step: float  # last step used for the fit (0 for zero-shot)
  n_observed: int
  predicted_final_reward: float  # curve value at total_steps
  final_reward_ci: tuple[float, float]
  predicted_plateau: float  # R_inf
  plateau_ci: tuple[float, float]
  predicted_plateau_step: float  # may exceed total_steps: no plateau within the run
  plateau_step_ci: tuple[float, float]
  recommended_stop_step: int  # upper CI of the plateau step, clipped to [0, total_steps]
  remaining_gain: float  # R_inf - R(observed_until_step)
  remaining_gain_upper: float  # one-sided `confidence` upper bound of remaining_gain
  confidence: float
  epsilon: float
  selection_method: str
  selection_scores: dict[str, float]
  fit: TrajectoryFit = dataclasses.field(repr=False)
  param_samples: np.ndarray = dataclasses.field(repr=False)
  notes: list[str] = dataclasses.field(default_factory=list)

  def band(self, steps: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fitted curve, lower, upper) at `steps`, the band at the forecast's confidence."""
    t = np.asarray(steps, dtype=float) / self.total_steps
    curves = get_form(self.form).curve(t, self.param_samples)
    tail = (1 - self.confidence) / 2
    lower, upper = np.quantile(curves, [tail, 1 - tail], axis=0)
    return self.fit.predict(t), lower, upper

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready summary (no arrays)."""
    skip = {'fit', 'param_samples'}
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
    out['params'] = dict(self.fit.params)
    return out


def _interval(values: np.ndarray, confidence: float, point: float) -> tuple[float, float]:
  """Central sample interval, widened to hold `point`: samples clipped to the parameter box
  (a timescale at its bound) can skew the quantiles past the point estimate."""
  tail = (1 - confidence) / 2
  low, high = np.quantile(values, [tail, 1 - tail])
  return min(float(low), point), max(float(high), point)


def _check_options(total_steps: float, epsilon: float, confidence: float) -> None:
  if not total_steps > 0:
    raise ValueError(f'total_steps={total_steps} must be > 0 (the planned number of steps)')
  if not epsilon > 0:
    raise ValueError(f'epsilon={epsilon} must be > 0 (reward gain counted as no gain)')
  if not 0 < confidence < 1:
    raise ValueError(f'confidence={confidence} must be in (0, 1), e.g. 0.9')


def forecast_from_fit(fit: TrajectoryFit, total_steps: int, *, observed_until_step: float,
                      epsilon: float = 0.01, confidence: float = 0.9,
                      ci_method: str = 'jacobian', n_samples: int = 400, seed: int = 0,
                      selection_method: str = 'only',
                      selection_scores: dict[str, float] | None = None) -> Forecast:
  """Turns a fitted curve into the forecast quantities, with CIs from parameter samples."""
  _check_options(total_steps, epsilon, confidence)
  spec = get_form(fit.form)
  samples = sample_parameters(fit, n_samples=n_samples, method=ci_method, seed=seed)
  point = fit.param_vector[None, :]
  t_now = observed_until_step / total_steps
  r_inf = spec.index('r_inf')

  def quantities(params: np.ndarray) -> dict[str, np.ndarray]:
    at_now, at_end = spec.curve(np.array([t_now, 1.0]), params).T
    return {
        'final': at_end,
        'plateau': params[:, r_inf],
        'plateau_step': spec.plateau_progress(params, epsilon) * total_steps,
        'gain': params[:, r_inf] - at_now,
    }

  best, spread = quantities(point), quantities(samples)
  plateau_step_ci = _interval(spread['plateau_step'], confidence, float(best['plateau_step'][0]))
  gain_upper = float(np.quantile(spread['gain'], confidence))
  recommended = int(math.ceil(min(max(plateau_step_ci[1], 0.0), total_steps)))
  notes = list(fit.notes)
  if best['plateau_step'][0] > total_steps:
    notes.append(f"no plateau within the run: predicted plateau step "
                 f"{best['plateau_step'][0]:.0f} > total_steps {total_steps}")
  return Forecast(
      form=fit.form, total_steps=int(total_steps), observed_until_step=float(observed_until_step),
      n_observed=fit.n_points, predicted_final_reward=float(best['final'][0]),
      final_reward_ci=_interval(spread['final'], confidence, float(best['final'][0])),
      predicted_plateau=float(best['plateau'][0]),
      plateau_ci=_interval(spread['plateau'], confidence, float(best['plateau'][0])),
      predicted_plateau_step=float(best['plateau_step'][0]), plateau_step_ci=plateau_step_ci,
      recommended_stop_step=recommended, remaining_gain=float(best['gain'][0]),
      remaining_gain_upper=gain_upper, confidence=confidence, epsilon=epsilon,
      selection_method=selection_method, selection_scores=dict(selection_scores or {}),
      fit=fit, param_samples=samples, notes=notes)


def forecast(steps: Sequence[float], rewards: Sequence[float], total_steps: int,
             observe_fraction: float = 1.0, *, forms: Sequence[str] = DEFAULT_FORMS,
             epsilon: float = 0.01, confidence: float = 0.9, bounded: bool = True,
             smoothing: int = 0, loss: str = 'soft_l1', prior: FormPrior | None = None,
             holdout_fraction: float = 0.3, ci_method: str = 'jacobian', n_samples: int = 400,
             seed: int = 0) -> Forecast:
  """Forecast a run from the points with step <= observe_fraction · total_steps.

  Points after the cut are ignored (pass a whole finished run with observe_fraction=0.3
  to test the forecast against its tail). The form is chosen among `forms` by holdout
  forecast error (see `select_form`); `prior` (e.g. `JointLaw.prior`) regularises the fit
  and fixes the form. Raises ValueError naming the problem for bad options or too few
  finite points.
  """
  _check_options(total_steps, epsilon, confidence)
  if not 0 < observe_fraction <= 1:
    raise ValueError(f'observe_fraction={observe_fraction} must be in (0, 1]')
  steps_clean, rewards_clean, notes = clean_points(steps, rewards)
  observed = steps_clean <= observe_fraction * total_steps + 1e-9
  if not observed.any():
    raise ValueError(f'no finite points at or before step {observe_fraction * total_steps:g} '
                     f'(observe_fraction={observe_fraction} of total_steps={total_steps})')
  steps_seen = steps_clean[observed]
  selection = select_form(steps_seen / total_steps, rewards_clean[observed], forms,
                          holdout_fraction=holdout_fraction, bounded=bounded,
                          smoothing=smoothing, loss=loss, prior=prior)
  selection.fit.notes[:0] = notes
  return forecast_from_fit(selection.fit, total_steps, observed_until_step=float(steps_seen[-1]),
                           epsilon=epsilon, confidence=confidence, ci_method=ci_method,
                           n_samples=n_samples, seed=seed, selection_method=selection.method,
                           selection_scores=selection.scores)


def forecast_zero_shot(prior: FormPrior, total_steps: int, *, epsilon: float = 0.01,
                       confidence: float = 0.9, bounded: bool = True, n_samples: int = 400,
                       seed: int = 0) -> Forecast:
  """Forecast a run before any step, from a prior over every parameter of its form."""
  spec = get_form(prior.form)
  missing = [name for name in spec.param_names if name not in prior.params]
  if missing:
    raise ValueError(f'zero-shot forecast needs a prior on every {spec.name} parameter; '
                     f'missing {missing}')
  means = np.array([prior.params[name][0] for name in spec.param_names], dtype=float)
  lo, hi = spec.bounds(bounded)
  means = np.clip(means, lo, hi)
  # Delta method: a log-sd s on a timescale p is a linear sd of about p·s.
  sds = np.array([prior.params[name][1] * (means[i] if name in spec.timescale_params else 1.0)
                  for i, name in enumerate(spec.param_names)])
  fit = TrajectoryFit(form=spec.name, params=dict(zip(spec.param_names, map(float, means))),
                      param_vector=means, covariance=np.diag(sds**2), noise_sigma=float('nan'),
                      n_points=0, rss=float('nan'), aic=float('nan'), bounded=bounded,
                      t=np.zeros(0), rewards=np.zeros(0), notes=['zero-shot: joint-law prior only'])
  return forecast_from_fit(fit, total_steps, observed_until_step=0.0, epsilon=epsilon,
                           confidence=confidence, n_samples=n_samples, seed=seed,
                           selection_method='zero_shot')
