"""Microcanonical samplers of BlackJAX on a JAX potential (``vbnn[jax]``): MCLMC and MAMS.

Same call shape and record as NumPyro NUTS (``vbnn.references.jax_nuts.run_chains``):
``run_mclmc_chains(potential, initial, config)`` and ``run_mams_chains(...)`` take the potential
U(theta) (D,) -> (), starts (C, D) and a ``ChainsConfig`` (``chains``, ``warmup``, ``samples``,
``seed``; ``target_accept`` for MAMS, ``max_tree_depth`` caps a MAMS trajectory and an MCLMC
draw's steps at 2^max_tree_depth - 1 integration steps as it caps a NUTS tree; ``dense_mass`` and
``chain_method`` are not used) and return a ``ChainsResult`` of draws (C, N, D). Every chain is
tuned on its own (its own step size, L and diagonal preconditioner; a MAMS chain's L can be
shared). Each sampler is a ``chain_runner.ChainProgram`` (:func:`mclmc_program`,
:func:`mams_program`); the runner (``vbnn.references.chain_runner``) runs the chains one after
the other and, with a ``chain_store`` directory, stores every finished chain and checkpoints the
chain in flight, so a killed run goes on where it stopped and processes that share the store
share the chains.

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
  ``adjusted_mclmc_find_L_and_step_size``, run here in segments that the runner checkpoints
  (:func:`step_size_and_preconditioner`, the same algorithm with its trajectories capped as
  everywhere else): dual averaging of eps to ``target_accept`` and the diagonal
  preconditioner, in two passes. Its first pass holds L at its entry value 0.4 sqrt(D) while
  eps falls, so its trajectories are L / eps steps long (on the ReLU depth-5 net at 10,000 points
  350-420 steps, most of the tuning's gradients); the second is at 2 steps a trajectory;
  (2) the trajectory length from the
  autocorrelation of a short run, L = 0.5 (integration time per effective sample); (3) eps
  retuned by dual averaging at that L (``adjusted_mclmc_make_L_step_size_adaptation`` with L
  fixed). The installed BlackJAX clamps stage (2) to a factor 2 and pins L = 2 eps at the end of
  its own tuner, which would keep trajectories at 2-4 steps; stage (2) is therefore done here.
  With ``config.shared_length`` the chains share one L, the median of their stage-2 lengths,
  and each runs stage (3) at it (``chain_runner.Pooling``: every chain is tuned to stage (2)
  before any goes on).

Warm-up budget ``config.warmup``: MCLMC integrator steps per chain (one step, 2 gradients),
0.3 / 0.3 (+0.1 for the preconditioner) / 0.3 of them in its three phases; MAMS transitions,
0.4 + 0.2 in stage 1, 0.2 in each of stages 2 and 3 (with a preconditioner given, stage 1 is
0.4 of them at two integration steps a transition: :func:`mams_program`). So a warm-up of
MCLMC costs far fewer gradients than one of MAMS or NUTS of the same number. Gradient
evaluations are counted for both phases.
"""

from __future__ import annotations

import math
from pathlib import Path

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.adjusted_mclmc_adaptation import (
    adjusted_mclmc_make_L_step_size_adaptation,
    handle_nans,
)
from blackjax.adaptation.mclmc_adaptation import MCLMCAdaptationState
from blackjax.adaptation.step_size import DualAveragingAdaptationState, dual_averaging_adaptation
from blackjax.diagnostics import effective_sample_size
from blackjax.mcmc import adjusted_mclmc_dynamic, mclmc
from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn
from blackjax.mcmc.metrics import LowRankInverseMassMatrix
from blackjax.util import incremental_value_update

from vbnn.references import chain_checkpoints, chain_runner
from vbnn.references.chain_diagnostics import ENERGY_ERROR_LIMIT
from vbnn.references.chain_runner import (
    GRADIENTS_PER_STEP,
    ChainFunction,
    ChainProgram,
    Pooling,
    SegmentedStage,
    run_chains,
    whole_chain,
)
from vbnn.references.jax_nuts import ChainsConfig, ChainsResult
from vbnn.references.jax_potential import JaxPotential

