"""The Export handler shared by the three signals: decode → convert → buffer → answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
from google.protobuf.message import Message

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.errors import (
    BufferFullError,
    CommitError,
    InvalidRequestError,
    ShuttingDownError,
)
from otel_delta.receiver.decode import Decoder
from otel_delta.receiver.signals import Signal
from otel_delta.receiver.status import retry_metadata

log = logging.getLogger(__name__)

Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[Message]]


def export_handler(signal: Signal, buffer: GroupCommitBuffer, decoder: Decoder) -> Handler:
    async def export(raw: bytes, context: grpc.aio.ServicerContext) -> Message:
        try:
            buffer.check_capacity()
        except (BufferFullError, ShuttingDownError) as exc:
            await _unavailable(context, str(exc), buffer.retry_after)
        try:
            converted = await decoder.decode(signal, raw)
        except InvalidRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception:
            log.exception("failed to convert a %s request", signal.name)
            await context.abort(grpc.StatusCode.INTERNAL, f"failed to convert {signal.name}")
        try:
            await buffer.submit(converted.tables)
        except (BufferFullError, ShuttingDownError, CommitError) as exc:
            await _unavailable(context, str(exc), buffer.retry_after)
        return signal.response_for(converted)

    return export


async def _unavailable(context: grpc.aio.ServicerContext, message: str, retry_after: float):
    await context.abort(
        grpc.StatusCode.UNAVAILABLE, message, trailing_metadata=retry_metadata(message, retry_after)
    )


def generic_handlers(buffer: GroupCommitBuffer, decoder: Decoder, signals: tuple[Signal, ...]):
    return tuple(
        grpc.method_handlers_generic_handler(
            signal.service,
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    export_handler(signal, buffer, decoder),
                    request_deserializer=None,  # decode ourselves: bad bytes → INVALID_ARGUMENT
                    response_serializer=signal.response.SerializeToString,
                )
            },
        )
        for signal in signals
    )
