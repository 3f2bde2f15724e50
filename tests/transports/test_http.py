"""OTLP/HTTP as clients send it: the SDK's HTTP exporters, protobuf and JSON bodies, every
encoding, and the error answers of the OTLP specification — over a real server, into Delta."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import socket
import time
import zlib

import duckdb
import pytest
import requests
import zstandard
from google.protobuf import json_format
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_delta.convert.to_otlp import logs_from_arrow, metrics_from_arrow, spans_from_arrow
from otel_delta.tables import TABLES
from tests import corpus
from tests.helpers import RunningBridge, latin1_logs, make_settings, read_table, table_exists
from tests.transports.test_end_to_end import logs_by_event, spans_by_id

pytestmark = pytest.mark.e2e

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
ID_KEYS = ("traceId", "spanId", "parentSpanId")


def url(bridge: RunningBridge, path: str = "/v1/traces") -> str:
    assert bridge.bridge.http is not None
    return f"http://127.0.0.1:{bridge.bridge.http.port}{path}"


def otlp_json(message) -> bytes:
    """A request as OTLP/JSON: the protobuf JSON mapping with hex ids, as SDKs send it."""

    def hex_ids(node):
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex() if k in ID_KEYS else hex_ids(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [hex_ids(v) for v in node]
        return node

    return json.dumps(hex_ids(json_format.MessageToDict(message))).encode()


def status_of(response: requests.Response) -> status_pb2.Status:
    if response.headers["Content-Type"].startswith("application/json"):
        return json_format.Parse(response.content, status_pb2.Status())
    return status_pb2.Status.FromString(response.content)


def test_sdk_http_exporters_store_every_item_once(bridge, lakehouse) -> None:
    """The SDK's default transport (http/protobuf), gzip, batch processors: 3 signals."""
    resource = Resource.create({"service.name": "http-svc"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=url(bridge, "/v1/traces"), compression=Compression.Gzip)
        )
    )
    tracer = tracer_provider.get_tracer("http.test")
    for i in range(600):
        with tracer.start_as_current_span(f"op-{i}"):
            pass
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=url(bridge, "/v1/logs")))
    )
    logger = logger_provider.get_logger("http.test")
    for i in range(300):
        logger.emit(LogRecord(body=f"line {i}", severity_number=SeverityNumber.INFO))
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=url(bridge, "/v1/metrics"), compression=Compression.Gzip),
        export_interval_millis=60_000,
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter_provider.get_meter("http.test").create_counter("requests").add(7)
    tracer_provider.shutdown()
    logger_provider.shutdown()
    meter_provider.shutdown()

    spans = read_table(lakehouse, "spans")
    assert spans.num_rows == 600
    assert len(set(spans.column("span_id").to_pylist())) == 600
    logs = read_table(lakehouse, "logs")
    assert sorted(logs.column("body").to_pylist()) == sorted(f"line {i}" for i in range(300))
    sums = read_table(lakehouse, "metrics_sum").to_pylist()
    assert [(r["metric_name"], r["value_int"]) for r in sums] == [("requests", 7)]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_corpus_survives_http_in_both_encodings(bridge, lakehouse, encoding) -> None:
    """Every OTLP field, sent as OTLP/HTTP protobuf or JSON, stored, read back: the request."""
    send = (
        (lambda m: (m.SerializeToString(), PROTOBUF))
        if encoding == "protobuf"
        else (lambda m: (otlp_json(m), JSON))
    )
    for path, request in (
        ("/v1/traces", corpus.trace_request()),
        ("/v1/metrics", corpus.metrics_request()),
        ("/v1/logs", corpus.logs_request()),
    ):
        body, headers = send(request)
        answer = requests.post(url(bridge, path), data=body, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.content
        assert answer.headers["Content-Type"].startswith(headers["Content-Type"])

    spans = read_table(lakehouse, "spans")
    assert spans_by_id(spans_from_arrow(spans)) == spans_by_id(corpus.trace_request())
    metric_tables = {n: read_table(lakehouse, n) for n in TABLES if n.startswith("metrics_")}
    assert metrics_from_arrow(metric_tables) == corpus.metrics_request()
    logs = read_table(lakehouse, "logs")
    assert logs_by_event(logs_from_arrow(logs)) == logs_by_event(corpus.logs_request())


def compress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body)
    if encoding in ("deflate", "zlib"):
        return zlib.compress(body)
    return zstandard.ZstdCompressor().compress(body)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_content_encodings(bridge, lakehouse, encoding) -> None:
    body = compress(corpus.trace_request().SerializeToString(), encoding)
    headers = {**PROTOBUF, "Content-Encoding": encoding}
    answer = requests.post(url(bridge), data=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.content
    assert read_table(lakehouse, "spans").num_rows == 4


def test_rejected_items_are_a_partial_success_in_the_request_encoding(bridge, lakehouse) -> None:
    request = corpus.trace_request()
    bad = request.resource_spans[0].scope_spans[0].spans[0]
    bad.start_time_unix_nano = 2**63 + 5  # past what a signed nanosecond time can hold
    for body, headers in ((request.SerializeToString(), PROTOBUF), (otlp_json(request), JSON)):
        answer = requests.post(url(bridge), data=body, headers=headers, timeout=30)
        assert answer.status_code == 200
        if headers is JSON:
            partial = answer.json()["partialSuccess"]
            assert int(partial["rejectedSpans"]) == 1 and partial["errorMessage"]
        else:
            response = ExportTraceServiceResponse.FromString(answer.content)
            assert response.partial_success.rejected_spans == 1
    assert read_table(lakehouse, "spans").num_rows == 6  # 3 good spans, twice


def test_strings_not_utf8_are_stored_repaired_and_warned_of_in_either_encoding(
    bridge, lakehouse
) -> None:
    """Protobuf bytes that are not UTF-8 (a Collector passing a Latin-1 file on) and a JSON
    lone surrogate escape (half an emoji): 200, every record stored, the strings with U+FFFD,
    a warning in partial_success (before 2026-11-29: 400, and the whole request lost)."""
    answer = requests.post(
        url(bridge, "/v1/logs"), data=latin1_logs("proto"), headers=PROTOBUF, timeout=30
    )
    assert answer.status_code == 200
    partial = ExportLogsServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_log_records == 0 and "not valid UTF-8" in partial.error_message
    record = {"body": {"stringValue": "half \ud83d"}}
    body = {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "json"}}]
                },
                "scopeLogs": [{"logRecords": [record, {"body": {"stringValue": "whole"}}]}],
            }
        ]
    }
    text = json.dumps(body)  # ASCII: the lone surrogate as the escape "\\ud83d"
    answer = requests.post(url(bridge, "/v1/logs"), data=text, headers=JSON, timeout=30)
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert "rejectedLogRecords" not in partial and "not valid UTF-8" in partial["errorMessage"]
    bodies = {
        (row["service_name"], row["body"]) for row in read_table(lakehouse, "logs").to_pylist()
    }
    assert bodies == {
        ("proto", "first"), ("proto", "caf\ufffd"), ("proto", "third"),
        ("json", "half \ufffd"), ("json", "whole"),
    }  # fmt: skip


