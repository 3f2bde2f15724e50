"""OTLP requests that set every field the protocol has, for round-trip and end-to-end tests."""

from __future__ import annotations

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    EntityRef,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

T0 = 1_732_000_000_123_456_789  # 2024-11-19, with nanosecond precision
BIG_U64 = (1 << 64) - 5  # above int64: must survive bit-for-bit


def kv(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


def every_value_kind(prefix: str = "") -> list[KeyValue]:
    nested = AnyValue(
        kvlist_value=KeyValueList(
            values=[
                kv("s", AnyValue(string_value="x")),
                kv("i", AnyValue(int_value=-7)),
                kv("b", AnyValue(bytes_value=b"\x00\xff")),
                kv("dup", AnyValue(double_value=1.0)),
                kv("dup", AnyValue(bool_value=False)),
                kv("empty", AnyValue()),
            ]
        )
    )
    return [
        kv(f"{prefix}str", AnyValue(string_value="hello ✓")),
        kv(f"{prefix}empty_str", AnyValue(string_value="")),
        kv(f"{prefix}int", AnyValue(int_value=-(1 << 63))),
        kv(f"{prefix}double", AnyValue(double_value=0.1 + 0.2)),
        kv(f"{prefix}neg_zero", AnyValue(double_value=-0.0)),
        kv(f"{prefix}inf", AnyValue(double_value=float("inf"))),
        kv(f"{prefix}bool", AnyValue(bool_value=True)),
        kv(f"{prefix}bytes", AnyValue(bytes_value=bytes(range(256)))),
        kv(
            f"{prefix}array",
            AnyValue(
                array_value=ArrayValue(
                    values=[
                        AnyValue(string_value="a"),
                        AnyValue(int_value=1),
                        AnyValue(double_value=1.0),
                        AnyValue(array_value=ArrayValue(values=[AnyValue(bool_value=True)])),
                        nested,
                    ]
                )
            ),
        ),
        kv(f"{prefix}kvlist", nested),
        kv(f"{prefix}unset", AnyValue()),
        kv(f"{prefix}looks_typed", AnyValue(string_value="123")),
    ]


def resource(service: str | None, n: int) -> Resource:
    attrs = [kv("service.name", AnyValue(string_value=service))] if service else []
    return Resource(
        attributes=[
            *attrs,
            kv("host.name", AnyValue(string_value=f"host-{n}")),
            *every_value_kind("res."),
        ],
        dropped_attributes_count=3,
        entity_refs=[
            EntityRef(
                schema_url="https://e/1",
                type="service",
                id_keys=["service.name"],
                description_keys=["host.name"],
            )
        ],
    )


def scope(n: int) -> InstrumentationScope:
    return InstrumentationScope(
        name=f"lib-{n}",
        version="1.2.3",
        attributes=every_value_kind("scope."),
        dropped_attributes_count=1,
    )


def trace_request() -> ExportTraceServiceRequest:
    span = trace_pb2.Span(
        trace_id=bytes(range(1, 17)),
        span_id=bytes(range(1, 9)),
        parent_span_id=bytes(range(9, 17)),
        trace_state="vendor=abc,other=1",
        flags=0x301,
        name="GET /users/{id}",
        kind=trace_pb2.Span.SPAN_KIND_SERVER,
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 1_500_001,
        attributes=[kv("http.route", AnyValue(string_value="/users/{id}")), *every_value_kind()],
        dropped_attributes_count=2,
        events=[
            trace_pb2.Span.Event(
                time_unix_nano=T0 + 10,
                name="exception",
                attributes=every_value_kind("ev."),
                dropped_attributes_count=4,
            ),
            trace_pb2.Span.Event(time_unix_nano=BIG_U64, name=""),
        ],
        dropped_events_count=5,
        links=[
            trace_pb2.Span.Link(
                trace_id=b"\xab" * 16,
                span_id=b"\xcd" * 8,
                trace_state="k=v",
                attributes=every_value_kind("link."),
                dropped_attributes_count=6,
                flags=0x100,
            ),
        ],
        dropped_links_count=7,
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message="boom"),
    )
    root = trace_pb2.Span(
        trace_id=bytes(range(1, 17)),
        span_id=bytes(range(9, 17)),
        name="root",
        kind=99,  # an enum value newer than our proto: kept as a number
        start_time_unix_nano=T0 - 5,
        end_time_unix_nano=T0 + 9_000_000,
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_OK),
    )
    minimal = trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    return ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource("checkout", 1),
                schema_url="https://opentelemetry.io/schemas/1.26.0",
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=scope(1), spans=[span, root], schema_url="https://s/1"
                    ),
                    trace_pb2.ScopeSpans(scope=InstrumentationScope(), spans=[minimal]),
                ],
            ),
            trace_pb2.ResourceSpans(
                resource=Resource(),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=scope(2),
                        spans=[
                            trace_pb2.Span(
                                trace_id=b"\x03" * 16,
                                span_id=b"\x04" * 8,
                                name="no service",
                                start_time_unix_nano=T0 + 86_400_000_000_000,
                            )
                        ],
                    )
                ],
            ),
        ]
    )


