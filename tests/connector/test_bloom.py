"""Our reader of Parquet bloom filters against the filters pyarrow's writer makes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from otel_delta.connector.bloom import (
    hash_value,
    may_contain,
    may_hold,
    parse_header,
    read_bitset,
    xxh64,
)
from otel_delta.connector.predicates import parse_predicate

ROWS_PER_GROUP = 2_000


def ids(seed: str, count: int) -> list[str]:
    """Trace ids as the tables hold them: 32 lowercase hex digits, deterministic."""
    return [hashlib.sha256(f"{seed}-{i}".encode()).hexdigest()[:32] for i in range(count)]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xEF46DB3751D8E999),
        (b"a", 0xD24EC4F1A98C6E5B),
        (b"abc", 0x44BC2CF5AD770999),
        (b"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1),  # past 32 bytes
    ],
)
def test_xxh64_gives_the_reference_hashes(data: bytes, expected: int) -> None:
    assert xxh64(data) == expected


def _filters(path: Path) -> list[bytes | None]:
    metadata = pq.read_metadata(path)
    with pa.OSFile(str(path)) as source:
        return [
            read_bitset(
                source,
                metadata.row_group(g).column(0).bloom_filter_offset,
                metadata.row_group(g).column(0).bloom_filter_length,
            )
            for g in range(metadata.num_row_groups)
        ]


def test_every_written_id_is_found_and_absent_ids_mostly_are_not(tmp_path: Path) -> None:
    written = ids("written", 5_000)
    path = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table({"trace_id": written}),
        path,
        row_group_size=ROWS_PER_GROUP,
        bloom_filter_options={"trace_id": {"ndv": ROWS_PER_GROUP, "fpp": 0.05}},
    )
    filters = _filters(path)
    assert len(filters) == 3 and all(f is not None for f in filters)
    absent = ids("absent", 2_000)
    for g, bitset in enumerate(filters):
        assert bitset is not None
        group = written[g * ROWS_PER_GROUP : (g + 1) * ROWS_PER_GROUP]
        assert all(may_contain(bitset, xxh64(i.encode())) for i in group)
        false_positives = sum(may_contain(bitset, xxh64(i.encode())) for i in absent)
        assert false_positives < 0.1 * len(absent)  # written for 5%


def test_a_header_that_cannot_be_read_leaves_the_row_group_to_be_read(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="truncated"):
        parse_header(b"\x15")
    path = tmp_path / "short.parquet"
    path.write_bytes(b"\x15\x80")  # a size whose varint never ends
    with pa.OSFile(str(path)) as source:
        assert read_bitset(source, 0, 2) is None


def test_only_equality_and_in_terms_are_asked_of_the_filters() -> None:
    schema = pa.schema([("trace_id", pa.string()), ("name", pa.string())])
    held = {"a" * 32}

    def probe(column: str, value: object) -> bool | None:
        return value in held if column == "trace_id" else None

    def holds(where: str) -> bool:
        return may_hold(parse_predicate(where, schema).node, probe)

    assert holds(f"trace_id = '{'a' * 32}'")
    assert not holds(f"trace_id = '{'b' * 32}'")
    assert not holds(f"trace_id = '{'b' * 32}' AND name = 'x'")
    assert holds(f"trace_id = '{'b' * 32}' OR name = 'x'")
    assert holds(f"trace_id IN ('{'b' * 32}', '{'a' * 32}')")
    assert not holds(f"trace_id IN ('{'b' * 32}', '{'c' * 32}')")
    assert holds(f"trace_id NOT IN ('{'a' * 32}')")  # not a lookup: nothing ruled out
    assert holds(f"trace_id != '{'b' * 32}'")
    assert holds("name = 'x'")  # no filter on it


def test_only_strings_are_hashed() -> None:
    assert hash_value("abc") == xxh64(b"abc")
    assert hash_value(42) is None
    assert hash_value("\ud800") is None  # not UTF-8: no filter is asked


# a header's unions (algorithm, hash, compression) each holding its first member
KNOWN_UNIONS = b"\x1c\x1c\x00\x00" * 3


def header(size: int, unions: bytes = KNOWN_UNIONS) -> bytes:
    """A BloomFilterHeader in the compact protocol: field 1 (i32) the bitset's size, then the
    three unions and the stop."""
    zigzag = size << 1
    varint = bytearray()
    while zigzag >= 0x80:
        varint.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    varint.append(zigzag)
    return b"\x15" + bytes(varint) + unions + b"\x00"


def _bitset(data: bytes, length: int | None) -> bytes | None:
    return read_bitset(pa.BufferReader(data), 0, length)


def test_the_header_pyarrow_writes_is_the_one_parsed(tmp_path: Path) -> None:
    path = tmp_path / "one.parquet"
    pq.write_table(
        pa.table({"trace_id": ids("one", 10)}),
        path,
        bloom_filter_options={"trace_id": {"ndv": 10, "fpp": 0.05}},
    )
    chunk = pq.read_metadata(path).row_group(0).column(0)
    data = path.read_bytes()[chunk.bloom_filter_offset :]
    size, length = parse_header(data)
    assert data[:length] == header(size)


def test_a_header_naming_an_impossible_size_is_not_read() -> None:
    data = header(40) + b"\xff" * 40  # not a whole number of 32-byte blocks
    assert parse_header(data) == (40, len(header(40)))
    assert _bitset(data, None) is None


def test_a_header_disagreeing_with_the_footers_length_is_not_read() -> None:
    # the header says 1,024 bytes, the footer 512 and its header: reading 1,024 would take
    # the next filter's bytes for this one's, and could rule out a value it holds
    data = header(1024) + bytes(512) + b"\xff" * 512
    assert _bitset(data, len(header(1024)) + 512) is None
    assert _bitset(data, len(data)) == data[len(header(1024)) :]
    assert _bitset(data, -1) is None
    assert _bitset(data, 1 << 40) is None


@pytest.mark.parametrize(
    ("unions", "what"),
    [
        (b"\x1c\x2c\x00\x00" + KNOWN_UNIONS[4:], "algorithm"),  # a member but the first
        (KNOWN_UNIONS[:4] + b"\x1c\x2c\x00\x00" + KNOWN_UNIONS[8:], "hash"),
        (KNOWN_UNIONS[:8] + b"\x1c\x2c\x00\x00", "compression"),
        (KNOWN_UNIONS[:8], "compression"),  # left out
    ],
)
def test_a_filter_made_another_way_is_refused(unions: bytes, what: str) -> None:
    data = header(32, unions) + bytes(32)
    with pytest.raises(ValueError, match=f"unknown {what}"):
        parse_header(data)
    assert _bitset(data, len(data)) is None


@pytest.mark.parametrize(
    "data",
    [
        b"\x1c" * 2_000,  # structs inside structs
        b"\x15" + b"\xff" * 200_000 + b"\x00",  # a number that never ends
    ],
)
def test_a_malformed_header_is_refused_at_once(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_header(data)
    assert _bitset(data, len(data)) is None


def test_a_header_holding_a_number_past_64_bits_is_refused() -> None:
    # a field the reader does not look at (5, an i32) holding a 10-byte varint whose last
    # byte is 2: no writer makes it (Thrift's i32 is 5 bytes at most), protobuf's rule refuses it
    data = header(32)[:-1] + b"\x15" + b"\xff" * 9 + b"\x02" + b"\x00" + bytes(32)
    with pytest.raises(ValueError, match="past 64 bits"):
        parse_header(data)
    assert _bitset(data, len(data)) is None
