"""Lossless text encoding of OTLP AnyValue, so attributes are a SQL map *and* keep their types.

A value becomes a pair (text, type):

| OTLP value      | text (in `attributes`)        | type (in `attribute_types`)            |
|-----------------|-------------------------------|----------------------------------------|
| string          | the string                    | absent                                 |
| bool            | `true` / `false`              | `bool`                                 |
| int             | decimal                       | `int`                                  |
| double          | shortest round-trip repr      | `double`                               |
| bytes           | base64                        | `bytes`                                |
| array / kvlist  | plain JSON (for SQL/json fns) | the value in OTLP/JSON (exact types)   |
| empty (unset)   | NULL                          | `empty`                                |

Only non-string values get a type entry, so the common case costs one map entry.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

STRING_INDEX = "string_strindex"


def encode(value: AnyValue) -> tuple[str | None, str | None]:
    """(text, type) of one AnyValue; type is None for plain strings."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value, None
    if kind == "int_value":
        return str(value.int_value), "int"
    if kind == "bool_value":
        return ("true" if value.bool_value else "false"), "bool"
    if kind == "double_value":
        return repr(value.double_value), "double"
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii"), "bytes"
    if kind is None:
        return None, "empty"
    if kind == "string_value_strindex":
        return str(value.string_value_strindex), STRING_INDEX
    typed = json.dumps(json_format.MessageToDict(value), separators=(",", ":"))
    plain = json.dumps(to_plain(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return plain, typed


def decode(text: str | None, type_: str | None) -> AnyValue:
    """Inverse of `encode`."""
    if type_ is None:
        return AnyValue(string_value=text or "")
    if type_ == "int":
        return AnyValue(int_value=int(text or 0))
    if type_ == "bool":
        return AnyValue(bool_value=text == "true")
    if type_ == "double":
        return AnyValue(double_value=float(text or 0))
    if type_ == "bytes":
        return AnyValue(bytes_value=base64.b64decode(text or ""))
    if type_ == "empty":
        return AnyValue()
    if type_ == STRING_INDEX:
        return AnyValue(string_value_strindex=int(text or 0))
    return json_format.Parse(type_, AnyValue())


def to_plain(value: AnyValue) -> Any:
    """The value as plain JSON-able Python (bytes as base64), for the readable text form."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [to_plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: to_plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind is None:
        return None
    if kind == "double_value" and not math.isfinite(number := value.double_value):
        # strict JSON has no NaN or infinities (readers such as serde_json, behind Polars'
        # json_decode, refuse the bare words): the strings OTLP/JSON writes for them
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    return getattr(value, kind)


def decode_attributes(
    pairs: list[tuple[str, str | None]] | None, types: list[tuple[str, str | None]] | None
) -> list[KeyValue]:
    """Rebuild a KeyValue list from the `attributes` and `attribute_types` map values."""
    type_of = dict(types or ())
    return [KeyValue(key=k, value=decode(v, type_of.get(k))) for k, v in pairs or ()]
