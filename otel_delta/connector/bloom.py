"""Parquet bloom filters: may a row group hold this trace id?

Files as ingestion writes them hold their rows in arrival order, so every row group's trace ids
span the whole range and their min/max rule nothing out; the bridge's writer gives them a
split-block bloom filter per row group on the layout's `bloom_columns` (tables/layout.py).
pyarrow writes these filters but has no reader for them, so this module reads them as the
Parquet format specifies (BloomFilter.md in apache/parquet-format): a Thrift compact-protocol
header, then a bitset of 32-byte blocks; a value is hashed with XXH64 (seed 0) over its plain
bytes (a string's bytes, without the length prefix), the hash's upper half picks a block and
its lower half sets one bit in each of the block's eight 32-bit words. A "no" is certain; a
"yes" is wrong for a share of absent values near the false-positive rate the writer chose.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from otel_delta.connector.predicates import And, Compare, In, Node, Or
from otel_delta.convert.wire import read_varint
from otel_delta.errors import MalformedVarintError

_MASK64 = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
# the eight odd constants of the split-block filter, one per word of a block
_SALT = (
    0x47B6137B,
    0x44974D91,
    0x8824AD5B,
    0xA2B7289D,
    0x705495C7,
    0x2DF1424B,
    0x9EFC4947,
    0x5C6BFB31,
)
_BLOCK_BYTES = 32
MAX_BITSET_BYTES = 128 * 1024 * 1024  # the largest filter writers make (Arrow's and Java's cap)
_HEADER_READ = 64  # bytes enough for a filter's header when the footer does not give its length
# Thrift compact protocol field types a BloomFilterHeader holds
_I32 = 5
_STRUCT = 12
_HEADER_DEPTH = 2  # the header, a union, the union's empty member struct
_FIRST_MEMBER: dict = {1: {}}  # a union holding its field 1, an empty struct


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK64


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK64
    return (_rotl(acc, 31) * _P1) & _MASK64


def _merge(acc: int, value: int) -> int:
    acc ^= _round(0, value)
    return (acc * _P1 + _P4) & _MASK64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of `data`: the hash the Parquet format names for its bloom filters."""
    length, at = len(data), 0
    if length >= 32:
        v1 = (seed + _P1 + _P2) & _MASK64
        v2 = (seed + _P2) & _MASK64
        v3 = seed
        v4 = (seed - _P1) & _MASK64
        while at + 32 <= length:
            a, b, c, d = struct.unpack_from("<4Q", data, at)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            at += 32
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK64
        for lane in (v1, v2, v3, v4):
            acc = _merge(acc, lane)
    else:
        acc = (seed + _P5) & _MASK64
    acc = (acc + length) & _MASK64
    while at + 8 <= length:
        (lane,) = struct.unpack_from("<Q", data, at)
        acc = (_rotl(acc ^ _round(0, lane), 27) * _P1 + _P4) & _MASK64
        at += 8
    if at + 4 <= length:
        (word,) = struct.unpack_from("<I", data, at)
        acc = (_rotl(acc ^ (word * _P1 & _MASK64), 23) * _P2 + _P3) & _MASK64
        at += 4
    while at < length:
        acc = (_rotl(acc ^ (data[at] * _P5 & _MASK64), 11) * _P1) & _MASK64
        at += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK64
    acc ^= acc >> 29
    acc = (acc * _P3) & _MASK64
    return acc ^ (acc >> 32)


@lru_cache(maxsize=1024)
def hash_value(value: Any) -> int | None:
    """The filter hash of a string value (None: not a type these filters are written for, or
    a string no file can hold, such as one with a lone surrogate); cached, as a lookup asks it
    of every file it opens."""
    if not isinstance(value, str):
        return None
    try:
        return xxh64(value.encode())
    except UnicodeEncodeError:
        return None


