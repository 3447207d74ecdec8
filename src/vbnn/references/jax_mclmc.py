"""Microcanonical samplers of BlackJAX on a JAX potential (``vbnn[jax]``): MCLMC and MAMS.

Same call shape and record as NumPyro NUTS (``vbnn.references.jax_nuts.run_chains``):
``run_mclmc_chains(potential, initial, config)`` and ``run_mams_chains(...)`` take the potential
U(theta) (D,) -> (), starts (C, D) and a ``ChainsConfig`` (``chains``, ``warmup``, ``samples``,
``seed``; ``target_accept`` for MAMS, ``max_tree_depth`` caps a MAMS trajectory and an MCLMC
draw's steps at 2^max_tree_depth - 1 integration steps as it caps a NUTS tree; ``dense_mass`` and
``chain_method`` are not used) and return a ``ChainsResult`` of draws (C, N, D). Every chain is
tuned on its own (its own step size, L and diagonal preconditioner) and runs in one compiled
function; the chains run one after the other. With a ``chain_store`` directory every finished
chain is stored there (``vbnn.stores.unit_store``, keyed by ``chain_settings``) and read back
instead of run again, so a long run that is killed loses only the chain in flight; a chain's
draws do not depend on whether it was read back. Processes on one machine that run the same
chains with the same store share them: each runs the chains that no other has claimed
(``unit_store.claim``) and waits for the rest, so the same command started twice gives a unit's
chains two cores.

* **MCLMC** (Robnik & Seljak 2024; tuning from Robnik, De Luca, Silverstein & Seljak 2023):
  isokinetic Langevin dynamics with the McLachlan integrator (2 gradients a step), no Metropolis
  test. BlackJAX's ``mclmc_find_L_and_step_size`` sets the step size eps so the energy error per
  dimension has variance ``desired_energy_var`` (5e-4), fits a diagonal preconditioner, and sets
  the momentum decoherence length L = 0.4 eps tau (tau: steps per effective sample). A kept
  draw is the state after ceil(L / eps) steps, one decoherence length (thinning that loses
  little: draws closer than L are strongly correlated), so ``samples`` draws of MCLMC, MAMS and
  NUTS all stand for trajectories of comparable length.
  **It is asymptotically biased**: its stationary law is the target only as eps -> 0; the bias
  of the moments grows with Var[energy error] / D and is not removed by sampling longer (Robnik,
  Cohn-Gordon & Seljak 2025 call it "hard to control in general").
* **MAMS** (Robnik, Cohn-Gordon & Seljak 2025): the same dynamics as a proposal, with full
  momentum refresh, a random number of integration steps (uniform, mean L / eps) and a
  Metropolis-Hastings test, so unbiased. Tuning in three stages as in the paper: (1) BlackJAX's
  ``adjusted_mclmc_find_L_and_step_size``: dual averaging of eps to ``target_accept`` and the
  diagonal preconditioner (its trajectories are 2 steps long); (2) the trajectory length from the
  autocorrelation of a short run, L = 0.5 (integration time per effective sample); (3) eps
  retuned by dual averaging at that L (``adjusted_mclmc_make_L_step_size_adaptation`` with L
  fixed). The installed BlackJAX clamps stage (2) to a factor 2 and pins L = 2 eps at the end of
  its own tuner, which would keep trajectories at 2-4 steps; stage (2) is therefore done here.

Warm-up budget ``config.warmup``: MCLMC integrator steps per chain (one step, 2 gradients),
0.3 / 0.3 (+0.1 for the preconditioner) / 0.3 of them in its three phases; MAMS transitions,
0.4 + 0.2 in stage 1, 0.2 in each of stages 2 and 3. So a warm-up of MCLMC costs far fewer
gradients than one of MAMS or NUTS of the same number. Gradient evaluations are counted for
both phases.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.adjusted_mclmc_adaptation import (
    adjusted_mclmc_make_L_step_size_adaptation,
)
from blackjax.adaptation.mclmc_adaptation import MCLMCAdaptationState
from blackjax.diagnostics import effective_sample_size
from blackjax.mcmc import adjusted_mclmc_dynamic, mclmc
from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn

from vbnn.references.chain_diagnostics import ENERGY_ERROR_LIMIT, summarise_chains
from vbnn.references.jax_nuts import ChainsConfig, ChainsResult
from vbnn.references.jax_potential import JaxPotential
from vbnn.stores import unit_store

GRADIENTS_PER_STEP = 2  # the McLachlan (two-stage) integrator, first-same-as-last
CLAIM_POLL_SECONDS = 30.0  # how often a process waiting for another's chain looks for it
MAMS_L_FACTOR = 0.5  # L = 0.5 x integration time per effective sample (BlackJAX's MAMS value)

# one chain: (key, start (D,)) -> per-draw arrays and per-chain scalars
ChainFunction = Callable[[jax.Array, jax.Array], tuple[dict, dict]]


def mclmc_chain(potential: JaxPotential, config: ChainsConfig) -> ChainFunction:
    """One unadjusted MCLMC chain as a pure function ``(key, start) -> (per_draw, per_chain)``:
    tuning, then ``config.samples`` draws (:func:`run_mclmc_chains` runs and stores them; jit or
    vmap it to time or batch chains)."""

    def log_density(theta):
        return -potential(theta)

    kernel = mclmc.build_kernel()
    max_steps = 2**config.max_tree_depth - 1

    def chain(key, start):
        init_key, tune_key, run_key = jax.random.split(key, 3)
        state = mclmc.init(start, log_density, init_key)
        state, params, tuning_steps = blackjax.mclmc_find_L_and_step_size(
            mclmc_kernel=kernel, num_steps=config.warmup, state=state, rng_key=tune_key,
            logdensity_fn=log_density, frac_tune1=0.3, frac_tune2=0.3, frac_tune3=0.3,
            diagonal_preconditioning=True,
        )  # fmt: skip

        # one kept draw per decoherence length: ceil(L / eps) steps, at most the trajectory cap
        thinning = jnp.clip(jnp.ceil(params.L / params.step_size), 1, max_steps).astype(jnp.int32)

        def one_step(_, carry):
            state, key, squared_energy, bad = carry
            key, step_key = jax.random.split(key)
            state, info = kernel(
                step_key, state, log_density, params.inverse_mass_matrix, params.L,
                params.step_size,
            )  # fmt: skip
            squared_energy = squared_energy + info.energy_change**2
            return state, key, squared_energy, bad | jnp.logical_not(info.nonans)

        def draw(state, key):
            carry = (state, key, jnp.zeros(()), jnp.zeros((), bool))
            state, _, squared_energy, bad = jax.lax.fori_loop(0, thinning, one_step, carry)
            return state, (state.position, state.logdensity, bad, squared_energy / thinning)

        keys = jax.random.split(run_key, config.samples)
        _, (draws, density, bad, squared_energy) = jax.lax.scan(draw, state, keys)
        steps = jnp.full(config.samples, thinning)
        per_draw = {
            "draws": draws, "log_density": density, "steps": steps, "diverging": bad,
            "energy_error_variance": squared_energy / start.size,
        }  # fmt: skip
        per_chain = {
            "step_size": params.step_size,
            "trajectory_length": params.L,
            "tuning_gradients": GRADIENTS_PER_STEP * jnp.asarray(tuning_steps),
            "energy_error_variance_per_dimension": jnp.mean(squared_energy) / start.size,
            "energy_error_draws_above_5e_3": jnp.mean(
                squared_energy / start.size > ENERGY_ERROR_LIMIT
            ),
            "accept_probability": jnp.asarray(jnp.nan),
        }
        return per_draw, per_chain

    return chain


def mams_chain(potential: JaxPotential, config: ChainsConfig) -> ChainFunction:
    """One MAMS chain as a pure function ``(key, start) -> (per_draw, per_chain)``: the three
    tuning stages, then ``config.samples`` transitions (:func:`run_mams_chains` runs and stores
    them; jit or vmap it to time or batch chains)."""

    def log_density(theta):
        return -potential(theta)

    kernel = adjusted_mclmc_dynamic.build_kernel(
        integration_steps_fn=make_random_trajectory_length_fn(True)
    )
    max_steps = 2**config.max_tree_depth - 1
    stage_steps = round(0.2 * config.warmup)

    def transition(key, state, params):
        average = jnp.clip(params.L / params.step_size, 1.0, max_steps)
        return kernel(
            rng_key=key, state=state, logdensity_fn=log_density, step_size=params.step_size,
            inverse_mass_matrix=params.inverse_mass_matrix, integration_steps_params=(average,),
        )  # fmt: skip

    def trajectory_length(state, params, key):
        """Stage 2: L from the effective sample size of a short run at the current eps."""

        def step(state, step_key):
            state, info = transition(step_key, state, params)
            return state, (state.position, info.num_integration_steps)

        keys = jax.random.split(key, max(stage_steps, 4))
        state, (draws, steps) = jax.lax.scan(step, state, keys)
        ess_per_transition = jnp.mean(effective_sample_size(draws[None])) / len(keys)
        time_per_transition = params.step_size * jnp.mean(steps)
        length = MAMS_L_FACTOR * time_per_transition / ess_per_transition
        length = jnp.clip(length, params.step_size, max_steps * params.step_size)
        return state, params._replace(L=length), GRADIENTS_PER_STEP * steps.sum()

    def chain(key, start):
        init_key, tune_key, length_key, retune_key, run_key = jax.random.split(key, 5)
        state = adjusted_mclmc_dynamic.init(start, log_density, init_key)
        state, params, stage1 = blackjax.adjusted_mclmc_find_L_and_step_size(
            mclmc_kernel=kernel, logdensity_fn=log_density, num_steps=config.warmup,
            state=state, rng_key=tune_key, target=config.target_accept, frac_tune1=0.2,
            frac_tune2=0.2, diagonal_preconditioning=True,
        )  # fmt: skip
        state, params, stage2 = trajectory_length(state, params, length_key)
        retune = adjusted_mclmc_make_L_step_size_adaptation(
            kernel=kernel, logdensity_fn=log_density, dim=start.size, frac_tune1=0.2,
            frac_tune2=0.0, target=config.target_accept, diagonal_preconditioning=True,
            fix_L_first_da=True,
        )  # fmt: skip
        state, params, _, stage3 = retune(state, params, config.warmup, retune_key)
        step_size = params.step_size / config.step_scale  # L kept: step_scale x the steps
        params = MCLMCAdaptationState(params.L, step_size, params.inverse_mass_matrix)

        def step(state, step_key):
            state, info = transition(step_key, state, params)
            return state, (
                state.position, state.logdensity, info.num_integration_steps,
                info.is_divergent, info.acceptance_rate,
            )  # fmt: skip

        keys = jax.random.split(run_key, config.samples)
        _, (draws, density, steps, diverging, accept) = jax.lax.scan(step, state, keys)
        per_draw = {"draws": draws, "log_density": density, "steps": steps, "diverging": diverging}
        per_chain = {
            "step_size": params.step_size,
            "trajectory_length": params.L,
            # stages 1 and 3 count integration steps (BlackJAX), stage 2 gradients (here)
            "tuning_gradients": GRADIENTS_PER_STEP * (stage1 + stage3) + stage2,
            "accept_probability": jnp.mean(accept),
        }
        return per_draw, per_chain

    return chain


def chain_settings(name: str, index: int, start: np.ndarray, config: ChainsConfig) -> dict:
    """What makes one chain's draws (its store key): the sampler, the chain's index (its random
    key), the run's config (seed and budgets) and a digest of its start."""
    digest = hashlib.sha256(np.ascontiguousarray(start).tobytes()).hexdigest()[:16]
    return {"sampler": name, "chain": index, "chains": config.to_dict(), "start": digest}