MAMS_L_FACTOR = 0.5  # L = 0.5 x integration time per effective sample (BlackJAX's MAMS value)
# BlackJAX's stage-1 constants (``adjusted_mclmc_find_L_and_step_size`` with its defaults)
STAGE1_STEPS = 2.0  # integration steps a trajectory it calibrates eps at (L = 2 eps)
STAGE1_L_FACTOR = 1.3  # L from the preconditioned scale: 1.3 sqrt(sum of variances)
STAGE1_L_CHANGE = 2.0  # the most L and eps grow by at the preconditioner
STAGE1_FLOOR = 1.1  # eps <= L / 1.1 during dual averaging
STAGE1_SMALLEST_STEP = 1e-5


def step_size_and_preconditioner(
    kernel, log_density, target: float, warmup: int, max_steps: float = math.inf
) -> SegmentedStage:
    """MAMS tuning stage 1 as segments of at most ``chain_runner.SEGMENT`` transitions: what
    BlackJAX's ``adjusted_mclmc_find_L_and_step_size(kernel, log_density, warmup, state, key,
    target, frac_tune1=0.2, frac_tune2=0.2, diagonal_preconditioning=True)`` does in one call,
    with the same keys and constants, so that its 0.6 x ``warmup`` transitions, at long
    trajectories most of a chain's tuning, are not lost when a run is killed. The numbers are
    BlackJAX's in float64 (a test holds them to 1e-9); in float32 they are equal up to XLA's
    rounding, which depends on where compiled calls begin and end (``chain_runner``).
    ``max_steps`` caps a trajectory's mean number of integration steps, L / eps, as the other
    stages and the draws cap it; BlackJAX has no cap here (``math.inf``). Uncapped, pass 1 can
    run away: L stays at 0.4 sqrt(D) while dual averaging drives eps down after rejections, so
    at D = 897 (the ReLU depth-5 net) five rejections in a row from the start take eps from
    6.0 to 9e-5 (L / eps = 134,000 steps a transition) and a sixth to its floor of 1e-5 (1.2
    million), from which it climbs back only over tens of accepted transitions.

    From eps = 0.2 sqrt(D) and L = 2 eps: pass 1, 0.4 ``warmup`` transitions at L fixed, the
    first half dual-averaging eps to ``target``, the second half averaging x and x^2 weighted by
    eps; then the diagonal preconditioner from those moments, L and eps scaled to L = 1.3
    sqrt(sum of variances) (at most 2x), and L = 2 eps; pass 2, 0.2 ``warmup`` transitions of
    dual averaging with L = 2 eps throughout; at the end L = 2 eps."""
    tune, average = int(warmup * 0.2), int(warmup * 0.2)
    if tune < 1 or average < 1:
        raise ValueError(f"MAMS stage 1 needs warmup >= 5, got {warmup}")
    da_init, da_update, da_final = dual_averaging_adaptation(target=target)
    segment = chain_runner.SEGMENT

    def transition(fix_length: bool):
        """One transition and dual-averaging update (mask 1) or moment update (mask 0)."""

        def step(carry, inputs):
            state, params, da, moments = carry
            mask, key = inputs
            proposed, info = kernel(
                rng_key=key, state=state, logdensity_fn=log_density, step_size=params.step_size,
                inverse_mass_matrix=params.inverse_mass_matrix,
                integration_steps_params=(jnp.minimum(params.L / params.step_size, max_steps),),
            )  # fmt: skip
            # its step_size_max output is never read (BlackJAX's neither): not carried
            finite, proposed, _, _ = handle_nans(
                state, proposed, params.step_size, jnp.inf, info.energy
            )

            def blend(new, old):
                return mask * new + (1 - mask) * old

            updated = da_update(da, info.acceptance_rate)
            da = DualAveragingAdaptationState(
                *(blend(new, old) for new, old in zip(updated, da, strict=True))
            )
            step_size = jax.lax.clamp(
                STAGE1_SMALLEST_STEP, jnp.exp(da.log_step_size), params.L / STAGE1_FLOOR
            )
            da = da._replace(log_step_size=jnp.log(step_size))
            x = proposed.position
            moments = incremental_value_update(
                jnp.array([x, jnp.square(x)]), moments, weight=(1 - mask) * finite * step_size,
                zero_prevention=mask,
            )  # fmt: skip
            length = params.L
            if not fix_length:
                length = blend(params.L * (step_size / params.step_size), params.L)
            params = params._replace(step_size=blend(step_size, params.step_size), L=length)
            carry = (proposed, params, da, moments)
            return carry, info.num_integration_steps

        return step

    def begin(key, state, _):
        dim = state.position.size
        params = MCLMCAdaptationState(
            jnp.sqrt(dim), jnp.sqrt(dim) * 0.2, inverse_mass_matrix=jnp.ones((dim,))
        )
        params = params._replace(L=STAGE1_STEPS * params.step_size)
        window = jax.random.fold_in(jax.random.split(key, 2)[0], 0)
        first, second = jax.random.split(jax.random.split(window, 2)[1], 2)
        moments = (0.0, jnp.array([jnp.zeros(dim), jnp.zeros(dim)]))
        return {
            "pass": (state, params, da_init(params.step_size), moments),
            "keys": (jax.random.split(first, tune + average), jax.random.split(second, tune)),
            "masks": (1 - jnp.concatenate((jnp.zeros(tune), jnp.ones(average))), jnp.ones(tune)),
            "done": jnp.zeros((), jnp.int32),  # transitions of the pass under way
            "steps": jnp.zeros((), jnp.int32),  # integration steps so far
        }

    def piece(which: int, length: int):
        step = transition(fix_length=which == 0)

        def run(carry):
            done = carry["done"]
            keys = jax.lax.dynamic_slice_in_dim(carry["keys"][which], done, length)
            masks = jax.lax.dynamic_slice_in_dim(carry["masks"][which], done, length)
            state, steps = jax.lax.scan(step, carry["pass"], (masks, keys))
            steps = carry["steps"] + steps.sum()
            return {**carry, "pass": state, "done": done + length, "steps": steps}

        return run

    def between(carry):
        """The preconditioner and the rescaled L and eps from pass 1's moments."""
        state, params, da, (_, moments) = carry["pass"]
        variances = moments[1] - jnp.square(moments[0])
        params = params._replace(step_size=da_final(da))
        change = jax.lax.clamp(
            0.0, jnp.sqrt(jnp.sum(variances)) * STAGE1_L_FACTOR / params.L, STAGE1_L_CHANGE
        )
        params = params._replace(L=params.L * change, step_size=params.step_size * change)
        params = params._replace(inverse_mass_matrix=variances)
        params = params._replace(L=STAGE1_STEPS * params.step_size)
        moments = (0.0, jnp.zeros_like(moments))
        again = (state, params, da_init(params.step_size), moments)
        return {**carry, "pass": again, "done": jnp.zeros((), jnp.int32)}

    def end(carry):
        state, params, da, _ = carry["pass"]
        params = params._replace(step_size=da_final(da))
        params = params._replace(L=STAGE1_STEPS * params.step_size)
        return state, params, GRADIENTS_PER_STEP * carry["steps"]  # BlackJAX counts steps

    def lengths(total: int) -> list[int]:
        return [min(segment, total - start) for start in range(0, total, segment)]

    pieces, schedule, kinds = [], [], {}
    for which, total in ((0, tune + average), (1, tune)):
        for length in lengths(total):
            if (which, length) not in kinds:
                kinds[which, length] = len(pieces)
                pieces.append(piece(which, length))
            schedule.append(kinds[which, length])
        if which == 0:
            schedule.append(len(pieces))
            pieces.append(between)
    return SegmentedStage(begin, tuple(pieces), tuple(schedule), end)


