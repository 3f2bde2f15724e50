"""The record format: what is written reads back; damage ends the readable log."""

from __future__ import annotations

import zlib

import pytest

from otel_delta.errors import WalError
from otel_delta.wal.record import CRC, ENCODINGS, HEADER, HEADER_BYTES, MAGIC, Record, header, scan


def encode(record: Record) -> bytes:
    """The record as the log writes it: its header, then its payload as it is."""
    return header(record) + record.payload


def records(n: int) -> list[Record]:
    return [Record(i, 1 + i % 3, f"payload {i}".encode() * i) for i in range(1, n + 1)]


def test_records_read_back_exactly() -> None:
    data = b"".join(encode(r) for r in records(5))
    found = scan(data)
    assert found.records == records(5)
    assert found.valid_bytes == len(data) and found.damage is None


def test_a_torn_tail_ends_the_log_at_the_last_whole_record() -> None:
    whole = b"".join(encode(r) for r in records(3))
    last = encode(Record(4, 1, b"x" * 100))
    for cut in (1, HEADER_BYTES - 1, HEADER_BYTES + 10, len(last) - 1):
        found = scan(whole + last[:cut])
        assert found.records == records(3), cut
        assert found.valid_bytes == len(whole)
        assert found.damage is not None and "incomplete" in found.damage


def test_a_flipped_bit_or_foreign_bytes_are_detected() -> None:
    data = bytearray(b"".join(encode(r) for r in records(3)))
    second = len(encode(records(3)[0]))
    data[second + HEADER_BYTES + 2] ^= 0x01  # inside the second record's payload
    found = scan(bytes(data))
    assert [r.position for r in found.records] == [1]
    assert found.damage is not None and "checksum" in found.damage
    garbage = scan(encode(records(1)[0]) + b"\0" * 64)
    assert len(garbage.records) == 1 and "magic" in (garbage.damage or "")


def test_the_payload_encoding_is_in_the_flags_and_an_old_record_reads_as_plain() -> None:
    logged = [Record(i + 1, 1, b"payload", encoding) for i, encoding in enumerate(ENCODINGS)]
    data = b"".join(encode(r) for r in logged)
    assert scan(data).records == logged
    # a record of a log written before the flags were used: its flags byte is 0
    assert data[3] == 0 and scan(data[: len(encode(logged[0]))]).records[0].encoding == ""
    second = len(encode(logged[0]))
    assert data[second + 3] == ENCODINGS.index("gzip")


def test_a_record_of_a_newer_version_is_refused_not_skipped() -> None:
    """A reserved flags value: raising keeps the record (and those after it) for the version
    that wrote it, where treating it as damage would cut the log there."""
    record = Record(1, 1, b"payload")
    fields = bytearray(HEADER.pack(MAGIC, 1, len(ENCODINGS), len(record.payload), 1))
    crc = CRC.pack(zlib.crc32(record.payload, zlib.crc32(bytes(fields))))
    data = encode(Record(0, 1, b"first")) + bytes(fields) + crc + record.payload
    with pytest.raises(WalError, match="newer otel-delta"):
        scan(data)
