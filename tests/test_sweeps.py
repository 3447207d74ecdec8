"""Sweeps without Ray: GRID.toml parsing and its errors, the local executor's failure summary,
a grid and an Optuna search end to end, and the clear errors when Ray is not installed or its
address does not answer."""

from __future__ import annotations

import argparse
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest

from vbnn.cli import main
from vbnn.regression.grid import GridError, load_grid, parse_grid
from vbnn.regression.methods import method_config
from vbnn.regression.sweep_command import search_study_name
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.executors import LocalExecutor, SweepError, drive, make_executor, settings_from

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grid.toml"


def test_example_grid_parses_into_every_combination() -> None:
    grid = load_grid(EXAMPLE)
    # 2 methods x 2 prior scales x 2 seeds, on yacht's splits 0-3 in units of 2
    assert grid.datasets == ("yacht",) and grid.splits == (0, 1, 2, 3)
    assert grid.splits_per_unit == 2 and grid.search is None
    expected = {
        method_config(m, seed=s, iterations=500, prior_std=p)
        for m in ("map", "mf")
        for p in (0.5, 1.0)
        for s in (0, 1)
    }
    assert set(grid.configs) == expected and len(grid.configs) == 8


def test_a_family_name_is_vi_with_that_family_and_settings_go_where_they_apply() -> None:
    text = ('[grid]\ndatasets = ["yacht"]\nmethods = ["mf", "vd-layer", "es"]\n'
            "[grid.hyperparameters]\nprior_std = [0.5, 1.0]\n")  # fmt: skip
    grid = parse_grid(text, Path("g.toml"))
    described = [(c.algorithm.value, c.method, getattr(c, "prior_std", None)) for c in grid.configs]
    assert described == [
        ("vi", "mf", 0.5),
        ("vi", "mf", 1.0),
        ("vi", "vd-layer", 0.5),
        ("vi", "vd-layer", 1.0),
        ("es", "es", None),  # ES takes no prior: one run, not two identical ones
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[grid\n", "not valid TOML"),
        ('[grid]\ndatasets = ["nowhere"]\nmethods = ["mf"]\n', "datasets ['nowhere']"),
        ('[grid]\ndatasets = ["yacht"]\nmethods = ["bogus"]\n', "methods ['bogus']"),
        ('[grid]\ndatasets = ["yacht"]\nmethods = ["vi"]\n', "methods ['vi']"),
        ('[grid]\ndatasets = ["yacht"]\nmethods = ["mf"]\nfamilies = ["mf"]\n', "unknown keys"),
        ('[grid]\ndatasets=["yacht"]\nmethods=["es"]\n[grid.hyperparameters]\nprior_std=[1]\n',
         "not a setting of methods ['es']"),
        ('[grid]\ndatasets = ["yacht"]\nmethods = ["mf"]\nsplits = "4-1"\n', "splits '4-1'"),
        ('[grid]\ndatasets = []\nmethods = ["mf"]\n', "datasets must be a non-empty list"),
        ('[grid]\ndatasets = ["yacht"]\nmethods = ["mf"]\ncolour = 1\n', "unknown keys"),
        ('[grid]\ndatasets=["yacht"]\nmethods=["mf"]\n[grid.hyperparameters]\nlr=[1]\n', "'lr'"),
        ('[grid]\ndatasets=["yacht"]\nmethods=["mf"]\n[grid.hyperparameters]\nprior_std=[-1]\n',
         "invalid prior_std"),
        ('[grid]\ndatasets=["yacht"]\nmethods=["mf"]\n[search]\nworkers=0\n', "workers"),
        ('[grid]\ndatasets=["yacht"]\nmethods=["mf"]\n[grid.hyperparameters]\n'
         'device=["cpu", "cuda"]\n', "device takes one value"),
    ],
)  # fmt: skip
def test_bad_grids_name_the_file_and_the_entry(text: str, message: str) -> None:
    with pytest.raises(GridError, match=r"bad\.toml") as error:
        parse_grid(text, Path("bad.toml"))
    assert message in str(error.value)


def _square(x: int) -> int:
    if x == 2:
        raise ArithmeticError("two is refused")
    return x * x


