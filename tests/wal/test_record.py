"""The record format: what is written reads back; damage costs the damaged bytes only, and
reading goes on at the next whole record after it."""

from __future__ import annotations

import zlib

import pytest

from otel_delta.errors import WalError
from otel_delta.wal.record import (
    CRC,
    ENCODINGS,
    HEADER,
    HEADER_BYTES,
    MAGIC,
    Record,
    header,
    scan,
)


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
    assert [r.position for r in found.records] == [1, 3]
    assert found.damage is not None and "checksum" in found.damage
    garbage = scan(encode(records(1)[0]) + b"\0" * 64)
    assert len(garbage.records) == 1 and "magic" in (garbage.damage or "")
    assert garbage.tail is not None and garbage.tail.start == len(encode(records(1)[0]))


def offsets(logged: list[Record]) -> list[int]:
    """Where each record starts in the encoded log, and (last) where the log ends."""
    starts = [0]
    for record in logged:
        starts.append(starts[-1] + record.size)
    return starts


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        (HEADER_BYTES + 3, "checksum"),  # a payload byte
        (0, "magic"),  # the magic
        (1, "magic"),
        (2, "checksum"),  # the signal code
        (4, "checksum"),  # the length, a little longer
        (7, "incomplete payload"),  # the length, past the end of the segment
        (12, "checksum"),  # the position
        (HEADER.size + 1, "checksum"),  # the CRC itself
    ],
)
def test_one_damaged_record_loses_that_record_only(where: int, problem: str) -> None:
    logged = records(20)
    starts = offsets(logged)
    data = bytearray(b"".join(encode(r) for r in logged))
    data[starts[4] + where] ^= 0x80  # inside record 5
    found = scan(bytes(data))
    assert found.records == logged[:4] + logged[5:]
    assert found.valid_bytes == len(data) and found.tail is None
    [damage] = found.damaged
    assert problem in damage.problem and damage.describe() == found.damage
    assert (damage.start, damage.end) == (starts[4], starts[5])
    assert (damage.previous, damage.following, damage.lost) == (4, 6, 1)


def test_a_record_cut_short_in_the_middle_loses_that_record_only() -> None:
    logged = records(10)
    starts = offsets(logged)
    whole = b"".join(encode(r) for r in logged)
    for kept in (1, HEADER_BYTES - 1, HEADER_BYTES + 2, logged[4].size - 1):
        data = whole[: starts[4] + kept] + whole[starts[5] :]
        found = scan(data)
        assert found.records == logged[:4] + logged[5:], kept
        assert found.tail is None
        [damage] = found.damaged
        assert (damage.start, damage.end, damage.lost) == (starts[4], starts[4] + kept, 1)


def test_garbage_between_records_is_skipped_and_loses_nothing() -> None:
    logged = records(6)
    starts = offsets(logged)
    whole = b"".join(encode(r) for r in logged)
    # garbage that looks like the start of a record: the magic, a length that fits
    garbage = (
        MAGIC.to_bytes(2, "little")
        + b"\x01\x00"
        + (8).to_bytes(4, "little")
        + bytes(50)
        + b"WO" * 40
    )
    data = whole[: starts[3]] + garbage + whole[starts[3] :]
    found = scan(data)
    assert found.records == logged and found.tail is None
    [damage] = found.damaged
    assert "checksum" in damage.problem
    assert (damage.start, damage.end, damage.lost) == (starts[3], starts[3] + len(garbage), 0)


def test_damage_then_a_torn_tail() -> None:
    logged = records(8)
    starts = offsets(logged)
    data = bytearray(b"".join(encode(r) for r in logged[:7]))
    data[starts[2] + HEADER_BYTES] ^= 0x01  # record 3
    data += encode(logged[7])[: HEADER_BYTES + 1]  # record 8, half written
    found = scan(bytes(data))
    assert found.records == logged[:2] + logged[3:7]
    assert found.valid_bytes == starts[7]  # what a cut keeps: record 7 and all before it
    middle, tail = found.damaged
    assert (middle.start, middle.end, middle.lost) == (starts[2], starts[3], 1)
    assert found.tail is tail and (tail.start, tail.end) == (starts[7], len(data))
    assert (tail.previous, tail.following, tail.lost) == (7, None, None)
    assert "incomplete" in tail.problem


def test_damage_at_the_start_of_a_segment_counts_from_its_first_position() -> None:
    logged = [Record(p, 1, b"payload %d" % p) for p in range(41, 46)]
    starts = offsets(logged)
    data = bytearray(b"".join(encode(r) for r in logged))
    data[starts[1] - 1] ^= 0x01  # the first record's last byte
    found = scan(bytes(data), first_position=41)
    assert found.records == logged[1:] and found.tail is None
    assert (found.damaged[0].previous, found.damaged[0].lost) == (40, 1)


def test_a_record_inside_a_damaged_payload_is_not_taken_for_the_next_record() -> None:
    """After damage the search looks inside the damaged record's payload, which holds the
    bytes a client sent: a whole record among them (a position far ahead) is not one of the
    log's, and taking it would make every real record after it look like a step back."""
    inner = encode(Record(10**6, 1, b"not a record of this log"))
    logged = [Record(1, 1, b"one"), Record(2, 1, b"two " + inner), Record(3, 1, b"three")]
    starts = offsets(logged)
    data = bytearray(b"".join(encode(r) for r in logged))
    data[starts[1] + 2] ^= 0x01  # record 2's signal code
    found = scan(bytes(data))
    assert [r.position for r in found.records] == [1, 3] and found.tail is None
    assert (found.damaged[0].end, found.damaged[0].lost) == (starts[2], 1)


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
