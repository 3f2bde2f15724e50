"""What a request holds under `buffer.max_bytes` before its rows are buffered.

The buffer's bound counts buffered rows; a request costs memory well before that: its body
as received, the converter's working memory and the rows it makes, (WAL mode) its bytes
until the log has written them, and the repaired copy a request whose strings were not UTF-8
is converted from (`Reservation.beside`). Each request holds a `Reservation` for all of that,
taken *before* its body is read — sized by `RequestSizes` from the requests seen lately, since
neither gRPC nor a chunked HTTP body says its size up front — and corrected once the body is
in. Without it, every request with a slot read its body first and was refused after: with
64 clients sending 4 MB requests at a 64 MiB buffer, the bridge held 140 MB of request bodies
that the bound never saw (bench/memory.py, memray at peak RSS).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType

from otel_delta.buffer import GroupCommitBuffer

# Memory per byte of (decompressed) protobuf while a request is converted, its own bytes
# aside: realistic traces take 2.4x in Arrow buffers' lengths (bench payloads, both
# converters) and 3.6x in the capacities the native builders grew to (bench/collector_load.py's
# traces; what the buffer counts once they are buffered), plus the converter's working memory.
CONVERSION_BYTES_PER_BYTE = 4
# What a signal's first requests are expected to be: about a Collector batch of 2,000 spans.
FIRST_EXPECTED_BYTES = 1024 * 1024
# How many recent sizes the expectation looks back over (it takes the largest).
RECENT_REQUESTS = 16


class RequestSizes:
    """How large the next request of a signal is expected to be: the largest of its last
    RECENT_REQUESTS, so that a stream of large requests is never under-counted for long."""

    def __init__(self) -> None:
        self._recent: dict[int, deque[int]] = {}

    def observe(self, signal_code: int, size: int) -> None:
        self._recent.setdefault(signal_code, deque(maxlen=RECENT_REQUESTS)).append(size)

    def expected(self, signal_code: int) -> int:
        recent = self._recent.get(signal_code)
        return max(recent) if recent else FIRST_EXPECTED_BYTES


class Reservation:
    """Bytes one request holds in the buffer's count, given back when the block ends."""

    def __init__(self, buffer: GroupCommitBuffer) -> None:
        self.buffer = buffer
        self.bytes = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.shrink(0)

    async def request(self, request_bytes: int, received_bytes: int = 0) -> None:
        """Hold what a request of `request_bytes` of protobuf needs while it is received and
        converted, plus `received_bytes` kept beside it (its compressed bytes, for the log),
        once that fits beside everything else (`GroupCommitBuffer.admit`: waiting up to the
        retry delay); BufferFullError if it does not by then. What it held already stays
        held meanwhile: the body read under it is in memory while it waits."""
        needed = request_bytes * (1 + CONVERSION_BYTES_PER_BYTE) + received_bytes
        if needed <= self.bytes:
            self.shrink(needed)
            return
        await self.buffer.admit(needed - self.bytes, held=self.bytes)
        self.bytes = needed

    @contextlib.asynccontextmanager
    async def beside(self, nbytes: int) -> AsyncIterator[None]:
        """Hold `nbytes` more for the block: a copy made of the request while it is converted
        (its strings repaired, pipeline/decode.py), which its bytes counted so far do not
        cover. BufferFullError if they do not fit by the retry delay, as `request`."""
        before = self.bytes
        await self.buffer.admit(nbytes, held=self.bytes)
        self.bytes += nbytes
        try:
            yield
        finally:
            self.shrink(before)

    def shrink(self, nbytes: int) -> None:
        """Hold no more than `nbytes` (never refused): a later stage needs less."""
        if nbytes < self.bytes:
            self.buffer.release(self.bytes - nbytes)
            self.bytes = nbytes
