"""``vbnn.compare`` and ``vbnn compare``: folds, paired gaps, verdict, resume, errors, tasks."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import vbnn
from vbnn.cli import main
from vbnn.comparison import run as run_module
from vbnn.comparison.classification import ClassifierRun, classification_stack
from vbnn.comparison.folds import Task, infer_task, k_folds
from vbnn.comparison.report import paired_gaps, verdict
from vbnn.data.uci import DataError
from vbnn.regression import split_units as uci_module
from vbnn.regression import tuning_driver as tuning_driver_module
from vbnn.sweeps import driver as driver_module

FAST = {"iterations": 60, "hidden": (8,), "test_samples": 8}


def regression_data(rows: int = 60) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(0)
    x = generator.normal(size=(rows, 2))
    return x, x[:, 0] - 0.5 * x[:, 1] ** 2 + 0.1 * generator.normal(size=rows)


def fold_frame(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {"family": family, "fold": k, "log_likelihood": v, "seconds": 1.0, "tuning_seconds": 0}
        for family, lls in values.items()
        for k, v in enumerate(lls)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("task", list(Task))
def test_k_folds_partition_the_rows(task: Task) -> None:
    labels = np.repeat([0.0, 1.0, 2.0], [9, 7, 7])
    splits = k_folds(labels, 4, task, seed=3)
    tests = np.concatenate([test for _, test in splits])
    np.testing.assert_array_equal(np.sort(tests), np.arange(len(labels)))
    assert {len(test) for _, test in splits} <= {5, 6}
    for train, test in splits:
        np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(23))
        if task is Task.CLASSIFICATION:  # stratified: every class in every training part
            assert set(labels[train]) == {0.0, 1.0, 2.0}
    assert k_folds(labels, 4, task, seed=3)[0][1].tolist() == splits[0][1].tolist()


def test_paired_gap_and_its_standard_error_follow_the_formula() -> None:
    frame = fold_frame({"a": [1.0, 2.0, 3.0], "b": [0.5, 1.9, 2.4]})
    gaps = paired_gaps(frame)
    differences = np.array([-0.5, -0.1, -0.6])  # b - a per fold
    sem = np.sqrt(((differences - differences.mean()) ** 2).sum() / 2) / np.sqrt(3)
    assert list(gaps.index) == ["a", "b"]
    assert gaps.loc["b", "gap"] == pytest.approx(-0.4)
    assert gaps.loc["b", "sem"] == pytest.approx(sem) == pytest.approx(0.152753, abs=1e-6)
    # pairing removes the shared fold-to-fold spread: the unpaired SEM of b's mean is larger
    assert np.std([0.5, 1.9, 2.4], ddof=1) / np.sqrt(3) > 3 * sem
    assert not gaps.loc["b", "tie"] and gaps.loc["a", "tie"]


def test_verdict_names_ties_and_the_worse_families_with_their_gaps() -> None:
    frame = fold_frame(
        {"fc": [0.5, 1.9, 2.4], "mf": [1.0, 2.0, 3.0], "gd": [1.1, 1.8, 3.1], "es": [1.0, 2, 3]}
    )
    gaps = paired_gaps(frame)
    assert gaps.loc["gd", "tie"]  # gap 0 +- 0.1: within 2 SEM
    assert verdict(gaps) == "mf, gd and es tie; fc is worse by 0.40 +- 0.15 nats"
    assert verdict(paired_gaps(fold_frame({"mf": [1.0, 2.0], "fc": [0.0, 1.1]}))) == (
        "mf is best; fc is worse by 0.95 +- 0.05 nats"
    )


def test_task_is_inferred_with_its_reason() -> None:
    assert infer_task(np.array([0.0, 1.0, 1.0, 2.0])) == (
        Task.CLASSIFICATION,
        "the target holds 3 distinct integers (0, 1, 2)",
    )
    assert infer_task(np.array([0.5, 1.0]))[0] is Task.REGRESSION
    assert "more than 20" in infer_task(np.arange(30.0))[1]


def no_training(*args, **kwargs):
    raise AssertionError("trained before the input was checked")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x, y: vbnn.compare(x, y, families=["mf", "sgld"], task="classification"),
         r"families\[1\]='sgld' runs on regression only"),
        (lambda x, y: vbnn.compare(x, y, families=["mf", "xx"]), r"families\[1\]='xx': unknown"),
        (lambda x, y: vbnn.compare(x[:7], y[:7], folds=4), "7 rows are too few for 4 folds"),
        (lambda x, y: vbnn.compare(x, np.ones(len(y)), task="classification"),
         "every row holds the class 1; classification needs two"),
        (lambda x, y: vbnn.compare(x, y, splits=[([0, 1, 2], [2, 3])]),
         r"splits\[0\]: row 2 is both a training and a test row"),
        (lambda x, y: vbnn.compare(x, y, trails=3), "unknown setting 'trails'"),
        (lambda x, y: vbnn.compare(x, y, folds=1), "folds=1: K folds need an integer K >= 2"),
        (lambda x, y: vbnn.compare(x, np.where(y > 0, "a", "b"), task="regression"),
         "y holds class names, not numbers"),
    ],
)  # fmt: skip
def test_bad_input_is_an_error_before_any_training(call, message, monkeypatch) -> None:
    monkeypatch.setattr(tuning_driver_module, "run_sweep", no_training)  # the searches
    monkeypatch.setattr(driver_module, "run_sweep", no_training)  # the training
    x, y = regression_data()
    with pytest.raises(ValueError, match=message):
        call(x, y)


def test_a_bad_csv_cell_is_named_before_any_training(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tuning_driver_module, "run_sweep", no_training)  # the searches
    monkeypatch.setattr(driver_module, "run_sweep", no_training)  # the training
    table = tmp_path / "data.csv"
    table.write_text("a,y\n1,2\n3,oops\n")
    with pytest.raises(DataError, match=r"line 3, column 'y': non-numeric value 'oops'"):
        vbnn.compare(table, target="y")


def test_regression_resumes_only_the_missing_fold(tmp_path: Path, monkeypatch) -> None:
    x, y = regression_data()
    database = tmp_path / "results.sqlite"
    settings = {"families": ["mf", "map"], "folds": 3, "tune": False, "database": database}
    first = vbnn.compare(x, y, **settings, **FAST)
    assert first.task is Task.REGRESSION and first.task_reason.startswith("inferred")
    assert len(first.folds) == 6 and first.folds["coverage"].between(0, 1).all()
    with sqlite3.connect(database) as connection:
        connection.execute("DELETE FROM runs WHERE method = 'mf' AND split = 1")
    trained = []
    real = uci_module.train_unit

    def spy(dataset, chunk, config, *rest):
        trained.append((config.method, list(chunk)))
        return real(dataset, chunk, config, *rest)

    monkeypatch.setattr(uci_module, "train_unit", spy)
    second = vbnn.compare(x, y, **settings, **FAST)
    assert trained == [("mf", [1])]
    columns = ["family", "fold", "log_likelihood", "rmse", "coverage"]
    pd.testing.assert_frame_equal(first.folds[columns], second.folds[columns], rtol=1e-5)
    assert second.verdict == first.verdict


def test_other_settings_never_read_back_stored_folds_or_searches(tmp_path: Path) -> None:
    """The stored runs and studies are named by the data, the folds and the settings: a rerun
    on the same database with another interval level or search budget trains afresh (its
    coverage is at its own level), and the same settings train nothing."""
    x, y = regression_data()
    settings = {"families": ["map"], "folds": 2, "database": tmp_path / "r.sqlite", **FAST}
    first = vbnn.compare(x, y, tune=False, **settings)
    narrower = vbnn.compare(x, y, tune=False, level=0.5, **settings)
    assert narrower.name != first.name
    assert (narrower.folds["coverage"] < first.folds["coverage"]).all()
    searched = vbnn.compare(x, y, trials=2, batch=2, **settings)
    longer = vbnn.compare(x, y, trials=3, batch=2, **settings)
    assert len({first.name, searched.name, longer.name}) == 3
    again = vbnn.compare(x, y, trials=3, batch=2, **settings)
    assert again.name == longer.name
    pd.testing.assert_frame_equal(again.folds, longer.folds)


def test_tuned_regression_stores_each_folds_values(tmp_path: Path) -> None:
    x, y = regression_data()
    result = vbnn.compare(x, y, families=["map"], folds=2, trials=2, batch=2, **FAST,
                          database=tmp_path / "r.sqlite")  # fmt: skip
    with sqlite3.connect(tmp_path / "r.sqlite") as connection:
        (stored,) = connection.execute("SELECT DISTINCT hyperparameters FROM runs").fetchone()
    assert '"compare": "tuned per fold"' in stored and '"prior_std"' in stored
    assert (result.folds["tuning_seconds"] > 0).all()
    assert result.verdict == "map is the only family compared"


def test_classification_end_to_end(tmp_path: Path) -> None:
    generator = np.random.default_rng(1)
    x = generator.normal(size=(48, 2))
    labels = np.where(x[:, 0] + x[:, 1] > 0, "yes", "no")
    result = vbnn.compare(x, labels, families=["mf", "point"], folds=3, trials=2, epochs=3,
                          hidden=(8,), test_samples=8)  # fmt: skip
    assert (result.task, result.task_reason) == (
        Task.CLASSIFICATION,
        "inferred: y holds class names; classes coded in sorted order: 0 = no, 1 = yes",
    )
    assert list(result.table.columns[:4]) == ["test LL", "accuracy", "ECE", "Brier"]
    assert result.folds["accuracy"].between(0, 1).all()
    assert (result.folds["log_likelihood"] < 0).all()
    assert result.verdict.startswith(tuple(result.gaps.index[:1]))
    figure = result.plot(tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 0
    figure.clf()
    assert "| family | test LL | accuracy |" in result.to_markdown()


def test_cli_prints_task_table_verdict_and_figure(tmp_path: Path, capsys) -> None:
    x, y = regression_data(40)
    table = tmp_path / "data.csv"
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "y": y}).to_csv(table, index=False)
    out = tmp_path / "out"
    arguments = ["compare", "--data", str(table), "--target", "y", "--families", "map,es",
                 "--folds", "2", "--no-tune", "--iterations", "30", "--hidden", "4",
                 "--test-samples", "4", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "task: regression (inferred: the target holds non-integer values)" in printed
    assert "95% coverage" in printed and "verdict (test log-likelihood" in printed
    assert (out / "compare.png").is_file() and (out / "results.sqlite").is_file()
    assert main(["compare", "--data", str(table), "--target", "y", "--task", "classification"]) == 2
    assert "appears on one row only" in capsys.readouterr().err


def test_cli_fold_column_gives_the_splits(tmp_path: Path, capsys) -> None:
    x, y = regression_data(30)
    table = tmp_path / "data.csv"
    fold = np.arange(30) % 3
    pd.DataFrame({"a": x[:, 0], "fold": fold, "y": y}).to_csv(table, index=False)
    arguments = ["compare", "--data", str(table), "--target", "y", "--fold-column", "fold",
                 "--families", "map", "--no-tune", "--iterations", "20", "--hidden", "4",
                 "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(arguments) == 0
    assert "3 folds" in capsys.readouterr().out


def iris_like(path: Path, rows: int = 36) -> Path:
    """Two measurements and a species name per row, three species apart in the first column."""
    generator = np.random.default_rng(3)
    species = np.array(["setosa", "versicolor", "virginica"])[np.arange(rows) % 3]
    length = np.searchsorted(["setosa", "versicolor", "virginica"], species) * 2.0
    length = length + 0.3 * generator.normal(size=rows)
    width = generator.normal(size=rows)
    frame = pd.DataFrame({"sepal_length": length, "sepal_width": width, "species": species})
    frame.to_csv(path, index=False)
    return path


def test_a_csv_class_column_of_names_is_read_as_classes(tmp_path: Path, capsys) -> None:
    """vbnn.compare and vbnn compare read species names as classes and state their coding."""
    table = iris_like(tmp_path / "iris.csv")
    settings = {"families": ["point"], "folds": 3, "tune": False, "epochs": 3, "hidden": (4,),
                "test_samples": 2}  # fmt: skip
    result = vbnn.compare(table, target="species", **settings)
    assert result.task is Task.CLASSIFICATION
    assert result.task_reason == (
        "inferred: y holds class names; classes coded in sorted order: 0 = setosa, "
        "1 = versicolor, 2 = virginica"
    )
    assert result.folds["accuracy"].between(0, 1).all()
    with pytest.raises(ValueError, match="task='regression': y holds class names"):
        vbnn.compare(table, target="species", task="regression", **settings)
    arguments = ["compare", "--data", str(table), "--target", "species", "--families", "point",
                 "--folds", "3", "--no-tune", "--epochs", "2", "--hidden", "4",
                 "--test-samples", "2", "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "task: classification (inferred: y holds class names; classes coded in sorted " \
        "order: 0 = setosa, 1 = versicolor, 2 = virginica)" in printed  # fmt: skip
    with_folds = pd.read_csv(table).assign(fold=np.arange(36) // 12)  # 4 of each class a fold
    with_folds.to_csv(tmp_path / "folds.csv", index=False)
    arguments[2] = str(tmp_path / "folds.csv")
    assert main([*arguments, "--fold-column", "fold"]) == 0
    printed = capsys.readouterr().out
    assert "3 folds" in printed and "classes coded in sorted order: 0 = setosa" in printed


def test_map_coverage_is_the_share_inside_its_gaussian_interval() -> None:
    from vbnn.comparison.regression import interval_coverages
    from vbnn.core.contracts import ForwardMode
    from vbnn.data.splits import stack_splits
    from vbnn.data.uci import RegressionDataset
    from vbnn.regression.engine import train_stack
    from vbnn.regression.methods import method_config

    x, y = regression_data()
    dataset = RegressionDataset("toy", x, y, k_folds(y, 3, Task.REGRESSION, 0), "test")
    config = method_config("map", iterations=40, hidden=(4,))
    stack = train_stack(config, stack_splits(dataset, [0, 1, 2]))
    coverages = interval_coverages(stack, level=0.8)
    with torch.no_grad():
        mean = stack.model(stack.data.x_test, ForwardMode.MEAN).squeeze(-1)
    half_width = 1.2815515655446004 * stack.likelihood.std().detach()  # Phi^-1(0.9)
    inside = ((stack.data.y_test - mean).abs() <= half_width[:, None]).double().mean(1)
    assert [coverages[k]["coverage"] for k in range(3)] == pytest.approx(inside.tolist())


def test_search_seconds_is_the_length_of_the_union_of_trial_intervals() -> None:
    from datetime import datetime, timedelta

    import optuna

    from vbnn.comparison.regression import search_seconds

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name="s", storage=storage)
    origin = datetime(2020, 1, 1)
    for begin, end in [(0, 10), (0, 8), (12, 15), (14, 20)]:  # union: [0, 10] + [12, 20]
        trial = optuna.trial.create_trial(value=1.0)
        study.add_trial(
            optuna.trial.FrozenTrial(
                number=0, state=trial.state, value=1.0, values=None,
                datetime_start=origin + timedelta(seconds=begin),
                datetime_complete=origin + timedelta(seconds=end), params={},
                distributions={}, user_attrs={}, system_attrs={}, intermediate_values={},
                trial_id=0,
            )
        )  # fmt: skip
    assert search_seconds(storage, "s") == pytest.approx(18.0)


def test_classification_resumes_only_the_missing_unit(tmp_path: Path, monkeypatch) -> None:
    generator = np.random.default_rng(2)
    x = generator.normal(size=(30, 2))
    labels = (x[:, 0] > 0).astype(int)
    settings = {"families": ["mf"], "folds": 3, "tune": False, "epochs": 2, "hidden": (4,),
                "test_samples": 4, "database": tmp_path / "c.sqlite"}  # fmt: skip
    first = vbnn.compare(x, labels, **settings)
    with sqlite3.connect(tmp_path / "c.sqlite") as connection:
        connection.execute("DELETE FROM runs WHERE split = 2")
    trained = []
    real = run_module.classification_stack

    def spy(*arguments):
        trained.append(arguments[-1])
        return real(*arguments)

    monkeypatch.setattr(run_module, "classification_stack", spy)
    second = vbnn.compare(x, labels, **settings)
    assert trained == [[2]]
    columns = ["fold", "log_likelihood", "accuracy", "ece", "brier"]
    pd.testing.assert_frame_equal(first.folds[columns], second.folds[columns])


def test_a_uci_name_uses_its_rows_and_presets(data_dir: Path) -> None:
    result = vbnn.compare("yacht", families=["gd", "map"], folds=2, tune=False, iterations=20,
                          hidden=(4,), test_samples=4, data_dir=str(data_dir))  # fmt: skip
    assert result.name.startswith("yacht-") and result.task is Task.REGRESSION
    assert result.folds.groupby("family").size().to_dict() == {"gd": 2, "map": 2}


@pytest.mark.parametrize("family", ["mf", "fc", "vd-layer", "point"])
def test_a_classification_fold_alone_and_in_a_stack_gives_the_same_numbers(family: str) -> None:
    generator = np.random.default_rng(3)
    x = generator.normal(size=(45, 3))
    labels = (x[:, 0] + x[:, 1] ** 2 > 0.8).astype(int) + (x[:, 2] > 1).astype(int)
    splits = k_folds(labels.astype(float), 3, Task.CLASSIFICATION, seed=0)
    run = ClassifierRun(method=family, hidden=(6,), epochs=3, batch_size=8, learning_rate=0.02,
                        samples=5, seed=4)  # fmt: skip
    stacked, stacked_metrics = classification_stack(x, labels, splits, run, [0, 1, 2])
    alone, alone_metrics = classification_stack(x, labels, splits[1:2], run, [1])
    assert stacked[1].test_log_likelihood == pytest.approx(alone[0].test_log_likelihood, rel=1e-5)
    for name in ("accuracy", "ece", "brier"):
        assert stacked_metrics[1][name] == pytest.approx(alone_metrics[1][name], rel=1e-5, abs=1e-9)
    # each model saw its own rows: the folds' numbers differ
    assert len({r.test_log_likelihood for r in stacked}) == 3


def test_classification_stacks_the_folds_of_each_size(monkeypatch) -> None:
    generator = np.random.default_rng(2)
    x = generator.normal(size=(31, 2))
    labels = (x[:, 0] > 0).astype(int)
    stacks = []
    real = run_module.classification_stack

    def spy(*arguments):
        stacks.append(arguments[-1])
        return real(*arguments)

    monkeypatch.setattr(run_module, "classification_stack", spy)
    vbnn.compare(x, labels, families=["mf"], folds=3, tune=False, epochs=2, hidden=(4,),
                 test_samples=4)  # fmt: skip
    assert sorted(len(s) for s in stacks) == [1, 2]
    assert sorted(k for s in stacks for k in s) == [0, 1, 2]
    stacks.clear()
    vbnn.compare(x, labels, families=["mf"], folds=3, trials=1, epochs=2, hidden=(4,),
                 test_samples=4)  # fmt: skip
    assert stacks == [[0], [1], [2]]  # tuned learning rates differ: one fold a stack
