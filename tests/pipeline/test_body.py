"""Request bodies (pipeline/body.py): every encoding round-trips, nothing inflates past the
limit, and a compressed body keeps the bytes as received for the write-ahead log."""

from __future__ import annotations

import asyncio
import gzip
import random
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from otel_delta.errors import InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError
from otel_delta.pipeline.body import (
    ENCODINGS,
    INLINE_BYTES,
    SNAPPY_FRAMED,
    Body,
    decompress,
    inflate_logged,
    logged_protobuf,
    receive_compressed,
)
from otel_delta.wal.record import ENCODINGS as LOGGED_ENCODINGS

BODY = b"otlp " * 1000
PACKERS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zlib": zlib.compress,
    "zstd": zstandard.ZstdCompressor().compress,
    # the Collector's otlphttp exporter: `snappy` a raw block (older versions framed),
    # `x-snappy-framed` framed, `lz4` LZ4 frames
    "snappy": lambda body: bytes(cramjam.snappy.compress_raw(body)),
    "x-snappy-framed": lambda body: bytes(cramjam.snappy.compress(body)),
    "lz4": lz4.frame.compress,
    "identity": lambda body: body,
    "": lambda body: body,
}


@pytest.mark.parametrize("encoding", PACKERS)
def test_round_trip(encoding: str) -> None:
    assert decompress(PACKERS[encoding](BODY), encoding.upper(), len(BODY)) == BODY


def test_snappy_is_a_raw_block_or_framed_whatever_the_name() -> None:
    """The Collector's receiver reads `snappy` either way (older exporters sent it framed)."""
    for name in ("snappy", "x-snappy-framed"):
        assert decompress(PACKERS["x-snappy-framed"](BODY), name, len(BODY)) == BODY
        assert decompress(PACKERS["snappy"](BODY), name, len(BODY)) == BODY


@pytest.mark.parametrize(
    "encoding", ["gzip", "deflate", "zstd", "snappy", "x-snappy-framed", "lz4", "identity"]
)
def test_one_byte_over_the_limit_is_too_large(encoding: str) -> None:
    with pytest.raises(RequestTooLargeError):
        decompress(PACKERS[encoding](BODY), encoding, len(BODY) - 1)


