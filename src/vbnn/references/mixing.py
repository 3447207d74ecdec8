"""Why the chains of an MLP posterior do or do not mix: measures read from the draws alone.

R-hat and ESS say *that* chains have not mixed; these say *where* and suggest *why*, for draws
(C chains, N draws, D parameters) of a network described by an ``MLPArchitecture`` (flat vector
in its ``named_parameters`` order: per layer the weight (I, O), then the bias (O)):

* **layers**: per layer, weights and biases apart, how many parameters are slow (bulk ESS < 100
  or R-hat > 1.05) and the worst of each (:func:`layer_mixing`).
* **the rescaling ridge**: a ReLU or LeakyReLU network is unchanged when hidden unit j's incoming
  weights and bias are multiplied by c > 0 and its outgoing weights by 1 / c (positive
  homogeneity; a linear network has a whole matrix group of such moves); only the prior pins c.
  Along the ridge the likelihood is flat and the prior's curvature varies, a geometry that a
  single step size serves badly. Its coordinate is ``log |(w_in, b)_j| - log |w_out_j|``
  (:func:`rescaling_coordinates`): slow chains along it have a small ESS there.
* **units that switch off**: the share of draws in which a hidden unit is inactive
  (pre-activation <= 0) on every input (:func:`network_outputs`). An inactive ReLU unit leaves
  its incoming weights to the prior; turning units on and off moves between modes, and chains
  that spend different shares of time with a unit off disagree on the posterior.
* **modes or drift** of the slowest parameters (:func:`modes_or_drift`): the spread of the chain
  means over the mean within-chain standard deviation, and the largest difference between the
  two halves of a chain on the same scale. Chains apart whose halves agree sit in different
  modes; halves that disagree say the chains are still moving (too short for the curvature).
* **function space**: ESS and R-hat of the network's logit at a few inputs. Slow weights with a
  fast function are slow only along directions that leave the predictions unchanged (the
  symmetries above), which still enter any weight-space measure such as a covariance gap.
* **which chain holds the others back** (:func:`without_each_chain`): the worst and median R-hat
  and the slow parameters of the other chains, one chain left out at a time. A chain that moves
  slower than the rest (a short tuned trajectory, say) shows as the one whose removal brings
  R-hat down.
* **where divergent transitions start** (:func:`divergence_locations`): the within-chain
  percentile of the log density, of each layer's weight norm and of the largest rescaling
  coordinate at the draws from which a transition diverged, against the same chains' divergences
  shifted in time (a null that keeps their clustering and the features' autocorrelation). The
  curvature of a layer's weights grows with the other layers' norms (the network is a product),
  so divergences that start where some layer is large point at the product geometry.

Vehtari et al. (2021) for R-hat and ESS; the rescaling symmetry of ReLU networks e.g. Dinh et al.
(2017), "Sharp minima can generalize for deep nets".
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from vbnn.references.architecture import MLPArchitecture
from vbnn.references.chain_diagnostics import bulk_ess, rank_rhat

SLOW_ESS = 100.0
SLOW_RHAT = 1.05
SLOWEST = 20  # parameters whose chain means and halves are compared
PASS_ELEMENTS = 2**22  # the values of one hidden layer a network pass holds at most


def layer_slices(sizes: tuple[int, ...]) -> list[tuple[slice, slice]]:
    """(weight, bias) slices of the flat parameter vector, one pair per layer."""
    out, begin = [], 0
    for inputs, outputs in itertools.pairwise(sizes):
        weight = slice(begin, begin + inputs * outputs)
        bias = slice(weight.stop, weight.stop + outputs)
        out.append((weight, bias))
        begin = bias.stop
    return out


def unpack(draws: np.ndarray, sizes: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight (..., I, O), bias (..., O)) of every layer of flat draws (..., D)."""
    expected = layer_slices(sizes)[-1][1].stop
    if draws.shape[-1] != expected:
        raise ValueError(f"unpack: sizes {sizes} have {expected} parameters, draws {draws.shape}")
    lead = draws.shape[:-1]
    return [
        (draws[..., weight].reshape(*lead, inputs, outputs), draws[..., bias])
        for (weight, bias), (inputs, outputs) in zip(
            layer_slices(sizes), itertools.pairwise(sizes), strict=True
        )
    ]


