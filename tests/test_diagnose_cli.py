"""``vbnn uci --save-model`` then ``vbnn diagnose pruning`` on the saved stack."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vbnn
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
    fit = ["fit", "--data", str(table), "--target", "y", "--iterations", "50", "--hidden", "6",
           "--save", str(model)]  # fmt: skip
    assert main(fit) == 0
    assert main(["diagnose", "pruning", "--model", str(model)]) == 2
    assert "names no UCI data set; give its training inputs" in capsys.readouterr().err
    code = main(["diagnose", "pruning", "--model", str(model), "--data", str(table),
                 "--target", "y", "--out", str(tmp_path / "out")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "pruned hidden units" in out and "paper" not in out
    assert (tmp_path / "out" / "figure2.png").is_file()


def write_table(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    header = ",".join([f"x{i}" for i in range(x.shape[1])] + ["y"])
    rows = [
        ",".join(map(repr, [*row, target]))
        for row, target in zip(x.tolist(), y.tolist(), strict=True)
    ]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def regression_data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(2).normal(size=(40, 2))
    return x, x[:, 0] - 0.5 * x[:, 1]


def classification_data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(3).normal(size=(60, 2))
    return x, (x[:, 0] > 0).astype(int) + (x[:, 1] > 1).astype(int)


@pytest.mark.parametrize(
    ("estimator", "data"),
    [
        (vbnn.BayesianRegressor(hidden=(6,), iterations=40, samples=4), regression_data),
        (vbnn.BayesianClassifier(hidden=(6,), epochs=3, samples=4), classification_data),
    ],
    ids=["regressor", "classifier"],
)
def test_diagnose_report_of_a_saved_estimator_is_vbnn_diagnose(
    estimator, data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = data()
    estimator.fit(x, y)
    folder = estimator.save(tmp_path / "model")
    table = write_table(tmp_path / "data.csv", x, y)
    direct = vbnn.diagnose(estimator, x, y, samples=8)
    report_json, figure = tmp_path / "report.json", tmp_path / "report.png"
    code = main(["diagnose", "report", "--model", str(folder), "--data", str(table),
                 "--target", "y", "--samples", "8", "--json", str(report_json),
                 "--figure", str(figure)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert [line for line in printed.splitlines() if line.startswith("* ")] == [
        f"* {verdict}" for verdict in direct.verdicts
    ]
    assert printed.startswith(f"vbnn diagnosis: {direct.task}, {len(x)} examples")
    payload = json.loads(report_json.read_text())
    assert payload["flags"] == direct.flags and payload["verdicts"] == direct.verdicts
    metric = "RMSE" if direct.task == "regression" else "accuracy"
    assert payload["predictive"][metric] == direct.predictive[metric]  # the same numbers
    assert report_json.read_text() == json.dumps(direct.to_dict(), indent=1) + "\n"
    assert figure.stat().st_size > 0 and f"wrote {figure}" in printed
    assert main(["diagnose", "report", "--model", str(folder), "--data", str(table),
                 "--target", "y", "--samples", "8", "--markdown"]) == 0  # fmt: skip
    assert capsys.readouterr().out.strip() == direct.to_markdown().strip()


def test_diagnose_report_names_what_is_wrong_with_its_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = regression_data()
    folder = (
        vbnn.BayesianRegressor(hidden=(4,), iterations=5, samples=2)
        .fit(x, y)
        .save(tmp_path / "model")
    )
    table = write_table(tmp_path / "data.csv", x, y)

    def error(model: Path, data: Path, target: str = "y") -> str:
        arguments = ["diagnose", "report", "--model", str(model), "--data", str(data)]
        assert main([*arguments, "--target", target]) == 2
        return capsys.readouterr().err

    assert f"{tmp_path / 'none'}: no such folder" in error(tmp_path / "none", table)
    (tmp_path / "empty").mkdir()
    assert "empty: not a saved estimator" in error(tmp_path / "empty", table)
    description = json.loads((folder / "model.json").read_text())
    del description["metadata"]["estimator"]  # as vbnn uci --save-model writes a stack
    stack = tmp_path / "stack"
    stack.mkdir()
    (stack / "model.json").write_text(json.dumps(description))
    assert "not a saved BayesianRegressor; diagnose it with vbnn diagnose pruning" in error(
        stack, table
    )
    wide = write_table(tmp_path / "wide.csv", np.hstack([x, x]), y)
    assert (
        "4 input columns ['x0', 'x1', 'x2', 'x3'] besides the target 'y'; the model in "
        f"{folder} was fit on 2"
    ) in error(folder, wide)
    assert "no column 'z'" in error(folder, table, target="z")
    assert "missing.csv: file not found" in error(folder, tmp_path / "missing.csv")
