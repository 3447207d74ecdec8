"""Table 1 writer: marks at 2 combined standard errors, published columns, files written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from vbnn.core.contracts import SplitResult
from vbnn.regression.methods import method_config
from vbnn.regression.runs import RunResult
from vbnn_lab.overpruning.table1 import (
    comparison,
    default_published_path,
    load_published,
    mark,
    summary_from_results,
    summary_from_runs,
    write_table1,
)

PUBLISHED = {
    "overpruning_table1": {
        "datasets": {
            "boston": {"N": 506, "D": 13, "HMC": [-2.27, 0.03], "SGLD": [-2.4, 0.05],
                       "MF": [-2.62, 0.06], "GD": [-2.54, 0.07], "FC": [-2.89, 0.03]},
            "power": {"N": 9568, "D": 4, "HMC": [-2.7, 0.0], "SGLD": [-2.67, 0.0],
                      "MAP": [-2.78, 0.01]},
        }
    }
}  # fmt: skip

OURS = pd.DataFrame(
    [
        ("boston", "MF", -2.62, 0.06, 20),  # identical: agree
        ("boston", "GD", -2.30, 0.05, 20),  # +0.24 > 2 * 0.086: better
        ("boston", "FC", -3.10, 0.03, 20),  # -0.21 < -2 * 0.042: worse
        ("boston", "SGLD", -2.45, 0.04, 20),  # -0.05 within 2 * 0.064: agree
        ("power", "MAP", -2.81, 0.01, 20),  # -0.03 beyond 2 * 0.0141 = 0.0283: worse
        ("power", "MF", -2.80, 0.01, 20),  # no published MF for power here: unmarked
        ("kin8nm", "MF", 1.1, 0.01, 20),  # not in the paper
    ],
    columns=["dataset", "method", "mean", "sem", "splits"],
)


@pytest.fixture
def published_path(tmp_path: Path) -> Path:
    path = tmp_path / "published.json"
    path.write_text(json.dumps(PUBLISHED))
    return path


def test_marks_use_two_combined_standard_errors() -> None:
    assert mark(-2.62, 0.06, -2.62, 0.06) == "agree"
    assert mark(-2.805, 0.01, -2.78, 0.01) == "agree"  # 0.025 < 0.0283
    assert mark(-2.81, 0.01, -2.78, 0.01) == "worse"  # 0.030 > 0.0283
    assert mark(-2.75, 0.01, -2.78, 0.01) == "better"
    assert mark(-2.70, 0.0, -2.70, 0.0) == "agree"
    with pytest.raises(ValueError, match="SEMs >= 0"):
        mark(-1.0, -0.1, -1.0, 0.1)


def test_write_table1_marks_cells_and_writes_every_file(
    tmp_path: Path, published_path: Path
) -> None:
    paths = write_table1(OURS, tmp_path / "out", published_path, notes=["quick: 2 splits"])
    assert [p.name for p in paths] == ["table1.md", "table1.csv", "figure1.png"]
    for path in paths:
        assert path.stat().st_size > 0
    table = pd.read_csv(tmp_path / "out" / "table1.csv")
    table["mark"] = table["mark"].fillna("")
    marks = dict(zip(table["dataset"] + "/" + table["method"], table["mark"], strict=True))
    assert marks == {"boston/MF": "agree", "boston/GD": "better", "boston/FC": "worse",
                     "boston/SGLD": "agree", "power/MAP": "worse", "power/MF": "",
                     "kin8nm/MF": ""}  # fmt: skip
    gd = table[(table["dataset"] == "boston") & (table["method"] == "GD")].iloc[0]
    assert gd["combined_se"] == pytest.approx(math.hypot(0.05, 0.07))
    assert gd["difference"] == pytest.approx(0.24)
    text = (tmp_path / "out" / "table1.md").read_text()
    boston = next(line for line in text.splitlines() if line.startswith("| boston"))
    assert "-2.27 +- 0.03" in boston and "-2.40 +- 0.05" in boston  # HMC and SGLD (paper)
    assert "-2.30 +- 0.05 (paper -2.54 +- 0.07) **better**" in boston
    assert "Marks: agree 2, better 1, worse 2" in text and "quick: 2 splits" in text
    header = text.splitlines()[next(i for i, x in enumerate(text.splitlines()) if "| dataset" in x)]
    assert header.index("MAP") < header.index("MF") < header.index("GD") < header.index("SGLD |")


def test_summary_from_results_and_errors(tmp_path: Path, published_path: Path) -> None:
    splits = tuple(SplitResult(k, v, 1.0, 0.1) for k, v in enumerate([-2.0, -2.2, -2.4]))
    result = RunResult("boston", method_config("gd"), splits)
    summary = summary_from_results([result])
    assert summary.loc[0, "method"] == "GD" and summary.loc[0, "mean"] == pytest.approx(-2.2)
    assert summary.loc[0, "sem"] == pytest.approx(0.2 / math.sqrt(3))
    assert (
        comparison(summary, load_published(published_path)).loc[0, "mark"] == "better"
    )  # 0.34 > 0.27
    with pytest.raises(ValueError, match=r"lack columns \['sem'\]"):
        comparison(OURS.drop(columns="sem"), load_published(published_path))
    with pytest.raises(FileNotFoundError, match=r"nothing\.json"):
        load_published(tmp_path / "nothing.json")


def test_the_shared_published_file_has_all_six_datasets() -> None:
    if not default_published_path().is_file():
        pytest.skip("shared/reference/published.json not present")
    published = load_published()
    assert set(published) == {"boston", "concrete", "energy", "power", "wine", "yacht"}
    assert published["boston"]["MF"] == (-2.62, 0.06) and published["yacht"]["GD"] == (-0.7, 0.08)


def test_summary_from_the_results_database(tmp_path: Path) -> None:
    from vbnn.stores.results_db import ResultsDatabase

    with ResultsDatabase(tmp_path / "r.sqlite") as database:
        for method, values in (("mf", [-2.5, -2.7]), ("gd", [-2.4, -2.6, -2.5])):
            config = method_config(method)
            database.write_results(
                "boston", config, [SplitResult(k, v, 1.0, 0.1) for k, v in enumerate(values)]
            )
        database.write_results("boston", method_config("mf", seed=1),
                               [SplitResult(0, -9.0, 1.0, 0.1)])  # fmt: skip
        runs = database.runs_frame()
    summary = summary_from_runs(runs[runs["seed"] == 0]).set_index("method")
    assert summary.loc["MF", "mean"] == pytest.approx(-2.6)
    assert summary.loc["MF", "sem"] == pytest.approx(0.1)  # std 0.1414 / sqrt 2
    assert summary.loc["GD", "splits"] == 3
    with pytest.raises(ValueError, match="more than once"):
        summary_from_runs(runs)
