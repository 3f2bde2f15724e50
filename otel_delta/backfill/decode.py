"""One file-exporter record → (signal, Export*ServiceRequest), OTLP/JSON or protobuf.

OTLP/JSON is decoded as the OTLP/HTTP receiver decodes it (transports/otlp_json.py: hex ids,
values of the wrong JSON type refused, unknown fields ignored), with one difference: an id
that is not valid hex becomes a 1-byte id, which the converters reject and count — exactly as
the receiver treats a bad id in a protobuf request (partial success), so the rest of the
record is kept. A record the receiver would answer 400 goes to the dead letters.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from otel_delta.backfill.files import looks_like_json
from otel_delta.convert import utf8
from otel_delta.errors import InvalidRequestError
from otel_delta.signals import SIGNALS_BY_NAME, Signal
from otel_delta.transports.otlp_json import document_to_message

# top-level key of each request in OTLP/JSON (lowerCamelCase and the proto field name)
SIGNAL_KEYS = {
    "resourceSpans": "traces",
    "resource_spans": "traces",
    "resourceMetrics": "metrics",
    "resource_metrics": "metrics",
    "resourceLogs": "logs",
    "resource_logs": "logs",
}
INVALID_ID = base64.b64encode(b"\xff").decode()  # wrong length for any id: rejected downstream


class UndecodableRecord(Exception):
    """The record is not an OTLP Export request (goes to dead letters with this reason)."""


def decode_json(payload: bytes) -> tuple[Signal, Message]:
    try:
        document = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UndecodableRecord(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UndecodableRecord("not a JSON object")
    names = {SIGNAL_KEYS[key] for key in document if key in SIGNAL_KEYS}
    if len(names) != 1:
        raise UndecodableRecord(
            "no resourceSpans, resourceMetrics or resourceLogs key"
            if not names
            else f"keys of several signals: {sorted(names)}"
        )
    signal = SIGNALS_BY_NAME[names.pop()]
    try:
        request = document_to_message(document, signal.request, invalid_id=INVALID_ID)
    except InvalidRequestError as exc:
        reason = str(exc).splitlines()[0]
        raise UndecodableRecord(f"not an OTLP/JSON {signal.request.__name__}: {reason}") from None
    return signal, request


def _first(items: Any) -> Any:
    return items[0] if len(items) else None


def _clean(message: Message | None) -> bool:
    return message is None or len(UnknownFieldSet(message)) == 0


# where the first item of each request is: resource list, scope list, item list
ITEM_PATHS = {
    "traces": ("resource_spans", "scope_spans", "spans"),
    "metrics": ("resource_metrics", "scope_metrics", "metrics"),
    "logs": ("resource_logs", "scope_logs", "log_records"),
}


def _plausible(signal: Signal, request: Message, strict: bool) -> bool:
    """Does this parse look like the right signal? Checked on the first resource/scope/item.

    The three requests share field numbers down to the item, so protobuf bytes parse as any of
    them; a wrong guess shows as unknown fields (wire-type mismatches) or impossible ids.
    """
    resources, scopes, items = ITEM_PATHS[signal.name]
    resource = _first(getattr(request, resources))
    scope = _first(getattr(resource, scopes)) if resource is not None else None
    item = _first(getattr(scope, items)) if scope is not None else None
    if not all(_clean(m) for m in (request, resource, scope, item)):
        return False
    if item is None or not strict:
        return True
    if signal.name == "traces":
        return len(item.trace_id) == 16 and len(item.span_id) == 8
    if signal.name == "metrics":
        return item.WhichOneof("data") is not None
    return True


def decode_proto(payload: bytes) -> tuple[Signal, Message]:
    """Protobuf bytes of an unknown signal: the first signal whose parse is plausible."""
    errors, parsed = [], []
    for name in ("traces", "metrics", "logs"):
        signal = SIGNALS_BY_NAME[name]
        try:
            parsed.append((signal, utf8.parse(signal.request, payload)[0]))
        except (DecodeError, RecursionError) as exc:
            errors.append(f"{signal.request.__name__}: {exc}")
    # strict: ids and data look right; lenient: no unknown fields (its bad ids are rejected later)
    for strict in (True, False):
        for signal, request in parsed:
            if _plausible(signal, request, strict):
                return signal, request
    detail = "; ".join(errors) if errors else "matches no OTLP signal"
    raise UndecodableRecord(f"not an OTLP protobuf Export request ({detail})")


def decode_payload(
    payload: bytes, proto: Callable[[bytes], tuple[Signal, Message]] = decode_proto
) -> tuple[Signal, Message]:
    """A file's record or a Kafka message, OTLP/JSON or protobuf by its first bytes (the one
    rule, for the backfill and the stream): `{` is JSON (0x7b would begin a protobuf group,
    which no OTLP request has); anything else but whitespace then `{` is protobuf. Whitespace
    then `{` is JSON so written, or a protobuf request whose first field is 123 bytes long
    (b"\\x0a\\x7b" is a newline and a brace too: the backfill sent such records to the dead
    letters): JSON if it decodes as JSON (a protobuf request, with its control bytes and
    binary ids, is not JSON), else protobuf (tried second: JSON text can parse as protobuf,
    as fields nobody asked for); if neither, JSON's error. `proto`: the protobuf decoder (the
    stream's knows the signal from the topic), raising UndecodableRecord when it refuses."""
    if payload[:1] == b"{":
        return decode_json(payload)
    if not looks_like_json(payload):
        return proto(payload)
    try:
        return decode_json(payload)
    except UndecodableRecord as not_json:
        try:
            return proto(payload)
        except UndecodableRecord:
            raise not_json from None


def decode_record(payload: bytes, json_line: bool = False) -> tuple[Signal, Message]:
    """`json_line`: a line of an OTLP/JSON file, decoded as JSON whatever it starts with, so a
    line such as `null` is "not a JSON object", not a protobuf message that does not parse."""
    if json_line:
        return decode_json(payload)
    return decode_payload(payload)
