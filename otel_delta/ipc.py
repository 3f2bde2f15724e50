"""Arrow IPC streams: the one encoding used wherever Arrow tables cross a process boundary
(convert workers → server, Spark tasks → driver, ConnectorService → its clients) or wait on
local disk (compaction's spill files)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa


def to_ipc(table: pa.Table) -> bytes:
    """One table as one self-contained IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes | pa.Buffer) -> pa.Table:
    """The table of one IPC stream (bytes, or an Arrow buffer without a copy)."""
    return pa.ipc.open_stream(data).read_all()


class _Chunks:
    """A write-only file collecting what is written to it until taken."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def ipc_stream(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """An IPC stream written incrementally — schema, each batch, end marker — for streaming a
    result whose batches are produced one at a time. Written by Arrow's stream writer, so a
    dictionary column's dictionaries go before the batches that use them (a batch serialized
    on its own leaves them out, and the reader refuses the stream)."""
    chunks = _Chunks()
    with pa.ipc.new_stream(pa.PythonFile(chunks, mode="w"), schema) as writer:
        yield chunks.take()
        for batch in batches:
            writer.write_batch(batch)
            yield chunks.take()
    yield chunks.take()


def spill_writer(path: Path, schema: pa.Schema) -> pa.ipc.RecordBatchStreamWriter:
    """A new spill file at `path` taking tables of `schema` one at a time; its batches are
    zstd-compressed, since spilled rows are written once and read once and a local disk is
    slower than zstd."""
    sink = pa.OSFile(str(path), "wb")
    return pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(compression="zstd"))


def read_spill(path: Path) -> pa.Table:
    """All the rows of a spill file, read through a memory map."""
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()