def logs_request() -> ExportLogsServiceRequest:
    bodies = [AnyValue(string_value="plain text"), *[a.value for a in every_value_kind()]]
    records = [
        logs_pb2.LogRecord(
            time_unix_nano=T0 + i,
            observed_time_unix_nano=T0 + 1000 + i,
            severity_number=logs_pb2.SEVERITY_NUMBER_ERROR,
            severity_text="ERROR",
            body=body,
            attributes=every_value_kind(),
            dropped_attributes_count=i,
            flags=1,
            trace_id=bytes(range(1, 17)),
            span_id=bytes(range(1, 9)),
            event_name=f"event.{i}",
        )
        for i, body in enumerate(bodies)
    ]
    records.append(logs_pb2.LogRecord(observed_time_unix_nano=T0))  # no time, no body, no ids
    return ExportLogsServiceRequest(
        resource_logs=[
            logs_pb2.ResourceLogs(
                resource=resource("payments", 2),
                schema_url="https://r",
                scope_logs=[
                    logs_pb2.ScopeLogs(scope=scope(3), log_records=records, schema_url="https://s")
                ],
            ),
        ]
    )


def exemplars() -> list[m.Exemplar]:
    return [
        m.Exemplar(
            filtered_attributes=every_value_kind("ex."),
            time_unix_nano=T0,
            as_double=2.5,
            trace_id=bytes(range(1, 17)),
            span_id=bytes(range(1, 9)),
        ),
        m.Exemplar(time_unix_nano=T0 + 1, as_int=-3),
        m.Exemplar(),
    ]


def metrics_request() -> ExportMetricsServiceRequest:
    common = {
        "attributes": every_value_kind(),
        "start_time_unix_nano": T0 - 10**9,
        "time_unix_nano": T0,
        "flags": 1,
    }
    metadata = [kv("meta", AnyValue(int_value=1))]
    metrics = [
        m.Metric(
            name="queue.depth",
            description="d",
            unit="1",
            metadata=metadata,
            gauge=m.Gauge(
                data_points=[
                    m.NumberDataPoint(**common, as_double=1.5, exemplars=exemplars()),
                    m.NumberDataPoint(time_unix_nano=T0, as_int=-(1 << 63)),
                    m.NumberDataPoint(time_unix_nano=T0),  # no value at all
                ]
            ),
        ),
        m.Metric(
            name="requests",
            unit="{request}",
            sum=m.Sum(
                aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE,
                is_monotonic=True,
                data_points=[m.NumberDataPoint(**common, as_int=42, exemplars=exemplars())],
            ),
        ),
        m.Metric(
            name="delta.sum",
            sum=m.Sum(
                aggregation_temporality=m.AGGREGATION_TEMPORALITY_DELTA,
                data_points=[m.NumberDataPoint(**common, as_double=-0.5)],
            ),
        ),
        m.Metric(
            name="latency",
            unit="ms",
            histogram=m.Histogram(
                aggregation_temporality=m.AGGREGATION_TEMPORALITY_DELTA,
                data_points=[
                    m.HistogramDataPoint(
                        **common,
                        count=BIG_U64,
                        sum=12.5,
                        min=0.5,
                        max=9.0,
                        bucket_counts=[1, 2, BIG_U64],
                        explicit_bounds=[1.0, 5.0],
                        exemplars=exemplars(),
                    ),
                    m.HistogramDataPoint(time_unix_nano=T0, count=0),  # sum/min/max absent
                ],
            ),
        ),
        m.Metric(
            name="size",
            unit="By",
            exponential_histogram=m.ExponentialHistogram(
                aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE,
                data_points=[
                    m.ExponentialHistogramDataPoint(
                        **common,
                        count=10,
                        sum=100.0,
                        scale=-3,
                        zero_count=2,
                        zero_threshold=1e-9,
                        positive=m.ExponentialHistogramDataPoint.Buckets(
                            offset=-2, bucket_counts=[1, 0, 7]
                        ),
                        negative=m.ExponentialHistogramDataPoint.Buckets(),
                        min=-1.0,
                        max=50.0,
                        exemplars=exemplars(),
                    ),
                    m.ExponentialHistogramDataPoint(time_unix_nano=T0, scale=20),
                ],
            ),
        ),
        m.Metric(
            name="gc.pause",
            summary=m.Summary(
                data_points=[
                    m.SummaryDataPoint(
                        **common,
                        count=3,
                        sum=0.75,
                        quantile_values=[
                            m.SummaryDataPoint.ValueAtQuantile(quantile=0.5, value=0.2),
                            m.SummaryDataPoint.ValueAtQuantile(quantile=0.99, value=0.5),
                        ],
                    ),
                    m.SummaryDataPoint(time_unix_nano=T0),
                ]
            ),
        ),
    ]
    return ExportMetricsServiceRequest(
        resource_metrics=[
            m.ResourceMetrics(
                resource=resource("inventory", 3),
                schema_url="https://r",
                scope_metrics=[
                    m.ScopeMetrics(scope=scope(4), metrics=metrics, schema_url="https://s")
                ],
            ),
        ]
    )
