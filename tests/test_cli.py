"""The command line end to end at tiny sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vbnn.classification.estimator import BayesianClassifier
from vbnn.cli import main
from vbnn.data.splits import parse_splits
from vbnn.regression.estimator import BayesianRegressor


def test_uci_json_has_splits_summary_and_config(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["uci", "--dataset", "boston", "--method", "gd", "--splits", "0-2", "--iterations", "20",
         "--posterior-std", "0.05", "--test-samples", "5", "--json", "--data-dir", str(data_dir)]
    )  # fmt: skip
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert [s["split"] for s in payload["splits"]] == [0, 1, 2]
    assert payload["method"] == "gd" and payload["config"]["posterior_std"] == 0.05
    assert payload["config"]["iterations"] == 20
    lls = [s["test_log_likelihood"] for s in payload["splits"]]
    assert payload["summary"]["test_log_likelihood"]["mean"] == pytest.approx(sum(lls) / 3)


def test_uci_fits_any_registered_family_by_vi(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["uci", "--dataset", "boston", "--method", "vd-layer", "--splits", "0",
         "--iterations", "20", "--test-samples", "5", "--json", "--data-dir", str(data_dir)]
    )  # fmt: skip
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["config"]["algorithm"] == "vi" and payload["config"]["family"] == "vd-layer"
    assert payload["splits"][0]["test_log_likelihood"] > -10
    # a name that is neither an algorithm nor a family is refused, with the choices
    with pytest.raises(SystemExit) as stopped:
        main(["uci", "--dataset", "boston", "--method", "vi", "--data-dir", str(data_dir)])
    assert stopped.value.code == 2
    assert "--method 'vi': vi unknown; choose from es, map, sgld, mf" in capsys.readouterr().err


def test_a_family_the_uci_engine_cannot_train_is_refused_with_the_reason(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bernoulli-variance has an infinite KL to the engine's Gaussian prior: refused at the
    command line and by the regressor, before any training, naming the family and the choices."""
    with pytest.raises(SystemExit) as stopped:
        main(["uci", "--dataset", "boston", "--method", "bernoulli-variance", "--splits", "0",
              "--data-dir", str(data_dir)])  # fmt: skip
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "--method 'bernoulli-variance': method 'bernoulli-variance': the UCI engine" in error
    assert "Gaussian prior" in error and "the engine's methods are es, map, sgld, mf" in error
    assert "bernoulli-variance," not in error.split("methods are")[1]
    regressor = BayesianRegressor(family="bernoulli-variance", iterations=10**9)
    with pytest.raises(ValueError, match="method 'bernoulli-variance': the UCI engine"):
        regressor.fit(np.linspace(0, 1, 8).reshape(-1, 1), np.arange(8.0))


def test_demo_prints_one_comparison_table(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--splits", "0-1", "--iterations", "5", "--test-samples", "2",
                 "--no-progress", "--data-dir", str(data_dir)])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    table = out[out.index("comparison") :]
    for method in ("ES", "MAP", "MF", "GD", "FC"):
        assert f"\n{method} " in table


def test_demo_falls_back_to_the_embedded_set_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--splits", "0", "--iterations", "3", "--test-samples", "2",
                 "--no-progress", "--data-dir", str(tmp_path)])  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert "embedded default" in captured.out and "diabetes" in captured.err


def test_errors_exit_2_with_a_message(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["uci", "--dataset", "boston", "--splits", "30", "--data-dir", str(data_dir)])
    assert code == 2
    assert "split 30 does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "ids"), [("0-3", [0, 1, 2, 3]), ("5", [5]), ("1,4-5", [1, 4, 5])])
def test_parse_splits(text: str, ids: list[int]) -> None:
    assert parse_splits(text) == ids


