"""One unit of the depth experiment: (activation, depth, repeat) -> gap measures.

Protocol (Farquhar et al. 2020, section 4 and appendix B): two moons (noise 0.1), the widest
network of this depth under the parameter budget, MFVI pre-training, reference chains from the
pre-trained means with jittered starts (NumPyro NUTS by default, or BlackJAX's MAMS or MCLMC:
``vbnn.references.samplers``; the potential is generated from the same ``MLPArchitecture`` as the
torch network), the full-covariance Gaussian of the
pooled samples (empirical covariance + jitter), the closest diagonal Gaussian (eq. 6) and
KL(q_diag || q_full), the 2-Wasserstein distance between the two Gaussians, and the blog's
(Farquhar et al. 2020 blog) W2 of the samples themselves to each Gaussian
(``vbnn.references.wasserstein``: exact transport on ``wasserstein_subsample`` thinned draws).
Whether the chains are trusted (``ConvergenceCriterion``) is decided
when the units are aggregated, from the stored diagnostics.

Every finished unit is written atomically to ``<out>/units/<key>.json`` and its samples to
``<out>/samples/<key>.npz``, so a killed run loses nothing finished and a re-run skips (and
re-plots from) what is there; a unit in flight keeps its finished MAMS or MCLMC chains, and a
checkpoint of the chain that is running, in ``<out>/chains/<key>/`` until it is stored
(``vbnn.references.chain_runner``), so a rerun goes on where the killed one stopped. The
pre-training the chains start from is kept there too (:func:`pretrain`), so chains sampled on
another machine go on here. Where each chain ended stays in ``<out>/chain-ends/``
(:func:`chain_ends`), so the same unit asked for more draws (``--samples``) goes on from its
chains' ends instead of tuning and sampling them again.
:func:`compute_unit` stores no unit, so a Ray worker runs it and the driver stores its
:class:`UnitOutcome` (:func:`store_unit`); :func:`run_unit` does both here. Processes that share
a unit's chains (the same command started twice) make its record once: the first to have every
chain claims the record (``RECORD_CLAIM``, in the chain store) and the others wait for it.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jax
import numpy as np
import numpyro
import torch

from vbnn.core.contracts import Activation
from vbnn.references import chain_runner
from vbnn.references.architecture import MLPArchitecture
from vbnn.references.chain_checkpoints import STARTS
from vbnn.references.chain_runner import ChainStoreRemoved
from vbnn.references.gaussian_gap import (
    diagonal_gap,
    empirical_covariance,
    kl_above_floor_limit,
)
from vbnn.references.jax_nuts import ChainsConfig, ChainsResult, jittered_starts
from vbnn.references.jax_potential import default_chunk, jax_potential
from vbnn.references.samplers import Sampler, run_sampler
from vbnn.references.wasserstein import wasserstein_gaps
from vbnn.stores import unit_store
from vbnn_lab.depth.models import (
    PretrainConfig,
    accuracy,
    depth_widths,
    parameter_count,
    point_network,
    train_mean_field,
)

_log = logging.getLogger(__name__)

# the claim, in a unit's chain store, of the process that makes the unit's record
RECORD_CLAIM = {"unit": "record"}

# a record's chain diagnostics carry this prefix whatever the sampler (``sampler_rhat_max``,
# ``sampler_divergences``...); the record's ``sampler`` says which one made them
DIAGNOSTICS_PREFIX = "sampler_"


def sampler_diagnostics(record: dict[str, Any]) -> dict[str, Any]:
    """A unit record's chain diagnostics, without their prefix (what
    :meth:`~vbnn.references.chain_diagnostics.ConvergenceCriterion.passes` reads)."""
    return {
        name.removeprefix(DIAGNOSTICS_PREFIX): value
        for name, value in record.items()
        if name.startswith(DIAGNOSTICS_PREFIX)
    }


class RecordClaimed(RuntimeError):
    """Another live process has every chain of the unit and makes its record."""


@dataclass(frozen=True)
class UnitSettings:
    """Everything that determines one unit's numbers. A unit is stored under the key of this
    dataclass (``unit_store.settings_key``: the fields that differ from their defaults), so a
    new field with a default keeps every stored unit's key."""

    activation: Activation
    depth: int
    repeat: int
    negative_slope: float = 0.01
    points: int = 10_000
    noise: float = 0.1
    budget: int = 1000
    prior_precision: float = 1.0
    jitter: float = 1e-4
    wasserstein_subsample: int = 1000
    seed: int = 0
    dtype: str = "float32"
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    chains: ChainsConfig = field(default_factory=ChainsConfig)
    sampler: Sampler = Sampler.NUTS

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampler", Sampler(self.sampler))

    def architecture(self) -> MLPArchitecture:
        sizes = depth_widths(self.depth, self.budget)
        leaky = Activation(self.activation) is Activation.LEAKY_RELU
        slope = self.negative_slope if leaky else 0.01
        return MLPArchitecture(tuple(sizes), self.activation, slope, self.prior_precision**-0.5)

    def label(self) -> str:
        """The activation with its slope for LeakyReLU, e.g. ``leaky_relu(0.2)``."""
        activation = Activation(self.activation)
        if activation is Activation.LEAKY_RELU:
            return f"{activation.value}({self.negative_slope:g})"
        return activation.value

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored beside the unit (every field)."""
        out = dataclasses.asdict(self)
        out["activation"] = Activation(self.activation).value
        out["chains"] = self.chains.to_dict()
        out["sampler"] = self.sampler.value
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> UnitSettings:
        """Inverse of :meth:`to_dict`: the settings a stored unit's record holds."""
        values = dict(values)
        values["pretrain"] = PretrainConfig(**values["pretrain"])
        values["chains"] = ChainsConfig(**values["chains"])
        return cls(**{**values, "activation": Activation(values["activation"])})


