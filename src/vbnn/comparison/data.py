"""The data of a comparison: a CSV table and its target column, a UCI set by name, or arrays.

A CSV file goes through ``vbnn.data.table.read_table`` (the errors of ``vbnn fit``, naming file,
line and column); arrays through the estimators' checks (``regression.estimator_input.as_arrays``).
A target of class names (strings, in arrays or a CSV column) is coded 0 .. C-1 in sorted
order; ``Table.classes`` keeps the names, so the report can state the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vbnn.data.table import read_table
from vbnn.data.uci import DATASETS, load_uci
from vbnn.regression.estimator_input import as_arrays


@dataclass(frozen=True)
class Table:
    """The data of a comparison: inputs (N, I), target (N,), a label that names them, the UCI
    set whose presets apply ("" for none), whether the target was given as class names (coded
    0 .. C-1 in sorted order) and those names, ``classes[c]`` for code c."""

    inputs: np.ndarray
    target: np.ndarray
    label: str
    preset: str = ""
    named_classes: bool = False
    classes: tuple[str, ...] = ()

    def class_order(self) -> str:
        """How the class names were coded ("0 = setosa, 1 = versicolor"); "" for numbers."""
        return ", ".join(f"{code} = {name}" for code, name in enumerate(self.classes))


def load_data(data: Any, y: Any, target: str | None, data_dir: str | None = None) -> Table:
    """The :class:`Table` of a CSV path with ``target``, a UCI name, or arrays X, y."""
    if isinstance(data, str | Path):
        if y is not None:
            raise ValueError("y: give y with arrays only; with a CSV file give target=COLUMN")
        path = Path(data)
        if not path.exists() and str(data) in DATASETS:
            dataset = load_uci(str(data), data_dir)
            return Table(dataset.inputs, dataset.target, str(data), preset=str(data))
        if target is None:
            raise ValueError(f"target: {path} is a table; name its target column (target=...)")
        x, values, _ = read_table(path, target, class_names=True)
        return _table(x, values, path.stem)
    if target is not None:
        raise ValueError("target: names a CSV column; with arrays pass y")
    if y is None:
        raise ValueError("y: arrays X need their targets y")
    return _table(data, y, "arrays")


def _table(data: Any, y: Any, label: str) -> Table:
    """The checked arrays; a target of names coded 0 .. C-1 in sorted order, names kept."""
    labels = np.asarray(y)
    named = labels.dtype.kind not in "biuf"
    classes: tuple[str, ...] = ()
    if named:
        if labels.ndim != 1:
            raise ValueError(f"y: class labels must be 1-D, got shape {labels.shape}")
        names, labels = np.unique(labels, return_inverse=True)
        classes = tuple(str(name) for name in names)
    x, values = as_arrays(data, labels, name="data")
    return Table(x, values, label, named_classes=named, classes=classes)
