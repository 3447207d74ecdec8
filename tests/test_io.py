"""Saved models: exact round trip for every method, clear errors for bad folders; atomic writes
and unit claims."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from vbnn.core.contracts import ForwardMode
from vbnn.data.splits import StackedSplits
from vbnn.regression.engine import train_stack
from vbnn.regression.methods import method_config, taken_by
from vbnn.regression.runs import TABLE1_METHODS
from vbnn.regression.saved_models import ModelFileError, load_model, save_model
from vbnn.regression.stack import build_stack
from vbnn.stores import unit_store
from vbnn.stores.atomic import write_atomic, write_folder_atomic


def _toy_splits(keys: tuple[int, ...] = (4, 7)) -> StackedSplits:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(len(keys), 40, 3, generator=generator)
    y = torch.sin(x.sum(-1)) + 0.1 * torch.randn(len(keys), 40, generator=generator)
    return StackedSplits(keys, x[:, :30], y[:, :30], x[:, 30:], y[:, 30:], torch.ones(len(keys)))


@pytest.mark.parametrize("method", TABLE1_METHODS)
def test_round_trip_gives_identical_parameters_and_predictions(method: str, tmp_path: Path) -> None:
    noise_std = 0.3 if method == "gd" else None  # a fixed noise std is a buffer, not a param
    values = {"hidden": (6,), "iterations": 15, "posterior_std": 0.05, "noise_std": noise_std,
              "test_samples": 3}  # fmt: skip
    config = method_config(method, **taken_by(method, values))
    data = _toy_splits()
    trained = train_stack(config, data)
    folder = save_model(
        tmp_path / "model", trained.model, trained.likelihood, config, 3, data.split_ids,
        dataset="toy", metadata={"note": "test"},
    )  # fmt: skip
    loaded = load_model(folder)
    assert loaded.config == config and loaded.keys == (4, 7) and loaded.dataset == "toy"
    assert loaded.metadata == {"note": "test"}
    before = {**trained.model.state_dict(), **trained.likelihood.state_dict()}
    after = {**loaded.model.state_dict(), **loaded.likelihood.state_dict()}
    assert before.keys() == after.keys()
    for name, value in before.items():
        assert torch.equal(value, after[name]), name
    fresh, _ = build_stack(config, 3, data.split_ids)  # the load really replaced the init
    assert not torch.equal(
        fresh.layers[0].posterior_mean()[0], loaded.model.layers[0].posterior_mean()[0]
    )
    with torch.no_grad():
        assert torch.equal(
            trained.model(data.x_test, ForwardMode.MEAN),
            loaded.model(data.x_test, ForwardMode.MEAN),
        )


def test_saving_again_replaces_the_model_atomically(tmp_path: Path) -> None:
    config = method_config("map", hidden=(4,), iterations=5)
    first, likelihood = build_stack(config, 3, [0])
    save_model(tmp_path / "m", first, likelihood, config, 3, [0])
    second_config = method_config("map", hidden=(4,), iterations=5, seed=1)
    second, likelihood = build_stack(second_config, 3, [0])
    save_model(tmp_path / "m", second, likelihood, second_config, 3, [0])
    assert load_model(tmp_path / "m").config.seed == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no staging folders left


def test_missing_and_mismatched_files_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"model\.json: not found"):
        load_model(tmp_path / "nothing")
    config = method_config("mf", hidden=(4,), iterations=5)
    model, likelihood = build_stack(config, 3, [0])
    folder = save_model(tmp_path / "m", model, likelihood, config, 3, [0])
    description = json.loads((folder / "model.json").read_text())
    description["config"]["hidden"] = [5]  # the config no longer matches the stored tensors
    (folder / "model.json").write_text(json.dumps(description))
    with pytest.raises(ModelFileError, match="do not fit"):
        load_model(folder)
    (folder / "model.json").write_text(json.dumps({**description, "format": "other"}))
    with pytest.raises(ModelFileError, match="format"):
        load_model(folder)
    (folder / "state.pt").unlink()
    with pytest.raises(ModelFileError, match=r"state\.pt: not found"):
        load_model(folder)
    with pytest.raises(ValueError, match="2 keys for a stack of 1"):
        save_model(tmp_path / "x", model, likelihood, config, 3, [0, 1])


def test_atomic_writes_keep_the_old_version_when_writing_fails(tmp_path) -> None:
    target = write_atomic(tmp_path / "sub" / "table.csv", "a,b\n1,2\n")
    assert target.read_text() == "a,b\n1,2\n" and oct(target.stat().st_mode & 0o777) == "0o644"

    def half_then_crash(path) -> None:
        path.write_text("a,b\n3")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        write_atomic(target, half_then_crash)
    assert target.read_text() == "a,b\n1,2\n"
    folder = write_folder_atomic(tmp_path / "model", lambda p: (p / "x.json").write_text("{}"))
    with pytest.raises(RuntimeError, match="killed"):
        write_folder_atomic(folder, lambda staging: half_then_crash(staging / "x.json"))
    assert (folder / "x.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["model", "sub", "table.csv", "x.json"]


def test_a_unit_claim_holds_while_its_process_lives(tmp_path) -> None:
    """``unit_store.claim``: one process holds a unit; a live process's claim is respected, an
    ended one's taken over; ``release`` drops it."""
    settings = {"unit": 1}
    path = tmp_path / f"{unit_store.settings_key(settings)}.claim"
    assert unit_store.claim(tmp_path, settings) and unit_store.claim(tmp_path, settings)
    unit_store.release(tmp_path, settings)
    assert not path.exists()
    host = socket.gethostname()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        path.write_text(f"{host} {alive.pid}")
        assert not unit_store.claim(tmp_path, settings)
        path.write_text(f"another-host {alive.pid}")  # cannot be checked: respected
        assert not unit_store.claim(tmp_path, settings)
        alive.kill()
        alive.wait()
        path.write_text(f"{host} {alive.pid}")
        assert unit_store.claim(tmp_path, settings)  # its process ended: taken over
    assert path.read_text().split()[1] == str(os.getpid())
    # the stored unit is unaffected by its claim file: it is not read as a unit
    unit_store.save(tmp_path, settings, None, {"x": 1})
    assert unit_store.load(tmp_path, settings) == (None, {"x": 1})