def test_fit_reads_a_users_csv_and_names_bad_cells(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 2))
    y = x @ [1.5, -0.5] + 0.1 * rng.normal(size=60)
    table = tmp_path / "mine.csv"
    table.write_text(
        "a,b,price\n" + "\n".join(f"{p},{q},{r}" for (p, q), r in zip(x, y, strict=True)) + "\n"
    )
    saved = tmp_path / "model"
    argv = ["fit", "--data", str(table), "--target", "price", "--iterations", "300",
            "--hidden", "8", "--save", str(saved)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "test log-likelihood" in out and saved.is_dir()
    lines = table.read_text().splitlines()
    lines[5] = "0.1,oops,2.0"
    table.write_text("\n".join(lines) + "\n")
    assert main(argv) == 2
    assert "mine.csv, line 6, column 'b': non-numeric value 'oops'" in capsys.readouterr().err
    assert main(["fit", "--data", str(table), "--target", "cost"]) == 2
    assert "no column 'cost'; the columns are ['a', 'b', 'price']" in capsys.readouterr().err
    assert main(["fit", "--csv", str(table), "--target", "price"]) == 2  # the old spelling
    assert f"give the table as --data {table} (as vbnn compare does)" in capsys.readouterr().err


def test_fit_on_a_column_of_class_names_trains_a_classifier_that_predicts_the_names(
    tmp_path, capsys
) -> None:
    rng = np.random.default_rng(1)
    species = np.array(["setosa", "versicolor", "virginica"])[np.arange(45) % 3]
    length = np.searchsorted(["setosa", "versicolor", "virginica"], species) * 2.0
    length = length + 0.3 * rng.normal(size=45)
    table = tmp_path / "iris.csv"
    width = rng.normal(size=45)
    rows = [f"{a:.3f},{b:.3f},{c}" for a, b, c in zip(length, width, species, strict=True)]
    table.write_text("sepal_length,sepal_width,species\n" + "\n".join(rows) + "\n")
    saved = tmp_path / "model"
    argv = ["fit", "--data", str(table), "--target", "species", "--hidden", "4",
            "--save", str(saved)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "test log-likelihood" in out
    assert "classes, in the order of predict_proba's columns: setosa, versicolor, virginica" in out
    model = BayesianClassifier.load(saved)
    assert model.classes_.tolist() == ["setosa", "versicolor", "virginica"]
    assert set(model.predict(np.array([[0.0, 0.0], [4.0, 0.0]]))) <= set(species)


def test_uci_defaults_come_from_the_tuned_presets_and_say_so(data_dir, capsys) -> None:
    from vbnn.regression.presets import GD_POSTERIOR_STD, PRESETS

    base = ["uci", "--dataset", "boston", "--method", "gd", "--splits", "0", "--iterations", "5",
            "--test-samples", "2", "--data-dir", str(data_dir), "--json",
            "--no-progress"]  # fmt: skip
    assert main(base) == 0
    captured = capsys.readouterr()
    used = json.loads(captured.out)["config"]
    assert used["posterior_std"] == PRESETS["boston"]["gd"]["posterior_std"]
    assert "tuned by the Table 1 reproduction on split 0" in captured.err
    assert main([*base, "--posterior-std", "0.2"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["posterior_std"] == 0.2
    kin8nm = [a if a != "boston" else "kin8nm" for a in base]
    assert main(kin8nm) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["config"]["posterior_std"] == GD_POSTERIOR_STD
    assert "vbnn's stated GD default" in captured.err


def test_sgld_takes_its_tuned_step_size_unless_given(data_dir, capsys) -> None:
    from vbnn.regression.presets import PRESETS

    base = ["uci", "--dataset", "boston", "--method", "sgld", "--splits", "0", "--iterations",
            "10", "--test-samples", "2", "--data-dir", str(data_dir), "--json",
            "--no-progress"]  # fmt: skip
    assert main(base) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["config"]["step_size"] == PRESETS["boston"]["sgld"]["step_size"]
    assert "--step-size to override" in captured.err
    assert main([*base, "--step-size", "0.01"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["step_size"] == 0.01
