"""Bad targets and inputs reach the likelihoods and objectives with the offending value and its
position named."""

from __future__ import annotations

import pytest
import torch

import vbnn
from vbnn.training import likelihoods
from vbnn.training.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
)
from vbnn.training.objectives import elbo, log_joint, log_likelihood


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (torch.tensor([0, 1, 4, 2]), r"label 4 at target\[2\] is outside \[0, 4\)"),
        (torch.tensor([0, -1, 3, 2]), r"label -1 at target\[1\] is outside \[0, 4\)"),
        (torch.tensor([0.0, 1.0, 4.0, 2.0]), r"label 4 at target\[2\] is outside \[0, 4\)"),
        (torch.tensor([0.0, 1.0, 1.5, 3.0]), r"label 1.5 at target\[2\] is not an integer"),
        (torch.tensor([0.0, float("nan"), 2.0]), r"label nan at target\[1\] is not an integer"),
        (torch.tensor([0.0, 1.0, float("inf")]), r"label inf at target\[2\] is not an integer"),
    ],
)
def test_categorical_labels_outside_the_classes_are_named(labels, message) -> None:
    with pytest.raises(ValueError, match=message):
        CategoricalLikelihood().log_prob(torch.zeros(len(labels), 4), labels)


def test_categorical_labels_of_the_wrong_length_name_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"got labels \(5,\), logits \(4, 3\)"):
        CategoricalLikelihood().log_prob(torch.zeros(4, 3), torch.zeros(5, dtype=torch.long))


def test_categorical_labels_of_a_stack_name_the_model_and_the_example() -> None:
    labels = torch.tensor([[0, 1, 2], [3, 0, 7]])
    with pytest.raises(ValueError, match=r"label 7 at target\[1, 2\]"):
        CategoricalLikelihood().log_prob(torch.zeros(2, 3, 5), labels)


def test_valid_labels_still_give_the_log_softmax() -> None:
    logits = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    expected = torch.log_softmax(logits, -1)[torch.arange(6), labels]
    torch.testing.assert_close(CategoricalLikelihood().log_prob(logits, labels), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_labels_holding_whole_numbers_are_the_integer_labels(dtype) -> None:
    logits = torch.randn(2, 6, 3, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    likelihood = CategoricalLikelihood()
    torch.testing.assert_close(
        likelihood.log_prob(logits, labels.to(dtype)), likelihood.log_prob(logits, labels)
    )


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


def _regression_batch() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(vbnn.MeanField(3, 4), torch.nn.Tanh(), vbnn.MeanField(4, 1))
    return model, torch.randn(8, 3), torch.randn(8)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "objective",
    [
        lambda m, x, y: elbo(m, GaussianLikelihood(), None, x, y, dataset_size=80),
        lambda m, x, y: log_joint(m, GaussianLikelihood(), vbnn.GaussianPrior(1.0), x, y),
        lambda m, x, y: log_likelihood(m, GaussianLikelihood(), x, y),
    ],
    ids=["elbo", "log_joint", "log_likelihood"],
)
def test_a_non_finite_input_is_named_by_every_objective(objective, bad: float) -> None:
    model, x, y = _regression_batch()
    x[5, 2] = bad
    x[6, 0] = float("nan")  # a later one: the first is named
    with pytest.raises(ValueError, match=rf"x\[5, 2\] is {bad}: the network's inputs must be"):
        objective(model, x, y)


def test_the_input_check_is_off_where_checks_are_off(monkeypatch) -> None:
    model, x, y = _regression_batch()
    finite = elbo(model, GaussianLikelihood(), None, x, y)["objective"]
    assert torch.isfinite(finite)
    x[0, 0] = float("nan")
    monkeypatch.setattr(likelihoods, "checking", lambda: False)  # as inside a compiled graph
    assert torch.isnan(elbo(model, GaussianLikelihood(), None, x, y)["objective"])
