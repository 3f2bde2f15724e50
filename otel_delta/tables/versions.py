"""Schema versions of the telemetry tables, and how today's rows go into a table of an older one.

A table records the version it was created with (`otel_delta.schemaVersion`). This bridge
writes its own version and every older one; it refuses a newer one
(Lakehouse.check_schema_version: the engines' appends and the connector's upserts and inserts).

- **1**: the first schema.
- **2**: `spans.end_time_unix_nano` is no longer stored. It is exactly
  `start_time_unix_nano + duration_ns` (the duration is end - start in wrapping 64-bit
  arithmetic), and it was the spans' largest time column: 4.9 of 45.4 bytes per span after
  compaction on bench/storage.py's corpus. Queries use that sum; `convert.to_otlp` rebuilds the
  OTLP end time from it. Only an end time at or past 2^63 ns (year 2262), which admission does
  not refuse (it checks the time that names the partition), overflows the sum in SQL; Arrow,
  Python and our Spark writer wrap it back to the stored bit pattern.

A column that a version stopped storing is a `RetiredColumn`: its value is a function of the
columns that remain, written as SQL that Spark, DataFusion, DuckDB and Polars all accept. Rows
appended to a table that still has the column get it computed (`conform`), so a version-1
table stays complete whichever engine or process appends to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA_VERSION = 2
SCHEMA_VERSION_PROPERTY = "otel_delta.schemaVersion"


@dataclass(frozen=True)
class RetiredColumn:
    """A column older schema versions stored and the current one derives."""

    table: str
    name: str
    type: pa.DataType
    retired_in: int  # the first schema version without it
    inputs: tuple[str, ...]  # the current columns it is a function of
    sql: str  # its value over them, in SQL every reader accepts
    compute: Callable[[pa.Table], pa.ChunkedArray]  # the same, on a table of current rows


RETIRED: tuple[RetiredColumn, ...] = (
    RetiredColumn(
        table="spans",
        name="end_time_unix_nano",
        type=pa.int64(),
        retired_in=2,
        inputs=("start_time_unix_nano", "duration_ns"),
        sql="start_time_unix_nano + duration_ns",
        # unchecked: both are stored bit-for-bit from uint64, so the sum is too
        compute=lambda rows: pc.add(rows["start_time_unix_nano"], rows["duration_ns"]),
    ),
)


def retired(table: str) -> dict[str, RetiredColumn]:
    """The retired columns of a telemetry table, by name."""
    return {column.name: column for column in RETIRED if column.table == table}


def retired_note(name: str) -> str:
    """What to add when a query names a column the table lacks: a column that a schema version
    stopped storing is not a typo, but a query written for an older table, so say what it is
    now ("" for any other name)."""
    for column in RETIRED:
        if column.name == name:
            return f" (not stored since schema version {column.retired_in}: it is {column.sql})"
    return ""


def conform(table: str, table_schema: pa.Schema, rows: pa.Table) -> pa.Table:
    """`rows` of the current schema laid out as the table at hand stores them: its columns in
    its order, a retired column it still has computed (NULL if the rows lack its inputs), a
    nullable column added to it since (schema evolution through the connector) NULL. Columns
    the table lacks stay, after the others, for the writer to refuse."""
    if rows.schema.names == table_schema.names:
        return rows
    derived = retired(table)
    names: list[str] = []
    arrays: list[pa.ChunkedArray | pa.Array] = []
    for field in table_schema:
        names.append(field.name)
        if field.name in rows.column_names:
            arrays.append(rows[field.name])
        elif field.name in derived and set(derived[field.name].inputs) <= set(rows.column_names):
            arrays.append(derived[field.name].compute(rows).cast(field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
    for name in rows.column_names:
        if name not in table_schema.names:
            names.append(name)
            arrays.append(rows[name])
    return pa.table(arrays, names=names)
