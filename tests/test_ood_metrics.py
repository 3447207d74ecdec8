"""Out-of-distribution metrics against scikit-learn, on scores with and without ties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from vbnn.metrics import (
    aupr,
    auroc,
    false_positive_rate_at,
    max_probability,
    mutual_information,
    out_of_distribution,
    predictive_entropy,
)


def scores(seed: int, ties: bool) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    inside, outside = rng.normal(0.0, 1.0, 300), rng.normal(0.8, 1.3, 170)
    if ties:  # coarse scores: many equal values within and across the two groups
        inside, outside = np.round(inside, 1), np.round(outside, 1)
    return torch.from_numpy(inside), torch.from_numpy(outside)


def sklearn_reference(inside: torch.Tensor, outside: torch.Tensor, rate: float):
    labels = np.r_[np.zeros(len(inside)), np.ones(len(outside))]
    values = np.r_[inside.numpy(), outside.numpy()]
    fpr, tpr, _ = roc_curve(labels, values, drop_intermediate=False)
    return (
        roc_auc_score(labels, values),
        average_precision_score(labels, values),
        fpr[np.argmax(tpr >= rate)],
    )


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_three_metrics_equal_scikit_learn(seed: int, ties: bool) -> None:
    inside, outside = scores(seed, ties)
    expected_auroc, expected_aupr, _ = sklearn_reference(inside, outside, 0.95)
    assert auroc(inside, outside).item() == pytest.approx(expected_auroc, abs=1e-12)
    assert aupr(inside, outside).item() == pytest.approx(expected_aupr, abs=1e-12)
    for rate in (0.5, 0.8, 0.95, 1.0):
        reference = sklearn_reference(inside, outside, rate)[2]
        value = false_positive_rate_at(inside, outside, rate).item()
        assert value == pytest.approx(reference, abs=1e-12)


def test_separated_scores_are_perfect_and_swapped_ones_are_worst() -> None:
    inside, outside = torch.linspace(0, 1, 50, dtype=torch.float64), torch.linspace(2, 3, 20)
    result = out_of_distribution(inside, outside.double())
    assert result == {"AUROC": 1.0, "AUPR": 1.0, "FPR95": 0.0}
    assert auroc(outside.double(), inside).item() == 0.0
    assert false_positive_rate_at(outside.double(), inside).item() == 1.0


def test_an_uninformative_score_gives_a_half_and_the_base_rate() -> None:
    inside, outside = torch.zeros(30, dtype=torch.float64), torch.zeros(10, dtype=torch.float64)
    assert auroc(inside, outside).item() == 0.5
    assert aupr(inside, outside).item() == pytest.approx(10 / 40)


def test_uncertainty_scores_of_sampled_predictives_detect_disagreement() -> None:
    """Samples that agree (in distribution) against samples that disagree (out): the mutual
    information separates them perfectly, as do entropy and 1 - max probability."""
    generator = torch.Generator().manual_seed(0)
    agree = torch.softmax(4 * torch.randn(1, 40, 3, generator=generator), -1).expand(8, 40, 3)
    disagree = torch.softmax(4 * torch.randn(8, 25, 3, generator=generator), -1)
    information = out_of_distribution(mutual_information(agree), mutual_information(disagree))
    assert information["AUROC"] == 1.0
    confidence_gap = 1 - max_probability(disagree)
    assert confidence_gap.shape == (25,) and torch.all(confidence_gap >= 0)
    entropy = out_of_distribution(predictive_entropy(agree), predictive_entropy(disagree))
    assert entropy["AUROC"] > 0.5


@pytest.mark.parametrize(
    ("inside", "outside", "message"),
    [
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), "scores_out must be a floating"),
        (torch.zeros(3, 2), torch.zeros(3), r"scores_in must be a non-empty \(N,\)"),
        (torch.zeros(0), torch.zeros(3), r"scores_in must be a non-empty \(N,\)"),
        (torch.tensor([0.0, float("nan")]), torch.zeros(3), r"scores_in\[1\] is nan"),
    ],
)
def test_bad_scores_are_named(inside, outside, message) -> None:
    with pytest.raises(ValueError, match=message):
        auroc(inside, outside)


def test_a_target_rate_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="true_positive_rate must be in"):
        false_positive_rate_at(torch.zeros(3), torch.ones(3), 0.0)
