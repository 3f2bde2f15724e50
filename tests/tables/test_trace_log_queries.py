"""docs/queries.md's queries — latency and errors per operation, the slowest traces, the
service dependency map, exceptions by type, a trace's logs beside its spans, searching log
bodies, finding a trace by an attribute — run as written (the lake's path, the window and the
trace id put in) on Spark, against spans and logs the OpenTelemetry SDK exported to
`otel-delta serve` over OTLP/gRPC and OTLP/HTTP, and checked against the requests the SDK's
exporters encoded."""

from __future__ import annotations

import logging
import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace import Status as SdkStatus
from opentelemetry.trace import StatusCode as SdkStatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.helpers import ServeProcess, bridge_config

pytestmark = [
    pytest.mark.e2e,
    # the SDK's own handler, as applications use it (opentelemetry-instrumentation-logging's
    # successor is not installed here)
    pytest.mark.filterwarnings("ignore:`LoggingHandler` in `opentelemetry-sdk` is deprecated"),
]

DOC = Path(__file__).resolve().parents[2] / "docs" / "queries.md"
DOC_LAKE = "/path/to/lakehouse"
DOC_START, DOC_END = "2026-11-21 10:00:00 UTC", "2026-11-21 11:00:00 UTC"
DOC_DATES = "BETWEEN DATE '2026-11-21' AND DATE '2026-11-21'"
DOC_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACES = 40
HOUR_NS = 3_600_000_000_000


class Capture:
    """An SDK exporter that keeps the request it encodes: what was sent, to check against."""

    def __init__(self, inner, requests: list) -> None:
        self.inner, self.requests = inner, requests

    def export(self, batch, **kwargs):
        if isinstance(self.inner, (GrpcLogs, HttpLogs)):
            self.requests.append(encode_logs(batch))
        else:
            self.requests.append(encode_spans(batch))
        return self.inner.export(batch, **kwargs)

    def shutdown(self, *args, **kwargs):
        return self.inner.shutdown(*args, **kwargs)

    def force_flush(self, *args, **kwargs):
        return self.inner.force_flush(*args, **kwargs)


@dataclass
class Sent:
    lake: Path
    start_ns: int = 0  # the window
    end_ns: int = 0
    spans: list[dict] = field(default_factory=list)  # one per span sent, with its service
    logs: list[dict] = field(default_factory=list)


class Service:
    """One instrumented process: a tracer, and stdlib logging through the SDK's handler."""

    def __init__(self, name: str, serve: ServeProcess, transport: str, requests: list) -> None:
        resource = Resource.create({"service.name": name})
        if transport == "grpc":
            spans, logs = (
                GrpcSpans(endpoint=serve.endpoint, insecure=True),
                GrpcLogs(endpoint=serve.endpoint, insecure=True),
            )
        else:
            base = f"http://127.0.0.1:{serve.http_port}"
            spans, logs = (
                HttpSpans(endpoint=f"{base}/v1/traces"),
                HttpLogs(endpoint=f"{base}/v1/logs"),
            )
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(Capture(spans, requests)))
        self.logger_provider = LoggerProvider(resource=resource)
        self.logger_provider.add_log_record_processor(
            SimpleLogRecordProcessor(Capture(logs, requests))
        )
        self.tracer = self.tracer_provider.get_tracer(name)
        self.log = logging.getLogger(f"queries.{name}")
        self.log.handlers = [LoggingHandler(logger_provider=self.logger_provider)]
        self.log.setLevel(logging.INFO)
        self.log.propagate = False

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


def started(tracer, name: str, kind: SpanKind, start: int, duration: int, context=None, **attrs):
    """A span started at `start`, and the time to end it at: explicit times, so the
    latencies the queries compute are known to the nanosecond."""
    span = tracer.start_span(name, context=context, kind=kind, start_time=start, attributes=attrs)
    return span, start + duration


