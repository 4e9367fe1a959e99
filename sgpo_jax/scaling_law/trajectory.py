"""Reward-trajectory models: the curve forms, robust fitting, parameter uncertainty and
choosing a form by forecast error.

Time convention: every curve here takes normalised progress t = step / total_steps, so
t = 1 is the end of the planned run and timescales (tau, t_mid, width) are fractions of
the run. Callers with raw steps divide by total_steps (see `forecasting.forecast`).

Forms (R0 = R(0), R_inf = plateau):
- exponential: R(t) = R_inf - (R_inf - R0)·exp(-t/tau)
- logistic:    R(t) = R0 + (R_inf - R0)·(s(t) - s(0))/(1 - s(0)),
               s(t) = 1/(1 + exp(-(t - t_mid)/w))   (three phases: slow start, rise, plateau)
- power:       R(t) = R_inf - (R_inf - R0)·(1 + t/tau)^(-alpha)   (fast rise, then a slow
               power-law creep; alpha -> inf with tau/alpha fixed is the exponential).
               Not in DEFAULT_FORMS: opt in with forms=(..., 'power').

With `bounded=True` R0 and R_inf are bounded to [0, 1] (rewards and accuracies), so no fit
can promise a plateau above 1.0. Fits use `scipy.optimize.least_squares` with a robust loss
on residuals standardised by a noise scale estimated from step-to-step differences, so one
outlier step does not drag the curve. An optional prior (from the joint law across runs)
adds one pseudo-residual per parameter; its weight is fixed while data residuals grow with
the number of points, so the prior fades as the run is observed.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import optimize, special

ROBUST_LOSSES = ('linear', 'soft_l1', 'huber', 'cauchy', 'arctan')
# Residuals are in units of the estimated noise sigma; beyond 1.5 sigma the robust loss
# grows linearly instead of quadratically.
ROBUST_SCALE_SIGMAS = 1.5
# Forms whose holdout error is within this factor of the best are treated as tied, and the
# one with fewer parameters wins (two curves that forecast equally well: take the simpler).
HOLDOUT_TIE_FACTOR = 1.05


@dataclasses.dataclass(frozen=True)
class TrajectoryForm:
  """One curve family: its parameters, curve, plateau progress and search box."""

  name: str
  param_names: tuple[str, ...]
  timescale_params: tuple[str, ...]  # positive; power laws in N; priors/sampling in log space
  curve: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (t_T, params_..xP) -> R_..xT
  plateau_progress: Callable[[np.ndarray, float], np.ndarray]  # (params_SxP, eps) -> t_S
  timescale_box: Mapping[str, tuple[float, float]]
  starts: Mapping[str, tuple[float, ...]]  # timescale start values, as fractions of t_last
  # Timescale parameters whose starts are multiplied by t_last (None: all of them).
  scaled_starts: tuple[str, ...] | None = None

  def bounds(self, bounded: bool) -> tuple[np.ndarray, np.ndarray]:
    level = (0.0, 1.0) if bounded else (-np.inf, np.inf)
    lo, hi = [], []
    for name in self.param_names:
      low, high = self.timescale_box[name] if name in self.timescale_params else level
      lo.append(low)
      hi.append(high)
    return np.array(lo), np.array(hi)

  def index(self, name: str) -> int:
    return self.param_names.index(name)


def _columns(params: np.ndarray, count: int) -> list[np.ndarray]:
  params = np.asarray(params, dtype=float)
  return [params[..., i, None] for i in range(count)]


def exponential_curve(t: np.ndarray, params: np.ndarray) -> np.ndarray:
  """R(t) = R_inf - (R_inf - R0)·exp(-t/tau); params [..., (r0, r_inf, tau)] -> [..., T]."""
  r0, r_inf, tau = _columns(params, 3)
  return r_inf - (r_inf - r0) * np.exp(-np.asarray(t, dtype=float) / tau)


def logistic_curve(t: np.ndarray, params: np.ndarray) -> np.ndarray:
  """Three-phase logistic normalised so R(0) = R0; params [..., (r0, r_inf, t_mid, width)]."""
  r0, r_inf, t_mid, width = _columns(params, 4)
  s_at_0 = special.expit(-t_mid / width)
  risen = (special.expit((np.asarray(t, dtype=float) - t_mid) / width) - s_at_0) / (1 - s_at_0)
  return r0 + (r_inf - r0) * risen


def power_curve(t: np.ndarray, params: np.ndarray) -> np.ndarray:
  """R(t) = R_inf - (R_inf - R0)·(1 + t/tau)^-alpha; params [..., (r0, r_inf, tau, alpha)]."""
  r0, r_inf, tau, alpha = _columns(params, 4)
  return r_inf - (r_inf - r0) * (1.0 + np.asarray(t, dtype=float) / tau) ** (-alpha)


def _power_plateau_progress(params: np.ndarray, epsilon: float) -> np.ndarray:
  # Remaining gain |dR|·(1 + t/tau)^-alpha < eps  <=>  t > tau·((|dR|/eps)^(1/alpha) - 1).
  params = np.atleast_2d(params)
  gap = np.abs(params[:, 1] - params[:, 0])
  tau, alpha = params[:, 2], params[:, 3]
  with np.errstate(divide='ignore', over='ignore'):
    progress = tau * np.expm1(np.log(np.maximum(gap, 1e-300) / epsilon) / alpha)
  return np.where(gap > epsilon, progress, 0.0)


def _exponential_plateau_progress(params: np.ndarray, epsilon: float) -> np.ndarray:
  params = np.atleast_2d(params)
  gap = np.abs(params[:, 1] - params[:, 0])
  with np.errstate(divide='ignore'):
    progress = params[:, 2] * np.log(gap / epsilon)
  return np.where(gap > epsilon, progress, 0.0)


def _logistic_plateau_progress(params: np.ndarray, epsilon: float) -> np.ndarray:
  # Remaining gain |dR|·(1 - s(t))/(1 - s(0)) < eps  <=>  t > t_mid - w·logit(q).
  params = np.atleast_2d(params)
  gap = np.abs(params[:, 1] - params[:, 0])
  t_mid, width = params[:, 2], params[:, 3]
  q = np.clip(epsilon * special.expit(t_mid / width) / np.maximum(gap, 1e-300), 1e-300, 1.0)
  progress = t_mid - width * special.logit(q)
  return np.where(gap > epsilon, np.maximum(progress, 0.0), 0.0)


FORMS: dict[str, TrajectoryForm] = {
    'exponential': TrajectoryForm(
        name='exponential',
        param_names=('r0', 'r_inf', 'tau'),
        timescale_params=('tau',),
        curve=exponential_curve,
        plateau_progress=_exponential_plateau_progress,
        timescale_box={'tau': (1e-3, 50.0)},
        starts={'tau': (0.05, 0.3, 1.5)},
    ),
    'logistic': TrajectoryForm(
        name='logistic',
        param_names=('r0', 'r_inf', 't_mid', 'width'),
        timescale_params=('t_mid', 'width'),
        curve=logistic_curve,
        plateau_progress=_logistic_plateau_progress,
        # t_mid >= 0 keeps 1 - s(0) >= 1/2, so the normalisation never divides by ~0.
        timescale_box={'t_mid': (1e-3, 5.0), 'width': (2e-3, 2.0)},
        starts={'t_mid': (0.25, 0.6), 'width': (0.05, 0.15)},
    ),
    'power': TrajectoryForm(
        name='power',
        param_names=('r0', 'r_inf', 'tau', 'alpha'),
        timescale_params=('tau', 'alpha'),
        curve=power_curve,
        plateau_progress=_power_plateau_progress,
        timescale_box={'tau': (1e-3, 50.0), 'alpha': (0.05, 20.0)},
        # alpha is dimensionless; its starts are divided back by t_last (see _starting_points).
        starts={'tau': (0.05, 0.3), 'alpha': (0.5, 2.0)},
        scaled_starts=('tau',),
    ),
}
DEFAULT_FORMS: tuple[str, ...] = ('exponential', 'logistic')


def get_form(name: str) -> TrajectoryForm:
  if name not in FORMS:
    raise ValueError(f'unknown trajectory form {name!r}; choose one of {sorted(FORMS)}')
  return FORMS[name]


@dataclasses.dataclass(frozen=True)
class FormPrior:
  """Gaussian prior on one form's parameters, e.g. from the joint law across runs.

  `params[name] = (mean, sd)`; for timescale parameters the sd is in natural-log units
  (the prior is log-normal), for r0/r_inf it is in reward units.
  """

  form: str
  params: Mapping[str, tuple[float, float]]


@dataclasses.dataclass
class TrajectoryFit:
  """A fitted curve: point estimate, covariance and the data it was fitted on."""

  form: str
  params: dict[str, float]
  param_vector: np.ndarray
  covariance: np.ndarray  # of param_vector, from the Jacobian at the optimum
  noise_sigma: float  # robust per-point noise scale of the rewards
  n_points: int
  rss: float  # raw (unsmoothed) residual sum of squares
  aic: float  # small-sample corrected (AICc); inf when n <= parameters + 1
  bounded: bool
  t: np.ndarray = dataclasses.field(repr=False)
  rewards: np.ndarray = dataclasses.field(repr=False)
  notes: list[str] = dataclasses.field(default_factory=list)

  def predict(self, t: np.ndarray | float) -> np.ndarray:
    return get_form(self.form).curve(np.asarray(t, dtype=float), self.param_vector)


def smooth_rewards(rewards: np.ndarray, window: int) -> np.ndarray:
  """Centred moving average over `window` points (shrinking at the ends); window <= 1: as is.

  Smoothing lowers the noise the robust loss has to absorb but rounds sharp knees; it is
  applied only to the values being fitted, never to those used to score forecasts.
  """
  rewards = np.asarray(rewards, dtype=float)
  if window <= 1 or rewards.size < 3:
    return rewards
  half = int(window) // 2
  kernel = np.ones(2 * half + 1)
  sums = np.convolve(rewards, kernel, mode='same')
  counts = np.convolve(np.ones_like(rewards), kernel, mode='same')
  return sums / counts


def noise_scale(rewards: np.ndarray) -> float:
  """Robust per-point noise sigma from first differences (MAD/sqrt 2), floored above zero."""
  rewards = np.asarray(rewards, dtype=float)
  floor = 1e-4 * max(float(np.ptp(rewards)) if rewards.size else 0.0, 1e-2)
  if rewards.size < 3:
    return max(floor, 1e-3)
  diffs = np.diff(rewards)
  mad = np.median(np.abs(diffs - np.median(diffs)))
  return max(1.4826 * float(mad) / np.sqrt(2.0), floor)


def clean_points(t: Sequence[float], rewards: Sequence[float]) -> tuple[np.ndarray, np.ndarray,
                                                                         list[str]]:
  """Drop non-finite points and sort by t; notes say what was dropped."""
  t = np.asarray(t, dtype=float).ravel()
  rewards = np.asarray(rewards, dtype=float).ravel()
  if t.shape != rewards.shape:
    raise ValueError(f'got {t.size} steps but {rewards.size} rewards; pass one reward per step')
  finite = np.isfinite(t) & np.isfinite(rewards)
  notes = []
  if not finite.all():
    notes.append(f'dropped {int((~finite).sum())} non-finite points (NaN/inf)')
  t, rewards = t[finite], rewards[finite]
  order = np.argsort(t, kind='stable')
  return t[order], rewards[order], notes


def _interior_start(start: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  span = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
  return np.clip(start, lo + 1e-6 * span, hi - 1e-6 * span)


def _starting_points(spec: TrajectoryForm, t: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
  head = max(1, y.size // 10)
  level = {'r0': float(np.mean(y[:head])), 'r_inf': float(np.mean(y[-head:]))}
  t_last = max(float(t.max()), 1e-2)
  scaled = spec.timescale_params if spec.scaled_starts is None else spec.scaled_starts
  grids = [np.array(spec.starts[name]) * (t_last if name in scaled else 1.0)
           for name in spec.timescale_params]
  starts = []
  for combo in np.array(np.meshgrid(*grids)).reshape(len(grids), -1).T:
    values = dict(level, **dict(zip(spec.timescale_params, combo)))
    starts.append(np.array([values[name] for name in spec.param_names]))
  return starts


def _numeric_jacobian(residual_fn: Callable[[np.ndarray], np.ndarray],
                      x: np.ndarray) -> np.ndarray:
  columns = []
  for i in range(x.size):
    step = 1e-6 * max(1.0, abs(x[i]))
    up, down = x.copy(), x.copy()
    up[i] += step
    down[i] -= step
    columns.append((residual_fn(up) - residual_fn(down)) / (2 * step))
  return np.stack(columns, axis=1)


def fit_trajectory(t: Sequence[float], rewards: Sequence[float], form: str = 'exponential', *,
                   bounded: bool = True, smoothing: int = 0, loss: str = 'soft_l1',
                   prior: FormPrior | None = None,
                   start: np.ndarray | None = None) -> TrajectoryFit:
  """Fit one form to (t, rewards) by robust least squares; t is normalised progress.

  Raises ValueError when there are too few finite points (parameters + 1, or 1 with a
  prior), when `bounded=True` but rewards leave [0, 1], or on an unknown form/loss.
  Flat and decreasing curves fit fine; `notes` says so.
  """
  spec = get_form(form)
  if loss not in ROBUST_LOSSES:
    raise ValueError(f'loss={loss!r} is not a least_squares loss; use one of {ROBUST_LOSSES}')
  if prior is not None and prior.form != form:
    raise ValueError(f'prior is for form {prior.form!r} but fitting {form!r}; pass a matching '
                     'prior or restrict forms to the prior\'s form')
  t, y, notes = clean_points(t, rewards)
  n_params = len(spec.param_names)
  min_points = 1 if prior is not None else n_params + 1
  if y.size < min_points:
    raise ValueError(
        f'{y.size} finite points are too few to fit the {form} form ({n_params} parameters): '
        f'need at least {min_points}; observe more steps or pass a joint-law prior')
  if np.any(t < 0):
    raise ValueError(f'progress t must be >= 0, got min t={t.min():.4g}; pass step/total_steps')
  if bounded and (y.min() < -1e-9 or y.max() > 1 + 1e-9):
    raise ValueError(f'rewards span [{y.min():.4g}, {y.max():.4g}] but bounded=True assumes '
                     'they lie in [0, 1]; pass bounded=False for unbounded rewards')
  if y.size >= 2 and np.ptp(y) <= 1e-12:
    notes.append(f'flat trajectory (every value = {y[0]:.4g}): plateau = that value, '
                 'timescale undetermined')

  y_fit = smooth_rewards(y, smoothing)
  sigma = noise_scale(y)
  lo, hi = spec.bounds(bounded)
  prior_terms = []
  if prior is not None:
    for name, (mean, sd) in prior.params.items():
      if name not in spec.param_names:
        raise ValueError(f'prior names {name!r}, not a parameter of {form} {spec.param_names}')
      if not sd > 0:
        raise ValueError(f'prior sd for {name!r} must be > 0, got {sd}')
      is_log = name in spec.timescale_params
      prior_terms.append((spec.index(name), np.log(mean) if is_log else mean, sd, is_log))

  def residuals(x: np.ndarray) -> np.ndarray:
    data = (spec.curve(t, x) - y_fit) / sigma
    if not prior_terms:
      return data
    extra = [((np.log(max(x[i], 1e-300)) if is_log else x[i]) - mean) / sd
             for i, mean, sd, is_log in prior_terms]
    return np.concatenate([data, np.array(extra)])

  if start is not None:
    starts = [np.asarray(start, dtype=float)]
  elif prior is not None:
    prior_start = _starting_points(spec, t, y_fit)[0] if y.size else np.zeros(n_params)
    for i, mean, _, is_log in prior_terms:
      prior_start[i] = np.exp(mean) if is_log else mean
    starts = [prior_start] + (_starting_points(spec, t, y_fit) if y.size > n_params else [])
  else:
    starts = _starting_points(spec, t, y_fit)
  best = None
  for x0 in starts:
    result = optimize.least_squares(residuals, _interior_start(x0, lo, hi), bounds=(lo, hi),
                                    loss=loss, f_scale=ROBUST_SCALE_SIGMAS, x_scale='jac',
                                    max_nfev=400)
    if best is None or result.cost < best.cost:
      best = result
  x = best.x
  jacobian = _numeric_jacobian(residuals, x)
  raw_residuals = spec.curve(t, x) - y
  rss = float(np.sum(raw_residuals**2))
  dof = max(y.size - n_params, 1)
  # Inflate by the reduced chi-square when the curve misfits more than the noise explains.
  scale = max(1.0, rss / sigma**2 / dof)
  covariance = np.linalg.pinv(jacobian.T @ jacobian) * scale
  # Small-sample corrected AIC (AICc): with n <= k + 1 points a curve can thread the noise,
  # so such a fit gets no support (inf). Plain AIC let a 4-parameter logistic fitted to 5
  # eval points win the form choice and forecast a collapse to 0.22 (validation runs).
  if y.size > n_params + 1:
    aic = (y.size * np.log(max(rss, 1e-300) / y.size) + 2 * n_params
           + 2 * n_params * (n_params + 1) / (y.size - n_params - 1))
  else:
    aic = np.inf
  params = dict(zip(spec.param_names, map(float, x)))
  if y.size >= 2 and params['r_inf'] < params['r0'] - sigma:
    notes.append(f"reward decreases (R_inf={params['r_inf']:.4g} < R0={params['r0']:.4g}): "
                 'no gain expected from more steps')
  return TrajectoryFit(form=form, params=params, param_vector=x, covariance=covariance,
                       noise_sigma=sigma, n_points=int(y.size), rss=rss, aic=float(aic),
                       bounded=bounded, t=t, rewards=y, notes=notes)


def sample_parameters(fit: TrajectoryFit, n_samples: int = 400, method: str = 'jacobian',
                      seed: int = 0, smoothing: int = 0, loss: str = 'soft_l1') -> np.ndarray:
  """Draws [n_samples, P] of plausible parameters, clipped to the form's bounds.

  'jacobian': Gaussian around the optimum with the Jacobian covariance (Laplace
  approximation), clipped to the bounds; cheap, used by the early stopper.
  'bootstrap': refit on the fitted curve plus resampled residuals (n_samples refits;
  slower, honest when residuals are skewed or the fit sits on a bound).
  """
  spec = get_form(fit.form)
  lo, hi = spec.bounds(fit.bounded)
  rng = np.random.default_rng(seed)
  if method == 'jacobian':
    # Linear-space draws, clipped to the box: the log-space image of the covariance blows
    # up for a timescale fitted at its lower bound (sd/value >> 1) and invents huge gains.
    draws = rng.multivariate_normal(fit.param_vector, fit.covariance, size=n_samples,
                                    method='eigh')
  elif method == 'bootstrap':
    if fit.n_points <= len(spec.param_names):
      raise ValueError(f'bootstrap needs more than {len(spec.param_names)} points, fit has '
                       f"{fit.n_points}; use method='jacobian'")
    fitted = fit.predict(fit.t)
    residuals = fit.rewards - fitted
    residuals = residuals - residuals.mean()
    draws = []
    for _ in range(n_samples):
      resampled = fitted + rng.choice(residuals, size=residuals.size, replace=True)
      if fit.bounded:
        resampled = np.clip(resampled, 0.0, 1.0)
      refit = fit_trajectory(fit.t, resampled, fit.form, bounded=fit.bounded, smoothing=smoothing,
                             loss=loss, start=fit.param_vector)
      draws.append(refit.param_vector)
    draws = np.array(draws)
  else:
    raise ValueError(f"method={method!r} is unknown; use 'jacobian' or 'bootstrap'")
  return np.clip(draws, lo, hi)


@dataclasses.dataclass
class FormSelection:
  """Which form won, how, and each form's score (holdout RMSE or AIC)."""

  fit: TrajectoryFit
  method: str  # 'holdout' | 'aic' | 'only'
  scores: dict[str, float]


