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
(skipping would drop an acknowledged request). Values 4 and 5 came
on 2026-11-28; the builds of 26 November and later refuse them so.

Little-endian. A record that is short, has another magic, or fails its CRC is damage, and costs
that record only. Reading resynchronises after it: from the next byte on it looks for an offset
where a whole valid record starts (the magic, a length that fits in the segment, the CRC, and
a position above the last good record's) and reads on from there; each skipped stretch is
reported (`Damage`: its bytes, and the positions lost when its neighbours are known). The
positions of a segment follow one another, so a record after n lost ones is n + 1 above the
last good one, and each lost record took at least one skipped byte: a candidate further ahead
is payload bytes that happen to look like a record (a client's request may hold anything),
and is passed over. A false match otherwise needs the magic and a CRC-32 to agree by chance,
one in 2**48 per offset. The search runs only after damage: an undamaged segment is read
record by record, as fast as before.

Damage with no valid record after it, at the end of the newest segment, is the torn tail of a
write that was never fsync'd (never answered): the log cuts it off (log.py). Damage followed
by valid records is never cut: the records after it were acknowledged.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from otel_delta.errors import WalError

MAGIC = 0x4F57
# the payload's compression, by flags value (pipeline/body.py names encodings the same way)
ENCODINGS = ("", "gzip", "deflate", "zstd", "snappy", "lz4")
HEADER = struct.Struct("<HBBIQ")  # magic, signal, flags, length, position
CRC = struct.Struct("<I")
HEADER_BYTES = HEADER.size + CRC.size
_FIELDS = struct.Struct("<HBBIQI")  # HEADER and CRC in one
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


MAGIC_BYTES = MAGIC.to_bytes(2, "little")  # what a resynchronising search looks for


@dataclass(frozen=True)
class Damage:
    """One damaged stretch of a segment: the bytes from a bad record to the next good one."""

    start: int  # offset of the first bad byte (where the last good record ended)
    end: int  # offset of the next good record; the segment's length when none follows
    problem: str  # what was wrong with the record at `start`
    previous: int | None  # position of the last good record before it (None: unknown)
    following: int | None  # position of the first good record after it (None: none follows)

    @property
    def lost(self) -> int | None:
        """Positions between the neighbouring good records (None: not known)."""
        if self.previous is None or self.following is None:
            return None
        return self.following - self.previous - 1

    def describe(self) -> str:
        return f"{self.problem} at byte {self.start}"


@dataclass(frozen=True)
class Scan:
    """What a scan of one segment's bytes found."""

    records: list[Record]  # every valid record, before and after damage
    valid_bytes: int  # bytes up to the end of the last good record
    damaged: list[Damage]  # in file order; the last one may run to the end (`tail`)

    @property
    def damage(self) -> str | None:
        """The first damage, said in words (None: the segment is whole)."""
        return self.damaged[0].describe() if self.damaged else None

    @property
    def tail(self) -> Damage | None:
        """Damage with no valid record after it: in the newest segment, a torn write."""
        if self.damaged and self.damaged[-1].following is None:
            return self.damaged[-1]
        return None


def scan(data: bytes, first_position: int | None = None) -> Scan:
    """The valid records of one segment, reading on after each damaged stretch.

    `first_position`: the position the segment is named by (its first record's), which tells
    the positions lost to damage at its very start."""
    records: list[Record] = []
    damaged: list[Damage] = []
    offset = valid = 0
    size = len(data)
    unpack, crc32, encodings = _FIELDS.unpack_from, zlib.crc32, ENCODINGS
    while offset < size:
        # the common case inline (a segment holds up to a million records): whole records
        if size - offset >= HEADER_BYTES:
            magic, code, flags, length, position, crc = unpack(data, offset)
            start = offset + HEADER_BYTES
            end = start + length
            if magic == MAGIC and end <= size and flags < len(encodings):
                payload = data[start:end]
                if crc32(payload, crc32(data[offset : offset + HEADER.size])) == crc:
                    records.append(Record(position, code, payload, encodings[flags]))
                    offset = valid = end
                    continue
        # damage (or a record of a newer version, which _read refuses)
        record, _, problem = _read(data, offset)
        assert record is None and problem is not None
        previous = records[-1].position if records else None  # the last good record
        if previous is None and first_position is not None:
            previous = first_position - 1
        found = _resync(data, offset, previous)
        if found is None:
            damaged.append(Damage(offset, size, problem, previous, None))
            break
        damaged.append(Damage(offset, found, problem, previous, _position(data, found)))
        offset = found
    return Scan(records, valid, damaged)


def _read(data: bytes, offset: int) -> tuple[Record | None, int, str | None]:
    """The record at `offset` and where it ends, or why there is none there."""
    if len(data) - offset < HEADER_BYTES:
        return None, offset, "incomplete header"
    magic, code, flags, length, position = HEADER.unpack_from(data, offset)
    if magic != MAGIC:
        return None, offset, "bad magic"
    start = offset + HEADER_BYTES
    end = start + length
    if end > len(data):
        return None, offset, "incomplete payload"
    (crc,) = CRC.unpack_from(data, offset + HEADER.size)
    payload = data[start:end]
    if zlib.crc32(payload, zlib.crc32(data[offset : offset + HEADER.size])) != crc:
        return None, offset, "checksum mismatch"
    if flags >= len(ENCODINGS):
        raise WalError(
            f"WAL record {position} has payload flags {flags}, which only a newer otel-delta "
            "writes; start that version to replay it"
        )
    return Record(position, code, payload, ENCODINGS[flags]), end, None


def _position(data: bytes, offset: int) -> int:
    return int(HEADER.unpack_from(data, offset)[4])


def _resync(data: bytes, start: int, previous: int | None) -> int | None:
    """The first offset after the bad record at `start` where a whole valid record starts
    whose position follows `previous`, or None. The cheap checks (magic, length, position)
    come before the CRC: bytes "WO" are common in telemetry, and the CRC of each costs its
    length."""
    size = len(data)
    offset = start + 1
    while True:
        candidate = data.find(MAGIC_BYTES, offset)
        if candidate < 0 or size - candidate < HEADER_BYTES:
            return None
        offset = candidate + 1
        _, _, _, length, position = HEADER.unpack_from(data, candidate)
        if candidate + HEADER_BYTES + length > size:
            continue
        # positions are consecutive in a segment and every lost record took at least one of
        # the skipped bytes: a position further on is payload bytes that look like a header
        if previous is not None and not previous < position <= previous + candidate - start + 1:
            continue
        if _read(data, candidate)[0] is not None:
            return candidate
