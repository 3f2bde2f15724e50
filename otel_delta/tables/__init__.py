"""The telemetry tables: names, schemas and Delta table properties, defined once."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from otel_delta.tables import schemas
from otel_delta.tables.layout import LOG_LAYOUT, METRIC_LAYOUT, SPAN_LAYOUT, Layout


@dataclass(frozen=True)
class TableSpec:
    """One Delta table the bridge writes."""

    name: str
    schema: pa.Schema
    description: str
    layout: Layout = METRIC_LAYOUT


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec("spans", schemas.SPANS, "OpenTelemetry spans, one row per span", SPAN_LAYOUT),
        TableSpec(
            "logs", schemas.LOGS, "OpenTelemetry log records, one row per record", LOG_LAYOUT
        ),
        TableSpec("metrics_gauge", schemas.METRICS_GAUGE, "Gauge data points"),
        TableSpec("metrics_sum", schemas.METRICS_SUM, "Sum (counter) data points"),
        TableSpec("metrics_histogram", schemas.METRICS_HISTOGRAM, "Histogram data points"),
        TableSpec(
            "metrics_exponential_histogram",
            schemas.METRICS_EXPONENTIAL_HISTOGRAM,
            "Exponential histogram data points",
        ),
        TableSpec("metrics_summary", schemas.METRICS_SUMMARY, "Summary data points"),
    )
}

# the tables of each signal (the signal registry and the native converter both need them)
TABLES_OF_SIGNAL: dict[str, tuple[str, ...]] = {
    "traces": ("spans",),
    "logs": ("logs",),
    "metrics": tuple(name for name in TABLES if name.startswith("metrics_")),
}

DEFAULT_PARTITION_BY = ("service_name", "date")


def partitionable_columns() -> set[str]:
    """String or date columns present in every table: what `partition_by` may name."""
    common: set[str] | None = None
    for spec in TABLES.values():
        names = {
            f.name for f in spec.schema if pa.types.is_string(f.type) or pa.types.is_date(f.type)
        }
        common = names if common is None else common & names
    return common or set()


__all__ = [
    "DEFAULT_PARTITION_BY",
    "TABLES",
    "TABLES_OF_SIGNAL",
    "Layout",
    "TableSpec",
    "partitionable_columns",
    "schemas",
]
