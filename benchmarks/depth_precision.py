"""How far the depth units' float32 gradient is from the float64 one, per kind of product.

For ReLU depths 1-5 at 10,000 two-moons points (``UnitSettings``' architecture and data), at a
random parameter vector (N(0, 0.5^2)), the relative error ||g - g64|| / ||g64|| of the gradient of
``vbnn.references.jax_potential`` against float64 on the CPU:

* ``float32``: the potential as the samplers use it, on every device JAX sees (full float32
  products, ``FULL_FLOAT32``);
* ``tf32 (emulated)``: the same with the inputs of every forward product rounded to TF32's 10-bit
  mantissa (the backward products left in float32), on the CPU: what JAX's default precision for
  float32 products on recent NVIDIA GPUs would give, in order of magnitude;
* ``gpu default precision``: on a GPU, the potential with JAX's default product precision.

    PYTHONPATH=src python benchmarks/depth_precision.py
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager, nullcontext
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.references import jax_potential as potentials
from vbnn.references.architecture import MLPArchitecture
from vbnn_lab.depth.models import depth_widths
from vbnn_lab.depth.units import two_moons

POINTS = 10_000


def tf32(a: jax.Array) -> jax.Array:
    """``a`` rounded to TF32 (10 mantissa bits, round to nearest) in the forward pass only."""
    bits = jax.lax.bitcast_convert_type(a.astype(jnp.float32), jnp.uint32)
    rounded = (bits + jnp.uint32(0x1000)) & jnp.uint32(0xFFFFE000)
    rounded = jax.lax.bitcast_convert_type(rounded, jnp.float32)
    return a + jax.lax.stop_gradient(rounded - a)


@contextmanager
def products(kind: str):
    """The potential's ``jnp.matmul`` with TF32-rounded inputs, or with JAX's default precision."""
    matmul = jnp.matmul

    def tf32_matmul(a, b, precision=None):
        return matmul(tf32(a), tf32(b), precision=precision)

    def default_matmul(a, b, precision=None):
        return matmul(a, b)

    replacement = {"tf32": tf32_matmul, "default": default_matmul}[kind]
    with mock.patch.object(potentials.jnp, "matmul", replacement):
        yield


def relative_error(architecture, theta, exact, data, device, kind: str | None = None) -> float:
    """||g - exact|| / ||exact|| for the float32 gradient g of the potential on ``device``, its
    products as the samplers make them (``kind`` None), TF32-rounded or at JAX's default."""
    with products(kind) if kind else nullcontext():
        placed = (jax.device_put(a.astype(np.float32), device) for a in data)
        potential = potentials.jax_potential(architecture, *placed)
        gradient = jax.grad(potential)(jax.device_put(theta.astype(np.float32), device))
    gradient = np.asarray(gradient, dtype=np.float64)
    return float(np.linalg.norm(gradient - exact) / np.linalg.norm(exact))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="1,2,3,4,5", help="ReLU depths, in this order")
    depths = [int(d) for d in parser.parse_args().depths.split(",")]
    x, y = (t.numpy() for t in two_moons(POINTS, 0.1, 0, torch.float64))
    cpu, gpus = jax.devices("cpu")[0], [d for d in jax.devices() if d.platform == "gpu"]
    rows = []
    for depth in depths:
        architecture = MLPArchitecture(tuple(depth_widths(depth)), Activation.RELU)
        shapes = potentials.parameter_shapes(architecture)
        theta = np.random.default_rng(depth).normal(scale=0.5, size=sum(map(np.prod, shapes)))
        with jax.enable_x64(True):
            exact = np.asarray(jax.grad(potentials.jax_potential(architecture, x, y))(theta))
        common = (architecture, theta, exact, (x, y))
        measured = {
            "float32 (cpu)": relative_error(*common, cpu),
            "tf32 (emulated, cpu)": relative_error(*common, cpu, "tf32"),
        }
        for gpu in gpus[:1]:
            measured["float32 (gpu)"] = relative_error(*common, gpu)
            measured["gpu default precision"] = relative_error(*common, gpu, "default")
        rows.append({"depth": depth, "parameters": int(theta.size), **measured})
        print(rows[-1], flush=True)  # a row as it comes: the GPU machine's calls are time-limited
    print(pd.DataFrame(rows).to_string(index=False, float_format="%.2e"))


if __name__ == "__main__":
    main()
