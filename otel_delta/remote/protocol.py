"""The generated ConnectorService code (from protos/, by `make proto`), and Arrow IPC framing."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import ModuleType

import pyarrow as pa

from otel_delta.errors import MissingDependencyError
from otel_delta.ipc import from_ipc, ipc_stream

CHUNK_BYTES = 1024 * 1024  # well under gRPC's default 4 MiB message limit


def generated() -> tuple[ModuleType, ModuleType]:
    """(connector_pb2, connector_pb2_grpc); a clear error if `make proto` has not run."""
    try:
        from otel_delta._generated.connector.v1 import connector_pb2, connector_pb2_grpc
    except ImportError as exc:
        raise MissingDependencyError(
            f"connector_service: generated gRPC code is missing ({exc}); run `make proto`"
        ) from None
    return connector_pb2, connector_pb2_grpc


def ipc_chunks(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """An Arrow IPC stream (schema, batches, end marker) cut into chunks of at most CHUNK_BYTES."""
    for part in ipc_stream(schema, batches):
        for start in range(0, len(part), CHUNK_BYTES):
            yield part[start : start + CHUNK_BYTES]


def read_ipc(chunks: Iterable[bytes]) -> pa.Table:
    return from_ipc(b"".join(chunks))
