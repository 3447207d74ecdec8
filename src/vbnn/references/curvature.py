"""The curvature a sampler's integrator meets along its chains (``vbnn[jax]``).

An explicit integrator with step size eps follows a quadratic potential of Hessian H under a
(diagonal) preconditioner M^-1 = diag(s)^2 only while h = eps sqrt(lambda_max) stays below a
constant of the integrator (2 for leapfrog), where lambda_max is the largest eigenvalue of the
preconditioned Hessian diag(s) H diag(s); beyond it the energy error grows without bound, which is
what a divergent transition records. One step size serves a posterior whose lambda_max varies
across its bulk only if it is tuned to the largest: a sampler that tunes eps to an average
acceptance sets it for typical points and diverges where lambda_max is far above typical
(Betancourt 2017, "A conceptual introduction to Hamiltonian Monte Carlo", section 6.2).

:func:`largest_curvature` measures lambda_max at given points by power iteration on Hessian-vector
products (forward-over-reverse differentiation of the potential), so nothing of size D x D is
formed. Power iteration finds the eigenvalue of largest magnitude; its sign is kept (a negative
value is a saddle direction, where the integrator's error also grows).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from vbnn.references.jax_potential import JaxPotential


class Curvature(NamedTuple):
    """The eigenvalue of largest magnitude (P,) and its unit eigenvector (P, D), in the
    preconditioned coordinates theta / scale."""

    values: np.ndarray
    vectors: np.ndarray


def largest_curvature(
    potential: JaxPotential,
    points: ArrayLike,
    scale: ArrayLike,
    iterations: int = 100,
    seed: int = 0,
) -> Curvature:
    """The eigenvalue of largest magnitude of diag(scale) H(theta) diag(scale) at each point,
    with its eigenvector.

    Args:
        potential: U(theta), (D,) -> ().
        points: (P, D) where to measure.
        scale: (D,) or (P, D): the preconditioner's position scale s (M^-1 = diag(s)^2), e.g. the
            posterior standard deviations; ones for the plain Hessian.
        iterations: power iterations (each one Hessian-vector product); the estimate is the
            Rayleigh quotient of the last iterate, which is below the true lambda_max in
            magnitude while the iteration has not converged.
        seed: the random start vectors.

    Returns:
        ``Curvature``: values (P,) and vectors (P, D), in the dtype of ``points``.
    """
    points = jnp.asarray(points)
    if points.ndim != 2:
        raise ValueError(f"largest_curvature: points must be (P, D), got {points.shape}")
    scale = jnp.broadcast_to(jnp.asarray(scale, dtype=points.dtype), points.shape)
    if iterations < 1:
        raise ValueError(f"largest_curvature: iterations must be >= 1, got {iterations}")
    gradient = jax.grad(potential)

    def one_point(theta, s, start):
        def product(v):  # diag(s) H diag(s) v
            return s * jax.jvp(gradient, (theta,), (s * v,))[1]

        def power_step(_, v):
            w = product(v)
            return w / jnp.linalg.norm(w)

        v = jax.lax.fori_loop(0, iterations - 1, power_step, start / jnp.linalg.norm(start))
        return jnp.vdot(v, product(v)), v

    starts = jax.random.normal(jax.random.PRNGKey(seed), points.shape, points.dtype)
    values, vectors = jax.jit(jax.vmap(one_point))(points, scale, starts)
    return Curvature(np.asarray(values), np.asarray(vectors))
