"""One maintenance round on one table: retention, compaction, vacuum, checkpoint, log cleanup.

Built on the connector API (so maintenance commits get its bounded conflict retries and
typed errors). Each step is independent — a failure is recorded and the next step still runs —
and none of them can take rows from the receiver: closed partitions (date before today, UTC)
of spans and logs are sorted by trace id across their files once (again only if files arrive
later), the rest of the closed partitions get delta-rs's bin-packing, and today's partition,
where the receiver appends, gets the clustered compaction of files older than a minimum age
(compaction.py); all are dataChange=false rewrites that concurrent appends commit around;
vacuum deletes files removed from the table, and files no commit references only once a week
old (engines/vacuum.py: a younger one could belong to a commit in flight); retention deletes
whole expired date partitions.

The three rewrites run only in the process holding the table's maintenance lease
(engines/lease.py): where another replica holds it, they are skipped (counted as `skipped`),
and the lease is taken only by a round that has something to rewrite, so an idle table gets
no commits.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from otel_delta.config import TableSettings
from otel_delta.connector.maintenance import fits_a_bin_of_two
from otel_delta.engines.commit_log import LogFiles
from otel_delta.engines.lease import LEASES
from otel_delta.errors import LeaseHeldError, describe
from otel_delta.maintenance import closed_days, compaction
from otel_delta.metrics import MAINTENANCE_RUNS, MAINTENANCE_SECONDS
from otel_delta.tables import TABLES
from otel_delta.tables.layout import COMPACTION_LEVEL

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from otel_delta.connector import Table

log = logging.getLogger(__name__)
# the lease of another process each table was last said to be under (`maintain_table`)
_LEASES_SAID: dict[str, int] = {}


@dataclass(frozen=True)
class TablePolicy:
    """What to do to a table each round (from `[deltalake.table]` and `[deltalake.storage]`)."""

    optimize: bool = True
    vacuum: bool = True
    retention_hours: int = 168
    retention_days: int | None = None
    checkpoint: bool = True
    target_file_size: int = 128 * 1024 * 1024
    # today's ingested files are rewritten, clustered, once this old (0 = not before the day
    # closes); see otel_delta/maintenance/compaction.py
    open_partition_age_seconds: float = 900.0
    compression: str = "ZSTD"
    compaction_compression_level: int = COMPACTION_LEVEL
    max_commit_retries: int = 15
    lease_seconds: float = TableSettings.model_fields["maintenance_lease_seconds"].default


@dataclass
class TableReport:
    """What one round did to one table; `errors` are step failures, retried next round."""

    table: str
    expired_rows_deleted: int = 0
    files_compacted: int = 0
    files_written: int = 0
    partitions_clustered: int = 0  # closed partitions sorted across their files
    open_files_compacted: int = 0  # of today's partition, by the clustered compaction
    open_files_written: int = 0
    files_vacuumed: int = 0
    # another process's maintenance lease ends then (ms): this round rewrote nothing
    rewrites_left_until_ms: int | None = None
    checkpointed: bool = False
    log: LogFiles | None = None  # the table's Delta log after the round's cleanup
    version: int = -1
    errors: list[str] = field(default_factory=list)


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _step(report: TableReport, name: str, action: Callable[[], None]) -> None:
    started = time.monotonic()
    outcome = "ok"
    try:
        action()
    except LeaseHeldError as exc:  # another replica took the lease since this round's check
        outcome = "skipped"
        report.rewrites_left_until_ms = exc.until_ms
        log.info("maintenance of %s: %s left to another process: %s", report.table, name, exc)
    except Exception as exc:  # any failure is logged and retried next round, never raised
        outcome = "failed"
        report.errors.append(f"{name}: {describe(exc)}")
        log.warning("maintenance of %s: %s failed: %s", report.table, name, describe(exc))
    MAINTENANCE_RUNS.labels(name, outcome).inc()
    MAINTENANCE_SECONDS.labels(name).observe(time.monotonic() - started)


def binpacking_due(
    delta: DeltaTable, include: Callable[[dict[str, str | None]], bool], target_size: int
) -> bool:
    """Whether delta-rs's bin-packing may have anything to do in the partitions passing
    `include`. It packs a partition's files of at most `target_size`, neighbours in the log's
    order, into bins of at most `target_size`, and rewrites only bins of two files or more:
    so it has nothing to do unless some partition's two smallest such files fit in one bin
    together. Asked first so that a round with nothing to pack takes no lease
    (engines/lease.py); it may still find the fitting files too far apart to pack."""
    return fits_a_bin_of_two(
        (
            (file.partition, file.size)
            for file in compaction.candidates(delta)
            if file.size <= target_size and include(dict(file.partition))
        ),
        target_size,
    )


def maintain_table(
    table: Table,
    policy: TablePolicy,
    *,
    today: dt.date | None = None,
    checkpointed_version: int | None = None,
) -> TableReport:
    """Run one round on `table`.

    `checkpointed_version`: the version last checkpointed, so an idle table is not rewritten.
    """
    today = today or utc_today()
    report = TableReport(table.name)
    by_date = "date" in table.metadata().partition_columns

    if policy.retention_days:
        cutoff = today - dt.timedelta(days=policy.retention_days)

        def expire() -> None:
            report.expired_rows_deleted = table.expire(cutoff).deleted

        _step(report, "retention", expire)

    day = today.isoformat()
    layout = TABLES[table.name].layout
    options = compaction.RewriteOptions(
        compression=policy.compression,
        compression_level=policy.compaction_compression_level,
        max_commit_retries=policy.max_commit_retries,
        lease_seconds=policy.lease_seconds,
    )

    def closed(values: dict[str, str | None]) -> bool:
        return (values.get("date") or day) < day

    def lease() -> None:
        report.rewrites_left_until_ms = until = LEASES.held_elsewhere(table.delta())
        if until is not None and _LEASES_SAID.get(table.uri) != until:
            # once per lease seen: a bridge killed while it held one leaves it to run out
            # (maintenance_lease_seconds), and its rewrites stopped without a word
            _LEASES_SAID[table.uri] = until
            at = dt.datetime.fromtimestamp(until / 1000, dt.UTC).strftime("%H:%M:%SZ")
            log.info(
                "maintenance of %s: its rewrites are left to the process holding its lease, "
                "until %s (a process that stopped without releasing it: until it runs out)",
                table.name,
                at,
            )

    def rewrite(name: str, action: Callable[[DeltaTable], None]) -> None:
        """A step that rewrites files, given a fresh handle on the table: only while no other
        process holds the lease, and as the only rewrite of the table in this process (a
        ConnectorService optimize waits)."""
        if report.rewrites_left_until_ms is not None:
            MAINTENANCE_RUNS.labels(name, "skipped").inc()
            return

        def exclusively() -> None:
            delta = table.delta()
            with LEASES.exclusive(delta):
                action(delta)

        _step(report, name, exclusively)

    if policy.optimize and by_date:
        _step(report, "lease", lease)
    if policy.optimize and by_date and layout.cluster_columns:

        def cluster(delta: DeltaTable) -> None:
            result = closed_days.cluster_partitions(
                delta,
                layout,
                options,
                include=closed,
                target_size=policy.target_file_size,
            )
            report.partitions_clustered = result.partitions
            report.files_compacted += result.files_removed
            report.files_written += result.files_added

        rewrite("clustering", cluster)

    if policy.optimize and by_date:

        def compact(delta: DeltaTable) -> None:
            if not binpacking_due(delta, closed, policy.target_file_size):
                return
            # held across rounds: the optimize call keeps a lease its process held before
            LEASES.hold(delta, policy.lease_seconds)
            result = table.optimize(where=f"date < '{day}'", target_size=policy.target_file_size)
            report.files_compacted += result.files_removed
            report.files_written += result.files_added

        rewrite("compaction", compact)

    if policy.optimize and by_date and policy.open_partition_age_seconds:

        def compact_open(delta: DeltaTable) -> None:
            result = compaction.compact(
                delta,
                layout,
                options,
                include=lambda values: values.get("date") == day,
                older_than_ms=int((time.time() - policy.open_partition_age_seconds) * 1000),
            )
            report.open_files_compacted = result.files_removed
            report.open_files_written = result.files_added

        rewrite("open_compaction", compact_open)

    if policy.vacuum:

        def vacuum() -> None:
            # engines/vacuum.py dry-runs first itself: it counts only files still there and
            # commits nothing when there are none
            report.files_vacuumed = len(table.vacuum(policy.retention_hours).files)

        _step(report, "vacuum", vacuum)

    if policy.checkpoint:

        def checkpoint() -> None:
            if table.version() == checkpointed_version:
                return
            table.checkpoint()
            table.cleanup_log()  # log entries older than delta.logRetentionDuration
            report.checkpointed = True
            report.log = table.log_files()

        _step(report, "checkpoint", checkpoint)
    _step(report, "version", lambda: setattr(report, "version", table.version()))
    return report
