"""Tables and JSON for UCI results: per split, summary (mean +- standard error), comparisons."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from vbnn.regression.runs import RunResult

METRICS = ("test_log_likelihood", "test_rmse")


def mean_and_standard_error(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error std / sqrt(n) (ddof = 1; 0 for one value)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("mean_and_standard_error: no values")
    spread = float(array.std(ddof=1)) / math.sqrt(array.size) if array.size > 1 else 0.0
    return float(array.mean()), spread


def summary(result: RunResult) -> dict[str, dict[str, float]]:
    out = {}
    for metric in METRICS:
        mean, error = mean_and_standard_error([getattr(s, metric) for s in result.splits])
        out[metric] = {"mean": mean, "standard_error": error}
    return out


def split_table(result: RunResult) -> pd.DataFrame:
    rows = [
        {
            "split": s.split,
            "test LL": s.test_log_likelihood,
            "test RMSE": s.test_rmse,
            "seconds": s.train_seconds,
            **({"stopped at": s.stopped_iteration} if s.stopped_iteration is not None else {}),
        }
        for s in result.splits
    ]
    return pd.DataFrame(rows).set_index("split")


def _cell(stats: dict[str, float]) -> str:
    return f"{stats['mean']:.3f} +- {stats['standard_error']:.3f}"


def comparison_table(results: list[RunResult]) -> pd.DataFrame:
    """One row per method: test LL and RMSE as mean +- standard error over splits."""
    rows = []
    for result in results:
        stats = summary(result)
        rows.append(
            {
                "method": result.config.method.upper(),
                "test LL": _cell(stats["test_log_likelihood"]),
                "test RMSE": _cell(stats["test_rmse"]),
                "splits": len(result.splits),
                "seconds": sum(s.train_seconds for s in result.splits),
            }
        )
    return pd.DataFrame(rows).set_index("method")


def to_json(result: RunResult) -> dict[str, Any]:
    return {
        "dataset": result.dataset,
        "method": result.config.method,
        "config": result.config.to_dict(),
        "splits": [
            {
                "split": s.split,
                "test_log_likelihood": s.test_log_likelihood,
                "test_rmse": s.test_rmse,
                "train_seconds": s.train_seconds,
                "stopped_iteration": s.stopped_iteration,
            }
            for s in result.splits
        ],
        "summary": summary(result),
        "notes": list(result.notes),
    }
