"""Files as the OpenTelemetry Collector's file exporter writes them, from real protobuf requests.

- `format: json`: pdata's JSON marshaler: compact OTLP/JSON on one line per request,
  lowerCamelCase names, enums as numbers, 64-bit integers as strings, ids as hex;
- `format: proto`: each serialized request preceded by a 4-byte big-endian length;
- `compression: zstd` (legacy layout): each message zstd-compressed, then length-prefixed.
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from pathlib import Path

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import Message

ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})  # OTLP/JSON ids, hex


def _ids_to_hex(node):
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in ID_KEYS else _ids_to_hex(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_ids_to_hex(v) for v in node]
    return node


def otlp_json(request: Message) -> str:
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    return json.dumps(_ids_to_hex(document), separators=(",", ":"), ensure_ascii=False)


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def write_json_lines(path: Path, requests: list[Message], compress: str | None = None) -> Path:
    data = "".join(otlp_json(r) + "\n" for r in requests).encode()
    if compress == "gzip":
        data = gzip.compress(data)
    elif compress == "zstd-per-message":
        data = framed([pa.compress(otlp_json(r).encode(), "zstd", asbytes=True) for r in requests])
    path.write_bytes(data)
    return path


def write_proto(path: Path, requests: list[Message], compress: str | None = None) -> Path:
    payloads = [r.SerializeToString() for r in requests]
    if compress == "zstd-per-message":
        payloads = [pa.compress(p, "zstd", asbytes=True) for p in payloads]
    data = framed(payloads)
    if compress == "gzip":
        data = gzip.compress(data)
    if compress == "zstd":
        data = pa.compress(data, "zstd", asbytes=True)
    path.write_bytes(data)
    return path


def truncated_gzip(head: bytes, tail: bytes, cut: float = 0.5) -> bytes:
    """gzip of `head` + `tail` cut short, as a file copied while it was being written: the
    stream is flushed after `head` (so what is left holds all of it) and cut `cut` of the way
    into the compressed `tail` (0: right after `head`)."""
    packer = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    start = packer.compress(head) + packer.flush(zlib.Z_SYNC_FLUSH)
    rest = packer.compress(tail) + packer.flush()
    return start + rest[: int(len(rest) * cut)]
