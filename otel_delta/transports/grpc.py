"""OTLP/gRPC: the three Export services over the pipeline, on one grpc.aio server, with the
standard gRPC health service beside them.

A thin transport: it hands the raw request bytes (decoded by the pipeline, so bad bytes are
INVALID_ARGUMENT and not a gRPC framework error) to the pipeline and turns the outcome into a
response or a status, through the one status table.

Memory: grpc.aio reads a unary request's whole message before its handler runs, and its
HTTP/2 flow control (BDP probing) lets every client send a whole request at once, so 64
clients with 4 MB requests held over a GB in the gRPC layer (bench/memory.py). Here Export is
served as a client stream (the same bytes on the wire; clients still make a unary call) whose
one message is read only once the request has a slot in the pipeline, and the HTTP/2 window
per stream is fixed at `receiver.grpc_window_bytes`: a request waiting for its slot holds at
most that much here, the rest waits in the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from otel_delta.auth import BearerToken
from otel_delta.config import ReceiverSettings
from otel_delta.errors import (
    ClientDisconnectedError,
    InvalidRequestError,
    OtelDeltaError,
    RequestTimeoutError,
    RequestTooLargeError,
    UnauthenticatedError,
)
from otel_delta.net import bind, bound_endpoint
from otel_delta.pipeline import Accepted, ExportPipeline, Outcome, Rejected, Retryable
from otel_delta.pipeline.body import Body
from otel_delta.signals import SIGNALS, Signal
from otel_delta.status import retry_metadata, status_for
from otel_delta.transports.encoding import grpc_message
from otel_delta.transports.observe import observe
from otel_delta.transports.tls import ServerTls, grpc_credentials

Handler = Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext], Awaitable[Message]]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def export_handler(
    signal: Signal,
    pipeline: ExportPipeline,
    limit: int,
    timeout: float,
    token: BearerToken | None = None,
) -> Handler:
    """`limit`: the largest request, inflated, in bytes (receiver.max_receive_message_bytes);
    `timeout`: how long its message may take once it has a slot
    (receiver.grpc_message_timeout_seconds)."""

    async def export(_: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Message:
        started = time.monotonic()
        outcome: Outcome
        try:
            if token is not None:
                token.check_metadata(context.invocation_metadata())
        except UnauthenticatedError as exc:
            outcome = Rejected(exc, str(exc))
        else:
            outcome = await pipeline.export(
                signal, lambda _held: request_message(context, limit, timeout)
            )
        observe("grpc", signal, outcome, started)
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


async def request_message(context: grpc.aio.ServicerContext, limit: int, timeout: float) -> Body:
    """The Export's one request message, read when the pipeline asks for it, and inflated if
    the client compressed it (the server leaves that to us: transports/encoding.py). It must
    arrive within `timeout` seconds: the request holds a slot while it is read, and a call
    without a deadline whose message never comes would hold it for as long as its client
    keeps the stream open — a few such calls held every slot, and every other Export, over
    both transports, was answered UNAVAILABLE."""
    try:
        message = await asyncio.wait_for(context.read(), timeout)
    except TimeoutError:
        raise RequestTimeoutError(
            f"the request message did not arrive within {timeout:g} s "
            "(receiver.grpc_message_timeout_seconds)"
        ) from None
    if message is grpc.aio.EOF:
        raise await no_message(context, limit)
    return await grpc_message(message, limit)


async def no_message(context: grpc.aio.ServicerContext, limit: int) -> OtelDeltaError:
    """Why a read gave no message, as far as gRPC lets us know.

    gRPC reads the message only now and refuses one over its max_receive_message_length
    itself: it answers the client RESOURCE_EXHAUSTED, ends the call and gives us the same EOF
    as a client that half-closed without a message. What tells them apart is the call's
    state: a client that half-closed is still there for an answer, the refused call is over
    (sending anything fails, or gRPC cancels this task). Over as well is a call whose
    client's deadline passed as its message arrived (client_disconnected); a client that
    cancelled mid-message cannot be told from a refused one and is counted as too large.
    """
    try:
        await context.send_initial_metadata(())
    except grpc.aio.InternalError:  # the batch failed: the call is over
        pass
    except asyncio.CancelledError:  # gRPC ended the call while this task was reading it
        task = asyncio.current_task()
        if task is None or task.uncancel():
            raise  # cancelled for another reason too (e.g. the bridge stopping)
    else:
        return InvalidRequestError("the Export call carried no request message")
    if context.time_remaining() == 0:
        return ClientDisconnectedError("the client's deadline passed before its request arrived")
    return RequestTooLargeError.over_limit(limit, "the request message (refused by gRPC)")


def generic_handlers(
    pipeline: ExportPipeline,
    limit: int,
    timeout: float,
    signals: tuple[Signal, ...] = SIGNALS,
    token: BearerToken | None = None,
) -> tuple[grpc.GenericRpcHandler, ...]:
    return tuple(
        grpc.method_handlers_generic_handler(
            signal.grpc_service,
            {
                "Export": grpc.stream_unary_rpc_method_handler(
                    export_handler(signal, pipeline, limit, timeout, token),
                    request_deserializer=None,  # the pipeline decodes: bad bytes → INVALID_ARGUMENT
                    response_serializer=signal.response.SerializeToString,
                )
            },
        )
        for signal in signals
    )


class GrpcTransport:
    """The OTLP/gRPC server (`receiver.grpc_endpoint`) and its grpc.health.v1 service.

    The health service needs no token (probes carry none) and answers SERVING for "" and each
    OTLP service while the bridge is ready, NOT_SERVING otherwise (`set_serving`). With `tls`
    (`[receiver.tls]`, shared with the HTTP transport) it serves TLS only.
    """

    def __init__(
        self,
        settings: ReceiverSettings,
        pipeline: ExportPipeline,
        token: BearerToken | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.settings = settings
        self.tls = tls
        self._server = grpc.aio.server(
            options=[
                # of a message as received; inflated, request_message holds it to the same
                ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
                # compressed messages reach us as they are (transports/encoding.py)
                ("grpc.per_message_decompression", 0),
                # never share a port with another process: a second bridge must fail to bind
                ("grpc.so_reuseport", 0),
                # a fixed window per stream: what a client may send before its request is read
                ("grpc.http2.bdp_probe", 0),
                ("grpc.http2.lookahead_bytes", settings.grpc_window_bytes),
            ],
        )
        self._server.add_generic_rpc_handlers(
            generic_handlers(
                pipeline,
                settings.max_receive_message_bytes,
                settings.grpc_message_timeout_seconds,
                token=token,
            )
        )
        self.health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        credentials = grpc_credentials(self.tls) if self.tls else None
        self.port = bind(
            self._server, self.settings.grpc_endpoint, "receiver.grpc_endpoint", credentials
        )
        await self._server.start()
        await self.set_serving(True)
        return self.port

    async def set_serving(self, serving: bool) -> None:
        status = SERVING if serving else NOT_SERVING
        for service in ("", *(signal.grpc_service for signal in SIGNALS)):
            await self.health.set(service, status)

    @property
    def endpoint(self) -> str:
        return bound_endpoint(self.settings.grpc_endpoint, self.port)

    async def stop(self, grace_seconds: float) -> None:
        """Refuse new calls now; let calls in flight finish (their commits) within the grace."""
        await self.health.enter_graceful_shutdown()
        await self._server.stop(grace_seconds)
