"""OTLP/JSON: hex ids, integer enums, 64-bit integers as strings or numbers, unknown fields."""

from __future__ import annotations

import json

import pytest
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otel_delta.errors import InvalidRequestError
from otel_delta.transports.otlp_json import json_to_protobuf, message_to_json

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


def test_spec_example_request() -> None:
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": TRACE,
                                "spanId": SPAN,
                                "parentSpanId": "",
                                "name": "I'm a server span",
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": 1544712661000000000,
                                "kind": 2,
                                "status": {"code": 2},
                                "links": [{"traceId": TRACE, "spanId": SPAN}],
                                "futureField": {"ignored": True},
                                "attributes": [
                                    {"key": "traceId", "value": {"stringValue": "not-an-id"}},
                                    {"key": "n", "value": {"intValue": "9007199254740993"}},
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    raw, _ = json_to_protobuf(json.dumps(body).encode(), ExportTraceServiceRequest)
    span = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == TRACE and span.span_id.hex() == SPAN
    assert span.parent_span_id == b"" and span.links[0].span_id.hex() == SPAN
    assert span.start_time_unix_nano == 1544712660000000000
    assert span.end_time_unix_nano == 1544712661000000000
    assert span.kind == 2 and span.status.code == 2
    assert span.attributes[0].value.string_value == "not-an-id"  # a value, not an id field
    assert span.attributes[1].value.int_value == 9007199254740993


@pytest.mark.parametrize(
    ("text", "value"),
    [("AP8=", b"\x00\xff"), ("AP8", b"\x00\xff"), ("-_8=", b"\xfb\xff"), ("", b"")],
)
def test_bytes_values_in_either_base64_alphabet_padded_or_not(text: str, value: bytes) -> None:
    attribute = {"key": "k", "value": {"bytesValue": text}}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [attribute]}]}]}]}
    raw, _ = json_to_protobuf(json.dumps(body).encode(), ExportTraceServiceRequest)
    span = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]
    assert span.attributes[0].value.bytes_value == value


def test_log_record_ids() -> None:
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": TRACE, "spanId": SPAN}]}]}]}
    raw, _ = json_to_protobuf(json.dumps(body).encode(), ExportLogsServiceRequest)
    record = ExportLogsServiceRequest.FromString(raw).resource_logs[0].scope_logs[0].log_records[0]
    assert record.trace_id.hex() == TRACE and record.span_id.hex() == SPAN


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"\xff\xfe",
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "xyz"}]}]}]}',
        b'{"resourceSpans": 7}',
        b"[" * 100_000,
        *(  # a bytes value that is not base64 (protobuf's parser would drop the bad characters)
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "k", '
            b'"value": {"bytesValue": "%s"}}]}]}]}]}' % value
            for value in (b"this is not base64!", b"!!!", b"abcde", b"ab=c", b"abc===")
        ),
    ],
)
def test_bad_bodies_are_invalid_requests(body: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        json_to_protobuf(body, ExportTraceServiceRequest)


def test_response_with_partial_success() -> None:
    response = ExportTraceServiceResponse()
    response.partial_success.rejected_spans = 2
    response.partial_success.error_message = "bad"
    document = json.loads(message_to_json(response))
    assert document == {"partialSuccess": {"rejectedSpans": "2", "errorMessage": "bad"}}


SPAN_KIND = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": %s}]}]}]}'
STATUS = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"status": {"code": %s}}]}]}]}'
SEVERITY = b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"%s": %s}]}]}]}'
TEMPORALITY = b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"sum": {"%s": %s}}]}]}]}'


@pytest.mark.parametrize(
    ("body", "message_type"),
    [
        (SPAN_KIND % b'"SPAN_KIND_SERVR"', ExportTraceServiceRequest),
        (STATUS % b'"STATUS_CODE_EROR"', ExportTraceServiceRequest),
        (SEVERITY % (b"severityNumber", b'"WARNING"'), ExportLogsServiceRequest),
        (SEVERITY % (b"severity_number", b'"SEVERITY_NUMBER_WARNING"'), ExportLogsServiceRequest),
        (TEMPORALITY % (b"aggregationTemporality", b'"DELTA"'), ExportMetricsServiceRequest),
    ],
)
def test_an_unknown_enum_name_is_refused_not_taken_for_zero(
    body: bytes, message_type: type[Message]
) -> None:
    """Protobuf's parser, told to ignore unknown fields, takes an unknown enum name for 0: a
    misspelled span kind would be stored as UNSPECIFIED. The Collector refuses it (400)."""
    with pytest.raises(InvalidRequestError, match="is not a known name"):
        json_to_protobuf(body, message_type)


