"""Columnar builders shared by the three signal converters."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from otel_delta.convert.anyvalue import encode
from otel_delta.convert.result import Rejections
from otel_delta.tables.schemas import ATTRIBUTES, TIMESTAMP

NANOS_PER_DAY = 86_400_000_000_000


class KeyRepeats:
    """How many attribute values one request's converter dropped because a later value in the
    same list had the same key (OTLP: keys MUST be unique; an SDK setting a key again
    overwrites it). Stored as sent, a repeated key is a map with a key twice, which DuckDB
    refuses for the whole file and other readers resolve to different values."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def note(self, rejected: Rejections) -> None:
        """Tell the sender, in partial_success (a warning: no item is rejected for it)."""
        if self.count:
            rejected.note(
                f"{self.count} attribute value(s) dropped: a later value in the same list had "
                "the same key (keys must be unique; the last value of each key is kept)"
            )


class AttributeColumns:
    """Builds the `attributes` and `attribute_types` map columns from KeyValue lists."""

    __slots__ = (
        "keys",
        "offsets",
        "repeats",
        "type_keys",
        "type_offsets",
        "type_values",
        "values",
    )

    def __init__(self, repeats: KeyRepeats) -> None:
        self.repeats = repeats
        self.offsets: list[int] = [0]
        self.keys: list[str] = []
        self.values: list[str | None] = []
        self.type_offsets: list[int] = [0]
        self.type_keys: list[str] = []
        self.type_values: list[str] = []

    def append(self, kvs: Sequence) -> int:
        """One row of KeyValues; returns how many values it dropped for a repeated key (the
        last value of a key is kept, where the key first appears)."""
        dropped = 0
        if len(kvs) > 1:
            unique = {kv.key: kv for kv in kvs}
            dropped = len(kvs) - len(unique)
            if dropped:
                kvs = list(unique.values())
                self.repeats.count += dropped
        # The hot loop of ingest: scalar kinds are inlined (same encoding as anyvalue.encode).
        keys, values = self.keys, self.values
        type_keys, type_values = self.type_keys, self.type_values
        for kv in kvs:
            key = kv.key
            value = kv.value
            kind = value.WhichOneof("value")
            keys.append(key)
            if kind == "string_value":
                values.append(value.string_value)
                continue
            if kind == "int_value":
                text, type_ = str(value.int_value), "int"
            elif kind == "double_value":
                text, type_ = repr(value.double_value), "double"
            elif kind == "bool_value":
                text, type_ = ("true" if value.bool_value else "false"), "bool"
            else:
                text, type_ = encode(value)
            values.append(text)
            type_keys.append(key)
            type_values.append(type_)  # type: ignore[arg-type]
        self.offsets.append(len(keys))
        self.type_offsets.append(len(type_keys))
        return dropped

    def arrays(self) -> tuple[pa.Array, pa.Array]:
        return (
            _map(self.offsets, self.keys, self.values),
            _map(self.type_offsets, self.type_keys, self.type_values),
        )


def _map(offsets: list[int], keys: list[str], values: list) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=ATTRIBUTES,
    )


def unsigned(values: Sequence[int]) -> pa.Array:
    """uint64 values as int64, bit-for-bit (only values above 2^63-1 change sign)."""
    return pa.array(values, pa.uint64()).cast(pa.int64(), safe=False)


def timestamp_and_date(nanos: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The SQL TIMESTAMP (µs, UTC) and the UTC DATE of int64 nanosecond times."""
    raw = nanos.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    micros = np.floor_divide(raw, 1000)
    days = np.floor_divide(raw, NANOS_PER_DAY).astype(np.int32)
    return pa.array(micros, pa.int64()).cast(TIMESTAMP), pa.array(days, pa.int32()).cast(
        pa.date32()
    )


def enum_names(enum: EnumTypeWrapper) -> dict[int, str]:
    return {value: name for name, value in enum.items()}


def enum_name(names: dict[int, str], value: int) -> str:
    """Enum name, or the number as text for values newer than our proto (kept losslessly)."""
    return names.get(value) or str(value)


def enum_value(enum: EnumTypeWrapper, text: str) -> int:
    """Inverse of `enum_name`."""
    try:
        return enum.Value(text)
    except ValueError:
        return int(text)


def list_array(offsets: list[int], values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def struct_array(
    columns: dict[str, pa.Array], type_: pa.StructType, mask: pa.Array | None = None
) -> pa.Array:
    return pa.StructArray.from_arrays(
        [columns[f.name] for f in type_], fields=list(type_), mask=mask
    )
