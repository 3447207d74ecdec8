"""CIFAR-10 and CIFAR-100 from the official python-pickle archives (no torchvision).

Source: https://www.cs.toronto.edu/~kriz/cifar.html (Krizhevsky & Hinton 2009), the archives
``cifar-10-python.tar.gz`` and ``cifar-100-python.tar.gz``. Layout in the data directory:
``<data_dir>/cifar10/{data_batch_1..5, test_batch, batches.meta}`` and
``<data_dir>/cifar100/{train, test, meta}`` (the archive's files, without its top folder).

Each batch file is a pickled dict with ``b"data"`` (N, 3072) uint8 (1024 red, 1024 green, 1024 blue
values of a 32 x 32 image, row-major) and ``b"labels"`` (CIFAR-10) or ``b"fine_labels"`` /
``b"coarse_labels"`` (CIFAR-100). Files are read by a restricted unpickler that builds only dicts,
lists, bytes and NumPy arrays, so a foreign file cannot run code; the official files are also
checked against their md5 before they are decoded.

Checksums (md5): the archives' values are those published on the CIFAR page; the per-file values
are those of the files inside them (the same as torchvision's).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import torch

from vbnn.data.download import _fetch
from vbnn.data.mnist import md5_of
from vbnn.data.paths import resolve_data_dir
from vbnn.data.uci import DataError
from vbnn.stores.atomic import write_atomic, write_folder_atomic

BASE_URL = "https://www.cs.toronto.edu/~kriz"


class CifarDataset(str, Enum):
    CIFAR10 = "cifar10"
    CIFAR100 = "cifar100"


@dataclass(frozen=True)
class CifarSpec:
    """One CIFAR archive: its name, md5, top folder, label key, and files with their md5."""

    archive: str
    archive_md5: str
    top_folder: str
    label_key: bytes
    classes: int
    train: tuple[str, ...]
    test: str
    checksums: dict[str, str]


SPECS: dict[CifarDataset, CifarSpec] = {
    CifarDataset.CIFAR10: CifarSpec(
        archive="cifar-10-python.tar.gz",
        archive_md5="c58f30108f718f92721af3b95e74349a",
        top_folder="cifar-10-batches-py",
        label_key=b"labels",
        classes=10,
        train=tuple(f"data_batch_{k}" for k in range(1, 6)),
        test="test_batch",
        checksums={
            "data_batch_1": "c99cafc152244af753f735de768cd75f",
            "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
            "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
            "data_batch_4": "634d18415352ddfa80567beed471001a",
            "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
            "test_batch": "40351d587109b95175f43aff81a1287e",
            "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
        },
    ),
    CifarDataset.CIFAR100: CifarSpec(
        archive="cifar-100-python.tar.gz",
        archive_md5="eb9058c3a382ffc7106e4002c42a8d85",
        top_folder="cifar-100-python",
        label_key=b"fine_labels",
        classes=100,
        train=("train",),
        test="test",
        checksums={
            "train": "16019d7e3df5f24257cddd939b257f8d",
            "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
            "meta": "7973b15100ade9c7d40fb424638fde48",
        },
    ),
}
IMAGE_SHAPE = (3, 32, 32)

# the only globals a CIFAR pickle needs: NumPy's array reconstruction (numpy 1 and 2 names)
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
        return super().find_class(module, name)


def read_batch(
    path: str | os.PathLike[str], label_key: bytes = b"labels", expected_md5: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) int64 of one pickled CIFAR batch file.

    Raises:
        DataError: missing file, wrong md5, not a CIFAR pickle, or wrong shapes (naming the file).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CIFAR batch file not found: {path}")
    if expected_md5 is not None and (found := md5_of(path)) != expected_md5:
        raise DataError(f"{path}: md5 {found} does not match the official {expected_md5}")
    try:
        with open(path, "rb") as handle:
            content = _BatchUnpickler(handle, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise DataError(f"{path}: not a CIFAR python batch ({error})") from error
    if not isinstance(content, dict) or b"data" not in content or label_key not in content:
        keys = sorted(content) if isinstance(content, dict) else type(content).__name__
        raise DataError(f"{path}: expected a dict with b'data' and {label_key!r}, found {keys}")
    data = np.asarray(content[b"data"], dtype=np.uint8)
    labels = np.asarray(content[label_key], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != int(np.prod(IMAGE_SHAPE)):
        raise DataError(f"{path}: data has shape {data.shape}, expected (N, 3072)")
    if labels.shape != (len(data),):
        raise DataError(f"{path}: {len(data)} images but labels of shape {labels.shape}")
    return data.reshape(-1, *IMAGE_SHAPE), labels


def load_cifar(
    dataset: CifarDataset | str,
    split: str = "train",
    data_dir: str | os.PathLike[str] | None = None,
    verify: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 3, 32, 32) float32 in [0, 1] and labels (N,) int64 of ``split`` (train/test).

    Args:
        verify: check every file against the official md5 (False for files of your own making,
            e.g. a small file in the same format).

    Raises:
        DataError: the data directory lacks the files (with the expected path), or a check fails.
    """
    dataset = CifarDataset(dataset)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    spec = SPECS[dataset]
    folder = resolve_data_dir(data_dir) / dataset.value
    names = spec.train if split == "train" else (spec.test,)
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise DataError(
            f"{dataset.value}: {', '.join(missing)} not found in {folder}; run "
            f"`vbnn data download {dataset.value}` or set --data-dir / VBNN_DATA_DIR"
        )
    parts = [
        read_batch(folder / name, spec.label_key, spec.checksums[name] if verify else None)
        for name in names
    ]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.min() < 0 or labels.max() >= spec.classes:
        raise DataError(f"{folder}: labels outside 0..{spec.classes - 1}")
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels)