def test_repeated_attribute_keys_are_stored_once_and_warned_of(bridge, lakehouse) -> None:
    """A span whose attributes give a key twice (OTLP says keys are unique): stored with the
    last value, the other counted as dropped, a warning in partial_success; the file stays
    readable by DuckDB's own Parquet reader, which refuses a map with a key twice."""
    now = time.time_ns()
    attributes = [
        {"key": "k", "value": {"stringValue": "a"}},
        {"key": "k", "value": {"stringValue": "b"}},
    ]
    spans = [
        {"traceId": "1" * 32, "spanId": "1" * 16, "name": "fine", "startTimeUnixNano": str(now)},
        {"traceId": "2" * 32, "spanId": "2" * 16, "name": "dup", "startTimeUnixNano": str(now),
         "attributes": attributes},
    ]  # fmt: skip
    service = [{"key": "service.name", "value": {"stringValue": "dupdemo"}}]
    body = {
        "resourceSpans": [{"resource": {"attributes": service}, "scopeSpans": [{"spans": spans}]}]
    }
    answer = requests.post(url(bridge), data=json.dumps(body), headers=JSON, timeout=30)
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert "rejectedSpans" not in partial and "same key" in partial["errorMessage"]
    assert read_table(lakehouse, "spans").num_rows == 2
    files = str(lakehouse / "spans" / "**" / "*.parquet")
    found = duckdb.sql(
        f"SELECT name, attributes['k'] AS k, dropped_attributes_count AS dropped "
        f"FROM read_parquet('{files}', hive_partitioning = false) ORDER BY name"
    ).fetchall()
    assert found == [("dup", "b", 1), ("fine", None, 0)]


