"""The potential of a ``vbnn.references.architecture.MLPArchitecture`` in JAX (``vbnn[jax]``).

U(theta) = sum_n BCE(f_theta(x_n), y_n) + |theta|^2 / (2 prior_std^2), with the flat vector theta
laid out as the torch module's ``named_parameters`` (per layer weight (1, I, O), bias (1, O)),
hidden activation max(h, 0) + slope * min(h, 0) (slope 0: ReLU, 1: identity). The torch
potential of the same architecture (``MLPArchitecture.torch_potential``) is the reference:
``tests/test_jax_potential.py`` checks both equal in value and gradient at random points.

BCE(l, y) = max(l, 0) - l y + log(1 + exp(-|l|)), torch's numerically stable form. Products are
in full float32 on every device (``FULL_FLOAT32``), so chains on a GPU sample the CPU's posterior.

Given ``chunk``, the sum over examples runs in chunks of that many (a scan), each chunk's forward
pass recomputed in the backward one (``jax.checkpoint``): the same sum in another order, whose
(width, chunk) activations stay in the CPU's cache. At 10,000 examples on the CPU the gradient is
3.2x faster at depth 1 (one 249-wide layer: (249, 10,000) arrays of 10 MB passed over several
times), 1.2-1.5x at depths 2-4 and as fast at depth 5 (``benchmarks/depth_layout.py``);
:func:`default_chunk` is what the depth runner uses.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from vbnn.references.architecture import MLPArchitecture

JaxPotential = Callable[[jax.Array], jax.Array]

# every product in full float32 (and in its gradient: the transposed products keep it): on recent
# NVIDIA GPUs JAX otherwise computes float32 matmuls in TF32, whose gradients on the depth units
# are 3e-4 to 2e-3 off in relative norm against 0.3-1.4e-6 in float32 (benchmarks/
# depth_precision.py, TF32 emulated); on the CPU it changes nothing
FULL_FLOAT32 = jax.lax.Precision.HIGHEST

# examples per chunk of the CPU potential: the fastest of 500, 1000 and 2000 at every depth 1-5
CPU_CHUNK = 1000


def default_chunk() -> int | None:
    """``CPU_CHUNK`` where JAX computes on the CPU, else None: all examples at once, as before,
    on a GPU (where chunks are not measured; its kernels take the whole batch in one pass)."""
    return CPU_CHUNK if jax.default_backend() == "cpu" else None


def parameter_shapes(architecture: MLPArchitecture) -> list[tuple[int, ...]]:
    """Shapes of the flat vector's pieces, in order: weight (1, I, O), bias (1, O) per layer."""
    shapes: list[tuple[int, ...]] = []
    for inputs, outputs in zip(architecture.sizes[:-1], architecture.sizes[1:], strict=True):
        shapes += [(1, inputs, outputs), (1, outputs)]
    return shapes


def forward(architecture: MLPArchitecture, theta: jax.Array, features: jax.Array) -> jax.Array:
    """Network output (O, N) for flat parameters theta (D,) and inputs ``features`` (I, N).

    Feature-major, examples along the last axis: XLA's CPU gradient of the depth units' thin layers
    (2 inputs, widths 14-249, 10,000 examples) is 1.5x (depths 2-3) to 3.5x (depths 4-5) faster in
    this layout than with examples first, and as fast at depth 1 (``benchmarks/depth_layout.py``).
    The activation is a select: the values of max(h, 0) + slope * min(h, 0), and its gradient
    everywhere but at h = 0, in fewer passes.
    """
    shapes = parameter_shapes(architecture)
    sizes = [int(np.prod(shape)) for shape in shapes]
    if theta.shape != (sum(sizes),):
        raise ValueError(f"forward: theta must have shape ({sum(sizes)},), got {theta.shape}")
    pieces = jnp.split(theta, np.cumsum(sizes)[:-1])
    slope = architecture.slope
    h = features
    layers = len(shapes) // 2
    for layer in range(layers):
        weight = pieces[2 * layer].reshape(shapes[2 * layer][1:])
        bias = pieces[2 * layer + 1]
        if layer:
            h = jnp.where(h > 0, h, slope * h)
        h = jnp.matmul(weight.T, h, precision=FULL_FLOAT32) + bias[:, None]
    return h


def jax_potential(
    architecture: MLPArchitecture, x: ArrayLike, y: ArrayLike, chunk: int | None = None
) -> JaxPotential:
    """U(theta) for inputs x (N, I) and labels y (N,) in {0, 1}; dtype follows x. With ``chunk``,
    the examples are summed ``chunk`` at a time (the last chunk padded with weight-0 examples)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.ndim != 2 or x.shape[1] != architecture.sizes[0] or y.shape != (x.shape[0],):
        raise ValueError(
            f"jax_potential: x must be (N, {architecture.sizes[0]}) and y (N,), got "
            f"{x.shape} and {y.shape}"
        )
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"jax_potential: chunk must be a positive int or None, got {chunk!r}")
    precision = architecture.prior_std**-2

    def bce(theta: jax.Array, features: jax.Array, labels: jax.Array) -> jax.Array:
        logits = forward(architecture, theta, features)[0]
        return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))

    if chunk is None or chunk >= x.shape[0]:
        features = x.T

        def potential(theta: jax.Array) -> jax.Array:
            return bce(theta, features, y).sum() + 0.5 * precision * jnp.sum(theta**2)

        return potential

    chunks = -(-x.shape[0] // chunk)
    padding = chunks * chunk - x.shape[0]
    if padding:  # weight-0 examples fill the last chunk
        weights = jnp.concatenate([jnp.ones_like(y), jnp.zeros(padding, y.dtype)])
        x = jnp.concatenate([x, jnp.zeros((padding, x.shape[1]), x.dtype)])
        y = jnp.concatenate([y, jnp.zeros(padding, y.dtype)])
    # (chunks, I, chunk): every chunk feature-major
    parts = (x.reshape(chunks, chunk, -1).transpose(0, 2, 1), y.reshape(chunks, chunk))
    parts += (weights.reshape(chunks, chunk),) if padding else ()

    @jax.checkpoint
    def chunk_sum(theta: jax.Array, part: tuple[jax.Array, ...]) -> jax.Array:
        values = bce(theta, part[0], part[1])
        return (values * part[2]).sum() if padding else values.sum()

    def potential(theta: jax.Array) -> jax.Array:
        def step(total: jax.Array, part: tuple[jax.Array, ...]) -> tuple[jax.Array, None]:
            return total + chunk_sum(theta, part), None

        total, _ = jax.lax.scan(step, jnp.zeros((), theta.dtype), parts)
        return total + 0.5 * precision * jnp.sum(theta**2)

    return potential
