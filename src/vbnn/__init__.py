"""vbnn: variational Bayesian neural networks in PyTorch.

The public surface, one name per concept:

* the families as layers: ``FAMILIES``, ``family``, the layer classes, ``convert`` (any
  ``nn.Module`` made Bayesian; with ``adapter=LoRA(...)`` a Bayesian low-rank adapter on its
  frozen weights, saved alone by ``adapter_state_dict`` and ``load_adapter``), ``summary`` (its
  layers, families, sizes and memory, and why a deterministic module is so) and ``MLP``;
* how a network runs: ``mode`` (``ForwardMode``), ``use_noise``, ``ModelGenerators`` and the
  ``NoiseSource`` protocol it follows (where the noise comes from, the ``noise`` argument of a
  forward pass), ``sample`` (K outputs drawn from q), ``variational_layers``, ``BatchRule``
  (how a batch that is a mapping, a HuggingFace model's, reaches a model and its output);
* the objectives over any module: ``kl``, ``log_prior``, ``elbo``, ``log_joint``,
  ``log_likelihood``; priors and likelihoods; ``train`` (the epoch loop for any network and
  data, returning a ``TrainingResult``; rarer settings in ``TrainerConfig``), ``train_loop``
  (its steps), ``LangevinDynamics`` and ``SGD``;
* the baselines: SWAG and MultiSWAG (``SWAGCollector``, ``SWAGPosterior``, ``swag_predict``)
  and temperature scaling (``fit_temperature``, ``temperature_scaled``);
* the estimators ``BayesianRegressor`` and ``BayesianClassifier``; ``compare`` (which family
  for my data: families over the same folds, ``vbnn.comparison``); ``diagnose``; the modules
  ``metrics`` and ``plots``.

The UCI engine's names live in ``vbnn.regression`` (``method_config``, ``VIConfig``, ...),
the papers' networks in ``vbnn.networks`` (``LeNet5``, ``VGGLike``). The papers' experiments
are a second package beside the library, installed with ``pip install ./lab`` from the repository
(``vbnn reproduce NAME``); it imports vbnn, never the reverse.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from vbnn import metrics, plots
from vbnn.calibration import fit_temperature, temperature_scaled
from vbnn.core.batch_rule import BatchRule
from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.diagnostics.report import DiagnosisReport, diagnose
from vbnn.layers import (
    FAMILIES,
    Additive,
    BernoulliVariance,
    BinaryDropout,
    FamilySpec,
    FixedVariance,
    FullCovariance,
    LayerDropout,
    LowRankCovariance,
    MeanField,
    NeuronDropout,
    Point,
    UniformVariance,
    VariationalLayer,
    WeightDropout,
    ZeroMean,
    family,
    mode,
    use_noise,
    variational_layers,
)
from vbnn.networks.adapter import LoRA, adapter_state_dict, load_adapter
from vbnn.networks.conversion import convert
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import sample
from vbnn.networks.summary import summary
from vbnn.priors.ard import ARDPrior
from vbnn.priors.gaussian import GaussianPrior
from vbnn.priors.kl import register_kl
from vbnn.priors.log_uniform import LogUniformPrior
from vbnn.priors.student_t import StudentTPrior
from vbnn.training.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
    HeteroscedasticGaussianLikelihood,
    Likelihood,
)
from vbnn.training.loop import LangevinDynamics, NonFiniteLossError, train_loop
from vbnn.training.natural_gradient import IVON, VariationalOnlineNewton
from vbnn.training.objectives import elbo, kl, log_joint, log_likelihood, log_prior
from vbnn.training.optimizer import SGD
from vbnn.training.settings import TrainerConfig
from vbnn.training.swag import SWAGCollector, SWAGPosterior, swag_predict
from vbnn.training.trainer import TrainingResult, train

if TYPE_CHECKING:
    from vbnn.classification.estimator import BayesianClassifier
    from vbnn.comparison import compare
    from vbnn.regression.estimator import BayesianRegressor

# Names whose modules import scikit-learn (the estimators' base class) or optuna and pandas
# (compare's studies and tables): they load on first access (PEP 562), so that ``import vbnn``
# costs little more than ``import torch``.
_LAZY = {
    "BayesianClassifier": "vbnn.classification.estimator",
    "BayesianRegressor": "vbnn.regression.estimator",
    "compare": "vbnn.comparison",
}


def __getattr__(name: str) -> Any:
    """The names of ``_LAZY``, imported from their module on first access and then kept; and a
    subpackage or module not yet imported (``vbnn.regression``), as ``import vbnn`` once
    imported them all."""
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    elif not name.startswith("__"):
        try:
            value = import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":  # the module exists; something it needs not
                raise
            raise AttributeError(f"module 'vbnn' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'vbnn' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


try:
    __version__ = version("vbnn")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "FAMILIES",
    "IVON",
    "MLP",
    "SGD",
    "ARDPrior",
    "Additive",
    "BatchRule",
    "BayesianClassifier",
    "BayesianRegressor",
    "BernoulliLikelihood",
    "BernoulliVariance",
    "BinaryDropout",
    "CategoricalLikelihood",
    "DiagnosisReport",
    "FamilySpec",
    "FixedVariance",
    "ForwardMode",
    "FullCovariance",
    "GaussianLikelihood",
    "GaussianPrior",
    "HeteroscedasticGaussianLikelihood",
    "LangevinDynamics",
    "LayerDropout",
    "Likelihood",
    "LoRA",
    "LogUniformPrior",
    "LowRankCovariance",
    "MeanField",
    "ModelGenerators",
    "NeuronDropout",
    "NoiseSource",
    "NonFiniteLossError",
    "Point",
    "Prior",
    "SWAGCollector",
    "SWAGPosterior",
    "StudentTPrior",
    "TrainerConfig",
    "TrainingResult",
    "UniformVariance",
    "VariationalLayer",
    "VariationalOnlineNewton",
    "WeightDropout",
    "ZeroMean",
    "__version__",
    "adapter_state_dict",
    "compare",
    "convert",
    "diagnose",
    "elbo",
    "family",
    "fit_temperature",
    "kl",
    "load_adapter",
    "log_joint",
    "log_likelihood",
    "log_prior",
    "metrics",
    "mode",
    "plots",
    "register_kl",
    "sample",
    "summary",
    "swag_predict",
    "temperature_scaled",
    "train",
    "train_loop",
    "use_noise",
    "variational_layers",
]
