"""OTLP/JSON (the OTLP specification's JSON encoding) ↔ the protobuf messages.

It is the protobuf JSON mapping with three differences, handled here: trace and span ids are
hex strings, not base64; enums are integers (the mapping accepts them, and their names too);
unknown fields must be ignored — but not unknown enum names, which protobuf's parser would
then take for 0 (a misspelled span kind stored as UNSPECIFIED): they are refused, as the
Collector's receiver refuses them. A request is turned into its protobuf bytes, so the
pipeline and the write-ahead log see one format whichever encoding the client chose.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.errors import InvalidRequestError

# fields of bytes type holding ids, by their JSON (lowerCamelCase) and proto names: spans,
# span links, log records and exemplars
ID_FIELDS = frozenset(
    {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
)


# bytes attribute values (AnyValue.bytes_value): base64, standard or URL-safe, padded or not
# (the protobuf JSON mapping); protobuf's parser would skip any other character silently
BYTES_VALUE_FIELDS = frozenset({"bytesValue", "bytes_value"})
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*")


# the enum fields of the OTLP messages, by their JSON names, and the names each takes
_ENUMS = {
    "kind": trace_pb2.Span.SpanKind,
    "code": trace_pb2.Status.StatusCode,
    "severityNumber": logs_pb2.SeverityNumber,
    "aggregationTemporality": metrics_pb2.AggregationTemporality,
}
# ... by their JSON and their proto (snake_case) names, as protobuf's parser takes both
ENUM_NAMES = {
    name: frozenset(enum.keys())
    for key, enum in _ENUMS.items()
    for name in (key, re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower())
}


def _check_base64(key: str, value: str) -> None:
    text = value.rstrip("=")
    if not _BASE64.fullmatch(text) or len(text) % 4 == 1 or len(value) - len(text) > 2:
        raise InvalidRequestError(f"{key} is not base64: {value[:64]!r}")


def _prepare(node: Any) -> None:
    """Rewrites every id field below `node` in place from hex to base64, and refuses a bytes
    value that is not base64 or an enum name that is not one (attribute keys are values, never
    keys, so user data cannot be mistaken for any of them)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise InvalidRequestError(f"{key} is not hex: {value[:64]!r}") from None
            elif key in BYTES_VALUE_FIELDS and isinstance(value, str):
                _check_base64(key, value)
            elif key in ENUM_NAMES and isinstance(value, str):
                if value not in ENUM_NAMES[key]:
                    raise InvalidRequestError(f"{key} is not a known name: {value[:64]!r}")
            else:
                _prepare(value)
    elif isinstance(node, list):
        for item in node:
            _prepare(item)


def json_to_protobuf(body: bytes, message_type: type[Message]) -> bytes:
    """An OTLP/JSON request → the same request as protobuf bytes."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"request body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidRequestError("request body must be a JSON object")
    _prepare(document)
    try:
        message = json_format.ParseDict(document, message_type(), ignore_unknown_fields=True)
    except (json_format.ParseError, binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise InvalidRequestError(f"cannot decode {message_type.__name__}: {exc}") from None
    return message.SerializeToString()


def message_to_json(message: Message) -> bytes:
    """A response or google.rpc.Status as OTLP/JSON (none of them hold ids)."""
    return json_format.MessageToJson(message, indent=None).encode()
