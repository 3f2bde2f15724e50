"""Content-Encoding (HTTP) and gRPC's per-message compression: every encoding round-trips,
and nothing inflates past the limit."""

from __future__ import annotations

import asyncio
import gzip
import random
import zlib

import pytest
import zstandard

from otel_delta.errors import InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError
from otel_delta.transports.encoding import (
    INLINE_BYTES,
    decompress,
    grpc_message,
    message_encoding,
)
from tests.corpus import trace_request

BODY = b"otlp " * 1000
PACKERS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zlib": zlib.compress,
    "zstd": zstandard.ZstdCompressor().compress,
    "identity": lambda body: body,
    "": lambda body: body,
}


@pytest.mark.parametrize("encoding", PACKERS)
def test_round_trip(encoding: str) -> None:
    assert decompress(PACKERS[encoding](BODY), encoding.upper(), len(BODY)) == BODY


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd", "identity"])
def test_one_byte_over_the_limit_is_too_large(encoding: str) -> None:
    with pytest.raises(RequestTooLargeError):
        decompress(PACKERS[encoding](BODY), encoding, len(BODY) - 1)


def test_a_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (256 * 1024 * 1024))  # 256 MiB of zeros in ~250 KiB
    with pytest.raises(RequestTooLargeError):
        decompress(bomb, "gzip", 1024 * 1024)


def test_concatenated_gzip_members() -> None:
    assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"


def test_truncated_and_foreign_bodies() -> None:
    with pytest.raises(InvalidRequestError, match="truncated"):
        decompress(gzip.compress(BODY)[:-20], "gzip", len(BODY))
    with pytest.raises(InvalidRequestError, match="cannot decompress"):
        decompress(b"plain text", "zstd", 100)
    with pytest.raises(UnsupportedMediaTypeError, match="snappy"):
        decompress(b"", "snappy", 100)


REQUEST = trace_request().SerializeToString()


def test_a_grpc_message_is_told_by_its_first_bytes() -> None:
    assert message_encoding(gzip.compress(REQUEST)) == "gzip"
    assert message_encoding(zlib.compress(REQUEST)) == "deflate"
    assert message_encoding(REQUEST) == ""
    assert message_encoding(b"") == ""


@pytest.mark.parametrize("pack", [gzip.compress, zlib.compress, lambda body: body])
@pytest.mark.parametrize("noise", [0, INLINE_BYTES * 2])  # on the loop, on a worker thread
def test_grpc_messages_inflate(pack, noise: int) -> None:
    body = REQUEST + random.Random(7).randbytes(noise)  # noise does not compress
    assert asyncio.run(grpc_message(pack(body), len(body))) == body


def test_a_plain_message_that_begins_like_zlib_is_left_to_the_decoder() -> None:
    """0x78 0x9c is also a field-15 tag and a varint: not zlib, so passed on as it is."""
    odd = b"\x78\x9c" + b"\x01" * 30
    assert message_encoding(odd) == "deflate"
    assert asyncio.run(grpc_message(odd, 100)) == odd


def test_a_compressed_grpc_message_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    with pytest.raises(RequestTooLargeError):
        asyncio.run(grpc_message(bomb, 1024 * 1024))
    with pytest.raises(InvalidRequestError, match="truncated"):
        asyncio.run(grpc_message(gzip.compress(REQUEST)[:-8], len(REQUEST)))
