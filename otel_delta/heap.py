"""A serving bridge gives the memory of finished requests back to the OS.

1. glibc serves a block of at least its mmap threshold with its own mapping, unmapped on free —
but the threshold starts at 128 KiB and rises to the size of every such block freed (up to
32 MiB). After the first 4 MB request body is freed, every later one comes from the heap
arenas instead, where freed memory stays resident and fragments between threads. Fixing the
threshold at 1 MiB keeps request bodies and the like on their own mappings: bench/memory.py
(64 clients, 4 MB requests, `buffer.max_bytes = 64 MiB`) peaked 25-35 MiB lower at every
client count, and the Collector-like load (bench/collector_load.py) ran at the same speed.
A threshold the environment sets (`MALLOC_MMAP_THRESHOLD_`) is left as it is.

2. pyarrow allocates from its own jemalloc pool by default, which keeps freed pages for reuse.
With the threshold above, glibc unmaps large freed buffers at once, so pyarrow is moved to the
system pool: bench/memory.py at 64 clients peaked at 361-374 MiB instead of 395-407, and the
Collector-like load ran at 106.5k / 114.4k spans/s against 105.4k / 108.8k (alternating runs).
`ARROW_DEFAULT_MEMORY_POOL` in the environment wins.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

import pyarrow as pa

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 1024 * 1024


def give_memory_back() -> None:
    """Both settings of the module's docstring, for a serving bridge."""
    return_large_blocks()
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        pa.set_memory_pool(pa.system_memory_pool())


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold (see the module's docstring); False where it does not apply:
    another C library, or a threshold the environment already set."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:  # glibc: 1 on success
        log.warning("could not set malloc's mmap threshold; memory use may be higher")
        return False
    return True
