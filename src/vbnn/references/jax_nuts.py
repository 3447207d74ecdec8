"""Several NUTS chains with NumPyro on a JAX potential (``vbnn[jax]``), with their diagnostics.

NumPyro's ``NUTS(potential_fn=...)`` (Hoffman & Gelman 2014; multinomial NUTS, step size by dual
averaging, diagonal or dense mass matrix adapted in warm-up) compiles the whole sampler with XLA;
on a small depth-experiment network it gives several times Pyro's bulk ESS per second (measured:
benchmarks/README.md). Pyro (``vbnn.references.nuts``) stays for arbitrary torch modules; this
runner takes potentials generated from an ``MLPArchitecture`` (``vbnn.references.jax_potential``).

Chains start at ``initial`` (C, D), e.g. the MFVI means plus independent jitter (Farquhar et al.
2020 appendix B starts at the MFVI solution; several jittered starts let R-hat see a chain that has
not left its start). The diagnostics across chains come from ``vbnn.references.chain_diagnostics``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import jax
import numpy as np
from numpyro.infer import MCMC, NUTS

from vbnn.references.chain_diagnostics import summarise_chains
from vbnn.references.jax_potential import JaxPotential


class ChainMethod(str, Enum):
    """SEQUENTIAL: one chain after the other; VECTORIZED: all chains in lock-step (one vmap)."""

    SEQUENTIAL = "sequential"
    VECTORIZED = "vectorized"


@dataclass(frozen=True)
class ChainsConfig:
    """Settings of the NUTS chains of one reference posterior.

    Attributes:
        chains: number of chains (>= 2 for R-hat).
        warmup: adaptation iterations per chain, discarded.
        samples: kept iterations per chain.
        target_accept: dual-averaging target acceptance probability.
        max_tree_depth: at most 2^depth - 1 leapfrog steps an iteration.
        dense_mass: adapt a dense (True) or diagonal (False) mass matrix.
        start_jitter: std of the independent N(0, start_jitter^2) added to the start per chain.
        chain_method: how the chains share the machine.
        seed: JAX PRNG seed of the chains and the jitter.
        step_scale: MAMS only: after tuning, the step size is divided by this and the trajectory
            length kept, so a transition takes ``step_scale`` times the integration steps; a
            smaller step than the acceptance target asks for keeps the integrator stable where
            the curvature is far above typical (fewer divergent transitions).
        shared_length: MAMS only: the chains share one trajectory length L, the median of the
            lengths their second tuning stage chose, and each retunes its step size at it
            (``jax_mclmc.mams_program``), instead of each keeping its own; a chain whose short
            tuning run chose a short L mixes slower than the others and holds R-hat up.
    """

    chains: int = 4
    warmup: int = 500
    samples: int = 1000
    target_accept: float = 0.8
    max_tree_depth: int = 10
    dense_mass: bool = False
    start_jitter: float = 0.1
    chain_method: ChainMethod = ChainMethod.SEQUENTIAL
    seed: int = 0
    step_scale: float = 1.0
    shared_length: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "chain_method", ChainMethod(self.chain_method))
        checks = {
            "chains": self.chains >= 2,
            "warmup": self.warmup >= 0,
            "samples": self.samples >= 8,
            "target_accept": 0 < self.target_accept < 1,
            "max_tree_depth": 1 <= self.max_tree_depth <= 15,
            "start_jitter": self.start_jitter >= 0,
            "seed": self.seed >= 0,
            "step_scale": self.step_scale >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"ChainsConfig: invalid {name}={getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored and hashed into chain and unit keys; ``step_scale`` only where
        it is not 1 and ``shared_length`` only where it is True (they came later: the stored
        keys of chains without them stay as they were)."""
        out = {**asdict(self), "chain_method": self.chain_method.value}
        if self.step_scale == 1:
            del out["step_scale"]
        if not self.shared_length:
            del out["shared_length"]
        return out


@dataclass(frozen=True)
class ChainsResult:
    """samples (C, N, D), log_density (C, N), leapfrog_steps (C, N), diverging (C, N) and a
    summary (R-hat, bulk / tail ESS, divergences, tree depth, seconds)."""

    samples: np.ndarray
    log_density: np.ndarray
    leapfrog_steps: np.ndarray
    diverging: np.ndarray
    diagnostics: dict[str, float] = field(default_factory=dict)


def jittered_starts(start: np.ndarray, config: ChainsConfig) -> np.ndarray:
    """(C, D) starts: ``start`` (D,) plus N(0, start_jitter^2) per chain and coordinate."""
    start = np.asarray(start)
    if start.ndim != 1 or not np.all(np.isfinite(start)):
        raise ValueError(f"jittered_starts: start must be a finite vector (D,), got {start.shape}")
    noise = np.random.default_rng(config.seed).standard_normal((config.chains, start.size))
    return (start + config.start_jitter * noise).astype(start.dtype)


def run_chains(potential: JaxPotential, initial: np.ndarray, config: ChainsConfig) -> ChainsResult:
    """``config.chains`` NUTS chains of exp(-U) from ``initial`` (C, D); wall time includes XLA
    compilation. Diagnostics: see ``chain_diagnostics.summarise_chains`` plus acceptance,
    divergences, leapfrog steps and how often the tree-depth cap was hit."""
    initial = np.asarray(initial)
    if initial.shape[0] != config.chains or initial.ndim != 2:
        raise ValueError(
            f"run_chains: initial must be ({config.chains}, D), got shape {initial.shape}"
        )
    energies = np.asarray(jax.vmap(potential)(initial))
    if not np.all(np.isfinite(energies)):
        raise ValueError(f"run_chains: the potential at the starts is {energies}")
    kernel = NUTS(
        potential_fn=potential,
        target_accept_prob=config.target_accept,
        max_tree_depth=config.max_tree_depth,
        dense_mass=config.dense_mass,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=config.warmup,
        num_samples=config.samples,
        num_chains=config.chains,
        chain_method=config.chain_method.value,
        progress_bar=False,
    )
    began = time.perf_counter()
    mcmc.run(
        jax.random.PRNGKey(config.seed),
        init_params=initial,
        extra_fields=("num_steps", "potential_energy", "diverging", "accept_prob"),
    )
    samples = np.asarray(mcmc.get_samples(group_by_chain=True), dtype=np.float64)
    seconds = time.perf_counter() - began
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"], dtype=np.int64)
    log_density = -np.asarray(extra["potential_energy"], dtype=np.float64)
    diverging = np.asarray(extra["diverging"], dtype=bool)
    diagnostics = summarise_chains(samples, log_density)
    depth = np.ceil(np.log2(steps + 1))
    diagnostics.update(
        seconds=seconds,
        bulk_ess_min_per_second=diagnostics["bulk_ess_min"] / seconds,
        bulk_ess_log_density_per_second=diagnostics["bulk_ess_log_density"] / seconds,
        accept_probability=float(np.mean(extra["accept_prob"])),
        divergences=float(diverging.sum()),
        leapfrog_steps_mean=float(steps.mean()),
        tree_depth_mean=float(depth.mean()),
        max_tree_depth_hit_fraction=float((depth >= config.max_tree_depth).mean()),
    )
    return ChainsResult(samples, log_density, steps, diverging, diagnostics)
