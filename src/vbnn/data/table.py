"""A user's own regression table: a CSV file with a header row and one target column."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from vbnn.data.uci import DataError, parse_number


def read_table(path: str | Path, target: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Inputs (N, I), targets (N,) and the input column names of a numeric CSV file.

    Raises:
        DataError: naming the file, and the line and column where a value is missing,
            non-numeric or not finite; a column name that appears twice; an unknown ``target``
            (the columns are listed); a row of the wrong length; no data rows; a table with no
            input column.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        raise DataError(f"{path}: empty file (expected a header row)")
    header = [name.strip() for name in rows[0]]
    seen: dict[str, int] = {}
    for position, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(
                f"{path}, line 1: column name {name!r} appears twice (columns {seen[name]} and "
                f"{position}); rename one"
            )
        seen[name] = position
    if target not in header:
        raise DataError(f"{path}: no column {target!r}; the columns are {header}")
    if len(header) < 2:
        raise DataError(f"{path}: only the target column {target!r}; no inputs")
    values = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise DataError(f"{path}, line {number}: {len(row)} fields, expected {len(header)}")
        values.append([parse_number(cell, f"{path}, line {number}, column {name!r}")
                       for name, cell in zip(header, row, strict=True)])  # fmt: skip
    if not values:
        raise DataError(f"{path}: no data rows")
    table = np.asarray(values, dtype=np.float64)
    column = header.index(target)
    inputs = [name for name in header if name != target]
    return np.delete(table, column, axis=1), table[:, column], inputs
