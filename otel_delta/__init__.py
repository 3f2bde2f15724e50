"""otel-delta: an OpenTelemetry (OTLP/gRPC) bridge to Delta Lake tables."""

from typing import TYPE_CHECKING, Any

from otel_delta.errors import (
    BufferFullError,
    CommitError,
    ConcurrentModificationError,
    ConfigError,
    InvalidPredicateError,
    InvalidRequestError,
    OtelDeltaError,
    PartitionNotFoundError,
    SchemaMismatchError,
    ShuttingDownError,
    StoreUnavailableError,
    TableNotFoundError,
)

if TYPE_CHECKING:
    from otel_delta.connector import DeltaConfig, DeltaLakeConnector

__version__ = "0.1.0"

__all__ = [
    "BufferFullError",
    "CommitError",
    "ConcurrentModificationError",
    "ConfigError",
    "DeltaConfig",
    "DeltaLakeConnector",
    "InvalidPredicateError",
    "InvalidRequestError",
    "OtelDeltaError",
    "PartitionNotFoundError",
    "SchemaMismatchError",
    "ShuttingDownError",
    "StoreUnavailableError",
    "TableNotFoundError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # the connector pulls in delta-rs and the writer: load it only when asked for
    if name in ("DeltaLakeConnector", "DeltaConfig"):
        from otel_delta import connector

        return getattr(connector, name)
    raise AttributeError(f"module 'otel_delta' has no attribute {name!r}")
