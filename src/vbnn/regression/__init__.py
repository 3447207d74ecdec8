"""Regression on tables: the UCI engine (``Method``, ``TrainConfig``, ``run_splits``), tuning, the
results database and ``BayesianRegressor``."""

from vbnn.core.contracts import Method, TrainConfig

__all__ = ["Method", "TrainConfig"]
