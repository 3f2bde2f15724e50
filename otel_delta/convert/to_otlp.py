"""Arrow rows → OTLP requests: the inverse of the converters.

Rows are regrouped by resource, scope and metric identity in first-seen order, so a request
whose resources, scopes and metrics are distinct comes back exactly as it went in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import EntityRef, InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otel_delta.convert.anyvalue import decode, decode_attributes
from otel_delta.convert.columns import enum_value
from otel_delta.convert.metrics import BY_DATA_FIELD

Row = dict[str, Any]
U64 = 1 << 64


def _u64(value: int | None) -> int:
    """Undo the bit-for-bit uint64 → int64 storage."""
    return (value or 0) % U64


def _attrs(row: Row, prefix: str = "") -> list:
    return decode_attributes(row[f"{prefix}attributes"], row[f"{prefix}attribute_types"])


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    return value


def _resource_key(row: Row) -> tuple:
    return tuple(_freeze(row[k]) for k in row if k.startswith("resource_"))


def _scope_key(row: Row) -> tuple:
    return tuple(_freeze(row[k]) for k in row if k.startswith("scope_"))


def _resource(row: Row) -> Resource:
    return Resource(
        attributes=_attrs(row, "resource_"),
        dropped_attributes_count=row["resource_dropped_attributes_count"],
        entity_refs=[EntityRef(**ref) for ref in row["resource_entity_refs"] or ()],
    )


def _scope(row: Row) -> InstrumentationScope:
    return InstrumentationScope(
        name=row["scope_name"],
        version=row["scope_version"],
        attributes=_attrs(row, "scope_"),
        dropped_attributes_count=row["scope_dropped_attributes_count"],
    )


class _Grouper:
    """Finds or creates the Resource*/Scope* container of a row, in first-seen order."""

    def __init__(self, resources: Any, scopes_field: str) -> None:
        self.resources = resources
        self.scopes_field = scopes_field
        self.by_resource: dict[tuple, tuple[Any, dict[tuple, Any]]] = {}

    def items(self, row: Row) -> Any:
        key = _resource_key(row)
        if key not in self.by_resource:
            container = self.resources.add(
                resource=_resource(row), schema_url=row["resource_schema_url"]
            )
            self.by_resource[key] = (container, {})
        container, scopes = self.by_resource[key]
        scope_key = _scope_key(row)
        if scope_key not in scopes:
            scopes[scope_key] = getattr(container, self.scopes_field).add(
                scope=_scope(row), schema_url=row["scope_schema_url"]
            )
        return scopes[scope_key]


def _id(hex_text: str | None) -> bytes:
    return bytes.fromhex(hex_text or "")


def _end_time(row: Row) -> int:
    """A span's OTLP end time: stored by schema version 1, `start + duration` since
    (tables/versions.py), both as uint64 bit patterns."""
    if row.get("end_time_unix_nano") is not None:
        return _u64(row["end_time_unix_nano"])
    return _u64((row["start_time_unix_nano"] or 0) + (row["duration_ns"] or 0))


def spans_from_arrow(table: pa.Table) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    grouper = _Grouper(request.resource_spans, "scope_spans")
    for row in table.to_pylist():
        scope_spans = grouper.items(row)
        scope_spans.spans.append(
            Span(
                trace_id=_id(row["trace_id"]),
                span_id=_id(row["span_id"]),
                parent_span_id=_id(row["parent_span_id"]),
                trace_state=row["trace_state"],
                flags=row["flags"],
                name=row["name"],
                kind=enum_value(Span.SpanKind, row["kind"]),
                start_time_unix_nano=_u64(row["start_time_unix_nano"]),
                end_time_unix_nano=_end_time(row),
                attributes=_attrs(row),
                dropped_attributes_count=row["dropped_attributes_count"],
                events=[
                    Span.Event(
                        time_unix_nano=_u64(e["time_unix_nano"]),
                        name=e["name"],
                        attributes=_attrs(e),
                        dropped_attributes_count=e["dropped_attributes_count"],
                    )
                    for e in row["events"] or ()
                ],
                dropped_events_count=row["dropped_events_count"],
                links=[
                    Span.Link(
                        trace_id=_id(link["trace_id"]),
                        span_id=_id(link["span_id"]),
                        trace_state=link["trace_state"],
                        flags=link["flags"],
                        attributes=_attrs(link),
                        dropped_attributes_count=link["dropped_attributes_count"],
                    )
                    for link in row["links"] or ()
                ],
                dropped_links_count=row["dropped_links_count"],
            )
        )
        code = enum_value(Status.StatusCode, row["status_code"])
        if code or row["status_message"]:  # an empty Status carries nothing
            scope_spans.spans[-1].status.CopyFrom(Status(code=code, message=row["status_message"]))
    return request


def logs_from_arrow(table: pa.Table) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    grouper = _Grouper(request.resource_logs, "scope_logs")
    for row in table.to_pylist():
        record = LogRecord(
            time_unix_nano=_u64(row["time_unix_nano"]),
            observed_time_unix_nano=_u64(row["observed_time_unix_nano"]),
            severity_number=row["severity_number"],
            severity_text=row["severity_text"],
            attributes=_attrs(row),
            dropped_attributes_count=row["dropped_attributes_count"],
            flags=row["flags"],
            trace_id=_id(row["trace_id"]),
            span_id=_id(row["span_id"]),
            event_name=row["event_name"],
        )
        if row["body"] is not None or row["body_type"] is not None:
            record.body.CopyFrom(decode(row["body"], row["body_type"]))
        grouper.items(row).log_records.append(record)
    return request


def _exemplars(row: Row) -> list[metrics_pb2.Exemplar]:
    out = []
    for e in row["exemplars"] or ():
        exemplar = metrics_pb2.Exemplar(
            filtered_attributes=decode_attributes(
                e["filtered_attributes"], e["filtered_attribute_types"]
            ),
            time_unix_nano=_u64(e["time_unix_nano"]),
            trace_id=_id(e["trace_id"]),
            span_id=_id(e["span_id"]),
        )
        if e["value_double"] is not None:
            exemplar.as_double = e["value_double"]
        elif e["value_int"] is not None:
            exemplar.as_int = e["value_int"]
        out.append(exemplar)
    return out


def _common_point(row: Row) -> dict[str, Any]:
    return {
        "attributes": _attrs(row),
        "start_time_unix_nano": _u64(row["start_time_unix_nano"]),
        "time_unix_nano": _u64(row["time_unix_nano"]),
        "flags": row["flags"],
        **({"exemplars": _exemplars(row)} if "exemplars" in row else {}),
    }


def _number_point(row: Row) -> metrics_pb2.NumberDataPoint:
    point = metrics_pb2.NumberDataPoint(**_common_point(row))
    if row["value_double"] is not None:
        point.as_double = row["value_double"]
    elif row["value_int"] is not None:
        point.as_int = row["value_int"]
    return point


def _optional(row: Row, *names: str) -> dict[str, Any]:
    return {name: row[name] for name in names if row[name] is not None}


def _histogram_point(row: Row) -> metrics_pb2.HistogramDataPoint:
    return metrics_pb2.HistogramDataPoint(
        **_common_point(row),
        count=_u64(row["count"]),
        bucket_counts=[_u64(c) for c in row["bucket_counts"] or ()],
        explicit_bounds=row["explicit_bounds"] or (),
        **_optional(row, "sum", "min", "max"),
    )


def _buckets(value: Row | None) -> dict[str, Any]:
    if value is None:
        return {}
    return {
        "offset": value["offset"],
        "bucket_counts": [_u64(c) for c in value["bucket_counts"] or ()],
    }


def _exponential_point(row: Row) -> metrics_pb2.ExponentialHistogramDataPoint:
    point = metrics_pb2.ExponentialHistogramDataPoint(
        **_common_point(row),
        count=_u64(row["count"]),
        scale=row["scale"],
        zero_count=_u64(row["zero_count"]),
        zero_threshold=row["zero_threshold"],
        **_optional(row, "sum", "min", "max"),
    )
    for side in ("positive", "negative"):
        if row[side] is not None:
            getattr(point, side).CopyFrom(
                metrics_pb2.ExponentialHistogramDataPoint.Buckets(**_buckets(row[side]))
            )
    return point


def _summary_point(row: Row) -> metrics_pb2.SummaryDataPoint:
    return metrics_pb2.SummaryDataPoint(
        **_common_point(row),
        count=_u64(row["count"]),
        sum=row["sum"],
        quantile_values=[
            metrics_pb2.SummaryDataPoint.ValueAtQuantile(**q) for q in row["quantile_values"] or ()
        ],
    )


POINT_BUILDERS = {
    "gauge": _number_point,
    "sum": _number_point,
    "histogram": _histogram_point,
    "exponential_histogram": _exponential_point,
    "summary": _summary_point,
}
METRIC_IDENTITY = (
    "metric_name",
    "metric_description",
    "metric_unit",
    "metric_metadata",
    "metric_metadata_types",
    "aggregation_temporality",
    "is_monotonic",
)


def metrics_from_arrow(tables: dict[str, pa.Table]) -> ExportMetricsServiceRequest:
    """Rebuild one request from the metrics tables (in POINT_TABLES order)."""
    request = ExportMetricsServiceRequest()
    grouper = _Grouper(request.resource_metrics, "scope_metrics")
    metrics: dict[tuple, metrics_pb2.Metric] = {}
    rows: Iterable[tuple[str, Row]] = (
        (field, row)
        for field, cls in BY_DATA_FIELD.items()
        if cls.table in tables
        for row in tables[cls.table].to_pylist()
    )
    for field, row in rows:
        scope_metrics = grouper.items(row)
        key = (id(scope_metrics), field, *(_freeze(row.get(k)) for k in METRIC_IDENTITY))
        metric = metrics.get(key)
        if metric is None:
            metric = scope_metrics.metrics.add(
                name=row["metric_name"],
                description=row["metric_description"],
                unit=row["metric_unit"],
                metadata=decode_attributes(row["metric_metadata"], row["metric_metadata_types"]),
            )
            data = getattr(metric, field)
            data.SetInParent()
            if "aggregation_temporality" in row:
                data.aggregation_temporality = enum_value(
                    metrics_pb2.AggregationTemporality, row["aggregation_temporality"]
                )
            if "is_monotonic" in row:
                data.is_monotonic = row["is_monotonic"]
            metrics[key] = metric
        getattr(metric, field).data_points.append(POINT_BUILDERS[field](row))
    return request
