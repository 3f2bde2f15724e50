"""Arrow types with and without dictionaries (otel_delta/tables/dictionary_types.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from otel_delta.tables.dictionary_types import has_dictionary, plain_type

TEXT = pa.dictionary(pa.int32(), pa.string())


@pytest.mark.parametrize(
    ("kind", "plain"),
    [
        (TEXT, pa.string()),
        (pa.map_(TEXT, TEXT), pa.map_(pa.string(), pa.string())),
        (pa.map_(pa.string(), TEXT), pa.map_(pa.string(), pa.string())),
        (pa.map_(TEXT, pa.string()), pa.map_(pa.string(), pa.string())),
    ],
)
def test_a_dictionary_anywhere_in_a_text_or_map_type_is_found_and_made_plain(
    kind: pa.DataType, plain: pa.DataType
) -> None:
    assert has_dictionary(kind)
    assert plain_type(kind) == plain
    assert not has_dictionary(plain)


@pytest.mark.parametrize(
    "kind", [pa.string(), pa.int64(), pa.map_(pa.string(), pa.string()), pa.list_(pa.string())]
)
def test_plain_types_are_left_as_they_are(kind: pa.DataType) -> None:
    assert not has_dictionary(kind)
    assert plain_type(kind) == kind
