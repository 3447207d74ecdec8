"""The driver of stored runs (``sweeps.driver``): a run stopped part way resumes and trains only
the replicates it lacks, a second call trains nothing, rows come back by replicate in the order
of the configurations, and a resumed run stores what one uninterrupted run stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from vbnn.core.contracts import SplitResult
from vbnn.regression.methods import method_config
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import Unit
from vbnn.sweeps.driver import Runs, train_missing
from vbnn.sweeps.executors import LocalExecutor, SweepError

MF = method_config("mf", iterations=10, seed=4)
MAP = method_config("map", iterations=10, seed=4)


def _value(replicate: int, seed: int) -> float:
    """A replicate's made-up score: tells replicates and seeds apart exactly."""
    return -(replicate + 0.25 * seed)


def _train(replicates: list[int], seed: int, trained: list[int], fail_at: int | None) -> tuple:
    """A unit: one SplitResult per replicate and one stored metric; raises at ``fail_at``."""
    if fail_at in replicates:
        raise RuntimeError(f"stopped at replicate {fail_at}")
    trained.extend(replicates)
    results = [SplitResult(split=k, test_log_likelihood=_value(k, seed), test_rmse=float(k),
                           train_seconds=0.0) for k in replicates]  # fmt: skip
    return results, {k: {"square": k * k} for k in replicates}


def _builder(trained: list[int], fail_at: int | None = None, size: int = 2):
    """Units of ``size`` missing replicates each; every built unit is recorded in ``built``."""
    built: list[list[int]] = []

    def build(runs: Runs, missing: list[int]) -> list[Unit]:
        chunks = [missing[i : i + size] for i in range(0, len(missing), size)]
        built.extend(chunks)
        return [Unit(f"{runs.name} {chunk}", _train, (chunk, runs.config.seed, trained, fail_at))
                for chunk in chunks]  # fmt: skip

    return build, built


def test_a_stopped_run_resumes_with_only_the_missing_replicates(tmp_path: Path) -> None:
    runs = [Runs("toy", MF, (5, 0, 3, 1, 4, 2)), Runs("toy", MAP, (1, 0), {"tune": "none"})]
    trained: list[int] = []
    with ResultsDatabase(tmp_path / "results.sqlite") as database:
        # the run stops in the unit of replicates (4, 2): the units before it are stored
        build, _ = _builder(trained, fail_at=4)
        with pytest.raises(RuntimeError, match="stopped at replicate 4"):
            train_missing(database, runs, build, LocalExecutor(raise_errors=True))
        assert trained == [5, 0, 3, 1]
        assert database.stored_splits("toy", MF) == {0, 1, 3, 5}
        assert database.stored_splits("toy", MAP, {"tune": "none"}) == set()
        # resumed: only what is missing trains, in the order asked for
        trained.clear()
        build, built = _builder(trained)
        stored = train_missing(database, runs, build)
        assert built == [[4, 2], [1, 0]] and trained == [4, 2, 1, 0]
        # a second call builds and trains nothing and reads the same rows back
        trained.clear()
        build, built = _builder(trained)
        again = train_missing(database, runs, build)
        assert built == [] and trained == [] and again == stored
    assert [entry.runs for entry in stored] == runs  # the configurations' order
    for entry in stored:
        ids = sorted(entry.runs.replicates)
        assert [r.split for r in entry.results] == ids  # rows by replicate id
        seed = entry.runs.config.seed
        assert [r.test_log_likelihood for r in entry.results] == [_value(k, seed) for k in ids]
        assert list(entry.metrics) == ids
        assert [entry.metrics[k]["square"] for k in ids] == [k * k for k in ids]


def test_a_failed_unit_is_summarised_and_the_others_are_stored(tmp_path: Path) -> None:
    """The default local executor reports a unit that raises at the end (as processes and Ray
    do), stores the others, and the next call trains the failed unit alone."""
    runs = [Runs("toy", MF, (0, 1, 2, 3))]
    trained: list[int] = []
    with ResultsDatabase(tmp_path / "results.sqlite") as database:
        build, _ = _builder(trained, fail_at=1)
        with pytest.raises(SweepError, match=r"toy mf seed 4 \[0, 1\]: RuntimeError"):
            train_missing(database, runs, build)
        assert database.stored_splits("toy", MF) == {2, 3}
        trained.clear()
        build, built = _builder(trained)
        (stored,) = train_missing(database, runs, build)
    assert built == [[0, 1]] and [r.split for r in stored.results] == [0, 1, 2, 3]


def test_a_unit_returning_another_replicate_is_an_error(tmp_path: Path) -> None:
    def build(runs: Runs, missing: list[int]) -> list[Unit]:
        return [Unit("off by one", _train, ([k + 1 for k in missing], 0, [], None))]

    with ResultsDatabase(tmp_path / "results.sqlite") as database:
        with pytest.raises(ValueError, match=r"'off by one' returned replicates \[2\] that toy"):
            train_missing(database, [Runs("toy", MF, (0, 1))], build)
        assert database.stored_splits("toy", MF) == set()
