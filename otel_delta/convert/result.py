"""What a converter hands to the buffer: Arrow tables per Delta table plus what it rejected."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from otel_delta.tables import TABLES

if TYPE_CHECKING:
    from otel_delta.convert.utf8 import StringRepairs

MAX_REPORTED_ERRORS = 3
# Characters of each problem in partial_success's message: it may quote what the client sent
# (a metric's name), and three 2 MiB names made a 6 MB answer, over a gRPC client's 4 MiB
# receive limit: the client saw an error for a request that was stored, and sent it again.
MAX_MESSAGE_CHARS = 240


@dataclass
class Rejections:
    """Invalid items dropped from one request, for OTLP partial_success."""

    count: int = 0
    messages: list[str] = field(default_factory=list)
    # strings that were not UTF-8, stored with U+FFFD in place of their invalid bytes
    # (convert/utf8.py): nothing dropped, but operators count them
    repaired_strings: int = 0

    def add(self, message: str) -> None:
        self.count += 1
        self.note(message)

    def repaired(self, repairs: StringRepairs) -> None:
        """Strings stored repaired (convert/utf8.py): the client's warning, the operators'
        count. Drops nothing."""
        self.note(repairs.warning)
        self.repaired_strings += repairs.strings

    def note(self, message: str) -> None:
        """Report a problem that drops nothing countable (e.g. a metric without data)."""
        if len(self.messages) < MAX_REPORTED_ERRORS and message not in self.messages:
            self.messages.append(message)

    @property
    def error_message(self) -> str:
        if not self.messages:
            return ""
        prefix = f"{self.count} item(s) rejected: " if self.count else ""
        return prefix + "; ".join(_shortened(message) for message in self.messages)


def _shortened(message: str) -> str:
    """The message's start and end (what was wrong is said after the quoted value)."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = (MAX_MESSAGE_CHARS - 3) // 2
    return f"{message[:keep]} … {message[-keep:]}"


@dataclass
class Converted:
    tables: dict[str, pa.Table]
    rejected: Rejections
    # Memory a table holds, by table name, where it is more than its buffers' lengths
    # (`pa.Table.get_total_buffer_size`) say: the native converter's buffers keep the capacity
    # their builders grew to, in mimalloc's size class of it: on the bench's requests 1.13-1.18x
    # their lengths (the capacities alone 1.06-1.12x; 1.36-1.48x before 26-27 November).
    held: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(t.num_rows for t in self.tables.values())


def build_table(name: str, columns: dict[str, pa.Array]) -> pa.Table:
    """Assemble columns in the table's schema order; a missing column is a programming error."""
    schema = TABLES[name].schema
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
