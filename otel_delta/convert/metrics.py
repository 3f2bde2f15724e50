"""ExportMetricsServiceRequest → the five `metrics_*` tables, one per data point type.

One `PointTable` per type shares the columns every point has (metric identity, times,
attributes, flags, exemplars); subclasses add only what their point type carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Exemplar, Metric

from otel_delta.convert.columns import (
    AttributeColumns,
    KeyRepeats,
    enum_name,
    enum_names,
    list_array,
    struct_array,
    timestamp_and_date,
    unsigned,
)
from otel_delta.convert.context import RowContext
from otel_delta.convert.ids import SPAN_ID_BYTES, TRACE_ID_BYTES, id_error
from otel_delta.convert.result import Converted, Rejections, build_table
from otel_delta.tables.schemas import BUCKETS, EXEMPLAR, METRICS_SUMMARY

TEMPORALITY_NAMES = enum_names(AggregationTemporality)


def point_error(point: Any) -> str | None:
    for exemplar in getattr(point, "exemplars", ()):
        error = id_error(exemplar.trace_id, TRACE_ID_BYTES, "exemplar trace_id", False) or id_error(
            exemplar.span_id, SPAN_ID_BYTES, "exemplar span_id", False
        )
        if error:
            return error
    return None


class MetricGroups:
    """Unique metric descriptors (name, description, unit, metadata) of one request."""

    def __init__(self, repeats: KeyRepeats) -> None:
        self.names: list[str] = []
        self.descriptions: list[str] = []
        self.units: list[str] = []
        self.metadata = AttributeColumns(repeats)

    def add(self, metric: Metric) -> int:
        self.names.append(metric.name)
        self.descriptions.append(metric.description)
        self.units.append(metric.unit)
        self.metadata.append(metric.metadata)
        return len(self.names) - 1

    def columns(self, row_index: pa.Array) -> dict[str, pa.Array]:
        metadata, metadata_types = self.metadata.arrays()
        unique = {
            "metric_name": pa.array(self.names, pa.string()),
            "metric_description": pa.array(self.descriptions, pa.string()),
            "metric_unit": pa.array(self.units, pa.string()),
            "metric_metadata": metadata,
            "metric_metadata_types": metadata_types,
        }
        return {name: pc.take(arr, row_index) for name, arr in unique.items()}


class ExemplarColumns:
    def __init__(self, repeats: KeyRepeats) -> None:
        self.offsets = [0]
        self.time: list[int] = []
        self.value_double: list[float | None] = []
        self.value_int: list[int | None] = []
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.attributes = AttributeColumns(repeats)

    def append(self, exemplars: Iterable[Exemplar]) -> None:
        for exemplar in exemplars:
            self.time.append(exemplar.time_unix_nano)
            kind = exemplar.WhichOneof("value")
            self.value_double.append(exemplar.as_double if kind == "as_double" else None)
            self.value_int.append(exemplar.as_int if kind == "as_int" else None)
            self.trace_id.append(exemplar.trace_id.hex())
            self.span_id.append(exemplar.span_id.hex())
            self.attributes.append(exemplar.filtered_attributes)
        self.offsets.append(len(self.time))

    def array(self) -> pa.Array:
        attrs, types = self.attributes.arrays()
        values = struct_array(
            {
                "time_unix_nano": unsigned(self.time),
                "value_double": pa.array(self.value_double, pa.float64()),
                "value_int": pa.array(self.value_int, pa.int64()),
                "trace_id": pa.array(self.trace_id, pa.string()),
                "span_id": pa.array(self.span_id, pa.string()),
                "filtered_attributes": attrs,
                "filtered_attribute_types": types,
            },
            EXEMPLAR,
        )
        return list_array(self.offsets, values)


class PointTable:
    """Rows of one metrics table; subclasses add their type's columns in `append_point`."""

    table: ClassVar[str]
    data_field: ClassVar[str]
    has_exemplars: ClassVar[bool] = True

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        self.rows = ctx.new_rows()
        self.metrics = metrics
        self.metric_index: list[int] = []
        self.start: list[int] = []
        self.time: list[int] = []
        self.attributes = AttributeColumns(ctx.repeats)
        self.flags: list[int] = []
        self.exemplars = ExemplarColumns(ctx.repeats)

    def append(self, metric: Metric, metric_index: int, rejected: Rejections) -> None:
        data = getattr(metric, self.data_field)
        for point in data.data_points:
            error = point_error(point)
            if error:
                rejected.add(error)
                continue
            self.rows.add_row()
            self.metric_index.append(metric_index)
            self.start.append(point.start_time_unix_nano)
            self.time.append(point.time_unix_nano)
            self.attributes.append(point.attributes)
            self.flags.append(point.flags)
            if self.has_exemplars:
                self.exemplars.append(point.exemplars)
            self.append_point(data, point)

    def append_point(self, data: Any, point: Any) -> None:
        raise NotImplementedError

    def point_columns(self) -> dict[str, pa.Array]:
        raise NotImplementedError

    def to_table(self) -> pa.Table | None:
        if not self.metric_index:
            return None
        nanos = unsigned(self.time)
        timestamp, date = timestamp_and_date(nanos)
        attrs, attr_types = self.attributes.arrays()
        columns = {
            "date": date,
            "time": timestamp,
            **self.metrics.columns(pa.array(self.metric_index, pa.int32())),
            "start_time_unix_nano": unsigned(self.start),
            "time_unix_nano": nanos,
            "attributes": attrs,
            "attribute_types": attr_types,
            "flags": pa.array(self.flags, pa.int64()),
            **self.point_columns(),
            **self.rows.columns(),
        }
        if self.has_exemplars:
            columns["exemplars"] = self.exemplars.array()
        return build_table(self.table, columns)


