"""Records of a file written by the OpenTelemetry Collector's file exporter.

The exporter writes one Export*ServiceRequest per record:
- `format: json`: OTLP/JSON, one request per line;
- `format: proto`: protobuf, each message preceded by its length as a 4-byte big-endian uint32;
- `compression: zstd`: each message zstd-compressed and length-prefixed (JSON too), or — with
  the exporter's native-compression feature gate — the whole stream as one zstd stream.
Files compressed afterwards (gzip, zstd; e.g. by log rotation) are recognised by magic bytes.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

Format = Literal["auto", "otlp-json", "otlp-proto"]
FORMATS: tuple[str, ...] = ("auto", "otlp-json", "otlp-proto")

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LENGTH_BYTES = 4


class UnreadableFile(Exception):
    """The file as a whole cannot be read or decompressed (goes to dead letters)."""


@dataclass(frozen=True)
class Record:
    """One serialized request; `line` is set for OTLP/JSON lines."""

    offset: int
    payload: bytes
    line: int | None = None


@dataclass(frozen=True)
class BadRecord:
    offset: int
    reason: str
    raw: bytes
    line: int | None = None


def zstd_decompress(data: bytes) -> bytes:
    """zstd through pyarrow's codec (a stream reader, so the frame size need not be known)."""
    try:
        return pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableFile(f"invalid zstd data: {exc}") from None


def decompress(data: bytes) -> bytes:
    """Undo whole-file gzip or zstd (recognised by magic bytes); other data is returned as-is."""
    if data.startswith(GZIP_MAGIC):
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise UnreadableFile(f"invalid gzip data: {exc}") from None
    if data.startswith(ZSTD_MAGIC):
        return zstd_decompress(data)
    return data


def looks_like_json(data: bytes) -> bool:
    return data.lstrip()[:1] == b"{"


def json_lines(data: bytes) -> Iterator[Record | BadRecord]:
    offset = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            yield Record(offset, line, number)
        offset += len(line) + 1


def frames(data: bytes) -> Iterator[Record | BadRecord]:
    """Length-prefixed messages; a per-message zstd frame is decompressed."""
    offset = 0
    while offset < len(data):
        if len(data) - offset < LENGTH_BYTES:
            yield BadRecord(offset, "truncated length prefix at end of file", data[offset:])
            return
        size = int.from_bytes(data[offset : offset + LENGTH_BYTES], "big")
        start = offset + LENGTH_BYTES
        if start + size > len(data):
            reason = f"truncated message: length prefix says {size} bytes, {len(data) - start} left"
            yield BadRecord(offset, reason, data[offset:])
            return
        payload = data[start : start + size]
        if payload.startswith(ZSTD_MAGIC):
            try:
                payload = zstd_decompress(payload)
            except UnreadableFile as exc:
                yield BadRecord(offset, str(exc), payload)
                offset = start + size
                continue
        yield Record(offset, payload)
        offset = start + size


def records(data: bytes, fmt: Format) -> Iterator[Record | BadRecord]:
    """The records of a file's bytes (compressed or not) in the given format.

    OTLP/JSON is read as lines, or as length-prefixed messages when the file does not start
    with `{` (the exporter's legacy `compression: zstd` layout).
    """
    data = decompress(data)
    if fmt == "otlp-json" or (fmt == "auto" and looks_like_json(data)):
        yield from json_lines(data) if looks_like_json(data) else frames(data)
    else:
        yield from frames(data)
