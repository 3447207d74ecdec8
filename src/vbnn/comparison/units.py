"""The one driver of a comparison's runs: missing units -> executor -> database -> rows.

Each entry (a family or baseline) has a frozen run config (``method`` its name); each of its
replicates (a fold, or a seed) is one row of the results database keyed by (dataset, replicate,
method, config hash, seed). :func:`stored_rows` asks the database which replicates each entry
lacks, builds their units, runs them on the sweeps' executor (``local``, ``processes``, ``ray``),
stores every finished unit in one transaction as it arrives (the driver alone writes), and reads
every row back: a second identical call trains nothing, and a killed one resumes unit by unit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.executors import ExecutorSettings, Unit, run_sweep

# (entry name, its run config, the replicates it lacks) -> the units that train them; each unit
# returns (list of SplitResult, {replicate: metrics}) for its replicates.
UnitBuilder = Callable[[str, Any, list[int]], list[Unit]]


def stored_rows(
    path: Path,
    dataset: str,
    runs: Mapping[str, Any],
    replicates: Sequence[int],
    build_units: UnitBuilder,
    settings: ExecutorSettings,
    progress: bool,
) -> list[dict[str, Any]]:
    """Train what the database at ``path`` lacks, then one row per (entry, replicate).

    Returns:
        Rows ``{"family": name, "fold": replicate, "seconds": training seconds, **metrics}``
        with the metrics the units stored (``test_log_likelihood`` among them), entries in the
        order of ``runs``.
    """
    with ResultsDatabase(path) as database:
        units, owner = [], {}
        for name, run in runs.items():
            missing = database.missing_splits(dataset, replicates, run)
            for unit in build_units(name, run, missing) if missing else []:
                units.append(unit)
                owner[unit.key] = name

        def store(unit: Unit, value: tuple) -> None:
            results, metrics = value
            database.write_results(dataset, runs[owner[unit.key]], results, None, metrics)

        run_sweep(settings, units, store, "training", progress)
        rows = []
        for name, run in runs.items():
            metrics = database.read_metrics(dataset, run, replicates)
            seconds = {r.split: r.train_seconds for r in database.read_results(dataset, run)}
            rows.extend(
                {"family": name, "fold": k, "seconds": seconds[k], **values}
                for k, values in metrics.items()
            )
    return rows
