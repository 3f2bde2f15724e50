"""otel-delta: an OpenTelemetry (OTLP/gRPC) bridge to Delta Lake tables."""

from otel_delta.errors import (
    BufferFullError,
    CommitError,
    ConfigError,
    InvalidRequestError,
    OtelDeltaError,
    ShuttingDownError,
)

__version__ = "0.1.0"

__all__ = [
    "BufferFullError",
    "CommitError",
    "ConfigError",
    "InvalidRequestError",
    "OtelDeltaError",
    "ShuttingDownError",
    "__version__",
]
