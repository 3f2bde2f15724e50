"""HTTP `Content-Encoding` of OTLP/HTTP bodies: gzip (the SDKs' and the Collector's default),
deflate/zlib and zstd (which the Collector's `otlphttp` exporter can be set to send).

Decompression stops as soon as the output passes the request limit, so a small compressed bomb
costs at most the limit in memory, never its expanded size.
"""

from __future__ import annotations

import io
import zlib

import zstandard

from otel_delta.errors import InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError

ENCODINGS = ("gzip", "deflate", "zlib", "zstd")
CHUNK = 1 << 20


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
