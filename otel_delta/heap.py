"""The bridge gives the memory of finished requests back to the OS.

Importing this module (the CLI does, before anything loads pyarrow) sets the environment's
defaults for pyarrow's allocator; `return_large_blocks` tunes glibc's malloc in a serving
bridge. A value the environment already has is always kept.

1. **glibc's mmap threshold.** glibc serves a block of at least this size with its own
   mapping, unmapped on free — but the threshold starts at 128 KiB and rises to the size of
   every such block freed (up to 32 MiB). After the first 4 MB request body was freed, every
   later one came from the heap arenas, where freed memory stays resident and fragments
   between threads. `serve` fixes it at 1 MiB (`MALLOC_MMAP_THRESHOLD_` wins): bench/memory.py
   (4 MB requests, `buffer.max_bytes = 64 MiB`) peaked 25-35 MiB lower at 4, 16 and 64
   clients, and the Collector-like load (bench/collector_load.py) ran at the same speed.
2. **pyarrow's pool.** pyarrow allocates from its bundled mimalloc, which keeps freed pages
   for reuse; with the threshold above, malloc gives large freed buffers back at once.
   `ARROW_DEFAULT_MEMORY_POOL=system` is the default here, set before pyarrow loads, because
   pyarrow reads it once, then (`pa.set_memory_pool` later only reaches what pyarrow's Python
   API allocates itself: measured, no change). bench/memory.py at 64 clients
   peaked at 361-374 MiB instead of 394-407, the Collector-like load ran at 105.0k / 110.2k
   spans/s against 103.1k / 110.2k (alternating runs).
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 1024 * 1024

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


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
