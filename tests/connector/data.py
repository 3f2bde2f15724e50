"""Synthetic OTLP spans for connector tests: several services, days and commits."""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

SERVICES = ("cart", "checkout", "search")
DAYS = (date(2024, 11, 19), date(2024, 11, 20))
COMMITS_PER_PARTITION = 3
TRACES_PER_REQUEST = 4
SPANS_PER_TRACE = 3


def trace_id(*parts: object) -> bytes:
    return hashlib.sha256(repr(parts).encode()).digest()[:16]


def day_nanos(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, 8, tzinfo=UTC).timestamp()) * 10**9


def attr(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def spans_request(service: str, day: date, batch: int) -> ExportTraceServiceRequest:
    """TRACES_PER_REQUEST traces of SPANS_PER_TRACE spans each, all in one partition."""
    spans = []
    for t in range(TRACES_PER_REQUEST):
        tid = trace_id(service, day, batch, t)
        start = day_nanos(day) + (batch * 100 + t) * 1_000_000_000
        for s in range(SPANS_PER_TRACE):
            spans.append(
                trace_pb2.Span(
                    trace_id=tid,
                    span_id=trace_id(tid, s)[:8],
                    parent_span_id=trace_id(tid, 0)[:8] if s else b"",
                    name=f"{service} op{s}",
                    kind=trace_pb2.Span.SPAN_KIND_SERVER if s == 0 else 3,
                    start_time_unix_nano=start + s * 1000,
                    end_time_unix_nano=start + s * 1000 + (s + 1) * 1_000_000,
                    attributes=[attr("http.route", f"/r/{t % 3}"), attr("tenant", f"t{batch}")],
                    status=trace_pb2.Status(code=2 if (t + s) % 5 == 0 else 0),
                )
            )
    return ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=Resource(attributes=[attr("service.name", service)]),
                scope_spans=[trace_pb2.ScopeSpans(spans=spans)],
            )
        ]
    )


def all_requests() -> list[ExportTraceServiceRequest]:
    return [
        spans_request(service, day, batch)
        for batch in range(COMMITS_PER_PARTITION)
        for service in SERVICES
        for day in DAYS
    ]


TOTAL_SPANS = (
    len(SERVICES) * len(DAYS) * COMMITS_PER_PARTITION * TRACES_PER_REQUEST * SPANS_PER_TRACE
)
