"""Every entry point takes a shared setting's default from ``vbnn.core.defaults``: a value
written out again in a signature or a config (as when the layers, the estimators and the UCI
engine each wrote their own initial std) fails here, naming the entry point."""

from __future__ import annotations

import inspect

import pytest

from vbnn.classification.estimator import BayesianClassifier
from vbnn.classification.training import ClassifierConfig
from vbnn.cli import build_parser
from vbnn.comparison.config import CompareConfig, NetworkConfig
from vbnn.core import defaults
from vbnn.diagnostics.layers import diagnose_layers
from vbnn.diagnostics.report import diagnose
from vbnn.layers.registry import FAMILIES
from vbnn.layers.shell import VariationalLayer
from vbnn.references.architecture import MLPArchitecture
from vbnn.regression.estimator import BayesianRegressor, initial_posterior_std
from vbnn.regression.runs import ESConfig, MAPConfig, SGLDConfig, VIConfig
from vbnn.training.trainer import train


def default_of(function, name: str):
    return inspect.signature(function).parameters[name].default


WITH_STD = sorted(n for n, s in FAMILIES.items() if s.std_option() in s.accepted_options())


@pytest.mark.parametrize("name", WITH_STD)
def test_every_family_with_a_fixed_initial_std_starts_at_the_one_default(name: str) -> None:
    # families whose std is relative to the layer's fan-in (variance layers, additive) take
    # None and say so; every family with a number takes INIT_STD
    spec = FAMILIES[name]
    option = spec.std_option()
    value = default_of(spec.layer.__init__, option)
    assert value is None or value == defaults.INIT_STD, f"{spec.layer.__name__}.{option}"


def test_the_engine_and_the_estimators_take_their_stds_from_the_defaults() -> None:
    assert VIConfig().posterior_std == defaults.INIT_STD
    assert initial_posterior_std("mf", None) == defaults.ESTIMATOR_INIT_STD
    assert initial_posterior_std("gd", None) == defaults.ESTIMATOR_INIT_STD
    assert initial_posterior_std("point", None) is None
    assert FAMILIES["gd"].config_defaults["posterior_std"] == defaults.GD_POSTERIOR_STD


def test_training_lengths_agree_between_entry_points() -> None:
    for config in (VIConfig(), MAPConfig(), SGLDConfig()):
        assert config.iterations == defaults.UCI_ITERATIONS, type(config).__name__
    assert ESConfig().iterations == defaults.EARLY_STOPPING_ITERATIONS
    assert BayesianRegressor().iterations == defaults.ESTIMATOR_ITERATIONS
    fit = build_parser().parse_args(["fit", "--data", "x.csv", "--target", "y"])
    assert fit.iterations == defaults.ESTIMATOR_ITERATIONS
    network = NetworkConfig()
    minibatch = ClassifierConfig()
    for entry, (epochs, batch_size, learning_rate) in {
        "vbnn.train": (default_of(train, "epochs"), default_of(train, "batch_size"),
                       default_of(train, "learning_rate")),
        "NetworkConfig": (network.epochs, network.batch_size, network.learning_rate),
        "ClassifierConfig": (minibatch.epochs, minibatch.batch_size, minibatch.learning_rate),
    }.items():  # fmt: skip
        assert (epochs, batch_size, learning_rate) == (
            defaults.EPOCHS, defaults.BATCH_SIZE, defaults.LEARNING_RATE), entry  # fmt: skip
    table, estimator = CompareConfig(), BayesianClassifier()
    assert table.epochs == estimator.epochs == defaults.TABLE_EPOCHS
    assert table.learning_rate == estimator.learning_rate == defaults.TABLE_LEARNING_RATE
    assert table.batch_size == estimator.batch_size == defaults.BATCH_SIZE


def test_every_gaussian_prior_default_is_the_one_prior_std() -> None:
    assert VariationalLayer.default_prior.std == defaults.PRIOR_STD
    for config in (VIConfig(), MAPConfig(), SGLDConfig()):
        assert config.prior_std == defaults.PRIOR_STD, type(config).__name__
    assert BayesianRegressor().prior_std == defaults.PRIOR_STD
    assert default_of(diagnose_layers, "prior_std") == defaults.PRIOR_STD
    assert default_of(diagnose, "prior_std") == defaults.PRIOR_STD
    assert MLPArchitecture((2, 1), "relu").prior_std == defaults.PRIOR_STD