class ChainStoreRemoved(RuntimeError):
    """The chain store went away while this process waited for a chain that another process
    ran: that process has stored the whole unit (and dropped its chains in flight)."""


def _stored_or_run(
    compiled: Callable,
    key: jax.Array,
    start: np.ndarray,
    settings: dict,
    chain_store: Path | None,
) -> tuple[dict, dict] | None:
    """One chain's (draws, info): read from ``chain_store``, or run here and stored there; None
    while another process runs it (its claim is in ``chain_store``)."""
    if chain_store is not None:
        stored = unit_store.load(chain_store, settings)
        if stored is not None:
            return stored
        if not unit_store.claim(chain_store, settings):
            return None
    try:
        stored = None if chain_store is None else unit_store.load(chain_store, settings)
        if stored is None:  # not finished by another process between the two looks
            began = time.perf_counter()
            draws, scalars = jax.block_until_ready(compiled(key, jnp.asarray(start)))
            stored = (
                {k: np.asarray(v) for k, v in draws.items()},
                {"scalars": {k: float(v) for k, v in scalars.items()},
                 "seconds": time.perf_counter() - began},
            )  # fmt: skip
            if chain_store is not None:
                unit_store.save(chain_store, settings, *stored)
    finally:
        if chain_store is not None:
            unit_store.release(chain_store, settings)
    return stored


