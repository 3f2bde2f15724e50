"""Strings that are not UTF-8 in an OTLP protobuf request, replaced so the request is stored.

Protobuf requires a `string` field to hold UTF-8, and both converters refuse a request whose
strings do not (the Python parser raises, the native reader declines). The Collector does not
check: a filelog receiver reading a Latin-1 file, or a Go program's string holding arbitrary
bytes, sends such strings on, and refusing the request would drop every other item of a batch
of thousands for one accented byte. So a request that fails to parse is walked along its message
descriptors; each `string` field that is not UTF-8 has its invalid bytes replaced by U+FFFD
(what Python's "replace" decoding does), and the request is parsed again. Arrow and Parquet
strings must be UTF-8, so the exact bytes cannot be kept in a string column; the client is told
in partial_success's error_message (a warning: nothing is rejected).

This runs only after a parse has failed, so its cost is paid by such requests alone. The walk
here is the reference; the native extension has the same walk (native/src/utf8.rs), which the
receiver uses when `receiver.native_convert` lets it. OTLP/JSON's counterpart, a lone surrogate
escape, is `without_lone_surrogates` (transports/otlp_json.py calls it on each string).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from otel_delta.convert import native as native_convert
from otel_delta.convert.wire import encode_varint, read_varint
from otel_delta.errors import MalformedVarintError

M = TypeVar("M", bound=Message)

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_MAX_FIELD_NUMBER = 2**29 - 1


class _Malformed(Exception):
    """The bytes are not a protobuf message: nothing to repair, the parse's error stands."""


@dataclass(frozen=True)
class StringRepairs:
    """What was repaired in a request's strings, for the client's partial_success warning."""

    strings: int  # how many string fields were replaced
    first_field: str  # the path of the first, e.g. resource_logs.scope_logs.log_records.body…

    @property
    def warning(self) -> str:
        return (
            f"{self.strings} string(s) were not valid UTF-8 and are stored with U+FFFD in place "
            f"of what was invalid (the first in {self.first_field})"
        )


@dataclass(frozen=True)
class Repaired(StringRepairs):
    """A request whose strings that were not UTF-8 now are."""

    data: bytes = b""


