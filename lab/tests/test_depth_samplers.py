"""The depth experiment's reference samplers agree on the moments they estimate.

NumPyro NUTS, BlackJAX's MAMS (Robnik, Cohn-Gordon & Seljak 2025) and unadjusted MCLMC (Robnik
& Seljak 2024) on (1) a correlated Gaussian with known mean and covariance and (2) a tiny
two-moons ReLU network, against a long NUTS reference. Tolerances come from the effective sample
sizes: a mean's standard error is sd / sqrt(ESS), a variance's sqrt(2) var / sqrt(ESS) (Gaussian
fourth moment) with the ESS of the squared deviations; every coordinate must be within 5 of them.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

blackjax = pytest.importorskip("blackjax", reason="pip install 'vbnn[jax]'")
jax = pytest.importorskip("jax")
jnp = jax.numpy

from pyro.ops.stats import effective_sample_size  # noqa: E402

from vbnn.core.contracts import Activation  # noqa: E402
from vbnn.references.architecture import MLPArchitecture  # noqa: E402
from vbnn.references.chain_diagnostics import (  # noqa: E402
    ConvergenceCriterion,
    _ess,
    bulk_ess,
)
from vbnn.references.jax_nuts import ChainsConfig, jittered_starts  # noqa: E402
from vbnn.references.jax_potential import jax_potential  # noqa: E402
from vbnn.references.samplers import Sampler, run_sampler  # noqa: E402
from vbnn_lab.depth.units import two_moons  # noqa: E402

TOLERANCE = 5.0  # standard errors
CONFIG = ChainsConfig(chains=4, warmup=400, samples=800, seed=3)


def moment_z_scores(
    draws: np.ndarray, mean: np.ndarray, variance: np.ndarray, extra_variance: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """|z| of the draws' (C, N, D) mean and variance per coordinate against ``mean`` and
    ``variance``, whose own squared standard errors are ``extra_variance`` (2, D): the mean's and
    the variance's (zero for exact values)."""
    pooled = draws.reshape(-1, draws.shape[-1])
    ess_mean = bulk_ess(draws)
    ess_square = bulk_ess((draws - pooled.mean(0)) ** 2)
    mean_error = variance / ess_mean + extra_variance[0]
    variance_error = 2 * variance**2 / ess_square + extra_variance[1]
    return (
        np.abs(pooled.mean(0) - mean) / np.sqrt(mean_error),
        np.abs(pooled.var(0) - variance) / np.sqrt(variance_error),
    )


def squared_errors(draws: np.ndarray) -> np.ndarray:
    """(2, D): the squared standard errors of the draws' mean and variance, from their ESS."""
    variance = draws.reshape(-1, draws.shape[-1]).var(0)
    pooled = draws.reshape(-1, draws.shape[-1])
    return np.stack(
        [variance / bulk_ess(draws), 2 * variance**2 / bulk_ess((draws - pooled.mean(0)) ** 2)]
    )


def gaussian_potential(mean: np.ndarray, covariance: np.ndarray):
    """U(theta) of N(mean, covariance) up to a constant, in float32 as the samplers' potentials."""
    precision = jnp.asarray(np.linalg.inv(covariance), jnp.float32)
    centre = jnp.asarray(mean, jnp.float32)

    def potential(theta):
        delta = theta - centre
        return 0.5 * delta @ precision @ delta

    return potential


class Killed(Exception):
    """A run killed in a test, right after it wrote a checkpoint."""


def kill_after_checkpoints(monkeypatch, counts) -> list[dict]:
    """Make ``save_checkpoint`` raise ``Killed`` right after its n-th write, for every n in
    ``counts``; returns the list that the progress of every write is appended to."""
    from vbnn.references import chain_checkpoints

    saved = []
    checkpoint = chain_checkpoints.save_checkpoint

    def killed_after_some(store, settings, progress, *state):
        checkpoint(store, settings, progress, *state)
        saved.append(progress)
        if len(saved) in counts:
            raise Killed

    monkeypatch.setattr(chain_checkpoints, "save_checkpoint", killed_after_some)
    return saved


@pytest.fixture(scope="module")
def gaussian() -> tuple:
    """A 6-D Gaussian with correlations up to ~0.9 and scales from 0.3 to 3."""
    rng = np.random.default_rng(0)
    factor = rng.standard_normal((6, 6))
    correlation = factor @ factor.T + 0.5 * np.eye(6)
    scales = np.geomspace(0.3, 3.0, 6)
    inner = np.sqrt(np.diag(correlation))
    covariance = correlation / np.outer(inner, inner) * np.outer(scales, scales)
    mean = np.linspace(-2.0, 2.0, 6)
    potential = gaussian_potential(mean, covariance)
    starts = jittered_starts(np.zeros(6, np.float32), dataclasses.replace(CONFIG, start_jitter=1))
    return potential, starts, mean, covariance


@pytest.fixture(scope="module")
def gaussian_chains(gaussian):
    """``run_sampler`` on the Gaussian from its four starts, run once per (sampler, config) in
    this module and then read back: several tests look at the same chains (each run lowers and
    compiles its programs anew, most of a test's time)."""
    potential, starts, _, _ = gaussian
    runs = {}

    def chains(sampler: Sampler, config: ChainsConfig):
        if (sampler, config) not in runs:
            runs[sampler, config] = run_sampler(sampler, potential, starts, config)
        return runs[sampler, config]

    return chains


def test_the_tolerance_catches_a_wrong_variance_or_mean(gaussian) -> None:
    """The check can fail: exact draws pass it, draws 1.3x too wide or shifted by 0.3 sd do not."""
    _, _, mean, covariance = gaussian
    rng = np.random.default_rng(1)
    exact = rng.multivariate_normal(mean, covariance, size=(4, 800))
    sd = np.sqrt(np.diag(covariance))
    zero = np.zeros((2, 6))
    assert max(z.max() for z in moment_z_scores(exact, mean, sd**2, zero)) < TOLERANCE
    wide = mean + 1.3 * (exact - mean)
    assert moment_z_scores(wide, mean, sd**2, zero)[1].max() > TOLERANCE
    assert moment_z_scores(exact + 0.3 * sd, mean, sd**2, zero)[0].max() > TOLERANCE