JSON_SPAN = (
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": '
    b'"5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "s", %s}]}]}]}'
)


def _asking_for_a_dictionary(body: bytes) -> bytes:
    packer = zlib.compressobj(zdict=b"service.name")
    return packer.compress(body) + packer.flush()


PRESET_DICTIONARY = _asking_for_a_dictionary(corpus.trace_request().SerializeToString())
BAD_REQUESTS = [
    # (headers, body, HTTP status, gRPC code in the google.rpc.Status body)
    (PROTOBUF, b"\xff\xff\xff", 400, 3),
    (JSON, b"{not json", 400, 3),
    (JSON, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', 400, 3),
    # a string for a message, a fraction for an enum: protobuf's parser took them silently (an
    # empty status, SPAN_KIND_SERVER) and the span was stored
    (JSON, JSON_SPAN % b'"status": "STATUS_CODE_ERROR"', 400, 3),
    (JSON, JSON_SPAN % b'"kind": 2.5', 400, 3),
    ({**PROTOBUF, "Content-Encoding": "gzip"}, b"not gzip", 400, 3),
    # cut short: the finished part of the frame is no request (it used to be taken as empty)
    (
        {**PROTOBUF, "Content-Encoding": "zstd"},
        zstandard.compress(corpus.trace_request().SerializeToString())[:-4],
        400,
        3,
    ),
    # a zlib stream asking for a preset dictionary: zlib-ng raised SystemError (500)
    ({**PROTOBUF, "Content-Encoding": "deflate"}, PRESET_DICTIONARY, 400, 3),
    ({**JSON, "Content-Encoding": "deflate"}, PRESET_DICTIONARY, 400, 3),
    ({**PROTOBUF, "Content-Encoding": "br"}, b"", 415, 3),
    ({"Content-Type": "text/plain"}, b"hello", 415, 3),
]


@pytest.mark.parametrize(("headers", "body", "http_status", "code"), BAD_REQUESTS)
def test_bad_requests_get_the_spec_answer(bridge, lakehouse, headers, body, http_status, code):
    answer = requests.post(url(bridge), data=body, headers=headers, timeout=30)
    assert answer.status_code == http_status
    status = status_of(answer)
    assert status.code == code and status.message
    assert not table_exists(lakehouse, "spans")


MALFORMED = [
    # requests aiohttp's parser refuses with 400 before any handler of ours runs
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"X-Big: " + b"a" * 100_000 + b"\r\nContent-Length: 0\r\n\r\n",
    # a token too long: its start was quoted in the log line
    b"Authorization: Bearer s3cr3t" + b"a" * 9000 + b"\r\nContent-Length: 0\r\n\r\n",
]


def malformed_answer(port: int, path: str, headers_and_body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + headers_and_body)
        return sock.recv(100)


def test_malformed_http_is_400_and_one_log_line_not_a_traceback(bridge, caplog) -> None:
    """A client's malformed HTTP (framing, a header too long) is answered 400 by aiohttp, on
    the OTLP port and the admin port alike; it logged an ERROR with a traceback and the
    request's bytes for each, so any client could fill the bridge's log."""
    assert bridge.bridge.http is not None and bridge.bridge.admin is not None
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    for port, path in ((bridge.bridge.http.port, "/v1/traces"), (bridge.bridge.admin.port, "/")):
        for request in MALFORMED:
            assert malformed_answer(port, path, request).startswith(b"HTTP/1.0 400")
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == 2 * len(MALFORMED)
    assert all(r.levelno == logging.WARNING and not r.exc_info for r in records)
    assert "Invalid character in chunk size" in records[0].getMessage()
    assert all("\n" not in r.getMessage() for r in records)
    assert not any("s3cr3t" in r.getMessage() or "aaaa" in r.getMessage() for r in records)
    body = corpus.trace_request().SerializeToString()
    assert requests.post(url(bridge), data=body, headers=PROTOBUF, timeout=30).status_code == 200


def test_methods_and_paths(bridge) -> None:
    answer = requests.get(url(bridge), timeout=30)
    assert answer.status_code == 405 and answer.headers["Allow"] == "POST"
    assert (
        requests.post(url(bridge, "/v1/nothing"), headers=PROTOBUF, timeout=30).status_code == 404
    )


def test_over_the_limit_is_413_compressed_or_not(tmp_path) -> None:
    limit = 64 * 1024
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lakehouse, receiver={"max_receive_message_bytes": limit}))
    try:
        big = ExportTraceServiceRequest()
        span = big.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id, span.span_id, span.name = b"\1" * 16, b"\2" * 8, "x" * (limit * 4)
        raw = big.SerializeToString()
        plain = requests.post(url(bridge), data=raw, headers=PROTOBUF, timeout=30)
        assert plain.status_code == 413
        # a gzip bomb: small on the wire, over the limit once inflated
        packed = gzip.compress(raw)
        assert len(packed) < limit
        bomb = requests.post(
            url(bridge), data=packed, headers={**PROTOBUF, "Content-Encoding": "gzip"}, timeout=30
        )
        assert bomb.status_code == 413 and "max_receive_message_bytes" in status_of(bomb).message
        assert not table_exists(lakehouse, "spans")
    finally:
        bridge.stop()


