"""Library errors as one plain line in our messages."""

from __future__ import annotations

from otel_delta.errors import MAX_CAUSE_CHARS, describe


def test_colour_codes_and_line_breaks_are_removed_and_causes_kept() -> None:
    try:
        try:
            raise OSError("\x1b[31mconnection refused\x1b[0m\n  at 127.0.0.1:9")
        except OSError as cause:
            raise RuntimeError("Generic S3 error") from cause
    except RuntimeError as error:
        assert describe(error) == "Generic S3 error: connection refused at 127.0.0.1:9"


def test_long_messages_are_cut() -> None:
    text = describe(ValueError("x" * 5000))
    assert len(text) == MAX_CAUSE_CHARS and text.endswith("…")
    assert describe(ValueError()) == "ValueError"
