"""Selective prediction: risk-coverage curves and AURC against hand computations and limits."""

from __future__ import annotations

import math

import pytest
import torch

from vbnn.selective import aurc, excess_aurc, optimal_aurc, risk_coverage


def _predictions(errors: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-class probabilities predicting class 0 and labels with the given errors."""
    probabilities = torch.tensor([[0.8, 0.2]] * len(errors), dtype=torch.float64)
    return probabilities, torch.tensor(errors)


def test_hand_example() -> None:
    """Confidence 0.9, 0.8, 0.7, 0.6 with errors 0, 1, 0, 1: risks 0, 1/2, 1/3, 1/2, AURC 1/3;
    the best order (errors last) has risks 0, 0, 1/3, 1/2, AURC* 5/24, so E-AURC = 1/8."""
    probabilities, labels = _predictions([0, 1, 0, 1])
    confidence = torch.tensor([0.9, 0.8, 0.7, 0.6], dtype=torch.float64)
    shuffle = [2, 0, 3, 1]  # the examples' order does not matter
    probabilities, labels, confidence = probabilities[shuffle], labels[shuffle], confidence[shuffle]
    coverage, risk = risk_coverage(probabilities, labels, confidence)
    torch.testing.assert_close(coverage, torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
    torch.testing.assert_close(risk, torch.tensor([0, 1 / 2, 1 / 3, 1 / 2], dtype=torch.float64))
    torch.testing.assert_close(
        aurc(probabilities, labels, confidence), torch.tensor(1 / 3).double()
    )
    torch.testing.assert_close(optimal_aurc(probabilities, labels), torch.tensor(5 / 24).double())
    torch.testing.assert_close(
        excess_aurc(probabilities, labels, confidence), torch.tensor(1 / 8).double()
    )


def test_default_confidence_is_the_max_probability() -> None:
    probabilities = torch.tensor([[0.6, 0.4], [0.1, 0.9], [0.3, 0.7]], dtype=torch.float64)
    labels = torch.tensor([1, 1, 0])  # wrong, right, wrong; confidence 0.6, 0.9, 0.7
    _, risk = risk_coverage(probabilities, labels)
    torch.testing.assert_close(risk, torch.tensor([0, 1 / 2, 2 / 3], dtype=torch.float64))


def test_ties_count_at_their_mean_error_whatever_the_order() -> None:
    """Confidence 0.9, 0.9, 0.5 with errors 1, 0, 0: the tied pair has half an error per
    position, risks 1/2, 1/2, 1/3, in either order of the pair."""
    probabilities, labels = _predictions([1, 0, 0])
    confidence = torch.tensor([0.9, 0.9, 0.5], dtype=torch.float64)
    expected = torch.tensor([1 / 2, 1 / 2, 1 / 3], dtype=torch.float64)
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0]):
        _, risk = risk_coverage(probabilities[order], labels[order], confidence[order])
        torch.testing.assert_close(risk, expected)
    constant = torch.zeros(3, dtype=torch.float64)
    torch.testing.assert_close(aurc(probabilities, labels, constant), torch.tensor(1 / 3).double())


def test_perfect_ranking_has_no_excess_and_tends_to_the_closed_form() -> None:
    generator = torch.Generator().manual_seed(0)
    for examples in (10, 1000, 100_000):
        errors = (torch.rand(examples, generator=generator) < 0.3).long()
        probabilities, labels = _predictions(errors.tolist())
        confidence = (
            1.0
            - errors.double()
            + 0.01 * torch.rand(examples, generator=generator, dtype=torch.float64)
        )
        assert excess_aurc(probabilities, labels, confidence).abs() < 1e-12
        rate = errors.double().mean()
        limit = rate + (1 - rate) * torch.log1p(-rate)
        # the finite sum differs from the integral by at most (log N + 1) / N
        assert (
            abs(optimal_aurc(probabilities, labels) - limit) < (math.log(examples) + 1) / examples
        )


def test_random_confidence_gives_the_error_rate() -> None:
    """E[risk_k] = r at every k when the order is random, so E[AURC] = r exactly: the mean over
    200 random confidences is within 4 standard errors of r."""
    generator = torch.Generator().manual_seed(1)
    probabilities, labels = _predictions([1] * 60 + [0] * 140)
    values = torch.stack(
        [
            aurc(probabilities, labels, torch.rand(200, generator=generator, dtype=torch.float64))
            for _ in range(200)
        ]
    )
    standard_error = values.std() / math.sqrt(len(values))
    assert abs(values.mean() - 0.3) < 4 * standard_error
    assert standard_error > 0


def test_bad_confidence_is_named() -> None:
    probabilities, labels = _predictions([0, 1])
    with pytest.raises(ValueError, match=r"confidence must be a floating \(N,\) = \(2,\)"):
        aurc(probabilities, labels, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"confidence\[1\] is nan"):
        aurc(probabilities, labels, torch.tensor([0.5, math.nan], dtype=torch.float64))


def test_the_trapezoid_convention_differs_by_the_end_points() -> None:
    """torch-uncertainty's area, trapezoids over (k / N, risk_k) divided by 1 - 1 / N, equals
    (sum_k risk_k - (risk_1 + risk_N) / 2) / (N - 1), as the module says."""
    probabilities, labels = _predictions([0, 1, 1, 0, 1, 0, 0])
    confidence = torch.linspace(1, 0, 7, dtype=torch.float64)
    coverage, risk = risk_coverage(probabilities, labels, confidence)
    trapezoid = torch.trapezoid(risk, coverage) / (1 - 1 / 7)
    torch.testing.assert_close(trapezoid, (risk.sum() - (risk[0] + risk[-1]) / 2) / 6)
    assert abs(trapezoid - aurc(probabilities, labels, confidence)) < 2 / 7