def may_contain(bitset: bytes, hashed: int) -> bool:
    """Whether a split-block filter may hold the value of hash `hashed`."""
    blocks = len(bitset) // _BLOCK_BYTES
    if blocks == 0:
        return True
    block = (((hashed >> 32) * blocks) >> 32) * _BLOCK_BYTES
    key = hashed & 0xFFFFFFFF
    words = struct.unpack_from("<8I", bitset, block)
    return all(
        word >> (((key * salt) & 0xFFFFFFFF) >> 27) & 1
        for word, salt in zip(words, _SALT, strict=True)
    )


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A compact-protocol varint (protobuf's encoding: convert/wire.py), failing as the
    header's other faults do."""
    try:
        return read_varint(data, at)
    except MalformedVarintError as exc:
        raise ValueError(f"bloom filter header: {exc}") from None


Struct = dict[int, "int | Struct"]


def _read_struct(data: bytes, at: int, depth: int = 0) -> tuple[Struct, int]:
    """One compact-protocol struct at `at`: its i32 fields and nested structs by field id,
    and where it ends. A BloomFilterHeader holds only those (its unions are structs of empty
    structs), two levels deep: anything deeper is not a header."""
    if depth > _HEADER_DEPTH:
        raise ValueError("a bloom filter header nested too deep")
    fields: Struct = {}
    field = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated bloom filter header")
        head = data[at]
        at += 1
        kind = head & 0x0F
        if kind == 0:  # stop
            return fields, at
        if head >> 4:
            field += head >> 4
        else:  # a long-form field id follows
            raw, at = _varint(data, at)
            field = (raw >> 1) ^ -(raw & 1)
        if kind == _I32:
            raw, at = _varint(data, at)
            fields[field] = (raw >> 1) ^ -(raw & 1)
        elif kind == _STRUCT:
            fields[field], at = _read_struct(data, at, depth + 1)
        else:
            raise ValueError(f"unexpected field type {kind} in a bloom filter header")


def parse_header(data: bytes) -> tuple[int, int]:
    """(bitset bytes, header bytes) of a BloomFilterHeader at the start of `data`. Field 1 is
    the bitset's size; algorithm, hash and compression (fields 2-4) are unions, and this
    reader knows the first member of each (split-block, XXH64, uncompressed): a filter made
    otherwise would answer wrong, so its header is refused."""
    fields, at = _read_struct(data, 0)
    bitset = fields.get(1)
    if not isinstance(bitset, int) or bitset < 0:
        raise ValueError("bloom filter header without its size")
    for field, what in ((2, "algorithm"), (3, "hash"), (4, "compression")):
        if fields.get(field) != _FIRST_MEMBER:
            raise ValueError(f"bloom filter of an unknown {what}")
    return bitset, at


def read_bitset(source: Any, offset: int, length: int | None) -> bytes | None:
    """The bitset of the filter at `offset` of an open Parquet file (`read_at`), or None when
    it cannot be read as a split-block filter (the caller then reads the row group).
    `length`: the header's and bitset's bytes together, as the footer gives them (None or 0:
    not given); a header that disagrees with it is damaged."""
    if length is not None and not 0 <= length <= MAX_BITSET_BYTES + _HEADER_READ:
        return None
    try:
        head = source.read_at(length or _HEADER_READ, offset)
        size, header = parse_header(head)
        if size < _BLOCK_BYTES or size % _BLOCK_BYTES or size > MAX_BITSET_BYTES:
            return None  # not a split-block bitset: a damaged or foreign header
        if length:
            return head[header:] if header + size == len(head) == length else None
        bitset = source.read_at(size, offset + header)
        return bitset if len(bitset) == size else None
    except (ValueError, OSError):
        return None


def may_hold(node: Node, probe: Callable[[str, Any], bool | None]) -> bool:
    """False only when the filters rule out every row: `probe(column, value)` answers whether
    a filter on `column` may hold `value` (None: no filter). Only `column = value` and
    `column IN (...)` terms are probed; every other term may hold."""
    if isinstance(node, And):
        return all(may_hold(item, probe) for item in node.items)
    if isinstance(node, Or):
        return any(may_hold(item, probe) for item in node.items)
    if isinstance(node, Compare) and node.op == "=" and node.column.key is None:
        return probe(node.column.name, node.value.value) is not False
    if isinstance(node, In) and not node.negated and node.column.key is None:
        return any(probe(node.column.name, v.value) is not False for v in node.values)
    return True
