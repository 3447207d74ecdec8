"""Figures 2-5 at a tiny size: every file written and non-empty, counts on record."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from vbnn.core.contracts import ForwardMode
from vbnn.regression.methods import method_config
from vbnn.regression.stack import build_stack
from vbnn_lab.overpruning.figures import figure2_5, figure3, figure4
from vbnn_lab.overpruning.prior_network import (
    fit_prior_network,
    initialise_at_truth,
    sample_prior_network,
    simulate,
)


def _written(paths: list[Path]) -> None:
    for path in paths:
        assert path.exists(), path
        if path.is_file():
            assert path.stat().st_size > 0, path


def test_figure2_5_tiny(tmp_path: Path, data_dir: Path) -> None:
    paths = figure2_5(tmp_path, data_dir=data_dir, iterations=20, splits=[0, 1],
                      figure5_units=10)  # fmt: skip
    _written(paths)
    names = {p.name for p in paths}
    assert {"figure2.png", "figure5.png", "pruning_counts.csv", "pruning_counts.md"} <= names
    counts = pd.read_csv(tmp_path / "pruning_counts.csv")
    assert counts["split"].tolist() == [0, 1] and (counts["units"] == 50).all()
    assert "39 of 50" in (tmp_path / "pruning_counts.md").read_text()


def test_figure4_tiny(tmp_path: Path, data_dir: Path) -> None:
    _written(figure4(tmp_path, data_dir=data_dir, iterations=20, splits=[0], every=5))
    frame = pd.read_csv(tmp_path / "trajectories.csv")
    assert frame["iteration"].tolist() == [1, 5, 10, 15, 20]
    assert {"kl", "free_energy", "expected_log_likelihood", "train_nll", "test_nll"} <= set(frame)


def test_figure3_tiny(tmp_path: Path) -> None:
    _written(figure3(tmp_path, iterations=10, samples=3))
    counts = pd.read_csv(tmp_path / "figure3_counts.csv")
    assert counts["N"].tolist() == [5, 25, 100]


def test_prior_network_data_and_initialisation_are_the_true_model() -> None:
    network = sample_prior_network(torch.Generator().manual_seed(1), hidden=50)
    x, y = simulate(network, 200, 0.5, torch.Generator().manual_seed(2))
    manual = torch.tanh(x * network.weight[0] + network.bias) @ network.output_weight[:, 0]
    torch.testing.assert_close(network(x), manual + network.output_bias)
    residual = y - network(x)  # the noise: mean 0, std 0.5 (200 draws: 4 standard errors)
    assert abs(float(residual.mean())) < 4 * 0.5 / 200**0.5
    assert abs(float(residual.std()) - 0.5) < 4 * 0.5 / (2 * 199) ** 0.5
    config = method_config("mf", hidden=(50,), dtype="float64")
    model, _ = build_stack(config, 1, [0])
    initialise_at_truth(model, network)
    torch.testing.assert_close(model(x.unsqueeze(0), ForwardMode.MEAN)[0, :, 0], network(x))
    # No training: the truth is kept, every unit active (output SNR ~ 1e4, incoming KL > 0.05).
    fits = fit_prior_network(network, sizes=(5,), iterations=1)
    assert fits[0].pruned == 0
