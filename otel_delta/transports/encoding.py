"""Compressed request bodies, decompressed here for both transports.

- OTLP/HTTP: the `Content-Encoding` — gzip (the SDKs' and the Collector's default),
  deflate/zlib and zstd (which the Collector's `otlphttp` exporter can be set to send).
- OTLP/gRPC: the server leaves gRPC's per-message compression (gzip, deflate) to us
  (`grpc_message`): gRPC would inflate each message on its own thread and then copy the
  inflated bytes, several times, into a Python object on the event loop; here the loop copies
  only the compressed bytes, and the inflating runs on a worker thread without the GIL.

Decompression stops as soon as the output passes the request limit, so a small compressed bomb
costs at most the limit in memory, never its expanded size.
"""

from __future__ import annotations

import asyncio
import io
import zlib

import zstandard

from otel_delta.errors import InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError

ENCODINGS = ("gzip", "deflate", "zlib", "zstd")
CHUNK = 1 << 20
# smaller bodies are decompressed on the event loop: a thread hop would cost more
INLINE_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(
        f"decompressed request is over the limit of {limit} bytes "
        "(receiver.max_receive_message_bytes)"
    )


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    """gzip (one or more members) or zlib, at most `limit` bytes of output."""
    out = bytearray()
    data = body
    while data:
        inflater = zlib.decompressobj(wbits)
        chunk = inflater.decompress(data, limit + 1 - len(out))
        out += chunk
        if len(out) > limit or inflater.unconsumed_tail:
            raise _too_large(limit)
        if not inflater.eof:
            raise InvalidRequestError("truncated compressed body")
        data = inflater.unused_data.lstrip(b"\0")  # gzip members may follow, padded
    return bytes(out)


def _unzstd(body: bytes, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True)
    out = bytearray()
    while chunk := reader.read(CHUNK):
        out += chunk
        if len(out) > limit:
            raise _too_large(limit)
    return bytes(out)


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body without its `Content-Encoding` ("" or "identity": as is)."""
    encoding = encoding.strip().lower()
    try:
        if encoding in ("", "identity"):
            decoded = body
        elif encoding == "gzip":
            decoded = _inflate(body, 16 + zlib.MAX_WBITS, limit)
        elif encoding in ("deflate", "zlib"):
            decoded = _inflate(body, zlib.MAX_WBITS, limit)
        elif encoding == "zstd":
            decoded = _unzstd(body, limit)
        else:
            raise UnsupportedMediaTypeError(
                f"unsupported Content-Encoding {encoding!r}; use one of {', '.join(ENCODINGS)}"
            )
    except (zlib.error, zstandard.ZstdError) as exc:
        raise InvalidRequestError(f"cannot decompress the {encoding} body: {exc}") from None
    if len(decoded) > limit:
        raise _too_large(limit)
    return decoded


async def decompress_off_loop(body: bytes, encoding: str, limit: int) -> bytes:
    """`decompress`, on a worker thread unless the body is small (zlib and zstd let go of the
    GIL while they work)."""
    if not encoding or len(body) <= INLINE_BYTES:
        return decompress(body, encoding, limit)
    return await asyncio.to_thread(decompress, body, encoding, limit)


def message_encoding(message: bytes) -> str:
    """How a gRPC request message is compressed, from its first bytes: "gzip", "deflate" (a
    zlib stream, as gRPC's deflate sends it) or "" (plain protobuf). An OTLP request never
    begins like gzip (0x1f would be a tag of wire type 7, which does not exist); one that
    begins like a zlib header (0x78, a tag of field 15, which no Export request has) is taken
    as plain protobuf if it does not inflate (see `grpc_message`)."""
    if message[:2] == GZIP_MAGIC:
        return "gzip"
    if len(message) >= 2 and message[0] == 0x78 and int.from_bytes(message[:2]) % 31 == 0:
        return "deflate"
    return ""


async def grpc_message(message: bytes, limit: int) -> bytes:
    """A gRPC request message as protobuf bytes, inflated if the client compressed it."""
    encoding = message_encoding(message)
    try:
        return await decompress_off_loop(message, encoding, limit)
    except InvalidRequestError:
        if encoding == "deflate":
            return message  # not zlib after all: the decoder judges the bytes
        raise
