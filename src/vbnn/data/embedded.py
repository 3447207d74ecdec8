"""Embedded default: scikit-learn's bundled diabetes data with 20 seeded 90/10 splits."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_diabetes

from vbnn.data.uci import RegressionDataset

DIABETES_SPLITS = 20
DIABETES_TEST_FRACTION = 0.1


def load_diabetes_splits(seed: int = 0) -> RegressionDataset:
    """442 rows, 10 inputs; split k is a permutation from default_rng([seed, k]), last 10% test."""
    bunch = load_diabetes()
    rows = bunch.data.shape[0]
    test_size = round(DIABETES_TEST_FRACTION * rows)
    splits = []
    for k in range(DIABETES_SPLITS):
        order = np.random.default_rng([seed, k]).permutation(rows)
        splits.append((np.sort(order[test_size:]), np.sort(order[:test_size])))
    return RegressionDataset(
        name="diabetes",
        inputs=np.asarray(bunch.data, dtype=np.float64),
        target=np.asarray(bunch.target, dtype=np.float64),
        splits=tuple(splits),
        source="scikit-learn load_diabetes (embedded default)",
    )
