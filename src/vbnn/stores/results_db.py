"""Results database: every finished run in SQLite, so a killed sweep resumes and loses nothing.

One file holds the table ``runs`` (one row per dataset x split x method x configuration x seed)
and, through :func:`optuna_storage`, Optuna's own tables (``studies``, ``trials``, ...; none
named ``runs``), so the tuning of a method and the results it produced travel together.

A run's configuration is identified by :func:`config_hash`: a SHA-256 of the identity of its
config (``stores.keys.identity``: the fields that differ from their defaults, and the algorithm) as
sorted JSON, leaving out ``seed`` (a key column of its own), ``chunk_size`` (every model draws from
its own random streams, so chunking never changes a number), ``compile`` and ``device`` (float
rounding only). A new config field with a default therefore keeps every stored key. The full
hyper-parameters (``TrainConfig.to_dict``) are stored beside each run; a run found by its key whose
stored hyper-parameters disagree with today's config on a field both have (a default that changed
its value) is an error naming the file and the field. The UNIQUE key (dataset, split, method,
config_hash, seed) makes a second write of the same run an error instead of a duplicate;
``regression.engine.run_splits(database=...)`` asks :meth:`ResultsDatabase.missing_splits` first and
trains only those, writing every finished chunk in one transaction.

The file records the version of this key scheme (``KEY_VERSION``, table ``vbnn_meta``; the Optuna
study names of ``regression.tuning.study_name`` belong to it). A file of another version is refused
with a message naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from vbnn.core.contracts import SplitResult
from vbnn.stores.keys import first_difference, identity, plain

# Execution settings, not part of what a run is: chunking never changes a number; compiling
# changes the last digits only, like the thread count (which is not recorded either).
LEFT_OUT_OF_HASH = ("seed", "chunk_size", "compile", "device")
# The version of the run keys and study names; raise it with every change of either (a file of
# another version is refused).
KEY_VERSION = 3
META_SCHEMA = "CREATE TABLE IF NOT EXISTS vbnn_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
RUN_COLUMNS = (
    "id", "dataset", "split", "method", "config_hash", "seed", "hyperparameters",
    "code_version", "metrics", "test_log_likelihood", "test_rmse", "wall_seconds", "created_at",
)  # fmt: skip
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    dataset TEXT NOT NULL,
    split INTEGER NOT NULL,
    method TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    seed INTEGER NOT NULL,
    hyperparameters TEXT NOT NULL,
    code_version TEXT NOT NULL,
    metrics TEXT NOT NULL,
    test_log_likelihood REAL,
    test_rmse REAL,
    wall_seconds REAL NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (dataset, split, method, config_hash, seed)
)
"""


class ResultsDatabaseError(RuntimeError):
    """The file is not a vbnn results database (corrupt, another program's, or of another key
    version), or a stored run disagrees with today's config; names the path."""


