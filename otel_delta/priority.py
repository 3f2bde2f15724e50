"""Background threads run below the threads that answer Exports.

The bridge's commits and its maintenance encode Parquet for seconds of a core at a time, while
requests keep arriving. At the same priority a request's conversion shared the cores with them
and waited, and that wait was most of the Export latency's tail under load (README,
Performance). A niced thread takes the cores the requests leave: it runs as fast whenever they
leave enough, and when they do not, the requests end up waiting for the memory that commits
free, which the buffer answers by spreading its commits over more threads.

Linux keeps a niceness per thread and sets it by thread id; a thread started by a niced thread
inherits it (delta-rs's runtime threads, when a commit starts them, run niced too). Elsewhere
`setpriority` would nice the whole process, so nothing is changed there. Lowering is one-way:
without privileges a thread cannot raise its priority again.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

BACKGROUND_NICENESS = 10  # Linux nice steps below the threads that answer Exports


def run_in_background() -> None:
    """Lower the calling thread's priority by BACKGROUND_NICENESS (Linux; a no-op elsewhere)."""
    if sys.platform != "linux":
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):  # a sandbox may refuse it: then the thread runs as is
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, current + BACKGROUND_NICENESS))
