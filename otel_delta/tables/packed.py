"""How the bridge holds rows between conversion and their Parquet files: the columns that repeat
one value on every row of a resource, scope or metric as Arrow dictionaries.

A request's rows share their resource and scope (and a metric's points its name, unit and
metadata), and the flat tables repeat them on every row: a resource of eight attributes was
about 300 of the 780 bytes a buffered metric point took. Packed, each distinct value is held
once per request and a row holds an index (the native converter builds them so,
native/src/repeat.rs). The files are the same rows: Parquet stores these columns as strings,
dictionary-encoded, and readers see the table's schema. Each request brings its own
dictionary, and pyarrow's writer keeps one per column chunk (a chunk with another dictionary
is written PLAIN): our writer joins a file's packed columns first
(engines/data_files.py::_joined_for_writer).

Packed rows stay inside the bridge: anything that hands rows to another writer (delta-rs's,
Spark) or to a user unpacks them first (`unpack`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import lru_cache

import pyarrow as pa

from otel_delta.tables import TABLES
from otel_delta.tables.dictionary_types import has_dictionary, plain_type

_STRINGS = pa.dictionary(pa.int32(), pa.string())


def _is_text(kind: pa.DataType) -> bool:
    """A string, or a map of strings to strings (an attribute list)."""
    if pa.types.is_map(kind):
        return pa.types.is_string(kind.key_type) and pa.types.is_string(kind.item_type)
    return pa.types.is_string(kind)


# the text columns whose value is the same on every row of a resource, scope or metric
PACKED_COLUMNS = frozenset(
    field.name
    for spec in TABLES.values()
    for field in spec.schema
    if _is_text(field.type)
    and (
        field.name.startswith(("resource_", "scope_", "metric_"))
        or field.name == "aggregation_temporality"
    )
)
# Files of fewer rows take packed columns plain (as the layout writes plain rows): a dictionary
# page per leaf costs about 300 bytes a file, more than it saves on a few rows. One service's
# rows of the bench's requests, B per row packed / plain: spans 110.4 / 109.0 at 200 rows, 61.0
# / 60.7 at 1,000; the Collector-like load's files (some 20,000 rows) 0.1-0.3% smaller packed
DICTIONARY_MIN_ROWS = 4_096


def _packed_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_string(kind):
        return _STRINGS
    if pa.types.is_map(kind):
        key, item = kind.key_field, kind.item_field
        return pa.map_(
            key.with_type(_packed_type(key.type)), item.with_type(_packed_type(item.type))
        )
    raise TypeError(f"no packed form of {kind}")


@lru_cache(maxsize=16)
def packed_schema(table_name: str) -> pa.Schema:
    """The schema of a telemetry table's rows as the bridge buffers them."""
    schema = TABLES[table_name].schema
    return pa.schema(
        [
            field.with_type(_packed_type(field.type)) if field.name in PACKED_COLUMNS else field
            for field in schema
        ],
        metadata=schema.metadata,
    )


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with packed columns as the strings and maps they stand for."""
    return pa.schema(
        [field.with_type(plain_type(field.type)) for field in schema], metadata=schema.metadata
    )


def is_packed(schema: pa.Schema) -> bool:
    """Does `schema` hold a packed column?"""
    return any(has_dictionary(field.type) for field in schema)


def unpack(rows: pa.Table) -> pa.Table:
    """`rows` with every packed column as plain strings and maps (a copy of those columns)."""
    if not is_packed(rows.schema):
        return rows
    return rows.cast(plain_schema(rows.schema))


def unpack_columns(rows: pa.Table, names: Collection[str]) -> pa.Table:
    """`rows` with the packed columns among `names` plain: partition columns (`partition_by`
    may name `scope_name`), whose values admission checks and the writer reads row by row."""
    for name in names:
        if name not in rows.column_names:
            continue
        field = rows.schema.field(name)
        plain = plain_type(field.type)
        if plain != field.type:
            index = rows.schema.get_field_index(name)
            rows = rows.set_column(index, field.with_type(plain), rows[name].cast(plain))
    return rows


def concat(batches: Sequence[pa.Table]) -> pa.Table:
    """The requests' tables as one; packed unless some request came in plain (a request the
    native converter declined was converted in Python), then all plain."""
    first = batches[0].schema
    if all(batch.schema.equals(first) for batch in batches[1:]):
        return pa.concat_tables(batches)
    return pa.concat_tables([unpack(batch) for batch in batches])
