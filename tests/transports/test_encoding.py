"""gRPC's per-message compression (transports/encoding.py): a message is told by its first
bytes, inflated within the limit, and kept as it came for the write-ahead log."""

from __future__ import annotations

import asyncio
import gzip
import random
import zlib

import pytest

from otel_delta.errors import InvalidRequestError, RequestTooLargeError
from otel_delta.pipeline.body import INLINE_BYTES, Body
from otel_delta.transports.encoding import grpc_message, message_encoding
from tests.corpus import trace_request

REQUEST = trace_request().SerializeToString()


def test_a_grpc_message_is_told_by_its_first_bytes() -> None:
    assert message_encoding(gzip.compress(REQUEST)) == "gzip"
    assert message_encoding(zlib.compress(REQUEST)) == "deflate"
    assert message_encoding(REQUEST) == ""
    assert message_encoding(b"") == ""


@pytest.mark.parametrize(
    ("pack", "encoding"), [(gzip.compress, "gzip"), (zlib.compress, "deflate"), (None, "")]
)
@pytest.mark.parametrize("noise", [0, INLINE_BYTES * 2])  # on the loop, on a worker thread
def test_grpc_messages_inflate(pack, encoding: str, noise: int) -> None:
    body = REQUEST + random.Random(7).randbytes(noise)  # noise does not compress
    message = pack(body) if pack else body
    received = asyncio.run(grpc_message(message, len(body)))
    assert received.protobuf == body and received.encoding == encoding
    assert received.logged == message  # the log keeps the message as it came


def test_a_plain_message_that_begins_like_zlib_is_left_to_the_decoder() -> None:
    """0x78 0x9c is also a field-15 tag and a varint: not zlib, so passed on as it is."""
    odd = b"\x78\x9c" + b"\x01" * 30
    assert message_encoding(odd) == "deflate"
    assert asyncio.run(grpc_message(odd, 100)) == Body(odd)


def test_a_compressed_grpc_message_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    with pytest.raises(RequestTooLargeError):
        asyncio.run(grpc_message(bomb, 1024 * 1024))
    with pytest.raises(InvalidRequestError, match="truncated"):
        asyncio.run(grpc_message(gzip.compress(REQUEST)[:-8], len(REQUEST)))
