"""End to end: ``vbnn reproduce variance-networks`` at a tiny size writes every table and figure."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from vbnn.cli import main
from vbnn_lab.variance_networks import checked_device
from vbnn_lab.variance_networks.budget import BUDGETS
from vbnn_lab.variance_networks.runs import (
    NetworkRun,
    network_specs,
    protocol_config,
    run_key,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
EXPECTED = [
    "summary.md",
    "run.json",
    "table1_parameterizations.csv",
    "table1_layer_tracking.csv",
    "table1_layer_phase_transition.png",
    "kappa_histograms.png",
    "sparse_ensemble.csv",
    "sparse_ensemble.png",
    "variance_pruning.csv",
    "variance_pruning.png",
    "table2_lenet5.csv",
    "table2_variance_tracking.csv",
    "table2_variance_phase_transition.png",
    "table2_dropout_tracking.csv",
    "appendix_c_tanh.csv",
    "toy_accuracy.csv",
    "toy_bottleneck.png",
]


def test_tiny_reproduction_writes_every_file(tmp_path: Path, capsys) -> None:
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    out = tmp_path / "out"
    argv = ["reproduce", "variance-networks", "--size", "tiny", "--out", str(out)]
    assert main([*argv, "--data-dir", str(data), "--no-progress"]) == 0
    for name in EXPECTED:
        assert (out / name).is_file(), name
        assert (out / name).stat().st_size > 0, name
    summary = (out / "summary.md").read_text()
    assert "Table 1 of Neklyudov et al. 2019" in summary and "paper ensemble" in summary
    assert "tiny run on a data subset" in capsys.readouterr().out
    # a second call reuses the stored runs (a killed run loses nothing already finished)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    assert len(before) >= 2 * 11  # a .json and a .npz (settings, result, weights) per run
    assert main([*argv, "--data-dir", str(data), "--no-progress"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == before


def test_tiny_phase_only_run_writes_its_tracking(tmp_path: Path) -> None:
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    out = tmp_path / "phase"
    argv = ["reproduce", "variance-networks", "--size", "tiny", "--phase-only", "--epochs", "2"]
    argv += ["--log-alpha-lr", "0.1", "--out", str(out), "--data-dir", str(data), "--no-progress"]
    assert main(argv) == 0
    tracking = (out / "phase_only_tracking.csv").read_text().splitlines()
    assert tracking[0].startswith("epoch,deterministic,sample,ensemble,zero-mean,log_alpha_dense1")
    assert len(tracking) == 3  # header + 2 epochs
    assert (out / "phase_only_phase_transition.png").stat().st_size > 0


def test_selected_networks_train_alone_with_the_authors_protocol(tmp_path: Path, capsys) -> None:
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    out = tmp_path / "selected"
    argv = ["reproduce", "variance-networks", "--size", "tiny", "--epochs", "3", "--eval-every"]
    argv += ["2", "--protocol", "authors", "--networks", "table2-variance,table1-layer"]
    argv += ["--out", str(out), "--data-dir", str(data), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "protocol authors" in printed and "table1-layer" in printed
    tracking = (out / "table2-variance_tracking.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in tracking[1:]] == ["2", "3"]  # every 2nd and the last
    for name in ("table2-variance_phase_transition.png", "table1-layer_kappa_histograms.png"):
        assert (out / name).stat().st_size > 0
    assert "protocol" in (out / "table1-layer_summary.csv").read_text()
    records = [json.loads(p.read_text()) for p in (out / "runs").glob("*.json")]
    assert sorted(r["settings"]["name"] for r in records) == ["table1-layer", "table2-variance"]
    for record in records:
        assert record["info"]["protocol"]["batch_size"] == 200
        assert record["info"]["protocol"]["schedule"] == "linear"
        assert record["settings"]["config"]["batch_norm"] is True
        assert len(record["info"]["epoch_seconds"]) == 3
    assert not list((out / "runs").glob("*.checkpoint.pt"))  # deleted once stored
    before = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    assert main(argv) == 0  # stored: skipped
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == before
    assert main([*argv, "--batchnorm-diagnostic"]) == 0  # reads the stored networks only
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == before
    diagnostic = pd.read_csv(out / "batchnorm_diagnostic.csv").set_index("network")
    for name in ("table1-layer", "table2-variance"):
        summary = pd.read_csv(out / f"{name}_summary.csv")
        assert diagnostic.loc[name, "running"] == pytest.approx(summary["deterministic"][0])
    text = ["reproduce", "variance-networks", "--size", "tiny", "--batchnorm-diagnostic"]
    capsys.readouterr()
    assert main([*text, "--out", str(out), "--data-dir", str(data)]) == 2  # text: not stored
    assert "no finished 'table1-layer' run" in capsys.readouterr().err
    wrong = ["reproduce", "variance-networks", "--size", "tiny", "--networks", "table9"]
    assert main([*wrong, "--out", str(out), "--data-dir", str(data)]) == 2
    assert "unknown ['table9']" in capsys.readouterr().err


def test_device_flag_names_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    assert checked_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="--device 'gpu0'"):
        checked_device("gpu0")
    if not torch.cuda.is_available():
        assert main(["reproduce", "variance-networks", "--device", "cuda", "--size", "tiny"]) == 2
        error = capsys.readouterr().err
        assert "--device 'cuda': this machine's torch sees no CUDA device" in error


def test_batchnorm_ablation_differs_from_the_authors_protocol_only_in_batchnorm() -> None:
    spec = network_specs()["table1-layer"]
    authors = replace(BUDGETS["tiny"], protocol="authors")
    ablation = replace(BUDGETS["tiny"], protocol="authors-without-batchnorm")
    with_norm, without_norm = protocol_config(spec, authors), protocol_config(spec, ablation)
    assert with_norm.batch_norm and not without_norm.batch_norm
    assert replace(without_norm, batch_norm=True) == with_norm
    assert run_key(NetworkRun("table1-layer", authors, 0)) != run_key(
        NetworkRun("table1-layer", ablation, 0)
    )
