"""A request's body as the pipeline takes it: its protobuf bytes, and — when the client
compressed them — the bytes as they came, which are what the write-ahead log keeps.

Decompression is here, once, for both transports and for the log's replay:
- OTLP/HTTP's `Content-Encoding`: gzip (the SDKs' and the Collector's default), and every other
  compression the Collector's `otlphttp` exporter can be set to send: deflate/zlib, zstd,
  snappy (a raw block, or the framing format as older Collectors sent it),
  x-snappy-framed and lz4 (frames);
- OTLP/gRPC's per-message compression (gzip, deflate), which the server leaves to us
  (transports/encoding.py tells it from the message's first bytes). gRPC's C core knows no
  other `grpc-encoding`: a Collector's `otlp` exporter set to zstd or snappy is answered
  INTERNAL by it before a request reaches us (the README says to use OTLP/HTTP for those).

Decompression stops as soon as the output passes the request limit, so a small compressed bomb
costs at most the limit in memory, never its expanded size.

Why the log keeps the compressed bytes: under the Collector's load (gzip, 8,192 spans a
request) a request is 4.2 MB as protobuf and 0.5 MB as sent, so the log writes, checksums and
fsyncs an eighth of the bytes, holds eight times the requests in `wal.max_bytes`, and the
request's protobuf is let go of once converted instead of once logged. Replay inflates again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import cramjam
import lz4.frame
import zstandard
from zlib_ng import zlib_ng

from otel_delta.convert.utf8 import StringRepairs
from otel_delta.errors import InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError

ENCODINGS = ("gzip", "deflate", "zlib", "zstd", "snappy", "x-snappy-framed", "lz4")
CHUNK = 1 << 20
GZIP_TRAILER = 8  # CRC-32 and the member's size modulo 2**32, little-endian
DEFLATE_MAX_RATIO = 1032  # deflate's output is at most this many times its input
ZSTD_MAX_RATIO = 1 << 15  # a 4-byte zstd block (RLE) stands for up to 128 KiB
ZSTD_MIN_SLICE = 64
# the stream identifier chunk every snappy framed stream begins with
SNAPPY_FRAMED = b"\xff\x06\x00\x00sNaPpY"
# smaller bodies are decompressed on the event loop: a thread hop would cost more
INLINE_BYTES = 64 * 1024
ZLIB_FDICT = 0x20  # the flag of a zlib header's second byte: a preset dictionary is needed


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError.over_limit(limit, "decompressed request")


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    """gzip (one or more members) or zlib, at most `limit` bytes of output. One member, as
    clients send it, is returned as zlib made it: gathering it in a bytearray and copying
    that out cost 1.6 ms of a Collector-like 4.2 MB request's 6.4 ms.

    zlib-ng does the inflating: the same streams, zlib's API, in half the time (the bench's
    Collector-like gzip requests, one thread: 0.22 against 0.45 µs per span; perf had put
    zlib's inflate at 12% of the bridge's CPU under the traces load).

    Each member is inflated into a buffer of the size it is expected to have (`_expected`),
    allocated once: the decompressor object of zlib's API starts at 16 KiB and doubles,
    copying what it has into fresh memory each time, and under the traces load that copying
    took a third of the bridge's page faults (perf)."""
    return _frames(
        body,
        limit,
        lambda: zlib_ng._ZlibDecompressor(wbits),
        lambda data: _expected(_without_preset_dictionary(data, wbits), wbits),
        lambda rest: rest.lstrip(b"\0"),  # gzip members may follow, padded
    )


def _without_preset_dictionary(data: bytes, wbits: int) -> bytes:
    """`data`, unless it is a zlib stream asking for a preset dictionary, which OTLP never
    uses and which zlib-ng's decompressor object answers with a SystemError (zlib_ng 1.1:
    "returned NULL without setting an exception") instead of an error of its own."""
    if wbits <= zlib_ng.MAX_WBITS and len(data) >= 2 and data[1] & ZLIB_FDICT:
        raise InvalidRequestError(
            "cannot decompress the deflate body: it asks for a preset dictionary"
        )
    return data