def test_a_removed_unit_is_gone_and_its_neighbours_stay(tmp_path) -> None:
    kept, gone = {"unit": 1}, {"unit": 2}
    for settings in (kept, gone):
        unit_store.save(tmp_path, settings, {"a": np.arange(3)}, {"x": settings["unit"]})
    unit_store.remove(tmp_path, gone)
    unit_store.remove(tmp_path, gone)  # none is fine
    assert unit_store.load(tmp_path, gone) is None
    assert unit_store.load(tmp_path, kept)[1] == {"x": 1}
    assert len(list(tmp_path.iterdir())) == 2  # the kept unit's record and arrays


def test_a_units_info_is_read_without_its_arrays(tmp_path) -> None:
    settings = {"unit": 1}
    unit_store.save(tmp_path, settings, {"a": np.arange(3)}, {"drawn": 7})
    assert unit_store.load_info(tmp_path, {"unit": 2}) is None
    (tmp_path / f"{unit_store.settings_key(settings)}.npz").unlink()
    assert unit_store.load_info(tmp_path, settings) == {"drawn": 7}  # the arrays are not read
    with pytest.raises(ValueError, match=r"arrays .* are missing"):
        unit_store.load(tmp_path, settings)
    record = tmp_path / f"{unit_store.settings_key(settings)}.json"
    record.write_text(record.read_text().replace('"unit": 1', '"unit": 3'))
    with pytest.raises(ValueError, match="stored settings differ"):
        unit_store.load_info(tmp_path, settings)