@pytest.mark.parametrize("sampler", list(Sampler))
def test_every_sampler_recovers_a_correlated_gaussian(
    gaussian, gaussian_chains, sampler: Sampler
) -> None:
    _, _, mean, covariance = gaussian
    result = gaussian_chains(sampler, CONFIG)
    assert result.samples.shape == (4, 800, 6)
    assert ConvergenceCriterion().passes(result.diagnostics), result.diagnostics
    mean_z, variance_z = moment_z_scores(
        result.samples, mean, np.diag(covariance), np.zeros((2, 6))
    )
    assert mean_z.max() < TOLERANCE and variance_z.max() < TOLERANCE, (mean_z, variance_z)
    correlation = np.corrcoef(result.samples.reshape(-1, 6).T)
    exact = covariance / np.sqrt(np.outer(np.diag(covariance), np.diag(covariance)))
    assert np.abs(correlation - exact).max() < 0.1  # sd of a correlation <= 1 / sqrt(ESS > 100)


def test_a_scaled_mams_step_keeps_the_tuning_and_the_target(gaussian, gaussian_chains) -> None:
    """``step_scale`` divides the tuned step and keeps the tuned trajectory length: the same
    tuning (same keys) gives exactly half the step, twice the integration steps a transition, a
    higher acceptance and still the Gaussian's moments."""
    potential, starts, mean, covariance = gaussian
    plain = gaussian_chains(Sampler.MAMS, CONFIG).diagnostics
    config = dataclasses.replace(CONFIG, step_scale=2.0)
    result = run_sampler(Sampler.MAMS, potential, starts, config)
    scaled = result.diagnostics
    np.testing.assert_allclose(
        scaled["chain_step_size"], np.asarray(plain["chain_step_size"]) / 2, rtol=1e-6
    )
    np.testing.assert_allclose(
        scaled["chain_trajectory_length"], plain["chain_trajectory_length"], rtol=1e-6
    )
    assert 1.7 < scaled["leapfrog_steps_mean"] / plain["leapfrog_steps_mean"] < 2.3
    assert scaled["accept_probability"] > plain["accept_probability"]
    mean_z, variance_z = moment_z_scores(
        result.samples, mean, np.diag(covariance), np.zeros((2, 6))
    )
    assert mean_z.max() < TOLERANCE and variance_z.max() < TOLERANCE, (mean_z, variance_z)


def test_the_step_scale_is_for_mams_and_enters_the_key_only_when_used(gaussian) -> None:
    potential, starts, _, _ = gaussian
    assert "step_scale" not in CONFIG.to_dict()  # the keys of chains stored before it came
    assert dataclasses.replace(CONFIG, step_scale=1.5).to_dict()["step_scale"] == 1.5
    with pytest.raises(ValueError, match="step_scale"):
        ChainsConfig(step_scale=0.5)
    with pytest.raises(ValueError, match=r"step_scale=2\.0 applies to MAMS only, not nuts"):
        run_sampler(Sampler.NUTS, potential, starts, dataclasses.replace(CONFIG, step_scale=2.0))
    import argparse

    from vbnn_lab import depth

    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    with pytest.raises(ValueError, match=r"--step-scale 2\.0: for --sampler mams only"):
        depth.build_settings(parser.parse_args(["--sampler", "nuts", "--step-scale", "2"]))
    units, _ = depth.build_settings(parser.parse_args(["--quick", "--step-scale", "2"]))
    assert units[0].to_dict()["chains"]["step_scale"] == 2.0


def test_mams_chains_that_share_a_length_tune_it_alone_then_take_the_median(
    gaussian, gaussian_chains
) -> None:
    """``shared_length``: stages 1 and 2 are each chain's own (same keys, the same lengths as
    without it), then every chain goes on at the median of those lengths, retunes its step size
    there, and still samples the Gaussian."""
    potential, starts, mean, covariance = gaussian
    plain = gaussian_chains(Sampler.MAMS, CONFIG).diagnostics
    own = np.asarray(plain["chain_trajectory_length"])
    assert np.ptp(own) > 0.05 * own.mean()  # the chains' own lengths differ
    config = dataclasses.replace(CONFIG, shared_length=True)
    result = run_sampler(Sampler.MAMS, potential, starts, config)
    shared = result.diagnostics
    np.testing.assert_allclose(shared["pooled_chain_tuned_lengths"], own, rtol=1e-6)
    np.testing.assert_allclose(shared["pooled_trajectory_length"], np.median(own), rtol=1e-6)
    np.testing.assert_allclose(shared["chain_trajectory_length"], np.median(own), rtol=1e-6)
    assert not np.allclose(shared["chain_step_size"], plain["chain_step_size"])  # retuned
    assert ConvergenceCriterion().passes(shared), shared
    mean_z, variance_z = moment_z_scores(
        result.samples, mean, np.diag(covariance), np.zeros((2, 6))
    )
    assert mean_z.max() < TOLERANCE and variance_z.max() < TOLERANCE, (mean_z, variance_z)


def test_a_shared_length_is_stored_once_and_survives_a_kill(gaussian, tmp_path, monkeypatch):
    """With a chain store the chains' pooled length is a record there, written before any chain
    goes on: a run killed while the chains tune alone, or after one has gone on, resumes to the
    draws of a run never killed. It is for MAMS only, enters the key only when used, is not one
    chain alone (``mams_chain``), and a store whose chains are past the pooling without its
    record is named; merging stores brings the record along."""
    from vbnn.references import jax_mclmc
    from vbnn.references.chain_checkpoints import POOLED, chain_settings, merge_chain_stores
    from vbnn.stores import unit_store

    potential, starts, _, _ = gaussian
    config = dataclasses.replace(CONFIG, warmup=50, samples=20, shared_length=True)
    assert "shared_length" not in CONFIG.to_dict() and config.to_dict()["shared_length"]
    expected = run_sampler(Sampler.MAMS, potential, starts, config)
    # killed as chain 1 ends stage 1, and after pooling as chain 1 ends stage 3
    saved = kill_after_checkpoints(monkeypatch, (3, 10))
    store = tmp_path / "chains"
    with pytest.raises(Killed):
        run_sampler(Sampler.MAMS, potential, starts, config, store)
    assert not (store / POOLED).exists()
    with pytest.raises(Killed):
        run_sampler(Sampler.MAMS, potential, starts, config, store)
    assert [(p["stage"], p["drawn"]) for p in saved[2:10]] == [(1, 0), (2, 0)] * 3 + [(3, 0)] * 2
    assert len(list((store / POOLED).glob("*.json"))) == 1
    monkeypatch.undo()  # no more kills
    result = run_sampler(Sampler.MAMS, potential, starts, config, store)
    np.testing.assert_array_equal(result.samples, expected.samples)
    assert result.diagnostics["pooled_trajectory_length"] == pytest.approx(
        expected.diagnostics["pooled_trajectory_length"]
    )
    merged = tmp_path / "elsewhere"
    said = merge_chain_stores(tmp_path, merged)
    assert "chains/pooled: brought here" in said
    assert len(list((merged / "chains" / POOLED).glob("*.json"))) == 1
    for path in (store / POOLED).glob("*.json"):  # a record lost, one chain to run again
        path.unlink()
    unit_store.remove(store, chain_settings("run_mams_chains", 3, starts[3], config))
    with pytest.raises(ValueError, match=r"past their pooling stage .* no pooled record"):
        run_sampler(Sampler.MAMS, potential, starts, config, store)
    with pytest.raises(ValueError, match="shared_length applies to MAMS only, not mclmc"):
        run_sampler(Sampler.MCLMC, potential, starts, config)
    with pytest.raises(ValueError, match="share their tuning"):
        jax_mclmc.mams_chain(potential, config)
    import argparse

    from vbnn_lab import depth

    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    with pytest.raises(ValueError, match="--shared-length: for --sampler mams only"):
        depth.build_settings(parser.parse_args(["--sampler", "nuts", "--shared-length"]))