@pytest.fixture(scope="module")
def sent(tmp_path_factory) -> Sent:
    """`frontend` (gRPC) calls `checkout` (HTTP), which calls `payments` (gRPC), propagating
    the W3C traceparent between them; payments declines some charges (an error and an
    exception log); each server logs what it does. A trace, and logs, from two hours before
    the window are sent too: the queries must leave them out."""
    directory = tmp_path_factory.mktemp("trace_log_queries")
    serve = ServeProcess(bridge_config(directory, "[buffer]\nflush_interval_seconds = 0.5\n"))
    requests: list = []
    out = Sent(directory / "lake")
    rnd = random.Random(7)
    propagator = TraceContextTextMapPropagator()
    try:
        frontend = Service("frontend", serve, "grpc", requests)
        checkout = Service("checkout", serve, "http", requests)
        payments = Service("payments", serve, "grpc", requests)
        now = time.time_ns()
        out.start_ns = now - 60_000_000_000
        for i in range(TRACES + 1):
            old = i == TRACES  # outside the window, the slowest of all, and declined
            t0 = now - 2 * HOUR_NS if old else now + i * 50_000_000
            user = f"u-{i % 7}" if i % 5 else "u-42"
            total = 30_000_000 if old else rnd.randint(2_000_000, 20_000_000)
            root, root_end = started(
                frontend.tracer, "GET /checkout", SpanKind.SERVER, t0, total, **{"user.id": user}
            )
            ctx = trace.set_span_in_context(root)
            call, call_end = started(
                frontend.tracer, "POST /orders", SpanKind.CLIENT, t0 + 100_000, total - 200_000, ctx
            )
            carrier: dict[str, str] = {}
            propagator.inject(carrier, trace.set_span_in_context(call))
            remote = propagator.extract(carrier)
            server, server_end = started(
                checkout.tracer,
                "POST /orders",
                SpanKind.SERVER,
                t0 + 200_000,
                total - 400_000,
                remote,
                **{"http.route": "/orders", "user.id": user},
            )
            declined = old or i % 4 == 1
            with trace.use_span(server, end_on_exit=False):
                checkout.log.info("placing order %d for %s", i, user)
            charges = 1 + i % 3  # payments is called once to three times
            at = t0 + 300_000
            for n in range(charges):
                charge, charge_end = started(
                    checkout.tracer,
                    "payments.charge",
                    SpanKind.CLIENT,
                    at,
                    1_000_000,
                    trace.set_span_in_context(server),
                )
                carrier = {}
                propagator.inject(carrier, trace.set_span_in_context(charge))
                pay, pay_end = started(
                    payments.tracer,
                    "POST /charge",
                    SpanKind.SERVER,
                    at + 100_000,
                    rnd.randint(100_000, 800_000),
                    propagator.extract(carrier),
                    **{"http.route": "/charge"},
                )
                last = n == charges - 1
                with trace.use_span(pay, end_on_exit=False):
                    if declined and last:
                        try:
                            raise PermissionError(f"card expired for {user}")
                        except PermissionError as exc:
                            pay.record_exception(exc)
                            pay.set_status(SdkStatus(SdkStatusCode.ERROR, "declined"))
                            payments.log.exception("charge declined: card expired")
                    else:
                        payments.log.info("charge accepted")
                pay.end(pay_end)
                if declined and last:
                    charge.set_status(SdkStatus(SdkStatusCode.ERROR))
                charge.end(charge_end)
                at += 1_100_000
            if declined:
                server.set_status(SdkStatus(SdkStatusCode.ERROR, "payment declined"))
                with trace.use_span(server, end_on_exit=False):
                    checkout.log.warning("order %d not placed: payment declined", i)
            server.end(server_end)
            call.end(call_end)
            root.end(root_end)
        # a log with its own time: inside the window, and two hours before it
        for stamp in (now, now - 2 * HOUR_NS):
            payments.logger_provider.get_logger("batch").emit(
                LogRecord(
                    timestamp=stamp + 1,
                    severity_number=SeverityNumber.ERROR,
                    severity_text="ERROR",
                    body={"message": "refund DECLINED by bank", "batch": 7},
                )
            )
        frontend.log.info("a log outside any trace")
        for service in (frontend, checkout, payments):
            service.shutdown()
        out.end_ns = time.time_ns() + TRACES * 50_000_000 + 60_000_000_000
    finally:
        assert serve.stop() == 0  # commits what it holds
    for request in requests:
        if isinstance(request, ExportTraceServiceRequest):
            for rs in request.resource_spans:
                service = next(
                    a.value.string_value for a in rs.resource.attributes if a.key == "service.name"
                )
                for ss in rs.scope_spans:
                    out.spans += [{"service": service, "span": s} for s in ss.spans]
        else:
            assert isinstance(request, ExportLogsServiceRequest)
            for rl in request.resource_logs:
                service = next(
                    a.value.string_value for a in rl.resource.attributes if a.key == "service.name"
                )
                for sl in rl.scope_logs:
                    out.logs += [{"service": service, "log": r} for r in sl.log_records]
    return out


