"""Repairing strings that are not UTF-8 in OTLP protobuf requests (otel_delta/convert/utf8.py)."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.convert import native as native_convert
from otel_delta.convert import utf8
from tests.convert.test_native_parity import random_request

PLACEHOLDER = "\x01\x02\x03\x04"


def request_with(*strings: str) -> ExportTraceServiceRequest:
    """A span request whose resource, span name, attribute key, nested array value and event
    name are `strings` in that order (missing ones "ok")."""
    s = list(strings) + ["ok"] * (5 - len(strings))
    span = trace_pb2.Span(
        trace_id=b"\xff" * 16,  # bytes fields are not strings: left alone
        span_id=b"\xfe" * 8,
        name=s[1],
        attributes=[
            KeyValue(
                key=s[2],
                value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=s[3])])),
            )
        ],
        events=[trace_pb2.Span.Event(name=s[4], time_unix_nano=7)],
    )
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value=s[0]))]
    )
    return ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=[span])]
            )
        ]
    )


def test_every_string_that_is_not_utf8_is_replaced_at_any_depth() -> None:
    raw = request_with(*[PLACEHOLDER] * 5).SerializeToString()
    bad = raw.replace(PLACEHOLDER.encode(), b"a\xe9\xff\x80")
    with pytest.raises(DecodeError):
        ExportTraceServiceRequest.FromString(bad)
    parsed, repaired = utf8.parse(ExportTraceServiceRequest, bad)
    assert parsed == request_with(*["a\ufffd\ufffd\ufffd"] * 5)
    assert repaired is not None and repaired.strings == 5
    assert repaired.first_field == "resource_spans.resource.attributes.value.string_value"


def test_a_length_that_grows_past_a_varint_byte_is_rewritten_up_the_tree() -> None:
    """Each bad byte becomes three (U+FFFD): a 127-byte string of them outgrows its one-byte
    length, and so do the lengths of every message around it."""
    raw = request_with("ok", PLACEHOLDER * 40).SerializeToString()
    bad = raw.replace(PLACEHOLDER.encode(), b"\xe9\xe9\xe9\xe9")
    parsed, repaired = utf8.parse(ExportTraceServiceRequest, bad)
    assert parsed.resource_spans[0].scope_spans[0].spans[0].name == "\ufffd" * 160
    assert parsed.resource_spans[0].scope_spans[0].spans[0].events[0].name == "ok"
    assert repaired is not None and repaired.strings == 1


def test_a_valid_request_or_bytes_that_are_no_request_are_left_to_the_parser() -> None:
    raw = request_with().SerializeToString()
    assert utf8.repair(ExportTraceServiceRequest.DESCRIPTOR, raw) is None
    assert utf8.parse(ExportTraceServiceRequest, raw) == (request_with(), None)
    for garbage in (b"\xff\xff\xff\xff not protobuf", raw[:-3]):
        assert utf8.repair(ExportTraceServiceRequest.DESCRIPTOR, garbage) is None
        with pytest.raises(DecodeError):
            utf8.parse(ExportTraceServiceRequest, garbage)


def test_unknown_fields_are_kept_as_they_are() -> None:
    raw = request_with(PLACEHOLDER).SerializeToString().replace(PLACEHOLDER.encode(), b"\xe9abc")
    unknown = b"\xfa\x3e\x03\xe9\xe9\xe9"  # field 999, length 3: bytes no parser reads as a string
    parsed, repaired = utf8.parse(ExportTraceServiceRequest, raw + unknown)
    assert repaired is not None and repaired.data.endswith(unknown)
    assert parsed.resource_spans[0].resource.attributes[0].value.string_value == "\ufffdabc"


def test_random_bad_bytes_in_random_strings_always_parse_after_repair() -> None:
    rng = random.Random(29)
    for _ in range(200):
        strings = [PLACEHOLDER if rng.random() < 0.5 else "ok" for _ in range(5)]
        raw = request_with(*strings).SerializeToString()
        junk = bytes(rng.randrange(0x80, 0x100) for _ in range(4))
        bad = raw.replace(PLACEHOLDER.encode(), junk)
        parsed, _ = utf8.parse(ExportTraceServiceRequest, bad)
        replaced = junk.decode("utf-8", "replace")
        assert parsed == request_with(*[replaced if x == PLACEHOLDER else x for x in strings])


def test_the_native_walk_answers_as_the_python_walk() -> None:
    """Random requests of every signal with random bytes flipped, cut or inserted (strings
    made invalid among them): the same repaired bytes, count and first field, or None alike."""
    assert native_convert.available(), f"native extension not built: {native_convert.IMPORT_ERROR}"
    rng = random.Random(11)
    compared = repaired = 0
    for kind in (ExportTraceServiceRequest, ExportLogsServiceRequest, ExportMetricsServiceRequest):
        for seed in range(8):
            original = bytearray(random_request(random.Random(seed), kind).SerializeToString())
            for _ in range(60):
                raw = bytearray(original)
                for _ in range(rng.randint(1, 4)):
                    if not raw:
                        break
                    pos = rng.randrange(len(raw))
                    pick = rng.random()
                    if pick < 0.7:
                        raw[pos] = rng.randrange(0x80, 0x100)  # often a string made invalid
                    elif pick < 0.85:
                        del raw[pos : pos + rng.randint(1, 4)]
                    else:
                        raw[pos:pos] = rng.randbytes(rng.randint(1, 3))
                python = utf8.repair(kind.DESCRIPTOR, bytes(raw), native=False)
                native = utf8.repair(kind.DESCRIPTOR, bytes(raw), native=True)
                assert native == python
                compared += 1
                repaired += python is not None
    assert compared == 3 * 8 * 60 and repaired > 50
