"""One unit of the depth experiment: (activation, depth, repeat) -> gap measures.

Protocol (004_6556d25c53efeeec.txt, section 4 and appendix B): two moons (noise 0.1), the widest
network of this depth under the parameter budget, MFVI pre-training, NUTS from the pre-trained
means, the full-covariance Gaussian of the samples (empirical covariance + jitter), the closest
diagonal Gaussian (eq. 6) and KL(q_diag || q_full), plus the 2-Wasserstein distance between the
two Gaussians (blog, 001_193bc50ee0b0b31a.txt).

Every finished unit is written atomically to ``<out>/units/<key>.json`` and its samples to
``<out>/samples/<key>.npz``, so a killed run loses nothing finished and a re-run skips (and
re-plots from) what is there.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vbnn.core.contracts import Activation
from vbnn.experiments.depth.models import (
    PretrainConfig,
    accuracy,
    bernoulli_potential,
    depth_widths,
    parameter_count,
    point_network,
    train_mean_field,
)
from vbnn.references.gaussian_gap import diagonal_gap, empirical_covariance
from vbnn.references.nuts import NUTSConfig, run_nuts
from vbnn.stores import unit_store


@dataclass(frozen=True)
class UnitSettings:
    """Everything that determines one unit's numbers (hashed into its cache key)."""

    activation: Activation
    depth: int
    repeat: int
    points: int = 10_000
    noise: float = 0.1
    budget: int = 1000
    prior_precision: float = 1.0
    jitter: float = 1e-4
    seed: int = 0
    dtype: str = "float32"
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    nuts: NUTSConfig = field(default_factory=NUTSConfig)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["activation"] = Activation(self.activation).value
        out["nuts"] = self.nuts.to_dict()
        return out


def two_moons(points: int, noise: float, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """scikit-learn's make_moons: inputs (N, 2) and labels (N,) as tensors."""
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=points, noise=noise, random_state=seed)
    return torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)


@dataclass(frozen=True)
class UnitOutcome:
    """What :func:`compute_unit` returns: the unit's record and, when it ran NUTS, its samples."""

    record: dict[str, Any]
    samples: dict[str, Any] | None  # None: NUTS samples came from the store
    diagnostics: dict[str, Any]


def load_samples(settings: UnitSettings, out: Path) -> tuple[Any, dict[str, Any]] | None:
    """(samples, diagnostics) of a unit whose NUTS chain is stored, else None."""
    cached = unit_store.load(out / "samples", settings.to_dict())
    return None if cached is None else (cached[0]["samples"], cached[1])


def compute_unit(
    settings: UnitSettings, cached: tuple[Any, dict[str, Any]] | None, progress: bool = False
) -> UnitOutcome:
    """One unit's numbers, storing nothing (a worker's part; NUTS skipped when ``cached``)."""
    dtype = getattr(torch, settings.dtype)
    seed = settings.seed * 1000 + settings.repeat
    x, y = two_moons(settings.points, settings.noise, seed, dtype)
    test_x, test_y = two_moons(1000, settings.noise, seed + 500_000, dtype)
    sizes = depth_widths(settings.depth, settings.budget)
    began = time.perf_counter()
    mean_field = train_mean_field(sizes, settings.activation, x, y, settings.pretrain, seed)
    train_seconds = time.perf_counter() - began
    network = point_network(mean_field, sizes, settings.activation)
    potential, layout = bernoulli_potential(network, x, y, settings.prior_precision)
    nuts = dataclasses.replace(settings.nuts, seed=seed)
    arrays = None
    if cached is None:
        result = run_nuts(potential, layout.flatten(network), nuts, progress)
        samples, diagnostics = result.samples, result.diagnostics
        arrays = {"samples": samples, "log_density": result.log_density,
                  "steps": result.leapfrog_steps}  # fmt: skip
    else:
        samples, diagnostics = cached
    _, covariance = empirical_covariance(samples, settings.jitter)
    record = {
        "activation": Activation(settings.activation).value,
        "depth": settings.depth,
        "repeat": settings.repeat,
        "width": sizes[1],
        "parameters": parameter_count(sizes),
        "mean_field_test_accuracy": accuracy(network, test_x, test_y),
        "train_seconds": train_seconds,
        **{f"nuts_{name}": value for name, value in diagnostics.items()},
        **diagonal_gap(covariance),
        "settings": settings.to_dict(),
    }
    return UnitOutcome(record, arrays, diagnostics)


def store_unit(settings: UnitSettings, out: Path, outcome: UnitOutcome) -> dict[str, Any]:
    """Store a computed unit (its new NUTS samples first, the record last); returns the record."""
    if outcome.samples is not None:
        unit_store.save(out / "samples", settings.to_dict(), outcome.samples, outcome.diagnostics)
    unit_store.save(out / "units", settings.to_dict(), None, outcome.record)
    return outcome.record


def stored_record(settings: UnitSettings, out: Path) -> dict[str, Any] | None:
    """The record of a finished unit, or None."""
    stored = unit_store.load(out / "units", settings.to_dict())
    return None if stored is None else stored[1]


def run_unit(settings: UnitSettings, out: Path, progress: bool = False) -> dict[str, Any]:
    """Run (or load) one unit; returns its flat record of settings, diagnostics and gaps."""
    record = stored_record(settings, out)
    if record is not None:
        return record
    outcome = compute_unit(settings, load_samples(settings, out), progress)
    return store_unit(settings, out, outcome)
