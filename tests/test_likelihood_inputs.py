"""Bad targets reach the likelihoods with the offending value and its position named."""

from __future__ import annotations

import pytest
import torch

from vbnn.training.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (torch.tensor([0, 1, 4, 2]), r"label 4 at target\[2\] is outside \[0, 4\)"),
        (torch.tensor([0, -1, 3, 2]), r"label -1 at target\[1\] is outside \[0, 4\)"),
        (torch.tensor([0.0, 1.0, 2.0, 3.0]), "need integer labels"),
    ],
)
def test_categorical_labels_outside_the_classes_are_named(labels, message) -> None:
    with pytest.raises(ValueError, match=message):
        CategoricalLikelihood().log_prob(torch.zeros(4, 4), labels)


def test_categorical_labels_of_a_stack_name_the_model_and_the_example() -> None:
    labels = torch.tensor([[0, 1, 2], [3, 0, 7]])
    with pytest.raises(ValueError, match=r"label 7 at target\[1, 2\]"):
        CategoricalLikelihood().log_prob(torch.zeros(2, 3, 5), labels)


def test_valid_labels_still_give_the_log_softmax() -> None:
    logits = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    expected = torch.log_softmax(logits, -1)[torch.arange(6), labels]
    torch.testing.assert_close(CategoricalLikelihood().log_prob(logits, labels), expected)


@pytest.mark.parametrize("bad", [2.0, 0.5, -1.0])
def test_bernoulli_labels_must_be_zero_or_one(bad: float) -> None:
    labels = torch.tensor([0.0, 1.0, bad])
    with pytest.raises(ValueError, match=rf"label {bad} at target\[2\] is not 0 or 1"):
        BernoulliLikelihood().log_prob(torch.zeros(3), labels)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_regression_target_is_named(bad: float) -> None:
    target = torch.tensor([0.0, 1.0, bad, 2.0])
    with pytest.raises(ValueError, match=rf"target\[2\] is {bad}: targets must be finite"):
        GaussianLikelihood().log_prob(torch.zeros(4, 1), target)
