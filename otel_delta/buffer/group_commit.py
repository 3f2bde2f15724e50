"""Group commit: rows of all concurrent requests share one Delta commit per table.

Two ways in, one per `buffer.ack` mode:
- `submit` (ack = "commit"): returns only once every table the request fed has committed, so
  an OK Export means the rows are in Delta. A failed commit fails its waiters (they retry).
- `add` (ack = "wal"): the rows of a record already durable in the write-ahead log, tagged
  with its position. Nobody waits; every commit carries the Delta transaction
  (`app_id`, highest position in it), a failed commit is retried with backoff — a table's
  groups strictly in order, so the transaction version always means "every record up to here"
  — and `on_committed` tells the log which records it may release.
In commit mode every commit carries a transaction too (this process's id, a sequence number),
so an append that landed but reported a failure (e.g. its checkpoint could not be written) is
not written again by the engine's retry.

Commits of one flush run in parallel across tables (delta-rs releases the GIL); the next
flush's rows keep accumulating meanwhile. A group is sealed before it would grow past
`max_rows` rows, so the engine choice by size (`bulk_threshold_rows`) never moves live
ingestion onto Spark by accident; in commit mode a single larger request is committed in
slices (in WAL mode it stays one commit: one transaction version per record).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import Transaction

from otel_delta.engines.base import TableWriter
from otel_delta.errors import (
    BufferFullError,
    CommitError,
    MemoryLimitError,
    RowsRejectedError,
    ShuttingDownError,
    first_line,
)
from otel_delta.faults import crash_point
from otel_delta.heap import resident_bytes
from otel_delta.metrics import (
    COMMIT_BYTES,
    COMMIT_FAILURES,
    COMMIT_ROWS,
    COMMIT_SECONDS,
    COMMITS,
    REJECTED_ROWS,
)
from otel_delta.retry import backoff
from otel_delta.tables import TABLES, packed

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0  # WAL mode: a failed table's retries wait 2, 4, 8 … 30 s
MAX_BACKOFF_SECONDS = 30.0
RESIDENT_RECHECK_SECONDS = 0.05  # a request waiting for memory reads the RSS this often
# an RSS read this recent stands: every freeing wakes every waiting request, each of which
# asks (py-spy under the Collector's logs load: the reads were 3% of the samples holding the GIL)
RESIDENT_READ_SECONDS = 0.005
ROOM_TO_SPARE = 0.5  # of max_bytes: below it, commits encode their files niced (_room_to_spare)


@dataclass
class _Pending:
    """Rows waiting for one table's next commit: one batch per request, each with the future
    its sender awaits (commit mode) and, in WAL mode, the position of its record."""

    batches: list[pa.Table] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # WAL records whose rows these are
    rows: int = 0
    nbytes: int = 0
    # batches (by index) the table refused for what they hold; the others are committed
    rejected: dict[int, RowsRejectedError] = field(default_factory=dict)

    def settle(self, error: Exception | None = None) -> None:
        """Answer every waiter: OK, or `error`; a batch the table refused gets its reason."""
        for index, waiter in enumerate(self.waiters):
            failure = self.rejected.get(index, error)
            if failure is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(failure)
                waiter.exception()  # mark retrieved: senders may have gone away


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
        max_resident_bytes: int | None = None,
        resident: Callable[[], int | None] = resident_bytes,
        app_id: str | None = None,
        on_committed: Callable[[list[int]], None] | None = None,
        on_rejected: Callable[[str, int, RowsRejectedError], None] | None = None,
    ) -> None:
        self.writer = writer
        self.flush_interval = flush_interval_seconds
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.retry_after = retry_after_seconds
        # admission also stops while the process's RSS (`resident`) is at this (None: never)
        self.max_resident_bytes = max_resident_bytes
        self._resident = resident
        self._resident_read: tuple[float, int | None] = (-math.inf, None)  # (when, RSS)
        self.app_id = app_id  # set: WAL mode (exactly-once commits, retried until they land)
        self._session_app_id = f"otel-delta-commit-{uuid.uuid4().hex}"  # commit mode
        self._sequence = 0  # commit mode: the transaction version of the last commit
        self._sequence_lock = threading.Lock()  # commits of several tables run in parallel
        self.on_committed = on_committed or (lambda positions: None)
        # WAL mode: takes (table, position, error) of a record whose rows the table refused —
        # its dead letter; it must be durable when it returns (runs on a commit thread)
        self.on_rejected = on_rejected
        self.stats = FlushStats()
        # per table: when its commits started failing, with none succeeding since (monotonic)
        self._failing_since: dict[str, float] = {}
        self._last_errors: dict[str, str] = {}  # per failing table, its last commit's error
        # per table: when the commit in progress started (monotonic); a store that hangs
        # instead of refusing fails nothing for minutes, so readiness looks at this too
        self._committing_since: dict[str, float] = {}
        self._pending: dict[str, _Pending] = {}  # the open group of each table
        self._sealed: list[tuple[str, _Pending]] = []  # full or held-back groups, oldest first
        self._failures: dict[str, int] = {}  # consecutive failed commits per table
        self._not_before: dict[str, float] = {}  # backoff: next attempt per table
        # WAL mode, stopping: tables whose commit failed, so their records stay in the WAL;
        # their later groups stay there too (committed, a later transaction version would
        # mark the earlier records as stored, and the replay would skip them)
        self._left_in_wal: set[str] = set()
        self._bytes = 0  # buffered + being committed
        self._reserved = 0  # requests admitted and still being decoded and converted
        self._waiting = 0  # requests waiting in `admit` for room that only commits free
        self._freed = asyncio.Event()  # set whenever buffered or reserved bytes go down
        self._wake = asyncio.Event()
        self._closing = False
        self._flushed = asyncio.Event()
        self._pool = ThreadPoolExecutor(max_workers=len(TABLES), thread_name_prefix="commit")
        self._task: asyncio.Task[None] | None = None
        writer.yield_while(self._room_to_spare)

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def failing_seconds(self) -> float:
        """How long the longest-failing table has gone without a successful commit (0: none)."""
        # a copy: commit threads of other tables may add or remove entries meanwhile
        oldest = min(self._failing_since.copy().values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    def failure(self) -> str:
        """The longest-failing table and the error of its last commit ("" when none fails), for
        /readyz to name the cause where a probe shows it: e.g. after a downgrade, a table of a
        newer schema version that no retry will ever commit to."""
        since = self._failing_since.copy()  # commit threads change it meanwhile
        errors = self._last_errors.copy()
        failing = [name for name in sorted(since, key=since.__getitem__) if name in errors]
        return f"{failing[0]}: {errors[failing[0]]}" if failing else ""

    def running_seconds(self) -> float:
        """How long the oldest commit in progress has been running (0: none): a store that
        accepts connections and never answers keeps a commit here, not failing, for as long
        as the object store client's timeouts and retries allow (minutes)."""
        oldest = min(self._committing_since.copy().values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    @property
    def reserved_bytes(self) -> int:
        return self._reserved

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")

    def check_capacity(self, incoming: int = 0, held: int = 0, *, memory: bool = True) -> None:
        """Refuse new work early (before decoding) when full or stopping. `incoming`: what the
        new request will need beyond the `held` bytes it already counts in; a request alone
        is always let in (it could never fit later). `memory`: the process's memory limit
        counts too (not for rows already converted: see `submit`)."""
        if self._closing:
            raise ShuttingDownError("otel-delta is shutting down")
        if self._buffer_full(incoming, held):
            used = self._bytes + self._reserved
            raise BufferFullError(
                f"ingest buffer full ({used} of {self.max_bytes} bytes buffered or being "
                "converted); retry later",
                self.retry_after,
            )
        resident = self._over_memory(incoming, held) if memory else None
        if resident is not None:
            raise MemoryLimitError(
                f"otel-delta at its memory limit ({resident} bytes resident and {incoming} "
                f"more for this request would pass {self.max_resident_bytes}, "
                "buffer.max_resident_bytes); retry later",
                self.retry_after,
            )

    def _room_to_spare(self) -> bool:
        """Whether a commit's next file may be encoded below the Exports (priority.py): nothing
        waits for the commits, and the buffer is under ROOM_TO_SPARE of its bound, so a commit
        that falls behind is back at full priority well before requests have to wait. Asked
        from commit threads: a stale answer costs one file's priority, nothing else."""
        if self._closing or self._waiting:
            return False
        return self._bytes + self._reserved < self.max_bytes * ROOM_TO_SPARE

    def _full(self, incoming: int, held: int = 0) -> bool:
        """Whether a request needing `incoming` more bytes than its `held` must wait: the
        buffer's bound, or the process's memory limit."""
        return self._buffer_full(incoming, held) or self._over_memory(incoming, held) is not None

    def _buffer_full(self, incoming: int, held: int = 0) -> bool:
        used = self._bytes + self._reserved
        if used == held:  # the asker's own bytes only
            return False
        return used >= self.max_bytes or used + incoming > self.max_bytes

    def _over_memory(self, incoming: int, held: int = 0) -> int | None:
        """The process's RSS when it leaves no room for `incoming` more bytes under
        `max_resident_bytes` (None: room, no limit, or nothing else held, as in `_full`).

        `max_bytes` counts the rows; the RSS also holds the bridge at rest, requests being
        received and converted, and the files being encoded, which grow with the load and
        with what the allocators keep. Under a sustained metrics load that came to 300-320
        MiB beside a full buffer, over the memory bound (docs/performance.md). So, as the
        Collector's memory_limiter does, the measured RSS stops admission too, and the buffer
        runs below `max_bytes` while the rest needs the room. A request with nothing else
        held is let in, as in `_full`: RSS an allocator keeps after everything is committed
        must not refuse every request."""
        if self.max_resident_bytes is None or self._bytes + self._reserved == held:
            return None
        resident = self._resident_now()
        if resident is None or resident + incoming <= self.max_resident_bytes:
            return None
        return resident

    def _resident_now(self) -> int | None:
        """The process's RSS, read at most every RESIDENT_READ_SECONDS."""
        now = time.monotonic()
        read_at, resident = self._resident_read
        if now - read_at >= RESIDENT_READ_SECONDS:
            resident = self._resident()
            self._resident_read = (now, resident)
        return resident

    def reserve(self, nbytes: int, held: int = 0) -> None:
        """Admit a request that will need about `nbytes` more than the `held` bytes it holds
        already while it is decoded and converted (BufferFullError if that does not fit);
        `release` it once its rows are buffered."""
        self.check_capacity(nbytes, held)
        self._reserved += nbytes

    async def admit(self, nbytes: int, held: int = 0) -> None:
        """`reserve`, waiting up to `retry_after` seconds for the space to free. A full
        buffer frees space as each commit lands; the client told to retry would wait that long
        anyway, and its slot would stay idle meanwhile: at a saturating load (bench/
        collector_load.py) the buffer could drain and the commits stall while clients waited out
        their delay. A request that has to wait starts a flush."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_after
        if self._full(nbytes, held):
            # the open groups are committed now, not at the interval: rows can fill the bound
            # long before a group reaches `max_rows` (large spans), and the commit thread would
            # idle meanwhile (bench/collector_load.py). Once per request: a table in backoff
            # commits nothing, and a wake per freeing would spin.
            self._wake.set()
        # every commit wakes every waiter: each checks without raising until its time is up
        self._waiting += 1
        try:
            while not self._closing and self._full(nbytes, held):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                if self.max_resident_bytes is not None:
                    # the RSS also falls with no freeing here (heap.trim_every, allocators
                    # giving back what they kept): look again soon
                    remaining = min(remaining, RESIDENT_RECHECK_SECONDS)
                self._freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), remaining)
        finally:
            self._waiting -= 1
        self.reserve(nbytes, held)

    def release(self, nbytes: int) -> None:
        self._reserved -= nbytes
        self._freed.set()

    async def submit(
        self, tables: dict[str, pa.Table], held: Mapping[str, int] | None = None
    ) -> None:
        """Buffer the rows and wait until they are committed (raises CommitError if not).
        `held`: the memory a table holds, by name, where its buffers' lengths say less
        (`Converted.held`)."""
        # not the memory limit: the rows are converted, and their request was admitted under
        # it before; refused now, the work would be thrown away with no wait for room
        self.check_capacity(memory=False)
        if not tables:
            return
        held = held or {}
        futures = [self._put(name, data, None, held.get(name, 0)) for name, data in tables.items()]
        # shield: a client that disconnects must not cancel the commit others wait on
        await asyncio.gather(*(asyncio.shield(f) for f in futures))

    def add(
        self, tables: dict[str, pa.Table], position: int, held: Mapping[str, int] | None = None
    ) -> None:
        """WAL mode: buffer the rows of the durable record at `position`; no waiting."""
        held = held or {}
        for name, data in tables.items():
            self._put(name, data, position, held.get(name, 0))

    def _put(
        self, name: str, data: pa.Table, position: int | None, held: int
    ) -> asyncio.Future[None]:
        pending = self._pending.get(name)
        if pending is not None and pending.rows + data.num_rows > self.max_rows:
            self._seal(name)
            pending = None
        if pending is None:
            pending = self._pending[name] = _Pending()
        future = asyncio.get_running_loop().create_future()
        pending.waiters.append(future)
        pending.batches.append(data)
        if position is not None:
            pending.positions.append(position)
        # the buffers' sizes: `nbytes` would walk every buffer's referenced range, 0.19 ms per
        # 8,192-span table against 0.006 ms, for the same figure on whole tables (the slices
        # of a table would count whole buffers here: more, never less, than they hold); or
        # what the converter says the table holds (its buffers as allocated), if that is more
        nbytes = max(held, data.get_total_buffer_size())
        pending.rows += data.num_rows
        pending.nbytes += nbytes
        self._bytes += nbytes
        if pending.rows >= self.max_rows:
            self._seal(name)
        return future

    def _seal(self, name: str) -> None:
        """Close the table's open group: it is committed as it is at the next flush, now."""
        self._sealed.append((name, self._pending.pop(name)))
        self._wake.set()

    def flush_soon(self) -> None:
        """Commit the open groups now, not at the interval: the write-ahead log is full, and
        only commits free it (WriteAheadLog.on_full). A table in backoff still waits."""
        self._wake.set()

    async def flush(self) -> None:
        """Wake the flusher and wait for the end of its next flush (replay uses it to keep
        memory in bounds)."""
        self._flushed.clear()
        self._wake.set()
        await self._flushed.wait()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.flush_interval)
            self._wake.clear()
            if self._pending or self._sealed:
                await self._flush()
            self._flushed.set()
            if self._closing and not self._pending and not self._sealed:
                return

    def _due(self) -> dict[str, list[_Pending]]:
        """Take the groups to commit now, per table, oldest first; tables in backoff wait."""
        now = time.monotonic()
        groups: dict[str, list[_Pending]] = {}
        held: list[tuple[str, _Pending]] = []
        for name, pending in [*self._sealed, *self._pending.items()]:
            if not self._closing and self._not_before.get(name, 0.0) > now:
                held.append((name, pending))
            else:
                groups.setdefault(name, []).append(pending)
        self._sealed, self._pending = held, {}
        return groups

    async def _flush(self) -> None:
        groups = self._due()
        if self._left_in_wal:
            self._leave_in_wal(groups)
        loop = asyncio.get_running_loop()
        commits = [
            loop.run_in_executor(self._pool, self._commit_groups, name, pendings, loop)
            for name, pendings in groups.items()
        ]
        retry: list[tuple[str, _Pending]] = []
        for (name, pendings), outcomes in zip(
            groups.items(), await asyncio.gather(*commits), strict=True
        ):
            for index, (pending, outcome) in enumerate(zip(pendings, outcomes, strict=True)):
                if isinstance(outcome, int):
                    continue  # answered as it landed (`_commit_groups`)
                if self.app_id is not None:  # WAL mode: this and every later group wait
                    retry.extend((name, p) for p in pendings[index:])
                    self._failed(name, outcome, held=len(pendings) - index)
                    break
                else:
                    self._bytes -= pending.nbytes
                    self.stats.failures += 1
                    if not isinstance(outcome, CommitError):
                        outcome = CommitError(str(outcome))
                    pending.settle(outcome)
        if retry and self._closing:
            for name, pending in retry:  # not lost: the WAL replays them at the next start
                self._bytes -= pending.nbytes
                self._left_in_wal.add(name)
            log.warning("%d group(s) left in the write-ahead log for the next start", len(retry))
        else:
            self._sealed = retry + self._sealed
        self._freed.set()

    def _leave_in_wal(self, groups: dict[str, list[_Pending]]) -> None:
        """Stopping: the groups of tables that already left a failed group in the WAL are not
        committed after it (a stop's flush can come after a commit that was in flight when the
        stop began, and the store can be back by then); they stay in the WAL behind it."""
        for name in self._left_in_wal & groups.keys():
            behind = groups.pop(name)
            for pending in behind:
                self._bytes -= pending.nbytes
            log.warning(
                "%d group(s) of %s left in the write-ahead log behind the one that failed",
                len(behind),
                name,
            )

    def _committed(self, name: str, pending: _Pending, commits: int) -> None:
        # the rows go with the count: the flush still holds its groups until its last commit
        pending.batches.clear()
        self._bytes -= pending.nbytes
        self._freed.set()
        self.stats.commits += commits
        self.stats.rows += pending.rows
        if self._failures.pop(name, 0):
            log.info("commits to %s succeed again", name)
        self._last_errors.pop(name, None)
        self._not_before.pop(name, None)
        pending.settle()
        if pending.positions:
            crash_point("delta-committed")
            self.on_committed(pending.positions)

    def _failed(self, name: str, error: Exception, held: int) -> None:
        self.stats.failures += 1
        failures = self._failures[name] = self._failures.get(name, 0) + 1
        delay = backoff(failures, FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS)
        self._not_before[name] = time.monotonic() + delay
        self._last_errors[name] = first_line(error)
        log.warning(
            "commit to %s failed (%d in a row; %d group(s) held, retry in %.1fs): %s",
            name,
            failures,
            held,
            delay,
            error,
        )

    def _commit_groups(
        self, name: str, pendings: list[_Pending], loop: asyncio.AbstractEventLoop
    ) -> list[Exception | int]:
        """One table's groups, one after another (a table takes one commit at a time); per
        group, the error or the number of commits it took. In WAL mode the first failure
        stops the table's run: later groups must not commit before it. A group that landed is
        answered on the loop at once (its senders, the log, the memory it held), not after the
        table's last group: a flush after a busy interval holds several."""
        outcomes: list[Exception | int] = []
        for pending in pendings:
            # the commits are the bottleneck while requests wait for the memory they free
            # (or nothing else is left to do): then a commit may use every core
            self.writer.spread(self._closing or self._waiting > 0)
            started = self._committing_since[name] = time.monotonic()
            try:
                commits = self._commit(name, pending)
                loop.call_soon_threadsafe(self._committed, name, pending, commits)
                outcomes.append(commits)
            except Exception as exc:  # answered to this group's senders (or retried)
                COMMIT_FAILURES.labels(name).inc()
                self._failing_since.setdefault(name, started)
                outcomes.append(exc)
                if self.app_id is not None:
                    outcomes.extend(exc for _ in pendings[len(outcomes) :])
                    break
            finally:
                self._committing_since.pop(name, None)
        return outcomes

    def _commit(self, name: str, pending: _Pending) -> int:
        started = time.monotonic()
        try:
            commits = self._append(name, packed.concat(pending.batches), pending.positions)
        except RowsRejectedError as error:
            commits = self._isolate(name, pending, error)
        refused = sum(pending.batches[index].num_rows for index in pending.rejected)
        COMMIT_SECONDS.labels(name).observe(time.monotonic() - started)
        COMMITS.labels(name).inc(commits)
        COMMIT_ROWS.labels(name).inc(pending.rows - refused)
        COMMIT_BYTES.labels(name).inc(pending.nbytes)
        if refused:
            REJECTED_ROWS.labels(name).inc(refused)
        self._failing_since.pop(name, None)
        return commits

    def _isolate(self, name: str, pending: _Pending, error: RowsRejectedError) -> int:
        """The table refused the group's rows: commit each request's rows alone, in order, so
        only the requests at fault are held back — answered with the error (commit mode) or
        handed to `on_rejected` as dead letters (WAL mode). A dead letter is written before any
        later record commits: a later transaction version marks every earlier record as done.
        A table that refuses every row (e.g. a new constraint no row meets) sends every request
        to the dead letters, loudly (log, metrics), where they wait, whole, to be loaded again.
        """
        wal = self.app_id is not None
        rejected: dict[int, RowsRejectedError] = {}
        commits = 0
        for index, batch in enumerate(pending.batches):
            position = pending.positions[index : index + 1] if wal else []
            try:
                if len(pending.batches) == 1:
                    raise error  # already tried alone
                commits += self._append(name, batch, position)
            except RowsRejectedError as refused:
                rejected[index] = refused
                log.warning("%s refused the rows of a request: %s", name, refused)
                if wal and self.on_rejected is not None:
                    self.on_rejected(name, position[0], refused)
        pending.rejected = rejected
        return commits

    def _append(self, name: str, data: pa.Table, positions: list[int]) -> int:
        """Append `data` (of the WAL records at `positions`); the number of commits it took."""
        if self.app_id is not None:
            txn = Transaction(self.app_id, max(positions))
            version = self.writer.append(name, data, txn)
            log.debug("committed %d rows to %s as version %d", data.num_rows, name, version)
            return 1
        starts = range(0, data.num_rows, self.max_rows)
        for start in starts:
            part = data.slice(start, self.max_rows)
            version = self.writer.append(name, part, self._next_session_txn())
            log.debug("committed %d rows to %s as version %d", part.num_rows, name, version)
        return len(starts)

    def _next_session_txn(self) -> Transaction:
        """Commit mode: a fresh transaction per commit."""
        with self._sequence_lock:
            self._sequence += 1
            return Transaction(self._session_app_id, self._sequence)

    async def close(self) -> None:
        """Stop accepting rows, commit everything buffered (on every core: nothing else is
        left to do), answer every waiter."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self._pool.shutdown(wait=True)