def test_local_drive_stores_the_others_and_summarises_failures() -> None:
    stored: dict[str, int] = {}
    units = [Unit(f"u{x}", _square, (x,)) for x in range(4)]
    with pytest.raises(SweepError) as error:
        drive(LocalExecutor(), units, lambda unit, value: stored.update({unit.key: value}),
              progress=False)  # fmt: skip
    assert stored == {"u0": 0, "u1": 1, "u3": 9}
    assert "1 of 4 units failed" in str(error.value)
    assert "u2: ArithmeticError: two is refused" in str(error.value)


def test_ray_missing_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "vbnn.sweeps.ray_executor", raising=False)
    with pytest.raises(ValueError, match=r"pip install 'vbnn\[ray\]'"):
        make_executor(ExecutorSettings(kind=ExecutorKind.RAY))
    with pytest.raises(ValueError, match="--address needs --executor ray"):
        ExecutorSettings(address="127.0.0.1:6379")


def _silent_port() -> int:
    """A port of this machine where nothing listens (bound, then let go)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


def test_a_ray_address_where_nothing_answers_is_refused_in_seconds(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    """No ray.init on it (which waits minutes): the command ends at once, naming the address
    and how to start a cluster there; nothing is stored."""
    ray = pytest.importorskip("ray")
    port = _silent_port()
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid]\ndatasets = ["yacht"]\nmethods = ["map"]\nsplits = "0"\n')
    out = tmp_path / "out"
    start = time.monotonic()
    command = ["sweep", str(grid), "--out", str(out), "--no-progress", "--executor", "ray"]
    command += ["--address", f"127.0.0.1:{port}"]
    assert main(command) == 2
    assert time.monotonic() - start < 10
    error = capsys.readouterr().err
    assert f"vbnn: error: --address 127.0.0.1:{port}: no Ray cluster reachable" in error
    assert f"`ray start --head --port {port}`" in error and "Traceback" not in error
    assert not ray.is_initialized()


def _answering(frame: bytes) -> tuple[socket.socket, threading.Thread]:
    """A listener that answers its first connection with ``frame``, as a gRPC server answers
    with its SETTINGS frame."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(frame)
            connection.recv(64)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return listener, thread


def test_the_ray_address_probe_tells_a_grpc_server_from_another_listener(monkeypatch) -> None:
    pytest.importorskip("ray")
    from vbnn.sweeps.ray_executor import check_reachable

    settings = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an empty SETTINGS frame's header
    for prefix in ("", "ray://"):
        listener, thread = _answering(settings)
        with listener:
            check_reachable(f"{prefix}127.0.0.1:{listener.getsockname()[1]}", 5.0)
            thread.join(5)
    listener, thread = _answering(b"+OK redis\r\n")
    with listener, pytest.raises(ConnectionError, match=r"something listens at .* but not a Ray"):
        check_reachable(f"127.0.0.1:{listener.getsockname()[1]}", 5.0)
    thread.join(5)
    with socket.socket() as silent:  # the kernel accepts the connection; nobody answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=r"not a Ray cluster \(no answer within 0\.5 s"):
            check_reachable(f"127.0.0.1:{silent.getsockname()[1]}", 0.5)
        assert time.monotonic() - start < 3
    check_reachable("auto", 1.0)  # Ray's to resolve

    def unanswered(address, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", unanswered)
    refused = r"ray://10\.0\.0\.5: no Ray cluster reachable at 10\.0\.0\.5:10001 \(no answer "
    with pytest.raises(ConnectionError, match=refused + r"within 2\.5 s\)"):
        check_reachable("ray://10.0.0.5", 2.5)
    with pytest.raises(ValueError, match="connect_timeout must be > 0, got 0"):
        ExecutorSettings(kind=ExecutorKind.RAY, connect_timeout=0)


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as connection:
        return sorted(connection.execute(
            "SELECT dataset, split, method, config_hash, seed, hyperparameters, metrics FROM runs"
        ).fetchall())  # fmt: skip


def test_grid_sweep_stores_one_row_per_run_and_resumes(data_dir: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid]\ndatasets = ["yacht"]\nmethods = ["map"]\nseeds = [0, 1]\n'
                    'splits = "0-2"\nsplits_per_unit = 2\n[grid.hyperparameters]\n'
                    'iterations = [30]\n')  # fmt: skip
    out = tmp_path / "out"
    command = ["sweep", str(grid), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    rows = _rows(out / "results.sqlite")
    assert sorted((r[1], r[4]) for r in rows) == [(k, s) for k in range(3) for s in (0, 1)]
    assert main(command) == 0  # all stored: nothing trained, nothing duplicated
    assert _rows(out / "results.sqlite") == rows


def test_optuna_search_with_two_workers_on_a_journal(data_dir: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid]\ndatasets = ["yacht"]\nmethods = ["map"]\nsplits = "0-1"\n'
                    '[grid.hyperparameters]\niterations = [20]\n'
                    '[search]\ntrials = 4\nbatch = 2\nworkers = 2\n')  # fmt: skip
    out = tmp_path / "out"
    assert main(["sweep", str(grid), "--out", str(out), "--no-progress"]) == 0
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))
    )
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.n_trials == 4  # the second worker found the budget spent
    rows = _rows(out / "results.sqlite")
    assert [r[1] for r in rows] == [0, 1]
    assert '"search": "optuna"' in rows[0][5] and '"prior_std"' in rows[0][5]


