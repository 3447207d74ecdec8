"""The fused kernels equal their composite expressions, values and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from vbnn.core import kernels
from vbnn.core.gaussian import local_reparameterization_moments
from vbnn.core.kernels import (
    EXP2_FROM,
    clip,
    exponential,
    gaussian_from_moments,
    local_reparameterization_sample,
    tanh,
    variance_from_log_std,
)
from vbnn.layers.additive import MEAN_SQUARED_FLOOR, _ClippedLogAlpha
from vbnn.layers.shell import LOG_ALPHA_RANGE
from vbnn.layers.variational_dropout import _DropoutVariance

SEED = 20261121


def _assert_same_values_and_gradients(fused, expected, weights, inputs):
    """``fused`` equals ``expected``, and so do the gradients of sum(weights * each) wrt
    ``inputs``."""
    torch.testing.assert_close(fused, expected)
    for got, want in zip(
        torch.autograd.grad((fused * weights).sum(), inputs),
        torch.autograd.grad((expected * weights).sum(), inputs),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


def _composite(x, weight_mean, weight_log_std, bias_mean, bias_log_std, noise):
    mean, var = local_reparameterization_moments(
        x, weight_mean, torch.exp(2 * weight_log_std), bias_mean, torch.exp(2 * bias_log_std)
    )
    return mean + var.sqrt() * noise


@pytest.mark.parametrize("out_features", [1, 3])
def test_local_reparameterization_sample_matches_composite(out_features):
    generator = torch.Generator().manual_seed(SEED)

    def draw(*shape, requires_grad=True):
        t = torch.randn(*shape, generator=generator, dtype=torch.float64)
        return t.requires_grad_(requires_grad)

    models, rows, inputs = 2, 7, 4
    args = (
        draw(models, rows, inputs),
        draw(models, inputs, out_features),
        draw(models, inputs, out_features),
        draw(models, out_features),
        draw(models, out_features),
        draw(models, rows, out_features, requires_grad=False),
    )
    fused = local_reparameterization_sample(*args)
    torch.testing.assert_close(fused, _composite(*args))
    assert torch.autograd.gradcheck(local_reparameterization_sample, args)
    # the same gradients as autograd through the composite, for a non-trivial upstream gradient
    upstream = torch.randn(fused.shape, generator=generator, dtype=torch.float64)
    ours = torch.autograd.grad(fused, args[:5], upstream)
    reference = torch.autograd.grad(_composite(*args), args[:5], upstream)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b)


def test_local_reparameterization_sample_without_input_gradient():
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(1, 5, 3, generator=generator, dtype=torch.float64)
    weights = [
        torch.randn(*s, generator=generator, dtype=torch.float64).requires_grad_()
        for s in [(1, 3, 2), (1, 3, 2), (1, 2), (1, 2)]
    ]
    noise = torch.randn(1, 5, 2, generator=generator, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda *w: local_reparameterization_sample(x, *w, noise), tuple(weights)
    )


def test_tanh_matches_torch():
    x = torch.linspace(-20, 20, 100_001)
    assert float((tanh(x) - torch.tanh(x)).abs().max()) < 1e-6
    x = torch.randn(3, 50, 20, generator=torch.Generator().manual_seed(SEED)) * 4
    x64 = x[:1, :4, :3].double().requires_grad_()
    assert torch.autograd.gradcheck(tanh, (x64,))


def test_gaussian_from_moments_matches_composite_and_zeroes_the_floored_gradient():
    """mean + sqrt(max(var, floor)) * noise: same values as the composite, autograd's gradients
    of it (gradcheck away from the floor), and a zero variance gradient below the floor."""
    generator = torch.Generator().manual_seed(SEED)
    shape = (2, 3, 4, 5)
    mean = torch.randn(shape, generator=generator, dtype=torch.float64, requires_grad=True)
    var = (torch.rand(shape, generator=generator, dtype=torch.float64) + 0.1).requires_grad_()
    noise = torch.randn(shape, generator=generator, dtype=torch.float64)
    floor = 1e-16
    assert torch.autograd.gradcheck(
        lambda m, v: gaussian_from_moments(m, v, noise, floor), (mean, var)
    )
    weights = torch.randn(shape, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        var[0, 0, 0, :2] = 0.0  # a receptive field of zeros
        var[0, 0, 0, 2] = floor  # on the floor: the clamp's derivative passes (as torch's)
    (gaussian_from_moments(mean, var, noise, floor) * weights).sum().backward()
    fused = (mean.grad.clone(), var.grad.clone())
    mean.grad, var.grad = None, None
    composite = torch.addcmul(mean, var.clamp_min(floor).sqrt(), noise)
    torch.testing.assert_close(gaussian_from_moments(mean, var, noise, floor), composite)
    (composite * weights).sum().backward()
    torch.testing.assert_close(fused[0], mean.grad)
    torch.testing.assert_close(fused[1], var.grad)
    assert bool((fused[1][0, 0, 0, :2] == 0).all())


def test_additive_log_alpha_has_the_composite_value_and_gradients():
    """The additive family's clip(2 log sigma - log(mu^2 + floor)) with its written-out
    derivatives: the composite's values and autograd gradients, the clipped entries included."""
    generator = torch.Generator().manual_seed(SEED)
    mean = (0.3 * torch.randn(2, 5, 4, generator=generator, dtype=torch.float64)).requires_grad_()
    log_std = (
        3 * torch.randn(2, 5, 4, generator=generator, dtype=torch.float64) - 2
    ).requires_grad_()
    weights = torch.randn(2, 5, 4, generator=generator, dtype=torch.float64)

    def composite(mean, log_std):
        return (2 * log_std - torch.log(mean**2 + MEAN_SQUARED_FLOOR)).clamp(*LOG_ALPHA_RANGE)

    expected = composite(mean, log_std)
    assert int((expected.detach().abs() >= 10).sum()) > 0  # some entries are clipped
    fused = _ClippedLogAlpha.apply(mean, log_std)
    _assert_same_values_and_gradients(fused, expected, weights, (mean, log_std))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_has_the_values_and_gradient_of_clamp(dtype):
    """clip(x, low, high) == x.clamp(low, high), with the gradient 1 inside the range (its ends
    included, as torch's clamp) and 0 outside."""
    generator = torch.Generator().manual_seed(SEED)
    x = (8 * torch.randn(3, 50, generator=generator, dtype=dtype)).requires_grad_()
    with torch.no_grad():
        x[0, :4] = torch.tensor([-10.0, 20.0, -10.5, 20.5], dtype=dtype)  # ends and just past
    weights = torch.randn(3, 50, generator=generator, dtype=dtype)
    clipped = clip(x, -10.0, 20.0)
    assert torch.equal(clipped, x.clamp(-10.0, 20.0))
    (got,) = torch.autograd.grad((clipped * weights).sum(), x)
    (want,) = torch.autograd.grad((x.clamp(-10.0, 20.0) * weights).sum(), x)
    assert torch.equal(got, want)
    assert torch.equal(got[0, :4], torch.cat([weights[0, :2], torch.zeros(2, dtype=dtype)]))


