"""OTLP/JSON (the OTLP specification's JSON encoding) ↔ the protobuf messages.

It is the protobuf JSON mapping with three differences, handled here: trace and span ids are
hex strings, not base64; enums are integers (the mapping accepts them, and their names too);
unknown fields must be ignored — but not unknown enum names, which protobuf's parser would
then take for 0 (a misspelled span kind stored as UNSPECIFIED): they are refused, as the
Collector's receiver refuses them. A request is turned into its protobuf bytes, so the
pipeline and the write-ahead log see one format whichever encoding the client chose.

The document is walked along the request's own message descriptors (`_prepare`), so only
fields the schema names are touched — an unknown field is ignored whole, whatever it holds —
and what protobuf's parser, told to ignore unknown fields, would take silently is refused:
a string or a list where a message belongs (it iterates it as if its characters were field
names: `"body": "hello"` was stored as an empty log body), an enum that is neither a name
nor a 32-bit integer (`"kind": 2.5` was SERVER, `true` INTERNAL, 2^32 + 2 SERVER), and a
boolean for a double (`"doubleValue": true` was 1.0). A string holding a lone surrogate escape
(`"\\ud83d"`, half an emoji), which protobuf refuses, gets U+FFFD in its place and is counted
for the client's warning, as the receiver repairs protobuf strings that are not UTF-8.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from otel_delta.convert.utf8 import StringRepairs, without_lone_surrogates
from otel_delta.errors import InvalidRequestError

# bytes fields holding ids, by their proto names: spans, span links, log records, exemplars;
# every other bytes field (AnyValue.bytes_value) is base64, standard or URL-safe, padded or
# not (the protobuf JSON mapping), and protobuf's parser would skip any other character
ID_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*")
# Memory a body takes while it is decoded (json.loads, then protobuf's ParseDict), beside its
# own bytes and the protobuf made of them: per JSON object or array, and per other value,
# bounds of what was measured (peak RSS, 1 MiB bodies: a span object 245 bytes, a
# KeyValue's 126, an array's 66; a double 64, an integer or string in an array 32). Realistic
# spans take 7x their JSON size; a body of empty spans (`[{},{},...]`) 82x: a 64 MiB request
# of them, 64 KiB gzip'd, took 5.4 GB, beside anything `buffer.max_bytes` bounds.
JSON_OBJECT_BYTES = 256
JSON_VALUE_BYTES = 64
# how deep messages may nest, as protobuf's parsers allow (binary and JSON alike)
MAX_DEPTH = 100
INT32 = range(-(2**31), 2**31)


# the fields `_prepare` looks at; the parser alone checks the others' values
_FLOATS = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})
_CHECKED = frozenset(
    {
        FieldDescriptor.TYPE_MESSAGE,
        FieldDescriptor.TYPE_BYTES,
        FieldDescriptor.TYPE_ENUM,
        FieldDescriptor.TYPE_STRING,
    }
    | _FLOATS
)


class _Repairs:
    """The strings of one document repaired so far, and where the walk is (field names)."""

    def __init__(self) -> None:
        self.strings = 0
        self.first_field = ""
        self.path: list[str] = []

    def repaired(self, field: FieldDescriptor) -> None:
        self.strings += 1
        self.first_field = self.first_field or ".".join([*self.path, field.name])

    def result(self) -> StringRepairs | None:
        return StringRepairs(self.strings, self.first_field) if self.strings else None


@functools.cache
def _fields(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """A message's fields of the types `_prepare` checks, by their JSON (lowerCamelCase) and
    their proto names: protobuf's parser takes both."""
    checked = [field for field in descriptor.fields if field.type in _CHECKED]
    by_name = {field.name: field for field in checked}
    by_name.update({field.json_name: field for field in checked})
    return by_name


