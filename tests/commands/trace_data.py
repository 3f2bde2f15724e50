"""A small known trace sent through a real bridge: root → (auth, db ✗), used by CLI/remote tests."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
T0 = 1_763_700_000_000_000_000  # 2025-11-21
MS = 1_000_000


def _span(span_id: int, parent: int, name: str, start_ms: int, end_ms: int, error=False):
    return trace_pb2.Span(
        trace_id=bytes.fromhex(TRACE_ID),
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=T0 + start_ms * MS,
        end_time_unix_nano=T0 + end_ms * MS,
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR if error else 0),
    )


def _resource_spans(service: str, spans: list[trace_pb2.Span]) -> trace_pb2.ResourceSpans:
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))]
    )
    return trace_pb2.ResourceSpans(
        resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=spans)]
    )


def known_trace() -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[
            _resource_spans("frontend", [_span(1, 0, "GET /checkout", 0, 100)]),
            _resource_spans("auth", [_span(2, 1, "authenticate", 5, 30)]),
            _resource_spans("db", [_span(3, 1, "SELECT orders", 40, 90, error=True)]),
        ]
    )


def other_spans(n: int, service: str = "noise") -> ExportTraceServiceRequest:
    spans = [
        trace_pb2.Span(
            trace_id=(i + 1).to_bytes(16, "big"),
            span_id=(i + 1).to_bytes(8, "big"),
            name=f"op{i}",
            start_time_unix_nano=T0 + i * MS,
            end_time_unix_nano=T0 + (i + 1) * MS,
        )
        for i in range(n)
    ]
    return ExportTraceServiceRequest(resource_spans=[_resource_spans(service, spans)])
