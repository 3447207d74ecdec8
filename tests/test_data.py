"""UCI loading, standardisation, bad input, download from a local server, embedded default."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from vbnn.data import DataError, load_uci, resolve_data_dir
from vbnn.data.download import check, download
from vbnn.data.embedded import load_diabetes_splits
from vbnn.data.splits import stack_splits, standard_scale, standardise
from vbnn.regression.estimator import BayesianRegressor


def test_boston_has_the_standard_splits(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    assert boston.inputs.shape == (506, 13) and boston.num_splits == 20
    train, test = boston.split(0)
    assert len(train) == 455 and len(test) == 51 and not set(train) & set(test)


def test_standardisation_uses_training_statistics(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    data = stack_splits(boston, [0, 1], torch.float64)
    assert data.x_train.shape == (2, 455, 13)
    torch.testing.assert_close(data.x_train.mean(1), torch.zeros(2, 13, dtype=torch.float64))
    train, test = boston.split(1)
    scale = boston.target[train].std()
    assert float(data.target_scale[1]) == pytest.approx(scale)
    original = data.y_test[1].numpy() * scale + boston.target[train].mean()
    np.testing.assert_allclose(original, boston.target[test])


def test_constant_inputs_are_only_centred(data_dir: Path) -> None:
    naval = load_uci("naval", data_dir)
    data = stack_splits(naval, [0])
    assert torch.isfinite(data.x_train).all() and torch.isfinite(data.x_test).all()


def test_standard_scale_standardises_and_only_centres_a_constant_column() -> None:
    """(x - mean) / scale has mean 0 and std 1 in each column over the rows; a constant column
    gets scale 1, so it becomes 0 rather than 0/0; a 1-D target gets 0-d statistics. The
    estimators keep these as their scalers."""
    rng = np.random.default_rng(20261202)
    x = rng.normal(3.0, 2.0, size=(50, 3))
    x[:, 1] = 7.0
    mean, scale = standard_scale(x)
    z = (x - mean) / scale
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-14)
    np.testing.assert_allclose(z[:, [0, 2]].std(0), 1.0, rtol=1e-14)
    assert scale[1] == 1.0 and (z[:, 1] == 0.0).all()
    y_mean, y_scale = standard_scale(x[:, 0])
    assert y_mean.shape == () and y_scale == x[:, 0].std()
    train, test, returned = standardise(x[:40], x[40:])
    mean, scale = standard_scale(x[:40])
    assert np.array_equal(train, (x[:40] - mean) / scale)
    assert np.array_equal(test, (x[40:] - mean) / scale) and np.array_equal(returned, scale)
    estimator = BayesianRegressor(hidden=(), iterations=2, samples=2).fit(x, x[:, 0] + 1.0)
    assert np.array_equal(estimator.x_scale_, standard_scale(x)[1])
    assert estimator.y_scale_ == float(x[:, 0].std())


def write_set(root: Path, rows: list[str], train: str = "0 1 2\n", test: str = "3\n") -> Path:
    folder = root / "uci" / "bostonHousing"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("".join(rows))
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "n_splits.txt").write_text("1\n")
    (folder / "index_train_0.txt").write_text(train)
    (folder / "index_test_0.txt").write_text(test)
    return folder


GOOD_ROWS = ["1 2 3\n", "4 5 6\n", "7 8 9\n", "1 0 1\n"]


def test_a_small_valid_set_loads(tmp_path: Path) -> None:
    write_set(tmp_path, GOOD_ROWS)
    data = load_uci("boston", tmp_path)
    np.testing.assert_array_equal(data.target, [3, 6, 9, 1])


@pytest.mark.parametrize(
    ("rows", "train", "message"),
    [
        (["1 2 3\n", "4 5\n", "7 8 9\n", "1 0 1\n"], "0 1 2\n", r"data.txt, line 2: 2 columns"),
        (["1 2 3\n", "4 x 6\n", "7 8 9\n", "1 0 1\n"], "0 1 2\n", r"line 2, column 2: non-numeric"),
        (["1 2 3\n", "4 5 6\n", "7 nan 9\n", "1 0 1\n"], "0 1 2\n", r"line 3, column 2: 'nan'"),
        (GOOD_ROWS, "0 1\n9\n", r"index_train_0.txt, line 2: row index 9 out of range"),
    ],
)
def test_bad_input_names_file_and_line(
    tmp_path: Path, rows: list[str], train: str, message: str
) -> None:
    write_set(tmp_path, rows, train=train)
    with pytest.raises(DataError, match=message):
        load_uci("boston", tmp_path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    folder = write_set(tmp_path, GOOD_ROWS)
    (folder / "index_test_0.txt").unlink()
    with pytest.raises(DataError, match=r"index_test_0.txt: file not found"):
        load_uci("boston", tmp_path)


def test_missing_set_and_unknown_name_and_missing_split(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="vbnn data download boston"):
        load_uci("boston", tmp_path)
    with pytest.raises(DataError, match="unknown data set 'bostn'"):
        load_uci("bostn", tmp_path)
    write_set(tmp_path, GOOD_ROWS)
    with pytest.raises(DataError, match="split 3 does not exist"):
        load_uci("boston", tmp_path).split(3)


def test_data_dir_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VBNN_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv("VBNN_DATA_DIR")
    assert resolve_data_dir() == tmp_path / "cache" / "vbnn" / "data"


def test_embedded_default_has_twenty_seeded_splits() -> None:
    diabetes = load_diabetes_splits(seed=0)
    assert diabetes.num_splits == 20
    train, test = diabetes.split(7)
    assert len(test) == 44 and len(train) == 398 and not set(train) & set(test)
    np.testing.assert_array_equal(load_diabetes_splits(seed=0).split(7)[1], test)


@pytest.fixture
def served_yacht(data_dir: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A local HTTP server on 127.0.0.1 serving <root>/yacht/data/<file> like the real source."""
    root = tmp_path / "served"
    shutil.copytree(data_dir / "uci" / "yacht", root / "yacht" / "data")
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_download_verifies_and_writes(served_yacht: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = served_yacht
    target = tmp_path / "cache"
    folder = download("yacht", target, base_url=url)
    assert folder == target / "uci" / "yacht"
    assert load_uci("yacht", target).num_splits == 20
    status = {s.name: s.status for s in check(target)}
    assert status["yacht"] == "verified" and status["boston"] == "missing"


def test_corrupted_download_is_rejected_and_leaves_nothing(
    served_yacht: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = served_yacht
    with (root / "yacht" / "data" / "index_test_3.txt").open("a") as handle:
        handle.write("5\n")
    target = tmp_path / "cache"
    with pytest.raises(DataError, match=r"yacht/index_test_3.txt: sha256 .* does not match"):
        download("yacht", target, base_url=url)
    assert list((target / "uci").iterdir()) == []


def test_unreachable_source_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"download of http://127\.0\.0\.1:9/yacht"):
        download("yacht", tmp_path, base_url="http://127.0.0.1:9", timeout=2)
    assert list((tmp_path / "uci").iterdir()) == []
