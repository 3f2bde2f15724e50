"""Records of a file written by the OpenTelemetry Collector's file exporter.

The exporter writes one Export*ServiceRequest per record:
- `format: json`: OTLP/JSON, one request per line;
- `format: proto`: protobuf, each message preceded by its length as a 4-byte big-endian uint32;
- `compression: zstd`: each message zstd-compressed and length-prefixed (JSON too), or — with
  the exporter's native-compression feature gate — the whole stream as one zstd stream.
Files compressed afterwards (gzip, zstd; e.g. by log rotation) are recognised by magic bytes.
A gzip or zstd stream cut short (copied while written) gives the records before the cut, as a
plain file cut short does; what the cut left incomplete is a bad record.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import zstandard

Format = Literal["auto", "otlp-json", "otlp-proto"]
FORMATS: tuple[str, ...] = ("auto", "otlp-json", "otlp-proto")

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LENGTH_BYTES = 4
GZIP_CHUNK = 1 << 20  # decompressed bytes per read of a gzip stream


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


def gunzip(data: bytes) -> tuple[bytes, str | None]:
    """gzip (any number of members), and why it ends early or None.

    Decompressed a chunk at a time, so a stream cut short or corrupt at some point still gives
    everything before that point (`gzip.decompress` gives nothing then): the lines the
    exporter had written whole when the file was copied. Nothing at all is UnreadableFile.
    """
    chunks: list[bytes] = []
    reader = gzip.GzipFile(fileobj=io.BytesIO(data))
    try:
        while chunk := reader.read1(GZIP_CHUNK):  # read1: what is decoded before an error stays
            chunks.append(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        if not chunks:
            raise UnreadableFile(f"invalid gzip data: {exc}") from None
        return b"".join(chunks), f"invalid gzip data: {exc}"
    return b"".join(chunks), None


def unzstd(data: bytes) -> tuple[bytes, str | None]:
    """A whole-file zstd stream (any number of frames), and why it ends early or None.

    As `gunzip`: a stream cut short (the exporter's whole-stream compression, copied while it
    wrote, or left so by a crash) gives everything its whole blocks hold, where decompressing
    the stream at once gives nothing, and no run could ever load the lines before the cut.
    Nothing at all (a cut inside the first block) is UnreadableFile.
    """
    chunks: list[bytes] = []
    rest = data
    while rest:
        frame = zstandard.ZstdDecompressor().decompressobj()
        try:
            chunks.append(frame.decompress(rest))
        except zstandard.ZstdError as exc:
            why = f"invalid zstd data: {exc}"
            break
        if not frame.eof:
            why = "invalid zstd data: the stream ended before its frame did (cut short)"
            break
        rest = frame.unused_data
    else:
        return b"".join(chunks), None
    decoded = b"".join(chunks)
    if not decoded:
        raise UnreadableFile(why)
    return decoded, why


def decompress(data: bytes) -> tuple[bytes, str | None]:
    """Undo whole-file gzip or zstd (recognised by magic bytes); other data is returned as-is.

    Also returns why the data ends early (a gzip or zstd stream cut short), or None when it is
    whole.
    """
    if data.startswith(GZIP_MAGIC):
        return gunzip(data)
    if data.startswith(ZSTD_MAGIC):
        return unzstd(data)
    return data, None


def looks_like_json(data: bytes) -> bool:
    """Whether `data` begins, after any whitespace, with `{`: OTLP/JSON, a file of its lines or
    one record or Kafka message. Also true of a protobuf request whose first field is 123
    bytes long (b"\\n{": a newline and a brace), which only decoding tells apart
    (backfill/decode.py `decode_payload`, the one rule for a record or message)."""
    return data.lstrip()[:1] == b"{"


def json_lines(data: bytes, cut: str | None = None) -> Iterator[Record | BadRecord]:
    """One record per non-blank line, at its byte offset and line number.

    `cut`: why `data` ends early. What follows its last newline is then a bad record with that
    reason, at the offset and line where a plain file cut there has its unfinished line; it
    is empty when the cut fell between lines, and still says that the rest is missing.
    """
    offset = 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if cut is not None and number == len(lines):
            yield BadRecord(offset, cut, line, number)
        elif line.strip():
            yield Record(offset, line, number)
        offset += len(line) + 1


def frames(data: bytes, cut: str | None = None) -> Iterator[Record | BadRecord]:
    """Length-prefixed messages; a per-message zstd frame is decompressed.

    `cut`: why `data` ends early; it is the reason of the truncated last frame, or of an empty
    bad record at the end when the cut fell between frames.
    """
    because = f"{cut}; " if cut is not None else ""
    offset = 0
    while offset < len(data):
        if len(data) - offset < LENGTH_BYTES:
            reason = f"{because}truncated length prefix at end of file"
            yield BadRecord(offset, reason, data[offset:])
            return
        size = int.from_bytes(data[offset : offset + LENGTH_BYTES], "big")
        start = offset + LENGTH_BYTES
        if start + size > len(data):
            left = len(data) - start
            reason = f"{because}truncated message: length prefix says {size} bytes, {left} left"
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
    if cut is not None:
        yield BadRecord(offset, cut, b"")


def records(data: bytes, fmt: Format) -> Iterator[Record | BadRecord]:
    """The records of a file's bytes (compressed or not) in the given format.

    OTLP/JSON is read as lines, or as length-prefixed messages when the file does not start
    with `{` (the exporter's legacy `compression: zstd` layout).
    """
    data, cut = decompress(data)
    if fmt == "otlp-json" or (fmt == "auto" and looks_like_json(data)):
        yield from json_lines(data, cut) if looks_like_json(data) else frames(data, cut)
    else:
        yield from frames(data, cut)