def _check_base64(key: str, value: str) -> None:
    text = value.rstrip("=")
    if not _BASE64.fullmatch(text) or len(text) % 4 == 1 or len(value) - len(text) > 2:
        raise InvalidRequestError(f"{key} is not base64: {value[:64]!r}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value), "null")


def _is_int32(value: Any) -> bool:
    """A JSON number that is a 32-bit integer (2.0 is; 2.5, 1e10 and true are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not value.is_integer():
        return False  # NaN and the infinities too
    return int(value) in INT32


def _prepare(
    node: dict[str, Any],
    descriptor: Descriptor,
    repairs: _Repairs,
    depth: int = 1,
    invalid_id: str | None = None,
) -> None:
    """Rewrites every id field of the message `node` (and below) in place from hex to
    base64, each string's lone surrogates to U+FFFD (counted in `repairs`), and refuses what
    protobuf's parser would misread (see the module's docstring). Fields it does not know
    are left to the parser, which ignores them, and so are numbers and booleans: it refuses
    values of the wrong JSON type for those itself. An id that is not hex is refused, or with
    `invalid_id` (base64) replaced by it."""
    if depth > MAX_DEPTH:
        raise InvalidRequestError(f"messages are nested deeper than {MAX_DEPTH} levels")
    fields = _fields(descriptor)
    for key, value in node.items():
        field = fields.get(key)
        if field is None or value is None:
            continue
        if not field.is_repeated:
            node[key] = _value(field, key, value, depth, invalid_id, repairs)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                value[index] = _value(field, key, item, depth, invalid_id, repairs)


def _value(
    field: FieldDescriptor,
    key: str,
    value: Any,
    depth: int,
    invalid_id: str | None,
    repairs: _Repairs,
) -> Any:
    """One value of `field` as protobuf's parser should see it."""
    if value is None:
        return value
    if field.type == FieldDescriptor.TYPE_STRING:
        if isinstance(value, str) and (repaired := without_lone_surrogates(value)) is not None:
            repairs.repaired(field)
            return repaired
        return value
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if not isinstance(value, dict):
            raise InvalidRequestError(
                f"{key} must be a JSON object, not {_json_type(value)}: {json.dumps(value)[:64]}"
            )
        repairs.path.append(field.name)
        _prepare(value, field.message_type, repairs, depth + 1, invalid_id)
        repairs.path.pop()
    elif field.type == FieldDescriptor.TYPE_BYTES and isinstance(value, str):
        if field.name not in ID_FIELDS:
            _check_base64(key, value)
            return value
        try:
            return base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError:
            if invalid_id is not None:
                return invalid_id
            raise InvalidRequestError(f"{key} is not hex: {value[:64]!r}") from None
    elif field.type == FieldDescriptor.TYPE_ENUM:
        if isinstance(value, str):
            if value not in field.enum_type.values_by_name:
                raise InvalidRequestError(f"{key} is not a known name: {value[:64]!r}")
        elif not _is_int32(value):
            raise InvalidRequestError(
                f"{key} must be an enum name or a 32-bit integer, not {json.dumps(value)[:64]}"
            )
    elif field.type in _FLOATS and isinstance(value, bool):
        raise InvalidRequestError(f"{key} must be a number, not {json.dumps(value)}")
    return value


def decoding_bytes(body: bytes) -> int:
    """About the most memory `json_to_protobuf` takes for `body`, its bytes included, from
    its objects and arrays (`{`, `[`) and its other values (`,`, `:`): counted in the bytes,
    braces and commas inside strings too, which only errs on the safe side."""
    containers = body.count(b"{") + body.count(b"[")
    values = body.count(b",") + body.count(b":")
    return 2 * len(body) + JSON_OBJECT_BYTES * containers + JSON_VALUE_BYTES * values


def json_to_protobuf(
    body: bytes, message_type: type[Message]
) -> tuple[bytes, StringRepairs | None]:
    """An OTLP/JSON request → the same request as protobuf bytes, and its strings repaired."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"request body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidRequestError("request body must be a JSON object")
    message, repairs = document_to_request(document, message_type)
    return message.SerializeToString(), repairs


def document_to_request(
    document: dict[str, Any], message_type: type[Message], invalid_id: str | None = None
) -> tuple[Message, StringRepairs | None]:
    """A parsed OTLP/JSON document (rewritten in place) → the request message, and what was
    repaired in its strings (lone surrogates: convert/utf8.without_lone_surrogates), or
    InvalidRequestError. `invalid_id`: what an id that is not hex becomes (base64), where a
    caller wants it counted downstream rather than the document refused (backfill)."""
    repairs = _Repairs()
    _prepare(document, message_type.DESCRIPTOR, repairs, invalid_id=invalid_id)
    try:
        message = json_format.ParseDict(document, message_type(), ignore_unknown_fields=True)
    except (json_format.ParseError, binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise InvalidRequestError(f"cannot decode {message_type.__name__}: {exc}") from None
    return message, repairs.result()


def document_to_message(
    document: dict[str, Any], message_type: type[Message], invalid_id: str | None = None
) -> Message:
    """`document_to_request`'s message alone (backfill stores repaired strings as the
    receiver does, with no client to warn)."""
    return document_to_request(document, message_type, invalid_id)[0]


def message_to_json(message: Message) -> bytes:
    """A response or google.rpc.Status as OTLP/JSON (none of them hold ids)."""
    return json_format.MessageToJson(message, indent=None).encode()