def test_mclmc_reports_its_energy_error_draw_by_draw(gaussian_chains) -> None:
    """The per-draw energy error (each draw's mean squared error per dimension over its steps)
    summarised: median, maximum, the share of draws above 5e-3, the log density at the worst;
    on a Gaussian, where the tuning holds, no draw's error stands out."""
    diagnostics = gaussian_chains(Sampler.MCLMC, CONFIG).diagnostics
    chains = diagnostics["chain_energy_error_variance_per_dimension"]
    median = diagnostics["energy_error_variance_draw_median"]
    assert 0 < median <= diagnostics["energy_error_variance_draw_max"]
    assert min(chains) <= diagnostics["energy_error_variance_draw_max"]
    assert max(chains) < 5e-3  # tuned for 5e-4 on a Gaussian: no spikes
    assert 0.0 <= diagnostics["energy_error_variance_draws_above_5e_3"] < 0.05
    assert np.isfinite(diagnostics["log_density_at_worst_energy_error"])


def test_a_full_rank_preconditioner_is_the_draws_covariance() -> None:
    """``low_rank_preconditioner``: at rank D, diag(s) (I + U (Lambda - I) U^T) diag(s) is the
    draws' covariance; at rank k it keeps the k correlation eigenvalues farthest from 1 in ratio
    (a small one before a large one nearer 1); the rest of the space is only rescaled by s."""
    from vbnn.references.jax_mclmc import low_rank_preconditioner

    rng = np.random.default_rng(2)
    draws = rng.standard_normal((5000, 4)) @ np.array(
        [[1.0, 0.9, 0.0, 0.0], [0.0, 0.3, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.5]]
    )  # coordinates 0 and 1 correlated: eigenvalues 1 -+ 0.95; 2 and 3 alone: eigenvalues 1

    def dense(pre) -> np.ndarray:
        sigma, vectors, eigenvalues = (np.asarray(leaf, np.float64) for leaf in pre)
        inner = np.eye(4) + vectors @ np.diag(eigenvalues - 1) @ vectors.T
        return sigma[:, None] * inner * sigma[None, :]

    covariance = np.cov(draws.T, bias=True)
    np.testing.assert_allclose(
        dense(low_rank_preconditioner(draws)), covariance, rtol=1e-5, atol=1e-6
    )
    one = low_rank_preconditioner(draws, rank=1)
    smallest = np.linalg.eigvalsh(np.corrcoef(draws.T)).min()  # about 1 - 0.95
    assert smallest < 0.1
    np.testing.assert_allclose(np.asarray(one.lam), [smallest], rtol=1e-4)
    direction = np.asarray(one.U)[:, 0] * np.sign(np.asarray(one.U)[0, 0])
    np.testing.assert_allclose(direction, [0.5**0.5, -(0.5**0.5), 0, 0], atol=0.02)
    for bad, match in (((draws, 5), "rank must be in 1..4"), ((draws[:1],), r"N >= 2"),
                       ((np.c_[draws, np.ones(5000)],), "spread > 0")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            low_rank_preconditioner(*bad)


def test_mams_with_a_dense_preconditioner_recovers_an_ill_conditioned_gaussian(tmp_path) -> None:
    """MAMS with the target's own covariance as preconditioner (tuning eps at two steps, then L
    and eps as without) gives a 10-D Gaussian's moments (correlation 0.99 between neighbours in
    pairs, scales 0.1 to 10); the preconditioner's digest enters the chains' store keys, so its
    chains are not those of the diagonal sampler or of another preconditioner."""
    from vbnn.references.chain_checkpoints import chain_settings
    from vbnn.references.jax_mclmc import (
        low_rank_preconditioner,
        preconditioner_digest,
        run_mams_chains,
    )
    from vbnn.stores import unit_store

    pair = np.array([[1.0, 0.99], [0.99, 1.0]])
    correlation = np.kron(np.eye(5), pair)
    scales = np.geomspace(0.1, 10.0, 10)
    covariance = correlation * np.outer(scales, scales)
    mean = np.linspace(-1.0, 1.0, 10)
    potential = gaussian_potential(mean, covariance)
    exact = np.random.default_rng(3).multivariate_normal(mean, covariance, size=20_000)
    preconditioner = low_rank_preconditioner(exact)
    starts = np.asarray(
        mean + scales * jittered_starts(np.zeros(10, np.float32), CONFIG), np.float32
    )
    store = tmp_path / "chains"
    result = run_mams_chains(potential, starts, CONFIG, store, preconditioner=preconditioner)
    assert ConvergenceCriterion().passes(result.diagnostics), result.diagnostics
    mean_z, variance_z = moment_z_scores(
        result.samples, mean, np.diag(covariance), squared_errors(exact.reshape(4, -1, 10))
    )
    assert mean_z.max() < TOLERANCE and variance_z.max() < TOLERANCE, (mean_z, variance_z)
    found = np.corrcoef(result.samples.reshape(-1, 10).T)
    assert np.abs(found - correlation).max() < 0.1
    extra = {"preconditioner": preconditioner_digest(preconditioner)}
    keyed = chain_settings("run_mams_chains", 0, starts[0], CONFIG, extra)
    assert unit_store.load(store, keyed) is not None
    assert unit_store.load(store, chain_settings("run_mams_chains", 0, starts[0], CONFIG)) is None
    # the preconditioner is used: the diagonal sampler mixes far slower per gradient on this target
    # (0.47 against 320 worst-coordinate ESS per 1000 gradients when written)
    diagonal = run_mams_chains(potential, starts, CONFIG).diagnostics

    def speed(diagnostics: dict) -> float:
        return diagnostics["bulk_ess_min"] / diagnostics["sampling_gradient_evaluations"]

    assert speed(result.diagnostics) > 10 * speed(diagonal)


def test_the_same_seed_gives_the_same_chains(gaussian, gaussian_chains) -> None:
    potential, starts, _, _ = gaussian
    config = dataclasses.replace(CONFIG, warmup=50, samples=20)
    first = gaussian_chains(Sampler.MCLMC, config).samples
    again = run_sampler(Sampler.MCLMC, potential, starts, config).samples
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[0], first[1])  # each chain has its own key


