"""File-exporter records → requests: OTLP/JSON (hex ids) and protobuf, signal detection."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.backfill.decode import UndecodableRecord, decode_json, decode_proto, decode_record
from tests import corpus
from tests.backfill.collector import otlp_json

# One line as the collector's file exporter writes it (hand-written in its JSON style).
COLLECTOR_LINE = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
    '{"stringValue":"shop"}}]},"scopeSpans":[{"scope":{"name":"lib","version":"1.2"},'
    '"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",'
    '"parentSpanId":"eee19b7ec3c1b173","name":"GET /cart","kind":2,'
    '"startTimeUnixNano":"1732000000123456789","endTimeUnixNano":"1732000000223456789",'
    '"attributes":[{"key":"http.status_code","value":{"intValue":"200"}}],'
    '"status":{"code":2,"message":"boom"},"flags":257}]}]}]}'
)


def test_collector_line_decodes_with_hex_ids_numeric_enums_and_string_int64() -> None:
    signal, request = decode_json(COLLECTOR_LINE.encode())
    assert signal.name == "traces"
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == "5b8efff798038103d269b633813fc60c"
    assert span.span_id.hex() == "eee19b7ec3c1b174"
    assert span.parent_span_id.hex() == "eee19b7ec3c1b173"
    assert span.kind == 2 and span.status.code == 2 and span.flags == 257
    assert span.start_time_unix_nano == 1732000000123456789
    assert span.attributes[0].value.int_value == 200
    rows = signal.convert(request).tables["spans"].to_pylist()
    assert rows[0]["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert rows[0]["kind"] == "SPAN_KIND_SERVER" and rows[0]["service_name"] == "shop"


@pytest.mark.parametrize(
    "request_factory", [corpus.trace_request, corpus.metrics_request, corpus.logs_request]
)
def test_json_and_proto_give_back_the_request(request_factory) -> None:
    request = request_factory()
    signal, from_json = decode_json(otlp_json(request).encode())
    assert from_json == request
    signal_proto, from_proto = decode_proto(request.SerializeToString())
    assert from_proto == request and signal_proto.name == signal.name


def test_invalid_hex_id_is_a_rejected_item_not_a_lost_line() -> None:
    line = COLLECTOR_LINE.replace("eee19b7ec3c1b174", "not-hex-at-all!!")
    signal, request = decode_json(line.encode())
    converted = signal.convert(request)
    assert converted.rejected.count == 1 and converted.rows == 0


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"something":[]}', "no resourceSpans"),
        (b'{"resourceSpans":[{"scopeSpans":"x"}]}', "not an OTLP/JSON"),
        # values of the wrong JSON type, which protobuf's parser alone stored empty or changed
        # (an empty body, SEVERITY_NUMBER_TRACE2): refused, as the OTLP/HTTP receiver does
        (b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":"hello"}]}]}]}', "body"),
        (
            b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityNumber":2.5}]}]}]}',
            "severityNumber",
        ),
    ],
)
def test_undecodable_json_has_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(UndecodableRecord, match=reason):
        decode_json(payload)


def test_garbage_protobuf_is_undecodable() -> None:
    with pytest.raises(UndecodableRecord, match="not an OTLP protobuf"):
        decode_proto(b"\x0a\xff\xff\xff\xff\x0f garbage")


def test_protobuf_with_strings_that_are_not_utf8_is_loaded_repaired() -> None:
    """As the receiver stores such a request (convert/utf8.py), not a dead letter."""
    request = ExportLogsServiceRequest(
        resource_logs=[
            logs_pb2.ResourceLogs(
                scope_logs=[
                    logs_pb2.ScopeLogs(
                        log_records=[logs_pb2.LogRecord(body=AnyValue(string_value="\x01\x02"))]
                    )
                ]
            )
        ]
    )
    payload = request.SerializeToString().replace(b"\x01\x02", b"\xe9t")
    signal, parsed = decode_proto(payload)
    assert signal.name == "logs"
    assert parsed.resource_logs[0].scope_logs[0].log_records[0].body.string_value == "\ufffdt"


def test_protobuf_whose_first_bytes_read_as_a_newline_and_a_brace_is_protobuf() -> None:
    """A request whose first resource group is 123 bytes long starts with b"\\n{"; it went to
    the JSON decoder, and to the dead letters."""
    for length in range(1, 120):
        span = trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="n" * length)
        request = ExportTraceServiceRequest(
            resource_spans=[
                trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=[span])])
            ]
        )
        payload = request.SerializeToString()
        if payload[:2] == b"\n{":
            break
    else:
        pytest.fail("no span name gives a first group of 123 bytes")
    signal, parsed = decode_record(payload)
    assert signal.name == "traces" and parsed == request
    # and JSON after whitespace is still JSON
    signal, _ = decode_record(b'\n {"resourceLogs":[]}')
    assert signal.name == "logs"
