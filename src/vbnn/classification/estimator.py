"""``BayesianClassifier``: a scikit-learn classifier around a Bayesian MLP of any family.

``fit(X, y)`` standardises X (the scaler is kept), encodes the labels (any values; ``classes_``
keeps them in sorted order), and trains one network of any family on the minibatch ELBO
(``classification.training.train_classifier``: Adam, one noise draw per step). Predictions
average the class probabilities over K weight samples,

    p(y = c | x) = (1/K) sum_k softmax(f_k(x))_c,

the K weight draws coming from a stream keyed by ``seed`` alone and each shared by every row, so
a row's probabilities do not depend on the other rows of X. Inputs are checked by scikit-learn's
own validation (``regression.estimator_input``), and the estimator passes
``sklearn.utils.estimator_checks``.
``predict_uncertainty`` splits the predictive entropy into its aleatoric part (the expected
entropy) and its epistemic part (the mutual information between the label and the weights), and
``score(X, y)`` is the mean test log-likelihood (1/N) sum_n log p(y_n | x_n) in nats, not the
accuracy: model selection (``cross_val_score``, grid searches) then maximises it. Parameters
follow scikit-learn's rules (stored as given, checked in ``fit``), so ``clone`` works.

Defaults. The initial posterior std is 0.01, as in ``BayesianRegressor``
(``core.defaults.ESTIMATOR_INIT_STD``): Adam moves a log std by at most about one
learning rate a step, and from the layers' own 1e-4 the default 100 epochs on a few hundred
rows (a few hundred steps) leave a near-point posterior, its mutual information below 0.001
nats on the data and far from it; from 0.01 it is about 7x larger far from the data than on it.
The activation stays tanh, unlike the regressor's ReLU: far from the data a ReLU network's
logits grow in proportion to the distance, so every sampled network becomes confident and the
predictive entropy falls with distance (Hein et al. 2019), while tanh keeps it above its value
on the data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from vbnn.classification.training import ClassifierConfig, train_classifier
from vbnn.core.defaults import BATCH_SIZE, TABLE_EPOCHS, TABLE_LEARNING_RATE
from vbnn.core.randomness import ModelGenerators, derive_seed
from vbnn.data.splits import standard_scale
from vbnn.layers.registry import family as family_spec
from vbnn.metrics import (
    classification_nll,
    expected_entropy,
    mutual_information,
    predictive_entropy,
)
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import class_probabilities, predictive_probabilities, sample
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression.estimator import initial_posterior_std
from vbnn.regression.estimator_input import fit_input, predict_input
from vbnn.stores.atomic import write_folder_atomic

STATE_FILE, PARAMS_FILE = "classifier.pt", "classifier.json"


def check_class_labels(labels: np.ndarray) -> None:
    """Refuse float labels that are not whole numbers (NaN and inf included): such a y is a
    regression target, and coding each distinct value as a class would train without a word.

    Raises:
        ValueError: naming the first such value and its index.
    """
    if labels.dtype.kind not in "fc":
        return
    whole = np.isfinite(labels) & (labels == np.round(labels))
    if not whole.all():
        index = int(np.flatnonzero(~whole)[0])
        value = labels[index].item()
        raise ValueError(
            f"y[{index}] = {value!r} is not a whole number: y looks like a regression "
            "target (continuous values), not class labels; use BayesianRegressor for it, or "
            "pass the classes as integers or names"
        )


class BayesianClassifier(ClassifierMixin, BaseEstimator):
    """A Bayesian MLP classifier of any family (module docstring).

    Args:
        family: a ``vbnn.FAMILIES`` name ("mf", "gd", "vd-layer", "point", ...).
        hidden: hidden widths; () is a Bayesian (multinomial) logistic regression.
        activation: "tanh", "relu", "leaky_relu" or "identity".
        epochs: passes over the training set.
        batch_size: examples per step (at most the training set).
        learning_rate: Adam step size.
        prior_std: None: each family's own prior (N(0, 1) for the Gaussian families, log-uniform
            for variational dropout); a number: N(0, prior_std^2) for every layer.
        posterior_std: the marginal posterior std of every weight at initialisation where the
            family has one (``gd`` keeps it fixed; None: 0.01, module docstring); it reaches
            the layers as the family's own option (``init_std``, or ``std`` for ``gd``).
        samples: K, weight samples averaged in every prediction.
        seed: seeds the initialisation, the shuffling, the training noise and the predictions.
        progress: show a progress bar per epoch.
    """

    # Parameters: scikit-learn wants one argument per hyper-parameter (get_params, clone, searches)
    def __init__(
        self,
        family: str = "mf",
        *,
        hidden: tuple[int, ...] = (50,),
        activation: str = "tanh",
        epochs: int = TABLE_EPOCHS,
        batch_size: int = BATCH_SIZE,
        learning_rate: float = TABLE_LEARNING_RATE,
        prior_std: float | None = None,
        posterior_std: float | None = None,
        samples: int = 32,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        self.family = family
        self.hidden = hidden
        self.activation = activation
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.prior_std = prior_std
        self.posterior_std = posterior_std
        self.samples = samples
        self.seed = seed
        self.progress = progress

    def _build(self, features: int, classes: int) -> MLP:
        spec = family_spec(self.family)  # a ValueError lists the families
        if self.samples < 1:
            raise ValueError(f"BayesianClassifier: samples must be >= 1, got {self.samples}")
        std = initial_posterior_std(self.family, self.posterior_std)
        options = {} if std is None else {spec.std_option(): std}
        torch.manual_seed(derive_seed(self.seed, 0, "init"))
        sizes = (features, *(int(h) for h in self.hidden), classes)
        return MLP(self.family, sizes, self.activation, **options)

    def fit(self, X, y) -> BayesianClassifier:
        """Standardise X, encode y, train for ``epochs`` passes. Returns self.

        Raises:
            ValueError: X not 2-D, complex or holding NaN/inf (the row is named), y None or
                not one label per row, a float y with a value that is not a whole number (the
                first is named: a regression target), fewer than two classes or two rows, an
                unknown family or activation; all before any training.
            TypeError: a sparse X.
        """
        x, labels = fit_input(self, X, y, numeric=False)
        check_class_labels(labels)
        check_classification_targets(labels)
        self.classes_, encoded = np.unique(labels, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y holds one class ({self.classes_[0]!r}); a classifier needs two")
        self.x_mean_, self.x_scale_ = standard_scale(x)
        self.model_ = self._build(x.shape[1], len(self.classes_))
        inputs = torch.as_tensor((x - self.x_mean_) / self.x_scale_, dtype=torch.float32)
        config = ClassifierConfig(
            epochs=self.epochs, batch_size=min(self.batch_size, len(x)),
            learning_rate=self.learning_rate, seed=self.seed,
        )  # fmt: skip
        prior = None if self.prior_std is None else GaussianPrior(self.prior_std)
        train_classifier(self.model_, prior, inputs, torch.as_tensor(encoded), config,
                         progress=self.progress, description="fit")  # fmt: skip
        self.model_.eval()
        return self

    def sample_probabilities(self, X) -> torch.Tensor:
        """Class probabilities under each of the K weight samples, (K, N, C)."""
        return class_probabilities(self._sample_logits(X))

    def predict_proba(self, X) -> np.ndarray:
        """The predictive p(y = c | x) averaged over K weight samples, (N, C), columns in the
        order of ``classes_``."""
        return predictive_probabilities(self._sample_logits(X)).numpy()

    @torch.no_grad()
    def _sample_logits(self, X) -> torch.Tensor:
        """The network's outputs under each of the K weight samples (the same K for every call),
        (K, N, C)."""
        check_is_fitted(self, "model_")
        x = predict_input(self, X)
        inputs = torch.as_tensor((x - self.x_mean_) / self.x_scale_, dtype=torch.float32)
        noise = ModelGenerators.for_keys(self.seed, [0], "eval")
        return sample(self.model_, inputs, self.samples, noise=noise)

    def predict(self, X) -> np.ndarray:
        """The most probable class of each row under the averaged predictive, (N,)."""
        probabilities = self.predict_proba(X)  # first: it checks that the model is fitted
        return self.classes_[probabilities.argmax(1)]

    def predict_uncertainty(self, X) -> dict[str, np.ndarray]:
        """Per row, in nats: "total" (predictive entropy) = "aleatoric" (expected entropy) +
        "epistemic" (mutual information between the label and the weights)."""
        probabilities = self.sample_probabilities(X)
        return {
            "total": predictive_entropy(probabilities).numpy(),
            "aleatoric": expected_entropy(probabilities).numpy(),
            "epistemic": mutual_information(probabilities).numpy(),
        }

    def score(self, X, y, sample_weight=None) -> float:
        """Mean test log-likelihood (nats per example) of the averaged predictive
        (``metrics.classification_nll`` with probabilities floored at 1e-300, only to guard log 0).

        Raises:
            ValueError: a label that was not seen in ``fit``, or ``sample_weight``.
        """
        if sample_weight is not None:
            raise ValueError("BayesianClassifier.score: sample_weight is not supported")
        check_is_fitted(self, "model_")
        labels = np.asarray(y)
        index = np.searchsorted(self.classes_, labels)
        index = np.clip(index, 0, len(self.classes_) - 1)
        unseen = self.classes_[index] != labels
        if unseen.any():
            position = int(np.flatnonzero(unseen)[0])
            raise ValueError(f"y[{position}] = {labels.tolist()[position]!r} is not a class "
                             f"seen in fit ({self.classes_.tolist()})")  # fmt: skip
        probabilities = torch.as_tensor(self.predict_proba(X))
        return -float(classification_nll(probabilities, torch.as_tensor(index), floor=1e-300))

    def save(self, folder: str | Path) -> Path:
        """The network's weights and the estimator's settings, scaler and classes in ``folder``."""
        check_is_fitted(self, "model_")
        settings = {"params": self.get_params(), "classes": self.classes_.tolist(),
                    "x_mean": self.x_mean_.tolist(), "x_scale": self.x_scale_.tolist(),
                    "n_features_in": self.n_features_in_}  # fmt: skip
        state = {name: value.cpu() for name, value in self.model_.state_dict().items()}

        def fill(staging: Path) -> None:
            (staging / PARAMS_FILE).write_text(json.dumps(settings, indent=1))
            torch.save(state, staging / STATE_FILE)

        return write_folder_atomic(folder, fill)

    @classmethod
    def load(cls, folder: str | Path) -> BayesianClassifier:
        """An estimator from ``save``'s folder, ready to predict."""
        folder = Path(folder)
        settings = json.loads((folder / PARAMS_FILE).read_text())
        params = dict(settings["params"])
        params["hidden"] = tuple(params["hidden"])
        estimator = cls(**params)
        estimator.classes_ = np.asarray(settings["classes"])
        estimator.n_features_in_ = settings["n_features_in"]
        estimator.x_mean_ = np.asarray(settings["x_mean"])
        estimator.x_scale_ = np.asarray(settings["x_scale"])
        estimator.model_ = estimator._build(estimator.n_features_in_, len(estimator.classes_))
        state = torch.load(folder / STATE_FILE, weights_only=True)
        estimator.model_.load_state_dict(state)
        estimator.model_.eval()
        return estimator
