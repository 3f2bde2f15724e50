"""The bridge gives the memory of finished requests back to the OS.

Importing this module (the CLI does, before anything loads pyarrow or starts a thread) sets
the environment's default for pyarrow's allocator and limits glibc to ARENAS arenas;
`trim_every` has a serving bridge hand glibc's free pages back. A value the environment
already has is always kept.

1. **glibc's arenas.** glibc serves a block of at least its mmap threshold with a mapping of
   its own, unmapped on free — but the threshold rises to the size of every such block freed
   (up to 32 MiB), so after the first 4 MB request body was freed every later one came from
   the arenas, where freed memory stays resident (only an arena's top is ever given back) and
   fragments between threads. A serving bridge checks every 0.2 s, on a thread of its own,
   how much glibc holds free, and over TRIM_FREE_BYTES calls `malloc_trim(0)` (about 0.04 ms
   a call), which gives the free pages inside the arenas back. Below that, free memory is left
   for reuse: each trim makes the next allocations fault their pages in afresh, and trimming
   whatever was free, every 0.2 s, left the Collector-like load (bench/collector_load.py,
   traces) behind 8dc4c6a, from before any of this (114.9k against 118.5k spans/s stored,
   with 2.4 times the page faults; four pairs, 0.4-7% behind); with the threshold, 119.8k /
   117.4k against 112.3k / 112.3k (alternating), and bench/memory.py at 4 / 16 / 64 clients
   peaked at 297 / 318 / 355 MiB (d000a91 in the same run: 322 / 337 / 363).
   Fixing the threshold at 1 MiB instead gave the same peaks (bench/memory.py at 4 / 16 / 64
   clients: 317-319 / 337-348 / 386-388 MiB, against 327-329 / 339-344 / 366-385 with the
   trim, two runs each) but made every large allocation map and fault in fresh pages: joining
   a 4 MiB bytes took 2.3 ms instead of 0.1 ms, and grpc.aio builds each request's bytes so,
   on the event loop.
2. **glibc's arena count.** glibc gives each new thread an arena of its own, up to eight per
   core, and the bridge has many threads (conversion, commits, gRPC, the log), each arena
   fragmenting apart. Importing this module limits them to ARENAS (`mallopt(M_ARENA_MAX)`,
   before the bridge starts its threads) unless `MALLOC_ARENA_MAX` is set. With a trim of all
   that is free every 0.2 s, bench/memory.py at 16 / 64 clients peaked at 362 / 383-387 MiB,
   against 380-395 / 434 with sixteen arenas and a trim each second (one session).
3. **pyarrow's pool.** pyarrow allocates from its bundled mimalloc, which keeps freed pages
   for reuse. `ARROW_DEFAULT_MEMORY_POOL=system` is the default here, so its buffers are
   malloc's and trimmed with the rest; it is set before pyarrow loads because pyarrow reads it
   once, then (`pa.set_memory_pool` later reaches only what pyarrow's Python API allocates:
   measured, no change). bench/memory.py at 64 clients peaked at 361-374 MiB instead of
   394-407, and the Collector-like load ran at 105.0k / 110.2k spans/s against 103.1k /
   110.2k (alternating runs).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading
import time
from collections.abc import Callable

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

TRIM_INTERVAL_SECONDS = 0.2
# what glibc may keep free before a trim gives it back: every trim makes the next allocations
# fault their pages in afresh, so memory that is reused at once is left alone
TRIM_FREE_BYTES = 32 * 1024 * 1024
ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` glibc arenas from now on (threads that have one keep it); False where
    glibc is not the C library or the environment sets MALLOC_ARENA_MAX (glibc's own)."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


limit_arenas()


class _Mallinfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (2.33+): byte counts of the arenas."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",  # free bytes held in the arenas
            "keepcost",
        )
    ]


@functools.cache
def _mallinfo2() -> Callable[[], _Mallinfo2] | None:
    """glibc's `mallinfo2`, ready to call (None: not glibc 2.33+)."""
    function = getattr(_glibc(), "mallinfo2", None)
    if function is not None:
        function.restype = _Mallinfo2
    return function


def free_bytes() -> int | None:
    """The bytes glibc holds free in its arenas (None: not glibc 2.33+)."""
    mallinfo2 = _mallinfo2()
    return None if mallinfo2 is None else int(mallinfo2().fordblks)


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int | None:
    """The process's resident memory now (its RSS, as `ps` and the benchmarks show it, shared
    libraries' mapped pages included), None where /proc/self/statm is not there (not Linux).
    About 7 us a call."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def trim_every(seconds: float = TRIM_INTERVAL_SECONDS, over: int = TRIM_FREE_BYTES) -> bool:
    """Every `seconds`, give glibc's free pages back to the OS if it holds more than `over`
    bytes free (always, where that cannot be told), on a daemon thread (ctypes lets go of the
    GIL during the calls); False where glibc is not the C library."""
    libc = _glibc()
    if libc is None:
        return False
    malloc_trim = libc.malloc_trim
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int

    def trim() -> None:
        while True:
            time.sleep(seconds)
            free = free_bytes()
            if free is None or free > over:
                malloc_trim(0)

    threading.Thread(target=trim, name="malloc-trim", daemon=True).start()
    return True
