"""``GRID.toml``: a user's sweep over the UCI regression engine (docs/sweeps.md has the format).

A grid is data sets x methods x hyper-parameter combinations x seeds,
each trained on the chosen splits and stored in the results database, one row per split. With a
``[search]`` table, each (data set, method, hyper-parameters, seed) is first tuned by Optuna on
validation rows carved from one split's training rows (``regression.tuning.tune``; several
workers share one study through a journal file or an RDB URL), then evaluated on the splits with
the values found.

    [grid]
    datasets = ["yacht"]
    methods = ["map", "mf", "vd-layer"]  # es, map, sgld, or a family name (fitted by VI)
    seeds = [0, 1]
    splits = "0-4"                   # default: every split of the data set
    splits_per_unit = 5              # splits a unit trains as one stack (default: the engine's)

    [grid.hyperparameters]           # config fields -> values; every combination; a method
                                     # takes those its config has (no prior_std for es)
    iterations = [1000]
    prior_std = [0.5, 1.0]
"""

from __future__ import annotations

import argparse
import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vbnn.data.splits import parse_splits
from vbnn.data.uci import DATASETS
from vbnn.layers.registry import FAMILIES
from vbnn.regression.methods import method_config, method_fields, method_names
from vbnn.regression.runs import TrainConfig
from vbnn.stores.results_db import LEFT_OUT_OF_HASH

GRID_KEYS = {
    "datasets",
    "methods",
    "seeds",
    "splits",
    "splits_per_unit",
    "hyperparameters",
}
SEARCH_KEYS = {"trials", "batch", "workers", "storage", "split", "validation_fraction"}
SET_BY_GRID = {"family", "seed"}  # config fields the grid sets itself


class GridError(ValueError):
    """A GRID.toml that cannot be read or holds a bad entry; names the file and the key."""


@dataclass(frozen=True)
class Search:
    """The ``[search]`` table: an Optuna search (``regression.tuning``) before evaluation.

    Attributes:
        trials: candidates per study, shared by its workers.
        batch: candidates a worker trains together as one stack.
        workers: units that work on one study at once.
        storage: a journal file (relative to ``--out``) or an RDB URL (``postgresql://...``).
        split: the split whose training rows are carved into fit and validation parts.
        validation_fraction: share of those rows held out as the objective.
    """

    trials: int = 20
    batch: int = 5
    workers: int = 1
    storage: str = "optuna.journal"
    split: int = 0
    validation_fraction: float = 0.2


@dataclass(frozen=True)
class Grid:
    """A parsed GRID.toml: every run it asks for is one (data set, TrainConfig) of ``runs()``."""

    path: Path
    datasets: tuple[str, ...]
    configs: tuple[TrainConfig, ...]
    splits: tuple[int, ...] | None
    splits_per_unit: int | None
    search: Search | None

    def runs(self) -> list[tuple[str, TrainConfig]]:
        return [(dataset, config) for dataset in self.datasets for config in self.configs]


def _list(table: dict[str, Any], key: str, path: Path, default: list | None = None) -> list:
    value = table.get(key, default)
    if not isinstance(value, list) or not value:
        raise GridError(f"{path}: [grid] {key} must be a non-empty list, got {value!r}")
    return value


def _combinations(
    hyperparameters: dict[str, Any], methods: list[str], path: Path
) -> list[dict[str, Any]]:
    known = set().union(*(method_fields(m) for m in methods)) - SET_BY_GRID
    for name, values in hyperparameters.items():
        if name not in known:
            raise GridError(
                f"{path}: [grid.hyperparameters] {name!r} is not a setting of methods "
                f"{methods}; choose from {sorted(known)}"
            )
        if not isinstance(values, list) or not values:
            raise GridError(
                f"{path}: [grid.hyperparameters] {name} must be a non-empty list of "
                f"values, got {values!r}"
            )
        if name in LEFT_OUT_OF_HASH and len(values) > 1:
            raise GridError(
                f"{path}: [grid.hyperparameters] {name} takes one value, got {values!r}: runs "
                "that differ only in it are stored under one key (stores.results_db)"
            )
    names = list(hyperparameters)
    return [
        dict(zip(names, chosen, strict=True))
        for chosen in itertools.product(*(hyperparameters[n] for n in names))
    ]


def _configs(table: dict[str, Any], path: Path) -> list[TrainConfig]:
    methods = _list(table, "methods", path)
    unknown = [m for m in methods if m not in method_names()]
    if unknown:
        raise GridError(f"{path}: [grid] methods {unknown}: choose from es, map, sgld or a "
                        f"family fitted by VI: {list(FAMILIES)}")  # fmt: skip
    seeds = _list(table, "seeds", path, [0])
    if not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise GridError(f"{path}: [grid] seeds must be integers >= 0, got {seeds}")
    combinations = _combinations(table.get("hyperparameters", {}), methods, path)
    configs: list[TrainConfig] = []
    for method, values, seed in itertools.product(methods, combinations, seeds):
        taken = {k: v for k, v in values.items() if k in method_fields(method)}
        try:
            config = method_config(method, seed=seed, **taken)
        except (TypeError, ValueError) as error:
            raise GridError(f"{path}: {method} with {taken}: {error}") from None
        if config not in configs:  # a method that takes none of a varied setting runs once
            configs.append(config)
    return configs


def _search(table: dict[str, Any] | None, path: Path) -> Search | None:
    if table is None:
        return None
    unknown = sorted(set(table) - SEARCH_KEYS)
    if unknown:
        raise GridError(f"{path}: [search] unknown keys {unknown}; known: {sorted(SEARCH_KEYS)}")
    try:
        search = Search(**table)
    except TypeError as error:
        raise GridError(f"{path}: [search] {error}") from None
    if min(search.trials, search.batch, search.workers) < 1 or search.split < 0:
        raise GridError(f"{path}: [search] trials, batch, workers must be >= 1, split >= 0")
    return search


def parse_grid(text: str, path: Path) -> Grid:
    """A Grid from the TOML ``text`` of the file ``path`` (named in every error)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GridError(f"{path}: not valid TOML ({error})") from None
    unknown = sorted(set(document) - {"grid", "search"})
    if unknown or "grid" not in document:
        raise GridError(
            f"{path}: expected tables [grid] and optionally [search], got {sorted(document)}"
        )
    table = document["grid"]
    unknown = sorted(set(table) - GRID_KEYS)
    if unknown:
        raise GridError(f"{path}: [grid] unknown keys {unknown}; known: {sorted(GRID_KEYS)}")
    datasets = _list(table, "datasets", path)
    bad = [d for d in datasets if d not in DATASETS]
    if bad:
        raise GridError(f"{path}: [grid] datasets {bad}: choose from {list(DATASETS)}")
    try:
        splits = parse_splits(table.get("splits"))
    except argparse.ArgumentTypeError as error:
        raise GridError(f"{path}: [grid] {error}".replace("--splits", "splits")) from None
    per_unit = table.get("splits_per_unit")
    if per_unit is not None and (not isinstance(per_unit, int) or per_unit < 1):
        raise GridError(f"{path}: [grid] splits_per_unit must be an integer >= 1")
    return Grid(
        path,
        tuple(datasets),
        tuple(_configs(table, path)),
        None if splits is None else tuple(splits),
        per_unit,
        _search(document.get("search"), path),
    )


def load_grid(path: str | Path) -> Grid:
    """Read and check GRID.toml.

    Raises:
        GridError: missing file, bad TOML, unknown key or value (the message names them).
    """
    path = Path(path)
    if not path.is_file():
        raise GridError(f"{path}: no such grid file")
    return parse_grid(path.read_text(), path)