def two_moons(points: int, noise: float, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """scikit-learn's make_moons: inputs (N, 2) and labels (N,) as tensors."""
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=points, noise=noise, random_state=seed)
    return torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)


@dataclass(frozen=True)
class UnitOutcome:
    """What :func:`compute_unit` returns: the unit's record and, when it sampled, its samples."""

    record: dict[str, Any]
    samples: dict[str, Any] | None  # None: the samples came from the store
    diagnostics: dict[str, Any]


def load_samples(settings: UnitSettings, out: Path) -> tuple[Any, dict[str, Any]] | None:
    """(samples, diagnostics) of a unit whose chains are stored, else None."""
    cached = unit_store.load(out / "samples", settings)
    return None if cached is None else (cached[0]["samples"], cached[1])


@dataclass(frozen=True)
class Pretrained:
    """A unit's data and its MFVI pre-training: the chains start from ``network``'s weights,
    ``weights`` flattened (D,) in the order of its ``parameters()``."""

    x: torch.Tensor
    y: torch.Tensor
    network: torch.nn.Module
    weights: np.ndarray
    train_seconds: float


def pretrain(
    settings: UnitSettings, chain_store: Path | None = None, chain_ends: Path | None = None
) -> Pretrained:
    """The unit's two-moons data and the MFVI pre-training its chains start from. Given the
    unit's ``chain_store`` (and the run's ``chain_ends``), the pre-training is kept in their
    ``STARTS`` folders the first time and read from there after: another machine (another
    torch or CPU) rounds the pre-training's epochs differently, and a chain's store key (and
    its end's) holds a digest of its start, so chains brought over (``--chains-from``) go on
    here, and chain ends there, only from the same weights."""
    dtype = getattr(torch, settings.dtype)
    x, y = two_moons(settings.points, settings.noise, unit_seed(settings), dtype)
    architecture = settings.architecture()
    # keyed by what the pre-training depends on, so the same unit with other chains (more
    # draws) is given the same starts
    key = {k: v for k, v in settings.to_dict().items() if k not in ("chains", "sampler")}
    places = [folder / STARTS for folder in (chain_store, chain_ends) if folder is not None]
    stored = next(filter(None, (unit_store.load(place, key) for place in places)), None)
    if stored is None:
        began = time.perf_counter()
        mean_field = train_mean_field(architecture, x, y, settings.pretrain, unit_seed(settings))
        train_seconds = time.perf_counter() - began
        network = point_network(mean_field, architecture)
        weights = torch.nn.utils.parameters_to_vector(network.parameters()).detach().numpy()
        stored = {"weights": weights}, {"train_seconds": train_seconds, "torch": torch.__version__}
    else:
        network = architecture.torch_network(dtype)
        vector = torch.from_numpy(stored[0]["weights"]).to(dtype)
        torch.nn.utils.vector_to_parameters(vector, network.parameters())
        weights = vector.numpy().copy()  # the network holds views of vector
    for place in places:
        if unit_store.load_info(place, key) is None:
            unit_store.save(place, key, *stored)
    return Pretrained(x, y, network, weights, stored[1]["train_seconds"])


