"""``vbnn uci --save-model`` then ``vbnn diagnose pruning`` on the saved stack."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vbnn.cli import main


def test_save_model_then_diagnose_pruning(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / "models"
    code = main(
        ["uci", "--dataset", "boston", "--method", "mf", "--splits", "0-1", "--iterations", "30",
         "--test-samples", "3", "--chunk-size", "2", "--json", "--no-progress",
         "--data-dir", str(data_dir), "--save-model", str(models)]
    )  # fmt: skip
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    folder = models / "mf-splits-0-1"
    assert (folder / "model.json").is_file() and (folder / "state.pt").is_file()
    out = tmp_path / "diagnosis"
    code = main(["diagnose", "pruning", "--model", str(folder), "--data-dir", str(data_dir),
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "pruned hidden units" in printed and "paper, MF on boston: 39 of 50" in printed
    for name in ("pruning_counts.csv", "units_split_0.csv", "units_split_1.csv", "figure2.png",
                 "figure5.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    counts = (out / "pruning_counts.csv").read_text().splitlines()
    stored = [s["test_log_likelihood"] for s in payload["splits"]]
    assert counts[0] == "split,pruned,units,test_log_likelihood"
    assert float(counts[1].split(",")[3]) == pytest.approx(stored[0])  # the saved metadata


def test_diagnose_missing_model_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", "pruning", "--model", str(tmp_path / "none")]) == 2
    assert "model.json: not found" in capsys.readouterr().err


def test_diagnose_a_model_fitted_on_your_own_table(tmp_path, capsys) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 3))
    table = tmp_path / "own.csv"
    rows = [f"{a},{b},{c},{a - 2 * c}" for a, b, c in x]
    table.write_text("a,b,c,y\n" + "\n".join(rows) + "\n")
    model = tmp_path / "model"
    fit = ["fit", "--csv", str(table), "--target", "y", "--iterations", "50", "--hidden", "6",
           "--save", str(model)]  # fmt: skip
    assert main(fit) == 0
    assert main(["diagnose", "pruning", "--model", str(model)]) == 2
    assert "names no UCI data set; give its training inputs" in capsys.readouterr().err
    code = main(["diagnose", "pruning", "--model", str(model), "--csv", str(table),
                 "--target", "y", "--out", str(tmp_path / "out")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "pruned hidden units" in out and "paper" not in out
    assert (tmp_path / "out" / "figure2.png").is_file()
