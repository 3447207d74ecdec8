"""The IDX reader behind Fashion-MNIST, and the depth table's mean and SEM."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

from vbnn.data.fashion import IDXError, load_fashion_mnist, read_idx
from vbnn.experiments.depth_report import aggregate


def _write_idx(path, array: np.ndarray, gzipped: bool = True) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    payload = header + array.astype(np.uint8).tobytes()
    if gzipped:
        with gzip.open(path, "wb") as handle:
            handle.write(payload)
    else:
        path.write_bytes(payload)


def test_read_idx_round_trip(tmp_path) -> None:
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "images.gz", images)
    np.testing.assert_array_equal(read_idx(tmp_path / "images.gz"), images)
    _write_idx(tmp_path / "labels", np.array([3, 1, 4]), gzipped=False)
    np.testing.assert_array_equal(read_idx(tmp_path / "labels"), [3, 1, 4])


def test_read_idx_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(IDXError, match="not found"):
        read_idx(tmp_path / "missing.gz")
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x01\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(IDXError, match="bad: not an unsigned-byte IDX"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + b"abc")
    with pytest.raises(IDXError, match="short: header says shape"):
        read_idx(short)


def test_load_fashion_mnist_pairs_images_and_labels(tmp_path) -> None:
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    _write_idx(folder / "t10k-images-idx3-ubyte.gz", np.full((2, 28, 28), 255))
    _write_idx(folder / "t10k-labels-idx1-ubyte.gz", np.array([7, 9]))
    images, labels = load_fashion_mnist("test", tmp_path)
    assert images.shape == (2, 784) and float(images.max()) == 1.0
    np.testing.assert_array_equal(labels, [7, 9])
    _write_idx(folder / "t10k-labels-idx1-ubyte.gz", np.array([7, 9, 1]))
    with pytest.raises(IDXError, match="do not pair up"):
        load_fashion_mnist("test", tmp_path)
    with pytest.raises(ValueError, match="split"):
        load_fashion_mnist("validation", tmp_path)


def test_aggregate_reports_mean_and_standard_error() -> None:
    values = [1.0, 2.0, 6.0]
    records = [
        {
            "activation": "relu",
            "depth": 2,
            "repeat": k,
            "width": 29,
            "kl_diag_full": value,
            "wasserstein2": 2 * value,
            "kl_full_diag": 0.0,
            "nuts_ess_median": 10.0,
            "nuts_rhat_max": 1.0,
            "nuts_divergences": 0.0,
            "nuts_seconds": 1.0,
            "mean_field_test_accuracy": 1.0,
        }
        for k, value in enumerate(values)
    ]
    row = aggregate(records).iloc[0]
    assert row["kl_diag_full_mean"] == pytest.approx(3.0)
    assert row["kl_diag_full_sem"] == pytest.approx(np.std(values, ddof=1) / math.sqrt(3))
    assert row["wasserstein2_sem"] == pytest.approx(2 * np.std(values, ddof=1) / math.sqrt(3))
    assert row["repeats"] == 3
