"""The nine UCI regression sets with the standard 20 train/test splits (5 for protein).

Layout under ``<data dir>/uci/<folder>/`` (shared/data/README.md): ``data.txt`` (whitespace
separated rows), ``index_features.txt``, ``index_target.txt``, ``n_splits.txt`` and
``index_train_K.txt`` / ``index_test_K.txt`` (0-based row indices). Every parse error names the
file, the line and the fault.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vbnn.data.paths import resolve_data_dir

# short name -> folder, as in shared/data/README.md
DATASETS: dict[str, str] = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
    "yacht": "yacht",
}


class DataError(ValueError):
    """Bad or missing data; the message names the file (and line) at fault."""


@dataclass(frozen=True)
class RegressionDataset:
    """Inputs, target and the list of (train rows, test rows) splits, in original units."""

    name: str
    inputs: np.ndarray  # (rows, features)
    target: np.ndarray  # (rows,)
    splits: tuple[tuple[np.ndarray, np.ndarray], ...]
    source: str

    @property
    def num_splits(self) -> int:
        return len(self.splits)

    def split(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < len(self.splits):
            raise DataError(
                f"{self.name}: split {index} does not exist; it has splits 0-{len(self.splits) - 1}"
            )
        return self.splits[index]


def dataset_folder(name: str, data_dir: str | Path | None = None) -> Path:
    if name not in DATASETS:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return resolve_data_dir(data_dir) / "uci" / DATASETS[name]


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return path.read_text().splitlines()


def parse_number(token: str, where: str) -> float:
    """``token`` as a finite float; a ``DataError`` naming ``where`` (file, line, column)."""
    try:
        value = float(token)
    except ValueError:
        raise DataError(f"{where}: non-numeric value {token!r}") from None
    if not math.isfinite(value):
        raise DataError(f"{where}: {token!r} is not finite")
    return value


def read_matrix(path: Path) -> np.ndarray:
    """Whitespace-separated numeric rows, all of one length, finite."""
    rows: list[list[float]] = []
    width = None
    for number, line in enumerate(_read_lines(path), start=1):
        tokens = line.split()
        if not tokens:
            continue
        if width is None:
            width = len(tokens)
        elif len(tokens) != width:
            raise DataError(
                f"{path}, line {number}: {len(tokens)} columns, expected {width} like line 1"
            )
        rows.append([parse_number(token, f"{path}, line {number}, column {column}")
                     for column, token in enumerate(tokens, start=1)])  # fmt: skip
    if not rows:
        raise DataError(f"{path}: no data rows")
    return np.asarray(rows, dtype=np.float64)


def read_indices(path: Path, upper: int, what: str) -> np.ndarray:
    """Integer indices, one or more a line, each in [0, upper)."""
    indices: list[int] = []
    for number, line in enumerate(_read_lines(path), start=1):
        for token in line.split():
            try:
                value = float(token)
            except ValueError:
                raise DataError(f"{path}, line {number}: non-numeric index {token!r}") from None
            if not value.is_integer():
                raise DataError(f"{path}, line {number}: index {token!r} is not an integer")
            if not 0 <= value < upper:
                raise DataError(
                    f"{path}, line {number}: {what} index {int(value)} out of range [0, {upper})"
                )
            indices.append(int(value))
    if not indices:
        raise DataError(f"{path}: no indices")
    return np.asarray(indices, dtype=np.int64)


def load_uci(name: str, data_dir: str | Path | None = None) -> RegressionDataset:
    """Load one UCI set with all its standard splits.

    Raises:
        DataError: unknown name, missing file, malformed row or index (file and line named).
    """
    folder = dataset_folder(name, data_dir)
    if not folder.is_dir():
        raise DataError(
            f"{folder}: data set {name!r} not found; run 'vbnn data download {name}' or set "
            "--data-dir / VBNN_DATA_DIR"
        )
    data = read_matrix(folder / "data.txt")
    rows, columns = data.shape
    features = read_indices(folder / "index_features.txt", columns, "column")
    target = read_indices(folder / "index_target.txt", columns, "column")
    if target.size != 1:
        raise DataError(f"{folder / 'index_target.txt'}: expected one target column, got {target}")
    count_path = folder / "n_splits.txt"
    count_lines = [line for line in _read_lines(count_path) if line.strip()]
    try:
        count = int(count_lines[0])
    except (IndexError, ValueError):
        raise DataError(f"{count_path}, line 1: expected the number of splits") from None
    splits = tuple(
        (
            read_indices(folder / f"index_train_{k}.txt", rows, "row"),
            read_indices(folder / f"index_test_{k}.txt", rows, "row"),
        )
        for k in range(count)
    )
    return RegressionDataset(
        name=name,
        inputs=data[:, features],
        target=data[:, int(target[0])],
        splits=splits,
        source=str(folder),
    )
