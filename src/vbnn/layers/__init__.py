"""Variational families as layers: one shell (``VariationalLayer``), one module per family, one
registry (``FAMILIES``). A new family is one module plus one registry entry."""

from vbnn.layers.additive import Additive
from vbnn.layers.bernoulli_variance import BernoulliVariance
from vbnn.layers.binary_dropout import BinaryDropout
from vbnn.layers.fixed_variance import FixedVariance
from vbnn.layers.full_covariance import FullCovariance
from vbnn.layers.low_rank_covariance import LowRankCovariance
from vbnn.layers.mean_field import MeanField
from vbnn.layers.modes import mode, use_noise, variational_layers
from vbnn.layers.point import Point
from vbnn.layers.registry import FAMILIES, FamilySpec, family
from vbnn.layers.shell import VariationalLayer
from vbnn.layers.uniform_variance import UniformVariance
from vbnn.layers.variational_dropout import (
    AlphaSharing,
    LayerDropout,
    NeuronDropout,
    VariationalDropout,
    WeightDropout,
)
from vbnn.layers.zero_mean import ZeroMean

__all__ = [
    "FAMILIES",
    "Additive",
    "AlphaSharing",
    "BernoulliVariance",
    "BinaryDropout",
    "FamilySpec",
    "FixedVariance",
    "FullCovariance",
    "LayerDropout",
    "LowRankCovariance",
    "MeanField",
    "NeuronDropout",
    "Point",
    "UniformVariance",
    "VariationalDropout",
    "VariationalLayer",
    "WeightDropout",
    "ZeroMean",
    "family",
    "mode",
    "use_noise",
    "variational_layers",
]
