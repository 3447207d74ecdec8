"""`vbnn reproduce uci-depth`: a tiny run end to end (resumed from the database); the gap test."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vbnn.cli import build_parser, main
from vbnn.core.contracts import SplitResult
from vbnn.regression.methods import method_config
from vbnn.regression.runs import RunResult
from vbnn_lab.uci_depth import make_plan, plan_jobs
from vbnn_lab.uci_depth.report import gap_frame, shrinks

TINY = ["--quick", "--datasets", "yacht", "--methods", "mf,gd,fc", "--depths", "1,2", "--splits",
        "0-1", "--iterations", "30", "--trials", "2", "--no-progress",
        "--executor", "local"]  # fmt: skip


def test_tiny_run_stores_pruned_units_per_layer_and_resumes(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["reproduce", "uci-depth", "--out", str(out), *TINY]) == 0
    for name in ("depth_table.md", "depth_table.csv", "depth_gaps.csv", "depth_figure.png"):
        assert (out / name).stat().st_size > 0, name
    with sqlite3.connect(out / "results.sqlite") as connection:
        runs = connection.execute("SELECT method, hyperparameters, metrics FROM runs").fetchall()
        studies = {r[0] for r in connection.execute("SELECT study_name FROM studies")}
    expected = {f"yacht/split0/{method}/hidden{hidden}/seed0"
                for method in ("mf", "gd") for hidden in ("50", "50x50")}  # fmt: skip
    expected.add("yacht/split0/fc/hidden50/seed0")  # FC runs at depth 1 only (--fc-depths)
    assert studies == expected
    assert len(runs) == 10  # (MF, GD) x 2 depths x 2 splits + FC x 1 depth x 2 splits
    for _, hyperparameters, metrics in runs:
        depth = len(json.loads(hyperparameters)["hidden"])
        counts = json.loads(metrics)["pruned_per_layer"]
        assert len(counts) == depth and all(0 <= c <= 50 for c in counts)
    table = (out / "depth_table.md").read_text()
    assert "| yacht | MF |" in table and "depth 2" in table
    # a second invocation finds everything stored and trains nothing
    assert main(["reproduce", "uci-depth", "--out", str(out), *TINY]) == 0
    with sqlite3.connect(out / "results.sqlite") as connection:
        assert connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 10
    assert (out / "depth_table.md").read_text() == table
    capsys.readouterr()
    assert main(["reproduce", "uci-depth", "--out", str(out), *TINY, "--status"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[:3] for row in rows] == [
        ["yacht", m, h]
        for h in ("50", "50x50")
        for m in ("mf", "gd", "fc")
        if m != "fc" or h == "50"
    ]
    assert all(row[3:] == ["2/2", "2/2"] for row in rows)  # every study and split run stored


def _record(method: str, depth: int, values: list[float]) -> dict:
    splits = tuple(SplitResult(k, v, 1.0, 0.0) for k, v in enumerate(values))
    result = RunResult("boston", method_config(method), splits)
    return {"dataset": "boston", "method": method, "depth": depth, "result": result}


def test_gap_is_paired_over_splits_and_the_verdict_follows_two_standard_errors() -> None:
    noise = np.random.default_rng(0).normal(size=10)
    # a split effect (noise x 5) shared by both methods cancels in the paired difference
    records = [
        _record("mf", 1, list(-3.0 + 5 * noise)),
        _record("fc", 1, list(-2.5 + 5 * noise + 0.01 * np.arange(10))),
        _record("mf", 3, list(-2.9 + 5 * noise)),
        _record("fc", 3, list(-2.9 + 5 * noise + 0.01 * np.arange(10))),
    ]
    gaps = gap_frame(records)
    depth1 = gaps[gaps["depth"] == 1].iloc[0]
    assert depth1["gap"] == pytest.approx(-0.5 - 0.045)
    assert depth1["sem"] == pytest.approx(np.std(0.01 * np.arange(10), ddof=1) / np.sqrt(10))
    assert shrinks(gaps)["verdict"].tolist() == ["shrinks"]
    # the same gap at both depths: no significant change
    records[2] = _record("mf", 3, list(-3.0 + 5 * noise))
    records[3] = _record("fc", 3, list(-2.5 + 5 * noise + 0.01 * np.arange(10)))
    assert shrinks(gap_frame(records))["verdict"].tolist() == ["no significant change"]
    # level at depth 1, behind at depth 3 (power against GD): the gap grows
    records[0] = _record("mf", 1, list(-2.5 + 5 * noise + 0.01 * np.arange(10)))
    assert shrinks(gap_frame(records))["verdict"].tolist() == ["grows"]
    # level at depth 1 and still level at depth 3
    records[2] = _record("mf", 3, list(-2.5 + 5 * noise + 0.01 * np.arange(10)))
    (verdict,) = shrinks(gap_frame(records))["verdict"]
    assert verdict == "MF not behind at the smallest depth"


def test_bad_depths_are_named(tmp_path: Path) -> None:
    assert main(["reproduce", "uci-depth", "--out", str(tmp_path), "--depths", "0"]) == 2


def test_the_full_grid_covers_every_set_depth_and_method_once(data_dir: Path) -> None:
    argv = ["reproduce", "uci-depth", "--data-dir", str(data_dir), "--seed", "3", "--compile"]
    args = build_parser().parse_args(argv)
    jobs = plan_jobs(args, make_plan(args))
    # six sets x (ES, MF, GD at depths 1-3, FC at depth 1): 60 configurations of 20 splits
    assert len(jobs) == 60
    shapes = Counter((config.method, config.hidden) for _, config, _ in jobs)
    assert shapes[("fc", (50,))] == 6 and ("fc", (50, 50)) not in shapes
    assert shapes[("mf", (50, 50, 50))] == 6
    assert {tuple(splits) for _, _, splits in jobs} == {tuple(range(20))}
    assert {(c.seed, c.compile, c.device) for _, c, _ in jobs} == {(3, True, "cpu")}
    # a set's configurations are consecutive, depth before method
    first = [(c.method, len(c.hidden)) for d, c, _ in jobs if d.name == "boston"]
    assert first[:4] == [("es", 1), ("mf", 1), ("gd", 1), ("fc", 1)] and first[4] == ("es", 2)
