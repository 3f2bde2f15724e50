"""Trace/span id checks shared by the converters (OTLP: 16 and 8 bytes, all-zero is invalid)."""

from __future__ import annotations

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8


def id_error(value: bytes, size: int, what: str, required: bool) -> str | None:
    """Why `value` is not a valid id, or None if it is (empty is allowed when not required)."""
    if not value:
        return f"{what} is empty" if required else None
    if len(value) != size:
        return f"{what} must be {size} bytes, got {len(value)}"
    if required and not any(value):
        return f"{what} is all zeroes"
    return None
