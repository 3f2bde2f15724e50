"""The OpenTelemetry Python SDK's own OTLP/gRPC exporters as clients."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from tests.helpers import read_table

pytestmark = pytest.mark.e2e

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RESOURCE = Resource.create({"service.name": "sdk-svc", "deployment.environment": "test"})


def test_sdk_spans_land_with_every_field(bridge, lakehouse) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=bridge.endpoint, insecure=True))
    )
    tracer = provider.get_tracer("e2e.tracer", "9.9.9")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:  # noqa: SIM117 (the link needs `parent`)
        with tracer.start_as_current_span(
            "child",
            kind=SpanKind.CLIENT,
            attributes={
                "http.route": "/a/{b}",
                "retries": 3,
                "ratio": 0.25,
                "ok": True,
                "tags": ["x", "y"],
            },
            links=[Link(parent.get_span_context(), {"link.kind": "follows"})],
        ) as child:
            child.add_event("cache.miss", {"key": "k1", "size": 10})
            child.set_status(Status(StatusCode.ERROR, "downstream failed"))
    provider.shutdown()

    rows = {r["name"]: r for r in read_table(lakehouse, "spans").to_pylist()}
    assert set(rows) == {"parent", "child"}
    for sdk_span in memory.get_finished_spans():
        row = rows[sdk_span.name]
        ctx = sdk_span.get_span_context()
        assert row["trace_id"] == format(ctx.trace_id, "032x")
        assert row["span_id"] == format(ctx.span_id, "016x")
        assert row["start_time_unix_nano"] == sdk_span.start_time
        assert row["duration_ns"] == sdk_span.end_time - sdk_span.start_time
        # Spark's TIMESTAMP is microseconds: the nanoseconds are truncated, never rounded.
        assert row["start_time"] == EPOCH + timedelta(microseconds=sdk_span.start_time // 1000)
        assert row["service_name"] == "sdk-svc"
        assert row["scope_name"] == "e2e.tracer" and row["scope_version"] == "9.9.9"
        assert dict(row["resource_attributes"])["deployment.environment"] == "test"
    child = rows["child"]
    assert child["parent_span_id"] == rows["parent"]["span_id"]
    assert child["kind"] == "SPAN_KIND_CLIENT" and rows["parent"]["kind"] == "SPAN_KIND_SERVER"
    assert dict(child["attributes"]) == {
        "http.route": "/a/{b}",
        "retries": "3",
        "ratio": "0.25",
        "ok": "true",
        "tags": '["x","y"]',
    }
    types = dict(child["attribute_types"])
    assert types["retries"] == "int" and types["ratio"] == "double" and types["ok"] == "bool"
    assert "http.route" not in types
    assert child["status_code"] == "STATUS_CODE_ERROR"
    assert child["status_message"] == "downstream failed"
    [event] = child["events"]
    assert event["name"] == "cache.miss" and dict(event["attributes"]) == {
        "key": "k1",
        "size": "10",
    }
    [link] = child["links"]
    assert link["span_id"] == rows["parent"]["span_id"]
    assert dict(link["attributes"]) == {"link.kind": "follows"}


def test_sdk_metrics_land_in_their_tables(bridge, lakehouse) -> None:
    exporting = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=bridge.endpoint, insecure=True),
        export_interval_millis=3_600_000,
    )
    provider = MeterProvider(
        resource=RESOURCE,
        metric_readers=[exporting],
        views=[
            View(
                instrument_name="payload.size", aggregation=ExponentialBucketHistogramAggregation()
            )
        ],
    )
    meter = provider.get_meter("e2e.meter")
    meter.create_counter("requests", unit="{request}").add(5, {"route": "/a"})
    meter.create_up_down_counter("inflight").add(-2)
    meter.create_histogram("latency", unit="ms").record(12.5, {"route": "/a"})
    meter.create_histogram("payload.size").record(1024)
    meter.create_gauge("temperature").set(21.5, {"room": "lab"})
    exporting.force_flush()  # one export; read before shutdown exports (cumulative) again

    sums = {r["metric_name"]: r for r in read_table(lakehouse, "metrics_sum").to_pylist()}
    assert sums["requests"]["value_int"] == 5 and sums["requests"]["is_monotonic"] is True
    assert sums["requests"]["metric_unit"] == "{request}"
    assert sums["requests"]["aggregation_temporality"] == "AGGREGATION_TEMPORALITY_CUMULATIVE"
    assert dict(sums["requests"]["attributes"]) == {"route": "/a"}
    assert sums["inflight"]["value_int"] == -2 and sums["inflight"]["is_monotonic"] is False
    [hist] = read_table(lakehouse, "metrics_histogram").to_pylist()
    assert (hist["count"], hist["sum"], hist["min"], hist["max"]) == (1, 12.5, 12.5, 12.5)
    assert sum(hist["bucket_counts"]) == 1
    assert len(hist["bucket_counts"]) == len(hist["explicit_bounds"]) + 1
    [exp] = read_table(lakehouse, "metrics_exponential_histogram").to_pylist()
    assert exp["count"] == 1 and exp["sum"] == 1024 and sum(exp["positive"]["bucket_counts"]) == 1
    [gauge] = read_table(lakehouse, "metrics_gauge").to_pylist()
    assert gauge["value_double"] == 21.5 and dict(gauge["attributes"]) == {"room": "lab"}
    assert gauge["service_name"] == "sdk-svc" and gauge["scope_name"] == "e2e.meter"
    assert gauge["time_unix_nano"] > 0 and gauge["date"] is not None
    provider.shutdown()


def test_sdk_logs_land_with_body_and_context(bridge, lakehouse) -> None:
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=bridge.endpoint, insecure=True))
    )
    logger = provider.get_logger("e2e.logger", "1.0")
    tracer = TracerProvider(resource=RESOURCE).get_tracer("t")
    with tracer.start_as_current_span("op") as span:
        logger.emit(
            LogRecord(
                timestamp=1_700_000_000_000_000_001,
                severity_text="WARN",
                severity_number=SeverityNumber.WARN,
                body={"disk": "/var", "used": 91, "paths": ["/a", "/b"]},
                attributes={"disk.path": "/var"},
                event_name="disk.full",
            )
        )
        logger.emit(LogRecord(body="plain message", severity_number=SeverityNumber.INFO))
    provider.shutdown()

    rows = {r["event_name"]: r for r in read_table(lakehouse, "logs").to_pylist()}
    structured, plain = rows["disk.full"], rows[""]
    assert json.loads(structured["body"]) == {"disk": "/var", "used": 91, "paths": ["/a", "/b"]}
    assert json.loads(structured["body_type"])["kvlistValue"]["values"][1] == {
        "key": "used",
        "value": {"intValue": "91"},
    }
    assert structured["severity_text"] == "WARN" and structured["severity_number"] == 13
    assert structured["time_unix_nano"] == 1_700_000_000_000_000_001
    assert str(structured["date"]) == "2023-11-14"
    assert structured["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert structured["span_id"] == format(span.get_span_context().span_id, "016x")
    assert dict(structured["attributes"]) == {"disk.path": "/var"}
    assert structured["service_name"] == "sdk-svc" and structured["scope_name"] == "e2e.logger"
    assert plain["body"] == "plain message" and plain["body_type"] is None
    assert plain["observed_time_unix_nano"] > 0
