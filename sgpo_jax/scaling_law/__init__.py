"""Predictive scaling law for GRPO reward trajectories: fit, forecast, stop early.

Modules: `trajectory` (curve forms, robust fits, CIs, form selection), `forecasting`
(final reward / plateau / stop step from a prefix or zero-shot), `calibration` (point
forecasts learnt across finished runs, with jackknife intervals from `conformal`),
`joint_law` (plateau and timescale as power laws in model size across runs), `early_stop`
(the trainer hooks: rule 'trend' on eval accuracy, rule 'forecast' on reward), `runs` (run
directories, metric choice, run length, reports, plots), `calibration_set` (a calibration
set built from finished runs or trajectories files: how the shipped sets are made).
CLI: `python -m sgpo_jax.scaling_law fit RUN_DIR...`, `... calibrate-set SOURCES --out F`.
"""

from sgpo_jax.scaling_law.calibration import (
                                              CalibratedForecast,
                                              CalibrationSet,
                                              PrefixFeatures,
                                              calibrated_forecast,
                                              prefix_features,
)
from sgpo_jax.scaling_law.conformal import (
                                              conformal_interval,
                                              conformal_quantile,
                                              coverage,
                                              interval_contains,
)
from sgpo_jax.scaling_law.early_stop import (
                                              EarlyStopper,
                                              StopDecision,
                                              TrendStopper,
                                              make_stopper,
                                              trend_stop_step,
)
from sgpo_jax.scaling_law.forecasting import (
                                              Forecast,
                                              forecast,
                                              forecast_from_fit,
                                              forecast_zero_shot,
)
from sgpo_jax.scaling_law.joint_law import JointLaw, PowerLaw, fit_joint_law
from sgpo_jax.scaling_law.runs import (
                                              RunRecord,
                                              evaluate_run,
                                              evaluate_runs,
                                              load_run,
                                              plot_forecast,
                                              simulate_trajectory,
                                              write_synthetic_run,
)
from sgpo_jax.scaling_law.trajectory import (
                                              DEFAULT_FORMS,
                                              FORMS,
                                              FormPrior,
                                              FormSelection,
                                              TrajectoryFit,
                                              TrajectoryForm,
                                              exponential_curve,
                                              fit_trajectory,
                                              logistic_curve,
                                              sample_parameters,
                                              select_form,
                                              smooth_rewards,
)

__all__ = [
    'CalibratedForecast', 'CalibrationSet', 'PrefixFeatures', 'TrendStopper',
    'calibrated_forecast', 'conformal_interval', 'conformal_quantile', 'coverage',
    'interval_contains', 'make_stopper', 'prefix_features', 'trend_stop_step',
    'DEFAULT_FORMS', 'FORMS', 'EarlyStopper', 'Forecast', 'FormPrior', 'FormSelection',
    'JointLaw', 'PowerLaw', 'RunRecord', 'StopDecision', 'TrajectoryFit', 'TrajectoryForm',
    'evaluate_run', 'evaluate_runs', 'exponential_curve', 'fit_joint_law', 'fit_trajectory',
    'forecast', 'forecast_from_fit', 'forecast_zero_shot', 'load_run', 'logistic_curve',
    'plot_forecast', 'sample_parameters', 'select_form', 'simulate_trajectory',
    'smooth_rewards', 'write_synthetic_run',
]
