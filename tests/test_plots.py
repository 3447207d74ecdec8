"""The user-facing figures draw the numbers they claim to draw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vbnn.metrics import expected_calibration_error, reliability_table
from vbnn.plots import plot_predictive_band, plot_reliability


def test_predictive_band_draws_the_sorted_mean_and_the_band(tmp_path) -> None:
    x = np.array([2.0, 0.0, 1.0])
    mean, std = np.array([4.0, 0.0, 2.0]), np.array([0.5, 0.1, 0.2])
    figure = plot_predictive_band(x, mean, std, x, mean, path=tmp_path / "band.png")
    line = figure.axes[0].lines[0]
    np.testing.assert_array_equal(line.get_xdata(), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(line.get_ydata(), [0.0, 2.0, 4.0])
    band = figure.axes[0].collections[0].get_paths()[0].vertices
    assert band[:, 1].max() == pytest.approx(5.0) and band[:, 1].min() == pytest.approx(-0.2)
    assert (tmp_path / "band.png").stat().st_size > 0
    with pytest.raises(ValueError, match="one length, got 3, 3, 2"):
        plot_predictive_band(x, mean, std[:2])


def test_reliability_diagram_bars_are_the_bin_accuracies(tmp_path) -> None:
    torch.manual_seed(0)
    probabilities = torch.softmax(3 * torch.randn(200, 4, dtype=torch.float64), -1)
    labels = torch.randint(0, 4, (200,))
    figure = plot_reliability(probabilities, labels, bins=5, path=tmp_path / "reliability.svg")
    table = reliability_table(probabilities, labels, 5)
    filled = table["count"] > 0
    heights = [bar.get_height() for bar in figure.axes[0].patches]
    np.testing.assert_allclose(heights, table["accuracy"][filled].numpy())
    ece = float(expected_calibration_error(probabilities, labels, 5))
    assert f"ECE {100 * ece:.2f} % (5 equal-width bins)" in figure.axes[0].get_title()
    assert (tmp_path / "reliability.svg").read_text().startswith("<?xml")
