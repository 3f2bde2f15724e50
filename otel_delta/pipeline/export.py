"""One Export, whatever the transport: admit → decode + convert → log or buffer → outcome.

With a write-ahead log (`buffer.ack = "wal"`) a request is accepted once its record is durable
in the log, which hands its rows to the buffer; without one (`ack = "commit"`) once its rows
are committed to Delta. The transports (OTLP/gRPC and OTLP/HTTP) only move bytes and turn
the outcome into their status codes; every decision about a request is taken here, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import pyarrow as pa

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.convert import Converted
from otel_delta.errors import (
    BufferFullError,
    CommitError,
    ConvertWorkerLostError,
    InvalidRequestError,
    OtelDeltaError,
    RequestTooLargeError,
    RowsRejectedError,
    ShuttingDownError,
    WalError,
)
from otel_delta.metrics import ACCEPTED_ITEMS, REFUSED_ITEMS, REPAIRED_STRINGS
from otel_delta.pipeline.body import Body
from otel_delta.pipeline.decode import Decoder
from otel_delta.pipeline.outcome import Accepted, Outcome, Rejected, Retryable
from otel_delta.pipeline.reservation import RequestSizes, Reservation
from otel_delta.pipeline.stages import StageClock
from otel_delta.signals import Signal
from otel_delta.wal import WriteAheadLog

log = logging.getLogger(__name__)

RETRYABLE = (BufferFullError, ShuttingDownError, CommitError, WalError, ConvertWorkerLostError)
# how long a request waits for a slot before it gets the retryable answer
SLOT_WAIT_SECONDS = 5.0
# how a transport hands over a body it has not read yet: a Body, or OtelDeltaError (e.g. 413);
# given the request's reservation, to hold more while it reads (OTLP/JSON's decoding)
Receive = Callable[[Reservation], Awaitable[Body]]


class ExportPipeline:
    """The receiving side's one handler, shared by every signal and every transport."""

    def __init__(
        self,
        buffer: GroupCommitBuffer,
        decoder: Decoder,
        max_request_bytes: int,
        wal: WriteAheadLog | None = None,
        partition_by: Sequence[str] = (),
        max_concurrent: int = 16,
    ) -> None:
        self.buffer = buffer
        # Requests being received and converted at once, across transports. Both transports
        # ask for a slot before they read a body (OTLP/HTTP its body, gRPC its one message),
        # so requests that do not fit wait in the clients, the kernel's buffers and one
        # HTTP/2 window each (receiver.grpc_window_bytes).
        self.max_concurrent = max_concurrent
        self.slots = asyncio.Semaphore(max_concurrent)
        self.decoder = decoder
        self.max_request_bytes = max_request_bytes
        self.wal = wal
        self.partition_by = tuple(partition_by)
        self.sizes = RequestSizes()

    async def export(self, signal: Signal, body: Body | Receive) -> Outcome:
        """The outcome of one Export. `body`: the request's bytes, or how to receive them —
        then they are read only once the request has a slot (see `slots`) and the memory it
        is expected to need fits under `buffer.max_bytes` (see `Reservation`). In WAL mode the
        log keeps the bytes as received (compressed, if they came so: pipeline/body.py)."""
        clock = StageClock(signal.name)
        try:
            await asyncio.wait_for(self.slots.acquire(), SLOT_WAIT_SECONDS)
        except TimeoutError:
            busy = BufferFullError(
                f"{self.max_concurrent} requests are being received and converted "
                "(receiver.max_concurrent_requests); retry later",
                self.buffer.retry_after,
            )
            return Retryable(busy, self.buffer.retry_after)
        clock.done("slot")
        with Reservation(self.buffer) as held:
            try:
                try:
                    received = await self._receive(signal, body, held, clock)
                finally:
                    self.slots.release()
                if not isinstance(received, tuple):
                    return received
                logged, encoding, converted = received
                del received, body  # the bytes live on only as long as `held` counts them
                return await self._deliver(signal, logged, encoding, converted, held, clock)
            except RETRYABLE as exc:
                return Retryable(exc, self.buffer.retry_after)

    async def _receive(
        self, signal: Signal, body: Body | Receive, held: Reservation, clock: StageClock
    ) -> tuple[bytes, str, Converted] | Outcome:
        """Read the body (once its expected size is held), then decode and convert it. Returns
        the bytes to log (as received) with their encoding, and the rows."""
        if self.wal is not None:  # full already: answer before the body is even read
            self.wal.check_capacity()
        await held.request(self.sizes.expected(signal.code))
        try:
            request = body if isinstance(body, Body) else await body(held)
        except RETRYABLE:
            raise  # e.g. the bridge stopped while the body was arriving: retry elsewhere
        except OtelDeltaError as exc:
            return Rejected(exc, str(exc))
        except Exception as exc:  # a bug of ours or a library's: this request fails alone
            log.exception("failed to receive a %s request", signal.name)
            return Rejected(exc, f"failed to receive {signal.name}")
        clock.done("receive")
        raw = request.protobuf
        self.sizes.observe(signal.code, len(raw))
        if len(raw) > self.max_request_bytes:
            error = RequestTooLargeError.over_limit(self.max_request_bytes, size=len(raw))
            return Rejected(error, str(error))
        if self.wal is not None:
            try:
                self.wal.check_capacity(len(request.logged))
            except RequestTooLargeError as exc:  # over wal.max_bytes: no retry can fit it
                return Rejected(exc, str(exc))
        # its real size: refuse before spending CPU on decoding
        await held.request(len(raw), request.size - len(raw))
        converted = await self._convert(signal, raw, held)
        if not isinstance(converted, Converted):
            return converted
        if request.repairs is not None:
            converted.rejected.repaired(request.repairs)
        clock.done("convert")
        return request.logged, request.encoding, converted

    async def _deliver(
        self,
        signal: Signal,
        logged: bytes,
        encoding: str,
        converted: Converted,
        held: Reservation,
        clock: StageClock,
    ) -> Outcome:
        """Log the request (WAL mode) or buffer its rows and wait for their commit."""
        if self.wal is None:
            del logged  # the buffer counts the rows from here; the bytes are not kept
            held.shrink(0)
            try:
                await self.buffer.submit(converted.tables, converted.held)
            except RowsRejectedError as exc:  # the table refused this request's rows
                return Rejected(exc, str(exc))
            clock.done("commit")
        else:
            held.shrink(len(logged))  # the bytes as received, until the log has written them
            tables = {name: t for name, t in converted.tables.items() if t.num_rows}
            rows = Converted(tables, converted.rejected, converted.held)
            await self.wal.append(signal.code, logged, rows, len(tables), encoding)
            clock.done("log")
        rows = sum(table.num_rows for table in converted.tables.values())
        ACCEPTED_ITEMS.labels(signal.name).inc(rows)
        if converted.rejected.count:
            REFUSED_ITEMS.labels(signal.name, "invalid_item").inc(converted.rejected.count)
        if converted.rejected.repaired_strings:
            REPAIRED_STRINGS.labels(signal.name).inc(converted.rejected.repaired_strings)
        return Accepted(converted.rejected.count, converted.rejected.error_message, rows)

    async def _convert(self, signal: Signal, raw: bytes, held: Reservation) -> Converted | Rejected:
        """Decode, convert and admit, or the reason the request is rejected."""
        try:
            return await self.decoder.decode(signal, raw, self.partition_by, held)
        except (InvalidRequestError, RequestTooLargeError) as exc:
            return Rejected(exc, str(exc))
        except RETRYABLE:
            raise  # no room for its repaired copy (Reservation.beside): retryable, as its own
        except (pa.ArrowCapacityError, OverflowError, MemoryError) as exc:
            error = RequestTooLargeError(
                f"{signal.name} request expands beyond what one batch can hold ({exc}); "
                "send smaller requests"
            )
            return Rejected(error, str(error))
        except Exception as exc:
            log.exception("failed to convert a %s request", signal.name)
            return Rejected(exc, f"failed to convert {signal.name}")

    def close(self) -> None:
        self.decoder.close()