def without_lone_surrogates(text: str) -> str | None:
    """`text` with each lone surrogate as U+FFFD, or None if it has none. A JSON string may
    escape one (`"\\ud83d"`: the JS SDK's length limit cuts strings by UTF-16 code units, so
    half an emoji can remain); it has no UTF-8 form, so protobuf refuses it as it refuses
    bytes that are not UTF-8 (OTLP/JSON's counterpart of `repair`)."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return None


def _is_utf8(value: memoryview) -> bool:
    try:
        codecs.utf_8_decode(value, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


# A request type's messages, led by the request (index 0): each one's string and message fields
# by number, as (name, the index of a message field's type, or None for a string); its other
# fields need no look. Both walks, Python's and the native one, are led by it.
MessageTable = list[dict[int, tuple[str, int | None]]]
_TABLES: dict[str, MessageTable] = {}


def message_table(descriptor: Descriptor) -> MessageTable:
    table = _TABLES.get(descriptor.full_name)
    if table is not None:
        return table
    index = {descriptor.full_name: 0}
    order = [descriptor]
    table = []
    for message in order:  # grows as new message types are found
        fields: dict[int, tuple[str, int | None]] = {}
        for field in message.fields:
            if field.type == FieldDescriptor.TYPE_STRING:
                fields[field.number] = (field.name, None)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                child = field.message_type
                if child.full_name not in index:
                    index[child.full_name] = len(order)
                    order.append(child)
                fields[field.number] = (field.name, index[child.full_name])
        table.append(fields)
    _TABLES[descriptor.full_name] = table
    return table


class _Walk:
    """One request's walk: the count and first path of the strings replaced."""

    def __init__(self, table: MessageTable) -> None:
        self.table = table
        self.strings = 0
        self.first_field = ""

    def message(self, index: int, buf: memoryview, path: tuple[str, ...]) -> bytes | None:
        """The message's bytes with its strings repaired, or None if none needed it.

        A nested message whose bytes are valid UTF-8 as a whole is not looked into (most
        attributes, in one C call instead of a walk): a string inside it could still be invalid
        only if it ended in part of a character whose rest is the next field's key, which takes
        a field number of 16 or more there (then that string stays unrepaired, and the request
        is refused as before)."""
        fields = self.table[index]
        pieces: list[bytes | memoryview] = []
        kept = 0  # buf[kept:] is not in `pieces` yet
        pos, size = 0, len(buf)
        while pos < size:
            key = buf[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = read_varint(buf, pos)
            if key < 8 or key >> 3 > _MAX_FIELD_NUMBER:
                raise _Malformed
            wire_type = key & 7
            if wire_type == _LEN:
                length_at = pos
                length = buf[pos]
                if length < 0x80:
                    pos += 1
                else:
                    length, pos = read_varint(buf, pos)
                start, pos = pos, pos + length
                if pos > size:
                    raise _Malformed
                field = fields.get(key >> 3)
                if field is None:
                    continue  # bytes, packed numbers or an unknown field: kept as they are
                name, child = field
                value = buf[start:pos]
                if _is_utf8(value):
                    continue
                if child is not None:
                    repaired = self.message(child, value, (*path, name))
                    if repaired is None:
                        continue
                else:
                    self.strings += 1
                    self.first_field = self.first_field or ".".join((*path, name))
                    repaired = codecs.utf_8_decode(value, "replace", True)[0].encode("utf-8")
                pieces += [buf[kept:length_at], encode_varint(len(repaired)), repaired]
                kept = pos
            elif wire_type == _VARINT:
                _, pos = read_varint(buf, pos)
            elif wire_type in (_FIXED64, _FIXED32):
                pos += 8 if wire_type == _FIXED64 else 4
                if pos > size:
                    raise _Malformed
            else:
                raise _Malformed  # groups: no OTLP message has one
        if not pieces:
            return None
        pieces.append(buf[kept:])
        return b"".join(pieces)


def repair(descriptor: Descriptor, raw: bytes, native: bool = False) -> Repaired | None:
    """`raw` with every string that is not UTF-8 repaired, or None if it has none such or is
    not a message of `descriptor` (then the parse's own error is the answer). `native`: walk
    with the native extension if it is built (about 20 times faster than this module's walk,
    which is the reference; tests/convert/test_utf8.py compares the two)."""
    table = message_table(descriptor)
    walk_natively = native_convert.utf8_repair(table) if native else None
    if walk_natively is not None:
        found = walk_natively(raw)
        if found is None:
            return None
        return Repaired(strings=found[1], first_field=".".join(found[2]), data=found[0])
    walk = _Walk(table)
    try:
        data = walk.message(0, memoryview(raw), ())
    # IndexError: a length cut off
    except (_Malformed, MalformedVarintError, RecursionError, IndexError):
        return None
    if data is None:
        return None
    return Repaired(strings=walk.strings, first_field=walk.first_field, data=data)


def parse(message_class: type[M], raw: bytes) -> tuple[M, Repaired | None]:
    """`message_class.FromString(raw)`, or of its repaired bytes if strings that are not UTF-8
    were all that stood in the way; the parse's DecodeError otherwise. For readers with no
    `receiver.native_convert` to follow (backfill, stream): the native walk if it is built."""
    try:
        return message_class.FromString(raw), None
    except DecodeError as refused:
        repaired = repair(message_class.DESCRIPTOR, raw, native=True)
        if repaired is None:
            raise
        try:
            return message_class.FromString(repaired.data), repaired
        except DecodeError:
            raise refused from None  # not UTF-8 alone: the first error stands
