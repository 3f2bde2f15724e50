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


def test_a_header_naming_an_impossible_size_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "odd.parquet"
    # field 1 (i32) = 40 bytes, then the stop of the header: not a whole number of blocks
    path.write_bytes(bytes([0x15, 80, 0x00]) + b"\xff" * 40)
    with pa.OSFile(str(path)) as source:
        assert parse_header(path.read_bytes()) == (40, 3)
        assert read_bitset(source, 0, None) is None
