"""One Export, whatever the transport: admit → decode + convert → buffer → outcome.

The transports (gRPC, and OTLP/HTTP to come) only move bytes and turn the outcome into their
status codes; every decision about a request is taken here, once.
"""

from __future__ import annotations

import logging

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.errors import (
    BufferFullError,
    CommitError,
    InvalidRequestError,
    RequestTooLargeError,
    ShuttingDownError,
)
from otel_delta.pipeline.decode import Decoder
from otel_delta.pipeline.outcome import Accepted, Outcome, Rejected, Retryable
from otel_delta.signals import Signal

log = logging.getLogger(__name__)

RETRYABLE = (BufferFullError, ShuttingDownError, CommitError)


class ExportPipeline:
    """The receiving side's one handler, shared by every signal and every transport."""

    def __init__(self, buffer: GroupCommitBuffer, decoder: Decoder, max_request_bytes: int) -> None:
        self.buffer = buffer
        self.decoder = decoder
        self.max_request_bytes = max_request_bytes

    async def export(self, signal: Signal, raw: bytes) -> Outcome:
        """The outcome of one Export request's (decompressed) bytes."""
        try:
            self.buffer.check_capacity()  # refuse early, before spending CPU on decoding
        except RETRYABLE as exc:
            return Retryable(exc, self.buffer.retry_after)
        if len(raw) > self.max_request_bytes:
            error = RequestTooLargeError(
                f"request of {len(raw)} bytes is over the limit of {self.max_request_bytes} "
                "(receiver.max_receive_message_bytes)"
            )
            return Rejected(error, str(error))
        try:
            converted = await self.decoder.decode(signal, raw)
        except InvalidRequestError as exc:
            return Rejected(exc, str(exc))
        except Exception as exc:
            log.exception("failed to convert a %s request", signal.name)
            return Rejected(exc, f"failed to convert {signal.name}")
        try:
            await self.buffer.submit(converted.tables)
        except RETRYABLE as exc:
            return Retryable(exc, self.buffer.retry_after)
        return Accepted(converted.rejected.count, converted.rejected.error_message)

    def close(self) -> None:
        self.decoder.close()