# torch's first compile imports modules that warn of their own deprecations; none is vbnn's
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_clip_compiles_in_one_graph_before_any_eager_call(monkeypatch):
    """Under ``torch.compile(fullgraph=True)`` with the neighbours of the ends not yet computed,
    the backward of ``clip`` traces without a graph break (``_neighbour`` is marked a constant
    for Dynamo without importing it at ``import vbnn``) and gives eager's gradient."""
    monkeypatch.setattr(kernels, "_NEIGHBOURS", {})
    generator = torch.Generator().manual_seed(SEED)
    x = (8 * torch.randn(3, 50, generator=generator)).requires_grad_()
    weights = torch.randn(3, 50, generator=generator)

    def loss(values):
        return (clip(values, -10.0, 20.0) * weights).sum()

    torch._dynamo.reset()
    (got,) = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x), x)
    (want,) = torch.autograd.grad((x.clamp(-10.0, 20.0) * weights).sum(), x)
    assert torch.equal(got, want)
    assert (-10.0, torch.float32, -math.inf) in kernels._NEIGHBOURS


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exponential_is_exp_to_a_few_ulps_and_exactly_exp_below_its_size(dtype):
    """2^(x / ln 2) against torch.exp over the range the families use (log alpha in [-10, 20],
    2 log sigma down to -40), from ``EXP2_FROM`` values a model: relative error below
    |x| eps (the exponent's rounding) + 2 eps. Below that size, and for every model of a stack
    alike, it is torch.exp itself."""
    x = torch.linspace(-40.0, 20.0, 2 * EXP2_FROM, dtype=dtype).reshape(2, -1)  # 2 models
    eps = torch.finfo(dtype).eps
    bound = ((x.abs() + 2.0) * eps).double()
    reference = torch.exp(x.double())
    assert bool(((exponential(x).double() / reference - 1).abs() <= bound).all())
    relative = variance_from_log_std(x / 2).double() / reference - 1
    assert bool((relative.abs() <= bound).all())
    assert torch.equal(exponential(x[:1]), exponential(x)[:1])  # alone as in the stack
    small = x[:, :100]
    assert torch.equal(exponential(small), torch.exp(small))
    assert torch.equal(variance_from_log_std(small), torch.exp(2.0 * small))


@pytest.mark.parametrize("shared", [(2, 1, 1), (2, 1, 4), (2, 5, 4)])  # layer, neuron, weight
def test_dropout_variance_has_the_composite_value_and_gradients(shared):
    """Variational dropout's alpha mu^2 with alpha = exp(clip(log alpha)) shared over the
    weights, with its written-out derivatives: the composite's values and autograd gradients,
    the clipped entries included."""
    generator = torch.Generator().manual_seed(SEED)
    mean = torch.randn(2, 5, 4, generator=generator, dtype=torch.float64).requires_grad_()
    log_alpha = 12 * torch.randn(shared, generator=generator, dtype=torch.float64)
    log_alpha = log_alpha.requires_grad_()
    weights = torch.randn(2, 5, 4, generator=generator, dtype=torch.float64)
    expected = torch.exp(log_alpha.clamp(*LOG_ALPHA_RANGE)) * mean * mean
    fused = _DropoutVariance.apply(mean, log_alpha)
    _assert_same_values_and_gradients(fused, expected, weights, (mean, log_alpha))
