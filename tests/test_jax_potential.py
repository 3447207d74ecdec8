"""The JAX potential equals the torch potential of the same architecture (value and gradient)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("jax")
pytest.importorskip("numpyro")

import jax

from vbnn.core.contracts import Activation
from vbnn.references.architecture import MLPArchitecture
from vbnn.references.jax_nuts import ChainsConfig, jittered_starts, run_chains
from vbnn.references.jax_potential import jax_potential, parameter_shapes


@pytest.mark.parametrize(
    ("activation", "slope"),
    [(Activation.RELU, 0.01), (Activation.LEAKY_RELU, 0.2), (Activation.IDENTITY, 0.01)],
)
def test_jax_and_torch_potentials_agree_in_value_and_gradient(activation, slope) -> None:
    architecture = MLPArchitecture((2, 7, 5, 1), activation, slope, prior_std=0.7)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, generator=generator, dtype=torch.float64)
    y = (torch.rand(50, generator=generator, dtype=torch.float64) > 0.5).to(torch.float64)
    network = architecture.torch_network(torch.float64)
    potential, layout = architecture.torch_potential(network, x, y)
    assert layout.shapes == parameter_shapes(architecture)
    with jax.enable_x64(True):
        jax_u = jax.value_and_grad(jax_potential(architecture, x.numpy(), y.numpy()))
        for _ in range(3):  # random points, not the initial weights only
            theta = torch.randn(layout.dimension, generator=generator, dtype=torch.float64)
            theta.requires_grad_(True)
            value = potential(theta)
            (gradient,) = torch.autograd.grad(value, theta)
            jax_value, jax_gradient = jax_u(theta.detach().numpy())
            np.testing.assert_allclose(float(jax_value), float(value.detach()), rtol=1e-12)
            np.testing.assert_allclose(
                np.asarray(jax_gradient), gradient.numpy(), rtol=1e-10, atol=1e-12
            )


@pytest.mark.parametrize("chunk", [1, 7, 16, 50, 64])
def test_the_chunked_potential_is_the_same_sum(chunk) -> None:
    """Summing the examples ``chunk`` at a time (the last chunk padded with weight-0 examples when
    ``chunk`` does not divide N = 50) gives the same value and gradient in float64, up to the
    order of the sum."""
    architecture = MLPArchitecture((2, 6, 4, 1), Activation.LEAKY_RELU, 0.2, prior_std=0.8)
    rng = np.random.default_rng(chunk)
    x = rng.normal(size=(50, 2))
    y = (rng.random(50) > 0.4).astype(np.float64)
    dimension = sum(int(np.prod(shape)) for shape in parameter_shapes(architecture))
    with jax.enable_x64(True):
        whole = jax.value_and_grad(jax_potential(architecture, x, y))
        chunked = jax.jit(jax.value_and_grad(jax_potential(architecture, x, y, chunk=chunk)))
        for _ in range(3):
            theta = rng.normal(size=dimension)
            value, gradient = whole(theta)
            chunk_value, chunk_gradient = chunked(theta)
            assert abs(float(value)) > 10  # a sum of 50 BCEs and the prior, not zero
            np.testing.assert_allclose(float(chunk_value), float(value), rtol=1e-13)
            np.testing.assert_allclose(
                np.asarray(chunk_gradient), np.asarray(gradient), rtol=1e-11, atol=1e-13
            )


def test_a_bad_chunk_is_named() -> None:
    architecture = MLPArchitecture((2, 3, 1), "relu")
    for chunk in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="chunk must be a positive int"):
            jax_potential(architecture, np.ones((4, 2)), np.ones(4), chunk=chunk)


def test_the_slope_reaches_the_potential() -> None:
    x, y = np.ones((3, 2)), np.ones(3)
    theta = -np.ones(
        sum(int(np.prod(s)) for s in parameter_shapes(MLPArchitecture((2, 2, 1), "relu")))
    )
    values = [
        float(jax_potential(MLPArchitecture((2, 2, 1), "leaky_relu", slope), x, y)(theta))
        for slope in (0.0, 0.5)
    ]
    assert values[0] != values[1]
    relu = float(jax_potential(MLPArchitecture((2, 2, 1), "relu"), x, y)(theta))
    assert relu == values[0]


def test_bad_shapes_are_named() -> None:
    architecture = MLPArchitecture((2, 3, 1), "relu")
    with pytest.raises(ValueError, match="x must be"):
        jax_potential(architecture, np.ones((4, 3)), np.ones(4))
    with pytest.raises(ValueError, match="bernoulli needs one output"):
        MLPArchitecture((2, 3, 2), "relu")
    with pytest.raises(ValueError, match="activation must be"):
        MLPArchitecture((2, 3, 1), "tanh")


def test_chains_sample_a_gaussian_within_their_standard_errors() -> None:
    """U = |theta - m|^2 / (2 s^2): four chains' mean is m within 5 standard errors (bulk ESS)."""
    mean, std = np.array([1.0, -2.0, 0.5], dtype=np.float32), np.array([0.5, 2.0, 1.0])

    def potential(theta):
        return 0.5 * (((theta - mean) / std) ** 2).sum()

    config = ChainsConfig(chains=4, warmup=200, samples=300, seed=3)
    result = run_chains(potential, jittered_starts(np.zeros(3, np.float32), config), config)
    assert result.samples.shape == (4, 300, 3)
    d = result.diagnostics
    assert d["rhat_max"] < 1.05 and d["bulk_ess_min"] > 200
    estimate = result.samples.reshape(-1, 3).mean(0)
    standard_error = std / np.sqrt(d["bulk_ess_min"])
    assert np.all(np.abs(estimate - mean) < 5 * standard_error)
    np.testing.assert_allclose(result.samples.reshape(-1, 3).std(0), std, rtol=0.2)


@pytest.mark.parametrize(("chunk", "products"), [(None, 8), (6, 11)])
def test_every_product_of_the_potential_and_its_gradient_is_full_float32(chunk, products) -> None:
    """On recent GPUs JAX computes float32 matrix products in TF32 unless told otherwise, which
    puts the potential's gradient 3e-4 to 2e-3 off in relative norm; the reference potential asks
    for full float32 in every product, those of its gradient included (the GPU's accuracy itself
    is checked in ``tests/test_cuda.py``)."""
    architecture = MLPArchitecture((2, 7, 5, 1), Activation.RELU)
    x = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
    potential = jax_potential(architecture, x, (x[:, 0] > 0).astype(np.float32), chunk=chunk)
    dimension = sum(int(np.prod(shape)) for shape in parameter_shapes(architecture))
    closed = jax.make_jaxpr(jax.value_and_grad(potential))(np.zeros(dimension, np.float32))

    def precisions(jaxpr):
        for equation in jaxpr.eqns:
            if equation.primitive.name == "dot_general":
                yield equation.params["precision"]
            for value in equation.params.values():
                for inner in value if isinstance(value, (list, tuple)) else [value]:
                    if hasattr(inner, "eqns") or hasattr(inner, "jaxpr"):
                        yield from precisions(getattr(inner, "jaxpr", inner))

    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    found = list(precisions(closed.jaxpr))
    # 3 products forward; backward 3 for the weights and 2 through the hidden layers; chunked, the
    # backward pass recomputes the 3 forward products
    assert len(found) == products and all(precision == highest for precision in found)