def unit_seed(settings: UnitSettings) -> int:
    """The seed of a unit's data, pre-training, chains and estimators."""
    return settings.seed * 1000 + settings.repeat


def sample_unit(
    settings: UnitSettings,
    pretrained: Pretrained,
    chain_store: Path | None = None,
    chain_ends: Path | None = None,
) -> ChainsResult:
    """The unit's reference chains from jittered copies of the pre-trained weights; given a
    ``chain_store`` directory, MAMS and MCLMC keep their finished chains and the chain in flight
    there (:func:`chain_store`), and given ``chain_ends`` where each chain ended
    (:func:`chain_ends`)."""
    chains = dataclasses.replace(settings.chains, seed=unit_seed(settings))
    x, y = pretrained.x.numpy(), pretrained.y.numpy()
    potential = jax_potential(settings.architecture(), x, y, chunk=default_chunk())
    starts = jittered_starts(pretrained.weights, chains)
    return run_sampler(settings.sampler, potential, starts, chains, chain_store, chain_ends)


def compute_unit(
    settings: UnitSettings,
    cached: tuple[Any, dict[str, Any]] | None,
    chain_store: Path | None = None,
    claim_record: bool = False,
    chain_ends: Path | None = None,
) -> UnitOutcome:
    """One unit's numbers (a worker's part; sampling skipped when ``cached``). It stores nothing
    but, given a ``chain_store`` (and ``chain_ends``) directory, the chains of
    :func:`sample_unit` and the pre-training they start from (:func:`pretrain`, read from there
    when kept, also for ``cached`` samples, so the record's MFVI test accuracy is the starts').
    With ``claim_record``, once it has the samples it claims the record there
    (``RECORD_CLAIM``; the claim goes with the store, or is released if this fails) and raises
    :class:`RecordClaimed` if a live process holds it already.

    The chains' diagnostics go into the record with :data:`DIAGNOSTICS_PREFIX`."""
    pretrained, arrays = None, None
    if cached is None:
        pretrained = pretrain(settings, chain_store, chain_ends)
        result = sample_unit(settings, pretrained, chain_store, chain_ends)
        samples, diagnostics = result.samples, result.diagnostics
        arrays = {
            "samples": samples.astype(np.float32),
            "log_density": result.log_density,
            "steps": result.leapfrog_steps,
            # where the integrator failed: a divergent transition started from the draw before
            "diverging": result.diverging,
        }
    else:
        samples, diagnostics = cached
    claiming = claim_record and chain_store is not None
    if claiming and not unit_store.claim(chain_store, RECORD_CLAIM):
        raise RecordClaimed(f"{chain_store}: another process makes this unit's record")
    try:
        # the record's test accuracy is the chains' start's: read from the stores where kept
        pretrained = pretrained or pretrain(settings, chain_store, chain_ends)
        return _outcome(settings, pretrained, samples, diagnostics, arrays)
    except BaseException:
        if claiming:
            unit_store.release(chain_store, RECORD_CLAIM)
        raise


def _outcome(
    settings: UnitSettings,
    pretrained: Pretrained,
    samples: np.ndarray,
    diagnostics: dict[str, Any],
    arrays: dict[str, Any] | None,
) -> UnitOutcome:
    """The unit's record from its pooled chains (the costly part: gaps, floors, transport)."""
    seed = unit_seed(settings)
    test_x, test_y = two_moons(1000, settings.noise, seed + 500_000, getattr(torch, settings.dtype))
    architecture = settings.architecture()
    pooled = samples.reshape(-1, samples.shape[-1])
    mean, covariance = empirical_covariance(pooled, settings.jitter)
    record = {
        "activation": settings.label(),
        "depth": settings.depth,
        "repeat": settings.repeat,
        "points": settings.points,
        "sampler": settings.sampler.value,
        "width": architecture.sizes[1],
        "parameters": parameter_count(list(architecture.sizes)),
        "mean_field_test_accuracy": accuracy(pretrained.network, test_x, test_y),
        "train_seconds": pretrained.train_seconds,
        "software": software_versions(settings.sampler),
        **{DIAGNOSTICS_PREFIX + name: value for name, value in diagnostics.items()},
        **diagonal_gap(covariance),
        **chain_floor(samples, settings.jitter, seed),
        **wasserstein_gaps(
            pooled, mean, covariance, min(settings.wasserstein_subsample, len(pooled)), seed
        ),
        "settings": settings.to_dict(),
    }
    return UnitOutcome(record, arrays, diagnostics)


