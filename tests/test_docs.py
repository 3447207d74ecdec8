"""Every ```python block of every docs/*.md page runs, and the families tables match the code.

The blocks of one page run in order in one namespace, after ``torch.manual_seed(0)``, inside a
temporary folder (so the files a page writes are thrown away), with torch on one thread
(``markdown_blocks.one_thread``). A page that loads UCI data is skipped when the data directory
is absent.
"""

from __future__ import annotations

import sys

import pytest
import torch
from markdown_blocks import ROOT, UCI_DATA, families_table, one_thread, python_blocks, run_block

PAGES = sorted((ROOT / "docs").glob("*.md"))
RUNNABLE = [page for page in PAGES if python_blocks(page)]


def test_docs_pages_exist() -> None:
    assert {"index.md", "tutorial.md", "families.md", "api.md"} <= {p.name for p in PAGES}


@pytest.mark.parametrize("page", RUNNABLE, ids=[page.stem for page in RUNNABLE])
def test_docs_page_runs(page, request, monkeypatch, tmp_path) -> None:
    blocks = python_blocks(page)
    if any("from transformers" in block for block in blocks):
        pytest.importorskip("transformers")  # the optional extra "hf"
    if any(marker in block for block in blocks for marker in (UCI_DATA, "load_images")):
        monkeypatch.setenv("VBNN_DATA_DIR", str(request.getfixturevalue("data_dir")))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict = {"__name__": "__main__"}
    try:
        with one_thread():
            for index, block in enumerate(blocks, start=1):
                run_block(block, f"docs/{page.name} python block {index}", namespace)
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close("all")


@pytest.mark.parametrize("path", ["README.md", "docs/families.md"])
def test_families_table_matches_the_registry(path: str) -> None:
    """The table is generated from ``vbnn.FAMILIES``; paste the expected one on a mismatch."""
    expected = families_table()
    assert expected in (ROOT / path).read_text(), f"{path} lacks this table:\n{expected}"