def mclmc_program(potential: JaxPotential, config: ChainsConfig) -> ChainProgram:
    """One unadjusted MCLMC chain in pieces (``chain_runner.ChainProgram``): BlackJAX's tuning,
    then ``config.samples`` draws."""

    def log_density(theta):
        return -potential(theta)

    kernel = mclmc.build_kernel()
    max_steps = 2**config.max_tree_depth - 1

    def init(key, start):
        return mclmc.init(start, log_density, key)

    def tune(key, state, _):
        state, params, tuning_steps = blackjax.mclmc_find_L_and_step_size(
            mclmc_kernel=kernel, num_steps=config.warmup, state=state, rng_key=key,
            logdensity_fn=log_density, frac_tune1=0.3, frac_tune2=0.3, frac_tune3=0.3,
            diagonal_preconditioning=True,
        )  # fmt: skip
        return state, params, GRADIENTS_PER_STEP * jnp.asarray(tuning_steps)

    def thinning(params):
        """One kept draw per decoherence length: ceil(L / eps) steps, at most the cap."""
        return jnp.clip(jnp.ceil(params.L / params.step_size), 1, max_steps).astype(jnp.int32)

    def sample(state, params, keys):
        steps = thinning(params)

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
            state, _, squared_energy, bad = jax.lax.fori_loop(0, steps, one_step, carry)
            return state, (state.position, state.logdensity, bad, squared_energy / steps)

        state, (draws, density, bad, squared_energy) = jax.lax.scan(draw, state, keys)
        return state, {
            "draws": draws, "log_density": density, "steps": jnp.full(len(keys), steps),
            "diverging": bad, "energy_error_variance": squared_energy / state.position.size,
        }  # fmt: skip

    def finish(params, per_draw):
        energy = per_draw["energy_error_variance"]
        return per_draw, {
            "step_size": params.step_size,
            "trajectory_length": params.L,
            "energy_error_variance_per_dimension": jnp.mean(energy),
            "energy_error_draws_above_5e_3": jnp.mean(energy > ENERGY_ERROR_LIMIT),
            "accept_probability": jnp.asarray(jnp.nan),
        }

    return ChainProgram(init, (tune,), sample, finish, config.samples)


