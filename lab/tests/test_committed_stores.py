"""Every committed store reads with today's keys: each results database opens and every stored
run's hyper-parameters rebuild a config whose ``config_hash`` is the stored one; every unit
record's file name is the key of its stored settings as today's code builds them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vbnn.comparison.entries import EntryRun
from vbnn.networks.adapter import LoRA
from vbnn.regression.runs import config_from_dict
from vbnn.stores import unit_store
from vbnn.stores.results_db import ResultsDatabase, config_dict, config_hash
from vbnn.training.natural_gradient import IVON

REPOSITORY = Path(__file__).resolve().parents[2]
STORES = (REPOSITORY / "reproductions", REPOSITORY / "benchmarks" / "results")
DATABASES = sorted(p for folder in STORES for p in folder.glob("**/*.sqlite"))
RECORDS = sorted(
    path
    for folder in STORES
    for path in folder.glob("**/*.json")
    if '"key_version"' in path.read_text()
)


def rebuild(values: dict) -> object:
    """The config a stored run's hyper-parameters describe: a UCI engine's ``TrainConfig`` (it
    names its algorithm) or an entry of ``compare`` on a network (``EntryRun``)."""
    if "algorithm" in values:
        return config_from_dict(values)
    values = dict(values)
    if values.get("ivon") is not None:
        values["ivon"] = IVON(**values["ivon"])
    if values.get("adapter") is not None:  # JSON lists back to the LoRA's tuples
        fields = values["adapter"].items()
        values["adapter"] = LoRA(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields})
    return EntryRun(**values)


def test_the_committed_stores_are_found() -> None:
    assert len(DATABASES) >= 3 and len(RECORDS) >= 300


@pytest.mark.parametrize("path", DATABASES, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_every_stored_run_rebuilds_its_config_and_key(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / path.name  # opened as a copy: reading leaves the committed file alone
    shutil.copyfile(path, copy)
    with ResultsDatabase(copy) as database:
        rows = database.connection.execute(
            "SELECT dataset, split, method, config_hash, seed, hyperparameters FROM runs"
        ).fetchall()
        assert rows
        for dataset, split, method, stored_hash, seed, text in rows:
            values = json.loads(text)
            extra = values.pop("extra", None)
            config = rebuild(values)
            today = config_dict(config)
            if isinstance(config, EntryRun):  # a run stored before a field was added lacks it
                today = {k: v for k, v in today.items() if k in values}
            assert today == values, f"{path}: {dataset} split {split} {method}"
            assert (config.method, config.seed) == (method, seed)
            assert config_hash(config, extra) == stored_hash, f"{path}: {dataset} {method}"
            assert split in database.stored_splits(dataset, config, extra)


def today_settings(path: Path, settings: dict):
    """The settings today's code keys the unit at ``path`` by, rebuilt from its record."""
    relative = path.relative_to(REPOSITORY).as_posix()
    if relative.startswith("reproductions/depth/"):
        pytest.importorskip("numpyro")
        from vbnn_lab.depth.units import UnitSettings

        return UnitSettings.from_dict(settings)
    if relative.startswith("reproductions/variance-networks/"):
        from vbnn_lab.variance_networks.budget import Budget
        from vbnn_lab.variance_networks.runs import NetworkRun, run_key

        budget = Budget(**settings["budget"])
        return run_key(NetworkRun(settings["name"], budget, settings["seed"], settings["device"]))
    return settings  # plain JSON settings (exploration, time to quality)


@pytest.mark.parametrize(
    "folder",
    sorted({p.parent for p in RECORDS}),
    ids=lambda p: str(p.relative_to(REPOSITORY)),
)
def test_every_unit_record_is_named_by_the_key_of_its_settings(folder: Path) -> None:
    for path in sorted(p for p in RECORDS if p.parent == folder):
        record = json.loads(path.read_text())
        assert record["key_version"] == unit_store.KEY_VERSION, path
        settings = today_settings(path, record["settings"])
        assert unit_store.settings_key(settings) == path.stem, path
        assert unit_store.load_info(folder, settings) == record["info"], path
