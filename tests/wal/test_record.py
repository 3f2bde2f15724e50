"""The record format: what is written reads back; damage ends the readable log."""

from __future__ import annotations

from otel_delta.wal.record import HEADER_BYTES, Record, header, scan


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
