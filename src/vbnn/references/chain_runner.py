"""Running the chains of a BlackJAX sampler so that a long run that is killed loses little.

A sampler is a ``ChainProgram``: the pieces of one chain, in the order they run, as pure JAX
functions. The runner (:func:`run_chains`) compiles each piece once and runs the chains one
after the other. With a ``chain_store`` directory it stores

* every finished chain (keyed by ``chain_checkpoints.chain_settings``), read back instead of
  run again;
* the chain in flight (``<chain_store>/in-flight``): after every tuning stage and at least
  every ``CHECKPOINT_SECONDS`` within a stage run in segments (``SegmentedStage``) and while it
  samples, its state, tuned parameters, the segmented stage's carry and the draws so far, from
  which a rerun goes on; and on SIGINT or SIGTERM, at the end of the stage or segment under way,
  before the process stops.

So a killed run loses at most ``CHECKPOINT_SECONDS`` of one chain, or one stage that is not
segmented (a stopped one nothing), and a chain that takes longer than any one session still
finishes across several.
With a ``chain_ends`` directory it also keeps where every finished chain ended (its state, tuned
parameters and draws, keyed by its settings but for the number of draws): a later run that asks
the same chain for more draws goes on from there instead of tuning and sampling it again.
A chain's draws do not depend on where it was stopped or how often: the runner always runs the
same compiled pieces, its checkpoints hold their carries exactly, and every draw has its own
key, split from the chain's key as the whole chain splits it (the first n keys of a longer
split are the keys of a split into n, so a chain of n draws is the start of a longer one).
:func:`whole_chain` runs the same pieces with the same keys in one compiled function, for
vmapping or timing; in float32 it is the same chain only up to rounding, which XLA makes
depend on where compiled calls begin and end, and one Metropolis decision that rounding tips
sends a chain on another path (as on another device). Processes on one machine that run the
same chains with the same store share them: each runs the chains that no other has claimed
(``unit_store.claim``), goes on from their checkpoints, and waits for the rest, so the same
command started twice gives a unit's chains two cores. A sampler whose chains share part of
their tuning (``Pooling``) runs every chain to that point first, checkpointed; the values they
share are stored once, before any chain goes on. What a store holds on disk, and how a chain in
flight is written and read back, is ``vbnn.references.chain_checkpoints``.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vbnn.references import chain_checkpoints as checkpoints
from vbnn.references.chain_diagnostics import ENERGY_ERROR_LIMIT, summarise_chains
from vbnn.references.jax_nuts import ChainsConfig, ChainsResult
from vbnn.stores import unit_store

GRADIENTS_PER_STEP = 2  # the McLachlan (two-stage) integrator, first-same-as-last
CLAIM_POLL_SECONDS = 30.0  # how often a process waiting for another's chain looks for it
CHECKPOINT_SECONDS = 600.0  # a chain in flight is stored at least this often (segments)
SEGMENT = 50  # draws, or transitions of a segmented stage, per compiled call (checkpoints fall
# between calls)
# one line a tuning stage and a checkpoint (``vbnn`` prints them on stderr): what a run cut at
# a time limit, on a machine whose output is all that comes back, had done
_log = logging.getLogger(__name__)

# one chain: (key, start (D,)) -> per-draw arrays and per-chain scalars
ChainFunction = Callable[[jax.Array, jax.Array], tuple[dict, dict]]


class SegmentedStage(NamedTuple):
    """A tuning stage that runs as compiled segments, with everything it carries from one to the
    next in a ``carry`` (a pytree of arrays) that the runner checkpoints between them, so that
    a long stage is not lost when the run is killed. Running ``begin``, then ``pieces[i]`` for
    every ``i`` of ``schedule`` in order, then ``end`` is the whole stage.

    Attributes:
        begin: ``(key, state, params) -> carry``.
        pieces: the segments' functions ``carry -> carry``, each compiled once.
        schedule: which piece runs at each segment.
        end: ``carry -> (state, params, gradients)``.
    """

    begin: Callable
    pieces: tuple[Callable, ...]
    schedule: tuple[int, ...]
    end: Callable

    def whole(self, key, state, params):
        """The stage in one call, as a plain stage ``(key, state, params) -> (state, params,
        gradients)``."""
        carry = self.begin(key, state, params)
        for piece in self.schedule:
            carry = self.pieces[piece](carry)
        return self.end(carry)

    def compiled(self) -> SegmentedStage:
        return SegmentedStage(jax.jit(self.begin), tuple(jax.jit(p) for p in self.pieces),
                              self.schedule, jax.jit(self.end))  # fmt: skip


class Pooling(NamedTuple):
    """Tuning the chains share: each chain runs its first ``stage`` tuning stages on its own;
    when every chain has, ``combine`` turns their tuned parameters (in chain order) into
    JSON-able values, and each chain goes on with ``apply(params, values)``.

    Attributes:
        stage: the tuning stages a chain runs before the chains pool (1 to ``len(tuning) - 1``).
        combine: ``[params, ...] -> dict`` of floats (or lists of them).
        apply: ``(params, values) -> params``.
    """

    stage: int
    combine: Callable[[list], dict]
    apply: Callable


class ChainProgram(NamedTuple):
    """One chain as the pieces the runner can stop between; the chain's key is split into
    ``len(tuning) + 2`` keys: one for ``init``, one per tuning stage, one for the draws.

    Attributes:
        init: ``(key, start (D,)) -> state``, a BlackJAX state (a NamedTuple of arrays).
        tuning: stages ``(key, state, params) -> (state, params, gradients)``, or
            ``SegmentedStage``; ``params`` is None before the first stage and an
            ``MCLMCAdaptationState`` after it.
        sample: ``(state, params, keys (n, 2)) -> (state, per_draw)``, one draw per key.
        finish: ``(params, per_draw) -> (per_draw, per_chain)`` on the whole run's draws: the
            per-draw arrays to keep and the chain's scalars (``tuning_gradients`` is added).
        samples: the draws of a chain.
        pooling: tuning the chains share (``Pooling``), or None: each chain tunes alone.
    """

    init: Callable
    tuning: tuple[Callable, ...]
    sample: Callable
    finish: Callable
    samples: int
    pooling: Pooling | None = None


def whole_chain(program: ChainProgram) -> ChainFunction:
    """The program as one pure function ``(key, start) -> (per_draw, per_chain)``: the chain of
    :func:`run_chains`, its pieces and keys in one compiled call (jit or vmap it to time or
    batch chains); equal to float32 rounding only (module docstring). A program whose chains
    pool their tuning (``pooling``) is not one chain alone: :func:`run_chains` runs it.

    Raises:
        ValueError: the program pools its tuning across chains.
    """
    if program.pooling is not None:
        raise ValueError(
            "whole_chain: this program's chains share their tuning (pooling); run_chains runs it"
        )

    def chain(key, start):
        keys = jax.random.split(key, len(program.tuning) + 2)
        state, params, gradients = program.init(keys[0], start), None, 0
        for stage, stage_key in zip(program.tuning, keys[1:-1], strict=True):
            stage = stage.whole if isinstance(stage, SegmentedStage) else stage
            state, params, spent = stage(stage_key, state, params)
            gradients = gradients + spent
        _, per_draw = program.sample(state, params, jax.random.split(keys[-1], program.samples))
        per_draw, per_chain = program.finish(params, per_draw)
        return per_draw, {**per_chain, "tuning_gradients": gradients}

    return chain


class ChainStoreRemoved(RuntimeError):
    """The chain store went away while this process waited for a chain that another process
    ran: that process has stored the whole unit (and dropped its chains in flight)."""


class _Compiled(NamedTuple):
    init: Callable
    tuning: tuple[Callable | SegmentedStage, ...]
    sample: Callable


def _compile(program: ChainProgram) -> _Compiled:
    tuning = tuple(stage.compiled() if isinstance(stage, SegmentedStage) else jax.jit(stage)
                   for stage in program.tuning)  # fmt: skip
    return _Compiled(jax.jit(program.init), tuning, jax.jit(program.sample))


@contextmanager
def _stop_requests() -> Iterator[list[int]]:
    """The signals (SIGINT, SIGTERM) that asked this process to stop while a chain ran: the
    runner stores the chain in flight at the end of the stage or segment under way, then stops
    (a signal cannot interrupt a compiled call). Outside the main thread, where Python cannot
    take signals, the list stays empty."""
    requested: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda number, _: requested.append(number))
                for number in wanted}  # fmt: skip
    try:
        yield requested
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _stop(number: int) -> None:
    """Stop as the signal ``number`` would have, now that the chain in flight is stored."""
    if number == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + number)


def _run_chain(
    program: ChainProgram,
    compiled: _Compiled,
    key: jax.Array,
    start: np.ndarray,
    settings: dict,
    in_flight: Path | None,
    ends: Path | None = None,
    until: int | None = None,
    pooled: dict | None = None,
) -> tuple[dict, dict] | None:
    """One chain's (per-draw arrays, {"scalars", "seconds"}), going on from its checkpoint in
    ``in_flight`` if there is one, else from where the same chain with fewer draws ended (in
    ``ends``), and storing checkpoints there and its end in ``ends``. With ``until``, only up to
    that many tuning stages (checkpointed; returns None); a program that pools its tuning
    applies ``pooled`` (the chains' shared values) before its stage ``pooling.stage``."""
    keys = jax.random.split(key, len(program.tuning) + 2)
    draw_keys = jax.random.split(keys[-1], program.samples)
    began = time.perf_counter()
    state = compiled.init(keys[0], jnp.asarray(start))
    params, draws = None, []
    progress = {"stage": 0, "drawn": 0, "seconds": 0.0, "tuning_gradients": 0.0, "devices": []}
    resumed = None if in_flight is None else checkpoints.load_checkpoint(in_flight, settings, state)
    if resumed is not None:
        progress, state, params, draws = resumed
        began = time.perf_counter()  # the stored seconds count what came before
        _log.info(
            "%s: goes on from its checkpoint, %s",
            checkpoints.chain_name(settings),
            checkpoints.describe_progress(progress),
        )
    elif ends is not None:
        ended = checkpoints.load_checkpoint(ends, checkpoints.end_settings(settings), state)
        if ended is not None and ended[0]["drawn"] < program.samples:
            progress, state, params, draws = ended
            began = time.perf_counter()
            name, drawn = checkpoints.chain_name(settings), progress["drawn"]
            _log.info("%s: goes on from where its chain of %d draws ended, %s", name, drawn,
                      checkpoints.describe_progress(progress))  # fmt: skip
    # where the chain ran, over every run that went on with it (its seconds are theirs)
    devices = sorted({*progress["devices"], jax.default_backend()})
    progress = {**progress, "devices": devices}

    def seconds() -> float:
        return progress["seconds"] + time.perf_counter() - began

    carried = progress.pop("carry", None)  # the leaves of a segmented stage's carry

    def save(carry=None) -> None:
        now = {**progress, "seconds": seconds()}
        _log.info("%s: %s", checkpoints.chain_name(settings), checkpoints.describe_progress(now))
        if in_flight is not None:
            checkpoints.save_checkpoint(in_flight, settings, now, state, params, draws, carry)

    with _stop_requests() as requested:
        saved = time.perf_counter()
        while progress["stage"] < len(program.tuning):
            stage = progress["stage"]
            if until is not None and stage >= until:
                return None  # checkpointed at the end of the stage before
            if program.pooling is not None and stage == program.pooling.stage:
                if pooled is None:
                    raise ValueError(f"{checkpoints.chain_name(settings)}: the chains' pooled "
                                     "tuning is needed to go on")  # fmt: skip
                params = program.pooling.apply(params, pooled)
            run = compiled.tuning[stage]
            if isinstance(run, SegmentedStage):
                carry = run.begin(keys[stage + 1], state, params)
                if carried is not None:  # the stored leaves, in the carry's structure
                    carry = jax.tree.unflatten(jax.tree.structure(carry), carried)
                    carried = None
                while progress.get("segment", 0) < len(run.schedule):
                    done = progress.get("segment", 0)
                    # wait for the segment (JAX dispatches asynchronously): the clock must see it
                    carry = jax.block_until_ready(run.pieces[run.schedule[done]](carry))
                    progress = {**progress, "segment": done + 1}
                    due = time.perf_counter() - saved >= CHECKPOINT_SECONDS
                    if requested or (due and done + 1 < len(run.schedule)):
                        save(carry)
                        saved = time.perf_counter()
                    if requested:
                        _stop(requested[0])
                state, params, spent = run.end(carry)
            else:
                state, params, spent = run(keys[stage + 1], state, params)
            spent = progress["tuning_gradients"] + float(spent)
            progress = {**progress, "stage": stage + 1, "segment": 0, "tuning_gradients": spent}
            save()
            saved = time.perf_counter()
            if requested:
                _stop(requested[0])
        if until is not None:
            return None
        while progress["drawn"] < program.samples:
            drawn = progress["drawn"]
            segment = draw_keys[drawn : drawn + SEGMENT]
            state, per_draw = compiled.sample(state, params, segment)
            draws.append({name: np.asarray(value) for name, value in per_draw.items()})
            progress = {**progress, "drawn": drawn + len(segment)}
            due = time.perf_counter() - saved >= CHECKPOINT_SECONDS
            if requested or (due and progress["drawn"] < program.samples):
                save()
                saved = time.perf_counter()
            if requested:
                _stop(requested[0])
    if ends is not None:
        checkpoints.keep_end(
            ends, settings, {**progress, "seconds": seconds()}, state, params, draws
        )
    whole = {name: np.concatenate([d[name] for d in draws]) for name in draws[0]}
    per_draw, per_chain = program.finish(params, whole)
    scalars = {name: float(value) for name, value in per_chain.items()}
    scalars["tuning_gradients"] = progress["tuning_gradients"]
    info = {"scalars": scalars, "seconds": seconds(), "device": "+".join(devices)}
    return {k: np.asarray(v) for k, v in per_draw.items()}, info


def _stored_or_run(
    program: ChainProgram,
    compiled: _Compiled,
    key: jax.Array,
    start: np.ndarray,
    settings: dict,
    chain_store: Path | None,
    chain_ends: Path | None = None,
    pooled: dict | None = None,
) -> tuple[dict, dict] | None:
    """One chain's (draws, info): read from ``chain_store``, or run here (from its checkpoint
    there or its end in ``chain_ends``, if any) and stored there; None while another process
    runs it (its claim is in ``chain_store``). ``pooled``: the chains' shared tuning, if the
    program pools it."""
    if chain_store is None:
        return _run_chain(program, compiled, key, start, settings, None, chain_ends, pooled=pooled)
    stored = unit_store.load(chain_store, settings)
    if stored is not None:
        return stored
    if not unit_store.claim(chain_store, settings):
        return None
    try:
        stored = unit_store.load(chain_store, settings)
        if stored is None:  # not finished by another process between the two looks
            in_flight = chain_store / checkpoints.IN_FLIGHT
            stored = _run_chain(
                program, compiled, key, start, settings, in_flight, chain_ends, pooled=pooled
            )
            unit_store.save(chain_store, settings, *stored)
            _log.info(
                "%s: finished and stored (%.0f s)",
                checkpoints.chain_name(settings),
                stored[1]["seconds"],
            )
            unit_store.remove(in_flight, settings)  # the chain's checkpoint
    finally:
        unit_store.release(chain_store, settings)
    return stored


def _removed(chain_store: Path) -> ChainStoreRemoved:
    return ChainStoreRemoved(f"{chain_store}: removed while this process waited")


def run_chains(
    name: str,
    program: ChainProgram,
    initial: np.ndarray,
    config: ChainsConfig,
    chain_store: str | Path | None = None,
    chain_ends: str | Path | None = None,
    extra: dict | None = None,
) -> ChainsResult:
    """``config.chains`` chains of ``program`` from ``initial`` (C, D), one after the other, with
    their diagnostics; ``name`` (the sampler's) and ``extra`` (what else makes the program's
    draws) enter every chain's store key. ``chain_store`` keeps the finished chains and those
    in flight, ``chain_ends`` where each chain ended, for a later run with more draws (module
    docstring). A program that pools its tuning (``ChainProgram.pooling``) runs every chain to
    its pooling stage first, then pools (:func:`_pool`), then goes on with each; without a
    ``chain_store`` its chains in flight wait in a temporary one."""
    initial = np.asarray(initial)
    if initial.ndim != 2 or initial.shape[0] != config.chains:
        raise ValueError(f"{name}: initial must be ({config.chains}, D), got {initial.shape}")
    if config.warmup < 10:
        raise ValueError(f"{name}: the tuning needs warmup >= 10 steps, got {config.warmup}")
    if program.pooling is not None and chain_store is None:
        with tempfile.TemporaryDirectory() as scratch:
            return run_chains(name, program, initial, config, scratch, chain_ends, extra)
    chain_store = None if chain_store is None else Path(chain_store)
    chain_ends = None if chain_ends is None else Path(chain_ends)
    compiled = _compile(program)
    keys = jax.random.split(jax.random.PRNGKey(config.seed), config.chains)
    finished: dict[int, tuple[dict, dict]] = {}
    if chain_store is not None:
        chain_store.mkdir(parents=True, exist_ok=True)
    pooled = None
    if program.pooling is not None:
        every = [checkpoints.chain_settings(name, index, start, config, extra)
                 for index, start in enumerate(initial)]  # fmt: skip
        pooled = _pool(program, compiled, keys, initial, every, chain_store, chain_ends)
    while True:
        for index, (key, start) in enumerate(zip(keys, initial, strict=True)):
            if chain_store is not None and not chain_store.is_dir():
                raise _removed(chain_store)
            if index not in finished:
                settings = checkpoints.chain_settings(name, index, start, config, extra)
                try:
                    stored = _stored_or_run(
                        program, compiled, key, start, settings, chain_store, chain_ends, pooled
                    )
                except FileNotFoundError:  # removed while this process looked into it
                    if chain_store is None or chain_store.is_dir():
                        raise
                    raise _removed(chain_store) from None
                if stored is not None:
                    finished[index] = stored
        if len(finished) == config.chains:
            break
        time.sleep(CLAIM_POLL_SECONDS)  # another process runs the missing chains
    result = _summarise([finished[index] for index in range(config.chains)], config)
    if pooled is not None:
        result.diagnostics.update({f"pooled_{name}": value for name, value in pooled.items()})
    return result


def _tuned_so_far(
    program: ChainProgram, settings: dict, chain_store: Path, chain_ends: Path | None
) -> tuple[int, int]:
    """How far a chain's tuning is: (stages done, segments of the next done); a finished chain,
    or one with an end in ``chain_ends``, has done every stage."""
    done = (len(program.tuning), 0)
    if unit_store.load_info(chain_store, settings) is not None:
        return done
    progress = unit_store.load_info(chain_store / checkpoints.IN_FLIGHT, settings)
    if progress is not None:
        return progress["stage"], progress.get("segment", 0)
    ended = chain_ends is not None and unit_store.load_info(
        chain_ends, checkpoints.end_settings(settings)
    )
    return done if ended else (0, 0)


def _pool(
    program: ChainProgram,
    compiled: _Compiled,
    keys: jax.Array,
    initial: np.ndarray,
    every: list[dict],
    chain_store: Path,
    chain_ends: Path | None,
) -> dict | None:
    """The chains' pooled tuning (``program.pooling``): each chain not yet there is run (under
    its claim) to the pooling stage and checkpointed; once every chain is there, ``combine``
    of their parameters, stored in ``<chain_store>/pooled`` (``checkpoints.POOLED``) before any
    chain goes on, so that every process, and a rerun, goes on with the same values. Waits
    while other processes tune the rest. None when every chain has tuned already (finished, or
    an end in ``chain_ends``) and no pooled record is stored.

    Raises:
        ValueError: some chains are past the pooling stage and others not, with no pooled
            record stored (a store edited by hand).
    """
    pooling = program.pooling
    records = chain_store / checkpoints.POOLED
    unit = {"pooled": [unit_store.settings_key(settings) for settings in every]}
    while True:
        if not chain_store.is_dir():
            raise _removed(chain_store)
        stored = unit_store.load_info(records, unit)
        if stored is not None:
            return stored
        at = (pooling.stage, 0)
        reached = []
        for key, start, settings in zip(keys, initial, every, strict=True):
            if not chain_store.is_dir():  # another process stored the unit: do not claim anew
                raise _removed(chain_store)
            behind = _tuned_so_far(program, settings, chain_store, chain_ends) < at
            if behind and unit_store.claim(chain_store, settings):
                try:
                    in_flight = chain_store / checkpoints.IN_FLIGHT
                    _run_chain(program, compiled, key, start, settings, in_flight, chain_ends,
                               until=pooling.stage)  # fmt: skip
                finally:
                    unit_store.release(chain_store, settings)
            reached.append(_tuned_so_far(program, settings, chain_store, chain_ends))
        if all(where == at for where in reached):
            tuned = []
            for key, start, settings in zip(keys, initial, every, strict=True):
                template = compiled.init(key, jnp.asarray(start))
                in_flight = chain_store / checkpoints.IN_FLIGHT
                _, _, params, _ = checkpoints.load_checkpoint(in_flight, settings, template)
                tuned.append(params)
            values = program.pooling.combine(tuned)
            unit_store.save(records, unit, None, values)
            _log.info("the chains pool their tuning: %s", values)
            return values
        if any(where > at for where in reached):
            stored = unit_store.load_info(records, unit)  # written since the first look
            if stored is not None:
                return stored
            if all(where > at for where in reached):
                return None
            raise ValueError(
                f"{chain_store}: some chains are tuned past their pooling stage and others not, "
                f"and no pooled record is stored in {records}"
            )
        time.sleep(CLAIM_POLL_SECONDS)  # another process tunes the others


def _summarise(chains: list[tuple[dict, dict]], config: ChainsConfig) -> ChainsResult:
    """The chains stacked (C, N, ...) with their diagnostics."""
    per_chain = [info["scalars"] for _, info in chains]
    seconds = [info["seconds"] for _, info in chains]
    total = sum(seconds)  # a resumed run counts each chain's own time
    stacked = {k: np.stack([draws[k] for draws, _ in chains]) for k in chains[0][0]}
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
        # where each chain ran (its seconds are that device's); the chains stored before the
        # device was recorded all ran on CPUs
        chain_devices=[info.get("device", "cpu") for _, info in chains],
        **{f"chain_{k}": [c[k] for c in per_chain] for k in per_chain[0]},
    )
    return ChainsResult(samples, log_density, steps, diverging, diagnostics)
