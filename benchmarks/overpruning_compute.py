"""Process time a resumed overpruning run spent, from its results database.

A reproduction made in pieces has no single wall time; the database keeps enough to add it up:

* tuning: per Optuna study, the time during which at least one of its trials was running
  (candidates of a round train together, so their intervals overlap; the union is counted once);
* training: the ``wall_seconds`` of every stored run of the configuration the table uses (the
  newest config hash of each data set, method and hidden widths; older hashes are runs of
  superseded code). The widths tell apart the depths of ``vbnn reproduce uci-depth``, whose
  database this reads too.

    python benchmarks/overpruning_compute.py results/overpruning/results.sqlite [--by-method]

``--by-method`` splits both by method: tuning per study name (a study's name carries its
method and, for a re-tuned family, a suffix such as ``/scaled-unit``), training per method.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import pandas as pd

from vbnn.regression.tuning import hidden_label
from vbnn.stores.results_db import ResultsDatabase


def busy_seconds(intervals: pd.DataFrame) -> float:
    """Length of the union of the [start, end] intervals."""
    total, reach = 0.0, None
    for start, end in intervals.sort_values("start")[["start", "end"]].itertuples(index=False):
        if reach is None or start > reach:
            total += (end - start).total_seconds()
            reach = end
        elif end > reach:
            total += (end - reach).total_seconds()
            reach = end
    return total


def _read(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs of the configuration the table uses, completed Optuna trials with their study)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results database here")
    runs = ResultsDatabase(path).runs_frame()
    with sqlite3.connect(path) as connection:  # Optuna's own tables, in the same file
        trials = pd.read_sql(
            "SELECT s.study_name, t.datetime_start AS start, t.datetime_complete AS end"
            " FROM trials t JOIN studies s USING (study_id) WHERE t.state = 'COMPLETE'",
            connection,
        )
    runs["hidden"] = [hidden_label(json.loads(text)["hidden"]) for text in runs["hyperparameters"]]
    keys = ["dataset", "method", "hidden"]
    newest = runs.sort_values("created_at").groupby(keys)["config_hash"].last()
    current = runs.join(newest.rename("newest"), on=keys)
    current = current[current["config_hash"] == current["newest"]]
    trials["start"], trials["end"] = pd.to_datetime(trials["start"]), pd.to_datetime(trials["end"])
    trials["dataset"] = trials["study_name"].str.split("/").str[0]
    return current, trials


def minutes_by_method(path: Path) -> tuple[pd.Series, pd.DataFrame]:
    """(busy minutes of every tuning study, training minutes and runs per data set and method)."""
    current, trials = _read(path)
    tuning = trials.groupby("study_name")[["start", "end"]].apply(busy_seconds) / 60
    training = current.groupby(["dataset", "method", "hidden"])["wall_seconds"].agg(["sum", "size"])
    training = training.rename(columns={"sum": "training_min", "size": "runs"})
    training["training_min"] /= 60
    return tuning.rename("tuning_min"), training


def compute_minutes(path: Path) -> pd.DataFrame:
    current, trials = _read(path)
    tuning = trials.groupby(["dataset", "study_name"])[["start", "end"]].apply(busy_seconds)
    table = pd.DataFrame({
        "tuning_min": tuning.groupby("dataset").sum() / 60,
        "training_min": current.groupby("dataset")["wall_seconds"].sum() / 60,
        "runs": current.groupby("dataset").size(),
    }).fillna(0)  # fmt: skip
    table["total_min"] = table["tuning_min"] + table["training_min"]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", type=Path)
    parser.add_argument("--by-method", action="store_true", help="split by study and method")
    args = parser.parse_args()
    if args.by_method:
        tuning, training = minutes_by_method(args.database)
        print(tuning.round(1).to_string())
        print(training.round(1).to_string())
        return
    table = compute_minutes(args.database)
    print(table.round(1).to_string())
    total = table[["tuning_min", "training_min", "total_min"]].sum()
    print(f"all: tuning {total['tuning_min']:.0f} min, training {total['training_min']:.0f} min,"
          f" total {total['total_min']:.0f} min, {int(table['runs'].sum())} runs")  # fmt: skip


if __name__ == "__main__":
    main()