def _run(
    name: str,
    chain: ChainFunction,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: Path | None = None,
):
    initial = np.asarray(initial)
    if initial.ndim != 2 or initial.shape[0] != config.chains:
        raise ValueError(f"{name}: initial must be ({config.chains}, D), got {initial.shape}")
    if config.warmup < 10:
        raise ValueError(f"{name}: the tuning needs warmup >= 10 steps, got {config.warmup}")
    compiled = jax.jit(chain)
    keys = jax.random.split(jax.random.PRNGKey(config.seed), config.chains)
    finished: dict[int, tuple[dict, dict]] = {}
    if chain_store is not None:
        chain_store.mkdir(parents=True, exist_ok=True)
    while True:
        for index, (key, start) in enumerate(zip(keys, initial, strict=True)):
            if chain_store is not None and not chain_store.is_dir():
                raise ChainStoreRemoved(f"{chain_store}: removed while this process waited")
            if index not in finished:
                settings = chain_settings(name, index, start, config)
                stored = _stored_or_run(compiled, key, start, settings, chain_store)
                if stored is not None:
                    finished[index] = stored
        if len(finished) == config.chains:
            break
        time.sleep(CLAIM_POLL_SECONDS)  # another process runs the missing chains
    per_draw = [finished[index][0] for index in range(config.chains)]
    per_chain = [finished[index][1]["scalars"] for index in range(config.chains)]
    seconds = [finished[index][1]["seconds"] for index in range(config.chains)]
    total = sum(seconds)  # a resumed run counts each chain's own time
    stacked = {k: np.stack([d[k] for d in per_draw]) for k in per_draw[0]}
    samples = stacked["draws"].astype(np.float64)
    log_density = stacked["log_density"].astype(np.float64)
    steps = stacked["steps"].astype(np.int64)
    diverging = stacked["diverging"].astype(bool)
    diagnostics = summarise_chains(samples, log_density)
    if "energy_error_variance" in stacked:
        # per draw: the mean squared energy error per dimension over its steps. A median far
        # below the mean says that a minority of draws make the error; the log density says where
        energy = stacked["energy_error_variance"].astype(np.float64)
        worst = np.unravel_index(np.argmax(energy), energy.shape)
        diagnostics.update(
            energy_error_variance_draw_median=float(np.median(energy)),
            energy_error_variance_draw_max=float(energy.max()),
            energy_error_variance_draws_above_5e_3=float((energy > ENERGY_ERROR_LIMIT).mean()),
            log_density_at_worst_energy_error=float(log_density[worst]),
        )
    sampling_gradients = GRADIENTS_PER_STEP * float(steps.sum())
    tuning_gradients = sum(c["tuning_gradients"] for c in per_chain)
    diagnostics.update(
        seconds=total,
        bulk_ess_min_per_second=diagnostics["bulk_ess_min"] / total,
        bulk_ess_log_density_per_second=diagnostics["bulk_ess_log_density"] / total,
        accept_probability=float(np.mean([c["accept_probability"] for c in per_chain])),
        divergences=float(diverging.sum()),
        leapfrog_steps_mean=float(steps.mean()),
        # the share of draws at the step cap, the counterpart of NUTS's tree-depth cap hits
        max_tree_depth_hit_fraction=float((steps >= 2**config.max_tree_depth - 1).mean()),
        gradient_evaluations=sampling_gradients + tuning_gradients,
        sampling_gradient_evaluations=sampling_gradients,
        chain_seconds=seconds,
        **{f"chain_{k}": [c[k] for c in per_chain] for k in per_chain[0]},
    )
    return ChainsResult(samples, log_density, steps, diverging, diagnostics)


def run_mclmc_chains(
    potential: JaxPotential,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: Path | None = None,
) -> ChainsResult:
    """``config.chains`` unadjusted MCLMC chains of exp(-U) from ``initial`` (C, D), each tuned
    for ``config.warmup`` integrator steps, then ``config.samples`` draws kept, one every
    ceil(L / eps) steps (2 gradients a step). ``leapfrog_steps`` counts the integrator steps a
    draw; ``diverging`` marks draws during which the kernel rejected a step for a non-finite
    energy. Biased: see the module docstring."""
    return _run("run_mclmc_chains", mclmc_chain(potential, config), initial, config, chain_store)


def run_mams_chains(
    potential: JaxPotential,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: Path | None = None,
) -> ChainsResult:
    """``config.chains`` MAMS chains of exp(-U) from ``initial`` (C, D): ``config.warmup``
    tuning transitions (three stages, module docstring), then ``config.samples`` kept.
    ``leapfrog_steps`` counts integration steps per transition; ``diverging`` the transitions
    whose energy error passed BlackJAX's divergence threshold (1000)."""
    return _run("run_mams_chains", mams_chain(potential, config), initial, config, chain_store)
