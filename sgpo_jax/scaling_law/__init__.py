"""Predictive scaling law for GRPO reward trajectories: fit, forecast, stop early.

Modules: `trajectory` (curve forms, robust fits, CIs, form selection), `forecasting`
(final reward / plateau / stop step from a prefix or zero-shot), `joint_law` (plateau and
timescale as power laws in model size across runs), `early_stop` (the trainer hook),
`runs` (run directories, reports, plots). CLI: `python -m sgpo_jax.scaling_law fit RUN_DIR...`.
"""

from sgpo_jax.scaling_law.early_stop import EarlyStopper, StopDecision
from sgpo_jax.scaling_law.forecasting import (Forecast, forecast, forecast_from_fit,
                                              forecast_zero_shot)
from sgpo_jax.scaling_law.joint_law import JointLaw, PowerLaw, fit_joint_law
from sgpo_jax.scaling_law.runs import (RunRecord, evaluate_run, evaluate_runs, load_run,
                                       plot_forecast, simulate_trajectory, write_synthetic_run)
from sgpo_jax.scaling_law.trajectory import (DEFAULT_FORMS, FORMS, FormPrior, FormSelection,
                                             TrajectoryFit, TrajectoryForm, exponential_curve,
                                             fit_trajectory, logistic_curve, sample_parameters,
                                             select_form, smooth_rewards)

__all__ = [
    'DEFAULT_FORMS', 'FORMS', 'EarlyStopper', 'Forecast', 'FormPrior', 'FormSelection',
    'JointLaw', 'PowerLaw', 'RunRecord', 'StopDecision', 'TrajectoryFit', 'TrajectoryForm',
    'evaluate_run', 'evaluate_runs', 'exponential_curve', 'fit_joint_law', 'fit_trajectory',
    'forecast', 'forecast_from_fit', 'forecast_zero_shot', 'load_run', 'logistic_curve',
    'plot_forecast', 'sample_parameters', 'select_form', 'simulate_trajectory',
    'smooth_rewards', 'write_synthetic_run',
]
