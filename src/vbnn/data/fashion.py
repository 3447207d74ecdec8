"""Fashion-MNIST from its four official gzip'd IDX files (layout: ../shared/data/README.md).

IDX format: a big-endian header - two zero bytes, a type byte (0x08 = unsigned byte), the number
of dimensions - then one big-endian uint32 per dimension, then the data row-major. Images are
magic 2051 (N, 28, 28), labels magic 2049 (N,).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from vbnn.data.paths import resolve_data_dir

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


class IDXError(ValueError):
    """A malformed or missing IDX file; the message names the file."""


def read_idx(path: Path) -> np.ndarray:
    """The uint8 array stored in an IDX file (gzip'd when the name ends in .gz)."""
    if not path.is_file():
        raise IDXError(f"IDX file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            payload = handle.read()
    except (OSError, EOFError) as error:
        raise IDXError(f"{path}: cannot read ({error})") from None
    if len(payload) < 4 or payload[0:2] != b"\x00\x00" or payload[2] != 0x08:
        raise IDXError(f"{path}: not an unsigned-byte IDX file (header {payload[:4]!r})")
    dims = payload[3]
    header = 4 + 4 * dims
    if len(payload) < header:
        raise IDXError(f"{path}: truncated header")
    shape = tuple(int.from_bytes(payload[4 + 4 * k : 8 + 4 * k], "big") for k in range(dims))
    expected = int(np.prod(shape))
    if len(payload) - header != expected:
        raise IDXError(
            f"{path}: header says shape {shape} ({expected} bytes) "
            f"but the file holds {len(payload) - header}"
        )
    return np.frombuffer(payload, dtype=np.uint8, offset=header).reshape(shape)


def load_fashion_mnist(
    split: str = "train", data_dir: str | os.PathLike[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Images scaled to [0, 1] as (N, 784) float32 and labels (N,) int64.

    Args:
        split: "train" (60,000) or "test" (10,000).
        data_dir: the data directory (else $VBNN_DATA_DIR, else the user cache); the files are
            under ``<data_dir>/fashion-mnist/``.
    """
    if split not in FILES:
        raise ValueError(f"load_fashion_mnist: split must be 'train' or 'test', got {split!r}")
    folder = resolve_data_dir(data_dir) / "fashion-mnist"
    images = read_idx(folder / FILES[split][0])
    labels = read_idx(folder / FILES[split][1])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise IDXError(
            f"{folder}: images {images.shape} and labels {labels.shape} do not pair up "
            "(expected (N, 28, 28) and (N,))"
        )
    return (images.reshape(len(images), -1).astype(np.float32) / 255.0, labels.astype(np.int64))
