"""The generated ConnectorService code (from protos/, by `make proto`), and Arrow IPC framing."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import ModuleType

import pyarrow as pa

from otel_delta.errors import MissingDependencyError

CHUNK_BYTES = 1024 * 1024  # well under gRPC's default 4 MiB message limit
IPC_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # end-of-stream marker of the Arrow IPC format


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
    yield from _cut(schema.serialize().to_pybytes())
    for batch in batches:
        yield from _cut(batch.serialize().to_pybytes())
    yield IPC_END


def _cut(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), CHUNK_BYTES):
        yield data[start : start + CHUNK_BYTES]


def read_ipc(chunks: Iterable[bytes]) -> pa.Table:
    return pa.ipc.open_stream(b"".join(chunks)).read_all()
