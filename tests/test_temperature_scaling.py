"""Temperature scaling (``vbnn.calibration``) against a dense grid, the closed form of two
classes with logits +-a, the true temperature of the labels' softmax, and the invariances."""

from __future__ import annotations

import math

import pytest
import torch

import vbnn
from vbnn import metrics
from vbnn.calibration import temperature_nll
from vbnn.networks.predictive import predictive_probabilities


def _labelled(examples: int, classes: int, temperature: float, seed: int):
    """Logits (N, C) and labels drawn from softmax(logits / temperature)."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(examples, classes, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)
    return logits, labels.squeeze(1)


def test_temperature_one_leaves_the_predictive_unchanged() -> None:
    logits, labels = _labelled(50, 4, 1.0, seed=0)
    probabilities = torch.softmax(logits, -1)
    assert torch.equal(vbnn.temperature_scaled(logits, 1.0), probabilities)
    nll = metrics.classification_nll(probabilities, labels, floor=1e-300)
    assert math.isclose(temperature_nll(logits, labels, 1.0), float(nll), rel_tol=1e-12)


def test_the_fitted_temperature_minimises_the_nll_over_a_dense_grid() -> None:
    """No grid point of 2001 log-spaced temperatures in [0.01, 100] has a lower NLL, and the
    grid's best point is within one grid step (in log T) of T_hat."""
    logits, labels = _labelled(300, 4, 2.5, seed=1)
    fitted = vbnn.fit_temperature(logits, labels)
    grid = torch.logspace(-2, 2, 2001, dtype=torch.float64)
    log_probabilities = torch.log_softmax(logits[None] / grid[:, None, None], -1)
    nll = -log_probabilities.gather(2, labels.expand(len(grid), -1)[..., None]).mean((1, 2))
    assert temperature_nll(logits, labels, fitted) <= float(nll.min()) + 1e-12
    step = math.log(grid[1] / grid[0])
    assert abs(math.log(fitted / float(grid[nll.argmin()]))) <= step


def test_two_classes_with_logits_plus_minus_a_have_the_closed_form_temperature() -> None:
    """Logits (a, -a) for every example, a fraction q labelled 0: NLL(beta) = q log(1 +
    exp(-2 a beta)) + (1 - q) log(1 + exp(2 a beta)) has its zero derivative at
    sigmoid(2 a beta) = q, so T_hat = 2 a / logit(q)."""
    a = 1.5
    for zeros, examples in ((70, 100), (9, 10), (600, 1000)):
        logits = torch.tensor([[a, -a]], dtype=torch.float64).expand(examples, -1)
        labels = (torch.arange(examples) >= zeros).long()
        q = zeros / examples
        expected = 2 * a / math.log(q / (1 - q))
        assert math.isclose(vbnn.fit_temperature(logits, labels), expected, rel_tol=1e-12)


def test_the_fitted_temperature_tends_to_the_labels_temperature() -> None:
    """Labels drawn from softmax((a, -a) / T) with T = 2: T_hat = 2 a / logit(q_hat) is within 4
    standard errors of T; by the delta method SE = 2 a / (logit(q)^2 sqrt(q (1 - q) n)), q =
    sigmoid(2 a / T)."""
    a, temperature, examples = 1.5, 2.0, 20_000
    q = 1 / (1 + math.exp(-2 * a / temperature))
    generator = torch.Generator().manual_seed(2)
    labels = (torch.rand(examples, generator=generator, dtype=torch.float64) >= q).long()
    logits = torch.tensor([[a, -a]], dtype=torch.float64).expand(examples, -1)
    fitted = vbnn.fit_temperature(logits, labels)
    error = 2 * a / (math.log(q / (1 - q)) ** 2 * math.sqrt(q * (1 - q) * examples))
    assert abs(fitted - temperature) < 4 * error, (fitted, error)


def test_scaling_is_positive_and_keeps_the_predicted_class() -> None:
    logits, labels = _labelled(200, 5, 0.4, seed=3)
    fitted = vbnn.fit_temperature(logits, labels)
    assert 0 < fitted < 1  # the labels are sharper than the logits
    scaled = vbnn.temperature_scaled(logits, fitted)
    assert torch.equal(scaled.argmax(-1), logits.argmax(-1))
    before = metrics.accuracy(torch.softmax(logits, -1), labels)
    assert torch.equal(metrics.accuracy(scaled, labels), before)


def test_a_bayesian_predictive_is_scaled_through_the_log_of_its_mean_probabilities() -> None:
    """Scores log p_bar give p_bar^(1/T) normalised; log-probabilities of one sample fit the
    same temperature as its logits (a row constant does not change the softmax)."""
    generator = torch.Generator().manual_seed(4)
    samples = torch.randn(8, 30, 3, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (30,), generator=generator)
    mean = predictive_probabilities(samples)
    scaled = vbnn.temperature_scaled(mean.log(), 1.7)
    powered = mean ** (1 / 1.7)
    torch.testing.assert_close(scaled, powered / powered.sum(-1, keepdim=True))
    logits = samples[0]
    one = vbnn.fit_temperature(logits, labels)
    assert math.isclose(vbnn.fit_temperature(logits.log_softmax(-1), labels), one, rel_tol=1e-9)


def test_the_bounds_are_returned_when_the_nll_falls_past_them() -> None:
    """Perfectly separated labels: NLL -> 0 as T -> 0 (T_min); logits that favour a wrong
    class: the NLL falls as T -> inf (T_max)."""
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, -1.0]], dtype=torch.float64)
    right, wrong = torch.tensor([0, 1, 0]), torch.tensor([1, 0, 1])
    assert vbnn.fit_temperature(logits, right, bounds=(0.05, 20.0)) == 0.05
    assert vbnn.fit_temperature(logits, wrong, bounds=(0.05, 20.0)) == 20.0


def test_bad_inputs_are_refused_with_the_reason() -> None:
    logits = torch.tensor([[0.0, -math.inf], [1.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"scores\[0, 1\] \(the label's\) is -inf"):
        vbnn.fit_temperature(logits, torch.tensor([1, 0]))
    assert vbnn.fit_temperature(logits, torch.tensor([0, 0])) > 0  # -inf off the label is fine
    with pytest.raises(ValueError, match="NaN or"):
        vbnn.fit_temperature(torch.full((2, 2), math.nan), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        vbnn.fit_temperature(logits, torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="bounds must satisfy"):
        vbnn.fit_temperature(logits, torch.tensor([0, 0]), bounds=(1.0, 0.5))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        vbnn.temperature_scaled(logits, 0.0)
