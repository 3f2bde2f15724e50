"""Which process may rewrite a table's files: a lease kept in the table's own Delta log.

**Why.** delta-rs 1.6.6 does not fail a rewrite (a dataChange=false commit: compaction, OPTIMIZE,
Z-order) that removes files a concurrent rewrite already removed (delta-io/delta-rs#3982): two
such commits of the same files both land, and every row of those files is then in the table
twice. Two `otel-delta optimize` runs at once did it every time (60 files of 100 rows: 12,000
rows, 6,000 distinct), and so did replicas of the bridge that all ran maintenance on one lake.
Our own rewrites read the log again just before committing (maintenance/compaction.commit_swap),
but delta-rs's (bin-packing, Z-order, `optimize`) commit inside one call, and neither kind is
checked against the other's commit. So one process at a time rewrites a table's files.

**How.** Before its first rewrite commit a process takes the table's lease: a commit holding only
a Delta `txn` of app id `LEASE_APP_ID`, whose version is the moment the lease ends (ms since the
epoch). Every store the bridge supports makes one commit per version, and delta-rs fails a commit
carrying a `txn` of an app id that a commit after its read version also carried ("Concurrent
transaction failed"): of two processes taking the lease at once, exactly one holds it. A process
that finds a lease of another process still running leaves the table's rewrites to it
(`LeaseHeldError`; the maintainer skips its rewrite steps); one that finds the lease ended, or
never taken, takes it. The holder renews it once less than half is left, so each rewrite starts
with at least half a lease ahead (`deltalake.table.maintenance_lease_seconds`); our own
rewrites commit carrying the lease they started under, so one that outlived it fails once
another process took it, and `holding` (optimize, the bin-packing, the closed days' Z-order)
renews it on a thread while delta-rs rewrites, which cannot carry it. Within a process,
rewrites of a table take turns (`exclusive`). A holder that stops releases its leases (a lease
that ends now); one that dies leaves them to run out. Lease ends come from each host's clock.

Appends, deletes, upserts, vacuum, checkpoints and retention do not take it: delta-rs checks
their commits against rewrites itself. A process's leases are held in memory (`Leases`), so
a process knows its own from another's by the version it committed.

The same mechanism under another app id serializes `otel-delta backfill` runs into one lake
(backfill/ledger.py: `BACKFILL_LEASES`, on its ledger table); a run that finds it held waits
for it (`holding(..., waiting=...)`) instead of being refused.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaProtocolError
from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

from otel_delta.engines.data_files import commit_actions
from otel_delta.errors import LeaseHeldError
from otel_delta.lakehouse import commit_info

log = logging.getLogger(__name__)

LEASE_APP_ID = "otel-delta.maintenance-lease"
MAINTENANCE = "maintenance"  # the default lease's kind


def lease_operation(kind: str) -> str:
    """The operation a lease commit of this kind records in its commit info."""
    return f"{kind} lease"


LEASE_OPERATION = lease_operation(MAINTENANCE)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _name(delta: DeltaTable) -> str:
    return delta.metadata().name or delta.table_uri.rstrip("/").rsplit("/", 1)[-1]


class Leases:
    """The maintenance leases this process holds, by table URI (one instance per process:
    `LEASES`; tests make more to stand for other processes). `app_id` and `kind` make another
    kind of lease, kept apart from the maintenance lease in the same log (the backfill's)."""

    def __init__(self, app_id: str = LEASE_APP_ID, kind: str = MAINTENANCE) -> None:
        self.app_id = app_id
        self.kind = kind  # in the lease commits' operation and the log lines
        self._held: dict[str, int] = {}  # table URI -> the version (end, ms) we committed
        self._lock = threading.Lock()
        self._rewrites: dict[str, threading.RLock] = {}  # table URI -> its rewrites' lock

    @contextlib.contextmanager
    def exclusive(self, delta: DeltaTable) -> Iterator[None]:
        """One rewrite of the table at a time within this process. The lease tells processes
        apart, not threads: a bridge's maintainer and an optimize through its ConnectorService
        share it. Re-entrant (the maintainer's bin-packing goes through `Table.optimize`)."""
        with self._lock:
            lock = self._rewrites.setdefault(delta.table_uri, threading.RLock())
        with lock:
            yield

    def transaction(self, delta: DeltaTable) -> Transaction | None:
        """The lease as this process holds it, for a rewrite's own commit to carry: a lease
        another process committed after the rewrite's read then fails the rewrite (delta-rs's
        txn check), however long it took. None when the process does not hold it."""
        with self._lock:
            mine = self._held.get(delta.table_uri)
        return None if mine is None else Transaction(self.app_id, mine)

    def held_elsewhere(self, delta: DeltaTable, at_ms: int | None = None) -> int | None:
        """When another process's lease on the table ends (ms), if it has not ended yet; None
        when this process may take it. Reads `delta` as it is (no update)."""
        current = delta.transaction_version(self.app_id)
        if current is None or current <= (now_ms() if at_ms is None else at_ms):
            return None
        with self._lock:
            return None if self._held.get(delta.table_uri) == current else current

    def hold(self, delta: DeltaTable, seconds: float, at_ms: int | None = None) -> bool:
        """Make sure this process holds the table's lease with at least half of `seconds`
        ahead: a commit when it is not held or less than half is left, none otherwise. True
        when this call took a lease the process did not hold. Raises LeaseHeldError when another
        process holds it. `delta` is brought up to date first (its own commits count)."""
        delta.update_incremental()
        now = now_ms() if at_ms is None else at_ms
        if (ends := self.held_elsewhere(delta, now)) is not None:
            raise LeaseHeldError(_name(delta), ends)
        current = delta.transaction_version(self.app_id)
        with self._lock:
            mine = self._held.get(delta.table_uri)
        ours = mine is not None and current == mine
        length_ms = int(seconds * 1000)
        if ours and current is not None and current - now >= length_ms // 2:
            return False
        # a later version than any before: each commit of the lease says something new
        ends = max(now + length_ms, (current or 0) + 1)
        try:
            self._commit(delta, ends)
        except CommitFailedError:
            delta.update_incremental()
            if (ends := self.held_elsewhere(delta)) is not None:  # taken since our read
                raise LeaseHeldError(_name(delta), ends) from None
            raise
        except DeltaProtocolError as exc:
            # a table delta-rs cannot write (e.g. Spark's deletion vectors): delta-rs cannot
            # rewrite it either, and Spark checks its own rewrites' conflicts
            log.debug("no maintenance lease on %s: %s", delta.table_uri, exc)
            return False
        with self._lock:
            self._held[delta.table_uri] = ends
        delta.update_incremental()  # a commit does not move the handle; the rewrite reads on
        return not ours

    def release(self, delta: DeltaTable) -> None:
        """End this process's lease on the table now (a commit), so another process may take
        it at once; nothing when the process does not hold it."""
        with self._lock:
            mine = self._held.pop(delta.table_uri, None)
        if mine is None:
            return
        delta.update_incremental()
        if delta.transaction_version(self.app_id) != mine:
            return  # it had run out and another process took it
        # another process committing a lease meanwhile fails it: ours was over anyway
        with contextlib.suppress(CommitFailedError):
            self._commit(delta, now_ms())

    def held(self) -> list[str]:
        """The URIs of the tables whose lease this process committed last."""
        with self._lock:
            return list(self._held)

    @contextlib.contextmanager
    def holding(
        self,
        delta: DeltaTable,
        seconds: float,
        waiting: Callable[[LeaseHeldError], None] | None = None,
    ) -> Iterator[None]:
        """Hold the table's lease for one operation, the only rewrite of the table in this
        process meanwhile (`exclusive`): renewed while it runs (delta-rs's rewrites cannot
        carry the lease in their commit, so a long one must not outlive it), released after
        it when the operation took it, kept when the process held it before (its maintainer
        does). `delta` is this call's: the renewals use it while the operation runs.

        Another process holding it raises LeaseHeldError, unless `waiting` is given: it is
        called with each refusal (it waits a while, or raises), and the lease is tried again."""
        with self.exclusive(delta):
            while True:
                try:
                    taken = self.hold(delta, seconds)
                    break
                except LeaseHeldError as held:
                    if waiting is None:
                        raise
                    waiting(held)
            stop = threading.Event()
            renewer = threading.Thread(
                target=self._renew, args=(delta, seconds, stop), name="lease-renewal", daemon=True
            )
            renewer.start()
            try:
                yield
            finally:
                stop.set()
                renewer.join()
                if taken:
                    try:
                        self.release(delta)
                    except Exception as exc:  # it runs out by itself: the operation's outcome
                        log.warning(
                            "releasing the %s lease of %s: %s", self.kind, _name(delta), exc
                        )

    def _renew(self, delta: DeltaTable, seconds: float, stop: threading.Event) -> None:
        """Renew the lease (once less than half is left) until `stop`; if another process took
        it (this one paused past its end), say so: the rewrite under way may land beside one
        of the other's."""
        while not stop.wait(seconds / 4):
            try:
                self.hold(delta, seconds)
            except LeaseHeldError as exc:
                log.warning("%s lease of %s lost while in use: %s", self.kind, _name(delta), exc)
                return
            except Exception as exc:  # the store: try again at the next tick
                log.warning("renewing the %s lease of %s: %s", self.kind, _name(delta), exc)

    def _commit(self, delta: DeltaTable, ends_ms: int) -> None:
        commit_actions(
            delta,
            [],
            CommitProperties(
                app_transactions=[Transaction(self.app_id, ends_ms)],
                custom_metadata=commit_info(lease_operation(self.kind)),
            ),
            # delta-rs's expired-log cleanup lists the whole log: the maintainer's checkpoint
            # step does it (as for the bridge's appends)
            PostCommitHookProperties(cleanup_expired_logs=False),
        )


LEASES = Leases()
