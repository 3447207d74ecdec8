"""`vbnn reproduce overpruning` end to end at a tiny size; a second run resumes from the DB; in
worker processes it stores the local run's rows and trials."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from stored_rows import stored_runs, stored_trials

from vbnn.cli import main

TINY = ["--datasets", "yacht", "--methods", "map,mf,sgld", "--splits", "0-1", "--iterations",
        "30", "--trials", "2", "--no-progress", "--executor", "local"]  # fmt: skip


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


def test_status_reads_the_run_and_writes_nothing(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["reproduce", "overpruning", "--out", str(out), "--no-figures", "--datasets", "yacht",
            "--methods", "map,mf", "--splits", "0-2", "--iterations", "20", "--trials", "2",
            "--no-progress", "--executor", "local"]  # fmt: skip
    assert main([*args, "--status"]) == 0
    assert "no results database yet" in capsys.readouterr().out and not out.exists()
    assert main(args) == 0
    capsys.readouterr()

    def files() -> dict[str, int]:  # SQLite's shared-memory index comes and goes with readers
        return {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix != ".sqlite-shm"}

    wal = out / "results.sqlite-wal"  # a write would land here first
    before, wal_size = files(), wal.stat().st_size if wal.exists() else 0
    assert main([*args, "--methods", "map,mf,gd", "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[2:]]
    assert rows == [["yacht", "map", "50", "2/2", "3/3"], ["yacht", "mf", "50", "2/2", "3/3"],
                    ["yacht", "gd", "50", "0/2", "0/3"]]  # fmt: skip
    after = files()
    assert (wal.stat().st_size if wal.exists() else 0) == wal_size
    assert {k: v for k, v in after.items() if k != wal.name} == {
        k: v for k, v in before.items() if k != wal.name
    }


def test_per_split_tuning_stores_each_splits_own_values(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["reproduce", "overpruning", "--out", str(out), "--tune", "per-split", "--no-figures",
            "--datasets", "yacht", "--methods", "gd", "--splits", "0-1", "--iterations", "20",
            "--trials", "3", "--no-progress", "--executor", "local"]  # fmt: skip
    assert main(args) == 0
    with sqlite3.connect(out / "results.sqlite") as connection:
        rows = connection.execute("SELECT split, hyperparameters FROM runs").fetchall()
        studies = {r[0] for r in connection.execute("SELECT study_name FROM studies")}
    assert studies == {"yacht/split0/gd/hidden50/seed0", "yacht/split1/gd/hidden50/seed0"}
    values = [json.loads(h)["extra"]["values"] for _, h in rows]
    assert len(rows) == 2 and values[0] == values[1]  # the whole mapping is stored with each run
    chosen = values[0]
    assert set(chosen) == {"0", "1"} and chosen["0"] != chosen["1"]
    assert set(chosen["0"]) == {"prior_std", "posterior_std"}


def test_overpruning_in_processes_by_default_stores_the_local_runs_and_trials(
    data_dir: Path, tmp_path: Path
) -> None:
    """Worker processes, one a core, are the default; each unit on one torch thread, as here."""
    tiny = ["reproduce", "overpruning", "--datasets", "yacht", "--methods", "map,es",
            "--splits", "0-1", "--iterations", "30", "--trials", "3", "--no-figures",
            "--no-progress"]  # fmt: skip
    assert main([*tiny, "--out", str(tmp_path / "local"), "--executor", "local"]) == 0
    assert main([*tiny, "--out", str(tmp_path / "pool")]) == 0
    local, pool = tmp_path / "local" / "results.sqlite", tmp_path / "pool" / "results.sqlite"
    assert len(stored_runs(local)) == 4 and stored_runs(pool) == stored_runs(local)
    # the trials a worker ran on its in-memory copy of each study, stored by the driver
    assert len(stored_trials(local)) == 2 * 3 and stored_trials(pool) == stored_trials(local)