@pytest.mark.parametrize("encoding", ["gzip", "zstd", "snappy", "x-snappy-framed", "lz4"])
def test_a_bomb_stops_at_the_limit(encoding: str) -> None:
    # 256 MiB of zeros in ~250 KiB (gzip) or ~8 KiB (zstd)
    bomb = PACKERS[encoding](b"\0" * (256 * 1024 * 1024))
    tracemalloc.start()
    try:
        with pytest.raises(RequestTooLargeError):
            decompress(bomb, encoding, 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024  # about the limit, never the bomb's size


def test_concatenated_zstd_frames_and_skippable_frames() -> None:
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    zstd = zstandard.ZstdCompressor().compress
    assert decompress(zstd(b"ab") + skippable + zstd(BODY), "zstd", len(BODY) + 2) == b"ab" + BODY


def test_concatenated_lz4_frames() -> None:
    lz4s = lz4.frame.compress(b"ab") + lz4.frame.compress(BODY)
    assert decompress(lz4s, "lz4", len(BODY) + 2) == b"ab" + BODY


def test_concatenated_gzip_members() -> None:
    assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"


def test_a_member_whose_size_is_not_what_its_trailer_says_still_inflates_exactly() -> None:
    # each member is given the buffer its trailer announces: what follows a member (another
    # member, zero padding) makes the guess wrong, and the output must not suffer
    big = random.Random(7).randbytes(300_000) + BODY
    tail = gzip.compress(b"x")
    assert decompress(gzip.compress(big) + tail, "gzip", len(big) + 1) == big + b"x"
    assert decompress(gzip.compress(big) + b"\0" * 16, "gzip", len(big)) == big
    with pytest.raises(RequestTooLargeError):
        decompress(gzip.compress(big) + tail, "gzip", len(big))


def test_a_trailer_that_lies_is_no_bound() -> None:
    bomb = bytearray(gzip.compress(b"\0" * (64 * 1024 * 1024)))
    bomb[-4:] = (10).to_bytes(4, "little")  # "10 bytes": inflating must still stop at the limit
    with pytest.raises(RequestTooLargeError):
        decompress(bytes(bomb), "gzip", 1024 * 1024)
    small = bytearray(gzip.compress(BODY))
    small[-4:] = (3).to_bytes(4, "little")
    with pytest.raises(InvalidRequestError, match="cannot decompress"):  # zlib checks it
        decompress(bytes(small), "gzip", len(BODY))


def test_a_small_body_cannot_claim_a_large_buffer() -> None:
    liar = bytearray(gzip.compress(b"abc"))
    liar[-4:] = (15 * 1024 * 1024).to_bytes(4, "little")
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequestError):
            decompress(bytes(liar), "gzip", 64 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # what the body could expand to, not what it claims


def test_truncated_and_foreign_bodies() -> None:
    with pytest.raises(InvalidRequestError, match="truncated"):
        decompress(gzip.compress(BODY)[:-20], "gzip", len(BODY))
    zstd = zstandard.ZstdCompressor().compress
    for cut in (zstd(BODY)[:-3], zstd(BODY)[:6], zstd(b"ab") + zstd(BODY)[:-3]):
        with pytest.raises(InvalidRequestError, match="truncated"):
            decompress(cut, "zstd", len(BODY) + 2)
    with pytest.raises(InvalidRequestError, match="cannot decompress"):
        decompress(b"plain text", "zstd", 100)
    for encoding in ("snappy", "x-snappy-framed", "lz4"):
        packed = PACKERS[encoding](BODY)
        with pytest.raises(InvalidRequestError, match=r"truncated|cannot decompress"):
            decompress(packed[: len(packed) // 2], encoding, len(BODY))
        with pytest.raises(InvalidRequestError, match="cannot decompress"):
            decompress(b"plain text, long enough to look like something", encoding, 1000)
    framed = bytearray(PACKERS["x-snappy-framed"](BODY))
    framed[len(SNAPPY_FRAMED) + 4] ^= 0xFF  # the first chunk's CRC-32C, after its header
    with pytest.raises(InvalidRequestError, match="cannot decompress"):
        decompress(bytes(framed), "snappy", len(BODY))
    with pytest.raises(UnsupportedMediaTypeError, match="unsupported Content-Encoding 'br'"):
        decompress(b"", "br", 100)


@pytest.mark.parametrize("encoding", ["deflate", "zlib"])
def test_a_zlib_stream_asking_for_a_preset_dictionary_is_refused(encoding: str) -> None:
    """zlib-ng's decompressor raised SystemError for these (a 500 and a traceback per
    request); OTLP never uses a preset dictionary. Random bytes with the header's flag set
    are refused the same way, and so is such a stream after a good one."""
    packer = zlib.compressobj(zdict=b"service.name")
    asking = packer.compress(BODY) + packer.flush()
    rng = random.Random(5)
    noise = [bytes([0x78, 0xBB]) + rng.randbytes(40) for _ in range(20)]
    for body in (asking, *noise, zlib.compress(BODY) + asking):
        with pytest.raises(InvalidRequestError, match="preset dictionary"):
            decompress(body, encoding, 10 * len(BODY))


@pytest.mark.parametrize("encoding", [*ENCODINGS, "identity", ""])
@pytest.mark.parametrize("noise", [0, INLINE_BYTES * 2])  # on the loop, on a worker thread
def test_a_received_body_keeps_what_came_and_inflates_again_as_logged(
    encoding: str, noise: int
) -> None:
    protobuf = BODY + random.Random(3).randbytes(noise)
    sent = PACKERS[encoding](protobuf)
    body = asyncio.run(receive_compressed(sent, encoding.upper(), len(protobuf)))
    assert body.protobuf == protobuf
    if encoding in ("", "identity"):
        assert body == Body(protobuf) and body.logged is body.protobuf
        assert body.size == len(protobuf)
    else:
        assert body.received is sent and body.logged is sent
        assert body.size == len(protobuf) + len(sent)
    assert body.encoding in LOGGED_ENCODINGS  # the log has a flag for it
    assert inflate_logged(body.logged, body.encoding) == protobuf
    assert asyncio.run(logged_protobuf(body.logged, body.encoding)) == protobuf


def test_a_logged_body_inflates_whatever_the_request_limit() -> None:
    """Accepted once within the limit: replay never refuses it for its size."""
    big = gzip.compress(b"\0" * (8 * 1024 * 1024))
    assert len(inflate_logged(big, "gzip")) == 8 * 1024 * 1024
    with pytest.raises(InvalidRequestError):
        inflate_logged(gzip.compress(BODY)[:-20], "gzip")
