"""The depth table: mean and SEM over repeats, and the gaps of the trusted repeats only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vbnn.references.chain_diagnostics import ConvergenceCriterion
from vbnn.references.gaussian_gap import expected_kl_floor
from vbnn_lab.depth.report import aggregate, doubtful_depths, trusted_units


def records(values: list[float], rhats: list[float]) -> list[dict]:
    return [
        {
            "activation": "relu",
            "depth": 2,
            "repeat": k,
            "width": 29,
            "kl_diag_full": value,
            "wasserstein2": 2 * value,
            "kl_full_diag": 0.0,
            "sample_w2_gap": 0.5,
            "sample_w2_full": 1.0,
            "sample_w2_baseline": 1.0,
            "sampler_bulk_ess_min": 400.0,
            "sampler_tail_ess_min": 300.0,
            "sampler_rhat_max": rhat,
            "sampler_divergences": 0.0,
            "sampler_max_tree_depth_hit_fraction": 0.0,
            "sampler_seconds": 1.0,
            "mean_field_test_accuracy": 1.0,
        }
        for k, (value, rhat) in enumerate(zip(values, rhats, strict=True))
    ]


def test_aggregate_reports_mean_and_standard_error() -> None:
    values = [1.0, 2.0, 6.0]
    row = aggregate(records(values, [1.0] * 3), ConvergenceCriterion()).iloc[0]
    assert row["kl_diag_full_mean"] == pytest.approx(3.0)
    assert row["kl_diag_full_sem"] == pytest.approx(np.std(values, ddof=1) / math.sqrt(3))
    assert row["wasserstein2_sem"] == pytest.approx(2 * np.std(values, ddof=1) / math.sqrt(3))
    assert row["repeats"] == 3 and row["trusted_repeats"] == 3 and row["trusted"]


def test_only_repeats_passing_the_criterion_enter_the_trusted_gap() -> None:
    rows = records([1.0, 2.0, 6.0], [1.01, 1.2, 1.04])
    row = aggregate(rows, ConvergenceCriterion(max_rhat=1.05)).iloc[0]
    assert row["trusted_repeats"] == 2 and not row["trusted"]
    assert row["kl_diag_full_trusted_mean"] == pytest.approx(3.5)
    assert row["kl_diag_full_mean"] == pytest.approx(3.0)
    rows[0]["sampler_tail_ess_min"] = 50.0
    assert aggregate(rows, ConvergenceCriterion()).iloc[0]["trusted_repeats"] == 1
    rows[2]["sampler_divergences"] = 3.0  # the last trusted repeat diverged
    assert aggregate(rows, ConvergenceCriterion()).iloc[0]["trusted_repeats"] == 0


def test_a_depth_is_doubtful_only_where_no_activation_is_trusted() -> None:
    rows = []
    for activation, depth, rhat in [
        ("relu", 1, 1.0), ("identity", 1, 1.5),  # one activation mixes: not shaded
        ("relu", 2, 1.5), ("identity", 2, 1.5),  # none does: shaded
    ]:  # fmt: skip
        rows += [
            {**row, "activation": activation, "depth": depth} for row in records([1.0], [rhat])
        ]
    table = aggregate(rows, ConvergenceCriterion(max_rhat=1.05))
    assert table["trusted"].tolist() == [False, False, True, False]  # identity, then relu
    assert doubtful_depths(table) == [2]


def test_every_unit_carries_the_estimators_floor_and_the_draws_it_needs() -> None:
    rows = records([900.0, 700.0], [1.0, 1.0])
    for row in rows:
        row.update(parameters=100, settings={"chains": {"chains": 4, "samples": 300}})
    rows[1]["kl_floor_chains"] = 400.0  # the chain floor, where the unit stored one
    rows[1]["draws"] = 1200
    rows[1]["kl_above_floor_limit"] = 50.0  # and its limit over draw counts
    rows[1]["kl_above_floor_limit_drift"] = -3.0
    frame = trusted_units(rows, ConvergenceCriterion())
    floor = expected_kl_floor(100, 1200)
    assert 100 * 99 / (4 * 1199) < floor < 1.2 * 100 * 99 / (4 * 1199)  # its large-N asymptote
    assert frame["kl_floor"].tolist() == pytest.approx([floor, floor])
    assert frame["floor"].tolist() == ["independent draws", "chains"]
    above = np.array([900.0 - floor, 300.0])
    assert frame["kl_above_floor"].to_numpy() == pytest.approx(above)
    gaps = [above[0], 50.0]  # the floor is measured against the limit where there is one
    for needed, gap in zip(frame["draws_for_floor_10pc"], gaps, strict=True):
        assert expected_kl_floor(100, int(needed)) <= 0.1 * gap
        assert expected_kl_floor(100, int(needed) - 1) > 0.1 * gap
    row = aggregate(rows, ConvergenceCriterion()).iloc[0]
    assert row["kl_above_floor_mean"] == pytest.approx(above.mean())
    assert row["kl_above_floor_sem"] == pytest.approx(np.std(above, ddof=1) / math.sqrt(2))
    assert row["kl_above_floor_limit_mean"] == 50.0  # over the units that have one
    assert row["kl_above_floor_limit_error"] == 3.0  # one unit: no SEM, its drift


def test_a_unit_without_a_size_has_no_floor() -> None:
    frame = trusted_units(records([5.0], [1.0]), ConvergenceCriterion())
    assert frame[["kl_floor", "kl_above_floor", "draws_for_floor_10pc"]].isna().all(axis=None)
