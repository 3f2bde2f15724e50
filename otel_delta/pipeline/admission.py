"""Rules every converted request passes before it is logged or buffered, so that one item can
never make a commit fail for everyone sharing it, nor land where retention would delete it.

1. **Partition time out of range.** OTLP times are unsigned 64-bit nanoseconds; we keep them
   bit-for-bit in signed BIGINT columns, so a time at or after 2^63 ns (year 2262) reads back
   negative and would put its row in a date partition before 1970 — where `retention_days`
   deletes acknowledged rows. Such items are rejected (counted in partial_success).
2. **Partition values too long for a path.** A partition value becomes a directory name
   (`service_name=<URL-encoded value>`); past about 255 bytes every commit of the table fails.
   A value whose encoded form is longer than MAX_ENCODED_PARTITION_VALUE keeps its first
   characters and gets `~` and 16 hex digits of its SHA-256: distinct values stay distinct,
   and the full value is still in the row (e.g. `resource_attributes['service.name']`).

Both converters (Python and native) pass through here, and so does the WAL's replay.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from otel_delta.convert import Converted, Rejections
from otel_delta.tables.packed import unpack_columns

MAX_ENCODED_PARTITION_VALUE = 200  # bytes of the URL-encoded value in the directory name
HASH_SUFFIX_DIGITS = 16
EPOCH = dt.date(1970, 1, 1)
OUT_OF_RANGE = "time at or after 2^63 ns (year 2262) cannot be partitioned"


def admit(converted: Converted, partition_by: Sequence[str]) -> Converted:
    tables = {}
    rejected = converted.rejected
    for name, table in converted.tables.items():
        table = unpack_columns(table, partition_by)
        table, dropped = _drop_out_of_range(table)
        if dropped:
            rejected = _with_rejections(rejected, dropped)
        for column in partition_by:
            if column in table.column_names and pa.types.is_string(table.schema.field(column).type):
                table = _shorten(table, column)
        if table.num_rows:
            tables[name] = table
    # what the converter allocated stays held until the rows are committed: a filtered or
    # shortened table keeps the same count (more, never less, than it now holds)
    return Converted(tables, rejected, converted.held)


def _drop_out_of_range(table: pa.Table) -> tuple[pa.Table, int]:
    if "date" not in table.column_names or table.num_rows == 0:
        return table, 0
    before_epoch = pc.less(table.column("date"), pa.scalar(EPOCH, pa.date32()))
    dropped = pc.sum(before_epoch).as_py() or 0
    if not dropped:
        return table, 0
    return table.filter(pc.invert(before_epoch)), dropped


def _with_rejections(rejected: Rejections, count: int) -> Rejections:
    updated = replace(rejected, count=rejected.count + count, messages=list(rejected.messages))
    updated.note(OUT_OF_RANGE)
    return updated


def _encoded_length(value: str) -> int:
    return len(quote(value, safe=""))


def shorten(value: str) -> str:
    """A partition value that fits a directory name (itself if it already does)."""
    if _encoded_length(value) <= MAX_ENCODED_PARTITION_VALUE:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:HASH_SUFFIX_DIGITS]
    budget = MAX_ENCODED_PARTITION_VALUE - 1 - HASH_SUFFIX_DIGITS
    prefix = []
    used = 0
    for char in value:
        size = _encoded_length(char)
        if used + size > budget:
            break
        prefix.append(char)
        used += size
    return "".join(prefix) + "~" + digest


def _shorten(table: pa.Table, column: str) -> pa.Table:
    values = table.column(column)
    # fast path: even fully percent-encoded (3 bytes per byte), every value fits
    longest = pc.max(pc.binary_length(values)).as_py() or 0
    if longest * 3 <= MAX_ENCODED_PARTITION_VALUE:
        return table
    unique = pc.unique(values).to_pylist()
    replacements = {v: shorten(v) for v in unique if v is not None and shorten(v) != v}
    if not replacements:
        return table
    fixed = pa.array(
        [replacements.get(v, v) if v is not None else None for v in values.to_pylist()],
        pa.string(),
    )
    return table.set_column(table.schema.get_field_index(column), table.schema.field(column), fixed)
