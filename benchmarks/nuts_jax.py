"""NumPyro and BlackJAX NUTS on the same network and data as ``nuts_samplers.py`` (optional).

Runs in a separate environment with jax, numpyro and blackjax (not project dependencies):

    python -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install jax numpyro blackjax
    PYTHONPATH=src python benchmarks/nuts_samplers.py --export /tmp/nuts_problem.npz
    /tmp/jaxvenv/bin/python benchmarks/nuts_jax.py /tmp/nuts_problem.npz

The exported file holds the data, the start point (MFVI means, flattened in the order of our
model's ``named_parameters``), the layer shapes, and the torch potential and its gradient at the
start point; this script re-implements U(theta) = sum BCE + |theta|^2 / 2 of the ReLU network in
JAX and refuses to run unless both agree with torch there (so the two stay in step).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def main() -> None:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platform_name", "cpu")
    problem = np.load(sys.argv[1])
    x, y = jnp.asarray(problem["x"]), jnp.asarray(problem["y"])
    shapes = [tuple(int(d) for d in s if d > 0) for s in problem["shapes"]]
    sizes = [int(np.prod(s)) for s in shapes]
    start = jnp.asarray(problem["start"])
    warmup, samples, depth = (int(v) for v in problem["settings"])

    def potential(theta: jnp.ndarray) -> jnp.ndarray:
        pieces = jnp.split(theta, np.cumsum(sizes)[:-1])
        h = x
        layers = len(pieces) // 2
        for k in range(layers):  # weight (1, I, O) then bias (1, O), as in vbnn's Point
            weight = pieces[2 * k].reshape(shapes[2 * k])[0]
            bias = pieces[2 * k + 1].reshape(shapes[2 * k + 1])[0]
            h = h @ weight + bias
            if k < layers - 1:
                h = jax.nn.relu(h)
        logits = h[:, 0]
        bce = jnp.maximum(logits, 0) - logits * y + jnp.log1p(jnp.exp(-jnp.abs(logits)))
        return bce.sum() + 0.5 * (theta**2).sum()

    value, gradient = jax.value_and_grad(potential)(start)
    if not np.allclose(float(value), float(problem["potential"]), rtol=1e-4):
        raise SystemExit(f"JAX potential {float(value)} != torch {float(problem['potential'])}")
    if not np.allclose(np.asarray(gradient), problem["gradient"], rtol=1e-3, atol=1e-3):
        raise SystemExit("JAX gradient differs from torch's at the start point")
    rows = [run_numpyro(potential, start, warmup, samples, depth)]
    rows.append(run_blackjax(potential, start, warmup, samples, depth))
    print(json.dumps(rows, indent=2))


def _ess(chain: np.ndarray) -> float:
    from numpyro.diagnostics import effective_sample_size

    return float(effective_sample_size(chain[None, :]))


def run_numpyro(potential, start, warmup: int, samples: int, depth: int) -> dict:
    import jax
    from numpyro.infer import MCMC, NUTS

    kernel = NUTS(potential_fn=potential, target_accept_prob=0.8, max_tree_depth=depth)
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, progress_bar=False)
    began = time.perf_counter()
    mcmc.run(
        jax.random.PRNGKey(1), init_params=start, extra_fields=("num_steps", "potential_energy")
    )
    wall = time.perf_counter() - began
    extra = mcmc.get_extra_fields()
    log_density = -np.asarray(extra["potential_energy"])
    return {
        "candidate": "numpyro-nuts (incl. JIT compile)",
        "wall_seconds": wall,
        "samples_per_second": samples / wall,
        "ess_log_density_per_second": _ess(log_density) / wall,
        "leapfrog_steps_per_sample": float(np.mean(extra["num_steps"])),
    }


def run_blackjax(potential, start, warmup: int, samples: int, depth: int) -> dict:
    import blackjax
    import jax

    def logdensity(theta):
        return -potential(theta)

    began = time.perf_counter()
    adaptation = blackjax.window_adaptation(
        blackjax.nuts, logdensity, target_acceptance_rate=0.8, max_num_doublings=depth
    )
    (state, parameters), _ = adaptation.run(jax.random.PRNGKey(2), start, num_steps=warmup)
    parameters = {**parameters, "max_num_doublings": depth}  # adaptation may return it already
    kernel = blackjax.nuts(logdensity, **parameters).step

    def one_step(state, key):
        state, info = kernel(key, state)
        return state, (state.logdensity, info.num_integration_steps)

    keys = jax.random.split(jax.random.PRNGKey(3), samples)
    _, (log_density, steps) = jax.lax.scan(one_step, state, keys)
    log_density = np.asarray(jax.block_until_ready(log_density))
    wall = time.perf_counter() - began
    return {
        "candidate": "blackjax-nuts window adaptation (incl. JIT compile)",
        "wall_seconds": wall,
        "samples_per_second": samples / wall,
        "ess_log_density_per_second": _ess(log_density) / wall,
        "leapfrog_steps_per_sample": float(np.mean(np.asarray(steps))),
    }


if __name__ == "__main__":
    main()
