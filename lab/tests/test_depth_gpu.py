"""The depth reproduction's JAX potential on a GPU: float32 gradients as close to float64 as on
the CPU. Skipped where torch sees no CUDA device; ``VBNN_TEST_DEVICE=cpu`` runs it on the CPU, to
check the test itself (as tests/test_cuda.py for the library)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from vbnn.core.contracts import Activation

CUDA = torch.device(os.environ.get("VBNN_TEST_DEVICE", "cuda"))
pytestmark = pytest.mark.skipif(
    CUDA.type == "cuda" and not torch.cuda.is_available(), reason="no CUDA device"
)


@pytest.mark.parametrize("chunk", [None, 1000], ids=["whole-batch", "chunks-of-1000"])
def test_the_depth_potential_on_a_gpu_has_float32_gradients(chunk: int | None) -> None:
    """The depth units' JAX potential (ReLU, depths 1, 2 and 5, 10,000 points) in float32 on the
    GPU, over the whole batch and in the CPU's chunks of 1000 examples: its gradient within 2e-5
    of the float64 gradient in relative norm, as on the CPU (~1e-6). TF32 products, JAX's
    default for float32 on recent GPUs, would be 3e-4 to 2e-3 off."""
    jax = pytest.importorskip("jax")
    from vbnn.references.architecture import MLPArchitecture
    from vbnn.references.jax_potential import jax_potential, parameter_shapes
    from vbnn_lab.depth.models import depth_widths
    from vbnn_lab.depth.units import two_moons

    try:
        device = jax.devices("cpu" if CUDA.type == "cpu" else "gpu")[0]
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    x, y = (t.numpy() for t in two_moons(10_000, 0.1, 0, torch.float64))
    for depth in (1, 2, 5):
        architecture = MLPArchitecture(tuple(depth_widths(depth)), Activation.RELU)
        dimension = sum(int(np.prod(shape)) for shape in parameter_shapes(architecture))
        theta = np.random.default_rng(depth).normal(scale=0.5, size=dimension)
        with jax.enable_x64(True):
            exact = np.asarray(jax.grad(jax_potential(architecture, x, y))(theta))
        potential = jax_potential(
            architecture,
            *(jax.device_put(a.astype(np.float32), device) for a in (x, y)),
            chunk=chunk,
        )
        gradient = jax.jit(jax.grad(potential))(jax.device_put(theta.astype(np.float32), device))
        error = np.linalg.norm(np.asarray(gradient, dtype=np.float64) - exact)
        assert error / np.linalg.norm(exact) < 2e-5, depth
