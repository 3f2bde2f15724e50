"""The front doors: transports that carry OTLP requests to the pipeline and its answers back."""

from otel_delta.transports.grpc import GrpcTransport
from otel_delta.transports.http import HttpTransport

__all__ = ["GrpcTransport", "HttpTransport"]
