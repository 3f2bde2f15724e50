"""Arrow types with and without dictionaries: the one test of "is this column packed" that the
layout (which keeps a dictionary it is handed) and packed rows (tables/packed.py) both ask.
A module of its own because `packed` imports the tables, which import the layout."""

from __future__ import annotations

import pyarrow as pa


def plain_type(kind: pa.DataType) -> pa.DataType:
    """`kind` with every dictionary, also a map's keys and values, as its value type."""
    if pa.types.is_dictionary(kind):
        return kind.value_type
    if pa.types.is_map(kind):
        key, item = kind.key_field, kind.item_field
        return pa.map_(key.with_type(plain_type(key.type)), item.with_type(plain_type(item.type)))
    return kind


def has_dictionary(kind: pa.DataType) -> bool:
    """Does `kind` hold a dictionary (itself, or a map's keys or values)?"""
    return plain_type(kind) != kind