def select_form(t: Sequence[float], rewards: Sequence[float],
                forms: Sequence[str] = DEFAULT_FORMS, *, holdout_fraction: float = 0.3,
                min_holdout_points: int = 3, bounded: bool = True, smoothing: int = 0,
                loss: str = 'soft_l1', prior: FormPrior | None = None) -> FormSelection:
  """Pick the form that best forecasts the held-out tail of the observed points.

  Each form is fitted on the first (1 - holdout_fraction) of the points and scored by RMSE
  on the rest; forms within HOLDOUT_TIE_FACTOR of the best count as tied and the one with
  fewer parameters wins. With too few points for a holdout (each form needs parameters + 2
  training points and `min_holdout_points` held out) the forms are compared by AIC on
  all points instead. A prior restricts the choice to the prior's form. The winner is
  refitted on every observed point.
  """
  if prior is not None:
    forms = (prior.form,)
  if not forms:
    raise ValueError('forms is empty; pass at least one of ' + str(sorted(FORMS)))
  specs = [get_form(name) for name in forms]
  t, y, notes = clean_points(t, rewards)
  if not 0 < holdout_fraction < 1:
    raise ValueError(f'holdout_fraction={holdout_fraction} must be in (0, 1)')
  options = dict(bounded=bounded, smoothing=smoothing, loss=loss, prior=prior)
  if len(specs) == 1:
    fit = fit_trajectory(t, y, specs[0].name, **options)
    fit.notes[:0] = notes
    return FormSelection(fit=fit, method='only', scores={})

  n_train = int(np.ceil(y.size * (1 - holdout_fraction)))
  most_params = max(len(spec.param_names) for spec in specs)
  fitted, failures = {}, {}
  for spec in specs:
    try:
      fitted[spec.name] = fit_trajectory(t, y, spec.name, **options)
    except ValueError as error:
      failures[spec.name] = str(error)
  if not fitted:
    raise ValueError('no form could be fitted: ' + '; '.join(failures.values()))

  if n_train >= most_params + 2 and y.size - n_train >= min_holdout_points:
    method, scores = 'holdout', {}
    for name in fitted:
      head = fit_trajectory(t[:n_train], y[:n_train], name, **options)
      error = head.predict(t[n_train:]) - y[n_train:]
      scores[name] = float(np.sqrt(np.mean(error**2)))
  else:
    method = 'aic'
    scores = {name: fit.aic for name, fit in fitted.items()}
    notes.append(f'{y.size} points are too few for a holdout; chose the form by AIC')
  best_score = min(scores.values())
  if method == 'holdout':
    tied = [name for name in scores if scores[name] <= best_score * HOLDOUT_TIE_FACTOR + 1e-12]
  else:
    tied = [name for name in scores if scores[name] == best_score]
  winner = min(tied, key=lambda name: (len(get_form(name).param_names), scores[name]))
  fit = fitted[winner]
  fit.notes[:0] = notes + [f'{name} not fitted: {why}' for name, why in failures.items()]
  return FormSelection(fit=fit, method=method, scores=scores)