@pytest.mark.parametrize("sampler", [Sampler.MAMS, Sampler.MCLMC])
def test_a_killed_run_resumes_from_its_finished_chains(
    gaussian, gaussian_chains, tmp_path, sampler
) -> None:
    """Finished chains are stored and read back instead of run again; the chains that were not
    stored run again to the draws of an uninterrupted run; other starts or seeds are not read."""
    from vbnn.references.chain_checkpoints import chain_settings
    from vbnn.stores import unit_store

    potential, starts, _, _ = gaussian
    config = dataclasses.replace(CONFIG, warmup=50, samples=20)
    whole = gaussian_chains(sampler, config)
    store = tmp_path / "chains"
    stored = run_sampler(sampler, potential, starts, config, store)
    np.testing.assert_array_equal(stored.samples, whole.samples)
    name = f"run_{sampler.value}_chains"
    keys = [chain_settings(name, i, start, config) for i, start in enumerate(starts)]
    assert len(list(store.glob("*.npz"))) == 4
    # killed while running chain 2: chains 2 and 3 are not stored; chain 0 is marked
    for settings in keys[2:]:
        key = unit_store.settings_key(settings)
        (store / f"{key}.json").unlink()
        (store / f"{key}.npz").unlink()
    draws, info = unit_store.load(store, keys[0])
    unit_store.save(store, keys[0], {**draws, "draws": np.full_like(draws["draws"], 7.0)}, info)
    resumed = run_sampler(sampler, potential, starts, config, store)
    assert (resumed.samples[0] == 7.0).all()  # read back, not run again
    np.testing.assert_array_equal(resumed.samples[1:], whole.samples[1:])
    assert len(list(store.glob("*.npz"))) == 4
    moved = run_sampler(sampler, potential, starts + 1.0, config, store)
    reseeded = run_sampler(sampler, potential, starts, dataclasses.replace(config, seed=4), store)
    assert (moved.samples[0] != 7.0).all() and (reseeded.samples[0] != 7.0).all()


@pytest.mark.parametrize("sampler", [Sampler.MAMS, Sampler.MCLMC])
def test_a_chain_killed_in_flight_goes_on_from_its_checkpoint(
    gaussian, tmp_path, monkeypatch, caplog, sampler
) -> None:
    """A chain stopped after a tuning stage, between the segments of MAMS's stage 1 or between
    sampling segments goes on from its last checkpoint (no stage or segment is run again) to
    the draws of the same chain never stopped; the checkpoints are gone once the chain is
    stored. Each checkpoint and resumption is a progress line."""
    import logging

    from vbnn.references import chain_runner

    potential, starts, _, _ = gaussian
    config = dataclasses.replace(CONFIG, chains=2, warmup=50, samples=45)
    starts = starts[:2]
    monkeypatch.setattr(chain_runner, "SEGMENT", 7)  # 7 segments, the last of 3 draws
    monkeypatch.setattr(chain_runner, "CHECKPOINT_SECONDS", 0.0)  # after every segment
    expected = run_sampler(sampler, potential, starts, config).samples  # never stopped
    # MAMS: stage 1 in 6 segments (pass 1's 20 transitions as 7, 7, 6, the preconditioner, pass
    # 2's 10 as 7, 3), a checkpoint after each but the last, then one after each of 3 stages
    within = [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)] if sampler is Sampler.MAMS else []
    stages = 3 if sampler is Sampler.MAMS else 1
    tuning = within + [(stage, 0) for stage in range(1, stages + 1)]
    # killed inside stage 1 (MAMS) or after the tuning (MCLMC), then 4 segments of draws later
    stop_after = {3 if within else 1, len(tuning) + 4}
    saved = kill_after_checkpoints(monkeypatch, stop_after)
    caplog.set_level(logging.INFO, logger="vbnn")
    store = tmp_path / "chains"
    for _ in stop_after:
        with pytest.raises(Killed):
            run_sampler(sampler, potential, starts, config, store)
    result = run_sampler(sampler, potential, starts, config, store)
    np.testing.assert_array_equal(result.samples, expected)
    first_chain = saved[: len(tuning) + 4]  # the same chain, over two runs, no repeat
    assert [(p["stage"], p["segment"]) for p in first_chain[: len(tuning)]] == tuning
    assert [p["drawn"] for p in first_chain[len(tuning) :]] == [7, 14, 21, 28]
    assert saved[len(tuning) + 4]["drawn"] == 35  # the third run went on from 28 draws
    lines = [r.getMessage() for r in caplog.records if r.name == "vbnn.references.chain_runner"]
    name = f"{sampler.value} chain 0"
    first_stop = min(stop_after)
    where = "0 tuning stage(s) and 3 segment(s) of stage 1" if within else "1 tuning stage(s)"
    assert lines[first_stop].startswith(f"{name}: goes on from its checkpoint, {where} done")
    lines = lines[:first_stop] + lines[first_stop + 1 :]  # then one line a checkpoint
    assert lines[len(within)].startswith(f"{name}: 1 tuning stage(s) done (")
    assert lines[len(tuning) + 4].startswith(f"{name}: goes on from its checkpoint, {stages} ")
    assert ", 28 draws, " in lines[len(tuning) + 4]  # the third run's resumption
    assert sum(line.startswith(f"{name}: finished and stored") for line in lines) == 1
    assert not list((store / "in-flight").iterdir()) and len(list(store.glob("*.npz"))) == 2


