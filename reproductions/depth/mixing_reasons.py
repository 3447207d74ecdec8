"""Why a depth unit's chains do or do not mix: ``mixing.csv`` and ``mixing_layers.csv`` of a run.

For every unit of ``<run>/units`` whose chains are in ``<run>/samples``, from the draws alone:

* **where the slow coordinates are**: per layer (weights and biases apart), the parameters with
  bulk ESS < 100 or R-hat > 1.05, the worst of each;
* **the rescaling ridge**: a ReLU or LeakyReLU network is unchanged when a hidden unit's incoming
  weights and bias are multiplied by c > 0 and its outgoing weights by 1 / c; only the prior
  pins c. Its coordinate is ``scale_j = log |(w_in, b)_j| - log |w_out_j|``, one per hidden unit;
  if the chains are slow along the ridge, the scales' worst ESS is below the parameters' median
  and their R-hat near the parameters' worst;
* **units that switch off**: the share of draws in which a hidden unit is inactive (pre-activation
  <= 0) on every training input. An inactive ReLU unit leaves its incoming weights to the prior;
  switching a unit on and off is a move between modes, and chains that disagree on how often it
  happens disagree on the posterior (``switching_units``: units off in 1-99 % of all draws;
  ``off_share_spread``: the largest difference between two chains' off shares);
* **modes or drift**: for the 20 slowest parameters, the spread of the chains' means over the
  mean within-chain standard deviation (``between_over_within``; near 0 when the chains agree)
  and the largest difference of a chain's two halves, on the same scale (``half_drift``). Chains
  that sit apart with halves that agree are in different modes; halves that disagree say the
  chains are still moving (too short, or a step size too small for the curvature);
* **function space**: bulk ESS and R-hat of the network's logit at 16 test inputs. Slow weights
  with a fast function are slow only along directions that do not change the predictions
  (symmetries), which still inflate a weight-space gap;
* the tuned step size and trajectory length of every chain.

Run from the repository root: ``python reproductions/depth/mixing_reasons.py
reproductions/depth/mams-1000``. The run's chains stay beside it (not in git: ~16 MB a unit).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.experiments.depth.units import two_moons
from vbnn.references.chain_diagnostics import bulk_ess, rank_rhat

SLOWEST = 20
FUNCTION_INPUTS = 16


def layer_slices(sizes: list[int]) -> list[tuple[int, slice, slice]]:
    """(layer, weight slice, bias slice) of the flat vector: per layer the weight (I, O)
    row-major, then the bias (O) (``vbnn.references.architecture``)."""
    out, begin = [], 0
    for layer, (inputs, outputs) in enumerate(itertools.pairwise(sizes)):
        weight = slice(begin, begin + inputs * outputs)
        bias = slice(weight.stop, weight.stop + outputs)
        out.append((layer, weight, bias))
        begin = bias.stop
    return out


def unpack(draws: np.ndarray, sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight (..., I, O), bias (..., O)) per layer of flat draws (..., D)."""
    lead = draws.shape[:-1]
    return [
        (draws[..., weight].reshape(*lead, inputs, outputs), draws[..., bias])
        for (_, weight, bias), inputs, outputs in zip(
            layer_slices(sizes), sizes[:-1], sizes[1:], strict=True
        )
    ]


def scales(draws: np.ndarray, sizes: list[int]) -> np.ndarray:
    """log |(w_in, b)_j| - log |w_out_j| of every hidden unit j: (..., hidden units)."""
    layers = unpack(draws, sizes)
    out = []
    for (weight, bias), (following, _) in itertools.pairwise(layers):
        incoming = np.sqrt((weight**2).sum(-2) + bias**2)
        outgoing = np.sqrt((following**2).sum(-1))
        out.append(np.log(incoming) - np.log(outgoing))
    return np.concatenate(out, axis=-1)


def forward(draws: np.ndarray, sizes: list[int], inputs: np.ndarray, slope: float):
    """Logits (..., N) and, per hidden unit, whether it is inactive on all inputs (..., units)."""
    hidden = torch.as_tensor(inputs, dtype=torch.float32).expand(*draws.shape[:-1], -1, -1)
    off = []
    layers = unpack(draws, sizes)
    for index, (weight, bias) in enumerate(layers):
        pre = hidden @ torch.as_tensor(weight) + torch.as_tensor(bias)[..., None, :]
        if index == len(layers) - 1:
            return pre[..., 0].numpy(), np.concatenate(off, axis=-1)
        off.append((pre <= 0).all(dim=-2).numpy())
        hidden = torch.where(pre > 0, pre, slope * pre)
    raise ValueError(f"forward: sizes {sizes} have no layer")


def in_chunks(draws: np.ndarray, function, size: int = 100):
    """``function`` over chunks of draws along axis 1, concatenated (bounded memory)."""
    pieces = [function(draws[:, begin : begin + size]) for begin in range(0, draws.shape[1], size)]
    return tuple(np.concatenate(parts, axis=1) for parts in zip(*pieces, strict=True))


