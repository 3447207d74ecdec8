"""A user's CSV table: what is read, and bad files named by line and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vbnn.data.table import read_table
from vbnn.data.uci import DataError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "table.csv"
    path.write_text(text)
    return path


def test_inputs_targets_and_names_are_read_in_column_order(tmp_path: Path) -> None:
    x, y, names = read_table(write(tmp_path, "a,y,b\n1,2,3\n4,5,6\n"), "y")
    np.testing.assert_array_equal(x, [[1, 3], [4, 6]])
    np.testing.assert_array_equal(y, [2, 5])
    assert names == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,y,a\n1,2,3\n", r"line 1: column name 'a' appears twice \(columns 1 and 3\)"),
        ("a, y ,y\n1,2,3\n", r"line 1: column name 'y' appears twice \(columns 2 and 3\)"),
        ("a,y\n1,2\n3\n", "line 3: 1 fields, expected 2"),
        ("a,y\n1,x\n", "line 2, column 'y'"),
        ("a,y\n", "no data rows"),
        ("a,b\n1,2\n", "no column 'y'"),
    ],
)
def test_bad_tables_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_table(write(tmp_path, text), "y")