@pytest.mark.parametrize("sampler", [Sampler.MAMS, Sampler.MCLMC])
def test_more_draws_go_on_from_where_the_chains_ended(
    gaussian, tmp_path, monkeypatch, sampler
) -> None:
    """The same chains asked for more draws go on from where they ended (no tuning stage or draw
    made again) to the draws, diagnostics and gradient counts of chains that were asked for
    that many at once; fewer draws, or another seed, do not take the ends, and a shorter chain
    leaves the longer one's end in place."""
    from vbnn.references import chain_checkpoints, chain_runner
    from vbnn.stores import unit_store

    potential, starts, _, _ = gaussian
    short = dataclasses.replace(CONFIG, chains=2, warmup=50, samples=20)
    long = dataclasses.replace(short, samples=45)
    starts = starts[:2]
    # the property it rests on: the first n keys of a split into more are a split into n
    key = jax.random.PRNGKey(5)
    np.testing.assert_array_equal(jax.random.split(key, 45)[:20], jax.random.split(key, 20))
    whole = run_sampler(sampler, potential, starts, long)
    made = {"stages": 0, "draws": 0}
    compiled = chain_runner._Compiled

    def counted(init, tuning, sample):
        def stage_of(stage):
            def run(*args):
                made["stages"] += 1
                return (stage.begin if segmented else stage)(*args)

            segmented = isinstance(stage, chain_runner.SegmentedStage)
            return stage._replace(begin=run) if segmented else run

        def sample_counted(state, params, keys):
            made["draws"] += len(keys)
            return sample(state, params, keys)

        return compiled(init, tuple(stage_of(stage) for stage in tuning), sample_counted)

    monkeypatch.setattr(chain_runner, "_Compiled", counted)
    ends = tmp_path / "ends"
    first = run_sampler(sampler, potential, starts, short, tmp_path / "first", ends)
    np.testing.assert_array_equal(first.samples, whole.samples[:, :20])
    assert len(list(ends.glob("*.npz"))) == 2
    made.update(stages=0, draws=0)
    longer = run_sampler(sampler, potential, starts, long, tmp_path / "longer", ends)
    assert made == {"stages": 0, "draws": 2 * (45 - 20)}
    np.testing.assert_array_equal(longer.samples, whole.samples)
    np.testing.assert_array_equal(longer.log_density, whole.log_density)
    for name in ("gradient_evaluations", "bulk_ess_min", "rhat_max", "accept_probability"):
        np.testing.assert_equal(longer.diagnostics[name], whole.diagnostics[name], name)
    made.update(stages=0, draws=0)
    fewer = run_sampler(sampler, potential, starts, short, tmp_path / "fewer", ends)
    np.testing.assert_array_equal(fewer.samples, first.samples)
    assert made["stages"] > 0 and made["draws"] == 2 * 20  # run again, not read from the ends
    chains = [chain_checkpoints.chain_settings(f"run_{sampler.value}_chains", i, start, long)
              for i, start in enumerate(starts)]  # fmt: skip
    for settings in chains:
        assert unit_store.load(ends, chain_checkpoints.end_settings(settings))[1]["drawn"] == 45
    made.update(stages=0, draws=0)
    reseeded = dataclasses.replace(long, seed=4)
    run_sampler(sampler, potential, starts, reseeded, tmp_path / "reseeded", ends)
    assert made["stages"] > 0 and made["draws"] == 2 * 45


def test_chains_from_another_machine_are_merged_without_losing_progress(tmp_path) -> None:
    """``merge_chain_stores`` (``vbnn reproduce depth --chains-from``), chain by chain: a chain
    finished there replaces a checkpoint here; of two checkpoints the further one stays; one
    finished here or run by a live process here is left alone; claims never travel."""
    import socket
    import subprocess

    from vbnn.cli import main
    from vbnn.references.chain_checkpoints import IN_FLIGHT, merge_chain_stores
    from vbnn.stores import unit_store

    there, here = tmp_path / "there" / "unit", tmp_path / "here" / "unit"

    def chain(index: int) -> dict:
        return {"sampler": "run_mams_chains", "chain": index}

    def checkpoint(folder: Path, index: int, stage: int, drawn: int, value: float) -> None:
        progress = {"stage": stage, "drawn": drawn, "seconds": 1.0, "tuning_gradients": 8.0}
        unit_store.save(folder / IN_FLIGHT, chain(index), {"draw.x": np.full(3, value)}, progress)

    unit_store.save(there, chain(0), {"draws": np.zeros(3)}, {"seconds": 2.0})
    checkpoint(here, 0, 3, 1, -0.0)
    checkpoint(there, 1, 3, 200, 1.0)  # further there
    checkpoint(here, 1, 3, 50, -1.0)
    checkpoint(there, 2, 1, 0, 2.0)  # further here
    checkpoint(here, 2, 3, 0, -2.0)
    checkpoint(there, 3, 3, 10, 3.0)  # finished here
    unit_store.save(here, chain(3), {"draws": np.ones(3)}, {"seconds": 3.0})
    checkpoint(there, 4, 2, 0, 4.0)  # only there, with that machine's claim
    (there / f"{unit_store.settings_key(chain(4))}.claim").write_text("gpu-host 12")
    checkpoint(there, 5, 3, 300, 5.0)  # running here
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claim = here / f"{unit_store.settings_key(chain(5))}.claim"
        claim.write_text(f"{socket.gethostname()} {running.pid}")
        said = merge_chain_stores(tmp_path / "there", tmp_path / "here")
    finally:
        running.kill()
        running.wait()
    by_chain = {int(line.split(":")[0].split()[-1]): line.split(": ", 1)[1] for line in said}
    assert by_chain[0] == "finished there, brought here"
    assert by_chain[1].startswith("in flight there, brought here (3 tuning stage(s) done")
    assert by_chain[2].startswith("as far or further here (3 tuning stage(s) done")
    assert by_chain[3] == "finished here already"
    assert by_chain[4].startswith("in flight there, brought here (2 tuning stage(s)")
    assert by_chain[5] == "running here, left alone" and len(said) == 6
    assert unit_store.load(here, chain(0))[1] == {"seconds": 2.0}
    assert unit_store.load(here / IN_FLIGHT, chain(0)) is None  # its checkpoint dropped
    kept = {i: unit_store.load(here / IN_FLIGHT, chain(i)) for i in (1, 2, 3, 4, 5)}
    assert kept[1][0]["draw.x"][0] == 1.0 and kept[1][1]["drawn"] == 200
    assert kept[2][0]["draw.x"][0] == -2.0 and kept[3] is None and kept[5] is None
    assert [path.name for path in here.glob("*.claim")] == [claim.name]
    with pytest.raises(FileNotFoundError, match="nowhere is not a directory"):
        merge_chain_stores(tmp_path / "nowhere", tmp_path / "here")
    flags = ["--quick", "--sampler", "mams", "--out", str(tmp_path / "run")]
    assert main(["reproduce", "depth", *flags, "--chains-from", str(tmp_path / "nowhere")]) == 2


