"""NUTS candidates on the depth experiment's model, all in one run: samples/s and ESS/s.

Model: two moons (noise 0.1), an ``MLPArchitecture`` ReLU network (default 2-16-16-1 on 1000
points: issue 5's orientation problem; ``--points 10000 --depth 3`` is a full-protocol unit of
the depth experiment), Bernoulli likelihood, N(0, 1) prior, started at MFVI-pre-trained means.
Pyro and BlackJAX run one chain of ``--warmup`` + ``--samples`` iterations, tree depth <= 10,
target acceptance 0.8, float32, from the same start:

* Pyro NUTS on the torch potential (``vbnn.references.nuts``; eager, or ``torch.compile``);
* NumPyro NUTS on the JAX potential of the same architecture (``vbnn.references.jax_nuts``),
  diagonal and dense mass matrix, ``--chains`` chains from jittered starts, one after the other
  or vectorised;
* BlackJAX NUTS with its window adaptation (diagonal), on the same JAX potential.

ESS: bulk ESS (rank-normalised, ``vbnn.references.chain_diagnostics``) of the log density and the
minimum and median over coordinates, each divided by the wall time including compilation.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/nuts_samplers.py
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.references.architecture import MLPArchitecture
from vbnn.references.chain_diagnostics import bulk_ess
from vbnn.references.jax_nuts import ChainsConfig, jittered_starts, run_chains
from vbnn.references.jax_potential import jax_potential
from vbnn.references.nuts import NUTSConfig, run_nuts
from vbnn_lab.depth.models import PretrainConfig, point_network, train_mean_field
from vbnn_lab.depth.units import two_moons


def row(name: str, wall: float, samples: np.ndarray, log_density: np.ndarray, steps) -> dict:
    """Chains' samples (C, N, D) and log densities (C, N) -> the table's row (ESS over chains)."""
    ess = bulk_ess(samples)
    return {
        "candidate": name,
        "chains": len(samples),
        "wall_seconds": wall,
        "samples_per_second": samples.shape[0] * samples.shape[1] / wall,
        "ess_log_density_per_second": float(bulk_ess(log_density[..., None])[0]) / wall,
        "ess_min_per_second": float(np.nanmin(ess)) / wall,
        "ess_median_per_second": float(np.nanmedian(ess)) / wall,
        "leapfrog_steps_per_sample": float(np.mean(steps)),
    }


def pyro_row(args, potential, start, compilation: str) -> dict:
    config = NUTSConfig(args.warmup, args.samples, 0.8, args.max_tree_depth, compilation, seed=1)
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.compile's own deprecation notices
        result = run_nuts(potential, start, config)
    wall = time.perf_counter() - began
    name = f"pyro-nuts/{compilation}"
    return row(name, wall, result.samples[None], result.log_density[None], result.leapfrog_steps)


def numpyro_row(args, potential, start, dense: bool, method: str) -> dict:
    config = ChainsConfig(
        chains=args.chains, warmup=args.warmup, samples=args.samples,
        max_tree_depth=args.max_tree_depth, dense_mass=dense, chain_method=method, seed=1,
    )  # fmt: skip
    began = time.perf_counter()
    result = run_chains(potential, jittered_starts(start, config), config)
    wall = time.perf_counter() - began
    name = f"numpyro-nuts/{'dense' if dense else 'diagonal'}/{method}"
    return row(name, wall, result.samples, result.log_density, result.leapfrog_steps)


def blackjax_row(args, potential, start) -> dict:
    import blackjax  # optional: benchmarked, not a vbnn dependency

    def log_density(theta):
        return -potential(theta)

    depth = args.max_tree_depth
    began = time.perf_counter()
    adaptation = blackjax.window_adaptation(
        blackjax.nuts, log_density, target_acceptance_rate=0.8, max_num_doublings=depth
    )
    (state, parameters), _ = adaptation.run(jax.random.PRNGKey(2), start, num_steps=args.warmup)
    kernel = blackjax.nuts(log_density, **{**parameters, "max_num_doublings": depth}).step

    def one_step(state, key):
        state, info = kernel(key, state)
        return state, (state.position, state.logdensity, info.num_integration_steps)

    keys = jax.random.split(jax.random.PRNGKey(3), args.samples)
    _, (positions, densities, steps) = jax.lax.scan(one_step, state, keys)
    positions = np.asarray(jax.block_until_ready(positions), dtype=np.float64)
    wall = time.perf_counter() - began
    name = "blackjax-nuts/window adaptation"
    density = np.asarray(densities, np.float64)[None]
    return row(name, wall, positions[None], density, np.asarray(steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=2, help="hidden layers")
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--pretrain-epochs", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--max-tree-depth", type=int, default=10)
    parser.add_argument("--chains", type=int, default=4, help="NumPyro chains (Pyro, BlackJAX: 1)")
    parser.add_argument(
        "--candidates", default="pyro,numpyro,numpyro-dense,numpyro-vectorized,blackjax"
    )
    parser.add_argument("--out", default="benchmarks/results/nuts_samplers.json")
    args = parser.parse_args()
    x, y = two_moons(args.points, 0.1, 0, torch.float32)
    architecture = MLPArchitecture((2, *[args.width] * args.depth, 1), Activation.RELU)
    epochs = args.pretrain_epochs
    config = PretrainConfig(epochs=epochs, mean_epochs=epochs)
    network = point_network(train_mean_field(architecture, x, y, config, seed=0), architecture)
    potential, layout = architecture.torch_potential(network, x, y)
    start = layout.flatten(network)
    jax_u = jax_potential(architecture, x.numpy(), y.numpy())
    rows = []
    for name in args.candidates.split(","):
        if name in ("pyro", "pyro/compile"):
            compilation = "compile" if name.endswith("compile") else "none"
            rows.append(pyro_row(args, potential, start, compilation))
        elif name.startswith("numpyro"):  # numpyro[-dense][-vectorized]
            dense, method = "dense" in name, "vectorized" if "vectorized" in name else "sequential"
            rows.append(numpyro_row(args, jax_u, start.numpy(), dense, method))
        elif name == "blackjax":
            rows.append(blackjax_row(args, jax_u, start.numpy()))
        else:
            raise SystemExit(f"--candidates: unknown {name!r}")
        print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    arguments = {**vars(args), "parameters": layout.dimension}
    Path(args.out).write_text(json.dumps({"arguments": arguments, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
