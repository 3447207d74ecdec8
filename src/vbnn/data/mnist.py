"""MNIST and Fashion-MNIST from the official gzip'd IDX files (no torchvision).

Layout (shared/data/README.md): ``<data_dir>/mnist/*.gz`` and ``<data_dir>/fashion-mnist/*.gz``,
each file checked against the official md5 before it is decoded.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from enum import Enum
from pathlib import Path

import numpy as np
import torch

from vbnn.data.paths import resolve_data_dir
from vbnn.data.uci import DataError


class ImageDataset(str, Enum):
    MNIST = "mnist"
    FASHION_MNIST = "fashion-mnist"


# md5 of the gzip'd files, from shared/data/README.md (the official checksums)
CHECKSUMS: dict[ImageDataset, dict[str, str]] = {
    ImageDataset.MNIST: {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    ImageDataset.FASHION_MNIST: {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
}
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049


def md5_of(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_idx(path: Path, expected_md5: str | None = None) -> np.ndarray:
    """Decode one gzip'd IDX file (magic 2051: uint8 images N x 28 x 28; 2049: labels N).

    Raises:
        DataError: missing file, wrong checksum, or malformed content, naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"IDX file not found: {path}")
    if expected_md5 is not None and (found := md5_of(path)) != expected_md5:
        raise DataError(f"{path}: md5 {found} does not match the official {expected_md5}")
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 8:
        raise DataError(f"{path}: too short for an IDX header")
    magic, count = struct.unpack(">II", raw[:8])
    if magic == LABEL_MAGIC:
        shape, offset = (count,), 8
    elif magic == IMAGE_MAGIC:
        rows, cols = struct.unpack(">II", raw[8:16])
        shape, offset = (count, rows, cols), 16
    else:
        raise DataError(f"{path}: magic number {magic} is neither {IMAGE_MAGIC} nor {LABEL_MAGIC}")
    data = np.frombuffer(raw, dtype=np.uint8, offset=offset)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{path}: {data.size} bytes of data, header says shape {shape}")
    return data.reshape(shape)


def load_images(
    dataset: ImageDataset | str,
    split: str = "train",
    data_dir: str | os.PathLike[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 1, 28, 28) float32 in [0, 1] and labels (N,) int64 of ``split`` (train/test).

    Raises:
        DataError: the data directory lacks the files (with the expected path), or a check fails.
    """
    dataset = ImageDataset(dataset)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = resolve_data_dir(data_dir) / dataset.value
    prefix = "train" if split == "train" else "t10k"
    names = (f"{prefix}-images-idx3-ubyte.gz", f"{prefix}-labels-idx1-ubyte.gz")
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise DataError(
            f"{dataset.value}: {', '.join(missing)} not found in {folder}; set --data-dir or "
            "VBNN_DATA_DIR to a directory holding "
            f"{dataset.value}/<official gzip'd IDX files> (see shared/data/README.md)"
        )
    checksums = CHECKSUMS[dataset]
    images = read_idx(folder / names[0], checksums[names[0]])
    labels = read_idx(folder / names[1], checksums[names[1]])
    if len(images) != len(labels):
        raise DataError(f"{folder}: {len(images)} images but {len(labels)} labels")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))
