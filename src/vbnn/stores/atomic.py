"""The one way this package writes a file or a folder of run state: whole, or not at all.

Content goes to a temporary name in the same folder (so the same file system), is flushed to the
disk (``os.fsync``), and ``os.replace`` then puts it in place in one step: a reader, or a run
resumed after a kill (even ``SIGKILL``, or a power cut once the folder's entry is on the disk), sees
the old version or the new one, never half of one. A temporary left by a kill starts with "."
and ends with ".tmp" (a folder's with ".partial"), so no reader of the package takes it for a
file it stores; the next write of the same file leaves it alone (another writer may own it), and
it is safe to delete.

``atomic_path`` is the building block (a temporary path to write, put in place on success and
removed on failure); ``write_atomic`` writes text, bytes, or whatever a function writes to a path
(``torch.save``, ``figure.savefig``) in one line; ``write_folder_atomic`` does the same for a
folder of files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Content = str | bytes | Callable[[Path], None]


def _sync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries) to the disk; a file system that cannot
    sync a folder is fine."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write the new version to: on leaving the block it is
    synced and replaces ``path`` in one step; an error inside the block removes it and leaves
    ``path`` as it was. Creates missing parent folders.

    Example::

        with atomic_path(folder / "state.pt") as temporary:
            torch.save(state, temporary)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        temporary.chmod(0o644)  # mkstemp makes it private; the result is an ordinary file
        _sync(temporary)
        os.replace(temporary, path)
        _sync(path.parent)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomic(path: str | Path, content: Content) -> Path:
    """Write ``path`` atomically (``atomic_path``): ``content`` is text, bytes, or a function
    writing a given path (``torch.save``, ``figure.savefig``, ``numpy.savez`` ...)."""
    path = Path(path)
    with atomic_path(path) as temporary:
        if isinstance(content, str):
            temporary.write_text(content)
        elif isinstance(content, bytes):
            temporary.write_bytes(content)
        else:
            content(temporary)
    return path


def write_folder_atomic(folder: str | Path, fill: Callable[[Path], None]) -> Path:
    """Create ``folder`` atomically: ``fill(staging)`` writes the files into an empty staging
    folder, whose files are synced before it replaces ``folder`` (an existing one is moved aside
    first and deleted; a kill between the two moves leaves it as ``.<name>.old``)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent)
    )
    staging.chmod(0o755)  # mkdtemp makes it private (0700); the result is an ordinary folder
    try:
        fill(staging)
        for file in staging.rglob("*"):
            _sync(file)
        _sync(staging)
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
            os.replace(staging, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, folder)
        _sync(folder.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
