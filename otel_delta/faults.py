"""Crash points, for the tests that prove what survives a crash at each step of ingestion.

`OTEL_DELTA_CRASH_AT=<point>` in a bridge's (or a stream job's) environment makes the process
exit at once — no cleanup, no flush, like `kill -9` — the first time it reaches that point.
Unset (always, in production) a crash point costs one string comparison.
"""

from __future__ import annotations

import os

CRASH_EXIT_CODE = 86
POINTS = (
    "wal-written",  # a record batch is written to the segment, not yet fsync'd
    "wal-synced",  # the batch is fsync'd, its senders not yet answered
    "delta-committed",  # a Delta commit succeeded, its records not yet released from the log
    # `otel-delta stream`: one table of a micro-batch committed, the batch's other tables not
    "stream-table-committed",
)
_CRASH_AT = os.environ.get("OTEL_DELTA_CRASH_AT", "")


def crash_point(name: str) -> None:
    if name == _CRASH_AT:
        os._exit(CRASH_EXIT_CODE)
