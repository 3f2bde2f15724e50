"""Our own exception hierarchy: callers catch `OtelDeltaError`, never library internals."""

from __future__ import annotations


class OtelDeltaError(Exception):
    """Base class of every error otel-delta raises on purpose."""


class ConfigError(OtelDeltaError):
    """The configuration file or an environment override is invalid; the message is one line."""


class InvalidRequestError(OtelDeltaError):
    """An OTLP request could not be decoded at all (maps to gRPC INVALID_ARGUMENT)."""


class BufferFullError(OtelDeltaError):
    """The ingest buffer is at its memory limit; the client should retry later (UNAVAILABLE)."""

    def __init__(self, message: str, retry_after_seconds: float) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class ShuttingDownError(OtelDeltaError):
    """The bridge is stopping and accepts no new rows (UNAVAILABLE)."""


class CommitError(OtelDeltaError):
    """A Delta commit failed after retries; the rows it held were not stored (UNAVAILABLE)."""
