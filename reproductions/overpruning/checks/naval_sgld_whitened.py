"""SGLD on naval with raw and with whitened inputs: is its underfit the inputs' conditioning?

Split 0, the nine-sets run's chosen values (prior std 0.41, eta 0.058), 5,000 steps, seed 0,
eager. Whitening is fitted on the split's training rows only: the columns that vary there are
standardised, rotated onto the eigenvectors of their covariance and scaled to unit variance,
dropping the directions whose eigenvalue is below 1e-10 of the largest (exact collinearity).

    VBNN_DATA_DIR=../shared/data python reproductions/overpruning/checks/naval_sgld_whitened.py
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from vbnn.data import load_uci
from vbnn.regression.engine import run_splits
from vbnn.regression.runs import SGLDConfig


def whitened(inputs: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``inputs`` whitened with statistics of the rows ``train``."""
    x = inputs.astype(np.float64)
    varies = x[train].std(axis=0) > 1e-9 * np.abs(x[train]).mean(axis=0)
    x = x[:, varies]
    z = (x - x[train].mean(axis=0)) / x[train].std(axis=0)
    eigenvalues, vectors = np.linalg.eigh(np.cov(z[train], rowvar=False))
    kept = eigenvalues > 1e-10 * eigenvalues.max()
    print(
        f"columns varying {varies.sum()} of {varies.size}, directions kept {kept.sum()}, "
        f"eigenvalues {eigenvalues.max():.3g} to {eigenvalues[kept].min():.3g}"
    )
    return z @ vectors[:, kept] / np.sqrt(eigenvalues[kept])


def main() -> None:
    naval = load_uci("naval")
    train, _ = naval.split(0)
    white = dataclasses.replace(naval, inputs=whitened(naval.inputs, train))
    config = SGLDConfig(prior_std=0.4099385550105976, step_size=0.058340405747948416)
    for name, data in [("raw", naval), ("whitened", white)]:
        start = time.time()
        result = run_splits(data, [0], config).splits[0]
        print(
            f"{name}: test LL {result.test_log_likelihood:.3f}, RMSE {result.test_rmse:.5f} "
            f"({time.time() - start:.0f} s)"
        )


if __name__ == "__main__":
    main()