class GaugePoints(PointTable):
    table = "metrics_gauge"
    data_field = "gauge"

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        super().__init__(ctx, metrics)
        self.value_double: list[float | None] = []
        self.value_int: list[int | None] = []

    def append_point(self, data: Any, point: Any) -> None:
        kind = point.WhichOneof("value")
        self.value_double.append(point.as_double if kind == "as_double" else None)
        self.value_int.append(point.as_int if kind == "as_int" else None)

    def point_columns(self) -> dict[str, pa.Array]:
        return {
            "value_double": pa.array(self.value_double, pa.float64()),
            "value_int": pa.array(self.value_int, pa.int64()),
        }


class SumPoints(GaugePoints):
    table = "metrics_sum"
    data_field = "sum"

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        super().__init__(ctx, metrics)
        self.temporality: list[str] = []
        self.monotonic: list[bool] = []

    def append_point(self, data: Any, point: Any) -> None:
        super().append_point(data, point)
        self.temporality.append(enum_name(TEMPORALITY_NAMES, data.aggregation_temporality))
        self.monotonic.append(data.is_monotonic)

    def point_columns(self) -> dict[str, pa.Array]:
        return {
            **super().point_columns(),
            "aggregation_temporality": pa.array(self.temporality, pa.string()),
            "is_monotonic": pa.array(self.monotonic, pa.bool_()),
        }


class _Distribution(PointTable):
    """count, optional sum/min/max: shared by both histogram kinds."""

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        super().__init__(ctx, metrics)
        self.count: list[int] = []
        self.sum: list[float | None] = []
        self.min: list[float | None] = []
        self.max: list[float | None] = []
        self.temporality: list[str] = []

    def append_point(self, data: Any, point: Any) -> None:
        self.count.append(point.count)
        self.sum.append(point.sum if point.HasField("sum") else None)
        self.min.append(point.min if point.HasField("min") else None)
        self.max.append(point.max if point.HasField("max") else None)
        self.temporality.append(enum_name(TEMPORALITY_NAMES, data.aggregation_temporality))

    def point_columns(self) -> dict[str, pa.Array]:
        return {
            "count": unsigned(self.count),
            "sum": pa.array(self.sum, pa.float64()),
            "min": pa.array(self.min, pa.float64()),
            "max": pa.array(self.max, pa.float64()),
            "aggregation_temporality": pa.array(self.temporality, pa.string()),
        }


def _uint64_lists(offsets: list[int], flat: list[int]) -> pa.Array:
    return list_array(offsets, unsigned(flat))


class HistogramPoints(_Distribution):
    table = "metrics_histogram"
    data_field = "histogram"

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        super().__init__(ctx, metrics)
        self.counts_offsets = [0]
        self.counts: list[int] = []
        self.bounds: list[list[float]] = []

    def append_point(self, data: Any, point: Any) -> None:
        super().append_point(data, point)
        self.counts.extend(point.bucket_counts)
        self.counts_offsets.append(len(self.counts))
        self.bounds.append(list(point.explicit_bounds))

    def point_columns(self) -> dict[str, pa.Array]:
        return {
            **super().point_columns(),
            "bucket_counts": _uint64_lists(self.counts_offsets, self.counts),
            "explicit_bounds": pa.array(self.bounds, pa.list_(pa.float64())),
        }


