"""Appendix D (Neklyudov et al. 2019 Fig. 9): dense1's pre-activation moments against explicit
weight sampling, the per-class densities, and a tiny end-to-end run."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest
import torch

from vbnn.cli import main
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn_lab.adversarial.models import Training, build
from vbnn_lab.variance_activations import DENSE1, activation_moments, class_densities

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_moments_match_monte_carlo_over_weight_samples():
    model = build(Training.VARIANCE, 1, seed=0).eval()
    layer = model.layers[DENSE1]
    with torch.no_grad():
        layer.log_alpha.fill_(0.5)
    images = torch.rand(2, 1, 28, 28)
    mean, std = activation_moments(model, images)
    inputs = model.input_of(DENSE1, images[None])
    draws = 500
    noise = ModelGenerators([7])
    with torch.no_grad():
        samples = torch.stack([layer(inputs, ForwardMode.WEIGHTS, noise)[0] for _ in range(draws)])
    # every (image, neuron): sample mean within 5 standard errors, variance within 5 of its SE
    assert bool(((samples.mean(0) - mean).abs() < 5 * std / math.sqrt(draws)).all())
    relative = samples.var(0) / std**2 - 1
    assert bool((relative.abs() < 5 * math.sqrt(2 / draws)).all())


def test_class_densities_are_averages_of_normal_densities():
    mean = torch.tensor([0.0, 1.0, -2.0, 0.5])
    std = torch.tensor([1.0, 0.5, 2.0, 1.5])
    labels = torch.tensor([0, 0, 1, 1])
    grid = torch.linspace(-12, 12, 4001)
    average, spread = class_densities(mean, std, labels, grid)
    step = float(grid[1] - grid[0])
    assert average.sum(1) * step == pytest.approx([1.0, 1.0], abs=1e-4)
    peak = 1 / math.sqrt(2 * math.pi)  # class 0 at z = 0: (N(0; 0, 1) + N(0; 1, 0.25)) / 2
    at_zero = (peak + peak / 0.5 * math.exp(-0.5 * 4.0)) / 2
    assert average[0, 2000] == pytest.approx(at_zero, rel=1e-5)
    assert spread.shape == average.shape and (spread >= 0).all()


def test_tiny_run_writes_its_files(tmp_path: Path) -> None:
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    out = tmp_path / "out"
    argv = ["reproduce", "variance-activations", "--quick", "--train-size", "200",
            "--epochs", "1", "--images", "200", "--out", str(out), "--data-dir", str(data),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    frame = pd.read_csv(out / "neurons.csv")
    assert len(frame) == 4 * 10 and (frame["mean s"] > 0).all()
    assert (out / "activations.png").stat().st_size > 0
    assert "dense1 mean log alpha" in (out / "summary.md").read_text()
