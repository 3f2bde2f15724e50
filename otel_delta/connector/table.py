"""`Table`: one telemetry table and every operation on it, on delta-rs or Spark."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable

from otel_delta.connector.engine import Engine
from otel_delta.connector.predicates import Predicate, parse_predicate
from otel_delta.connector.query import Query
from otel_delta.connector.results import (
    DeleteResult,
    HistoryEntry,
    InsertResult,
    OptimizeResult,
    RestoreResult,
    SchemaChange,
    TableMetadata,
    TableStatistics,
    UpsertResult,
    VacuumResult,
)
from otel_delta.tables import TABLES

if TYPE_CHECKING:
    from otel_delta.connector.connector import DeltaLakeConnector

# Records accepted by upsert/bulk_insert: dicts, Arrow, or an OTLP Export*ServiceRequest.
Records = Any


class Table:
    """A handle on one telemetry table; get it from `DeltaLakeConnector.table(name)`."""

    def __init__(self, connector: DeltaLakeConnector, name: str, delta: DeltaTable) -> None:
        self.connector = connector
        self.name = name
        self.spec = TABLES[name]
        self._delta = delta

    def __repr__(self) -> str:
        return f"Table({self.name!r}, uri={self.uri!r})"

    @property
    def uri(self) -> str:
        return self.connector.uri(self.name)

    def delta(self, version: int | None = None) -> DeltaTable:
        """A fresh delta-rs handle on the latest (or the given) version."""
        raise NotImplementedError

    @property
    def schema(self) -> pa.Schema:
        """The table's current Arrow schema (including evolved columns)."""
        raise NotImplementedError

    def version(self) -> int:
        raise NotImplementedError

    def predicate(self, where: str) -> Predicate:
        """Parse and validate `where` against this table's schema."""
        return parse_predicate(where, self.schema)

    # --- writes ----------------------------------------------------------------------------

    def upsert(
        self,
        records: Records,
        merge_key: Sequence[str] | None = None,
        dedupe: bool = True,
        *,
        engine: Engine | None = None,
    ) -> UpsertResult:
        """Merge records on `merge_key`: matching rows are replaced, new ones inserted.

        Default keys: spans (service_name, date, trace_id, span_id); logs (service_name, date,
        time_unix_nano, trace_id, span_id, body); metric tables need an explicit merge_key.
        With dedupe, rows sharing a key inside the batch collapse to the last one.
        """
        raise NotImplementedError

    def bulk_insert(self, records: Records) -> InsertResult:
        """Append records as one commit (no key check), like the bridge does."""
        raise NotImplementedError

    def delete(self, where: str, *, engine: Engine | None = None) -> DeleteResult:
        """Delete the rows matching the validated condition; returns how many."""
        raise NotImplementedError

    def update_schema(self, columns: pa.Schema | Sequence[pa.Field] | pa.Field) -> SchemaChange:
        """Schema evolution: add new nullable columns. Changing or dropping one raises
        SchemaMismatchError (expected vs actual); columns already present are left alone."""
        raise NotImplementedError

    # --- reads -----------------------------------------------------------------------------

    def query(self) -> Query:
        return Query(self)

    def trace(self, trace_id: str) -> pa.Table:
        """All spans of one trace, sorted by start time; pruned by trace_id min/max stats."""
        return self.trace_query(trace_id).to_arrow()

    def trace_query(self, trace_id: str) -> Query:
        """The query `trace` runs (call `.explain()` on it to see the files it scans)."""
        raise NotImplementedError

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Commits, newest first."""
        raise NotImplementedError

    def metadata(self) -> TableMetadata:
        raise NotImplementedError

    def statistics(self) -> TableStatistics:
        raise NotImplementedError

    # --- maintenance -----------------------------------------------------------------------

    def optimize(
        self,
        where: str | None = None,
        z_order: Sequence[str] | None = None,
        *,
        target_size: int | None = None,
        engine: Engine | None = None,
    ) -> OptimizeResult:
        """Compact small files (and Z-order by columns); `where` may only name partition
        columns. A dataChange=false commit: concurrent appends are not disturbed."""
        raise NotImplementedError

    def vacuum(
        self,
        retention_hours: int | None = None,
        dry_run: bool = False,
        *,
        engine: Engine | None = None,
    ) -> VacuumResult:
        """Delete files no longer referenced and older than the retention (default from
        deltalake.table.retention_hours, 168)."""
        raise NotImplementedError

    def restore(
        self, version: int | None = None, *, timestamp: datetime | str | None = None
    ) -> RestoreResult:
        """Make the table's current state that of an earlier version (a new commit)."""
        raise NotImplementedError
