"""Variational families as dense layers. A new family is one module plus one registry entry."""

from vbnn.layers.fixed_variance import FixedVarianceLinear
from vbnn.layers.full_covariance import FullCovarianceLinear
from vbnn.layers.mean_field import MeanFieldLinear
from vbnn.layers.point import PointLinear

# Variational families: every entry passes the contract tests in tests/test_family_contract.py.
FAMILIES: dict[str, type] = {
    "mf": MeanFieldLinear,
    "gd": FixedVarianceLinear,
    "fc": FullCovarianceLinear,
}

__all__ = [
    "FAMILIES",
    "FixedVarianceLinear",
    "FullCovarianceLinear",
    "MeanFieldLinear",
    "PointLinear",
]
