"""One WAL record on disk: a fixed header with a CRC-32, then the payload.

    magic   u16  0x4F57 ("OW")
    signal  u8   Signal.code of the request's signal
    flags   u8   how the payload is compressed: 0 plain protobuf, 1 gzip, 2 deflate (zlib),
                 3 zstd, 4 snappy (a raw block or framed), 5 lz4 (frames); the other values
                 are reserved
    length  u32  payload bytes
    position u64 the record's place in the log (strictly increasing, never reused)
    crc     u32  CRC-32 of the 16 header bytes above and the payload
    payload      the Export request as the client sent it: protobuf, compressed or not

Logs written before the flags were used hold 0 there, and read as plain protobuf. A record with
a reserved value comes from a newer otel-delta: it is refused with WalError, never skipped
(skipping would drop an acknowledged request and every record after it). Values 4 and 5 came
on 2026-11-28; the builds of 26 November and later refuse them so.

Little-endian. A record that is short, has another magic, or fails its CRC ends the readable
log: after a crash that is the torn tail of a write that was never fsync'd (never answered).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from otel_delta.errors import WalError

MAGIC = 0x4F57
# the payload's compression, by flags value (pipeline/body.py names encodings the same way)
ENCODINGS = ("", "gzip", "deflate", "zstd", "snappy", "lz4")
HEADER = struct.Struct("<HBBIQ")  # magic, signal, flags, length, position
CRC = struct.Struct("<I")
HEADER_BYTES = HEADER.size + CRC.size
MAX_PAYLOAD = 2**32 - 1


@dataclass(frozen=True)
class Record:
    position: int
    signal_code: int
    payload: bytes
    encoding: str = ""  # of the payload: one of ENCODINGS

    @property
    def size(self) -> int:
        return HEADER_BYTES + len(self.payload)


def header(record: Record) -> bytes:
    """The record's HEADER_BYTES (its CRC included): written before the payload, which is
    written as it is (a 4 MB request is not copied to make one record of it)."""
    if len(record.payload) > MAX_PAYLOAD:
        raise ValueError(f"WAL payload of {len(record.payload)} bytes is too large")
    flags = ENCODINGS.index(record.encoding)
    fields = HEADER.pack(MAGIC, record.signal_code, flags, len(record.payload), record.position)
    return fields + CRC.pack(zlib.crc32(record.payload, zlib.crc32(fields)))


@dataclass(frozen=True)
class Scan:
    """What a scan of one segment's bytes found."""

    records: list[Record]
    valid_bytes: int  # bytes up to the end of the last good record
    damage: str | None  # why the scan stopped early (None: it reached the end cleanly)


def scan(data: bytes) -> Scan:
    """The records of one segment, up to the first damaged or incomplete one."""
    records: list[Record] = []
    offset = 0
    damage = None
    for record, end, problem in _walk(data):
        if problem is not None:
            damage = f"{problem} at byte {offset}"
            break
        assert record is not None
        records.append(record)
        offset = end
    return Scan(records, offset, damage)


def _walk(data: bytes) -> Iterator[tuple[Record | None, int, str | None]]:
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER_BYTES:
            yield None, offset, "incomplete header"
            return
        magic, code, flags, length, position = HEADER.unpack_from(data, offset)
        if magic != MAGIC:
            yield None, offset, "bad magic"
            return
        start = offset + HEADER_BYTES
        end = start + length
        if end > len(data):
            yield None, offset, "incomplete payload"
            return
        (crc,) = CRC.unpack_from(data, offset + HEADER.size)
        payload = data[start:end]
        header = data[offset : offset + HEADER.size]
        if zlib.crc32(payload, zlib.crc32(header)) != crc:
            yield None, offset, "checksum mismatch"
            return
        if flags >= len(ENCODINGS):
            raise WalError(
                f"WAL record {position} has payload flags {flags}, which only a newer otel-delta "
                "writes; start that version to replay it"
            )
        yield Record(position, code, payload, ENCODINGS[flags]), end, None
        offset = end