def timestamp(ns: int) -> str:
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def doc_query(heading: str, sent: Sent, trace_id: str = DOC_TRACE) -> str:
    """The SQL under `heading` in docs/queries.md, with this lake, window and trace put in."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (sql,) = re.findall(r"```sql\n(.*?)```", section, re.S)
    dates = (
        f"BETWEEN DATE '{timestamp(sent.start_ns)[:10]}' AND DATE '{timestamp(sent.end_ns)[:10]}'"
    )
    for placeholder, value in (
        (DOC_LAKE, str(sent.lake)),
        (DOC_START, timestamp(sent.start_ns)),
        (DOC_END, timestamp(sent.end_ns)),
        (DOC_DATES, dates),
        (DOC_TRACE, trace_id),
    ):
        sql = sql.replace(placeholder, value)
    assert str(sent.lake) in sql and "2026-11-21" not in sql and DOC_TRACE not in sql
    return sql


def in_window(sent: Sent, ns: int) -> bool:
    return sent.start_ns <= ns < sent.end_ns


def hex_id(raw: bytes) -> str:
    return raw.hex()


def percentile(values: list[int], q: float) -> float:
    """Spark's exact `percentile`: linear between the closest ranks."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def window_spans(sent: Sent) -> list[dict]:
    return [s for s in sent.spans if in_window(sent, s["span"].start_time_unix_nano)]


def test_latency_and_errors_per_operation(spark, sent: Sent) -> None:
    rows = spark.sql(doc_query("Latency and error rate per operation", sent)).collect()
    by_op: dict[tuple[str, str], list] = defaultdict(list)
    for s in window_spans(sent):
        span = s["span"]
        if span.kind in (Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CONSUMER):
            by_op[(s["service"], span.name)].append(span)
    assert {(r.service_name, r.name) for r in rows} == set(by_op)
    for row in rows:
        spans = by_op[(row.service_name, row.name)]
        durations = [s.end_time_unix_nano - s.start_time_unix_nano for s in spans]
        errors = sum(s.status.code == Status.STATUS_CODE_ERROR for s in spans)
        assert (row.spans, row.errors) == (len(spans), errors)
        assert row.error_rate == pytest.approx(errors / len(spans))
        for q, got in ((0.5, row.p50_ms), (0.95, row.p95_ms), (0.99, row.p99_ms)):
            assert got == pytest.approx(percentile(durations, q) / 1e6)
    assert any(r.errors for r in rows) and any(not r.errors for r in rows)


def test_slowest_traces(spark, sent: Sent) -> None:
    rows = spark.sql(doc_query("The slowest traces", sent)).collect()
    traces: dict[str, list[dict]] = defaultdict(list)
    for s in window_spans(sent):
        traces[hex_id(s["span"].trace_id)].append(s)

    def length(spans: list[dict]) -> int:
        return max(s["span"].end_time_unix_nano for s in spans) - min(
            s["span"].start_time_unix_nano for s in spans
        )

    slowest = sorted(traces, key=lambda t: -length(traces[t]))[:10]
    assert [r.trace_id for r in rows] == slowest
    for row in rows:
        spans = traces[row.trace_id]
        root = next(s for s in spans if not s["span"].parent_span_id)
        assert row.duration_ms == pytest.approx(length(spans) / 1e6)
        assert (row.root_service, row.root_name) == (root["service"], root["span"].name)
        assert row.spans == len(spans)
        assert row.services == len({s["service"] for s in spans})
        assert row.errors == sum(s["span"].status.code == Status.STATUS_CODE_ERROR for s in spans)


def test_service_dependency_map(spark, sent: Sent) -> None:
    rows = spark.sql(doc_query("Service dependency map", sent)).collect()
    spans = window_spans(sent)
    by_id = {(s["span"].trace_id, s["span"].span_id): s for s in spans}
    calls: Counter = Counter()
    errors: Counter = Counter()
    for s in spans:
        parent = by_id.get((s["span"].trace_id, s["span"].parent_span_id))
        if parent and parent["service"] != s["service"]:
            edge = (parent["service"], s["service"])
            calls[edge] += 1
            errors[edge] += s["span"].status.code == Status.STATUS_CODE_ERROR
    assert set(calls) == {("frontend", "checkout"), ("checkout", "payments")}
    assert {(r.caller, r.callee): (r.calls, r.errors) for r in rows} == {
        edge: (n, errors[edge]) for edge, n in calls.items()
    }
    for row in rows:
        durations = [
            s["span"].end_time_unix_nano - s["span"].start_time_unix_nano
            for s in spans
            if s["service"] == row.callee
            and (parent := by_id.get((s["span"].trace_id, s["span"].parent_span_id)))
            and parent["service"] == row.caller
        ]
        assert row.p95_ms == pytest.approx(percentile(durations, 0.95) / 1e6)


