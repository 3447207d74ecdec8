"""The one way this package writes a file or a folder: whole, or not at all.

Content goes to a temporary name in the same folder (so the same file system), then
``os.replace`` puts it in place in one step: a reader, or a run resumed after a kill, sees the old
version or the new one, never half of one; a temporary left by a kill starts with "." and is
ignored by every reader of the package.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

Content = str | bytes | Callable[[Path], None]


def write_atomic(path: str | Path, content: Content) -> Path:
    """Write ``path`` atomically: ``content`` is text, bytes, or a function writing a given path
    (``torch.save``, ``figure.savefig``, ``numpy.savez`` ...). Creates missing parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(name)
    try:
        if isinstance(content, str):
            temporary.write_text(content)
        elif isinstance(content, bytes):
            temporary.write_bytes(content)
        else:
            content(temporary)
        temporary.chmod(0o644)  # mkstemp makes it private; the result is an ordinary file
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_folder_atomic(folder: str | Path, fill: Callable[[Path], None]) -> Path:
    """Create ``folder`` atomically: ``fill(staging)`` writes the files into an empty staging
    folder, which then replaces ``folder`` (an existing one is moved aside first and deleted)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent)
    )
    staging.chmod(0o755)  # mkdtemp makes it private (0700); the result is an ordinary folder
    try:
        fill(staging)
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
            os.replace(staging, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