def config_dict(config: Any) -> dict[str, Any]:
    """The hyper-parameters of a frozen config (TrainConfig or any dataclass) as plain JSON,
    every field included (``TrainConfig.to_dict``, the algorithm included)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return plain(config)
    raise TypeError(f"config: expected a dataclass config, got {type(config).__name__}")


def config_hash(config: Any, extra: Mapping[str, Any] | None = None) -> str:
    """16 hex digits of SHA-256 over the sorted JSON of the config's identity (its fields that
    differ from their defaults, and its algorithm; without seed, chunk size, compile, device).

    ``extra`` (e.g. ``{"tune": "per-split"}``) is hashed with it, to tell apart runs whose
    configs match but whose provenance differs.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config: expected a dataclass config, got {type(config).__name__}")
    values = {k: v for k, v in identity(config).items() if k not in LEFT_OUT_OF_HASH}
    if extra:
        values["extra"] = identity(dict(extra))
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@cache
def code_version() -> str:
    """'vbnn <version> (git <describe>)', the git part only inside a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = f"vbnn {version('vbnn')}"
    except PackageNotFoundError:
        text = "vbnn (not installed)"
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return text
    return f"{text} (git {described})"


class ResultsDatabase:
    """The SQLite file of finished runs (WAL mode, so a reader never blocks the writer).

    Args:
        path: the database file; created with its folder when missing.

    Raises:
        ResultsDatabaseError: the file is not SQLite, is damaged, or has a ``runs`` table that
            is not this schema.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise ResultsDatabaseError(f"{self.path}: not a file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.connection = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.connection.execute("PRAGMA journal_mode=WAL")
            self.connection.execute("PRAGMA synchronous=NORMAL")
            self.connection.execute(SCHEMA)
            columns = [row[1] for row in self.connection.execute("PRAGMA table_info(runs)")]
        except sqlite3.DatabaseError as error:
            raise ResultsDatabaseError(
                f"{self.path}: not a usable results database ({error}); move it aside or pass "
                "another path"
            ) from None
        if tuple(columns) != RUN_COLUMNS:
            self.connection.close()
            raise ResultsDatabaseError(
                f"{self.path}: has a 'runs' table with columns {columns}, not the vbnn schema "
                f"{list(RUN_COLUMNS)}: another program's database?"
            )
        version = self.key_version()
        if version != KEY_VERSION:
            self.connection.close()
            raise ResultsDatabaseError(
                f"{self.path}: its runs and studies are keyed by vbnn's key version {version}, "
                f"this vbnn reads version {KEY_VERSION} only; move the file aside to start anew, "
                "or read it with the vbnn that wrote it"
            )

    def key_version(self) -> int:
        """The key version of the file's runs and studies; a new file gets ``KEY_VERSION``, and
        one with runs or studies but no record of it is version 1."""
        self.connection.execute(META_SCHEMA)
        row = self.connection.execute(
            "SELECT value FROM vbnn_meta WHERE name='key_version'"
        ).fetchone()
        if row is not None:
            return int(row[0])
        tables = {r[0] for r in self.connection.execute("SELECT name FROM sqlite_master")}
        studies = (
            "studies" in tables
            and self.connection.execute("SELECT COUNT(*) FROM studies").fetchone()[0]
        )
        runs = self.connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        if runs or studies:
            return 1
        self.set_key_version(KEY_VERSION)
        return KEY_VERSION

    def set_key_version(self, version: int) -> None:
        self.connection.execute(
            "INSERT OR REPLACE INTO vbnn_meta (name, value) VALUES ('key_version', ?)",
            (str(version),),
        )

    def __enter__(self) -> ResultsDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.connection.close()

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: 'ok' for an intact file."""
        return "; ".join(row[0] for row in self.connection.execute("PRAGMA integrity_check"))

    def stored_splits(
        self, dataset: str, config: Any, extra: Mapping[str, Any] | None = None
    ) -> set[int]:
        """Splits of ``dataset`` already stored for this method, configuration and seed."""
        return {split for split, _, _ in self._runs(dataset, config, extra)}

    def has_run(
        self, dataset: str, split: int, config: Any, extra: Mapping[str, Any] | None = None
    ) -> bool:
        return split in self.stored_splits(dataset, config, extra)

    def missing_splits(
        self,
        dataset: str,
        split_ids: Iterable[int],
        config: Any,
        extra: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The requested splits not yet stored, in the requested order."""
        stored = self.stored_splits(dataset, config, extra)
        return [k for k in split_ids if k not in stored]

    def write_results(
        self,
        dataset: str,
        config: Any,
        results: Sequence[SplitResult],
        extra: Mapping[str, Any] | None = None,
        metrics: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        """Store finished splits in one transaction (all or none of them).

        ``metrics`` maps a split to further metrics stored beside the test LL and RMSE.

        Raises:
            sqlite3.IntegrityError: a run with the same key is already stored.
        """
        hyperparameters = json.dumps(_hyperparameters(config, extra), sort_keys=True)
        key = (dataset, _method(config), config_hash(config, extra), int(config.seed))
        created = datetime.now(UTC).isoformat(timespec="seconds")
        rows = []
        for result in results:
            values = {
                "test_log_likelihood": result.test_log_likelihood,
                "test_rmse": result.test_rmse,
                "stopped_iteration": result.stopped_iteration,
                **dict((metrics or {}).get(result.split, {})),
            }
            rows.append(
                (key[0], result.split, *key[1:], hyperparameters, code_version(),
                 json.dumps(values), result.test_log_likelihood, result.test_rmse,
                 result.train_seconds, created)
            )  # fmt: skip
        with self.connection:  # BEGIN ... COMMIT, ROLLBACK on error
            self.connection.execute("BEGIN IMMEDIATE")
            self.connection.executemany(
                "INSERT INTO runs (dataset, split, method, config_hash, seed, hyperparameters, "
                "code_version, metrics, test_log_likelihood, test_rmse, wall_seconds, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def read_results(
        self,
        dataset: str,
        config: Any,
        split_ids: Iterable[int] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> list[SplitResult]:
        """Stored splits of this configuration (all, or those in ``split_ids``), by split."""
        wanted = None if split_ids is None else set(split_ids)
        out = []
        for split, values, seconds in self._runs(dataset, config, extra):
            if wanted is not None and split not in wanted:
                continue
            out.append(
                SplitResult(
                    split=int(split),
                    test_log_likelihood=values["test_log_likelihood"],
                    test_rmse=values["test_rmse"],
                    train_seconds=float(seconds),
                    stopped_iteration=values.get("stopped_iteration"),
                )
            )
        return out

    def read_metrics(
        self,
        dataset: str,
        config: Any,
        split_ids: Iterable[int] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Every stored metric of this configuration's splits (all, or ``split_ids``), by split."""
        wanted = None if split_ids is None else set(split_ids)
        return {
            split: values
            for split, values, _ in self._runs(dataset, config, extra)
            if wanted is None or split in wanted
        }

    def _runs(
        self, dataset: str, config: Any, extra: Mapping[str, Any] | None
    ) -> list[tuple[int, dict[str, Any], float]]:
        """(split, metrics, wall seconds) of the runs stored under this configuration's key, by
        split.

        Raises:
            ResultsDatabaseError: a run's stored hyper-parameters differ from ``config``'s on a
                field both have (a default that changed its value: the key is the same, the run
                is not); names the file and the field.
        """
        rows = self.connection.execute(
            "SELECT split, hyperparameters, metrics, wall_seconds FROM runs WHERE dataset=? "
            "AND method=? AND config_hash=? AND seed=? ORDER BY split",
            (dataset, _method(config), config_hash(config, extra), int(config.seed)),
        ).fetchall()
        today = _hyperparameters(config, extra)
        for name in LEFT_OUT_OF_HASH:
            today.pop(name, None)
        for split, stored, _, _ in rows:
            field = first_difference(json.loads(stored), today)
            if field is not None:
                raise ResultsDatabaseError(
                    f"{self.path}: the stored {dataset} split {split} run of this "
                    f"{_method(config)} configuration has other hyper-parameters at {field!r} "
                    "than today's config (a default changed its value, so the key is the same "
                    "but the run is not); move the file aside to compute the runs anew"
                )
        return [(int(split), json.loads(metrics), float(s)) for split, _, metrics, s in rows]

    def runs_frame(self) -> pd.DataFrame:
        """Every stored run as a DataFrame (one row per run)."""
        return pd.read_sql_query("SELECT * FROM runs ORDER BY id", self.connection)


def _hyperparameters(config: Any, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a run stores of its settings: the config's every field, and ``extra``."""
    values = config_dict(config)
    if extra:
        values["extra"] = plain(dict(extra))
    return values


def _method(config: Any) -> str:
    method = getattr(config, "method", None)
    if method is None:
        raise TypeError(f"config {type(config).__name__} has no 'method'")
    return method.value if isinstance(method, Enum) else str(method)


def optuna_storage(path: str | Path) -> Any:
    """An ``optuna.storages.RDBStorage`` on the same SQLite file as the results.

    The vbnn schema is created (and the file checked) first; Optuna then adds its own tables.
    """
    import optuna

    ResultsDatabase(path).close()
    return optuna.storages.RDBStorage(
        f"sqlite:///{Path(path).resolve()}", engine_kwargs={"connect_args": {"timeout": 30}}
    )
