"""Varints: the variable-length integers of protobuf's wire format, which Thrift's compact
protocol (a Parquet bloom filter's header, connector/bloom.py) writes the same way. The one
reader and writer of them, for the UTF-8 repair's walk (convert/utf8.py) and the bloom filter
headers alike; native/src/wire.rs is the native extension's reader, to the same rule.
"""

from __future__ import annotations

from otel_delta.errors import MalformedVarintError

MAX_VARINT_BYTES = 10  # a 64-bit number's longest form


def read_varint(data: bytes | memoryview, at: int) -> tuple[int, int]:
    """The varint at `at` and where it ends: at most 64 bits, as protobuf's parsers read one
    (a 10th byte above 1 would hold more). MalformedVarintError: `data` ends inside it, or it
    is longer."""
    value = byte = 0
    for shift in range(0, 7 * MAX_VARINT_BYTES, 7):
        if at >= len(data):
            raise MalformedVarintError("truncated: the data ends inside a number")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
    if byte >= 0x80 or value >> 64:
        raise MalformedVarintError("a number runs past 64 bits")
    return value, at


def encode_varint(value: int) -> bytes:
    """`value` (0 up to 2**64 - 1) as a varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
