"""The write-ahead log: an Export is acknowledged once its record is on disk (fsync'd).

Appends of all concurrent requests share one write and one fsync (group commit): while one
batch is being synced, the next one gathers. Once a batch is durable, its records are handed
to `on_durable` in position order (the buffer takes them from there) and their senders are
answered. A record is released when every Delta commit its rows went to has succeeded; a
segment is deleted when all its records are released. On start, `open` recovers the directory
(cutting off a torn tail; damage followed by valid records is skipped with an ERROR, never cut)
and `replay` yields every valid record the log holds, those after damage included.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from otel_delta.disk import fsync_path
from otel_delta.errors import ConfigError, RequestTooLargeError, WalError, WalFullError
from otel_delta.faults import crash_point
from otel_delta.metrics import WAL_SYNC_SECONDS, WAL_SYNCS
from otel_delta.wal.record import HEADER, HEADER_BYTES, Damage, Record, header, scan
from otel_delta.wal.segments import (
    DIRECTORY_MODE,
    FILE_MODE,
    Segment,
    instance_id,
    list_segments,
    lock,
    private,
    segment_path,
    unlock,
)

log = logging.getLogger(__name__)

FIRST_POSITION = 1
OWNER_FILE = "lakehouse"  # the table_path the records are for
APP_ID_PREFIX = "otel-delta-wal-"
# how long /readyz reports a failed write (a Kubernetes readiness probe's default period is 10 s)
WRITE_FAILURE_HOLD_SECONDS = 10.0
# while writes keep failing (a full disk: every client retries), one ERROR per this many seconds
WRITE_FAILURE_LOG_SECONDS = 60.0


@dataclass
class _Waiting:
    signal_code: int
    payload: bytes
    encoding: str
    item: Any
    commits: int
    future: asyncio.Future[int]


class WriteAheadLog:
    def __init__(
        self,
        directory: str | Path,
        *,
        segment_bytes: int,
        max_bytes: int,
        retry_after_seconds: float = 1.0,
        owner: str = "",
    ) -> None:
        self.directory = Path(directory).expanduser().resolve()
        self.owner = owner  # the lakehouse (table_path) its records are for
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self.retry_after = retry_after_seconds
        self.instance_id = ""
        self.next_position = FIRST_POSITION
        self.recovered_records = 0  # readable records `open` found: what `replay` yields
        self.on_durable: Callable[[int, Any], None] = lambda position, item: None
        # called when the log refuses a request for want of room (wal.max_bytes, or the disk
        # full) while records await their commits: those commits are what frees it, and the
        # buffer would otherwise make them at its interval only (bridge: the buffer's flush)
        self.on_full: Callable[[], None] = lambda: None
        self.syncs = 0  # fsyncs done (each serves every record of its batch)
        self._segments: list[Segment] = []
        self._file: BinaryIO | None = None
        self._lock_fd: int | None = None
        self._queue: list[_Waiting] = []
        self._queued_bytes = 0
        # what /readyz needs to know (`refusing`): the size of the last request refused for
        # want of room, and when a write last failed (the disk full, an I/O error)
        self._refused_bytes = 0
        self._writing = False  # a batch is being written (not in the queue, not yet on disk)
        self._write_failed: tuple[float, str] | None = None
        # failed writes since the last ERROR line, when that was, and whether a line saying
        # that writes succeed again is due (_log_failure)
        self._failed_writes = 0
        self._failure_logged_at = -math.inf
        self._failure_said = False
        self._outstanding: dict[int, int] = {}  # position → commits still to succeed
        self._wake = asyncio.Event()
        self._closing = False
        self._started = False  # no segment is released before replay has read them all
        self._task: asyncio.Task[None] | None = None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="wal")

    @property
    def app_id(self) -> str:
        """The Delta transaction app id of this bridge's commits (its versions: positions)."""
        return APP_ID_PREFIX + self.instance_id

    @property
    def disk_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def _used_bytes(self) -> int:
        """Bytes on disk and queued for the next write: what `wal.max_bytes` bounds."""
        return self.disk_bytes + self._queued_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def pending_records(self) -> int:
        """Records durable in the log and not yet committed to Delta."""
        return len(self._outstanding)

    # --- start ------------------------------------------------------------------------------

    def open(self) -> None:
        """Lock and recover the directory: cut off a torn tail, say what damage cost, find the
        next position."""
        try:
            self._open()
        except OSError as exc:  # unwritable, full, not a directory: one line, at start
            self._unlock()
            raise ConfigError(f"wal.dir: cannot use {self.directory}: {exc}") from None
        except (WalError, ConfigError):
            self._unlock()
            raise

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            unlock(self._lock_fd)
            self._lock_fd = None

    def _open(self) -> None:
        self.directory.mkdir(DIRECTORY_MODE, parents=True, exist_ok=True)
        self._lock_fd = lock(self.directory)
        self.instance_id = instance_id(self.directory)
        self._segments = list_segments(self.directory)
        last_position = FIRST_POSITION - 1
        for index, segment in enumerate(self._segments):
            found = scan(segment.path.read_bytes(), segment.first_position)
            self.recovered_records += len(found.records)
            if found.records:
                last_position = max(last_position, found.records[-1].position)
            newest = index == len(self._segments) - 1
            following = None if newest else self._segments[index + 1].first_position
            for damage in found.damaged:
                if damage is found.tail and newest:  # a write never fsync'd (nor acked)
                    log.warning(
                        "WAL %s: %s; cutting the torn tail (%d byte(s))",
                        segment.path.name,
                        damage.describe(),
                        damage.end - damage.start,
                    )
                    with open(segment.path, "r+b") as f:
                        f.truncate(found.valid_bytes)
                        os.fsync(f.fileno())
                    segment.size = found.valid_bytes
                else:
                    _log_damage(segment, damage, following, len(found.records))
        if self._segments:
            last_position = max(last_position, self._segments[-1].first_position - 1)
        self._check_owner(holds_records=any(segment.size for segment in self._segments))
        self.next_position = last_position + 1
        if not self._segments:
            self._new_segment(self.next_position)
        self._file = _append_only(self._segments[-1].path)

    def advance_to(self, position: int) -> None:
        """The next record is at `position` at least (positions never go back below what
        Delta holds, e.g. a WAL directory restored from an older copy: a reused position would
        be skipped as committed). A segment's records run on one by one from its name, which
        reading past a damaged record counts on, so after a jump the next record starts a
        segment of its own."""
        if position <= self.next_position:
            return
        self.next_position = position
        if self._segments and self._segments[-1].size:
            self._rotate(position)

    def replay(self) -> Iterator[Record]:
        """Every readable record, oldest first (segment by segment: memory stays small)."""
        for segment in list(self._segments):
            yield from scan(segment.path.read_bytes(), segment.first_position).records

    def read(self, position: int) -> Record:
        """One durable record, e.g. to move it to the dead letters: read at its offset when
        this process wrote it, else found by scanning its segment (a record replayed at the
        start). Scanning for each of them made a table that refuses every row send about 16
        requests a second to the dead letters, each a scan of a 64 MiB segment, while its
        records filled the log for every other signal."""
        segments = [s for s in list(self._segments) if s.first_position <= position]
        if not segments:
            raise WalError(f"no write-ahead log segment holds position {position}")
        segment = segments[-1]
        if (offset := segment.offset_of(position)) is not None:
            with open(segment.path, "rb") as file:
                file.seek(offset)
                head = file.read(HEADER_BYTES)
                length = HEADER.unpack_from(head)[3] if len(head) == HEADER_BYTES else 0
                found = scan(head + file.read(length), position).records
            if len(found) == 1 and found[0].position == position:
                return found[0]
        for record in scan(segment.path.read_bytes(), segment.first_position).records:
            if record.position == position:
                return record
        raise WalError(f"position {position} is not in {segment.path}")

    def start(self) -> None:
        """Take appends (after `replay`, whose records must all have been `expect`ed)."""
        self._started = True
        self._release()
        self._task = asyncio.get_running_loop().create_task(self._sync_loop(), name="wal")

    # --- appends ------------------------------------------------------------------------------

    def check_capacity(self, incoming: int = 0) -> None:
        """WalFullError when the log is at `wal.max_bytes` (records not yet committed);
        RequestTooLargeError for a request that even an empty log could not take: told to
        retry, its client would send it again for ever."""
        if self._closing:
            raise WalError("the write-ahead log is closing")
        if incoming > self.max_bytes:
            raise RequestTooLargeError(
                f"request of {incoming} bytes (as received) is over wal.max_bytes "
                f"({self.max_bytes}): the write-ahead log could never hold it"
            )
        used = self._used_bytes
        if used + incoming > self.max_bytes and self._idle():
            self._reclaim_idle()
            used = self._used_bytes
        if used + incoming > self.max_bytes:
            self._refused_bytes = max(self._refused_bytes, incoming)
            self.on_full()
            raise WalFullError(
                f"write-ahead log full ({used} of {self.max_bytes} bytes await their Delta "
                "commits); retry later",
                self.retry_after,
            )
        self._forget_refusal(used)

    def _idle(self) -> bool:
        """Whether no record awaits a commit, none is queued and none is being written: what
        the log holds on disk is then all committed, and can go before the next write."""
        return self._started and not (self._outstanding or self._queue or self._writing)

    def _reclaim_idle(self) -> None:
        """Free the committed records of an idle log, which only its next write would free:
        the newest segment is never deleted, and one batch larger than `segment_bytes` fills
        it past that (a record is never split), so a request that did not fit beside them was
        refused for good, as nothing was left to commit."""
        try:
            self._reclaim(self.next_position)
        except OSError as exc:  # said as a failed write; the request is refused as full
            self._log_failure(exc)

    def _forget_refusal(self, used: int) -> None:
        """Forget the request last refused for want of room once it would fit, or once the
        log is idle (everything committed: it fits, `check_capacity`), so /readyz does not
        keep a drained log out of rotation."""
        if self._refused_bytes and (used + self._refused_bytes <= self.max_bytes or self._idle()):
            self._refused_bytes = 0

    def refusing(self) -> str:
        """Why the log would refuse the next request now ("" if it would not), for /readyz: it
        is full for a request the size of the last one it refused (until commits free room
        for it, or everything is committed), or a write failed within the last
        WRITE_FAILURE_HOLD_SECONDS (the disk full: with no traffic, nothing else would tell
        when it has room again, so readiness comes back after the hold and the next write
        tells)."""
        if self._write_failed is not None:
            failed_at, error = self._write_failed
            ago = time.monotonic() - failed_at
            if ago < WRITE_FAILURE_HOLD_SECONDS:
                return f"a write failed {ago:.0f} s ago: {error}"
        used = self._used_bytes
        self._forget_refusal(used)
        if used + max(self._refused_bytes, 1) > self.max_bytes and not self._idle():
            return f"full: {used} of {self.max_bytes} bytes await their Delta commits"
        return ""

    async def append(
        self, signal_code: int, payload: bytes, item: Any, commits: int, encoding: str = ""
    ) -> int:
        """Log one record; returns its position once durable. `payload`: the request as
        received, compressed with `encoding` ("": plain protobuf). `item` goes to
        `on_durable`, `commits` is how many Delta commits must succeed before the record is
        released."""
        self.check_capacity(len(payload))
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(signal_code, payload, encoding, item, commits, future))
        self._queued_bytes += len(payload)
        self._wake.set()
        # shield: a client that goes away must not cancel a record others share a sync with
        return await asyncio.shield(future)

    async def _sync_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            self._queued_bytes -= sum(len(w.payload) for w in batch)
            if batch:
                first = self.next_position
                records = [
                    Record(first + i, w.signal_code, w.payload, w.encoding)
                    for i, w in enumerate(batch)
                ]
                self._writing = True
                try:
                    await self._write_or_reclaim(records)
                except OSError as exc:
                    self._writing = False
                    self._log_failure(exc)
                    if self._outstanding:  # their commits free the disk (`_reclaim`)
                        self.on_full()
                    for waiting in batch:
                        waiting.future.set_exception(WalError(f"write-ahead log: {exc}"))
                        waiting.future.exception()
                    continue
                self._writing = False  # its records are on disk (and expected, below)
                self.next_position = first + len(batch)
                if self._failure_said:
                    log.info("WAL writes succeed again")
                    self._failure_said = False
                self._write_failed = None
                crash_point("wal-synced")
                for record, waiting in zip(records, batch, strict=True):
                    self.expect(record.position, waiting.commits)
                    self.on_durable(record.position, waiting.item)
                    waiting.future.set_result(record.position)
            if self._closing and not self._queue:
                return

    async def _write_or_reclaim(self, records: list[Record]) -> None:
        """Write a batch; if the disk refuses it while every record is committed, free the
        disk and write it again. The newest segment is never deleted (it keeps the next
        position), so on a disk that filled up, committed records in it would hold the space
        until it reached segment_bytes, which a full disk never lets it: every Export refused
        for good, though nothing awaits a commit."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._io, self._write, records)
        except OSError:
            if not self._reclaim(records[0].position):
                raise
            await loop.run_in_executor(self._io, self._write, records)

    def _reclaim(self, first_position: int) -> bool:
        """After a refused write: if no record awaits a commit, start an empty segment (if
        the newest holds records) and delete the older ones. True if a segment was deleted."""
        if self._outstanding:
            return False
        if self._segments[-1].size:
            try:
                self._rotate(first_position)
            except OSError:  # not even an empty file fits: the refusal stands
                return False
        count = len(self._segments)
        self._release()
        return len(self._segments) < count

    def _log_failure(self, exc: OSError) -> None:
        """At most one ERROR per WRITE_FAILURE_LOG_SECONDS (with the count since the last),
        and one INFO when writes succeed after it: on a full disk every client's retry fails,
        dozens a second, and a disk that commits free and refill fails again every few
        seconds. /readyz and otel_delta_receiver_refused_requests_total tell every time."""
        now = time.monotonic()
        self._write_failed = (now, str(exc))
        self._failed_writes += 1
        if now - self._failure_logged_at >= WRITE_FAILURE_LOG_SECONDS:
            log.error(
                "WAL write failed: %s (%d write(s) failed since the last such line; Exports "
                "get the retryable answer)",
                exc,
                self._failed_writes,
            )
            self._failure_logged_at = now
            self._failed_writes = 0
            self._failure_said = True

    def _write(self, records: list[Record]) -> None:
        """Runs on the WAL's own thread: one write and one fsync for the whole batch."""
        size = sum(record.size for record in records)
        active = self._segments[-1]
        if active.size and active.size + size > self.segment_bytes:
            self._rotate(records[0].position)
            active = self._segments[-1]
        assert self._file is not None
        try:
            if os.fstat(self._file.fileno()).st_nlink == 0:
                # wal.dir (or the segment) was deleted under the bridge: a write would still
                # succeed, into a file no restart can read, and acknowledge what a crash loses
                raise FileNotFoundError(
                    errno.ENOENT,
                    "the segment was deleted (is wal.dir still there?)",
                    str(active.path),
                )
            # one gathered write, no buffer in between (a large payload is not copied): after a
            # refused write (disk full) no byte of it is left to reach the file with the next
            _write_fully(self._file.fileno(), [b for r in records for b in (header(r), r.payload)])
            crash_point("wal-written")
            started = time.monotonic()
            os.fsync(self._file.fileno())
            WAL_SYNC_SECONDS.observe(time.monotonic() - started)
        except OSError:
            # leave no partial record behind: the next batch starts at a clean offset
            with contextlib.suppress(OSError):
                self._file.truncate(active.size)
            raise
        offset = active.size
        for record in records:
            active.indexed(record.position, offset)
            offset += record.size
        active.size += size
        self.syncs += 1
        WAL_SYNCS.inc()

    def _rotate(self, first_position: int) -> None:
        assert self._file is not None
        # the new segment first: if it cannot be made, the current one stays open for the next
        self._new_segment(first_position)
        previous, self._file = self._file, _append_only(self._segments[-1].path)
        previous.close()

    def _new_segment(self, first_position: int) -> None:
        path = segment_path(self.directory, first_position)
        path.touch(FILE_MODE)
        fsync_path(self.directory)
        self._segments.append(Segment(first_position, path, 0))

    # --- release ------------------------------------------------------------------------------

    def expect(self, position: int, commits: int) -> None:
        """Record `position` as awaiting `commits` Delta commits (0: released at once)."""
        if commits > 0:
            self._outstanding[position] = commits
        else:
            self._release()

    def committed(self, positions: list[int]) -> None:
        """One Delta commit holding rows of these records succeeded."""
        for position in positions:
            left = self._outstanding.get(position)
            if left is None:
                continue
            if left <= 1:
                del self._outstanding[position]
            else:
                self._outstanding[position] = left - 1
        self._release()

    @property
    def low_watermark(self) -> int:
        """Every record below this position is committed to Delta."""
        return min(self._outstanding, default=self.next_position)

    def _release(self) -> None:
        if not self._started:
            return
        low = self.low_watermark
        removed = False
        while len(self._segments) > 1 and self._segments[1].first_position <= low:
            segment = self._segments.pop(0)
            with contextlib.suppress(FileNotFoundError):
                segment.path.unlink()
            removed = True
        if removed:
            try:
                fsync_path(self.directory)
            except OSError as exc:  # wal.dir gone or failing: said as a failed write, not
                # raised into the commit callback that released the records
                self._log_failure(exc)

    def _empty(self) -> None:
        """Every record is committed: one empty segment, named by the next position, remains."""
        old = list(self._segments)
        if old[-1].size or old[-1].first_position != self.next_position:
            self._new_segment(self.next_position)
        for segment in old:
            if segment is not self._segments[-1]:
                with contextlib.suppress(FileNotFoundError):
                    segment.path.unlink()
        self._segments = self._segments[-1:]
        fsync_path(self.directory)

    def _check_owner(self, holds_records: bool) -> None:
        """A log belongs to one lakehouse: replaying its records into another would store rows
        there that the first one already holds (their transactions are only in the first)."""
        if not self.owner:
            return
        owner_file = self.directory / OWNER_FILE
        previous = owner_file.read_text().strip() if owner_file.exists() else ""
        if previous and previous != self.owner and holds_records:
            raise ConfigError(
                f"wal.dir {self.directory} holds records for the lakehouse {previous}, not "
                f"{self.owner}: start with that table_path once to commit them, or use "
                "another wal.dir"
            )
        if previous != self.owner:
            with open(owner_file, "w", opener=private) as out:
                out.write(self.owner + "\n")
            fsync_path(self.directory)

    # --- stop ---------------------------------------------------------------------------------

    async def close(self, drain: Awaitable[None] | None = None) -> None:
        """Answer what is queued and stop appending; then await `drain` (the buffer committing
        what it holds). Records not committed by then stay for the next start's replay; if
        every record is committed, the log is left empty (its next position kept), so no
        committed record is ever replayed — into this lakehouse or another one."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self._io.shutdown(wait=True)
        if self._file is not None:
            self._file.close()
        if drain is not None:
            await drain
        if self._started and not self._outstanding and self._segments:
            try:
                self._empty()
            except OSError as exc:  # every record is committed: nothing is lost, say why
                log.error("write-ahead log: cannot empty %s at the stop: %s", self.directory, exc)
        self._unlock()


def _log_damage(segment: Segment, damage: Damage, following: int | None, kept: int) -> None:
    """One ERROR line for a damaged stretch that is not a torn tail: the records in it are
    lost, those after it are read (and replayed). `following`: the position the next segment
    starts at, which tells what damage at the end of an older segment lost."""
    after = damage.following if damage.following is not None else following
    if damage.previous is None or after is None:
        lost = "an unknown number of records lost"
    elif after - damage.previous == 1:
        lost = "no record lost"
    elif after - damage.previous == 2:
        lost = f"1 record lost (position {after - 1})"
    else:
        first, last = damage.previous + 1, after - 1
        lost = f"{last - first + 1} records lost (positions {first}-{last})"
    log.error(
        "WAL %s is damaged: bytes %d-%d skipped (%s), %s; %d record(s) of the segment kept%s",
        segment.path.name,
        damage.start,
        damage.end - 1,
        damage.problem,
        lost,
        kept,
        "" if damage.following is None else " (reading on after the damage)",
    )


def _append_only(path: Path) -> BinaryIO:
    """A segment opened for appending, unbuffered: every byte is handed to the kernel by
    `_write_fully` or not at all, so a truncate after a failed write leaves nothing behind."""
    return open(path, "ab", buffering=0, opener=private)


def _write_fully(fd: int, chunks: list[bytes]) -> None:
    """Write `chunks` in order with gathered writes, going on after a short one; an OSError
    (disk full) leaves an unknown part written: the caller truncates."""
    views = [memoryview(chunk) for chunk in chunks if chunk]
    first = 0
    while first < len(views):
        written = os.writev(fd, views[first : first + _IOV_MAX])
        while written:
            size = len(views[first])
            if written >= size:
                written -= size
                first += 1
            else:
                views[first] = views[first][written:]
                written = 0


_IOV_MAX = 1024  # buffers one writev takes (Linux's IOV_MAX)
