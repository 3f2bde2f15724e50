"""Reads: a small query builder with time travel, and scans that prune files before reading.

Pruning is done here, explainably: every data file's partition values and min/max/null-count
statistics (from the Delta log's add actions) are tested against the validated predicate;
only files that may hold a matching row are read, then the predicate filters rows exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from otel_delta.connector.predicates import Predicate, conjunction, parse_predicate
from otel_delta.connector.results import QueryResult, ScanStats

if TYPE_CHECKING:
    from otel_delta.connector.table import Table


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

    def filter(self, where: str) -> Query:
        """Add a SQL-like condition (ANDed with earlier ones); validated now."""
        raise NotImplementedError

    def select(self, columns: list[str] | tuple[str, ...]) -> Query:
        """Only these columns, in this order; unknown names raise InvalidPredicateError."""
        raise NotImplementedError

    def limit(self, n: int) -> Query:
        raise NotImplementedError

    def order_by(self, *columns: str) -> Query:
        """Sort ascending by these columns (applied after filtering, before limit)."""
        raise NotImplementedError

    def version(self, n: int) -> Query:
        """Time travel to table version `n`."""
        raise NotImplementedError

    def as_of(self, timestamp: datetime | str) -> Query:
        """Time travel to the latest version committed at or before `timestamp`."""
        raise NotImplementedError

    @property
    def predicate(self) -> Predicate | None:
        return conjunction(self._filters)

    def explain(self) -> ScanStats:
        """Which files the scan would read, without reading them."""
        raise NotImplementedError

    def execute(self) -> QueryResult:
        """Read: the rows plus the scan statistics."""
        raise NotImplementedError

    def to_batches(self, batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Stream the result as Arrow record batches (e.g. for Arrow IPC over gRPC)."""
        raise NotImplementedError

    def to_arrow(self) -> pa.Table:
        return self.execute().table

    def to_pylist(self) -> list[dict[str, Any]]:
        return self.to_arrow().to_pylist()

    def to_pandas(self) -> Any:
        """A pandas DataFrame (needs pandas: `pip install otel-delta[pandas]`)."""
        raise NotImplementedError

    def count(self) -> int:
        return self.execute().num_rows


__all__ = ["Query", "parse_predicate"]