def test_enums_are_taken_as_integers_names_and_unknown_integers() -> None:
    for kind, expected in ((b"2", 2), (b'"SPAN_KIND_SERVER"', 2), (b"42", 42)):
        raw, _ = json_to_protobuf(SPAN_KIND % kind, ExportTraceServiceRequest)
        span = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]
        assert span.kind == expected
    raw, _ = json_to_protobuf(
        SEVERITY % (b"severityNumber", b'"SEVERITY_NUMBER_WARN"'), ExportLogsServiceRequest
    )
    record = ExportLogsServiceRequest.FromString(raw).resource_logs[0].scope_logs[0].log_records[0]
    assert record.severity_number == 13
    raw, _ = json_to_protobuf(
        TEMPORALITY % (b"aggregation_temporality", b'"AGGREGATION_TEMPORALITY_DELTA"'),
        ExportMetricsServiceRequest,
    )
    metric = ExportMetricsServiceRequest.FromString(raw).resource_metrics[0].scope_metrics[0]
    assert metric.metrics[0].sum.aggregation_temporality == 1


def test_an_attribute_named_like_an_enum_field_is_a_value_like_any_other() -> None:
    body = (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "kind", '
        b'"value": {"stringValue": "SPAN_KIND_SERVR"}}]}]}]}]}'
    )
    raw, _ = json_to_protobuf(body, ExportTraceServiceRequest)
    span = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]
    assert span.attributes[0].value.string_value == "SPAN_KIND_SERVR"


@pytest.mark.parametrize(
    ("body", "message_type"),
    [
        # a log body as a plain string: it was stored as an empty body, its text lost
        (SEVERITY % (b"body", b'"hello"'), ExportLogsServiceRequest),
        (SEVERITY % (b"body", b'["hello"]'), ExportLogsServiceRequest),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": '
            b'[{"key": "k", "value": "plain"}]}]}]}]}',
            ExportTraceServiceRequest,
        ),
        (STATUS.replace(b'{"code": %s}', b'"STATUS_CODE_ERROR"'), ExportTraceServiceRequest),
        (b'{"resourceSpans": [{"resource": "svc"}]}', ExportTraceServiceRequest),
    ],
)
def test_a_string_or_array_where_a_message_belongs_is_refused_not_dropped(
    body: bytes, message_type: type[Message]
) -> None:
    """Protobuf's parser, told to ignore unknown fields, iterates a string given for a message
    as if its characters were field names, ignores them all and keeps an empty message: the
    request was accepted and the value silently lost. The Collector refuses it (400)."""
    with pytest.raises(InvalidRequestError, match="must be a JSON object"):
        json_to_protobuf(body, message_type)


@pytest.mark.parametrize("kind", [b"2.5", b"true", b"4294967298", b"1099511627776"])
def test_an_enum_that_is_no_32_bit_integer_is_refused_not_truncated(kind: bytes) -> None:
    """Protobuf's parser took 2.5 for 2 (SERVER), true for 1 and 2^32 + 2 for 2."""
    with pytest.raises(InvalidRequestError, match="must be an enum name or a 32-bit integer"):
        json_to_protobuf(SPAN_KIND % kind, ExportTraceServiceRequest)
    raw, _ = json_to_protobuf(SPAN_KIND % b"2.0", ExportTraceServiceRequest)
    span = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]
    assert span.kind == 2


def test_an_unknown_field_is_ignored_whatever_it_holds() -> None:
    """The specification: receivers MUST ignore fields with unknown names. One holding keys
    named like our id or enum fields was refused ("traceId is not hex")."""
    future = {"traceId": "not hex", "kind": "NOPE", "status": "x"}
    span = {"traceId": TRACE, "spanId": SPAN, "name": "s", "futureField": future}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    raw, _ = json_to_protobuf(body.encode(), ExportTraceServiceRequest)
    stored = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]
    assert stored.trace_id.hex() == TRACE and stored.name == "s"


def test_a_boolean_for_a_double_is_refused_not_taken_for_one() -> None:
    body = (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "k", '
        b'"value": {"doubleValue": true}}]}]}]}]}'
    )
    with pytest.raises(InvalidRequestError, match="doubleValue must be a number"):
        json_to_protobuf(body, ExportTraceServiceRequest)


def test_a_lone_surrogate_is_repaired_and_counted() -> None:
    """JSON can escape half an emoji ("\\ud83d", which the JS SDK's length limit leaves);
    protobuf refuses it like bytes that are not UTF-8, so it is U+FFFD, and counted. A pair
    of escapes is the emoji itself."""
    body = (
        b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"ab\\ud83d"},'
        b'"attributes":[{"key":"k\\udc00","value":{"stringValue":"\\ud83d\\ude00"}}]}]}]}]}'
    )
    raw, repairs = json_to_protobuf(body, ExportLogsServiceRequest)
    record = ExportLogsServiceRequest.FromString(raw).resource_logs[0].scope_logs[0].log_records[0]
    assert record.body.string_value == "ab\ufffd"
    assert record.attributes[0].key == "k\ufffd"
    assert record.attributes[0].value.string_value == "\U0001f600"
    assert repairs is not None and repairs.strings == 2
    assert repairs.first_field == "resource_logs.scope_logs.log_records.body.string_value"
    assert json_to_protobuf(b'{"resourceLogs":[]}', ExportLogsServiceRequest)[1] is None
