"""Every Python code block of README.md runs, each on its own (tests/markdown_blocks.py)."""

from __future__ import annotations

import pytest
import torch
from markdown_blocks import ROOT, UCI_DATA, one_thread, python_blocks, run_block

README = ROOT / "README.md"
BLOCKS = python_blocks(README)


def test_readme_has_python_examples() -> None:
    assert BLOCKS, "README.md has no ```python block"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, request, monkeypatch, tmp_path) -> None:
    if UCI_DATA in BLOCKS[index]:  # skipped when the UCI files are absent
        monkeypatch.setenv("VBNN_DATA_DIR", str(request.getfixturevalue("data_dir")))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    with one_thread():
        run_block(BLOCKS[index], f"README.md python block {index + 1}", {"__name__": "__main__"})