def test_json_whose_decoding_cannot_fit_the_buffer_is_413_unread(tmp_path) -> None:
    """A gzip'd OTLP/JSON body of empty objects, well under the request limit inflated, took
    82 times its size in Python objects while it was decoded, beside `buffer.max_bytes`: 16 KiB
    sent, 16 MiB inflated, 1.4 GB held by the bridge. Its decoding is held under the buffer's
    bound like a conversion, and one that could never fit is refused before it is decoded."""
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lakehouse, max_bytes=32 * 1024 * 1024))
    try:
        spans = ",".join(["{}"] * (1024 * 1024 // 3))
        body = f'{{"resourceSpans": [{{"scopeSpans": [{{"spans": [{spans}]}}]}}]}}'.encode()
        headers = {**JSON, "Content-Encoding": "gzip"}
        bomb = requests.post(url(bridge), data=gzip.compress(body), headers=headers, timeout=60)
        assert bomb.status_code == 413
        assert "buffer.max_bytes" in status_of(bomb).message
        # a real request in JSON, under the same bound, is stored
        real = requests.post(
            url(bridge), data=otlp_json(corpus.trace_request()), headers=JSON, timeout=30
        )
        assert real.status_code == 200
        assert read_table(lakehouse, "spans").num_rows == 4
    finally:
        bridge.stop()


def test_overload_is_503_with_retry_after(tmp_path) -> None:
    """While the table cannot be committed to, acked rows stay buffered for their retry; the
    full buffer refuses the next request once it has waited the retry delay for space."""
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(
        make_settings(lakehouse, ack="wal", max_bytes=1024, retry_after_seconds=2)
    )
    try:
        blocker = lakehouse / "spans"  # a file where the spans table should be
        blocker.write_text("not a table")
        body = corpus.trace_request().SerializeToString()
        first = requests.post(url(bridge), data=body, headers=PROTOBUF, timeout=30)
        second = requests.post(url(bridge), data=body, headers=PROTOBUF, timeout=30)
        assert first.status_code == 200  # durable in the write-ahead log
        assert second.status_code == 503 and second.headers["Retry-After"] == "2"
        status = status_of(second)
        assert status.code == 14  # UNAVAILABLE
        info = RetryInfo()
        assert status.details[0].Unpack(info) and info.retry_delay.seconds == 2
        blocker.unlink()
        deadline = time.monotonic() + 30  # the commit's backoff: 2 s, then 4 s
        while time.monotonic() < deadline and not (
            table_exists(lakehouse, "spans") and read_table(lakehouse, "spans").num_rows
        ):
            time.sleep(0.1)
        assert read_table(lakehouse, "spans").num_rows == 4
    finally:
        bridge.stop()
