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


IRIS_LIKE = (
    "sepal_length,sepal_width,species\n"
    "5.1,3.5,setosa\n7.0,3.2,versicolor\n6.3,3.3, virginica\n4.9,3.0,setosa\n"
)


def test_a_target_of_class_names_is_read_as_strings_where_the_caller_accepts_them(
    tmp_path: Path,
) -> None:
    x, y, names = read_table(write(tmp_path, IRIS_LIKE), "species", class_names=True)
    np.testing.assert_array_equal(x, [[5.1, 3.5], [7.0, 3.2], [6.3, 3.3], [4.9, 3.0]])
    assert y.tolist() == ["setosa", "versicolor", "virginica", "setosa"]  # spaces stripped
    assert names == ["sepal_length", "sepal_width"]
    with pytest.raises(DataError, match=r"line 2, column 'species': non-numeric value 'setosa' "
                                        r"\(the column holds class names"):  # fmt: skip
        read_table(write(tmp_path, IRIS_LIKE), "species")
    _, numbers, _ = read_table(write(tmp_path, "a,y\n1,2\n3,4\n"), "y", class_names=True)
    assert numbers.dtype == np.float64 and numbers.tolist() == [2.0, 4.0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,y\n1,cat\n2,dog\n3,7\n", r"line 4, column 'y': '7' is a number among class names"),
        ("a,y\n1,2\n2,3\n3,x\n", r"line 4, column 'y': non-numeric value 'x' among numbers"),
        ("a,y\n1,cat\n2,\n3,dog\n", r"line 3, column 'y': missing class name"),
        ("a,y\n1,2\n2,\n", r"line 3, column 'y': non-numeric value ''"),
        ("a,y\nx,cat\n2,dog\n", r"line 2, column 'a': non-numeric value 'x'"),
    ],
)
def test_a_class_column_with_numbers_or_gaps_is_named(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(DataError, match=message):
        read_table(write(tmp_path, text), "y", class_names=True)
