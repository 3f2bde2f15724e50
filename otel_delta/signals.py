"""The three OTLP signals, described once: everything that differs between traces, metrics and
logs is data here, so the pipeline, the transports, backfill and the connector's upsert are one
piece of code each, for all three.

A new signal (e.g. profiles) is one more `Signal` entry plus its converter and tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace

from otel_delta.convert import Converted, logs_to_arrow, metrics_to_arrow, spans_to_arrow
from otel_delta.tables import TABLES_OF_SIGNAL


@dataclass(frozen=True)
class Signal:
    name: str  # "traces", "metrics", "logs" (also the converter workers' key)
    code: int  # its id in persisted records (the WAL): stable, never reused
    tables: tuple[str, ...]  # the tables its rows go to
    request: type[Message]  # Export<Signal>ServiceRequest
    response: type[Message]  # Export<Signal>ServiceResponse
    convert: Callable[[Message], Converted]  # the Python (reference) converter
    rejected_field: str  # the counter in <Response>.partial_success
    # a row's time (ns), first set first: its `date` partition and `timestamp_column` come from
    # it (as the converters compute them); the connector's upsert derives them the same way
    time_columns: tuple[str, ...]
    timestamp_column: str  # the TIMESTAMP column of that time
    grpc_service: str  # fully qualified gRPC service name
    http_path: str  # the OTLP/HTTP path

    def response_for(self, rejected: int, error_message: str) -> Message:
        """The Export response; `partial_success` is filled only when items were rejected."""
        response = self.response()
        if rejected or error_message:
            partial = response.partial_success  # type: ignore[attr-defined]
            setattr(partial, self.rejected_field, rejected)
            partial.error_message = error_message
        return response


SIGNALS: tuple[Signal, ...] = (
    Signal(
        name="traces",
        code=1,
        tables=TABLES_OF_SIGNAL["traces"],
        request=trace.ExportTraceServiceRequest,
        response=trace.ExportTraceServiceResponse,
        convert=spans_to_arrow,  # type: ignore[arg-type]
        rejected_field="rejected_spans",
        time_columns=("start_time_unix_nano",),
        timestamp_column="start_time",
        grpc_service="opentelemetry.proto.collector.trace.v1.TraceService",
        http_path="/v1/traces",
    ),
    Signal(
        name="metrics",
        code=2,
        tables=TABLES_OF_SIGNAL["metrics"],
        request=metrics.ExportMetricsServiceRequest,
        response=metrics.ExportMetricsServiceResponse,
        convert=metrics_to_arrow,  # type: ignore[arg-type]
        rejected_field="rejected_data_points",
        time_columns=("time_unix_nano",),
        timestamp_column="time",
        grpc_service="opentelemetry.proto.collector.metrics.v1.MetricsService",
        http_path="/v1/metrics",
    ),
    Signal(
        name="logs",
        code=3,
        tables=TABLES_OF_SIGNAL["logs"],
        request=logs.ExportLogsServiceRequest,
        response=logs.ExportLogsServiceResponse,
        convert=logs_to_arrow,  # type: ignore[arg-type]
        rejected_field="rejected_log_records",
        time_columns=("time_unix_nano", "observed_time_unix_nano"),  # observed when time is 0
        timestamp_column="time",
        grpc_service="opentelemetry.proto.collector.logs.v1.LogsService",
        http_path="/v1/logs",
    ),
)

SIGNALS_BY_NAME = {signal.name: signal for signal in SIGNALS}
SIGNALS_BY_CODE = {signal.code: signal for signal in SIGNALS}


def signal_of_request(request: Message) -> Signal | None:
    """The signal an Export*ServiceRequest belongs to (None for any other message)."""
    return next((s for s in SIGNALS if isinstance(request, s.request)), None)


def signal_of_table(table_name: str) -> Signal:
    """The signal whose rows a table holds."""
    return next(s for s in SIGNALS if table_name in s.tables)