class _BucketColumns:
    def __init__(self) -> None:
        self.present: list[bool] = []
        self.offset: list[int] = []
        self.counts_offsets = [0]
        self.counts: list[int] = []

    def append(self, point: Any, name: str) -> None:
        present = point.HasField(name)
        buckets = getattr(point, name)
        self.present.append(present)
        self.offset.append(buckets.offset)
        self.counts.extend(buckets.bucket_counts)
        self.counts_offsets.append(len(self.counts))

    def array(self) -> pa.Array:
        return struct_array(
            {
                "offset": pa.array(self.offset, pa.int32()),
                "bucket_counts": _uint64_lists(self.counts_offsets, self.counts),
            },
            BUCKETS,
            mask=pc.invert(pa.array(self.present, pa.bool_())),
        )


class ExponentialHistogramPoints(_Distribution):
    table = "metrics_exponential_histogram"
    data_field = "exponential_histogram"

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        super().__init__(ctx, metrics)
        self.scale: list[int] = []
        self.zero_count: list[int] = []
        self.zero_threshold: list[float] = []
        self.positive = _BucketColumns()
        self.negative = _BucketColumns()

    def append_point(self, data: Any, point: Any) -> None:
        super().append_point(data, point)
        self.scale.append(point.scale)
        self.zero_count.append(point.zero_count)
        self.zero_threshold.append(point.zero_threshold)
        self.positive.append(point, "positive")
        self.negative.append(point, "negative")

    def point_columns(self) -> dict[str, pa.Array]:
        return {
            **super().point_columns(),
            "scale": pa.array(self.scale, pa.int32()),
            "zero_count": unsigned(self.zero_count),
            "zero_threshold": pa.array(self.zero_threshold, pa.float64()),
            "positive": self.positive.array(),
            "negative": self.negative.array(),
        }


class SummaryPoints(PointTable):
    table = "metrics_summary"
    data_field = "summary"
    has_exemplars = False

    def __init__(self, ctx: RowContext, metrics: MetricGroups) -> None:
        super().__init__(ctx, metrics)
        self.count: list[int] = []
        self.sum: list[float] = []
        self.quantiles: list[list[dict[str, float]]] = []

    def append_point(self, data: Any, point: Any) -> None:
        self.count.append(point.count)
        self.sum.append(point.sum)
        self.quantiles.append(
            [{"quantile": q.quantile, "value": q.value} for q in point.quantile_values]
        )

    def point_columns(self) -> dict[str, pa.Array]:
        return {
            "count": unsigned(self.count),
            "sum": pa.array(self.sum, pa.float64()),
            "quantile_values": pa.array(
                self.quantiles, METRICS_SUMMARY.field("quantile_values").type
            ),
        }


POINT_TABLES: tuple[type[PointTable], ...] = (
    GaugePoints,
    SumPoints,
    HistogramPoints,
    ExponentialHistogramPoints,
    SummaryPoints,
)
BY_DATA_FIELD = {cls.data_field: cls for cls in POINT_TABLES}


def metrics_to_arrow(request: ExportMetricsServiceRequest) -> Converted:
    rejected = Rejections()
    ctx = RowContext(request)
    metrics = MetricGroups(ctx.repeats)
    builders = {field: cls(ctx, metrics) for field, cls in BY_DATA_FIELD.items()}
    for resource_metrics in request.resource_metrics:
        ctx.enter_resource(resource_metrics.resource, resource_metrics.schema_url)
        for scope_metrics in resource_metrics.scope_metrics:
            ctx.enter_scope(scope_metrics.scope, scope_metrics.schema_url)
            for metric in scope_metrics.metrics:
                data_field = metric.WhichOneof("data")
                # no data, or data of no points: nothing to store, said in partial_success
                if data_field is None or not getattr(metric, data_field).data_points:
                    rejected.note(f"metric {metric.name!r} has no data points and was dropped")
                    continue
                builders[data_field].append(metric, metrics.add(metric), rejected)
    ctx.repeats.note(rejected)
    tables = {}
    for builder in builders.values():
        table = builder.to_table()
        if table is not None:
            tables[builder.table] = table
    return Converted(tables, rejected)
