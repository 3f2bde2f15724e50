"""Reads: a small query builder with time travel, and scans that prune files before reading.

Pruning is done here, explainably: every data file's partition values and min/max/null-count
statistics (from the Delta log's add actions) are tested against the validated predicate;
only files that may hold a matching row are read, then the predicate filters rows exactly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable

from otel_delta.connector.operation_metrics import OperationMetrics, measured
from otel_delta.connector.predicates import Predicate, conjunction, parse_predicate
from otel_delta.connector.pruning import FileStats, file_stats, may_match, partition_match
from otel_delta.connector.results import QueryResult, ScanStats
from otel_delta.connector.scan import (
    STREAMED_SCAN,
    RowGroupPlan,
    deletion_vectors_applied,
    files_dataset,
    plan_row_groups,
    read_batches,
)
from otel_delta.engines.data_files import has_deletion_vectors
from otel_delta.errors import InvalidQueryError, MissingDependencyError, VersionNotFoundError
from otel_delta.tables.versions import retired_note

if TYPE_CHECKING:
    import pyarrow.dataset as ds

    from otel_delta.connector.table import Table

DEFAULT_BATCH_SIZE = 65_536


class Query:
    """Built by `Table.query()`; chain `filter/select/limit/version/as_of`, then read.

    Every builder method returns the same Query, so `t.query().filter("...").limit(5)` reads well.
    """

    def __init__(self, table: Table) -> None:
        self._table = table
        self._filters: list[Predicate] = []
        self._columns: list[str] | None = None
        self._limit: int | None = None
        self._version: int | None = None
        self._as_of: datetime | None = None
        self._order_by: list[str] = []
        self._order: list[str] = []  # "ascending" / "descending", one per order_by column
        self._schema: pa.Schema | None = None

    @property
    def _table_schema(self) -> pa.Schema:
        """The table's schema, read once per query (each read opens the Delta log)."""
        if self._schema is None:
            self._schema = self._table.schema
        return self._schema

    def filter(self, where: str | Predicate) -> Query:
        """Add a SQL-like condition (ANDed with earlier ones); validated now."""
        if not isinstance(where, Predicate):
            where = parse_predicate(where, self._table_schema)
        self._filters.append(where)
        return self

    def select(self, columns: list[str] | tuple[str, ...] | str) -> Query:
        """Only these columns, in this order; unknown names raise InvalidPredicateError."""
        names = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else columns
        if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
            raise InvalidQueryError(f"select: expected column names, got {columns!r}")
        names = list(names)
        self._check_columns(names, "select")
        self._columns = names
        return self

    def limit(self, n: int) -> Query:
        self._limit = whole_number(n, "limit")
        return self

    def order_by(self, *columns: str) -> Query:
        """Sort by these columns, each ascending unless written `"<column> DESC"` (as in SQL:
        `order_by("time DESC")` for the newest first), applied after filtering, before limit.
        NULLs come last either way."""
        names: list[str] = []
        order: list[str] = []
        for spec in columns:
            words = str(spec).split()
            direction = words[-1].upper() if len(words) == 2 else "ASC"
            if not words or len(words) > 2 or direction not in ("ASC", "DESC"):
                raise InvalidQueryError(
                    f"order_by: {spec!r} is not '<column>', '<column> ASC' or '<column> DESC'"
                )
            names.append(words[0])
            order.append("descending" if direction == "DESC" else "ascending")
        self._check_columns(names, "order_by")
        for name in names:  # Arrow sorts scalars only: a map or list raised ArrowTypeError
            type_ = self._table_schema.field(name).type
            if pa.types.is_nested(type_) or pa.types.is_map(type_):
                raise InvalidQueryError(
                    f"order_by: column {name} of type {type_} cannot be sorted", column=name
                )
        self._order_by, self._order = names, order
        return self

    def version(self, n: int) -> Query:
        """Time travel to table version `n` (not with `as_of`: one or the other)."""
        if self._as_of is not None:
            raise InvalidQueryError("a query time-travels by version or by as_of, not both")
        self._version = whole_number(n, "version")
        return self

    def as_of(self, timestamp: datetime | str) -> Query:
        """Time travel to the latest version committed at or before `timestamp` (UTC if naive;
        not with `version`: one or the other)."""
        if self._version is not None:
            raise InvalidQueryError("a query time-travels by version or by as_of, not both")
        self._as_of = parse_timestamp(timestamp)
        return self

    @property
    def predicate(self) -> Predicate | None:
        return conjunction(self._filters)

    def _check_columns(self, names: list[str], what: str) -> None:
        schema_names = self._table_schema.names
        if not names:
            raise InvalidQueryError(f"{what} needs at least one column")
        for name in names:
            if name not in schema_names:
                raise InvalidQueryError(
                    f"{what}: unknown column {name!r}{retired_note(name)}", column=name
                )

    # --- planning and reading ---------------------------------------------------------------

    def _snapshot(self) -> DeltaTable:
        if self._as_of is not None:
            return self._table.delta_as_of(self._as_of)
        return self._table.delta(self._version)

    def _plan(self) -> tuple[DeltaTable, list[FileStats], ScanStats]:
        delta = self._snapshot()
        files = file_stats(pa.table(delta.get_add_actions(flatten=True)))
        predicate = self.predicate
        if predicate is None:
            after_partitions = kept = files
        else:
            after_partitions = [
                f for f in files if partition_match(predicate.node, f.partition) is not False
            ]
            kept = [f for f in after_partitions if may_match(predicate.node, f)]
        stats = ScanStats(
            version=delta.version(),
            files_total=len(files),
            files_after_partition_pruning=len(after_partitions),
            files_scanned=len(kept),
            bytes_total=sum(f.size_bytes for f in files),
            bytes_scanned=sum(f.size_bytes for f in kept),
            predicate=predicate.to_sql() if predicate else None,
        )
        return delta, kept, stats

    def _row_groups(
        self, delta: DeltaTable, files: list[FileStats], stats: ScanStats
    ) -> tuple[ds.FileSystemDataset, RowGroupPlan, ScanStats]:
        """Row groups of the kept files that their Parquet statistics cannot rule out."""
        dataset = files_dataset(delta, files)
        plan = plan_row_groups(dataset, files, self.predicate)
        stats = replace(
            stats,
            row_groups_total=plan.row_groups_total,
            row_groups_scanned=None if plan.row_groups_total is None else len(plan.fragments),
        )
        return dataset, plan, stats

    @contextlib.contextmanager
    def _files_kept(self) -> Iterator[None]:
        """A data file of a past version that is gone was vacuumed: that version cannot be
        read any more (VersionNotFoundError, not the file system's error)."""
        try:
            yield
        except FileNotFoundError as exc:
            if self._version is None and self._as_of is None:
                raise
            target = (
                str(self._version)
                if self._version is not None
                else f"at or before {self._as_of.isoformat()}"  # type: ignore[union-attr]
            )
            raise VersionNotFoundError(
                self._table.name, target, "its data files were removed by vacuum"
            ) from exc

    def explain(self) -> ScanStats:
        """Which files and row groups the scan would read (opens only the Parquet footers)."""
        with self._files_kept():
            delta, files, stats = self._plan()
            if has_deletion_vectors(delta):  # read by DataFusion: no row groups of ours
                return stats
            return self._row_groups(delta, files, stats)[2]

    def _rows(
        self, batch_size: int, scan_options: dict[str, Any] | None = None
    ) -> tuple[Iterator[pa.RecordBatch], ScanStats]:
        """Matching rows as batches (all scanned columns), and what the scan reads. A table
        with deletion vectors is read by DataFusion, which applies them (scan.py)."""
        delta, files, stats = self._plan()
        if has_deletion_vectors(delta):
            columns = self._scan_columns()
            rows = deletion_vectors_applied(
                delta, columns, self.predicate, self._table_schema, batch_size
            )
            return rows, stats
        dataset, plan, stats = self._row_groups(delta, files, stats)
        return self._filtered_batches(dataset, plan, batch_size, scan_options), stats

    def _scan_columns(self) -> list[str]:
        """Result columns plus those the row filter and the sort need."""
        columns = self._result_columns()
        predicate = self.predicate
        extra = [*self._order_by, *(sorted(predicate.columns) if predicate else [])]
        return columns + [c for c in dict.fromkeys(extra) if c not in columns]

    def _result_columns(self) -> list[str]:
        return list(self._columns or self._table_schema.names)

    def _with_missing(self, batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
        """`batch` plus NULL columns for those added to the table after its file was written."""
        schema = self._table_schema
        for name in names:
            if name not in batch.schema.names:
                field = schema.field(name)
                batch = batch.add_column(
                    batch.num_columns, field, pa.nulls(batch.num_rows, field.type)
                )
        return batch

    def _filtered_batches(
        self,
        dataset: ds.FileSystemDataset,
        plan: RowGroupPlan,
        batch_size: int,
        scan_options: dict[str, Any] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Matching rows as batches (all scanned columns), in file order."""
        columns = self._scan_columns()
        batches = read_batches(
            dataset, plan, columns, self.predicate, batch_size, self._with_missing, scan_options
        )
        for batch in batches:
            yield batch.select(columns)

    def _limited(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        remaining = self._limit
        columns = self._result_columns()
        for batch in batches:
            if remaining is not None:
                if remaining <= 0:
                    return
                batch = batch.slice(0, remaining)
                remaining -= batch.num_rows
            yield batch.select(columns)

    def _metrics_scope(self) -> tuple[OperationMetrics, str]:
        return self._table.connector.operations, self._table.name

    @measured("query")
    def execute(self) -> QueryResult:
        """Read: the rows plus the scan statistics."""
        with self._files_kept():
            return self._execute()

    def _execute(self) -> QueryResult:
        batches, stats = self._rows(DEFAULT_BATCH_SIZE)
        scanned_schema = pa.schema([self._table_schema.field(c) for c in self._scan_columns()])
        if self._order_by:
            table = pa.Table.from_batches(list(batches), schema=scanned_schema)
            table = table.sort_by(list(zip(self._order_by, self._order, strict=True)))
            if self._limit is not None:
                table = table.slice(0, self._limit)
            table = table.select(self._result_columns())
        else:
            table = pa.Table.from_batches(list(self._limited(batches)), schema=self.schema())
        return QueryResult(table, stats)

    def to_batches(self, batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[pa.RecordBatch]:
        """Stream the result as Arrow record batches (e.g. for Arrow IPC over gRPC).

        Without order_by nothing is materialized: batches flow from the files as read, decoded
        one batch ahead of the reader (scan.STREAMED_SCAN), so a slow reader does not make the
        result pile up in memory. A `batch_size` below 1 is refused here, at the call, rather
        than by pyarrow (ArrowInvalid) at the first batch.
        """
        return self._batches(whole_number(batch_size, "batch_size", minimum=1))

    def _batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        if self._order_by:
            yield from self.execute().table.to_batches(batch_size)
            return
        with self._files_kept():
            batches, _ = self._rows(batch_size, STREAMED_SCAN)
            yield from self._limited(batches)

    def schema(self) -> pa.Schema:
        """The schema the result will have (for streaming headers)."""
        schema = self._table_schema
        return pa.schema([schema.field(c) for c in self._result_columns()])

    def to_arrow(self) -> pa.Table:
        return self.execute().table

    def to_pylist(self) -> list[dict[str, Any]]:
        return self.to_arrow().to_pylist()

    def to_pandas(self) -> Any:
        """A pandas DataFrame (needs pandas: `pip install 'otel-delta[pandas]'`)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise MissingDependencyError(
                "to_pandas needs pandas: pip install 'otel-delta[pandas]'"
            ) from None
        return self.to_arrow().to_pandas()

    def count(self) -> int:
        return self.execute().num_rows


INT64_MAX = 2**63 - 1


def whole_number(value: object, what: str, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """`value` if it is an int (not a bool) of at least `minimum` (0 or 1) and at most
    `maximum`, else InvalidQueryError naming `what`. The maximum is what delta-rs takes (a
    version is an i64): a larger int raised OverflowError from inside it, or a Rust panic
    (a BaseException, past every `except Exception`) for a vacuum's retention."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise InvalidQueryError(f"{what} must be a {kind} integer, got {value!r}")
    if value > maximum:
        raise InvalidQueryError(f"{what} must be at most {maximum}, got {value}")
    return value


def parse_timestamp(value: datetime | str) -> datetime:
    """A timezone-aware UTC datetime from a datetime (naive = UTC) or an ISO 8601 string."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidQueryError(f"{value!r} is not an ISO 8601 timestamp") from None
    if not isinstance(value, datetime):
        raise InvalidQueryError(f"expected a datetime or ISO 8601 string, got {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
