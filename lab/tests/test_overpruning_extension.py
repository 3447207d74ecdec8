"""Table 1 extended to kin8nm, naval and protein: published values, widths, a tiny run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from vbnn.cli import main
from vbnn_lab.overpruning.extension import (
    EXTENSION_DATASETS,
    extension_table,
    hidden_width,
    load_published_extension,
)


def test_committed_published_values_cite_a_source_and_match_the_papers() -> None:
    published = load_published_extension()
    assert set(published["datasets"]) == set(EXTENSION_DATASETS)
    assert set(published["sources"]) == {"PBP", "Deep ensembles"}
    assert all("Table 1" in source for source in published["sources"].values())
    # Lakshminarayanan et al. (2017), Table 1, NLL columns, negated
    assert published["datasets"]["naval"]["Deep ensembles"] == (5.63, 0.05)
    assert published["datasets"]["protein"]["PBP"] == (-2.97, 0.0)
    # deep ensembles beat PBP on all three sets in that table
    for values in published["datasets"].values():
        assert values["Deep ensembles"][0] > values["PBP"][0]


def test_widths_and_a_missing_source_is_named(tmp_path: Path) -> None:
    assert [hidden_width(d) for d in EXTENSION_DATASETS] == [50, 50, 100]
    bad = tmp_path / "published.json"
    bad.write_text(json.dumps({"sources": {}, "datasets": {"naval": {"PBP": [1, 0]}}}))
    with pytest.raises(ValueError, match="without a source"):
        load_published_extension(bad)
    with pytest.raises(FileNotFoundError, match=r"nowhere\.json"):
        load_published_extension(tmp_path / "nowhere.json")


def test_table_puts_ours_beside_the_published_columns() -> None:
    ours = pd.DataFrame([("naval", "MF", 4.1234, 0.05, 5), ("naval", "ES", 3.9, 0.1, 5)],
                        columns=["dataset", "method", "mean", "sem", "splits"])  # fmt: skip
    row = extension_table(ours, load_published_extension()).iloc[0].to_dict()
    assert row["MF"] == "4.12 +- 0.05" and row["ES"] == "3.90 +- 0.10"
    assert row["PBP (published)"] == "3.73 +- 0.01" and row["width"] == 50


@pytest.mark.slow
def test_tiny_extension_run_writes_its_own_table(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["reproduce", "overpruning", "--extension", "nine-sets", "--out", str(out),
            "--datasets", "protein", "--methods", "map", "--splits", "0", "--iterations", "5",
            "--trials", "1", "--no-progress", "--executor", "local"]  # fmt: skip
    assert main(args) == 0
    assert not (out / "table1.md").exists()
    assert "| protein | 100 | 1 |" in (out / "table1_extension.md").read_text()
    with sqlite3.connect(out / "results.sqlite") as connection:
        (hyperparameters,) = connection.execute("SELECT hyperparameters FROM runs").fetchone()
        studies = {r[0] for r in connection.execute("SELECT study_name FROM studies")}
    assert json.loads(hyperparameters)["hidden"] == [100]
    assert studies == {"protein/split0/map/hidden100/seed0"}
    # a paper data set is refused under the extension, and named
    assert main([*args[:6], "--datasets", "boston"]) == 2