def low_rank_preconditioner(draws: np.ndarray, rank: int | None = None) -> LowRankInverseMassMatrix:
    """A dense (``rank`` None) or low-rank-plus-diagonal inverse mass matrix from draws (N, D) of
    the target: M^-1 = diag(s) (I + U (Lambda - I) U^T) diag(s), with s the draws' standard
    deviations and (Lambda, U) the ``rank`` eigenpairs of their correlation matrix that lie
    farthest from 1 in ratio (largest |log lambda|), so M^-1 is the draws' covariance when
    ``rank`` is D. BlackJAX's MCLMC and MAMS integrators take it as ``inverse_mass_matrix``
    (O(D rank) a gradient). Float32, as the potential."""
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 2 or len(draws) < 2:
        raise ValueError(f"low_rank_preconditioner: draws must be (N >= 2, D), got {draws.shape}")
    dimension = draws.shape[1]
    rank = dimension if rank is None else rank
    if not 1 <= rank <= dimension:
        raise ValueError(f"low_rank_preconditioner: rank must be in 1..{dimension}, got {rank}")
    scale = draws.std(axis=0)
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise ValueError("low_rank_preconditioner: every coordinate needs a finite spread > 0")
    standard = (draws - draws.mean(axis=0)) / scale
    eigenvalues, vectors = np.linalg.eigh(standard.T @ standard / len(draws))
    eigenvalues = np.maximum(eigenvalues, np.finfo(np.float32).tiny)
    kept = np.argsort(-np.abs(np.log(eigenvalues)), kind="stable")[:rank]
    return LowRankInverseMassMatrix(
        jnp.asarray(scale, jnp.float32),
        jnp.asarray(vectors[:, kept], jnp.float32),
        jnp.asarray(eigenvalues[kept], jnp.float32),
    )


def preconditioner_digest(preconditioner: LowRankInverseMassMatrix) -> str:
    """The digest of a preconditioner's arrays that enters its chains' store keys."""
    leaves = [np.asarray(leaf).ravel() for leaf in preconditioner]
    return chain_checkpoints.digest(np.concatenate(leaves))


