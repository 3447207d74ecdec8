"""Seconds of the depth chains' analysis (``vbnn reproduce depth --mixing-reasons``) in its
three costly parts, before and after a change.

**network_outputs.**
``network_outputs`` evaluates every draw of a unit's chains on its training points (which hidden
units switch off) and on test points (the logits); on the 10,000-point units it was ~90 % of
``--mixing-reasons``' time. For ReLU depths 1, 3 and 5 (the depth units'
widths, 10,000 two-moons points, N(0, 0.7^2) parameters, 4 chains x ``--draws``), this times the
working tree's function and the one at git revision ``--baseline`` (its ``mixing.py`` loaded as a
module beside today's package), alternating, ``--rounds`` times each, and checks that both give
the same inactive units and logits within float32 rounding.

**Bulk ESS.** ``chain_diagnostics.bulk_ess`` of 4 stationary AR(1) chains (rho 0.9) of
``--ess-draws`` draws and ``--ess-coordinates`` coordinates, with Pyro's own
``effective_sample_size`` and with ``_geyer_ess`` (the same steps, its running minimum by
``torch.cummin``), alternating; the two must be equal.

**Normal scores.** The rank normalisation's quantiles of the same number of values, with
``scipy.stats.norm.ppf`` and with the ``scipy.special.ndtri`` it calls (what
``chain_diagnostics.rank_normalise`` uses now); the two must be equal.

One thread, as the analysis scripts run beside the samplers.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/depth_analysis.py --baseline 9e5ce32 \\
        --rounds 5 --out benchmarks/results/depth_analysis.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from pyro.ops.stats import effective_sample_size
from scipy.special import ndtri
from scipy.stats import norm

from vbnn.core.contracts import Activation
from vbnn.references import chain_diagnostics, mixing
from vbnn.references.architecture import MLPArchitecture
from vbnn.stores.atomic import write_atomic
from vbnn_lab.depth.models import depth_widths
from vbnn_lab.depth.units import two_moons


def baseline_function(revision: str):
    """``network_outputs`` as it was at ``revision``."""
    source = subprocess.run(
        ["git", "show", f"{revision}:src/vbnn/references/mixing.py"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "mixing_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("mixing_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.network_outputs


def alternating(before, after, arguments: tuple, rounds: int) -> tuple[float, float, Any, Any]:
    """Best seconds of ``before(*arguments)`` and ``after(*arguments)`` over ``rounds``
    alternating calls, and the last outputs of each."""
    times: dict[str, list[float]] = {"before": [], "after": []}
    outputs = {}
    for _ in range(rounds):
        for name, function in (("before", before), ("after", after)):
            start = time.perf_counter()
            outputs[name] = function(*arguments)
            times[name].append(time.perf_counter() - start)
    return min(times["before"]), min(times["after"]), outputs["before"], outputs["after"]


def with_pyro_running_minimum(draws: np.ndarray) -> np.ndarray:
    """``bulk_ess`` with Pyro's own ``effective_sample_size`` (its running minimum an
    (N/2) x (N/2) copy per coordinate) in place of ``_geyer_ess``."""
    with mock.patch.object(
        chain_diagnostics, "_geyer_ess", lambda piece: effective_sample_size(piece, 0, 1)
    ):
        return chain_diagnostics.bulk_ess(draws)


def ess_row(draws: int, coordinates: int, rounds: int) -> dict:
    """Bulk ESS with Pyro's running minimum and with ``torch.cummin``: best seconds of each."""
    rng = np.random.default_rng(0)
    chains = np.empty((4, draws, coordinates))
    chains[:, 0] = rng.standard_normal((4, coordinates))
    for t in range(1, draws):
        chains[:, t] = 0.9 * chains[:, t - 1] + np.sqrt(1 - 0.9**2) * rng.standard_normal(
            (4, coordinates)
        )
    pyro_seconds, cummin_seconds, before, after = alternating(
        with_pyro_running_minimum, chain_diagnostics.bulk_ess, (chains,), rounds
    )
    if not np.array_equal(before, after):
        raise SystemExit("bulk ESS: torch.cummin gives another ESS than Pyro's running minimum")
    return {
        "draws": 4 * draws, "coordinates": coordinates,
        "pyro_running_minimum_s": pyro_seconds, "torch_cummin_s": cummin_seconds,
        "speedup": pyro_seconds / cummin_seconds,
    }  # fmt: skip


def quantile_row(shape: tuple[int, int], rounds: int) -> dict:
    """Normal quantiles of (draws, coordinates) probabilities by ``norm.ppf`` and ``ndtri``."""
    probabilities = np.random.default_rng(0).uniform(1e-4, 1 - 1e-4, size=shape)
    ppf_seconds, ndtri_seconds, before, after = alternating(
        norm.ppf, ndtri, (probabilities,), rounds
    )
    if not np.array_equal(before, after):
        raise SystemExit("normal scores: ndtri differs from norm.ppf")
    return {
        "shape": list(shape), "norm_ppf_s": ppf_seconds, "ndtri_s": ndtri_seconds,
        "speedup": ppf_seconds / ndtri_seconds,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git revision of the 'before' code")
    parser.add_argument("--depths", default="1,3,5")
    parser.add_argument("--draws", type=int, default=100, help="draws a chain (4 chains)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ess-draws", type=int, default=7000, help="draws a chain (4 chains)")
    parser.add_argument("--ess-coordinates", type=int, default=256)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    before = baseline_function(args.baseline)
    inputs = two_moons(10_000, 0.1, 0, torch.float32)[0].numpy()
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        architecture = MLPArchitecture(tuple(depth_widths(depth)), Activation.RELU)
        dimension = mixing.layer_slices(architecture.sizes)[-1][1].stop
        draws = np.random.default_rng(depth).normal(scale=0.7, size=(4, args.draws, dimension))
        old_seconds, new_seconds, old, new = alternating(
            before, mixing.network_outputs, (draws, architecture, inputs), args.rounds
        )
        if not (old[1] == new[1]).all():
            raise SystemExit(f"depth {depth}: the inactive units differ from {args.baseline}'s")
        error = float(np.abs(old[0] - new[0]).max() / np.abs(old[0]).max())
        row = {
            "depth": depth, "parameters": dimension, "draws": 4 * args.draws,
            "before_s": old_seconds, "after_s": new_seconds, "speedup": old_seconds / new_seconds,
            "logit_relative_error": error,
        }  # fmt: skip
        rows.append(row)
        print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    ess = ess_row(args.ess_draws, args.ess_coordinates, args.rounds)
    print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in ess.items()}, flush=True)
    quantiles = quantile_row((4 * args.ess_draws, args.ess_coordinates), args.rounds)
    print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in quantiles.items()})
    if args.out:
        result = {
            "baseline": args.baseline, "rounds": args.rounds, "rows": rows, "ess": ess,
            "normal_scores": quantiles,
        }  # fmt: skip
        write_atomic(Path(args.out), (json.dumps(result, indent=1) + "\n").encode())


if __name__ == "__main__":
    sys.exit(main())