def chain_floor(samples: np.ndarray, jitter: float, seed: int) -> dict[str, float]:
    """What the gap estimator reports for these chains beyond their posterior's gap:

    * ``draws``: the pooled draw count of the estimate;
    * ``kl_floor_chains``: KL(q_diag || q_full) after every parameter's chains are decoupled
      from the others (``kl_closest_diagonal_chain_null``: marginals and autocorrelation kept);
    * ``kl_above_floor_limit``: the KL above that floor extrapolated to infinitely many draws
      from the chains' halves (``kl_above_floor_limit``), with ``kl_above_floor_limit_drift``
      (how far it moves when made from the halves and quarters instead) and the KL above the
      floor on the halves and quarters (``kl_above_floor_halves``, ``..._quarters``).
    """
    limit = kl_above_floor_limit(samples, jitter, seed)
    del limit["kl_above_floor"]  # the report's: the unit's KL less this floor
    return {"draws": int(samples.shape[0] * samples.shape[1]), **limit}


def software_versions(sampler: Sampler = Sampler.NUTS) -> str:
    """The libraries that made a unit's numbers: a chain is reproducible only under them."""
    versions = f"jax {jax.__version__}, numpyro {numpyro.__version__}, torch {torch.__version__}"
    if Sampler(sampler) is Sampler.NUTS:
        return versions
    return f"{versions}, blackjax {version('blackjax')}"


def chain_store(settings: UnitSettings, out: Path) -> Path:
    """Where a unit in flight keeps its finished chains: ``<out>/chains/<unit key>``."""
    return out / "chains" / unit_store.settings_key(settings)


def chain_ends(out: Path) -> Path:
    """Where every MAMS or MCLMC chain of a run's units ended: ``<out>/chain-ends``, kept after
    the unit is stored (each chain's state, tuned parameters and draws)."""
    return out / "chain-ends"


def store_unit(settings: UnitSettings, out: Path, outcome: UnitOutcome) -> dict[str, Any]:
    """Store a computed unit (its new samples first, the record last) and drop its chains in
    flight (now in its samples); returns the record."""
    if outcome.samples is not None:
        unit_store.save(out / "samples", settings, outcome.samples, outcome.diagnostics)
    unit_store.save(out / "units", settings, None, outcome.record)
    shutil.rmtree(chain_store(settings, out), ignore_errors=True)
    return outcome.record


def stored_record(settings: UnitSettings, out: Path) -> dict[str, Any] | None:
    """The record of a finished unit, or None."""
    return unit_store.load_info(out / "units", settings)


def run_unit(settings: UnitSettings, out: Path) -> dict[str, Any]:
    """Run (or load) one unit here; returns its flat record of settings, diagnostics and gaps."""
    record = stored_record(settings, out)
    if record is not None and "kl_above_floor_limit_drift" not in record:
        # a unit finished before its record carried the estimator's floor and limit: add them
        # from the stored chains, if they are here
        cached = load_samples(settings, out)
        if cached is not None:
            seed = unit_seed(settings)
            record = {**record, **chain_floor(cached[0], settings.jitter, seed)}
            unit_store.save(out / "units", settings, None, record)
    if record is not None:
        return record
    store, ends = chain_store(settings, out), chain_ends(out)
    while True:
        try:
            outcome = compute_unit(
                settings, load_samples(settings, out), store, claim_record=True, chain_ends=ends
            )
        except ChainStoreRemoved:  # another process ran the same unit's chains and stored it
            record = stored_record(settings, out)
            if record is None:
                raise
            return record
        except RecordClaimed:
            _log.info("%s: another process makes its record; waiting for it", store.name)
            while unit_store.claimed(store, RECORD_CLAIM):
                time.sleep(chain_runner.CLAIM_POLL_SECONDS)
            record = stored_record(settings, out)
            if record is not None:
                return record
            continue  # that process ended without storing it: make it here
        return store_unit(settings, out, outcome)
