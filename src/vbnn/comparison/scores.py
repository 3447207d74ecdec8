"""The one metric table: every metric ``compare`` reports, per task, as a function of a predictive.

Every path that scores a classifier (an entry on a network, an MLP on a table, the classifier
stacks) calls ``classification_scores`` on the predictive probabilities p(y | x) =
1/K sum_k softmax(f_k(x)) of the test inputs; every path that scores a regression on a network
calls ``regression_scores`` on the Gaussian mixture 1/K sum_k N(f_k(x), sigma_k^2) (the UCI
engine computes the same three inside its stacks). Adding a metric: one function of the
predictive and one line of ``CLASSIFICATION`` or ``REGRESSION``; the report, the stored rows and
the table pick it up by its column name.

Stored runs made before a metric existed read back without its column (NaN in the report).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from vbnn.metrics import (
    accuracy,
    brier_score,
    classification_nll,
    expected_calibration_error,
    gaussian_mixture_log_likelihood,
    interval_coverage,
    rmse,
)
from vbnn.selective import aurc

ECE_BINS = 15


@dataclass(frozen=True)
class Metric:
    """A column of the report: its heading and how it is computed.

    Attributes:
        heading: the table's heading.
        function: of a classifier's (probabilities (N, C), labels (N,)), or of a regressor's
            (means (K, N), stds (K, N), targets (N,), level), to a number.
        higher_is_better: the direction of a better entry.
    """

    heading: str
    function: Callable[..., float]
    higher_is_better: bool


def _log_likelihood(probabilities: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean test log-likelihood, nats per example (probabilities floored at 1e-300 against
    log 0 only)."""
    return -float(classification_nll(probabilities, labels, floor=1e-300))


CLASSIFICATION: dict[str, Metric] = {
    "log_likelihood": Metric("test LL", _log_likelihood, True),
    "accuracy": Metric("accuracy", lambda p, y: float(accuracy(p, y)), True),
    "ece": Metric("ECE", lambda p, y: float(expected_calibration_error(p, y, ECE_BINS)), False),
    "brier": Metric("Brier", lambda p, y: float(brier_score(p, y)), False),
    # selective prediction: the area under the risk-coverage curve of the max probability
    "aurc": Metric("AURC", lambda p, y: float(aurc(p, y)), False),
}

REGRESSION: dict[str, Metric] = {
    "log_likelihood": Metric(
        "test LL",
        lambda m, s, y, level: float(gaussian_mixture_log_likelihood(m, s, y).mean()),
        True,
    ),
    "rmse": Metric("RMSE", lambda m, s, y, level: float(rmse(m.mean(0), y)), False),
    "coverage": Metric(
        "coverage", lambda m, s, y, level: float(interval_coverage(m, s, y, level)), True
    ),
}


def classification_scores(probabilities: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Every classification metric of predictive ``probabilities`` (N, C) on ``labels`` (N,)."""
    return {name: metric.function(probabilities, labels) for name, metric in CLASSIFICATION.items()}


def regression_scores(
    means: torch.Tensor, stds: torch.Tensor, targets: torch.Tensor, level: float
) -> dict[str, float]:
    """Every regression metric of the mixture of K Gaussians (means and stds (K, N)) on
    ``targets`` (N,), the coverage of its central ``level`` interval."""
    return {
        name: metric.function(means, stds, targets, level) for name, metric in REGRESSION.items()
    }
