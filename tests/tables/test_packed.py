"""Rows as the bridge buffers them (otel_delta/tables/packed.py)."""

from __future__ import annotations

import pyarrow as pa

from otel_delta.tables import TABLES
from otel_delta.tables.packed import (
    PACKED_COLUMNS,
    concat,
    is_packed,
    packed_schema,
    plain_schema,
    unpack,
)
from tests.engines.test_spark import corpus_tables


def test_packed_schema_differs_only_in_repeated_columns() -> None:
    for name, spec in TABLES.items():
        packed = packed_schema(name)
        assert packed.names == spec.schema.names
        assert plain_schema(packed).equals(spec.schema)
        changed = {f.name for f, g in zip(packed, spec.schema, strict=True) if f.type != g.type}
        assert changed == PACKED_COLUMNS & set(spec.schema.names), name
        assert "service_name" not in changed  # partition columns stay plain
        assert is_packed(packed) and not is_packed(spec.schema)


def test_unpack_gives_back_the_plain_rows() -> None:
    for name, rows in corpus_tables().items():
        packed = rows.cast(packed_schema(name))
        assert unpack(packed).equals(rows), name
        assert unpack(rows) is rows


def test_requests_of_both_forms_join_as_plain_rows() -> None:
    """A request the native converter declined comes plain; a group holding it joins plain."""
    rows = corpus_tables()["spans"]
    packed = rows.cast(packed_schema("spans"))
    assert concat([packed, packed]).schema.equals(packed_schema("spans"))
    mixed = concat([packed, rows, packed])
    assert mixed.equals(pa.concat_tables([rows] * 3))
