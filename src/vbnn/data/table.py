"""A user's own table: a CSV file with a header row, numeric inputs and one target column.

The target holds numbers (regression, or integer classes) or, where the caller accepts them
(``class_names=True``: ``vbnn fit`` and ``vbnn compare``), class names such as "setosa": a
column in which no cell is a number is returned as strings, which the classifiers code in
sorted order (``BayesianClassifier.classes_``, ``vbnn.compare``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from vbnn.data.uci import DataError, parse_number


def read_table(
    path: str | Path, target: str, class_names: bool = False
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Inputs (N, I), targets (N,) and the input column names of a CSV file.

    Args:
        path: the CSV file, with a header row.
        target: the column to predict.
        class_names: accept a target of names: when no cell of the target column is a number,
            the targets are returned as strings (N,), stripped of surrounding spaces. A column
            that mixes numbers and names is refused either way (a typo in a numeric column).

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
    column = header.index(target)
    lines = [(number, row) for number, row in enumerate(rows[1:], start=2)
             if any(cell.strip() for cell in row)]  # fmt: skip
    for number, row in lines:
        if len(row) != len(header):
            raise DataError(f"{path}, line {number}: {len(row)} fields, expected {len(header)}")
    if not lines:
        raise DataError(f"{path}: no data rows")
    names = _class_names(path, target, [(number, row[column]) for number, row in lines])
    if names is not None and not class_names:
        number, cell = lines[0][0], lines[0][1][column]
        raise DataError(f"{path}, line {number}, column {target!r}: non-numeric value {cell!r} "
                        "(the column holds class names; this command needs numbers)")  # fmt: skip
    inputs = [name for name in header if name != target]
    parsed = [p for p in range(len(header)) if names is None or p != column]  # numeric columns
    table = np.asarray(
        [[parse_number(row[p], f"{path}, line {number}, column {header[p]!r}") for p in parsed]
         for number, row in lines],
        dtype=np.float64,
    )  # fmt: skip
    if names is not None:
        return table, names, inputs
    return np.delete(table, column, axis=1), table[:, column], inputs


def _class_names(path: Path, target: str, cells: list[tuple[int, str]]) -> np.ndarray | None:
    """The target cells as names (N,) when none of them is a number; None otherwise (numbers,
    and empty cells that the numeric reading then names).

    Raises:
        DataError: an empty cell among names, or a column that mixes numbers and names (the
            first cell of the rarer kind is named, with its line).
    """
    filled = [(number, cell.strip()) for number, cell in cells if cell.strip()]
    numeric = [_is_number(cell) for _, cell in filled]
    if all(numeric):
        return None
    if any(numeric):
        odd = numeric.count(True) < numeric.count(False)  # the kind to name: the rarer one
        number, cell = next(c for c, n in zip(filled, numeric, strict=True) if n is odd)
        what = f"non-numeric value {cell!r} among numbers"
        if odd:
            what = f"{cell!r} is a number among class names"
        raise DataError(
            f"{path}, line {number}, column {target!r}: {what}; a target holds numbers on "
            "every row or class names on every row"
        )
    for number, cell in cells:
        if not cell.strip():
            raise DataError(f"{path}, line {number}, column {target!r}: missing class name")
    return np.asarray([cell.strip() for _, cell in cells])


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
