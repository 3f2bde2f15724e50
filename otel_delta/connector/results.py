"""Typed results of connector operations: plain dataclasses, easy to print, log or serialize.

The `version` of an operation's result (upsert, insert, delete, schema change, optimize,
restore) is the version of the operation's own commit, found in the log by the commit id it
was tagged with (engines/commit_log.own_commit); not the table's latest version, which the
bridge's appends may already have passed, so `restore(version=result.version - 1)` goes back
to just before that commit. An operation that commits more than once reports its last commit;
one that committed nothing, the version the table was at when it ran. An optimize's own commit
is its OPTIMIZE, not the commits taking and releasing the maintenance lease around it (an
optimize with nothing to rewrite takes no lease). A hard delete and a redaction report the
version their purge checkpointed (every earlier one is gone).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from otel_delta.connector.history_metrics import normalized


@dataclass(frozen=True)
class UpsertResult:
    """What one merge did: rows inserted/updated in the table, duplicates dropped from the batch."""

    inserted: int
    updated: int
    deduplicated: int
    version: int  # the merge's commit (no records: the version the table was at)
    engine: str

    @property
    def upserted(self) -> int:
        return self.inserted + self.updated


@dataclass(frozen=True)
class InsertResult:
    inserted: int
    version: int  # the append's commit (no records: the version the table was at)
    engine: str = "delta-rs"


@dataclass(frozen=True)
class DeleteResult:
    deleted: int
    # the delete's commit (none when no row matched: the version the table was at); a hard
    # delete: the version its purge checkpointed, where every reader starts
    version: int
    engine: str
    hard: bool = False  # a hard delete: the files that held the rows are gone too
    files_purged: int = 0  # data files physically removed (hard delete), not already gone
    log_entries_removed: int = 0  # log entries, checkpoints, change data files (hard delete)


@dataclass(frozen=True)
class SchemaChange:
    """Columns added by schema evolution (empty when the table already had them)."""

    added: list[str]
    version: int  # the commit that added them (none added: the version the table was at)


@dataclass(frozen=True)
class ScanStats:
    """How much of the table a read touched: proof that partition and statistics pruning worked.

    files_total: data files in the snapshot; files_after_partition_pruning: left after
    partition-value pruning; files_scanned: left after min/max/null-count pruning, i.e. read.
    row_groups_total: Parquet row groups in the scanned files; row_groups_scanned: left after
    the same test on each row group's own statistics (None when the files were not opened).
    """

    version: int
    files_total: int
    files_after_partition_pruning: int
    files_scanned: int
    bytes_total: int
    bytes_scanned: int
    predicate: str | None
    row_groups_total: int | None = None
    row_groups_scanned: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueryResult:
    table: pa.Table
    scan: ScanStats

    @property
    def num_rows(self) -> int:
        return self.table.num_rows


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp: datetime
    operation: str
    parameters: dict[str, Any]
    metrics: dict[str, Any]
    user: str | None
    # rows written by this commit (an upsert's copied rows too), when the engine reported it
    num_records: int | None
    # `metrics` under one set of names on either engine, as ints (connector/history_metrics.py)
    normalized_metrics: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_commit(
        cls,
        version: int,
        timestamp: datetime,
        operation: str,
        parameters: dict[str, Any],
        metrics: dict[str, Any],
        user: str | None,
        normalized_metrics: dict[str, int] | None = None,
    ) -> HistoryEntry:
        """The entry of a commit with these `metrics`: `normalized_metrics` from them unless
        given (or given empty: the ConnectorService sends them, a server older than them
        none), `num_records` their `rows_written`. One rule, for the connector's history and
        the ConnectorService's client alike."""
        figures = normalized_metrics or normalized(metrics)
        return cls(
            version=version,
            timestamp=timestamp,
            operation=operation,
            parameters=parameters,
            metrics=metrics,
            user=user,
            num_records=figures.get("rows_written"),
            normalized_metrics=figures,
        )


@dataclass(frozen=True)
class TableMetadata:
    name: str
    uri: str
    version: int
    schema: pa.Schema
    partition_columns: list[str]
    properties: dict[str, str]
    schema_version: int | None  # the otel_delta.schemaVersion table property
    created_time: datetime | None
    description: str | None
    id: str


@dataclass(frozen=True)
class TableStatistics:
    version: int
    size_bytes: int
    files: int
    partitions: int
    rows: int
    small_files: int  # files below deltalake.storage.min_file_size: what optimize would compact
    small_file_threshold: int


@dataclass(frozen=True)
class OptimizeResult:
    version: int  # its (last) commit (none: the version the table was at)
    files_added: int
    files_removed: int
    partitions_optimized: int
    z_order: list[str]
    engine: str
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VacuumResult:
    """Data files removed (or, with dry_run, that would be), relative to the table root: only
    files that were there (a removed file's tombstone outlives the file an earlier vacuum
    deleted, and is not listed again)."""

    files: list[str]
    dry_run: bool
    retention_hours: int
    engine: str

    @property
    def count(self) -> int:
        return len(self.files)


@dataclass(frozen=True)
class RestoreResult:
    version: int  # the restore's commit (restored_to when the table was at that version)
    restored_to: int
    files_added: int
    files_removed: int


@dataclass(frozen=True)
class RedactResult:
    """What one redaction did: rows rewritten, partitions rewritten, files purged (all 0, and
    the version unchanged, when no row changed: then nothing is rewritten or purged)."""

    rows_affected: int  # rows where something changed (not those an earlier run redacted)
    partitions_rewritten: int  # partitions with a changed row
    version: int  # the version every reader starts from after the purge
    files_purged: int  # data files that were there and went (not those already gone)
    log_entries_removed: int
