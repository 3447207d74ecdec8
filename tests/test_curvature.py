"""The largest preconditioned curvature against closed forms and the dense Hessian."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

from vbnn.core.contracts import Activation
from vbnn.references.architecture import MLPArchitecture
from vbnn.references.curvature import largest_curvature
from vbnn.references.jax_potential import jax_potential


def largest_in_magnitude(matrix: np.ndarray) -> float:
    values = np.linalg.eigvalsh(matrix)
    return float(values[np.argmax(np.abs(values))])


def test_a_gaussian_gives_the_preconditioned_precisions_top_eigenvalue_everywhere() -> None:
    """U = theta' A theta / 2: diag(s) A diag(s) at every point, whatever the point."""
    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    precision = (rotation * np.linspace(1.0, 20.0, 12)) @ rotation.T
    scale = rng.uniform(0.5, 2.0, 12)
    expected = largest_in_magnitude(scale[:, None] * precision * scale)
    a = jnp.asarray(precision, dtype=jnp.float32)
    found = largest_curvature(lambda t: 0.5 * t @ a @ t, rng.standard_normal((3, 12)), scale)
    np.testing.assert_allclose(found.values, expected, rtol=1e-3)
    _, eigenvectors = np.linalg.eigh(scale[:, None] * precision * scale)
    overlap = np.abs(found.vectors @ eigenvectors[:, -1])  # unit vectors, sign free
    np.testing.assert_allclose(overlap, 1.0, atol=1e-3)


def test_a_quartic_curves_most_where_its_largest_coordinate_is() -> None:
    """U = sum theta_i^4 / 4: H = diag(3 theta_i^2), so lambda_max = 3 max theta_i^2, and a scale
    s multiplies it by s_i^2 at that coordinate."""
    points = np.array([[0.1, -2.0, 0.5, 1.0], [3.0, 0.2, -0.1, 0.0]], dtype=np.float32)
    found = largest_curvature(lambda t: jnp.sum(t**4) / 4, points, np.ones(4))
    np.testing.assert_allclose(found.values, [12.0, 27.0], rtol=1e-4)
    np.testing.assert_allclose(np.abs(found.vectors), np.eye(4)[[1, 0]], atol=1e-3)
    scaled = largest_curvature(lambda t: jnp.sum(t**4) / 4, points, [1.0, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(scaled.values, [3.0, 27.0], rtol=1e-4)


def test_a_saddle_keeps_its_sign() -> None:
    found = largest_curvature(lambda t: 0.5 * jnp.sum(t**2) - 5.0 * t[0] ** 2, np.ones((2, 5)), 1.0)
    np.testing.assert_allclose(found.values, -9.0, rtol=1e-4)


def test_the_network_potentials_curvature_is_its_dense_hessians() -> None:
    """At a few points of a small network's potential: the dense Hessian's eigenvalue (jax)."""
    architecture = MLPArchitecture((2, 6, 4, 1), Activation.RELU, 0.0, prior_std=1.0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 2)).astype(np.float32)
    y = (rng.random(40) > 0.5).astype(np.float32)
    potential = jax_potential(architecture, x, y)
    points = rng.standard_normal((3, 51)).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, 51).astype(np.float32)
    found = largest_curvature(potential, points, scale, iterations=400).values
    for point, value in zip(points, found, strict=True):
        hessian = np.asarray(jax.hessian(potential)(jnp.asarray(point)), dtype=np.float64)
        np.testing.assert_allclose(value, largest_in_magnitude(scale[:, None] * hessian * scale),
                                   rtol=2e-3)  # fmt: skip


def test_points_must_be_a_matrix() -> None:
    with pytest.raises(ValueError, match=r"points must be \(P, D\), got \(4,\)"):
        largest_curvature(lambda t: jnp.sum(t**2), np.ones(4), 1.0)
