"""KL terms of the variance-networks priors against numerical integration and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from torch.distributions import Normal
from torch.distributions import kl_divergence as torch_kl

from vbnn.layers.registry import FAMILIES
from vbnn.priors.ard import ARDPrior, kl_ard
from vbnn.priors.gaussian import GaussianPrior
from vbnn.priors.kl import (
    DiagonalGaussian,
    DropoutGaussian,
    ScaledUniform,
    ZeroMeanGaussian,
    kl_divergence,
)
from vbnn.priors.log_uniform import (
    KLEstimator,
    LogUniformPrior,
    kl_log_uniform_approximation,
    kl_log_uniform_one_sample,
    log_uniform_kl_by_quadrature,
)
from vbnn.priors.student_t import StudentTPrior, kl_student_t_one_sample

GRID = np.linspace(-8.0, 10.0, 37)  # log alpha


@pytest.fixture(scope="module")
def true_kl() -> np.ndarray:
    return np.array([log_uniform_kl_by_quadrature(a) for a in GRID])


def test_quadrature_has_the_analytic_limits(true_kl: np.ndarray) -> None:
    # alpha -> infinity: 0 by the normalisation; alpha -> 0: -1/2 log alpha + C
    assert abs(log_uniform_kl_by_quadrature(30.0)) < 1e-9
    assert abs(true_kl[0] - (4.0 + 0.5 * (0.5772156649015329 + math.log(2)))) < 1e-3


def test_molchanov_approximation_matches_integration_within_0_01(true_kl: np.ndarray) -> None:
    """Molchanov et al. report their fit good to ~0.01 nats; we find max error 0.0094."""
    approx = kl_log_uniform_approximation(torch.tensor(GRID, dtype=torch.float64)).numpy()
    assert np.abs(approx - true_kl).max() < 0.01


def test_weight_wise_log_uniform_kl_has_the_derivative_of_the_approximation() -> None:
    """One alpha per weight takes the fused sum: its value and gradient are those of the
    elementwise approximation summed per model (gradcheck and autograd of the composite), and it
    refuses a second derivative rather than return a wrong one."""
    generator = torch.Generator().manual_seed(3)
    mean = torch.randn(2, 6, 4, generator=generator, dtype=torch.float64)
    log_alpha = (
        4.0 * torch.randn(2, 6, 4, generator=generator, dtype=torch.float64)
    ).requires_grad_()
    prior = LogUniformPrior()
    assert torch.autograd.gradcheck(
        lambda value: kl_divergence(DropoutGaussian(mean, value), prior), (log_alpha,)
    )
    weights = torch.tensor([0.5, -2.0], dtype=torch.float64)
    (kl_divergence(DropoutGaussian(mean, log_alpha), prior) * weights).sum().backward()
    fused = log_alpha.grad.clone()
    log_alpha.grad = None
    composite = kl_log_uniform_approximation(log_alpha).reshape(2, -1).sum(1)
    torch.testing.assert_close(kl_divergence(DropoutGaussian(mean, log_alpha), prior), composite)
    (composite * weights).sum().backward()
    torch.testing.assert_close(fused, log_alpha.grad)
    (first,) = torch.autograd.grad(
        kl_divergence(DropoutGaussian(mean, log_alpha), prior).sum(), log_alpha, create_graph=True
    )
    with pytest.raises(RuntimeError):
        torch.autograd.grad(first.sum(), log_alpha)


def test_one_sample_estimate_is_unbiased(true_kl: np.ndarray) -> None:
    generator = torch.Generator().manual_seed(0)
    log_alpha = torch.tensor(GRID[::4], dtype=torch.float64).unsqueeze(1)
    eps = torch.randn(len(log_alpha), 200_000, generator=generator, dtype=torch.float64)
    draws = kl_log_uniform_one_sample(log_alpha, eps)
    mean, error = draws.mean(1).numpy(), (draws.std(1) / math.sqrt(eps.shape[1])).numpy()
    assert np.all(np.abs(mean - true_kl[::4]) < 5 * error)


def test_kl_terms_decrease_in_alpha(true_kl: np.ndarray) -> None:
    log_alpha = torch.tensor(GRID, dtype=torch.float64)
    assert np.all(np.diff(true_kl) < 0)
    assert torch.all(torch.diff(kl_log_uniform_approximation(log_alpha)) < 0)
    assert torch.all(torch.diff(kl_ard(log_alpha)) < 0)


def test_ard_kl_is_the_gaussian_kl_at_the_optimal_prior_variance() -> None:
    """KL(N(mu, alpha mu^2) || N(0, (alpha + 1) mu^2)) = 1/2 log(1 + 1/alpha) (Neklyudov et al. 2019
    eq. 11 / 2)."""
    mean = torch.tensor([-2.0, 0.3, 1.7], dtype=torch.float64)
    for log_alpha in (-3.0, 0.0, 4.0):
        alpha = math.exp(log_alpha)
        exact = torch_kl(
            Normal(mean, math.sqrt(alpha) * mean.abs()),
            Normal(0.0, math.sqrt(alpha + 1) * mean.abs()),
        )
        got = kl_divergence(
            DropoutGaussian(mean.unsqueeze(0), torch.tensor(log_alpha, dtype=mean.dtype)),
            ARDPrior(),
        )
        torch.testing.assert_close(got, exact.sum().unsqueeze(0))
        # the same value through the additive form KL(N(mu, sigma^2) || N(0, mu^2 + sigma^2))
        std = math.sqrt(alpha) * mean.abs()
        torch.testing.assert_close(
            kl_divergence(DiagonalGaussian(mean.unsqueeze(0), std.unsqueeze(0)), ARDPrior()), got
        )


def _student_t_kl_by_quadrature(mean: float, std: float, nu: float) -> float:
    def integrand(w: float) -> float:
        return stats.norm.pdf(w, mean, std) * stats.t.logpdf(w, nu)

    cross = integrate.quad(integrand, mean - 12 * std, mean + 12 * std, points=[0.0], limit=200)[0]
    return -stats.norm.entropy(mean, std) - cross


CASES = [(0.5, 0.3, 1.0), (-1.0, 2.0, 3.0), (0.2, 1.0, 1.0)]


@pytest.mark.parametrize(("mean", "std", "nu"), CASES)
def test_student_t_one_sample_estimate_is_unbiased(mean: float, std: float, nu: float) -> None:
    eps = torch.randn(400_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    draws = kl_student_t_one_sample(
        torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64), nu, eps
    )
    error = float(draws.std()) / math.sqrt(len(eps))
    assert abs(float(draws.mean()) - _student_t_kl_by_quadrature(mean, std, nu)) < 5 * error


def test_student_t_with_vanishing_nu_is_log_uniform_plus_a_constant() -> None:
    """Neklyudov et al. 2018 eq. 27: as nu -> 0 the Student-t KL equals the log-uniform KL up to a
    constant."""
    eps = torch.randn(50, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    differences = []
    for mean in (3.0, 0.01, 0.7):  # w = mean (1 + sqrt(alpha) eps): mean > 0 keeps eps aligned
        for log_alpha in (-4.0, 0.0, 6.0):
            mean_t = torch.tensor(mean, dtype=torch.float64)
            std = math.exp(0.5 * log_alpha) * abs(mean)
            std_t = torch.tensor(std, dtype=eps.dtype)
            student = kl_student_t_one_sample(mean_t, std_t, 1e-16, eps)
            log_uniform = kl_log_uniform_one_sample(torch.tensor(log_alpha, dtype=eps.dtype), eps)
            differences.append(student - log_uniform)
    differences = torch.cat(differences)
    assert float(differences.max() - differences.min()) < 1e-8


def test_zero_mean_kl_is_constant_in_sigma() -> None:
    """Neklyudov et al. 2019 appendix F: KL(N(0, sigma^2) || LogU) does not depend on sigma (0
    here); the same for the Student-t estimate with nu = 1e-16 (identical noise gives identical
    values)."""
    small, large = torch.full((1, 4), 0.01), torch.full((1, 4), 30.0)
    assert float(kl_divergence(ZeroMeanGaussian(small), LogUniformPrior())) == 0.0
    assert float(kl_divergence(ZeroMeanGaussian(large), ARDPrior())) == 0.0
    values = [
        kl_divergence(ZeroMeanGaussian(std.double()), StudentTPrior(seed=3))
        for std in (small, large)
    ]
    torch.testing.assert_close(values[0], values[1], atol=1e-8, rtol=0)
    # the zero-mean layer is the alpha -> infinity limit of the dropout posterior
    assert abs(log_uniform_kl_by_quadrature(40.0)) < 1e-9


def test_log_uniform_prior_estimators_agree_on_average() -> None:
    mean = torch.randn(1, 20_000, dtype=torch.float64)
    log_alpha = torch.tensor(0.5, dtype=torch.float64)
    approx = kl_divergence(DropoutGaussian(mean, log_alpha), LogUniformPrior())
    sampled = kl_divergence(
        DropoutGaussian(mean, log_alpha), LogUniformPrior(KLEstimator.ONE_SAMPLE, seed=4)
    )
    assert abs(float(approx - sampled)) / 20_000 < 0.02
    # the diagonal Gaussian goes through alpha = std^2 / mean^2
    std = math.exp(0.25) * mean.abs()
    torch.testing.assert_close(
        kl_divergence(DiagonalGaussian(mean, std), LogUniformPrior()), approx
    )


def test_invalid_student_t_nu_is_named() -> None:
    with pytest.raises(ValueError, match="nu must be > 0"):
        StudentTPrior(nu=0.0)


def _uniform_kl_by_quadrature(theta: float, log_density) -> float:
    """KL(U(-theta, theta) || p) = -log(2 theta) - (1 / 2 theta) int log p(w) dw."""
    cross = integrate.quad(log_density, -theta, theta, points=[0.0], limit=200)[0] / (2 * theta)
    return -math.log(2 * theta) - cross


@pytest.mark.parametrize(("theta", "nu"), [(0.05, 3.0), (1.0, 1.0), (4.0, 0.5), (0.3, 30.0)])
def test_uniform_kl_to_the_student_t_is_its_closed_form(theta: float, nu: float) -> None:
    log_theta = torch.full((1, 1), math.log(theta), dtype=torch.float64)
    got = float(kl_divergence(ScaledUniform(log_theta), StudentTPrior(nu)))
    expected = _uniform_kl_by_quadrature(theta, lambda w: stats.t.logpdf(w, nu))
    assert got == pytest.approx(expected, abs=1e-9)


def test_uniform_kl_to_the_gaussian_is_its_closed_form_per_model() -> None:
    # a (M,) prior std gives every model its own KL
    log_theta = torch.log(torch.tensor([[0.2, 0.4], [1.5, 0.1]], dtype=torch.float64))
    got = kl_divergence(ScaledUniform(log_theta), GaussianPrior(torch.tensor([0.5, 2.0])))
    for model, std in enumerate((0.5, 2.0)):
        expected = sum(
            _uniform_kl_by_quadrature(t, lambda w, s=std: stats.norm.logpdf(w, 0.0, s))
            for t in log_theta[model].exp().tolist()
        )
        assert float(got[model]) == pytest.approx(expected, abs=1e-9)


def test_uniform_kl_depends_on_the_scale_only_for_priors_that_are_not_scale_invariant() -> None:
    # the uniform variance layer's KL: 0 for log-uniform and ARD, a function of theta for the
    # Student-t (it was 0 for the Student-t too, dropping a term its gradient needs); as nu -> 0
    # the Student-t's dependence on theta vanishes
    small, large = (torch.full((1, 3), math.log(t), dtype=torch.float64) for t in (0.01, 3.0))
    for prior in (LogUniformPrior(), ARDPrior()):
        assert prior.scale_invariant and float(kl_divergence(ScaledUniform(large), prior)) == 0.0
    student = StudentTPrior(3.0)
    assert not student.scale_invariant
    assert (
        abs(
            float(
                kl_divergence(ScaledUniform(large), student)
                - kl_divergence(ScaledUniform(small), student)
            )
        )
        > 1.0
    )
    vanishing = StudentTPrior(1e-16)  # what remains: (nu + 1) pi sqrt(nu) / (2 theta) a weight
    remains = 0.5 * 3 * math.pi * 1e-8 / 0.01
    difference = float(
        kl_divergence(ScaledUniform(small), vanishing)
        - kl_divergence(ScaledUniform(large), vanishing)
    )
    assert difference == pytest.approx(remains, rel=0.01)


def test_variance_layers_take_their_kl_from_the_prior() -> None:
    uniform = FAMILIES["uniform-variance"].build(4, 3)
    torch.testing.assert_close(
        uniform.kl(StudentTPrior(3.0)),
        kl_divergence(ScaledUniform(uniform.weight_log_scale), StudentTPrior(3.0)),
    )
    assert float(uniform.kl(LogUniformPrior())) == 0.0
    bernoulli = FAMILIES["bernoulli-variance"].build(4, 3)
    assert float(bernoulli.kl(ARDPrior())) == 0.0
    for prior in (StudentTPrior(3.0), GaussianPrior(1.0)):  # a discrete q: infinite KL
        with pytest.raises(TypeError, match=f"KL to {type(prior).__name__} is infinite"):
            bernoulli.kl(prior)


def test_a_layer_of_two_forms_takes_the_priors_entry_through_alpha() -> None:
    """The additive layer is both N(mu, alpha mu^2) and N(mu, sigma^2): against a prior with a
    dropout entry (log-uniform, ARD, Student-t) its KL goes through the clipped alpha, against
    one without (the Gaussian) through sigma."""
    layer = FAMILIES["additive"].build(5, 3)
    for prior in (LogUniformPrior(), ARDPrior(), StudentTPrior(3.0, seed=1)):
        alpha = DropoutGaussian(layer.weight_mean, layer.clipped_log_alpha())
        same = type(prior)(**({"nu": 3.0, "seed": 1} if isinstance(prior, StudentTPrior) else {}))
        torch.testing.assert_close(layer.kl(prior), kl_divergence(alpha, same), rtol=0, atol=0)
    sigma = DiagonalGaussian(layer.weight_mean, layer.weight_log_std.exp())
    torch.testing.assert_close(
        layer.kl(GaussianPrior(0.5)), kl_divergence(sigma, GaussianPrior(0.5))
    )
