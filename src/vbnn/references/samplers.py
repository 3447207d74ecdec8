"""The reference samplers of a JAX potential, behind one call: ``run_sampler(sampler, ...)``.

Each takes the potential U(theta), starts (C, D) and a ``ChainsConfig`` and returns a
``ChainsResult`` of draws (C, N, D) with the same diagnostics (``chain_diagnostics``):

* ``nuts``: NumPyro NUTS (Hoffman & Gelman 2014), ``vbnn.references.jax_nuts``;
* ``mams``: BlackJAX's Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon &
  Seljak 2025), ``vbnn.references.jax_mclmc``; unbiased;
* ``mclmc``: BlackJAX's unadjusted microcanonical Langevin sampler (Robnik & Seljak 2024),
  ``vbnn.references.jax_mclmc``; asymptotically biased (no Metropolis test).

BlackJAX is imported only when one of its samplers is asked for, so NUTS runs without it.
"""

from __future__ import annotations

import importlib.util
from enum import Enum
from pathlib import Path

import numpy as np

from vbnn.references.jax_nuts import ChainsConfig, ChainsResult, run_chains
from vbnn.references.jax_potential import JaxPotential


class Sampler(str, Enum):
    """NUTS: NumPyro NUTS; MAMS: adjusted MCLMC; MCLMC: unadjusted MCLMC (biased)."""

    NUTS = "nuts"
    MAMS = "mams"
    MCLMC = "mclmc"


def require_sampler(sampler: Sampler) -> None:
    """Raise a clear error when the library behind ``sampler`` is missing."""
    if Sampler(sampler) is not Sampler.NUTS and importlib.util.find_spec("blackjax") is None:
        raise ModuleNotFoundError(
            f"the {Sampler(sampler).value} sampler is BlackJAX's: pip install 'vbnn[jax]'"
        )


def run_sampler(
    sampler: Sampler,
    potential: JaxPotential,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: str | Path | None = None,
    chain_ends: str | Path | None = None,
) -> ChainsResult:
    """``config.chains`` chains of exp(-U) from ``initial`` (C, D) with ``sampler``.

    ``chain_store``: a directory where MAMS and MCLMC keep each finished chain, so that a killed
    run resumes from its finished chains (``jax_mclmc``); ``chain_ends``: a directory where
    they keep where each chain ended, so that a run asking for more draws goes on from there
    (``chain_runner``). NUTS runs its chains in one call and stores none."""
    sampler = Sampler(sampler)
    if config.step_scale != 1 and sampler is not Sampler.MAMS:
        raise ValueError(
            f"run_sampler: step_scale={config.step_scale} applies to MAMS only, not "
            f"{sampler.value} (NUTS and MCLMC tune their own step sizes)"
        )
    if config.shared_length and sampler is not Sampler.MAMS:
        raise ValueError(
            f"run_sampler: shared_length applies to MAMS only, not {sampler.value} (the others "
            "have no trajectory length tuned per chain to share)"
        )
    if sampler is Sampler.NUTS:
        return run_chains(potential, initial, config)
    require_sampler(sampler)
    from vbnn.references import jax_mclmc  # optional dependency: BlackJAX

    run = jax_mclmc.run_mams_chains if sampler is Sampler.MAMS else jax_mclmc.run_mclmc_chains
    return run(potential, initial, config, chain_store, chain_ends)
