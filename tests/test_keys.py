"""Keys of stored results hash what identifies a unit: a new field at its default keeps every key,
a value off its default changes it, and a default that changed its value is an error, never a
silent reuse of what the old default computed."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import pytest

from vbnn.core.contracts import SplitResult
from vbnn.regression.runs import VIConfig
from vbnn.stores import unit_store
from vbnn.stores.keys import first_difference, identity, plain
from vbnn.stores.results_db import ResultsDatabase, ResultsDatabaseError, config_hash


class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    steps: int = 10
    rate: float = 1e-3


@dataclass(frozen=True)
class Settings:
    depth: int
    noise: float = 0.1
    colour: Colour = Colour.RED
    widths: tuple[int, ...] = (50,)
    inner: Inner = field(default_factory=Inner)


@dataclass(frozen=True)
class SettingsWithNewField:  # Settings after a release added a field with a default
    depth: int
    noise: float = 0.1
    colour: Colour = Colour.RED
    widths: tuple[int, ...] = (50,)
    inner: Inner = field(default_factory=Inner)
    jitter: float = 0.0


@dataclass(frozen=True)
class SettingsWithNewDefault:  # Settings after a release changed the default of noise
    depth: int
    noise: float = 0.2
    colour: Colour = Colour.RED
    widths: tuple[int, ...] = (50,)
    inner: Inner = field(default_factory=Inner)


@dataclass(frozen=True, kw_only=True)
class VIConfigWithNewField(VIConfig):
    """VIConfig after a release added a field with a default."""

    warm_start: bool = False


@dataclass(frozen=True, kw_only=True)
class VIConfigWithNewDefault(VIConfig):
    """VIConfig after a release changed the default prior std."""

    prior_std: float = 2.0


def test_identity_drops_defaults_recursively_and_keeps_what_names_the_type() -> None:
    settings = Settings(depth=2, colour=Colour.BLUE, widths=(50, 50), inner=Inner(steps=20))
    assert identity(settings) == {
        "depth": 2, "colour": "blue", "widths": [50, 50], "inner": {"steps": 20}
    }  # fmt: skip
    assert identity(Settings(depth=2)) == {"depth": 2}  # no default: always kept
    assert identity({"settings": Settings(depth=2), 3: (1, 2)}) == {
        "settings": {"depth": 2}, "3": [1, 2]
    }  # fmt: skip
    # TrainConfig.to_dict names the algorithm, which is no field: it stays in the identity
    assert identity(VIConfig()) == {"algorithm": "vi"}
    assert identity(VIConfig(family="gd", hidden=(50, 50))) == {
        "algorithm": "vi", "family": "gd", "hidden": [50, 50]
    }  # fmt: skip
    assert plain(Settings(depth=2)) == {
        "depth": 2, "noise": 0.1, "colour": "red", "widths": [50],
        "inner": {"steps": 10, "rate": 1e-3},
    }  # fmt: skip


def test_a_plain_json_dict_keeps_the_key_it_had_when_every_field_was_hashed() -> None:
    """Stores of plain settings (time to quality, exploration) are not rekeyed: their key is the
    SHA-256 of the whole settings with the key version, as it always was."""
    settings = {"arm": "vbnn-lrt", "seed": 0, "protocol": {"budgets": [20.0, 60.0], "n": 3}}
    text = json.dumps({"key_version": 2, "settings": settings}, sort_keys=True)
    assert unit_store.settings_key(settings) == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert identity(settings) == settings


def test_a_new_field_at_its_default_keeps_the_key_and_a_changed_value_changes_it() -> None:
    old, new = Settings(depth=2), SettingsWithNewField(depth=2)
    assert unit_store.settings_key(old) == unit_store.settings_key(new)
    assert unit_store.settings_key({"unit": old}) == unit_store.settings_key({"unit": new})
    assert unit_store.settings_key(new) != unit_store.settings_key(
        SettingsWithNewField(depth=2, jitter=1e-4)
    )
    assert unit_store.settings_key(old) != unit_store.settings_key(Settings(depth=2, noise=0.3))
    nested = Settings(depth=2, inner=Inner(rate=1e-2))
    assert unit_store.settings_key(old) != unit_store.settings_key(nested)
    # the same for the runs of a results database
    config = VIConfig(family="gd", posterior_std=0.1, iterations=200)
    grown = VIConfigWithNewField(family="gd", posterior_std=0.1, iterations=200)
    assert config_hash(config) == config_hash(grown)
    assert config_hash(config, {"tune": "once"}) == config_hash(grown, {"tune": "once"})
    assert config_hash(grown) != config_hash(
        VIConfigWithNewField(family="gd", posterior_std=0.1, iterations=200, warm_start=True)
    )
    assert config_hash(config) != config_hash(VIConfig(family="gd", posterior_std=0.2,
                                                       iterations=200))  # fmt: skip


def test_a_unit_store_reads_a_unit_across_a_new_field_and_refuses_a_changed_default(
    tmp_path: Path,
) -> None:
    unit_store.save(tmp_path, Settings(depth=2), None, {"gap": 0.5})
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert record["settings"] == plain(Settings(depth=2))  # the full settings are stored
    assert record["identity"] == {"depth": 2}
    assert unit_store.load_info(tmp_path, SettingsWithNewField(depth=2)) == {"gap": 0.5}
    assert unit_store.load_info(tmp_path, SettingsWithNewField(depth=2, jitter=0.1)) is None
    with pytest.raises(unit_store.ChangedDefaultError, match=r"\.json.*'noise'.*0\.1.*0\.2"):
        unit_store.load_info(tmp_path, SettingsWithNewDefault(depth=2))


def test_a_results_database_reads_runs_across_a_new_field_and_refuses_a_changed_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.sqlite"
    config = VIConfig(family="gd", iterations=200)
    result = SplitResult(split=0, test_log_likelihood=-1.0, test_rmse=1.0, train_seconds=0.1)
    with ResultsDatabase(path) as database:
        database.write_results("boston", config, [result])
        grown = VIConfigWithNewField(family="gd", iterations=200)
        assert database.read_results("boston", grown) == [result]
        assert database.missing_splits("boston", [0, 1], grown) == [1]
        changed = VIConfigWithNewDefault(family="gd", iterations=200)
        assert config_hash(changed) == config_hash(config)  # the default is not in the key
        with pytest.raises(ResultsDatabaseError, match=r"results\.sqlite.*split 0.*'prior_std'"):
            database.missing_splits("boston", [0, 1], changed)


def test_a_store_of_another_key_version_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    ResultsDatabase(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE vbnn_meta SET value='2' WHERE name='key_version'")
    connection.close()
    with pytest.raises(ResultsDatabaseError, match=r"old\.sqlite.*key version 2.*move the file"):
        ResultsDatabase(path)
    units = tmp_path / "units"
    units.mkdir()
    (units / "0123456789abcdef.json").write_text(json.dumps({"settings": {"a": 1}, "info": {}}))
    with pytest.raises(unit_store.StaleUnitsError, match=r"units: 1 stored unit"):
        unit_store.load_info(units, {"a": 2})


def test_settings_stored_under_a_key_this_vbnn_does_not_compute_are_refused(tmp_path: Path) -> None:
    """A unit whose full settings equal today's but whose file has another name (keyed by an
    older vbnn) is an error naming the file, not a unit computed again beside it."""
    unit_store.save(tmp_path, Settings(depth=2), None, {"gap": 0.5})
    stored = next(tmp_path.glob("*.json"))
    stored.rename(tmp_path / "00000000000000aa.json")
    with pytest.raises(unit_store.StaleUnitsError, match=r"00000000000000aa\.json"):
        unit_store.load_info(tmp_path, Settings(depth=2))


def test_first_difference_looks_only_at_the_fields_both_have() -> None:
    assert first_difference({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 2, "d": 3}}) is None
    assert first_difference({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 4}}) == "b.c"
    assert first_difference({"w": [1, 2]}, {"w": [1, 3]}) == "w[1]"
    assert first_difference({"w": [1, 2]}, {"w": [1, 2, 3]}) == "w"
