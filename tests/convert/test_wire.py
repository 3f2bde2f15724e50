"""The one varint reader (otel_delta/convert/wire.py): the UTF-8 repair's walk and the Parquet
bloom filter headers both read their numbers with it."""

from __future__ import annotations

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otel_delta.convert.wire import encode_varint, read_varint
from otel_delta.errors import MalformedVarintError

EDGES = [1, 127, 128, 300, 2**32 - 1, 2**35, 2**63, 2**64 - 1]


@pytest.mark.parametrize("value", EDGES)
def test_a_number_reads_back_as_protobuf_writes_it(value: int) -> None:
    # AnyValue's int64 field 3 (int_value): its key, then the varint (a negative number as
    # its two's complement: 10 bytes)
    signed = value - 2**64 if value >= 2**63 else value
    written = AnyValue(int_value=signed).SerializeToString()
    assert written[1:] == encode_varint(value)
    assert read_varint(b"\x00" + written[1:] + b"\x05", 1) == (value, len(written))


def test_zero_is_one_byte() -> None:  # proto3 leaves a zero field out: not compared above
    assert encode_varint(0) == b"\x00"
    assert read_varint(b"\x00", 0) == (0, 1)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "truncated"),
        (b"\x80\x80", "truncated"),  # ends while each byte says more follows
        (b"\xff" * 9 + b"\x02", "past 64 bits"),  # a 10th byte above 1: bit 64 set
        (b"\x80" * 10 + b"\x00", "past 64 bits"),  # more than 10 bytes, though of zeros
    ],
)
def test_a_number_cut_short_or_past_64_bits_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(MalformedVarintError, match=why):
        read_varint(data, 0)
