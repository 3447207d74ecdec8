"""Regression on tables. This package exports the settings of a run: one config per algorithm
(``ESConfig``, ``MAPConfig``, ``SGLDConfig``, ``VIConfig``; ``method_config("mf", ...)`` builds
one from a method's name); its modules hold the UCI engine (``engine.run_splits``), tuning
(``tuning``), saved models (``saved_models``) and the scikit-learn estimator
(``estimator.BayesianRegressor``)."""

from vbnn.regression.methods import method_config
from vbnn.regression.runs import Algorithm, ESConfig, MAPConfig, SGLDConfig, TrainConfig, VIConfig

__all__ = [
    "Algorithm",
    "ESConfig",
    "MAPConfig",
    "SGLDConfig",
    "TrainConfig",
    "VIConfig",
    "method_config",
]
