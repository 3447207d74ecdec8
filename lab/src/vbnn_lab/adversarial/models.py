"""The five predictors of the attack experiment (Neklyudov et al. 2019 section 6.3) on LeNet-5,
trained as stacks.

Three training runs give all five (``classification.training.train_classifier``, the ELBO with
the log-uniform prior; the deterministic and dropout layers have no KL, so they are trained by
maximum likelihood):

* a stack of 5 deterministic LeNet-5s: the deep ensemble (Lakshminarayanan et al. 2017), and its
  member 0 alone is the deterministic network;
* one dropout LeNet-5 (binary dropout 0.5 on the inputs of dense1 and dense2, as the Table 2
  baseline of ``reproductions/variance-networks``), predicting with 10 dropout masks;
* a stack of 5 LeNet-5s whose dense1 is layer-wise variational dropout (``vd-layer``, Neklyudov et
al. 2019 eq. 14,
  the layer that becomes a variance layer in Neklyudov et al. 2019 Table 2): the ensemble of
  variance networks, and its member 0 alone (10 weight samples) is the variance network.

Members of a stack differ by their initialisation and training noise (``ModelGenerators`` keys
0..4) and see the same minibatches. A short run cannot reach the papers' variance state (log alpha
6.9 after ~200 epochs): log alpha gets its own Adam step (``ClassifierConfig.
log_alpha_learning_rate``, a stated deviation) and the run records the log alpha reached and the
zero-mean-approximation accuracy that shows how far the information moved into the variances.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

import torch
from torch import nn

from vbnn.classification.inference import PREDICTIONS
from vbnn.classification.training import ClassifierConfig, accuracies, train_classifier
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.lenet import LAYER_NAMES, LeNet5, LeNetConfig
from vbnn.networks.summary import mean_log_alpha
from vbnn.priors.log_uniform import LogUniformPrior
from vbnn.stores import unit_store
from vbnn_lab import PAPERS_ESTIMATOR
from vbnn_lab.adversarial.attack import Prediction

ENSEMBLE_SIZE = 5


class Training(str, Enum):
    """The three training runs."""

    DETERMINISTIC = "deterministic"
    DROPOUT = "dropout"
    VARIANCE = "variance"


FAMILIES: dict[Training, tuple[str, str, str, str]] = {
    Training.DETERMINISTIC: ("point",) * 4,
    Training.DROPOUT: ("point", "point", "dropout", "dropout"),
    Training.VARIANCE: ("point", "point", "vd-layer", "point"),
}
MEMBERS = {
    Training.DETERMINISTIC: ENSEMBLE_SIZE,
    Training.DROPOUT: 1,
    Training.VARIANCE: ENSEMBLE_SIZE,
}


class Predictor(str, Enum):
    """The five predictors of Neklyudov et al. 2019 Fig. 7."""

    DETERMINISTIC = "deterministic"
    DROPOUT = "dropout"
    DEEP_ENSEMBLE = "deep ensemble"
    VARIANCE = "variance"
    VARIANCE_ENSEMBLE = "variance ensemble"


@dataclass(frozen=True)
class PredictorSpec:
    """Which training run, how many of its members, and how it predicts (forward mode, K)."""

    training: Training
    members: int
    prediction: Prediction


def predictor_specs(samples: int) -> dict[Predictor, PredictorSpec]:
    """Each predictor; ``samples`` is K of the stochastic ones (10 in Neklyudov et al. 2019)."""
    means = Prediction(ForwardMode.MEAN)
    # one weight (mask) draw per model and pass, shared by the examples
    draws = Prediction(ForwardMode.WEIGHTS, samples)
    return {
        Predictor.DETERMINISTIC: PredictorSpec(Training.DETERMINISTIC, 1, means),
        Predictor.DROPOUT: PredictorSpec(Training.DROPOUT, 1, draws),
        Predictor.DEEP_ENSEMBLE: PredictorSpec(Training.DETERMINISTIC, ENSEMBLE_SIZE, means),
        Predictor.VARIANCE: PredictorSpec(Training.VARIANCE, 1, draws),
        Predictor.VARIANCE_ENSEMBLE: PredictorSpec(Training.VARIANCE, ENSEMBLE_SIZE, draws),
    }


@dataclass(frozen=True)
class TrainingBudget:
    """Images, epochs and optimiser of the three runs (stored with every trained stack)."""

    train_size: int = 60000
    epochs: int = 3
    learning_rate: float = 1e-3
    log_alpha_learning_rate: float = 0.1
    batch_size: int = 100


@dataclass(frozen=True)
class StackRun:
    """One training run on one data set with its seed: with the ``TrainingBudget``, what its
    stored stack is keyed by."""

    training: Training
    dataset: str
    seed: int


def build(training: Training, members: int, seed: int) -> LeNet5:
    """An untrained stack of ``members`` LeNet-5s of ``training``'s families (ReLU)."""
    generators = ModelGenerators.for_keys(seed, range(members), "init")
    return LeNet5(LeNetConfig(families=FAMILIES[training]), generators,
                  training_mode=PAPERS_ESTIMATOR)  # fmt: skip