class _Decoder(Protocol):
    """A streaming decoder of one frame (a gzip member, a zlib stream, an LZ4 frame), as
    zlib's and lz4's decompressor objects both are."""

    eof: bool
    needs_input: bool
    unused_data: bytes

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _frames(
    body: bytes,
    limit: int,
    decoder: Callable[[], _Decoder],
    first_step: Callable[[bytes], int],
    rest: Callable[[bytes], bytes] = lambda data: data,
) -> bytes:
    """Every frame of `body`, decoded one after another, at most `limit` bytes of output:
    each frame's first step asks for `first_step(data)` bytes (what it is expected to make),
    and later steps grow, never past the limit. A frame cut short is "truncated compressed
    body"; `rest` is what follows a frame, as the next one begins."""
    parts: list[bytes] = []
    size = 0
    data = body
    while data:
        frame = decoder()
        room = limit + 1 - size  # one byte more than the limit allows tells "too large"
        chunk = frame.decompress(data, min(room, first_step(data)))
        parts.append(chunk)
        size += len(chunk)
        # output still held back (the guess was short): take it in growing steps
        while not frame.eof and not frame.needs_input and size <= limit:
            chunk = frame.decompress(b"", min(limit + 1 - size, max(size, CHUNK)))
            if not chunk:
                break  # no progress: answered as a truncated body below, never a spin
            parts.append(chunk)
            size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not frame.eof:
            raise InvalidRequestError("truncated compressed body")
        data = rest(frame.unused_data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _expected(data: bytes, wbits: int) -> int:
    """The output size to allocate for the member at the start of `data`, plus one byte (so
    the stream's end fits and is seen). A gzip member ends with its size modulo 2**32 (the
    last member's, if several follow: a guess either way, never trusted as a bound), and no
    more than deflate's largest ratio is believed, so a small body cannot claim a large
    buffer; zlib streams say nothing, and OTLP compresses about eightfold."""
    if wbits > zlib_ng.MAX_WBITS and len(data) >= GZIP_TRAILER:
        return min(int.from_bytes(data[-4:], "little"), DEFLATE_MAX_RATIO * len(data)) + 1
    return 8 * len(data) + 1


def _unzstd(body: bytes, limit: int) -> bytes:
    """Every zstd frame of `body`, at most `limit` bytes of output. A frame cut short is an
    error, as a gzip member cut short is: zstd's stream reader ends quietly where the bytes
    end, so a truncated body used to be accepted as whatever its finished blocks held (often
    nothing: an empty request, answered 200, its telemetry lost). Each frame is fed to a
    decompressor in slices small enough that even zstd's largest ratio cannot take the
    output far past the limit (`_zstd_slice`), and must reach its end."""
    parts: list[bytes] = []
    size = 0
    position = 0
    while position < len(body):
        frame = zstandard.ZstdDecompressor().decompressobj(write_size=CHUNK)
        while not frame.eof:
            if position >= len(body):
                raise InvalidRequestError("truncated compressed body")
            fed = body[position : position + _zstd_slice(limit + 1 - size)]
            chunk = frame.decompress(fed)
            position += len(fed)
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
        position -= len(frame.unused_data)  # the next frame begins in what was fed
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_slice(room: int) -> int:
    """Compressed bytes to feed at once with `room` bytes of output left: a zstd block of
    4 bytes (an RLE block) can stand for 128 KiB, so a slice of room / 2^15 bytes cannot
    expand past the room by more than a few blocks (2 MiB at the smallest slice)."""
    return max(ZSTD_MIN_SLICE, room // ZSTD_MAX_RATIO)


def _unsnappy(body: bytes, limit: int) -> bytes:
    """A snappy body, at most `limit` bytes of output: the framing format when it begins with
    its stream identifier, else one raw block. The Collector's `otlphttp` exporter sends
    `snappy` as a raw block, and framed in versions before its 2025 fix (collector#12911); its
    receiver tells them apart the same way. Both say their output's size before any of it is
    made (a raw block in its first bytes, a framed stream in each chunk's), so nothing past
    the limit is allocated."""
    if body.startswith(SNAPPY_FRAMED):
        if _snappy_framed_size(body) > limit:
            raise _too_large(limit)
        return bytes(cramjam.snappy.decompress(body))  # checks each chunk's CRC-32C
    if cramjam.snappy.decompress_raw_len(body) > limit:
        raise _too_large(limit)
    return bytes(cramjam.snappy.decompress_raw(body))


def _snappy_framed_size(body: bytes) -> int:
    """The output size of a snappy framed stream, from its chunks' headers (type, 3-byte
    length) and each compressed chunk's block header, read in place (no chunk is copied)."""
    view = memoryview(body)
    size = 0
    position = 0
    while position < len(body):
        if position + 4 > len(body):
            raise InvalidRequestError("truncated compressed body")
        kind = body[position]
        length = int.from_bytes(view[position + 1 : position + 4], "little")
        chunk = view[position + 4 : position + 4 + length]
        if len(chunk) < length:
            raise InvalidRequestError("truncated compressed body")
        if kind == 0x00:  # compressed data: a CRC, then one raw block
            size += cramjam.snappy.decompress_raw_len(chunk[4:])
        elif kind == 0x01:  # uncompressed data: a CRC, then the bytes
            size += max(0, length - 4)
        elif 0x02 <= kind <= 0x7F:
            raise InvalidRequestError(f"snappy framed body has a reserved chunk type {kind}")
        position += 4 + length  # stream identifiers, padding and skippable chunks add nothing
    return size


class _Lz4Error(Exception):
    """lz4.frame's failure to decode (it raises RuntimeError)."""


def _unlz4(body: bytes, limit: int) -> bytes:
    """Every LZ4 frame of `body`, at most `limit` bytes of output (a frame cut short is an
    error, as for gzip and zstd)."""
    # lz4's decoder allocates the whole `max_length` it is given: the first step asks for
    # about what OTLP compresses to (as `_expected` guesses for a zlib stream)
    try:
        return _frames(body, limit, lz4.frame.LZ4FrameDecompressor, lambda data: 8 * len(data) + 1)
    except RuntimeError as exc:
        raise _Lz4Error(str(exc)) from None


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body without its `Content-Encoding` ("" or "identity": as is)."""
    encoding = encoding.strip().lower()
    try:
        if encoding in ("", "identity"):
            decoded = body
        elif encoding == "gzip":
            decoded = _inflate(body, 16 + zlib_ng.MAX_WBITS, limit)
        elif encoding in ("deflate", "zlib"):
            decoded = _inflate(body, zlib_ng.MAX_WBITS, limit)
        elif encoding == "zstd":
            decoded = _unzstd(body, limit)
        elif encoding in ("snappy", "x-snappy-framed"):
            decoded = _unsnappy(body, limit)
        elif encoding == "lz4":
            decoded = _unlz4(body, limit)
        else:
            raise UnsupportedMediaTypeError(
                f"unsupported Content-Encoding {encoding!r}; use one of {', '.join(ENCODINGS)}"
            )
    except (zlib_ng.error, zstandard.ZstdError, cramjam.DecompressionError, _Lz4Error) as exc:
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


# a logged request was inflated within the limit when it was accepted: replay never refuses it
# for its size, even if the limit has been lowered since
UNBOUNDED = 2**62


def canonical(encoding: str) -> str:
    """An encoding as the log names it: "", "gzip", "deflate", "zstd", "snappy" (raw or
    framed: told apart by the bytes) or "lz4"."""
    encoding = encoding.strip().lower()
    return {"identity": "", "zlib": "deflate", "x-snappy-framed": "snappy"}.get(encoding, encoding)


@dataclass(frozen=True)
class Body:
    """One request's bytes: `protobuf` for the decoder; `received` and `encoding` when the
    client compressed them (None and "": `protobuf` is what came)."""

    protobuf: bytes
    received: bytes | None = None
    encoding: str = ""
    # strings the transport repaired while it made `protobuf` (OTLP/JSON's lone surrogates),
    # for the client's partial_success warning
    repairs: StringRepairs | None = None

    @property
    def logged(self) -> bytes:
        """The bytes the write-ahead log keeps: as received."""
        return self.protobuf if self.received is None else self.received

    @property
    def size(self) -> int:
        """Bytes held in memory for it."""
        return len(self.protobuf) + (0 if self.received is None else len(self.received))


async def receive_compressed(body: bytes, encoding: str, limit: int) -> Body:
    """The `Body` of bytes sent with `encoding` ("" or "identity": as they are)."""
    encoding = canonical(encoding)
    if not encoding:
        return Body(body)
    return Body(await decompress_off_loop(body, encoding, limit), body, encoding)


def inflate_logged(payload: bytes, encoding: str) -> bytes:
    """A logged request's protobuf bytes, from its payload and the encoding it was logged with
    (wal/record.py). Raises InvalidRequestError if they no longer inflate."""
    return decompress(payload, encoding, UNBOUNDED)


async def logged_protobuf(payload: bytes, encoding: str) -> bytes:
    """`inflate_logged`, on a worker thread when the payload is large."""
    return await decompress_off_loop(payload, encoding, UNBOUNDED)
