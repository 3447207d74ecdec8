"""The settings of a comparison and the families it can compare on each task.

Regression runs on the UCI engine (``vbnn.regression.engine.run_splits``): the Table 1 methods
``es``, ``map``, ``mf``, ``gd``, ``fc``, ``sgld`` and, fitted by VI, any other
``vbnn.FAMILIES`` name with a closed-form KL. Classification trains stacks of MLP classifiers
(``comparison.classification``: the tanh MLP and minibatch ELBO of ``vbnn.BayesianClassifier``)
of any ``vbnn.FAMILIES`` name (``point`` is the maximum-likelihood baseline); it has no MAP prior
term, no early stopping and no Langevin sampler, so ``es``, ``map`` and ``sgld`` are regression
only. Every other method of ``vbnn.methods`` (``ivon``, ``ensemble``, ``laplace``, ``swag``,
``NAME+ts``, ...) trains the same MLP one fold at a time (``comparison.table_network``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vbnn.comparison.folds import Task
from vbnn.core.defaults import (
    BATCH_SIZE,
    EPOCHS,
    LEARNING_RATE,
    PATIENCE,
    TABLE_EPOCHS,
    TABLE_LEARNING_RATE,
    VALIDATION_FRACTION,
)
from vbnn.layers.registry import FAMILIES
from vbnn.methods.registry import METHODS, base_method
from vbnn.methods.temperature import SUFFIX
from vbnn.networks.adapter import LoRA
from vbnn.training.natural_gradient import IVON

REGRESSION_ONLY = ("es", "map", "sgld")
DEFAULT_FAMILIES = {
    Task.REGRESSION: ("mf", "gd", "fc", "es", "map"),
    Task.CLASSIFICATION: ("mf", "gd", "fc", "point"),
}


@dataclass(frozen=True)
class CompareConfig:
    """How the families are trained, tuned and scored.

    Attributes:
        hidden: hidden widths of every network.
        iterations: regression: full-batch steps (None: the engine's, 5000; ES 2000).
        epochs: classification: passes over the training rows.
        batch_size: classification: rows per step.
        learning_rate: classification: Adam step size when not tuned.
        test_samples: K, predictive samples in every test metric.
        tune: search each family's hyper-parameters on validation rows carved from each
            training fold (Optuna TPE); False uses the presets (``regression.presets``; the
            classifier's defaults).
        trials: candidates per (family, fold) search.
        batch: regression: candidates trained side by side in one stack.
        validation_fraction: share of each training fold held out as the search objective.
        level: probability of the central predictive interval whose coverage is reported.
        seed: seeds the folds, the searches, the initialisation and the noise.
    """

    hidden: tuple[int, ...] = (50,)
    iterations: int | None = None
    epochs: int = TABLE_EPOCHS
    batch_size: int = BATCH_SIZE
    learning_rate: float = TABLE_LEARNING_RATE
    test_samples: int = 100
    tune: bool = True
    trials: int = 20
    batch: int = 10
    validation_fraction: float = 0.2
    level: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        checks = {
            "hidden": all(h >= 1 for h in self.hidden),
            "iterations": self.iterations is None or self.iterations >= 1,
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "learning_rate": self.learning_rate > 0,
            "test_samples": self.test_samples >= 1,
            "trials": self.trials >= 1,
            "batch": self.batch >= 1,
            "validation_fraction": 0 < self.validation_fraction < 1,
            "level": 0 < self.level < 1,
            "seed": self.seed >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"CompareConfig: invalid {name}={getattr(self, name)!r}")


def runs_on_stacks(name: str, task: Task) -> bool:
    """Whether the batched stacks of folds train ``name`` on a table: on a regression the UCI
    engine's methods (``es``, ``map``, ``sgld`` and the families with a closed-form KL to its
    Gaussian prior), on a classification the families; every other method trains an MLP a fold
    (``comparison.table_network``)."""
    if task is Task.REGRESSION:
        return name in REGRESSION_ONLY or (name in FAMILIES and FAMILIES[name].closed_form_kl)
    return name in FAMILIES


def check_families(families: tuple[str, ...], task: Task) -> tuple[str, ...]:
    """The entries as given, checked against the task.

    Raises:
        ValueError: an unknown name (the known ones are listed), a name given twice, or one that
            cannot run on ``task`` (``es``, ``map``, ``sgld`` on a classification; ``NAME+ts``
            on a regression).
    """
    if not families:
        raise ValueError("families: none given")
    known = list(METHODS)
    for position, name in enumerate(families):
        if name.endswith(SUFFIX) and task is Task.REGRESSION:
            raise ValueError(
                f"families[{position}]={name!r}: temperature scaling calibrates a "
                "classifier's probabilities; this is a regression"
            )
        try:
            base_method(name)
        except ValueError:
            raise ValueError(
                f"families[{position}]={name!r}: unknown; choose from {known} (or "
                "NAME+ts on a classification)"
            ) from None
        if name in families[:position]:
            raise ValueError(f"families[{position}]={name!r}: given twice")
        if base_method(name).pretrained:
            raise ValueError(
                f"families[{position}]={name!r} adapts a pretrained network, which "
                "a table has none of; compare it on your network: "
                "vbnn.compare(network, (x, y), ...)"
            )
        if task is Task.CLASSIFICATION and name in REGRESSION_ONLY:
            raise ValueError(
                f"families[{position}]={name!r} runs on regression only (the classifier has no "
                f"MAP prior term, early stopping or Langevin sampler); for classification choose "
                f"from {[n for n in known if n not in REGRESSION_ONLY]} ('point' is the "
                "maximum-likelihood baseline)"
            )
    return tuple(families)


@dataclass(frozen=True)
class NetworkConfig:
    """How the entries of a comparison on the user's own network are trained and scored.

    Attributes:
        epochs: passes over the training examples (``vbnn.train``).
        batch_size: examples per step (None: full batch); also the examples per test pass.
        learning_rate: Adam step size.
        test_samples: K, predictive samples of a family and of MC dropout.
        ensemble_size: M, the members of ``ensemble`` and ``ivon-ensemble``.
        patience: early stopping of ``point``, the ensemble's members and ``laplace``: epochs
            without a lower validation NLL before the run ends (the weights of the best epoch
            kept); None trains them on every example for every epoch.
        validation_fraction: the share of the training examples held out for early stopping.
        standardize: a regressor's targets standardised for training (metrics in their units).
        device: where the networks train ("cuda", "cpu"; None: where the network is).
        level: probability of the central predictive interval whose coverage is reported
            (regression).
        seed: seeds every initial network, minibatch order, training noise and predictive
            sample (per replicate and member, ``core.randomness.derive_seed``).
        ivon: the settings of ``ivon`` and ``ivon-ensemble`` (``vbnn.IVON``, at its defaults
            from ``vbnn.core.defaults``); ``learning_rate`` above stays Adam's, which IVON's
            ``point_learning_rate`` None gives the parameters outside the Gaussian layers.
        adapter: the ``vbnn.LoRA`` of the adapter entries (``lora``, ``lora-ensemble``,
            ``mf-lora``, ``ivon-lora``, ``laplace-lora``: its rank, alpha, targets, trainable
            head); None: ``vbnn.LoRA()``, every dense layer adapted at rank 8.
    """

    epochs: int = EPOCHS
    batch_size: int | None = BATCH_SIZE
    learning_rate: float = LEARNING_RATE
    test_samples: int = 20
    ensemble_size: int = 5
    patience: int | None = PATIENCE
    validation_fraction: float = VALIDATION_FRACTION
    standardize: bool = True
    device: str | None = None
    level: float = 0.95
    seed: int = 0
    ivon: IVON = field(default_factory=IVON)
    adapter: LoRA | None = None

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size is None or self.batch_size >= 1,
            "learning_rate": self.learning_rate > 0,
            "test_samples": self.test_samples >= 1,
            "ensemble_size": self.ensemble_size >= 1,
            "patience": self.patience is None or self.patience >= 1,
            "validation_fraction": 0 < self.validation_fraction < 1,
            "level": 0 < self.level < 1,
            "seed": self.seed >= 0,
            "ivon": isinstance(self.ivon, IVON),
            "adapter": self.adapter is None or isinstance(self.adapter, LoRA),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"NetworkConfig: invalid {name}={getattr(self, name)!r}")
