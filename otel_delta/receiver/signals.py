"""The three OTLP Export services, described once so one handler serves them all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace

from otel_delta.convert import Converted, logs_to_arrow, metrics_to_arrow, spans_to_arrow


@dataclass(frozen=True)
class Signal:
    name: str
    service: str  # fully qualified gRPC service name
    request: type[Message]
    response: type[Message]
    convert: Callable[[Message], Converted]
    rejected_field: str  # the counter in <Response>.partial_success

    def response_for(self, converted: Converted) -> Message:
        response = self.response()
        if converted.rejected.messages:
            partial = response.partial_success  # type: ignore[attr-defined]
            setattr(partial, self.rejected_field, converted.rejected.count)
            partial.error_message = converted.rejected.error_message
        return response


SIGNALS: tuple[Signal, ...] = (
    Signal(
        "traces",
        "opentelemetry.proto.collector.trace.v1.TraceService",
        trace.ExportTraceServiceRequest,
        trace.ExportTraceServiceResponse,
        spans_to_arrow,  # type: ignore[arg-type]
        "rejected_spans",
    ),
    Signal(
        "metrics",
        "opentelemetry.proto.collector.metrics.v1.MetricsService",
        metrics.ExportMetricsServiceRequest,
        metrics.ExportMetricsServiceResponse,
        metrics_to_arrow,  # type: ignore[arg-type]
        "rejected_data_points",
    ),
    Signal(
        "logs",
        "opentelemetry.proto.collector.logs.v1.LogsService",
        logs.ExportLogsServiceRequest,
        logs.ExportLogsServiceResponse,
        logs_to_arrow,  # type: ignore[arg-type]
        "rejected_log_records",
    ),
)

SIGNALS_BY_NAME = {signal.name: signal for signal in SIGNALS}