def mams_program(
    potential: JaxPotential,
    config: ChainsConfig,
    preconditioner: LowRankInverseMassMatrix | None = None,
) -> ChainProgram:
    """One MAMS chain in pieces (``chain_runner.ChainProgram``): the three tuning stages, then
    ``config.samples`` transitions.

    With a ``preconditioner`` (:func:`low_rank_preconditioner`) the chain keeps it throughout,
    and stage 1 only tunes eps: BlackJAX's dual averaging to ``target_accept`` at two
    integration steps a transition (L = 2 eps, L following eps; 0.4 ``warmup`` transitions from
    eps = 0.2 sqrt(D)), its second pass; stages 2 and 3 as without. The tuned parameters'
    ``inverse_mass_matrix`` is then the preconditioner's diagonal, s^2, for the record and the
    stores (the chain's store key holds the preconditioner's digest: :func:`run_mams_chains`)."""

    def log_density(theta):
        return -potential(theta)

    built = adjusted_mclmc_dynamic.build_kernel(
        integration_steps_fn=make_random_trajectory_length_fn(True)
    )
    if preconditioner is None:
        kernel = built
    else:

        def kernel(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix=None,
                   integration_steps_params=()):  # fmt: skip
            del inverse_mass_matrix  # the tuned parameters carry its diagonal only
            return built(
                rng_key=rng_key, state=state, logdensity_fn=logdensity_fn, step_size=step_size,
                inverse_mass_matrix=preconditioner,
                integration_steps_params=integration_steps_params,
            )  # fmt: skip

    max_steps = 2**config.max_tree_depth - 1
    stage_steps = round(0.2 * config.warmup)

    def transition(key, state, params):
        average = jnp.clip(params.L / params.step_size, 1.0, max_steps)
        return kernel(
            rng_key=key, state=state, logdensity_fn=log_density, step_size=params.step_size,
            inverse_mass_matrix=params.inverse_mass_matrix, integration_steps_params=(average,),
        )  # fmt: skip

    def init(key, start):
        return adjusted_mclmc_dynamic.init(start, log_density, key)

    def trajectory_length(key, state, params):
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

    def step_size_at_length(key, state, params):
        """Stage 3: eps retuned by dual averaging at the stage-2 L, then divided by
        ``config.step_scale`` (L kept: step_scale x the steps)."""
        retune = adjusted_mclmc_make_L_step_size_adaptation(
            kernel=kernel, logdensity_fn=log_density, dim=state.position.size, frac_tune1=0.2,
            frac_tune2=0.0, target=config.target_accept, diagonal_preconditioning=True,
            fix_L_first_da=True,
        )  # fmt: skip
        state, params, _, steps = retune(state, params, config.warmup, key)
        step_size = params.step_size / config.step_scale
        params = MCLMCAdaptationState(params.L, step_size, params.inverse_mass_matrix)
        return state, params, GRADIENTS_PER_STEP * steps

    def sample(state, params, keys):
        def step(state, step_key):
            state, info = transition(step_key, state, params)
            return state, (
                state.position, state.logdensity, info.num_integration_steps,
                info.is_divergent, info.acceptance_rate,
            )  # fmt: skip

        state, (draws, density, steps, diverging, accept) = jax.lax.scan(step, state, keys)
        return state, {"draws": draws, "log_density": density, "steps": steps,
                       "diverging": diverging, "accept": accept}  # fmt: skip

    def finish(params, per_draw):
        per_draw = dict(per_draw)
        accept = per_draw.pop("accept")
        return per_draw, {
            "step_size": params.step_size,
            "trajectory_length": params.L,
            "accept_probability": jnp.mean(accept),
        }

    def step_size_given_preconditioner(key, state, _):
        """Stage 1 with a given preconditioner: eps only, at L = 2 eps (docstring above)."""
        dim = state.position.size
        step_size = 0.2 * jnp.sqrt(dim)
        diagonal = jnp.square(preconditioner.sigma)
        params = MCLMCAdaptationState(STAGE1_STEPS * step_size, step_size, diagonal)
        tune = adjusted_mclmc_make_L_step_size_adaptation(
            kernel=kernel, logdensity_fn=log_density, dim=dim, frac_tune1=0.4, frac_tune2=0.0,
            target=config.target_accept, diagonal_preconditioning=False, fix_L_first_da=False,
        )  # fmt: skip
        state, params, _, steps = tune(state, params, config.warmup, key)
        params = params._replace(L=STAGE1_STEPS * params.step_size, inverse_mass_matrix=diagonal)
        return state, params, GRADIENTS_PER_STEP * steps

    if preconditioner is None:
        stage1 = step_size_and_preconditioner(
            kernel, log_density, config.target_accept, config.warmup, max_steps
        )
    else:
        stage1 = step_size_given_preconditioner
    tuning = (stage1, trajectory_length, step_size_at_length)
    pooling = None
    if config.shared_length:
        pooling = Pooling(2, shared_trajectory_length, with_trajectory_length)
    return ChainProgram(init, tuning, sample, finish, config.samples, pooling)