def test_exceptions_by_type(spark, sent: Sent) -> None:
    rows = spark.sql(doc_query("Exceptions by type", sent)).collect()
    events = [
        (s, event)
        for s in window_spans(sent)
        for event in s["span"].events
        if event.name == "exception"
    ]
    assert events
    (row,) = rows
    assert (row.service_name, row.exception_type) == ("payments", "PermissionError")
    assert row.exceptions == len(events)
    assert row.traces == len({s["span"].trace_id for s, _ in events})
    last, event = max(events, key=lambda pair: pair[1].time_unix_nano)
    message = {kv.key: kv.value.string_value for kv in event.attributes}["exception.message"]
    assert (row.last_message, row.last_trace_id) == (message, hex_id(last["span"].trace_id))


def test_logs_of_a_trace_with_their_spans(spark, sent: Sent) -> None:
    declined = next(
        s["span"]
        for s in window_spans(sent)
        if s["span"].status.code == Status.STATUS_CODE_ERROR and s["service"] == "payments"
    )
    trace_id = hex_id(declined.trace_id)
    rows = spark.sql(doc_query("A trace's logs beside its spans", sent, trace_id)).collect()
    names = {(hex_id(s["span"].span_id)): (s["service"], s["span"].name) for s in sent.spans}
    logs = sorted(
        (entry for entry in sent.logs if hex_id(entry["log"].trace_id) == trace_id),
        key=lambda entry: entry["log"].time_unix_nano,
    )
    assert [r.body for r in rows] == [entry["log"].body.string_value for entry in logs]
    assert [(r.service_name, r.span_name) for r in rows] == [
        names[hex_id(entry["log"].span_id)] for entry in logs
    ]
    assert [r.severity_text for r in rows] == [entry["log"].severity_text for entry in logs]
    exception = next(r for r in rows if r.exception_type)
    assert exception.exception_type == "PermissionError"
    assert exception.body == "charge declined: card expired"
    assert exception.span_status == "STATUS_CODE_ERROR"


def test_search_log_bodies(spark, sent: Sent) -> None:
    rows = spark.sql(doc_query("Searching log bodies", sent)).collect()

    def text(entry: dict) -> str:
        body = entry["log"].body
        return body.string_value or str(
            {kv.key: kv.value.string_value for kv in body.kvlist_value.values}
        )

    expected = [
        entry
        for entry in sent.logs
        if in_window(sent, entry["log"].time_unix_nano or entry["log"].observed_time_unix_nano)
        and entry["log"].severity_number >= SeverityNumber.WARN.value
        and "declined" in text(entry).lower()
    ]
    assert sorted(r.time_unix_nano for r in rows) == sorted(
        e["log"].time_unix_nano for e in expected
    )
    assert {r.body for r in rows} == {
        "charge declined: card expired",
        '{"message":"refund DECLINED by bank","batch":7}',
    } | {  # the trace from before the window logged now, by the logging handler's clock
        f"order {i} not placed: payment declined"
        for i in range(TRACES + 1)
        if i % 4 == 1 or i == TRACES
    }
    times = [r.time_unix_nano for r in rows]
    assert times == sorted(times, reverse=True)


def test_find_traces_by_attribute(spark, sent: Sent) -> None:
    rows = spark.sql(doc_query("Finding a trace by an attribute", sent)).collect()
    expected: dict[str, int] = Counter()
    for s in window_spans(sent):
        attributes = {kv.key: kv.value.string_value for kv in s["span"].attributes}
        if attributes.get("user.id") == "u-42" and attributes.get("http.route") == "/orders":
            expected[hex_id(s["span"].trace_id)] += (
                s["span"].status.code == Status.STATUS_CODE_ERROR
            )
    assert expected
    assert {r.trace_id: r.errors for r in rows} == expected
    starts = [r.started for r in rows]
    assert starts == sorted(starts, reverse=True)
