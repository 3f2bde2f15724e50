"""OTLP/gRPC: the three Export services over the pipeline, on one grpc.aio server.

A thin transport: it hands the raw request bytes (decoded by the pipeline, so bad bytes are
INVALID_ARGUMENT and not a gRPC framework error) to the pipeline and turns the outcome into a
response or a status, through the one status table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
from google.protobuf.message import Message

from otel_delta.config import ReceiverSettings
from otel_delta.net import bind_insecure
from otel_delta.pipeline import Accepted, ExportPipeline, Retryable
from otel_delta.signals import SIGNALS, Signal
from otel_delta.status import retry_metadata, status_for

Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[Message]]


def export_handler(signal: Signal, pipeline: ExportPipeline) -> Handler:
    async def export(raw: bytes, context: grpc.aio.ServicerContext) -> Message:
        outcome = await pipeline.export(signal, raw)
        if isinstance(outcome, Accepted):
            return signal.response_for(outcome.rejected, outcome.error_message)
        if isinstance(outcome, Retryable):
            trailers = retry_metadata(outcome.message, outcome.retry_after)
            await context.abort(
                status_for(outcome.error).grpc, outcome.message, trailing_metadata=trailers
            )
        await context.abort(status_for(outcome.error).grpc, outcome.message)
        raise AssertionError("unreachable")  # abort raises

    return export


def generic_handlers(pipeline: ExportPipeline, signals: tuple[Signal, ...] = SIGNALS):
    return tuple(
        grpc.method_handlers_generic_handler(
            signal.grpc_service,
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    export_handler(signal, pipeline),
                    request_deserializer=None,  # the pipeline decodes: bad bytes → INVALID_ARGUMENT
                    response_serializer=signal.response.SerializeToString,
                )
            },
        )
        for signal in signals
    )


class GrpcTransport:
    """The OTLP/gRPC server (`receiver.grpc_endpoint`)."""

    def __init__(self, settings: ReceiverSettings, pipeline: ExportPipeline) -> None:
        self.settings = settings
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
                # never share a port with another process: a second bridge must fail to bind
                ("grpc.so_reuseport", 0),
            ],
        )
        self._server.add_generic_rpc_handlers(generic_handlers(pipeline))
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        self.port = bind_insecure(
            self._server, self.settings.grpc_endpoint, "receiver.grpc_endpoint"
        )
        await self._server.start()
        return self.port

    @property
    def endpoint(self) -> str:
        host = self.settings.grpc_endpoint.rpartition(":")[0]
        return f"{host}:{self.port}"

    async def stop(self, grace_seconds: float) -> None:
        """Refuse new calls now; let calls in flight finish (their commits) within the grace."""
        await self._server.stop(grace_seconds)
