"""Group commit: rows of all concurrent requests share one Delta commit per table.

A request's `submit` returns only once every table it fed has committed, so an OK Export
means the rows are durable and visible. Commits of one flush run in parallel across tables
(delta-rs releases the GIL); the next flush's rows keep accumulating meanwhile.

No commit holds more than `max_rows` rows: a group that would grow past it is sealed and a new
one opened (and a single request larger than that is committed in slices), so the engine choice
by size (`bulk_threshold_rows`) never moves live ingestion onto Spark by accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from otel_delta.engines.base import TableWriter
from otel_delta.errors import BufferFullError, CommitError, ShuttingDownError
from otel_delta.tables import TABLES

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """Rows waiting for one table's next commit, and the future their senders await."""

    future: asyncio.Future[None]
    batches: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0


@dataclass
class FlushStats:
    commits: int = 0
    rows: int = 0
    failures: int = 0


class GroupCommitBuffer:
    def __init__(
        self,
        writer: TableWriter,
        *,
        flush_interval_seconds: float,
        max_rows: int,
        max_bytes: int,
        retry_after_seconds: float,
    ) -> None:
        self.writer = writer
        self.flush_interval = flush_interval_seconds
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.retry_after = retry_after_seconds
        self.stats = FlushStats()
        self._pending: dict[str, _Pending] = {}  # the open group of each table
        self._sealed: list[tuple[str, _Pending]] = []  # full groups, committed next flush
        self._bytes = 0  # buffered + being committed
        self._wake = asyncio.Event()
        self._closing = False
        self._pool = ThreadPoolExecutor(max_workers=len(TABLES), thread_name_prefix="commit")
        self._task: asyncio.Task[None] | None = None

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")

    def check_capacity(self) -> None:
        """Refuse new work early (before decoding) when full or stopping."""
        if self._closing:
            raise ShuttingDownError("otel-delta is shutting down")
        if self._bytes >= self.max_bytes:
            raise BufferFullError(
                f"ingest buffer full ({self._bytes} of {self.max_bytes} bytes); retry later",
                self.retry_after,
            )

    async def submit(self, tables: dict[str, pa.Table]) -> None:
        """Buffer the rows and wait until they are committed (raises CommitError if not)."""
        self.check_capacity()
        if not tables:
            return
        loop = asyncio.get_running_loop()
        futures = []
        for name, data in tables.items():
            pending = self._pending.get(name)
            if pending is not None and pending.rows + data.num_rows > self.max_rows:
                self._seal(name)
                pending = None
            if pending is None:
                pending = self._pending[name] = _Pending(loop.create_future())
            pending.batches.append(data)
            pending.rows += data.num_rows
            pending.nbytes += data.nbytes
            self._bytes += data.nbytes
            futures.append(pending.future)
            if pending.rows >= self.max_rows:
                self._seal(name)
        # shield: a client that disconnects must not cancel the commit others wait on
        await asyncio.gather(*(asyncio.shield(f) for f in futures))

    def _seal(self, name: str) -> None:
        """Close the table's open group: it is committed as it is at the next flush, now."""
        self._sealed.append((name, self._pending.pop(name)))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.flush_interval)
            self._wake.clear()
            if self._pending or self._sealed:
                await self._flush()
            if self._closing and not self._pending and not self._sealed:
                return

    async def _flush(self) -> None:
        groups: dict[str, list[_Pending]] = {}
        for name, pending in [*self._sealed, *self._pending.items()]:
            groups.setdefault(name, []).append(pending)
        self._sealed, self._pending = [], {}
        loop = asyncio.get_running_loop()
        commits = [
            loop.run_in_executor(self._pool, self._commit_groups, name, pendings)
            for name, pendings in groups.items()
        ]
        for pendings, outcomes in zip(groups.values(), await asyncio.gather(*commits), strict=True):
            for pending, outcome in zip(pendings, outcomes, strict=True):
                self._bytes -= pending.nbytes
                if isinstance(outcome, Exception):
                    self.stats.failures += 1
                    if not isinstance(outcome, CommitError):
                        outcome = CommitError(str(outcome))
                    pending.future.set_exception(outcome)
                    pending.future.exception()  # mark retrieved: senders may have gone away
                else:
                    self.stats.commits += outcome
                    self.stats.rows += pending.rows
                    pending.future.set_result(None)

    def _commit_groups(self, name: str, pendings: list[_Pending]) -> list[Exception | int]:
        """One table's groups, one after another (a table takes one commit at a time); per
        group, the error or the number of commits it took."""
        outcomes: list[Exception | int] = []
        for pending in pendings:
            try:
                outcomes.append(self._commit(name, pending))
            except Exception as exc:  # answered to this group's senders, the next group goes on
                outcomes.append(exc)
        return outcomes

    def _commit(self, name: str, pending: _Pending) -> int:
        data = pa.concat_tables(pending.batches)
        starts = range(0, data.num_rows, self.max_rows)
        for start in starts:
            part = data.slice(start, self.max_rows)
            version = self.writer.append(name, part)
            log.debug("committed %d rows to %s as version %d", part.num_rows, name, version)
        return len(starts)

    async def close(self) -> None:
        """Stop accepting rows, commit everything buffered, answer every waiter."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self._pool.shutdown(wait=True)
