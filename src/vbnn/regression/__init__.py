"""Regression on tables. This package exports the settings of a run, ``Method`` and ``TrainConfig``;
its modules hold the UCI engine (``engine.run_splits``), tuning (``tuning``), saved models
(``saved_models``) and the scikit-learn estimator (``estimator.BayesianRegressor``)."""

from vbnn.core.contracts import Method, TrainConfig

__all__ = ["Method", "TrainConfig"]
