"""Threads that run below the threads answering Exports.

A flush's Parquet encoding takes seconds of a core while requests keep arriving; at the same
priority a request's conversion shares the cores with it and waits, and that wait was most of
the Export latency's tail at 80% of the bridge's rate (docs/performance.md). Niced, the
encoding takes the cores the requests leave. But a niced thread cannot get its priority back
(without CAP_SYS_NICE), and when the cores are saturated it gets about a tenth of one: a
bridge whose every commit ran niced stored a quarter less under a saturating load. So only
files encoded while the buffer has room to spare go to a niced thread; the buffer decides
(`GroupCommitBuffer._room_to_spare`), file by file.

Linux keeps a niceness per thread and sets it by thread id; elsewhere `setpriority` would
nice the whole process, so nothing is changed there.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

BACKGROUND_NICENESS = 10  # Linux nice steps below the threads that answer Exports


def run_in_background() -> None:
    """Lower the calling thread's priority by BACKGROUND_NICENESS (Linux; a no-op elsewhere)."""
    if sys.platform != "linux":
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):  # a sandbox may refuse it: then the thread runs as is
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, current + BACKGROUND_NICENESS))


def background_threads(name: str, workers: int) -> ThreadPoolExecutor:
    """Niced worker threads. Threads they start inherit their niceness: give them work that
    starts none (pyarrow's Parquet writer, not delta-rs calls, whose runtime threads would
    stay niced for every later commit)."""
    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=run_in_background)
