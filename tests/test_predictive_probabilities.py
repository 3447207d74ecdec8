"""The ensemble predictive (1/K) sum_k softmax(f_k(x)) of ``networks.predictive``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import vbnn
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.predictive import class_probabilities, predictive_probabilities

SEED = 20261202


def test_the_predictive_is_the_average_of_each_draws_softmax() -> None:
    """Against the definition written out draw by draw and class by class (exp / sum exp), in
    float64: equal to float64 rounding; rows sum to 1; one draw gives its softmax."""
    generator = torch.Generator().manual_seed(SEED)
    logits = 4 * torch.randn(7, 3, 5, 4, generator=generator)  # (K, M, N, C)
    exps = logits.double().exp()
    expected = sum(exps[k] / exps[k].sum(-1, keepdim=True) for k in range(7)) / 7
    got = predictive_probabilities(logits)
    assert got.dtype == torch.float64 and got.shape == (3, 5, 4)
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(got.sum(-1), torch.ones(3, 5, dtype=torch.float64))
    assert torch.equal(predictive_probabilities(logits[:1]), class_probabilities(logits[0]))


def test_the_predictive_of_a_network_converges_to_its_expectation_over_q() -> None:
    """For a mean-field network, the K-sample predictive of ``vbnn.sample`` draws lies within
    4 standard errors (sd of softmax(f_k(x))_c over draws / sqrt K) of a 5,000-draw estimate
    of E_q softmax(f(x))_c."""
    torch.manual_seed(0)
    model = vbnn.convert(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3)), "mf")
    with torch.no_grad():  # a wide q, so that the draws' softmaxes differ
        for name, parameter in model.named_parameters():
            if "log_std" in name:
                parameter.fill_(-0.5)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(SEED))
    many = vbnn.sample(model, x, 5_000, noise=ModelGenerators([1]))
    reference = predictive_probabilities(many)
    spread = class_probabilities(many).std(0)
    draws = 50
    few = vbnn.sample(model, x, draws, noise=ModelGenerators([2]))
    error = (predictive_probabilities(few) - reference).abs()
    assert (error <= 4 * spread / math.sqrt(draws) + 1e-12).all()
    assert spread.max() > 1e-3  # the draws differ: the check can fail


@pytest.mark.parametrize("shape", [(4,), (0, 3, 2)])
def test_logits_without_draws_are_refused_with_their_shape(shape) -> None:
    with pytest.raises(ValueError, match=rf"K >= 1 draws, got shape \({shape[0]},"):
        predictive_probabilities(torch.zeros(shape))
