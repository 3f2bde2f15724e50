"""gRPC request messages, which the server leaves compressed for us (`grpc_message`).

gRPC would inflate each message on its own thread and then copy the inflated bytes, several
times, into a Python object on the event loop; here the loop copies only the compressed bytes,
the inflating runs on a worker thread without the GIL (pipeline/body.py, shared with
OTLP/HTTP), and the write-ahead log keeps the message as it came.
"""

from __future__ import annotations

from otel_delta.errors import InvalidRequestError
from otel_delta.pipeline.body import Body, receive_compressed

GZIP_MAGIC = b"\x1f\x8b"


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


async def grpc_message(message: bytes, limit: int) -> Body:
    """A gRPC request message as the pipeline takes it, inflated if the client compressed it."""
    encoding = message_encoding(message)
    try:
        return await receive_compressed(message, encoding, limit)
    except InvalidRequestError:
        if encoding == "deflate":
            return Body(message)  # not zlib after all: the decoder judges the bytes
        raise