def shared_trajectory_length(tuned: list[MCLMCAdaptationState]) -> dict:
    """The trajectory length the chains share (``ChainsConfig.shared_length``): the median of
    the lengths their second tuning stage chose, each estimated from 0.2 ``warmup`` transitions
    (a chain's own estimate varies by a factor 1.5-3.5 across the four chains of a depth-4 or
    depth-5 unit at 10,000 points, reproductions/depth/README.md), with those lengths."""
    lengths = [float(params.L) for params in tuned]
    return {"trajectory_length": float(np.median(lengths)), "chain_tuned_lengths": lengths}


def with_trajectory_length(params: MCLMCAdaptationState, shared: dict) -> MCLMCAdaptationState:
    """``params`` with the shared trajectory length (:func:`shared_trajectory_length`)."""
    return params._replace(L=jnp.asarray(shared["trajectory_length"], jnp.asarray(params.L).dtype))


def mclmc_chain(potential: JaxPotential, config: ChainsConfig) -> ChainFunction:
    """One unadjusted MCLMC chain as a pure function ``(key, start) -> (per_draw, per_chain)``
    (:func:`run_mclmc_chains` runs and stores the same chains, to float32 rounding:
    ``chain_runner.whole_chain``; jit or vmap it to time or batch chains)."""
    return whole_chain(mclmc_program(potential, config))


def mams_chain(potential: JaxPotential, config: ChainsConfig) -> ChainFunction:
    """One MAMS chain as a pure function ``(key, start) -> (per_draw, per_chain)``
    (:func:`run_mams_chains` runs and stores the same chains, to float32 rounding:
    ``chain_runner.whole_chain``; jit or vmap it to time or batch chains)."""
    return whole_chain(mams_program(potential, config))


def run_mclmc_chains(
    potential: JaxPotential,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: str | Path | None = None,
    chain_ends: str | Path | None = None,
) -> ChainsResult:
    """``config.chains`` unadjusted MCLMC chains of exp(-U) from ``initial`` (C, D), each tuned
    for ``config.warmup`` integrator steps, then ``config.samples`` draws kept, one every
    ceil(L / eps) steps (2 gradients a step). ``leapfrog_steps`` counts the integrator steps a
    draw; ``diverging`` marks draws during which the kernel rejected a step for a non-finite
    energy. Biased: see the module docstring."""
    program = mclmc_program(potential, config)
    return run_chains("run_mclmc_chains", program, initial, config, chain_store, chain_ends)


def run_mams_chains(
    potential: JaxPotential,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: str | Path | None = None,
    chain_ends: str | Path | None = None,
    preconditioner: LowRankInverseMassMatrix | None = None,
) -> ChainsResult:
    """``config.chains`` MAMS chains of exp(-U) from ``initial`` (C, D): ``config.warmup``
    tuning transitions (three stages, module docstring), then ``config.samples`` kept.
    ``leapfrog_steps`` counts integration steps per transition; ``diverging`` the transitions
    whose energy error passed BlackJAX's divergence threshold (1000). A ``preconditioner``
    replaces the tuned diagonal one (:func:`mams_program`); its digest enters the chains' store
    keys."""
    program = mams_program(potential, config, preconditioner)
    extra = None
    if preconditioner is not None:
        extra = {"preconditioner": preconditioner_digest(preconditioner)}
    return run_chains("run_mams_chains", program, initial, config, chain_store, chain_ends, extra)
