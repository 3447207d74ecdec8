"""`vbnn reproduce overpruning` end to end at a tiny size; a second run resumes from the DB."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from vbnn.cli import main

TINY = ["--datasets", "yacht", "--methods", "map,mf,sgld", "--splits", "0-1", "--iterations",
        "30", "--trials", "2", "--no-progress"]  # fmt: skip


def test_tiny_reproduction_writes_every_file_and_resumes(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["reproduce", "overpruning", "--quick", "--out", str(out), *TINY]) == 0
    for name in ("table1.md", "table1.csv", "figure1.png", "figure2.png", "figure3.png",
                 "figure4.png", "figure5.png", "pruning_counts.md", "run_info.json"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    table = (out / "table1.md").read_text()
    assert "| yacht |" in table and "Quick mode cut" in table
    with sqlite3.connect(out / "results.sqlite") as connection:
        runs = connection.execute("SELECT dataset, split, method FROM runs").fetchall()
    assert sorted(runs) == sorted(("yacht", k, m) for k in (0, 1) for m in ("map", "mf", "sgld"))
    # everything is stored: a second run trains nothing and writes the same table
    assert (
        main(["reproduce", "overpruning", "--quick", "--no-figures", "--out", str(out), *TINY]) == 0
    )
    with sqlite3.connect(out / "results.sqlite") as connection:
        assert connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 6
    assert (out / "table1.md").read_text().split("Marks")[0] == table.split("Marks")[0]


def test_per_split_tuning_stores_each_splits_own_values(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["reproduce", "overpruning", "--out", str(out), "--tune", "per-split", "--no-figures",
            "--datasets", "yacht", "--methods", "gd", "--splits", "0-1", "--iterations", "20",
            "--trials", "3", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    with sqlite3.connect(out / "results.sqlite") as connection:
        rows = connection.execute("SELECT split, hyperparameters FROM runs").fetchall()
        studies = {r[0] for r in connection.execute("SELECT study_name FROM studies")}
    assert studies == {"yacht/split0/gd/seed0", "yacht/split1/gd/seed0"}
    values = [json.loads(h)["extra"]["values"] for _, h in rows]
    assert len(rows) == 2 and values[0] == values[1]  # the whole mapping is stored with each run
    chosen = values[0]
    assert set(chosen) == {"0", "1"} and chosen["0"] != chosen["1"]
    assert set(chosen["0"]) == {"prior_std", "posterior_std"}
