"""Every stored state is written whole or not at all: a writer SIGKILLed in the middle of writing a
checkpoint, a unit, a results-database record or a report leaves the previous state readable, and
a resumed run does not take the torn temporary for what it stores.

Each writer runs in a forked process that pauses at a chosen point of its write (a stand-in for
the write in progress, patched in the child only) and is killed there, so the kill lands at the
same place every time. The children do no tensor arithmetic (OpenMP does not survive a fork):
what they write is built before the fork.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import vbnn
from vbnn.core.contracts import SplitResult
from vbnn.core.randomness import ModelGenerators
from vbnn.regression.methods import method_config
from vbnn.stores import unit_store
from vbnn.stores.atomic import atomic_path, write_atomic
from vbnn.stores.results_db import ResultsDatabase
from vbnn.training.checkpoint import ResumableRun, save_checkpoint

# A fork of a process that has run torch's threads warns on Python 3.12+; the children here only
# pickle, zip and write (module docstring).
# JAX, imported by an earlier test in the same pytest worker, warns on every fork too
pytestmark = [
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def pause(marker: Path) -> None:
    """Tell the parent the child is mid-write, then wait to be killed."""
    marker.write_text("")
    time.sleep(60)


def kill_mid_write(write: Callable[[Path], None], marker: Path) -> None:
    """Run ``write(marker)`` in a forked process and SIGKILL it once it has called ``pause``."""
    child = multiprocessing.get_context("fork").Process(target=write, args=(marker,))
    child.start()
    deadline = time.monotonic() + 20
    while not marker.exists():
        assert child.is_alive(), f"the writer ended (exit code {child.exitcode}) before pausing"
        assert time.monotonic() < deadline, "the writer never paused"
        time.sleep(0.01)
    child.kill()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def blobs(n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=generator)
    return x, (x[:, 0] > 0).long()


def network() -> nn.Module:
    torch.manual_seed(0)
    return vbnn.convert(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2)), "mf")


class Killed(Exception):
    pass


def test_a_checkpoint_killed_mid_write_leaves_the_previous_one_and_the_run_resumes_from_it(
    tmp_path: Path,
) -> None:
    x, y = blobs()
    options = {"epochs": 3, "batch_size": 16, "progress": False, "checkpoint": tmp_path / "run"}
    states: dict[int, dict[str, torch.Tensor]] = {}

    def keep_state(epoch: int, net: nn.Module, metrics: dict) -> None:
        states[epoch] = {k: v.clone() for k, v in net.state_dict().items()}
        if epoch == 2:  # epoch 2's checkpoint would be written after its callbacks
            raise Killed

    with pytest.raises(Killed):
        vbnn.train(network(), (x, y), callbacks=[keep_state], **options)
    file = tmp_path / "run" / "training.pt"
    assert torch.load(file, weights_only=True)["epoch"] == 1

    larger = nn.Linear(300, 300)  # the second state, about 1.4 MB on disk
    optimizer = torch.optim.SGD(larger.parameters(), lr=0.1)
    run = ResumableRun({"second": True}, {"network": larger}, optimizer, ModelGenerators([0]))

    def write_second(marker: Path) -> None:
        def torn_save(state: dict, path: Path) -> None:
            buffer = io.BytesIO()
            save(state, buffer)
            with open(path, "wb") as handle:  # half of the new file, on the disk
                handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                handle.flush()
                os.fsync(handle.fileno())
            pause(marker)

        save, torch.save = torch.save, torn_save
        save_checkpoint(file, run, epoch=2, records={})

    kill_mid_write(write_second, tmp_path / "paused")
    (torn,) = temporaries(file.parent)
    assert torn.startswith(".training.pt.") and torn.endswith(".tmp")
    assert (file.parent / torn).stat().st_size > 100_000  # killed mid-write, not before
    stored = torch.load(file, weights_only=True)
    assert stored["epoch"] == 1
    for name, value in states[1].items():
        assert torch.equal(stored["modules"]["network"][name], value), name

    epochs: list[int] = []
    vbnn.train(network(), (x, y), callbacks=[lambda e, *_: epochs.append(e)], **options)
    assert epochs == [2, 3]  # resumed after epoch 1: neither the torn file nor from scratch
    assert torch.load(file, weights_only=True)["epoch"] == 3


def _unit(size: int, value: float) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    return {"draws": np.full(size, value)}, {"value": value}


@pytest.mark.parametrize(
    ("phase", "survivor"),
    [
        ("arrays", 1),  # writing the new arrays: the old unit
        ("record", 1),  # writing the new record, the new arrays written aside: the old unit
        ("in place", 2),  # the new record written, its arrays not yet in place: the new unit
    ],
)
def test_a_unit_written_again_and_killed_mid_write_is_the_old_unit_or_the_new(
    tmp_path: Path, phase: str, survivor: int
) -> None:
    settings = {"chain": 0, "in_flight": True}
    unit_store.save(tmp_path, settings, *_unit(10, 1.0))
    second = _unit(200_000, 2.0)
    key = unit_store.settings_key(settings)

    def write_second(marker: Path) -> None:
        if phase == "arrays":
            savez = np.savez_compressed

            def torn_savez(handle, **arrays) -> None:
                buffer = io.BytesIO()
                savez(buffer, **arrays)
                handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                handle.flush()
                pause(marker)

            np.savez_compressed = torn_savez
        elif phase == "record":
            write_text = Path.write_text

            def torn_write_text(path: Path, text: str) -> int:
                if path.name.startswith(f".{key}.json."):
                    write_text(path, text[: len(text) // 2])
                    pause(marker)
                return write_text(path, text)

            Path.write_text = torn_write_text
        else:
            replace = os.replace

            def paused_replace(source, target) -> None:
                if Path(target).name == f"{key}.npz":
                    pause(marker)
                replace(source, target)

            os.replace = paused_replace
        unit_store.save(tmp_path, settings, *second)

    kill_mid_write(write_second, tmp_path / "paused")
    assert temporaries(tmp_path)  # the kill left a temporary or the pending arrays
    arrays, info = unit_store.load(tmp_path, settings)
    expected_arrays, expected_info = _unit(10, 1.0) if survivor == 1 else second
    assert info == expected_info
    np.testing.assert_array_equal(arrays["draws"], expected_arrays["draws"])
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [f"{key}.json"]

    unit_store.save(tmp_path, settings, *second)  # the next write is whole
    arrays, info = unit_store.load(tmp_path, settings)
    assert info == second[1] and arrays["draws"].shape == (200_000,)


def _result(split: int) -> SplitResult:
    return SplitResult(split=split, test_log_likelihood=-1.0 - split, test_rmse=1.0,
                       train_seconds=0.1)  # fmt: skip


class PausingConnection:
    """A connection that stops, to be killed, once ``executemany`` has inserted its rows (the
    transaction open, not committed)."""

    def __init__(self, connection, marker: Path) -> None:
        self.connection, self.marker = connection, marker

    def __getattr__(self, name: str):
        return getattr(self.connection, name)

    def __enter__(self):
        return self.connection.__enter__()

    def __exit__(self, *exc):
        return self.connection.__exit__(*exc)

    def executemany(self, *args):
        self.connection.executemany(*args)
        pause(self.marker)


def test_a_results_record_killed_mid_transaction_is_stored_whole_or_not_at_all(
    tmp_path: Path,
) -> None:
    path, config = tmp_path / "results.sqlite", method_config("mf", iterations=10, seed=1)
    with ResultsDatabase(path) as database:
        database.write_results("boston", config, [_result(0)])

    def write_more(marker: Path) -> None:
        database = ResultsDatabase(path)
        database.connection = PausingConnection(database.connection, marker)
        database.write_results("boston", config, [_result(1), _result(2)])

    kill_mid_write(write_more, tmp_path / "paused")
    with ResultsDatabase(path) as database:
        assert database.integrity_check() == "ok"
        assert [r.split for r in database.read_results("boston", config)] == [0]
        database.write_results("boston", config, [_result(1), _result(2)])  # not stored: allowed
        assert database.missing_splits("boston", range(4), config) == [3]


def test_a_report_killed_mid_write_leaves_the_previous_report(tmp_path: Path) -> None:
    report = write_atomic(tmp_path / "summary.md", "# first\n")

    def write_second(marker: Path) -> None:
        write_text = Path.write_text

        def torn_write_text(path: Path, text: str) -> int:
            if path.name.startswith(".summary.md."):
                write_text(path, text[: len(text) // 2])
                pause(marker)
            return write_text(path, text)

        Path.write_text = torn_write_text
        write_atomic(report, "# second, a longer report\n" * 1000)

    kill_mid_write(write_second, tmp_path / "paused")
    assert report.read_text() == "# first\n"
    (torn,) = temporaries(tmp_path)
    assert torn.startswith(".summary.md.") and (tmp_path / torn).stat().st_size > 0


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "table.csv", "a,b\n1,2\n")
    with pytest.raises(RuntimeError, match="failed"), atomic_path(target) as temporary:
        temporary.write_text("a,b\n3")
        raise RuntimeError("failed")
    assert target.read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    with atomic_path(target) as temporary:
        assert temporary.parent == tmp_path and not target.samefile(temporary)
        temporary.write_text("a,b\n3,4\n")
    assert target.read_text() == "a,b\n3,4\n" and oct(target.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