def layer_log_norms(draws: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """The log Frobenius norm of every layer's weight matrix for flat draws (..., D): (..., L)."""
    return np.stack(
        [0.5 * np.log((weight**2).sum(axis=(-2, -1))) for weight, _ in unpack(draws, sizes)],
        axis=-1,
    )


def rescaling_coordinates(draws: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """``log |(w_in, b)_j| - log |w_out_j|`` of every hidden unit j, layer by layer: (..., H)."""
    layers = unpack(draws, sizes)
    out = []
    for (weight, bias), (following, _) in itertools.pairwise(layers):
        incoming = np.sqrt((weight**2).sum(-2) + bias**2)
        outgoing = np.sqrt((following**2).sum(-1))
        out.append(np.log(incoming) - np.log(outgoing))
    return np.concatenate(out, axis=-1)


def network_outputs(
    draws: np.ndarray, architecture: MLPArchitecture, inputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Logits (C, N, inputs) of every draw and, per hidden unit, whether it is inactive on every
    input (C, N, H); single outputs only (the Bernoulli networks of the depth experiment).

    The inputs run along the last axis of every product ((O, I) @ (I, inputs) per draw), where
    they are contiguous; as many draws at once as keep a hidden layer's values within
    ``PASS_ELEMENTS``."""
    if architecture.sizes[-1] != 1:
        raise ValueError(f"network_outputs: one output needed, sizes {architecture.sizes}")
    chains, count = draws.shape[:2]
    flat = np.asarray(draws).reshape(chains * count, -1)
    points = torch.as_tensor(np.asarray(inputs), dtype=torch.float32).T.contiguous()
    per_pass = max(1, PASS_ELEMENTS // (max(architecture.sizes[1:]) * points.shape[1]))
    logits, inactive = [], []
    for begin in range(0, len(flat), per_pass):
        layers = [
            (torch.as_tensor(weight).transpose(-1, -2), torch.as_tensor(bias)[..., None])
            for weight, bias in unpack(flat[begin : begin + per_pass].astype(np.float32),
                                       architecture.sizes)
        ]  # fmt: skip
        hidden, off = points.expand(len(layers[0][0]), *points.shape), []
        for weight, bias in layers[:-1]:
            pre = torch.baddbmm(bias, weight, hidden)
            off.append(pre.amax(dim=-1) <= 0)
            hidden = torch.nn.functional.leaky_relu(pre, architecture.slope)
        weight, bias = layers[-1]
        logits.append(torch.baddbmm(bias, weight, hidden)[:, 0])
        inactive.append(torch.cat(off, dim=-1))
    return (
        torch.cat(logits).reshape(chains, count, -1).numpy(),
        torch.cat(inactive).reshape(chains, count, -1).numpy(),
    )


def modes_or_drift(draws: np.ndarray, ess: np.ndarray) -> dict[str, float]:
    """Medians over the ``SLOWEST`` parameters by ``ess`` of the chain means' spread and of the
    largest half-to-half difference of a chain's mean, both over the mean within-chain sd."""
    chosen = draws[..., np.argsort(ess)[:SLOWEST]]
    within = chosen.std(axis=1).mean(axis=0)
    half = chosen.shape[1] // 2
    drift = np.abs(chosen[:, :half].mean(axis=1) - chosen[:, -half:].mean(axis=1)).max(axis=0)
    return {
        "between_over_within": float(np.median(chosen.mean(axis=1).std(axis=0) / within)),
        "half_drift": float(np.median(drift / within)),
    }


def _within_chain_percentiles(values: np.ndarray) -> np.ndarray:
    """Each draw's percentile (0, 1) among its own chain's draws: (C, N) -> (C, N)."""
    return (values.argsort(axis=1).argsort(axis=1) + 0.5) / values.shape[1]


def divergence_locations(
    draws: np.ndarray,
    diverging: np.ndarray,
    log_density: np.ndarray,
    sizes: tuple[int, ...],
    shifts: int = 500,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Where the divergent transitions of chains (C, N, D) start, one row per feature.

    A transition that diverged at draw t started from draw t - 1 (a divergent proposal is
    rejected, so draw t repeats it); divergences at t = 0 started from the warm-up and are left
    out. For each feature (``log_density``, ``layer_<l>_log_norm`` = log of layer l's weight
    Frobenius norm, ``rescaling_max`` = the largest |rescaling coordinate|) the row gives the mean
    within-chain percentile at the starts (0.5 when divergences ignore the feature), its null
    mean and sd over ``shifts`` random circular shifts of each chain's divergence indicator (which
    keep the divergences' clustering in time and the feature's autocorrelation), ``z`` and the
    two-sided null share ``p`` as far from the null mean, and the feature's median at the starts
    and over all draws.

    Args:
        diverging: (C, N) bool, whether the transition that produced draw t diverged.
        log_density: (C, N) log density of the draws.
    """
    draws, diverging = np.asarray(draws), np.asarray(diverging, dtype=bool)
    chains, count = draws.shape[:2]
    if diverging.shape != (chains, count) or np.shape(log_density) != (chains, count):
        raise ValueError(
            f"divergence_locations: diverging {diverging.shape} and log_density "
            f"{np.shape(log_density)} must both be (chains, draws) = {(chains, count)}"
        )
    starts = [np.flatnonzero(diverging[chain, 1:]) for chain in range(chains)]
    total = sum(len(index) for index in starts)
    if total == 0:
        return []
    features = {"log_density": np.asarray(log_density, dtype=np.float64)}
    for layer, norms in enumerate(np.moveaxis(layer_log_norms(draws, sizes), -1, 0)):
        features[f"layer_{layer}_log_norm"] = norms
    if len(sizes) > 2:
        features["rescaling_max"] = np.abs(rescaling_coordinates(draws, sizes)).max(axis=-1)
    offsets = np.random.default_rng(seed).integers(1, count, size=(shifts, chains))
    rows = []
    for name, values in features.items():
        ranks = _within_chain_percentiles(values)
        observed = sum(ranks[chain, index].sum() for chain, index in enumerate(starts)) / total
        null = np.array([
            sum(ranks[chain, (index + offset[chain]) % count].sum()
                for chain, index in enumerate(starts)) / total
            for offset in offsets
        ])  # fmt: skip
        spread = np.abs(null - null.mean())
        rows.append({
            "feature": name, "divergent_starts": total, "percentile": float(observed),
            "null_mean": float(null.mean()), "null_sd": float(null.std()),
            "z": float((observed - null.mean()) / null.std()),
            "p": float(np.mean(spread >= abs(observed - null.mean()))),
            "median_at_starts": float(np.median(np.concatenate(
                [values[chain, index] for chain, index in enumerate(starts)]))),
            "median_all": float(np.median(values)),
        })  # fmt: skip
    return rows


def divergence_episodes(diverging: np.ndarray, gap: int = 20) -> int:
    """How many bursts the divergent transitions (C, N) come in: runs whose divergences are at
    most ``gap`` transitions apart count once."""
    episodes = 0
    for chain in np.asarray(diverging, dtype=bool):
        index = np.flatnonzero(chain)
        episodes += int(len(index) > 0) + int((np.diff(index) > gap).sum())
    return episodes


def without_each_chain(draws: np.ndarray) -> list[dict[str, Any]]:
    """For draws (C >= 2, N, D), one row per chain c: rank R-hat (worst and median over the
    parameters) of the other C - 1 chains (of one chain's halves where C = 2), and how many
    parameters have R-hat > ``SLOW_RHAT`` there (R-hat only: ESS falls with the chains left
    out)."""
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 3 or draws.shape[0] < 2:
        raise ValueError(
            f"without_each_chain: draws must be (chains >= 2, N, D), got {draws.shape}"
        )
    rows = []
    for chain in range(draws.shape[0]):
        rhat = rank_rhat(np.delete(draws, chain, axis=0))
        rows.append({
            "chain": chain, "rhat_max_without": float(rhat.max()),
            "rhat_median_without": float(np.median(rhat)),
            "rhat_slow_without": int((rhat > SLOW_RHAT).sum()),
        })  # fmt: skip
    return rows


def layer_mixing(rhat: np.ndarray, ess: np.ndarray, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Per layer and kind (weight, bias): parameters, slow ones, worst R-hat and bulk ESS."""
    rows = []
    for layer, (weight, bias) in enumerate(layer_slices(sizes)):
        for kind, part in (("weight", weight), ("bias", bias)):
            slow = (ess[part] < SLOW_ESS) | (rhat[part] > SLOW_RHAT)
            rows.append({
                "layer": layer, "kind": kind, "parameters": part.stop - part.start,
                "slow": int(slow.sum()), "rhat_max": float(rhat[part].max()),
                "bulk_ess_min": float(ess[part].min()),
            })  # fmt: skip
    return rows


def mixing_report(
    draws: np.ndarray,
    architecture: MLPArchitecture,
    inputs: np.ndarray,
    test_inputs: np.ndarray,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The measures of the module docstring for draws (C, N, D): a summary and per-layer rows.

    Args:
        draws: (C >= 2 chains, N >= 4 draws, D parameters).
        inputs: the training inputs (units inactive on all of them are counted).
        test_inputs: where the logit's mixing is measured.
    """
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 3 or draws.shape[0] < 2:
        raise ValueError(f"mixing_report: draws must be (chains >= 2, N, D), got {draws.shape}")
    sizes = architecture.sizes
    rhat, ess = rank_rhat(draws), bulk_ess(draws)
    ridge = rescaling_coordinates(draws, sizes)
    ridge_rhat, ridge_ess = rank_rhat(ridge), bulk_ess(ridge)
    logits, _ = network_outputs(draws, architecture, test_inputs)
    _, inactive = network_outputs(draws, architecture, inputs)
    off_share = inactive.mean(axis=1)  # (C, H)
    pooled = off_share.mean(axis=0)
    summary = {
        "rhat_max": float(rhat.max()), "bulk_ess_min": float(ess.min()),
        "bulk_ess_median": float(np.median(ess)),
        "slow_parameters": int(((ess < SLOW_ESS) | (rhat > SLOW_RHAT)).sum()),
        "parameters": draws.shape[-1],
        "rescaling_rhat_max": float(ridge_rhat.max()),
        "rescaling_ess_min": float(ridge_ess.min()),
        "rescaling_ess_median": float(np.median(ridge_ess)),
        "logit_rhat_max": float(rank_rhat(logits).max()),
        "logit_ess_min": float(bulk_ess(logits).min()),
        "hidden_units": len(pooled),
        "units_always_off": int((pooled > 0.99).sum()),
        "switching_units": int(((pooled > 0.01) & (pooled < 0.99)).sum()),
        "off_share_median": float(np.median(pooled)),
        "off_share_spread": float((off_share.max(axis=0) - off_share.min(axis=0)).max()),
        **modes_or_drift(draws, ess),
    }  # fmt: skip
    return summary, layer_mixing(rhat, ess, sizes)
