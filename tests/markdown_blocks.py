"""Runnable documentation: the ```python blocks of a Markdown file and the families table.

Used by tests/test_readme.py (each README block alone) and tests/test_docs.py (the blocks of a
docs page in order, in one namespace, so that a tutorial can build up). Blocks fenced with any
other language (```, ```diff, ...) are shown, not run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from vbnn import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
UCI_DATA = "load_uci"  # a block that names it reads the UCI files from $VBNN_DATA_DIR


def python_blocks(path: Path) -> list[str]:
    """The source of every ```python block of ``path``, in order."""
    return PYTHON_BLOCK.findall(path.read_text())


def run_block(source: str, label: str, namespace: dict) -> None:
    """Execute one block in ``namespace``; tracebacks name ``label`` and the block's line."""
    exec(compile(source, label, "exec"), namespace)


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread while the blocks run, then as before.

    The examples are tiny networks; on a busy 2-core machine torch's thread pool made them
    several times slower (the tutorial page: 67 s on the default threads, 8 s on one).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def families_table() -> str:
    """The Markdown table of ``vbnn.FAMILIES``: registry name and its one-line description."""
    rows = [f"| `{name}` | {spec.description} |" for name, spec in FAMILIES.items()]
    return "\n".join(["| family | what it is |", "|---|---|", *rows])