@pytest.mark.parametrize(("warmup", "segment"), [(50, 7), (400, 50)])
def test_mams_stage_1_in_segments_is_blackjaxs_own(gaussian, monkeypatch, warmup, segment) -> None:
    """MAMS tuning stage 1 run as checkpointable segments is BlackJAX's
    ``adjusted_mclmc_find_L_and_step_size``: the same state, step size, L, preconditioner and
    gradients (2 an integration step), segment by segment and in one call, on a Gaussian whose
    scales span 100x (eps falls, pass 1's trajectories grow). In float64: in float32, XLA rounds
    differently where compiled calls begin and end, and one Metropolis decision that rounding
    tips sends a chain on another path."""
    from blackjax.mcmc import adjusted_mclmc_dynamic
    from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn

    from vbnn.references import chain_runner
    from vbnn.references.jax_mclmc import step_size_and_preconditioner

    _, starts, mean, covariance = gaussian
    scales = np.geomspace(0.03, 3.0, 6)
    monkeypatch.setattr(chain_runner, "SEGMENT", segment)
    with jax.enable_x64(True):
        precision = jnp.asarray(np.linalg.inv(covariance * np.outer(scales, scales)))
        centre = jnp.asarray(mean * scales)

        def log_density(theta):
            return -0.5 * (theta - centre) @ precision @ (theta - centre)

        kernel = adjusted_mclmc_dynamic.build_kernel(
            integration_steps_fn=make_random_trajectory_length_fn(True)
        )
        key = jax.random.PRNGKey(3)
        start = jnp.asarray(starts[0], jnp.float64)
        state = adjusted_mclmc_dynamic.init(start, log_density, key)
        blackjaxs = blackjax.adjusted_mclmc_find_L_and_step_size
        expected = jax.jit(
            lambda key, state: blackjaxs(
                mclmc_kernel=kernel,
                logdensity_fn=log_density,
                num_steps=warmup,
                state=state,
                rng_key=key,
                target=0.9,
                frac_tune1=0.2,
                frac_tune2=0.2,
                diagonal_preconditioning=True,
            )
        )(key, state)
        stage = step_size_and_preconditioner(kernel, log_density, 0.9, warmup)
        pieces = -(-0.4 * warmup // segment) - (-0.2 * warmup // segment) + 1
        assert len(stage.schedule) == pieces
        compiled = stage.compiled()
        carry = compiled.begin(key, state, None)
        for piece in compiled.schedule:
            carry = compiled.pieces[piece](carry)
        for got in (compiled.end(carry), jax.jit(stage.whole)(key, state, None)):
            leaves = zip(jax.tree.leaves(got[:2]), jax.tree.leaves(expected[:2]), strict=True)
            for mine, theirs in leaves:
                assert np.asarray(mine).dtype == np.asarray(theirs).dtype
                np.testing.assert_allclose(np.asarray(mine), np.asarray(theirs), rtol=1e-9)
            assert int(got[2]) == 2 * int(expected[2])
    # pass 1's trajectories ran long: over 8x the 2 steps a transition of 0.6 x warmup
    assert int(expected[2]) > 8 * 2 * 0.6 * warmup


def test_mams_stage_1_caps_its_trajectories_where_blackjaxs_runs_away() -> None:
    """On a Gaussian of scales 1e-3 to 1e-2, far below the first step size (0.2 sqrt(D)), the first
    transitions are rejected, dual averaging drives eps towards 1e-5 while pass 1 holds L, and
    BlackJAX's stage 1 runs trajectories of L / eps steps. Capped at a mean of ``max_steps``
    (no transition over 2 x max_steps - 1 steps), the same stage stays within the cap and still
    tunes eps of the same order."""
    from blackjax.mcmc import adjusted_mclmc_dynamic
    from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn

    from vbnn.references.jax_mclmc import step_size_and_preconditioner

    scales = jnp.asarray(np.geomspace(1e-3, 1e-2, 6), jnp.float32)

    def log_density(theta):
        return -0.5 * jnp.sum((theta / scales) ** 2)

    kernel = adjusted_mclmc_dynamic.build_kernel(
        integration_steps_fn=make_random_trajectory_length_fn(True)
    )
    key = jax.random.PRNGKey(0)
    state = adjusted_mclmc_dynamic.init(jnp.zeros(6), log_density, key)
    warmup, cap, transitions = 50, 7, 30  # 0.6 x warmup transitions
    steps, tuned = {}, {}
    for name, max_steps in (("capped", cap), ("uncapped", np.inf)):
        stage = step_size_and_preconditioner(kernel, log_density, 0.9, warmup, max_steps)
        tuned[name], gradients = jax.jit(stage.whole)(key, state, None)[1:]
        steps[name] = int(gradients) // 2
    assert steps["capped"] <= transitions * (2 * cap - 1)
    assert steps["uncapped"] > 10 * transitions * (2 * cap - 1)  # 10x what the cap allows
    # the capped stage tunes a step size of the same order (eps 1e-5 would be 100x off)
    ratio = float(tuned["capped"].step_size / tuned["uncapped"].step_size)
    assert 1 / 3 < ratio < 3


def test_a_segmented_stage_is_checkpointed_by_the_time_its_segments_take(
    gaussian, tmp_path, monkeypatch
) -> None:
    """The runner waits for each segment before it reads the clock: with stage 1's first two
    segments held at least 0.3 s each on the device (a host callback that sleeps inside the
    compiled piece) and a checkpoint due every 0.5 s, stage 1 is stored while it runs (JAX
    dispatches asynchronously: not waiting, the runner queues every segment at once and stores
    nothing until the stage ends). A sleep is a lower bound on loaded cores too, where the
    matrix products this test first timed were not."""
    import time

    from jax.experimental import io_callback

    from vbnn.references import chain_checkpoints, chain_runner
    from vbnn.references.jax_mclmc import mams_program

    def pause(done):
        time.sleep(0.3)
        return done

    def slowed(piece):
        """The piece after a pause of 0.3 s on the device, which its carry waits for."""

        def run(carry):
            done = io_callback(pause, jax.ShapeDtypeStruct((), jnp.int32), carry["done"])
            return piece({**carry, "done": done})

        return run

    potential, starts, _, _ = gaussian
    monkeypatch.setattr(chain_runner, "SEGMENT", 7)
    monkeypatch.setattr(chain_runner, "CHECKPOINT_SECONDS", 0.5)
    config = dataclasses.replace(CONFIG, warmup=50, samples=10)
    program = mams_program(potential, config)
    stage = program.tuning[0]
    pieces = tuple(slowed(piece) for piece in stage.pieces[:1]) + stage.pieces[1:]
    program = program._replace(tuning=(stage._replace(pieces=pieces), *program.tuning[1:]))
    saved = []
    checkpoint = chain_checkpoints.save_checkpoint

    def recorded(store, settings, progress, *state):
        saved.append((progress["stage"], progress["segment"]))
        checkpoint(store, settings, progress, *state)

    compiled = chain_runner._compile(program)
    key = jax.random.PRNGKey(5)
    chain_runner._run_chain(program, compiled, key, starts[0], {}, None)  # compiles every piece
    monkeypatch.setattr(chain_checkpoints, "save_checkpoint", recorded)
    chain_runner._run_chain(program, compiled, key, starts[0], {}, tmp_path / "in-flight")
    # stage 1: pass 1's 20 transitions as 7, 7, 6 (slowed: the 7s), then 3 fast segments; the
    # clock passes 0.5 s after the first slowed segment (loaded cores) or the second (at least
    # 0.6 s); without the wait the first checkpoint is the stage's end, (1, 0)
    assert saved[0][0] == 0 and 1 <= saved[0][1] <= 2
    assert (1, 0) in saved


def test_a_chain_asked_to_stop_stores_its_draws_first(gaussian, tmp_path, monkeypatch) -> None:
    """SIGTERM while a chain samples: the segment under way ends, the chain in flight is stored
    with every draw made, the process stops as the signal says (SIGINT: KeyboardInterrupt), and
    the rerun goes on to the draws of an unbroken chain."""
    import os
    import signal

    from vbnn.references import chain_runner
    from vbnn.references.jax_mclmc import mams_program
    from vbnn.stores import unit_store

    potential, starts, _, _ = gaussian
    config = dataclasses.replace(CONFIG, warmup=50, samples=45)
    monkeypatch.setattr(chain_runner, "SEGMENT", 7)
    program = mams_program(potential, config)
    key = jax.random.PRNGKey(5)
    sample = jax.jit(program.sample)
    unstopped = chain_runner._compile(program)
    expected = chain_runner._run_chain(program, unstopped, key, starts[0], {}, None)[0]["draws"]
    calls = []

    def signalled_on_the_third_segment(*arguments):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return sample(*arguments)

    def compiled(sample) -> chain_runner._Compiled:
        return chain_runner._compile(program)._replace(sample=sample)

    settings = {"chain": 0}
    in_flight = tmp_path / "in-flight"
    handler = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or one a library installed (Ray's)
    with pytest.raises(KeyboardInterrupt):
        chain_runner._stop(signal.SIGINT)
    with pytest.raises(SystemExit, match=str(128 + signal.SIGTERM)):
        chain_runner._run_chain(
            program, compiled(signalled_on_the_third_segment), key, starts[0], settings, in_flight
        )
    assert signal.getsignal(signal.SIGTERM) is handler  # the handlers are put back
    progress = unit_store.load(in_flight, settings)[1]
    assert (progress["stage"], progress["drawn"]) == (3, 21)
    resumed = []

    def counted(*arguments):
        resumed.append(1)
        return sample(*arguments)

    draws, info = chain_runner._run_chain(program, compiled(counted), key, starts[0], settings,
                                          in_flight)  # fmt: skip
    np.testing.assert_array_equal(draws["draws"], expected)
    assert len(resumed) == 4  # draws 22-45, no tuning stage or segment run again
    assert info["seconds"] > progress["seconds"]


def test_a_chain_another_process_runs_is_waited_for_not_run_twice(
    gaussian, tmp_path, monkeypatch
) -> None:
    """Two processes on one chain store: a chain claimed by a live process is left to it and read
    back once stored; if the store goes away meanwhile (the other process stored the whole unit),
    even while this process reads or claims in it, the waiting run says so instead of running the
    chain again."""
    import shutil
    import socket
    import subprocess
    import sys
    import threading

    from vbnn.references import chain_runner
    from vbnn.references.chain_checkpoints import chain_settings
    from vbnn.references.chain_runner import ChainStoreRemoved
    from vbnn.stores import unit_store

    monkeypatch.setattr(chain_runner, "CLAIM_POLL_SECONDS", 0.05)
    potential, starts, _, _ = gaussian
    config = dataclasses.replace(CONFIG, warmup=50, samples=20)
    finished = tmp_path / "finished"
    whole = run_sampler(Sampler.MAMS, potential, starts, config, finished)
    settings = chain_settings("run_mams_chains", 1, starts[1], config)
    key = unit_store.settings_key(settings)
    draws, info = unit_store.load(finished, settings)
    unit_store.save(finished, settings, {**draws, "draws": np.full_like(draws["draws"], 7.0)}, info)
    store = tmp_path / "shared"
    store.mkdir()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) as other:
        (store / f"{key}.claim").write_text(f"{socket.gethostname()} {other.pid}")

        def other_finishes() -> None:  # the other process stores chain 1 and lets it go
            for suffix in (".npz", ".json"):  # the record last, as unit_store.save writes it
                shutil.copy(finished / f"{key}{suffix}", store / f"{key}{suffix}")
            (store / f"{key}.claim").unlink()

        timer = threading.Timer(1.0, other_finishes)
        timer.start()
        shared = run_sampler(Sampler.MAMS, potential, starts, config, store)
        timer.join()
        assert (shared.samples[1] == 7.0).all()  # read back from the other process, not run
        np.testing.assert_array_equal(shared.samples[[0, 2, 3]], whole.samples[[0, 2, 3]])
        assert not list(store.glob("*.claim"))

        gone = tmp_path / "gone"
        shutil.copytree(finished, gone)  # every chain stored but chain 1, which the other runs
        for suffix in (".npz", ".json"):
            (gone / f"{key}{suffix}").unlink()
        (gone / f"{key}.claim").write_text(f"{socket.gethostname()} {other.pid}")
        timer = threading.Timer(1.0, shutil.rmtree, (gone,))
        timer.start()
        with pytest.raises(ChainStoreRemoved, match="gone"):
            run_sampler(Sampler.MAMS, potential, starts, config, gone)
        timer.join()
        other.kill()

    # removed in the middle of a look into it (here: as chain 1 is claimed), the same
    shutil.copytree(finished, gone)
    for suffix in (".npz", ".json"):
        (gone / f"{key}{suffix}").unlink()

    def removed_meanwhile(directory, settings_) -> bool:
        shutil.rmtree(directory)
        raise FileNotFoundError(directory / f"{unit_store.settings_key(settings_)}.claim")

    monkeypatch.setattr(unit_store, "claim", removed_meanwhile)
    with pytest.raises(ChainStoreRemoved, match="gone"):
        run_sampler(Sampler.MAMS, potential, starts, config, gone)


def test_processes_sharing_a_unit_make_its_record_once(tmp_path, monkeypatch) -> None:
    """The process that claims a unit's record makes it; another with the same chains waits and
    reads it back, and takes the record over if the claiming process ends without it."""
    import shutil
    import socket
    import subprocess
    import sys

    from vbnn.stores import unit_store
    from vbnn_lab.depth import units

    settings = units.UnitSettings(Activation.RELU, depth=1, repeat=0, points=40, budget=30)
    dimension = units.parameter_count(list(settings.architecture().sizes))
    draws = np.random.default_rng(0).normal(size=(4, 40, dimension)).astype(np.float32)
    unit_store.save(tmp_path / "samples", settings, {"samples": draws}, {"rhat": 1.0})
    store = units.chain_store(settings, tmp_path)
    claim = store / f"{unit_store.settings_key(units.RECORD_CLAIM)}.claim"
    elsewhere = {"depth": 1, "made": "by the other process"}

    claimed = unit_store.claimed

    def while_waiting(then):  # what the other process does once this one waits for it
        def look(directory, settings_):
            then()
            return claimed(directory, settings_)

        return look

    def other_stores_it() -> None:  # its record first, then its chain store goes
        unit_store.save(tmp_path / "units", settings, None, elsewhere)
        shutil.rmtree(store)

    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) as other:
        store.mkdir(parents=True)
        claim.write_text(f"{socket.gethostname()} {other.pid}")
        monkeypatch.setattr(unit_store, "claimed", while_waiting(other_stores_it))
        assert units.run_unit(settings, tmp_path) == elsewhere  # waited for, not made twice

        unit_store.remove(tmp_path / "units", settings)
        store.mkdir(parents=True)
        claim.write_text(f"{socket.gethostname()} {other.pid}")
        monkeypatch.setattr(
            unit_store, "claimed", while_waiting(lambda: other.kill() or other.wait())
        )
        record = units.run_unit(settings, tmp_path)  # it ended without the record: made here
    assert record["parameters"] == dimension and np.isfinite(record["kl_diag_full"])
    assert units.stored_record(settings, tmp_path) == record and not store.exists()


