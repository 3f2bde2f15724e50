"""On start: what the write-ahead log holds and Delta does not goes back into the buffer.

Each table's commits carry the transaction (this bridge's WAL app id, highest record
position), so a table that already holds a record's rows says so through its transaction
version; only the rest is buffered again — exactly once, whichever moment the last run died.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.errors import (
    BufferFullError,
    ConvertWorkerLostError,
    InvalidRequestError,
    OtelDeltaError,
    RequestTooLargeError,
    TableNotFoundError,
    TableUnreadableError,
    first_line,
)
from otel_delta.faults import pause_point, pausing
from otel_delta.lakehouse import Lakehouse
from otel_delta.pipeline.body import logged_protobuf
from otel_delta.pipeline.decode import Decoder
from otel_delta.pipeline.reservation import Reservation
from otel_delta.signals import SIGNALS_BY_CODE
from otel_delta.tables import TABLES
from otel_delta.wal import WriteAheadLog

log = logging.getLogger(__name__)


@dataclass
class ReplayReport:
    records: int = 0  # records read from the log
    replayed: int = 0  # records with rows not yet in Delta
    rows: int = 0  # rows buffered again
    unreadable: int = 0  # records that no longer convert (dropped, logged)
    stopped: bool = False  # a stop came before every record was read
    waiting: bool = False  # for the commits to make room in the buffer (buffer.max_bytes)
    waits: int = 0  # times a record found the buffer still full after `retry_after`


def committed_positions(
    lakehouse: Lakehouse, app_id: str, skip_unreadable: bool = False
) -> dict[str, int]:
    """Per table, the highest WAL position whose rows it holds (0: none).

    A table that is there but cannot be read is TableUnreadableError, naming it: replaying
    without knowing what it holds could store its rows twice, so the bridge does not start.
    With `skip_unreadable` (nothing to replay) it is left out, with a warning.
    """
    versions = {}
    for name in TABLES:
        try:
            version = lakehouse.open_table(name).transaction_version(app_id)
        except TableNotFoundError:
            version = None
        except OtelDeltaError:
            raise
        except Exception as exc:  # delta-rs: a damaged log, a store that refuses
            cause = first_line(exc)  # delta-rs appends a Rust backtrace to the message
            if skip_unreadable:
                log.warning("table %r at %s cannot be read: %s", name, lakehouse.uri(name), cause)
                continue
            raise TableUnreadableError(
                name,
                lakehouse.uri(name),
                f"{cause} (the write-ahead log holds records to replay, and which of them "
                "this table already holds cannot be known without it)",
            ) from None
        versions[name] = version or 0
    return versions


async def _hold(
    held: Reservation, raw_bytes: int, report: ReplayReport, stopping: asyncio.Event | None
) -> bool:
    """Hold what converting and buffering a record of `raw_bytes` of protobuf needs under
    `buffer.max_bytes`, as a live request does (`Reservation.request`), for as long as that
    takes: its rows are in the log already, nobody waits for an answer, and the buffer frees
    room only as commits land. Without it the replay buffered the whole log while the commits
    failed and backed off (a full or unreachable store): the process grew with the log, up
    to an out-of-memory kill, and the next start replayed it again. False: `stopping` came
    first (a SIGTERM is not kept waiting for a store that may not come back)."""
    while stopping is None or not stopping.is_set():
        request = asyncio.ensure_future(held.request(raw_bytes))
        waits = {request}
        if stopping is not None:
            waits.add(asyncio.ensure_future(stopping.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            # an admission cancelled in its wait holds nothing (it reserves only once it fits)
            await asyncio.gather(*waits, return_exceptions=True)
        if request.cancelled():
            return False
        try:
            request.result()
        except BufferFullError:
            # still full after `retry_after`: commits are failing and backing off; each new
            # try wakes the flusher, which retries every table whose backoff is over
            if not report.waits:
                log.info(
                    "write-ahead log: the replay waits for commits to make room in the buffer "
                    "(buffer.max_bytes %d)",
                    held.buffer.max_bytes,
                )
            report.waits += 1
            report.waiting = True
            continue
        report.waiting = False
        return True
    return False


async def replay(
    wal: WriteAheadLog,
    decoder: Decoder,
    buffer: GroupCommitBuffer,
    lakehouse: Lakehouse,
    report: ReplayReport | None = None,
    stopping: asyncio.Event | None = None,
) -> ReplayReport:
    """Buffer again what the log holds and the tables do not. With a log without records
    (every record committed at the last stop, or a new log), a table that cannot be read is
    skipped with a warning: one damaged table does not stop a bridge that has nothing to
    replay into it (its commits fail, and are answered so, while the other tables take
    theirs). `report`: the caller's, counted as the replay goes (the bridge's /readyz says
    how far it is).

    Once `stopping` is set (a SIGTERM: after a crash the replay can outlast a pod's
    terminationGracePeriod) it ends before the next record, `report.stopped`. What it has
    buffered is a prefix of the log, which the stop commits; the records after it stay in
    the log (nothing is released before the log is `start`ed), and the next start replays
    those its tables' transaction versions do not cover: none twice, none lost."""
    report = ReplayReport() if report is None else report
    records = wal.replay()
    first = next(records, None)
    done = committed_positions(lakehouse, wal.app_id, skip_unreadable=first is None)
    # positions never go back below what Delta holds (e.g. a WAL directory restored from an
    # older copy): a reused position would be skipped as committed
    wal.advance_to(max(done.values(), default=0) + 1)
    if first is None:
        return report
    for record in itertools.chain((first,), records):
        if pausing("wal-replaying"):
            await asyncio.to_thread(pause_point, "wal-replaying")
        if stopping is not None and stopping.is_set():
            report.stopped = True
            break
        report.records += 1
        with Reservation(buffer) as held:
            signal = SIGNALS_BY_CODE.get(record.signal_code)
            try:
                if signal is None:
                    raise InvalidRequestError(f"unknown signal code {record.signal_code}")
                raw = await logged_protobuf(record.payload, record.encoding)
                if not await _hold(held, len(raw), report, stopping):
                    report.records -= 1  # not buffered: it stays in the log for the next start
                    report.stopped = True
                    break
                try:
                    converted = await decoder.decode(signal, raw, lakehouse.partition_by)
                except ConvertWorkerLostError:
                    # the worker died under it (the decoder restarted the pool): the record was
                    # converted once when it was accepted, so it gets one more try before the
                    # start gives up (then the next start replays it again)
                    converted = await decoder.decode(signal, raw, lakehouse.partition_by)
                del raw
            except (InvalidRequestError, RequestTooLargeError) as exc:
                # it was accepted once: only another otel-delta version can refuse it now
                report.unreadable += 1
                log.error("WAL record %d cannot be converted, dropped: %s", record.position, exc)
                wal.expect(record.position, 0)
                continue
            tables = {
                name: table
                for name, table in converted.tables.items()
                if table.num_rows and record.position > done.get(name, 0)
            }
            wal.expect(record.position, len(tables))
            if not tables:
                continue
            report.replayed += 1
            report.rows += sum(t.num_rows for t in tables.values())
            buffer.add(tables, record.position, converted.held)
        if buffer.buffered_bytes >= buffer.max_bytes // 2:
            await buffer.flush()  # commit what is buffered while there is room left
    report.waiting = False
    if report.stopped:
        left = wal.recovered_records - report.records
        log.info(
            "write-ahead log: replay stopped after %d of %d record(s) (%d replayed, %d rows); "
            "the other %d stay in the log for the next start",
            report.records,
            wal.recovered_records,
            report.replayed,
            report.rows,
            left,
        )
    elif report.records:
        log.info(
            "write-ahead log: %d record(s) read, %d replayed (%d rows), %d unreadable",
            report.records,
            report.replayed,
            report.rows,
            report.unreadable,
        )
    return report