def test_the_command_line_does_not_import_ray() -> None:
    code = (
        "import sys; from vbnn.cli import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.endswith('ray_executor')))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


def test_a_search_resumed_after_a_kill_requeues_the_running_candidates(
    data_dir: Path, tmp_path: Path
) -> None:
    """A killed sweep leaves trials RUNNING in the shared journal; the workers cannot tell them
    from a live worker's, so the driver abandons them before any worker starts and the search
    scores their candidates first, within the budget."""
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid]\ndatasets = ["yacht"]\nmethods = ["map"]\nsplits = "0"\n'
                    '[grid.hyperparameters]\niterations = [20]\n'
                    '[search]\ntrials = 3\nbatch = 3\nworkers = 2\n')  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str((out / "optuna.journal").resolve()))
    )
    ((name, config),) = load_grid(grid).runs()
    study = optuna.create_study(
        study_name=search_study_name(name, config, load_grid(grid).search),
        storage=storage,
        direction="maximize",
    )
    killed = [study.ask() for _ in range(2)]  # the killed process's round, never told
    for trial in killed:
        trial.suggest_float("prior_std", 0.01, 10.0, log=True)
    assert main(["sweep", str(grid), "--out", str(out), "--no-progress"]) == 0
    trials = optuna.load_study(study_name=study.study_name, storage=storage).trials
    states = [t.state for t in trials]
    assert states.count(optuna.trial.TrialState.RUNNING) == 0
    assert sum(bool(t.user_attrs.get("abandoned")) for t in trials) == 2
    scored = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(scored) == 3
    assert {t.params["prior_std"] for t in killed} <= {t.params["prior_std"] for t in scored}


@pytest.mark.parametrize(
    ("options", "devices", "message"),
    [
        ({"executor": "ray", "device": "cuda"}, (), "--device cuda on Ray needs --gpus-per-unit"),
        ({"executor": "ray"}, ("cpu", "cuda:1"), "--device cuda:1 on Ray"),
        ({"executor": "local", "gpus_per_unit": 1.0}, (), "--gpus-per-unit needs --executor ray"),
        ({"executor": "ray", "gpus_per_unit": -1.0}, (), "--gpus-per-unit must be >= 0"),
    ],
)
def test_gpu_settings_of_an_executor_are_checked(
    options: dict, devices: tuple, message: str
) -> None:
    """Ray hides the GPUs from a task that declares none: a CUDA sweep on Ray must declare them."""
    defaults = {"address": None, "cpus_per_unit": None, "workers": None, "gpus_per_unit": 0.0}
    with pytest.raises(ValueError, match=message):
        settings_from(argparse.Namespace(**{**defaults, **options}), devices)
    fine = {**defaults, "executor": "ray", "device": "cuda", "gpus_per_unit": 0.5}
    assert settings_from(argparse.Namespace(**fine)).gpus_per_unit == 0.5