@pytest.fixture(scope="module")
def tiny_network() -> tuple:
    """A 2-3-1 ReLU network (13 parameters) on 20 two-moons points, a long NUTS reference."""
    x, y = two_moons(20, 0.1, 0, torch.float32)
    architecture = MLPArchitecture((2, 3, 1), Activation.RELU)
    potential = jax_potential(architecture, x.numpy(), y.numpy())
    starts = jittered_starts(np.zeros(13, np.float32), dataclasses.replace(CONFIG, start_jitter=1))
    long = dataclasses.replace(CONFIG, warmup=300, samples=3000, seed=11)
    reference = run_sampler(Sampler.NUTS, potential, starts, long)
    assert ConvergenceCriterion().passes(reference.diagnostics), reference.diagnostics
    return potential, starts, reference.samples


# MCLMC's warm-up counts integrator steps (2 gradients each), MAMS's transitions (about 8
# integration steps each here). At 400 steps its step size has not settled: over seeds 0-7 the
# worst chain's energy error variance per dimension while sampling was 0.0006-0.0052, past the
# trust limit 5e-3 on one seed on one machine; at 2000 steps, 0.0009-0.0018.
MCLMC_WARMUP = 2000


@pytest.mark.parametrize("sampler", [Sampler.MAMS, Sampler.MCLMC])
def test_the_blackjax_samplers_match_nuts_on_a_tiny_network(tiny_network, sampler) -> None:
    potential, starts, reference = tiny_network
    config = CONFIG if sampler is Sampler.MAMS else dataclasses.replace(CONFIG, warmup=MCLMC_WARMUP)
    result = run_sampler(sampler, potential, starts, config)
    assert ConvergenceCriterion().passes(result.diagnostics), result.diagnostics
    pooled = reference.reshape(-1, 13)
    mean_z, variance_z = moment_z_scores(
        result.samples, pooled.mean(0), pooled.var(0), squared_errors(reference)
    )
    assert mean_z.max() < TOLERANCE and variance_z.max() < TOLERANCE, (mean_z, variance_z)


