"""Stored results of an older key version: refused with the command that migrates them, and read
as the current version's once migrated."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch

from vbnn.core.runs import SplitResult
from vbnn.migrate import main as migrate
from vbnn.migrate import new_study_name
from vbnn.regression.methods import method_config
from vbnn.regression.saved_models import ModelFileError, load_model, save_model
from vbnn.regression.stack import build_stack
from vbnn.regression.tuning import study_name
from vbnn.stores import unit_store
from vbnn.stores.results_db import SCHEMA, ResultsDatabase, ResultsDatabaseError

# A version-1 TrainConfig.to_dict of GD (every algorithm's fields, "method" naming it).
OLD_GD = {
    "method": "gd", "hidden": [50], "activation": "tanh", "iterations": 5000,
    "learning_rate": 0.005, "cholesky_learning_rate": None, "betas": [0.9, 0.99],
    "prior_std": 0.64, "posterior_std": 0.043, "noise_std": None, "noise_std_init": 1.0,
    "kl_weight": 1.0, "train_samples": 1, "test_samples": 100, "validation_fraction": 0.1,
    "eval_every": 10, "burn_in": None, "thinning": None, "step_size": 0.05, "step_decay": 0.55,
    "decay_steps": 1000, "batch_size": None, "seed": 0, "chunk_size": None, "dtype": "float32",
    "compile": False, "device": "cpu",
}  # fmt: skip


def _old_database(path: Path) -> None:
    """A version-1 file: one GD run with a tuning extra, and two studies."""
    connection = sqlite3.connect(path)
    connection.execute(SCHEMA)
    extra = {"tune": "once", "values": {"prior_std": 0.64}}
    metrics = {"test_log_likelihood": -2.5, "test_rmse": 3.0, "stopped_iteration": None}
    connection.execute(
        "INSERT INTO runs (dataset, split, method, config_hash, seed, hyperparameters, "
        "code_version, metrics, test_log_likelihood, test_rmse, wall_seconds, created_at) "
        "VALUES ('boston', 3, 'gd', 'deadbeefdeadbeef', 0, ?, 'old', ?, -2.5, 3.0, 1.0, 'then')",
        (json.dumps({**OLD_GD, "extra": extra}), json.dumps(metrics)),
    )
    old_fc = {**OLD_GD, "method": "fc"}  # stored before FC named its factor: L = diag(s) + A
    connection.execute(
        "INSERT INTO runs (dataset, split, method, config_hash, seed, hyperparameters, "
        "code_version, metrics, test_log_likelihood, test_rmse, wall_seconds, created_at) "
        "VALUES ('boston', 3, 'fc', 'feedfacefeedface', 0, ?, 'old', ?, -3.5, 4.0, 1.0, 'then')",
        (json.dumps(old_fc), json.dumps(metrics)),
    )
    connection.commit()
    connection.close()
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    for name in (
        "boston/split0/fc/seed0/scaled-unit",
        "boston/split0/sgld/seed1/hidden50x50/step-size",
    ):
        optuna.create_study(study_name=name, storage=storage)
    storage.engine.dispose()


def test_an_old_results_database_is_refused_then_migrated(tmp_path: Path, capsys) -> None:
    path = tmp_path / "results.sqlite"
    _old_database(path)
    with pytest.raises(ResultsDatabaseError, match=r"key version 1.*python -m vbnn.migrate"):
        ResultsDatabase(path)
    assert migrate([str(path)]) == 0
    assert "1 runs re-keyed, 2 studies renamed, 1 superseded runs moved to superseded_runs" in (
        capsys.readouterr().out
    )
    with sqlite3.connect(path) as connection:
        aside = connection.execute("SELECT method, reason FROM superseded_runs").fetchall()
    assert aside == [("fc", "FC with the factor L = diag(s) + A, no longer implemented")]
    config = method_config("gd", prior_std=0.64, posterior_std=0.043)
    extra = {"tune": "once", "values": {"prior_std": 0.64}}
    with ResultsDatabase(path) as database:
        assert database.read_results("boston", config, extra=extra) == [
            SplitResult(3, -2.5, 3.0, 1.0)
        ]
        assert database.missing_splits("boston", [3, 4], config, extra) == [4]
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    storage.engine.dispose()
    fc, sgld = method_config("fc"), method_config("sgld", hidden=(50, 50))
    assert names == {study_name("boston", 0, fc, 0), study_name("boston", 0, sgld, 1)}
    assert migrate([str(path)]) == 0  # a second run changes nothing
    assert "already key version 2" in capsys.readouterr().out


def test_old_study_names_map_to_one_pattern() -> None:
    assert (
        new_study_name("yacht/split3/vi-vd-layer/seed0") == "yacht/split3/vd-layer/hidden50/seed0"
    )
    assert (
        new_study_name("yacht/split3/es/seed2/hidden50x50") == "yacht/split3/es/hidden50x50/seed2"
    )
    assert new_study_name("yacht/split3/fc/seed0") == "superseded/yacht/split3/fc/seed0"
    assert new_study_name("yacht/split3/sgld/seed0") == "superseded/yacht/split3/sgld/seed0"
    assert new_study_name("a study of someone else's") is None


def test_an_old_unit_store_is_refused_then_rekeyed(tmp_path: Path) -> None:
    settings = {"depth": 2, "chains": {"count": 4}, "pretrain": {"posterior_std": 1e-6},
                "points": 1000}  # fmt: skip
    old_key = "0123456789abcdef"  # version 1 keys hashed the settings alone
    record = {"settings": settings, "info": {"rhat": 1.01}, "arrays": True}
    (tmp_path / f"{old_key}.json").write_text(json.dumps(record))
    np.savez(tmp_path / f"{old_key}.npz", samples=np.arange(3.0))
    new_settings = {"depth": 2, "chains": {"count": 4}, "pretrain": {"init_std": 1e-6},
                    "points": 1000, "sampler": "nuts"}  # fmt: skip
    with pytest.raises(unit_store.StaleUnitsError, match=r"python -m vbnn\.migrate"):
        unit_store.load(tmp_path, new_settings)
    assert migrate([str(tmp_path)]) == 0
    arrays, info = unit_store.load(tmp_path, new_settings)
    np.testing.assert_array_equal(arrays["samples"], np.arange(3.0))
    assert info == {"rhat": 1.01, "points": 1000, "sampler": "nuts"}
    assert not (tmp_path / f"{old_key}.json").exists()


def test_an_old_saved_model_is_refused_then_rewritten(tmp_path: Path) -> None:
    config = method_config("gd", hidden=(4,), posterior_std=0.043, prior_std=0.64)
    model, likelihood = build_stack(config, 3, [0])
    folder = save_model(tmp_path / "model", model, likelihood, config, 3, [0])
    description = json.loads((folder / "model.json").read_text())
    description.update(format_version=2, config={**OLD_GD, "hidden": [4]})
    (folder / "model.json").write_text(json.dumps(description))
    with pytest.raises(ModelFileError, match=r"version 2.*python -m vbnn.migrate"):
        load_model(folder)
    assert migrate([str(folder)]) == 0
    loaded = load_model(folder)
    assert loaded.config == config
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], value)


def test_a_configuration_stored_under_two_old_keys_keeps_its_newest_run(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    connection = sqlite3.connect(path)
    connection.execute(SCHEMA)
    metrics = {"test_log_likelihood": -2.5, "test_rmse": 3.0, "stopped_iteration": None}
    # the same GD run twice: version 1 hashed fields that version 2 no longer holds
    for key, created, ll in [
        ("aaaaaaaaaaaaaaaa", "2026-01-01", -2.0),
        ("bbbbbbbbbbbbbbbb", "2026-02-01", -1.5),
    ]:
        connection.execute(
            "INSERT INTO runs (dataset, split, method, config_hash, seed, hyperparameters, "
            "code_version, metrics, test_log_likelihood, test_rmse, wall_seconds, created_at) "
            "VALUES ('boston', 3, 'gd', ?, 0, ?, 'old', ?, ?, 3.0, 1.0, ?)",
            (
                key,
                json.dumps(OLD_GD),
                json.dumps({**metrics, "test_log_likelihood": ll}),
                ll,
                created,
            ),
        )
    connection.commit()
    connection.close()
    assert migrate([str(path)]) == 0
    with sqlite3.connect(path) as connection:
        aside = connection.execute("SELECT reason FROM superseded_runs").fetchall()
    assert aside == [("an earlier run of the same configuration",)]
    config = method_config("gd", prior_std=0.64, posterior_std=0.043)
    with ResultsDatabase(path) as database:
        assert database.read_results("boston", config) == [SplitResult(3, -1.5, 3.0, 1.0)]


def test_unit_settings_of_every_experiment_are_rekeyed_or_left_when_superseded(
    tmp_path: Path,
) -> None:
    old = {
        "pyro": {"depth": 1, "nuts": {"warmup": 10}, "pretrain": {}},  # no current settings
        "cell": {"environment": "cartpole", "policy": "weights", "seeds": 3},
        "network": {"name": "toy", "budget": {}, "config": "LeNetConfig(family='deterministic')",
                    "seed": 0},
    }  # fmt: skip
    for name, settings in old.items():
        record = {"settings": settings, "info": {"name": name}, "arrays": False}
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    assert migrate([str(tmp_path)]) == 0
    assert (tmp_path / "pyro.json").exists()  # left as it is: it reads as stale
    cell = {**old["cell"], "baseline": "episode"}
    network = {**old["network"], "config": "LeNetConfig(family='point')", "device": "cpu"}
    assert unit_store.load(tmp_path / "cells", cell) is None  # another folder: nothing there
    with pytest.raises(unit_store.StaleUnitsError):
        unit_store.load(tmp_path, {"depth": 1, "chains": {}, "pretrain": {}, "sampler": "nuts"})
    assert not (tmp_path / "cell.json").exists() and not (tmp_path / "network.json").exists()
    for settings, name in [(cell, "cell"), (network, "network")]:
        record = json.loads((tmp_path / f"{unit_store.settings_key(settings)}.json").read_text())
        assert record["settings"] == settings and record["info"] == {"name": name}
