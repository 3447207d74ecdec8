"""The time-to-quality benchmark: its smallest run, its resumption, and its gradient variance."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def benchmark(monkeypatch):
    """The benchmark's modules, imported as the script imports them (from benchmarks/)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gradient_variance
    import time_to_quality

    return time_to_quality, gradient_variance


def test_smoke_run_stores_units_and_resumes(benchmark, tmp_path, monkeypatch, capsys):
    time_to_quality, _ = benchmark
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    monkeypatch.setenv("VBNN_DATA_DIR", str(data))
    argv = ["--smoke", "--networks", "mlp", "--budgets", "0.2", "0.4", "--variance-steps", "1",
            "--threads", "1", "--out", str(tmp_path)]  # fmt: skip
    time_to_quality.main(argv)
    bayesian_torch = time_to_quality.bayesian_torch_version() is not None
    arms = 5 if bayesian_torch else 3
    if not bayesian_torch:
        assert "pip install --no-deps bayesian-torch==0.5.0" in capsys.readouterr().out
    records = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert len(records) == 2 * arms  # a training and a variance unit per arm, one seed
    for record in records:
        info, kind = record["info"], record["settings"]["kind"]
        assert info["environment"]["threads"] == 1
        if kind == "training":
            assert [mark["budget"] for mark in info["marks"]] == [0.2, 0.4]
            for mark in info["marks"]:
                assert mark["seconds"] >= mark["budget"] and mark["steps"] >= 1
                assert math.isfinite(mark["nll"]) and 0 <= mark["ece"] <= 1
        else:
            layers = info["layers"]
            assert set(layers) == {"1", "3", "5", "total"}  # the MLP's three dense layers
            noise = layers["total"]["noise_variance"]
            plain = record["settings"]["arm"] == "plain"
            assert noise == 0 if plain else noise > 0  # point weights draw no noise
    table = (tmp_path / "table.md").read_text()
    assert "| mlp | vbnn-lrt | 0.4 | 1 |" in table
    assert (tmp_path / "nll_vs_time.png").stat().st_size > 0

    def refuse(*args, **kwargs):
        raise AssertionError("a stored unit was computed again")

    monkeypatch.setattr(time_to_quality, "build", refuse)
    time_to_quality.main(argv)  # every unit is stored: nothing is trained
    assert (tmp_path / "table.md").read_text() == table


def test_gradient_variance_matches_a_known_gradient_distribution(benchmark):
    """loss = sum_p w_p (c_p + z_p), z ~ N(0, 1): the gradient is c + z, so tr Cov = P and the
    relative variance P / ||c||^2; tolerances from the chi-square spread of the estimate."""
    _, gradient_variance = benchmark
    features, draws = 400, 50
    layer = nn.Linear(features, 1, bias=False)
    offset = torch.full((1, features), 0.5)

    def loss(batch: int) -> torch.Tensor:
        return (layer.weight * (offset + torch.randn(1, features))).sum()

    result = gradient_variance.gradient_variance(layer, loss, 10, draws, torch.Generator())
    row = result[""]
    assert row == result["total"] and row["parameters"] == features
    # sum of P independent unbiased variances, each with variance 2 / (R - 1)
    standard_error = math.sqrt(2 * features / (draws - 1))
    for name in ("noise_variance", "minibatch_variance"):
        assert abs(row[name] - features) < 5 * standard_error
    # ||mean||^2 = ||c||^2 + tr Cov / R in expectation
    assert row["squared_mean"] == pytest.approx(0.25 * features + features / draws, rel=0.1)
    assert row["minibatch_relative"] == pytest.approx(
        row["minibatch_variance"] / row["squared_mean"]
    )


def test_gradient_variance_refuses_one_draw(benchmark):
    _, gradient_variance = benchmark
    layer = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="draws must be >= 2"):
        gradient_variance.gradient_variance(
            layer, lambda b: layer.weight.sum(), 1, 1, torch.Generator()
        )
