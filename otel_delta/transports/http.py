"""OTLP/HTTP: `POST /v1/traces`, `/v1/metrics`, `/v1/logs` over the pipeline, per the OTLP
specification — protobuf or JSON bodies, compressed in any way the Collector may send them
(pipeline/body.py), the answer in the request's content type, a google.rpc.Status body for
errors, `Retry-After` when the client should come back.

The server is aiohttp on the bridge's event loop, next to the gRPC server: its HTTP parser is
C, it serves every connection concurrently, and the CPU work of a request — decompression,
JSON decoding, conversion — runs in threads or the converter processes, never on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from aiohttp import ClientPayloadError, web
from google.protobuf.message import Message

from otel_delta.auth import BearerToken
from otel_delta.config import ReceiverSettings
from otel_delta.errors import (
    ClientDisconnectedError,
    InvalidRequestError,
    OtelDeltaError,
    RequestTimeoutError,
    RequestTooLargeError,
    ShuttingDownError,
    UnsupportedMediaTypeError,
)
from otel_delta.net import bound_endpoint, http_runner, serve_http
from otel_delta.pipeline import Accepted, ExportPipeline, Outcome, Rejected, Retryable
from otel_delta.pipeline.body import Body, receive_compressed
from otel_delta.pipeline.reservation import Reservation
from otel_delta.signals import SIGNALS, Signal
from otel_delta.status import rpc_status, status_for
from otel_delta.transports.observe import observe
from otel_delta.transports.otlp_json import (
    decoding_bytes,
    json_to_protobuf,
    message_to_json,
)
from otel_delta.transports.tls import ServerTls, http_ssl_context

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class HttpTransport:
    """The OTLP/HTTP server (`receiver.http_endpoint`)."""

    def __init__(
        self,
        settings: ReceiverSettings,
        pipeline: ExportPipeline,
        token: BearerToken | None = None,
        signals: tuple[Signal, ...] = SIGNALS,
        tls: ServerTls | None = None,
    ) -> None:
        self.settings = settings
        self.tls = tls
        self.pipeline = pipeline
        self.token = token
        self.limit = settings.max_receive_message_bytes
        self._signals = {signal.http_path: signal for signal in signals}
        app = web.Application(client_max_size=self.limit + 1)
        for path in self._signals:
            app.router.add_route("*", path, self._handle)
        # bodies are decompressed here, bounded by the limit: not by aiohttp, which would not be
        self._runner = http_runner(app, auto_decompress=False)
        self.port = 0
        # set when the bridge stops: bodies still arriving are not waited for
        self._closing = asyncio.Event()

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        self.port = await serve_http(
            self._runner,
            self.settings.http_endpoint,
            "receiver.http_endpoint",
            http_ssl_context(self.tls) if self.tls else None,
            backlog=1024,
        )
        return self.port

    @property
    def endpoint(self) -> str:
        return bound_endpoint(self.settings.http_endpoint, self.port)

    async def stop(self, grace_seconds: float) -> None:
        """Refuse new requests; let requests in flight finish within the grace. A request whose
        body is still arriving is not accepted yet: it is answered 503 at once (retry), so a
        slow or stalled client cannot hold the bridge's exit."""
        self._closing.set()
        try:
            await asyncio.wait_for(self._runner.cleanup(), grace_seconds)
        except TimeoutError:
            log.warning(
                "OTLP/HTTP: requests still unanswered after the %.0f s grace; their "
                "connections are closed",
                grace_seconds,
            )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST"}, text="use POST\n")
        started = time.monotonic()
        signal = self._signals[request.path]
        as_json = request.content_type == JSON
        outcome = await self._outcome(signal, request, as_json)
        observe("http", signal, outcome, started)
        return self._response(signal, outcome, as_json)

    async def _outcome(self, signal: Signal, request: web.Request, as_json: bool) -> Outcome:
        try:  # what the headers alone decide, before the body is read
            if self.token is not None:
                self.token.check(request.headers.get("Authorization"))
            if request.content_type not in (PROTOBUF, JSON):
                raise UnsupportedMediaTypeError(
                    f"unsupported Content-Type {request.content_type!r}; send {PROTOBUF} or {JSON}"
                )
            self._check_length(request.content_length)
        except OtelDeltaError as exc:
            return Rejected(exc, str(exc))

        async def receive(held: Reservation) -> Body:
            body = await self._body(request)
            if not as_json:
                return body
            await self._hold_for_json(body.protobuf, held)
            # the log keeps protobuf, which replay decodes
            protobuf, repairs = await asyncio.to_thread(
                json_to_protobuf, body.protobuf, signal.request
            )
            return Body(protobuf, repairs=repairs)

        return await self.pipeline.export(signal, receive)

    async def _hold_for_json(self, body: bytes, held: Reservation) -> None:
        """Hold the memory decoding an OTLP/JSON body takes under `buffer.max_bytes`, as a
        request holds what its conversion takes: Python's objects cost up to 82 times the
        body's bytes (otlp_json.decoding_bytes), so a small gzip'd body of empty objects,
        under `max_receive_message_bytes` inflated, took gigabytes. A body that could never
        fit is refused for good (413), one that does not fit now is retryable (503)."""
        needed = decoding_bytes(body)
        max_bytes = self.pipeline.buffer.max_bytes
        if needed > max_bytes:
            raise RequestTooLargeError(
                f"decoding this OTLP/JSON request would take about {needed} bytes, over "
                f"buffer.max_bytes ({max_bytes}); send smaller requests, or protobuf"
            )
        await held.request(0, needed)

    def _check_length(self, length: int | None) -> None:
        if length is not None and length > self.limit:
            raise RequestTooLargeError.over_limit(self.limit, size=length)

    async def _body(self, request: web.Request) -> Body:
        """The body, decompressed and refused as soon as it is known to be over the limit."""
        try:
            body = await self._read(request)
        except web.HTTPRequestEntityTooLarge:
            raise RequestTooLargeError.over_limit(self.limit) from None
        except ConnectionError:  # aiohttp's "Connection lost" included
            raise ClientDisconnectedError(
                "the client closed the connection before its request's body arrived"
            ) from None
        except ClientPayloadError as exc:  # a chunked body cut short or malformed
            raise InvalidRequestError(f"the request's body could not be read: {exc}") from None
        encoding = request.headers.get("Content-Encoding", "")
        return await receive_compressed(body, encoding, self.limit)

    async def _read(self, request: web.Request) -> bytes:
        """The raw body, within `http_body_timeout_seconds`, unless the bridge stops first."""
        timeout = self.settings.http_body_timeout_seconds
        reading = asyncio.ensure_future(request.read())
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            done, _ = await asyncio.wait(
                (reading, closing),
                timeout=timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closing.cancel()
            if not reading.done():
                reading.cancel()
        if reading in done:
            return reading.result()
        if closing in done:
            raise ShuttingDownError("the bridge is stopping; send the request again")
        raise RequestTimeoutError(
            f"the request's body did not arrive within {timeout:g} s "
            "(receiver.http_body_timeout_seconds)"
        )

    def _response(self, signal: Signal, outcome: Outcome, as_json: bool) -> web.Response:
        content_type = JSON if as_json else PROTOBUF
        if isinstance(outcome, Accepted):
            message: Message = signal.response_for(outcome.rejected, outcome.error_message)
            return web.Response(body=_encode(message, as_json), content_type=content_type)
        status = status_for(outcome.error)
        headers = {}
        retry_after = None
        if isinstance(outcome, Retryable):
            retry_after = outcome.retry_after
            headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
        elif isinstance(outcome, Rejected) and status.http == 401:
            headers["WWW-Authenticate"] = "Bearer"
        body = rpc_status(status.grpc, outcome.message, retry_after)
        return web.Response(
            status=status.http,
            body=_encode(body, as_json),
            content_type=content_type,
            headers=headers,
        )


def _encode(message: Message, as_json: bool) -> bytes:
    return message_to_json(message) if as_json else message.SerializeToString()