def test_ess_in_pieces_equals_ess_at_once() -> None:
    """The diagnostics take Pyro's ESS a few coordinates at a time (memory); same numbers."""
    draws = np.random.default_rng(2).standard_normal((4, 200, 150)).cumsum(1)
    at_once = effective_sample_size(torch.as_tensor(draws), 0, 1).numpy()
    np.testing.assert_allclose(_ess(draws, coordinates=7), at_once, rtol=1e-12)


def test_the_sampler_enters_the_unit_key(tmp_path) -> None:
    from vbnn.stores import unit_store
    from vbnn.stores.unit_store import settings_key
    from vbnn_lab.depth.units import UnitSettings, stored_record

    nuts = UnitSettings(Activation.RELU, depth=1, repeat=0, points=100)
    mams = dataclasses.replace(nuts, sampler=Sampler.MAMS)
    assert nuts.to_dict()["sampler"] == "nuts" and mams.to_dict()["sampler"] == "mams"
    assert settings_key(nuts) != settings_key(mams)
    unit_store.save(tmp_path / "units", nuts, None, {"depth": 1})
    assert stored_record(nuts, tmp_path) == {"depth": 1}
    assert stored_record(mams, tmp_path) is None  # another sampler's unit is not this one


@pytest.mark.slow
def test_reproduce_depth_with_another_sampler_writes_its_unit_table(tmp_path) -> None:
    import argparse

    import pandas as pd

    from vbnn.cli import main
    from vbnn_lab import depth

    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    flags = [
        "--quick", "--out", str(tmp_path), "--depths", "1", "--activations", "relu",
        "--chains", "2", "--points", "100", "--warmup", "40", "--samples", "12", "--epochs", "1",
        "--heatmap-samples", "200", "--no-fashion", "--sampler", "mclmc",
    ]  # fmt: skip
    depth.run(parser.parse_args(flags))
    units = pd.read_csv(tmp_path / "depth_units.csv")
    assert units[["points", "sampler", "trusted"]].to_dict("records") == [
        {"points": 100, "sampler": "mclmc", "trusted": False}
    ]
    assert "blackjax" in units["software"][0]
    assert not list((tmp_path / "chains").glob("*/*"))  # a stored unit drops its chains in flight
    # the curvature along the chains, from the unit's own potential and tuned step sizes
    analysis = ["reproduce", "depth", "--curvature", str(tmp_path)]
    assert main([*analysis, "--per-chain", "5"]) == 0
    curvature = pd.read_csv(tmp_path / "curvature_points.csv")
    assert len(curvature) >= 10 and (curvature["h"] > 0).all()
    assert (tmp_path / "curvature.png").stat().st_size > 0
    # --depths measures those units again and keeps the rows of the others; --plot-only redraws
    summary = pd.read_csv(tmp_path / "curvature.csv")
    other = summary.assign(depth=7)
    pd.concat([summary, other]).to_csv(tmp_path / "curvature.csv", index=False)
    assert main([*analysis, "--per-chain", "5", "--depths", "1"]) == 0
    assert pd.read_csv(tmp_path / "curvature.csv")["depth"].tolist() == [1, 7]
    assert len(pd.read_csv(tmp_path / "curvature_points.csv")) == len(curvature)
    (tmp_path / "curvature.png").unlink()
    assert main([*analysis, "--plot-only"]) == 0
    assert (tmp_path / "curvature.png").stat().st_size > 0
