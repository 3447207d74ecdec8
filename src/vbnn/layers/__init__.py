"""Variational families as dense layers. A new family is one module plus one registry entry."""

from vbnn.layers.additive import AdditiveLayer
from vbnn.layers.bernoulli_variance import BernoulliVarianceLayer
from vbnn.layers.binary_dropout import BinaryDropoutLayer
from vbnn.layers.fixed_variance import FixedVarianceLinear
from vbnn.layers.full_covariance import FullCovarianceLinear
from vbnn.layers.mean_field import MeanFieldLinear
from vbnn.layers.point import PointLinear
from vbnn.layers.uniform_variance import UniformVarianceLayer
from vbnn.layers.variational_dropout import (
    AlphaSharing,
    LayerDropoutLinear,
    NeuronDropoutLinear,
    VariationalDropoutLayer,
    WeightDropoutLinear,
)
from vbnn.layers.zero_mean import ZeroMeanLayer

# Variational families: every entry passes the contract tests in tests/test_family_contract.py.
FAMILIES: dict[str, type] = {
    "mf": MeanFieldLinear,
    "gd": FixedVarianceLinear,
    "fc": FullCovarianceLinear,
    # variance-network families (issue 4); dense here, conv2d with kernel_size=k
    "vd-layer": LayerDropoutLinear,
    "vd-neuron": NeuronDropoutLinear,
    "vd-weight": WeightDropoutLinear,
    "additive": AdditiveLayer,
    "zero-mean": ZeroMeanLayer,
    "uniform-variance": UniformVarianceLayer,
}

# Every family a LeNet-5 layer may use (dense and conv2d): the FAMILIES above whose class takes
# kernel_size, plus those outside the contract tests: binary dropout (no KL, the baseline), the
# deterministic layer (binary dropout with rate 0: std 0) and the Bernoulli variance layer
# (infinite KL against a Gaussian prior). Values: (class, fixed keyword arguments).
NETWORK_FAMILIES: dict[str, tuple[type, dict]] = {
    "deterministic": (BinaryDropoutLayer, {"rate": 0.0}),
    "dropout": (BinaryDropoutLayer, {"rate": 0.5}),
    "vd-layer": (VariationalDropoutLayer, {"sharing": AlphaSharing.LAYER}),
    "vd-neuron": (VariationalDropoutLayer, {"sharing": AlphaSharing.NEURON}),
    "vd-weight": (VariationalDropoutLayer, {"sharing": AlphaSharing.WEIGHT}),
    "additive": (AdditiveLayer, {}),
    "zero-mean": (ZeroMeanLayer, {}),
    "bernoulli-variance": (BernoulliVarianceLayer, {}),
    "uniform-variance": (UniformVarianceLayer, {}),
}

__all__ = [
    "FAMILIES",
    "NETWORK_FAMILIES",
    "AdditiveLayer",
    "AlphaSharing",
    "BernoulliVarianceLayer",
    "BinaryDropoutLayer",
    "FixedVarianceLinear",
    "FullCovarianceLinear",
    "LayerDropoutLinear",
    "MeanFieldLinear",
    "NeuronDropoutLinear",
    "PointLinear",
    "UniformVarianceLayer",
    "VariationalDropoutLayer",
    "WeightDropoutLinear",
    "ZeroMeanLayer",
]
