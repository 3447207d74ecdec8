"""Process-wide CPU settings that the training loops benefit from."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


@cache
def keep_freed_memory() -> bool:
    """Ask glibc to serve tensors of up to 32 MiB from its heap and not to return freed memory.

    A training step allocates and frees the same few MB-sized activation tensors thousands of
    times; by default glibc maps and unmaps each one, paying page faults on every step (measured:
    17.8 -> 12.9 ms per MF step on one power split, benchmarks/README.md). Returns False where
    mallopt is unavailable (not glibc); nothing else changes then.
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
