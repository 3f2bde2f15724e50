"""Crash and pause points, for the tests that prove what survives a crash (or a stop) at each
step of ingestion.

`OTEL_DELTA_CRASH_AT=<point>` in a bridge's (or a stream job's) environment makes the process
exit at once — no cleanup, no flush, like `kill -9` — the first time it reaches that point.
`OTEL_DELTA_PAUSE_AT=<point>:<seconds>` makes it sleep there each time instead, so that a test
can act while a step is under way. Unset (always, in production) each costs one string
comparison.
"""

from __future__ import annotations

import os
import sys
import time

CRASH_EXIT_CODE = 86
POINTS = (
    "wal-written",  # a record batch is written to the segment, not yet fsync'd
    "wal-synced",  # the batch is fsync'd, its senders not yet answered
    "delta-committed",  # a Delta commit succeeded, its records not yet released from the log
    # `otel-delta stream`: one table of a micro-batch committed, the batch's other tables not
    "stream-table-committed",
    # `otel-delta backfill`: a load's tables committed, its files not yet in the ledger
    "backfill-committed",
)
# `otel-delta stream`: an executor converting a micro-batch's messages (pause only); an
# optimize holding the table's maintenance lease, before it plans (pause only); the closed
# days' Z-order fallback (closed_days.py) holding the lease, before delta-rs's rewrite; a start
# replaying the write-ahead log, before each record (pause only: off the event loop, `pausing`);
# `otel-delta backfill` with its files planned (the ledger read), before it converts them
PAUSE_POINTS = (
    "stream-converting",
    "optimize-leased",
    "z-order-leased",
    "wal-replaying",
    "backfill-planned",
)
_CRASH_AT = os.environ.get("OTEL_DELTA_CRASH_AT", "")
_PAUSE_AT, _, _PAUSE_SECONDS = os.environ.get("OTEL_DELTA_PAUSE_AT", "").partition(":")


def crash_point(name: str) -> None:
    if name == _CRASH_AT:
        os._exit(CRASH_EXIT_CODE)


def pausing(name: str) -> bool:
    """Whether `pause_point(name)` would pause: code on an event loop runs it on a thread."""
    return name == _PAUSE_AT


def pause_point(name: str) -> None:
    if name == _PAUSE_AT:
        # on stderr: a stream job's executors do not log through the driver's logging
        print(f"otel-delta fault: pausing at {name} for {_PAUSE_SECONDS} s", file=sys.stderr)
        time.sleep(float(_PAUSE_SECONDS or 0))
