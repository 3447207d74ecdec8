"""Process-wide CPU settings that the training loops benefit from."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


@cache
def keep_freed_memory() -> bool:
    """Ask glibc to serve tensors of up to 32 MiB from its heap and not to return freed memory.

    A training step allocates and frees the same few MB-sized activation tensors thousands of
    times; by default glibc maps and unmaps each one, paying page faults on every step (the
    saving is measured in benchmarks/README.md). Returns False where mallopt is unavailable (not
    glibc); nothing else changes then.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))


@contextmanager
def one_core_for_noise() -> Iterator[int]:
    """Leave one of torch's intra-op threads to the background noise thread while training.

    ``ModelGenerators.drawing_ahead`` draws the next step's noise on its own thread; with torch
    also using every core, the two compete for the cores, so torch gets one thread fewer
    (measured: benchmarks/README.md). Yields the thread count used.
    """
    before = torch.get_num_threads()
    threads = max(1, before - 1)
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)