def extract_verified(archive: Path, spec: CifarSpec, destination: Path) -> None:
    """Write the archive's files (without the top folder) into ``destination``, each checked."""
    with tarfile.open(archive, "r:gz") as tar:
        for name, checksum in sorted(spec.checksums.items()):
            member = f"{spec.top_folder}/{name}"
            try:
                handle = tar.extractfile(member)
            except KeyError:
                raise DataError(f"{archive}: member {member} missing") from None
            if handle is None:
                raise DataError(f"{archive}: member {member} is not a file")
            content = handle.read()
            if (found := hashlib.md5(content).hexdigest()) != checksum:
                raise DataError(f"{member}: md5 {found} does not match the official {checksum}")
            (destination / name).write_bytes(content)


def download_cifar(
    dataset: CifarDataset | str,
    data_dir: str | os.PathLike[str] | None = None,
    base_url: str = BASE_URL,
    timeout: float = 300.0,
) -> Path:
    """Fetch the official archive, check its md5 and every file's, write ``<data_dir>/<name>``.

    The folder appears only when every check passed (``stores.atomic.write_folder_atomic``).
    """
    dataset = CifarDataset(dataset)
    spec = SPECS[dataset]
    destination = resolve_data_dir(data_dir) / dataset.value

    def fill(staging: Path) -> None:
        archive = staging / spec.archive
        _fetch(f"{base_url.rstrip('/')}/{spec.archive}", archive, timeout)
        if (found := md5_of(archive)) != spec.archive_md5:
            raise DataError(f"{spec.archive}: md5 {found} does not match {spec.archive_md5}")
        extract_verified(archive, spec, staging)
        archive.unlink()

    write_folder_atomic(destination, fill)
    return destination


def write_batch(
    path: str | os.PathLike[str],
    images: np.ndarray,
    labels: np.ndarray,
    label_key: bytes = b"labels",
) -> Path:
    """Write images (N, 3, 32, 32) uint8 and labels (N,) as one CIFAR python batch file."""
    images = np.asarray(images, dtype=np.uint8)
    if images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"write_batch: images of shape {images.shape}, expected (N, 3, 32, 32)")
    content = {b"data": images.reshape(len(images), -1), label_key: [int(v) for v in labels]}
    buffer = io.BytesIO()
    pickle.dump(content, buffer, protocol=2)
    return write_atomic(path, buffer.getvalue())
