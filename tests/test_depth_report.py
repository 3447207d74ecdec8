"""The depth table's mean and SEM."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vbnn.experiments.depth.report import aggregate


def test_aggregate_reports_mean_and_standard_error() -> None:
    values = [1.0, 2.0, 6.0]
    records = [
        {
            "activation": "relu",
            "depth": 2,
            "repeat": k,
            "width": 29,
            "kl_diag_full": value,
            "wasserstein2": 2 * value,
            "kl_full_diag": 0.0,
            "nuts_ess_median": 10.0,
            "nuts_rhat_max": 1.0,
            "nuts_divergences": 0.0,
            "nuts_seconds": 1.0,
            "mean_field_test_accuracy": 1.0,
        }
        for k, value in enumerate(values)
    ]
    row = aggregate(records).iloc[0]
    assert row["kl_diag_full_mean"] == pytest.approx(3.0)
    assert row["kl_diag_full_sem"] == pytest.approx(np.std(values, ddof=1) / math.sqrt(3))
    assert row["wasserstein2_sem"] == pytest.approx(2 * np.std(values, ddof=1) / math.sqrt(3))
    assert row["repeats"] == 3