def member(stack: LeNet5, index: int) -> LeNet5:
    """Model ``index`` of a stack as a stack of one (same weights, its own noise streams)."""
    single = LeNet5(stack.config, ModelGenerators([index]), training_mode=PAPERS_ESTIMATOR)
    state = {name: value[index : index + 1] for name, value in stack.state_dict().items()}
    single.load_state_dict(state)
    return single


def train_stack(
    run: StackRun,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    budget: TrainingBudget,
    store: Path,
    *,
    progress: bool = False,
) -> tuple[LeNet5, dict]:
    """Train (or load from ``store``, ``stores.unit_store``) one run on ``data`` (train images,
    train labels, test images, test labels); returns (stack, info).

    ``info``: training seconds, test accuracy of member 0 in each inference mode (K = 10), the mean
    log alpha of dense1 of member 0 (variance run).
    """
    training, dataset, seed = run.training, run.dataset, run.seed
    train_x, train_y, test_x, test_y = data
    members = MEMBERS[training]
    settings = {"dataset": dataset, "training": training.value, "members": members,
                "seed": seed, **asdict(budget)}  # fmt: skip
    model = build(training, members, seed)
    stored = unit_store.load(store, settings)
    if stored is not None:
        arrays, info = stored
        model.load_state_dict({name: torch.from_numpy(value) for name, value in arrays.items()})
        model.eval()
        return model, info
    config = ClassifierConfig(
        epochs=budget.epochs,
        batch_size=budget.batch_size,
        learning_rate=budget.learning_rate,
        seed=seed,
        log_alpha_learning_rate=(
            budget.log_alpha_learning_rate if training is Training.VARIANCE else None
        ),
    )
    started = time.perf_counter()
    x, y = train_x[: budget.train_size], train_y[: budget.train_size]
    train_classifier(model, LogUniformPrior(), x, y, config, progress=progress,
                     description=f"{dataset} {training.value}")  # fmt: skip
    seconds = time.perf_counter() - started
    model.eval()
    info = {
        "train_seconds": seconds,
        "test_accuracy_member0": accuracies(member(model, 0), test_x, test_y, 10, seed),
        "log_alpha_dense1": mean_log_alpha(model, LAYER_NAMES).get("dense1"),
        "inference_modes": list(PREDICTIONS),
    }
    arrays = {name: value.detach().numpy() for name, value in model.state_dict().items()}
    unit_store.save(store, settings, arrays, info)
    return model, info


def as_predictor_model(stacks: dict[Training, nn.Module], spec: PredictorSpec) -> nn.Module:
    """The module a predictor uses: the whole stack, or its member 0."""
    stack = stacks[spec.training]
    return stack if spec.members == MEMBERS[spec.training] else member(stack, 0)
