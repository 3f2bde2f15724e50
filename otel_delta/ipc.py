"""Arrow IPC streams: the one encoding used wherever Arrow tables cross a process boundary
(convert workers → server, Spark tasks → driver, ConnectorService → its clients)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

# end-of-stream marker of the Arrow IPC stream format
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def to_ipc(table: pa.Table) -> bytes:
    """One table as one self-contained IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes | pa.Buffer) -> pa.Table:
    """The table of one IPC stream (bytes, or an Arrow buffer without a copy)."""
    return pa.ipc.open_stream(data).read_all()


def ipc_stream(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """An IPC stream written incrementally: schema, each batch, end marker — for streaming
    a result whose batches are produced one at a time."""
    yield schema.serialize().to_pybytes()
    for batch in batches:
        yield batch.serialize().to_pybytes()
    yield END_OF_STREAM