def slow_parameters(draws: np.ndarray, rhat: np.ndarray, ess: np.ndarray) -> dict[str, float]:
    """Modes or drift of the ``SLOWEST`` parameters by bulk ESS (see the module docstring)."""
    slowest = np.argsort(ess)[:SLOWEST]
    chosen = draws[..., slowest]
    within = chosen.std(axis=1).mean(axis=0)
    half = chosen.shape[1] // 2
    halves = np.abs(chosen[:, :half].mean(axis=1) - chosen[:, half:].mean(axis=1)).max(axis=0)
    return {
        "between_over_within": float(np.median(chosen.mean(axis=1).std(axis=0) / within)),
        "half_drift": float(np.median(halves / within)),
    }


def diagnose(record: dict, arrays: dict, info: dict) -> tuple[dict, list[dict]]:
    """One unit's row of ``mixing.csv`` and its rows of ``mixing_layers.csv``."""
    settings = record["settings"]
    sizes = [2, *[record["width"]] * record["depth"], 1]
    draws = arrays["samples"].astype(np.float64)
    seed = settings["seed"] * 1000 + settings["repeat"]
    inputs, _ = two_moons(settings["points"], settings["noise"], seed, torch.float32)
    test, _ = two_moons(FUNCTION_INPUTS, settings["noise"], seed + 900_000, torch.float32)
    slope = {"relu": 0.0, "identity": 1.0}.get(settings["activation"], settings["negative_slope"])
    rhat, ess = rank_rhat(draws), bulk_ess(draws)
    ridge = scales(draws, sizes)
    ridge_rhat, ridge_ess = rank_rhat(ridge), bulk_ess(ridge)
    single = draws.astype(np.float32)
    logits = in_chunks(single, lambda d: forward(d, sizes, test.numpy(), slope))[0]
    _, off = in_chunks(single, lambda d: forward(d, sizes, inputs.numpy(), slope))
    off_share = off.mean(axis=1)  # (chains, units)
    pooled_off = off_share.mean(axis=0)
    unit = {
        "activation": record["activation"], "depth": record["depth"],
        "repeat": record["repeat"], "points": record["points"], "sampler": record["sampler"],
        "rhat_max": float(rhat.max()), "bulk_ess_min": float(ess.min()),
        "bulk_ess_median": float(np.median(ess)),
        "slow_parameters": int(((ess < 100) | (rhat > 1.05)).sum()),
        "parameters": draws.shape[-1],
        "scale_rhat_max": float(ridge_rhat.max()), "scale_ess_min": float(ridge_ess.min()),
        "scale_ess_median": float(np.median(ridge_ess)),
        "logit_rhat_max": float(rank_rhat(logits).max()),
        "logit_ess_min": float(bulk_ess(logits).min()),
        "rhat_log_density": info.get("rhat_log_density", np.nan),
        "hidden_units": len(pooled_off),
        "units_always_off": int((pooled_off > 0.99).sum()),
        "switching_units": int(((pooled_off > 0.01) & (pooled_off < 0.99)).sum()),
        "off_share_spread": float((off_share.max(axis=0) - off_share.min(axis=0)).max()),
        **slow_parameters(draws, rhat, ess),
        "step_size_by_chain": json.dumps([round(v, 4) for v in info["chain_step_size"]]),
        "trajectory_length_by_chain": json.dumps(
            [round(v, 3) for v in info["chain_trajectory_length"]]
        ),
        "divergences": info.get("divergences", np.nan),
    }  # fmt: skip
    layers = []
    for layer, weight, bias in layer_slices(sizes):
        for kind, part in (("weight", weight), ("bias", bias)):
            slow = (ess[part] < 100) | (rhat[part] > 1.05)
            layers.append({
                "activation": record["activation"], "depth": record["depth"],
                "repeat": record["repeat"], "points": record["points"], "layer": layer,
                "kind": kind, "parameters": part.stop - part.start, "slow": int(slow.sum()),
                "rhat_max": float(rhat[part].max()), "bulk_ess_min": float(ess[part].min()),
            })  # fmt: skip
    return unit, layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a depth run's output folder")
    args = parser.parse_args()
    units, layers = [], []
    for path in sorted((args.run / "units").glob("*.json")):
        record = json.loads(path.read_text())["info"]
        stored = args.run / "samples" / path.name
        if not stored.is_file():
            print(f"{path.name}: no chains in {args.run / 'samples'}, skipped")
            continue
        with np.load(stored.with_suffix(".npz")) as data:
            arrays = {name: data[name] for name in data.files}
        unit, rows = diagnose(record, arrays, json.loads(stored.read_text())["info"])
        units.append(unit)
        layers.extend(rows)
    if not units:
        raise SystemExit(f"{args.run}: no unit with stored chains")
    table = pd.DataFrame(units).sort_values(["points", "activation", "depth", "repeat"])
    table.to_csv(args.run / "mixing.csv", index=False)
    pd.DataFrame(layers).to_csv(args.run / "mixing_layers.csv", index=False)
    shown = ["activation", "depth", "rhat_max", "bulk_ess_min", "slow_parameters",
             "scale_ess_min", "scale_rhat_max", "logit_ess_min", "logit_rhat_max",
             "switching_units", "off_share_spread", "between_over_within", "half_drift",
             "step_size_by_chain"]  # fmt: skip
    print(table[shown].to_string(index=False, float_format=lambda value: f"{value:.3g}"))


if __name__ == "__main__":
    main()
