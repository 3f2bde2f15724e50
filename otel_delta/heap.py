"""The bridge gives the memory of finished requests back to the OS.

Importing this module (the CLI does, before anything loads pyarrow) sets the environment's
default for pyarrow's allocator; `trim_every` has a serving bridge hand glibc's free pages
back. A value the environment already has is always kept.

1. **glibc's arenas.** glibc serves a block of at least its mmap threshold with a mapping of
   its own, unmapped on free — but the threshold rises to the size of every such block freed
   (up to 32 MiB), so after the first 4 MB request body was freed every later one came from
   the arenas, where freed memory stays resident (only an arena's top is ever given back) and
   fragments between threads. A serving bridge calls `malloc_trim(0)` once a second, on a
   thread of its own (about 0.04 ms a call), which gives the free pages inside the arenas back.
   Fixing the threshold at 1 MiB instead gave the same peaks (bench/memory.py at 4 / 16 / 64
   clients: 317-319 / 337-348 / 386-388 MiB, against 327-329 / 339-344 / 366-385 with the
   trim, two runs each) but made every large allocation map and fault in fresh pages: joining
   a 4 MiB bytes took 2.3 ms instead of 0.1 ms, and grpc.aio builds each request's bytes so,
   on the event loop.
2. **pyarrow's pool.** pyarrow allocates from its bundled mimalloc, which keeps freed pages
   for reuse. `ARROW_DEFAULT_MEMORY_POOL=system` is the default here, so its buffers are
   malloc's and trimmed with the rest; it is set before pyarrow loads because pyarrow reads it
   once, then (`pa.set_memory_pool` later reaches only what pyarrow's Python API allocates:
   measured, no change). bench/memory.py at 64 clients peaked at 361-374 MiB instead of
   394-407, and the Collector-like load ran at 105.0k / 110.2k spans/s against 103.1k /
   110.2k (alternating runs).
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
import time

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

TRIM_INTERVAL_SECONDS = 1.0


def trim_every(seconds: float = TRIM_INTERVAL_SECONDS) -> bool:
    """Give glibc's free pages back to the OS every `seconds`, on a daemon thread (ctypes lets
    go of the GIL during the call); False where glibc is not the C library."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int

    def trim() -> None:
        while True:
            time.sleep(seconds)
            malloc_trim(0)

    threading.Thread(target=trim, name="malloc-trim", daemon=True).start()
    return True
