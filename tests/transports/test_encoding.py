"""Content-Encoding: every encoding round-trips, and nothing inflates past the limit."""

from __future__ import annotations

import gzip
import zlib

import pytest
import zstandard

from otel_delta.errors import InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError
from otel_delta.transports.encoding import decompress

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
