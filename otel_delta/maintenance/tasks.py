"""One maintenance round on one table: retention, compaction, vacuum, checkpoint, log cleanup.

Each step is independent (a failure is recorded and the next step still runs) and none of them
can take rows from the receiver: compaction is a dataChange=false rewrite limited to closed
partitions (date before today, UTC) while the receiver appends to today's; vacuum only deletes
files already removed from the table (never "full" mode, which could delete files of a commit
in flight); retention deletes whole expired date partitions.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from deltalake import CommitProperties, DeltaTable, WriterProperties
from deltalake.exceptions import TableNotFoundError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TablePolicy:
    """What to do to a table each round (from `[deltalake.table]` and `[deltalake.storage]`)."""

    optimize: bool = True
    vacuum: bool = True
    retention_hours: int = 168
    retention_days: int | None = None
    checkpoint: bool = True
    target_file_size: int = 128 * 1024 * 1024
    max_commit_retries: int = 15
    compression: str = "ZSTD"
    compression_level: int = 3


@dataclass
class TableReport:
    """What one round did to one table; `errors` are step failures, retried next round."""

    table: str
    expired_files_removed: int = 0
    files_compacted: int = 0
    files_written: int = 0
    files_vacuumed: int = 0
    checkpointed: bool = False
    version: int = -1
    errors: list[str] = field(default_factory=list)


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _step(report: TableReport, name: str, action) -> None:
    try:
        action()
    except Exception as exc:  # any failure is logged and retried next round, never raised
        report.errors.append(f"{name}: {exc}")
        log.warning("maintenance of %s: %s failed: %s", report.table, name, exc)


def _relative(table: DeltaTable, paths: list[str]) -> set[str]:
    """Paths relative to the table: delta-rs lists tombstones read from a checkpoint as
    absolute paths and the others as relative ones."""
    roots = {
        table.table_uri.rstrip("/") + "/",
        table.table_uri.removeprefix("file://").rstrip("/") + "/",
    }
    out = set()
    for path in paths:
        for root in roots:
            path = path.removeprefix(root)
        out.add(path)
    return out


def maintain_table(
    uri: str,
    name: str,
    policy: TablePolicy,
    *,
    today: dt.date | None = None,
    storage_options: dict[str, str] | None = None,
    checkpointed_version: int | None = None,
    vacuumed: set[str] | None = None,
) -> TableReport | None:
    """Run one round on the table at `uri`; None if the table does not exist (yet).

    `checkpointed_version`: the version last checkpointed, so an idle table is not rewritten.
    `vacuumed`: paths this caller already vacuumed (updated in place): delta-rs keeps listing a
    deleted file until its tombstone expires, and each vacuum is two commits, so skip those.
    """
    try:
        table = DeltaTable(uri, storage_options=storage_options or None)
    except TableNotFoundError:
        return None
    today = today or utc_today()
    report = TableReport(name)
    commit = CommitProperties(max_commit_retries=policy.max_commit_retries)
    partitions = table.metadata().partition_columns
    by_date = "date" in partitions

    if policy.retention_days:
        cutoff = today - dt.timedelta(days=policy.retention_days)

        def expire() -> None:
            # partition-only predicate when partitioned by date: whole files go, none rewritten
            metrics = table.delete(f"date < '{cutoff.isoformat()}'", commit_properties=commit)
            report.expired_files_removed = int(metrics.get("num_removed_files", 0))

        _step(report, "retention", expire)

    if policy.optimize and by_date:

        def compact() -> None:
            metrics = table.optimize.compact(
                partition_filters=[("date", "<", today.isoformat())],
                target_size=policy.target_file_size,
                writer_properties=WriterProperties(
                    compression=policy.compression,  # type: ignore[arg-type]
                    compression_level=policy.compression_level,
                ),
                commit_properties=commit,
            )
            report.files_compacted = int(metrics.get("numFilesRemoved", 0))
            report.files_written = int(metrics.get("numFilesAdded", 0))

        _step(report, "compaction", compact)

    if policy.vacuum:

        def vacuum() -> None:
            kwargs = {
                "retention_hours": policy.retention_hours,
                "enforce_retention_duration": False,
            }
            # a dry run first: vacuum commits START/END entries even when there is nothing to do
            done = vacuumed if vacuumed is not None else set()
            candidates = _relative(table, table.vacuum(dry_run=True, **kwargs))
            done &= candidates  # forget tombstones that expired
            if candidates - done:
                deleted = table.vacuum(dry_run=False, commit_properties=commit, **kwargs)
                report.files_vacuumed = len(_relative(table, deleted) - done)
                done.update(_relative(table, deleted))

        _step(report, "vacuum", vacuum)

    if policy.checkpoint:

        def checkpoint() -> None:
            table.update_incremental()
            if table.version() == checkpointed_version:
                return
            table.create_checkpoint()
            table.cleanup_metadata()  # log entries older than delta.logRetentionDuration
            report.checkpointed = True

        _step(report, "checkpoint", checkpoint)
    _step(report, "version", lambda: setattr(report, "version", table.version()))
    return report
