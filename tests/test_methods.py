"""The method registry: every method one object that compare trains on a network and on a
table; the contract checked for every registered method, and the temperature-scaled entry
against its defining property (the fitted T lowers the held-out NLL to its minimum)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
from torch import nn

import vbnn
from vbnn.comparison.entries import EntryRun, NetworkSource, train_entry
from vbnn.layers.registry import FAMILIES
from vbnn.methods import METHODS, Method, method
from vbnn.methods.temperature import TemperatureScaled, log_mean_probabilities, scale_samples

NETWORK_METHODS = [
    name
    for name, chosen in METHODS.items()
    if chosen.network
    and (not name.startswith("laplace") or importlib.util.find_spec("laplace") is not None)
]


def classes(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.1), nn.Linear(16, 3))


def run(name: str, **changes) -> EntryRun:
    values = {"method": name, "epochs": 2, "batch_size": 32, "learning_rate": 1e-2,
              "samples": 4, "ensemble_size": 2, "seed": 0, "patience": 2} | changes  # fmt: skip
    return EntryRun(**values)


def test_the_registry_holds_every_family_and_baseline() -> None:
    assert set(FAMILIES) <= set(METHODS)
    baselines = {"point", "ensemble", "mc-dropout", "laplace", "ivon", "ivon-ensemble", "swag",
                 "multiswag", "es", "map", "sgld"}  # fmt: skip
    assert baselines <= set(METHODS)
    assert all(isinstance(m, Method) and m.name == name for name, m in METHODS.items())
    assert METHODS["mf"].family == "mf" and METHODS["ivon"].family == "mf"
    assert METHODS["ivon"].optimizer == "ivon" and METHODS["swag"].ensemble is False
    assert METHODS["multiswag"].ensemble and METHODS["ensemble"].ensemble
    scaled = method("point+ts")
    assert isinstance(scaled, TemperatureScaled) and scaled.base is METHODS["point"]
    with pytest.raises(ValueError, match="unknown method 'deep'; choose from"):
        method("deep")


@pytest.mark.parametrize("name", NETWORK_METHODS)
def test_every_network_method_trains_and_predicts(name: str) -> None:
    """The contract: prepare, train, predict K samples of every test input, finite, for every
    method that trains a network (an ensemble: M members' samples); the same seed gives the
    same samples whatever torch's global RNG holds."""
    x, y = classes(96, 0)
    test_x = classes(20, 1)[0]
    chosen = METHODS[name]
    chosen.check(mlp(), x[:2], run(name))
    trained = train_entry(NetworkSource(mlp), run(name), 0, (x, y), test_x, None, False)
    assert trained.test.shape[1:] == (20, 3) and torch.isfinite(trained.test).all()
    torch.manual_seed(12345)  # the caller's RNG state does not reach the entry's numbers
    again = train_entry(NetworkSource(mlp), run(name), 0, (x, y), test_x, None, False)
    torch.testing.assert_close(again.test, trained.test, rtol=0, atol=0)
    members = 2 if chosen.ensemble else 1
    per_member = 1 if chosen.predictive.value == "point" else 4
    assert trained.test.shape[0] == members * per_member
    assert trained.seconds > 0


def test_the_temperature_scaled_entry_minimises_its_held_out_nll() -> None:
    """NAME+ts: T fitted on the held-out samples is where the held-out NLL of
    softmax(log p_bar / T) is least (checked against T = 1 and a grid around it); its test
    predictive is that softmax of the base entry's log p_bar."""
    generator = torch.Generator().manual_seed(3)
    held = 3.0 * torch.randn(5, 200, 3, generator=generator, dtype=torch.float64)
    log_p = log_mean_probabilities(held)
    # labels drawn at temperature 2: the fitted T lies inside the bounds
    labels = torch.multinomial(torch.softmax(log_p / 2.0, -1), 1, generator=generator)[:, 0]
    test = torch.randn(5, 30, 3, generator=generator, dtype=torch.float64)
    temperature, (scaled,) = scale_samples(held, labels, test)
    assert 1.0 < temperature < 5.0

    def nll(t: float) -> float:
        return float(torch.nn.functional.cross_entropy(log_p / t, labels))

    assert nll(temperature) <= nll(1.0)
    for factor in (0.9, 1.1):
        assert nll(temperature) <= nll(temperature * factor) + 1e-12
    expected = torch.softmax(log_mean_probabilities(test) / temperature, -1)
    torch.testing.assert_close(torch.softmax(scaled[0], -1), expected)


def test_point_ts_scales_the_point_entry_and_refuses_a_regression() -> None:
    x, y = classes(96, 0)
    test_x = classes(20, 1)[0]
    trained = train_entry(NetworkSource(mlp), run("point+ts"), 0, (x, y), test_x, None, False)
    assert trained.test.shape == (1, 20, 3)
    regression = (x, x[:, 0].double())
    with pytest.raises(ValueError, match="temperature scaling calibrates a classifier"):
        vbnn.compare(lambda: nn.Linear(4, 1).double(), regression, test=regression,
                     families=["point+ts"], epochs=1)  # fmt: skip


def test_a_table_comparison_takes_the_network_methods(tmp_path) -> None:
    """compare on a regression table: the engine's methods on its stacks, the others an MLP a
    fold, every row finite and in the same table."""
    generator = np.random.default_rng(0)
    inputs = generator.normal(size=(80, 3))
    target = inputs @ np.array([1.0, -2.0, 0.5]) + 0.3 * generator.normal(size=80)
    result = vbnn.compare(inputs, target, families=["mf", "ivon", "ensemble", "swag"], folds=2,
                          tune=False, iterations=30, test_samples=5,
                          database=tmp_path / "t.sqlite")  # fmt: skip
    assert set(result.folds["family"]) == {"mf", "ivon", "ensemble", "swag"}
    assert len(result.folds) == 8
    assert np.isfinite(result.folds["log_likelihood"]).all()
    assert not math.isnan(result.summary.loc["ensemble", "rmse"])
    again = vbnn.compare(inputs, target, families=["mf", "ivon", "ensemble", "swag"], folds=2,
                         tune=False, iterations=30, test_samples=5,
                         database=tmp_path / "t.sqlite")  # fmt: skip
    assert again.folds.equals(result.folds)  # read back, the same rows


def test_a_classification_table_takes_mc_dropout_and_ts() -> None:
    generator = np.random.default_rng(1)
    inputs = generator.normal(size=(90, 3))
    labels = (inputs[:, 0] + 0.5 * generator.normal(size=90) > 0).astype(int)
    result = vbnn.compare(inputs, labels, families=["point", "mc-dropout", "point+ts"], folds=2,
                          tune=False, epochs=2, test_samples=4)  # fmt: skip
    assert list(result.summary.index.sort_values()) == ["mc-dropout", "point", "point+ts"]
    assert result.folds["aurc"].between(0, 1).all()
