"""vbnn: variational Bayesian neural networks in PyTorch.

The public surface: the families as layers (``FAMILIES`` and their classes), the mode switch,
priors, networks, likelihoods, the ELBO, the training loop, and the randomness of model stacks.
Experiments live in ``vbnn.experiments`` and are run with ``vbnn reproduce NAME``.
"""

from importlib.metadata import PackageNotFoundError, version

from vbnn import metrics
from vbnn.classification.estimator import BayesianClassifier
from vbnn.core.contracts import ForwardMode, Method, TrainConfig
from vbnn.core.randomness import ModelGenerators
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
    MeanField,
    NeuronDropout,
    Point,
    UniformVariance,
    VariationalDropout,
    VariationalLayer,
    WeightDropout,
    ZeroMean,
    family,
    mode,
    variational_layers,
)
from vbnn.networks.conversion import convert
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import sample
from vbnn.priors.dropout import ARDPrior, LogUniformPrior, StudentTPrior
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression.estimator import BayesianRegressor
from vbnn.training.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
    Likelihood,
)
from vbnn.training.loop import LangevinDynamics, NonFiniteLossError
from vbnn.training.loop import run as train_loop
from vbnn.training.objectives import elbo, kl_divergence, log_joint, log_likelihood, log_prior
from vbnn.training.objectives import kl_divergence as kl

try:
    __version__ = version("vbnn")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "FAMILIES",
    "MLP",
    "ARDPrior",
    "Additive",
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
    "LangevinDynamics",
    "LayerDropout",
    "LeNet5",
    "LeNetConfig",
    "Likelihood",
    "LogUniformPrior",
    "MeanField",
    "Method",
    "ModelGenerators",
    "NeuronDropout",
    "NonFiniteLossError",
    "Point",
    "StudentTPrior",
    "TrainConfig",
    "UniformVariance",
    "VariationalDropout",
    "VariationalLayer",
    "WeightDropout",
    "ZeroMean",
    "__version__",
    "convert",
    "diagnose",
    "elbo",
    "family",
    "kl",
    "kl_divergence",
    "log_joint",
    "log_likelihood",
    "log_prior",
    "metrics",
    "mode",
    "sample",
    "train_loop",
    "variational_layers",
]
