"""Binding a server (gRPC, or aiohttp for OTLP/HTTP and the admin endpoint) to a configured
HOST:PORT, with one clear line when it cannot."""

from __future__ import annotations

import logging
import re
import socket
import ssl
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from otel_delta.errors import ConfigError, first_line


def _probe(endpoint: str, key: str) -> None:
    """ConfigError if `endpoint` cannot be bound (in use, not this host's address): found by a
    socket of our own first, because gRPC's core prints a line of its own on stderr before it
    fails, and a bad config should get one line."""
    host, _, port = endpoint.rpartition(":")
    if int(port) == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            probe.bind(address)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot listen on {endpoint} ({exc.strerror})") from None


def bind(server: Any, endpoint: str, key: str, credentials: Any = None) -> int:
    """Bind `server` (grpc or grpc.aio) to `endpoint`, with TLS when `credentials` are given;
    returns the port (useful with port 0). `key` names the setting (e.g.
    `receiver.grpc_endpoint`) in the ConfigError."""
    _probe(endpoint, key)
    try:
        if credentials is None:
            port = server.add_insecure_port(endpoint)
        else:
            port = server.add_secure_port(endpoint, credentials)
    except RuntimeError as exc:
        raise ConfigError(f"{key}: cannot listen on {endpoint} ({exc})") from None
    if not port:
        raise ConfigError(f"{key}: cannot listen on {endpoint}")
    return int(port)


def bound_endpoint(configured: str, port: int) -> str:
    """`host:port` of a server configured to listen on `configured` (whose port may be 0, any
    free one) and now listening on `port`: what the logs and the tests name."""
    return f"{configured.rpartition(':')[0]}:{port}"


class _ServerLog(logging.LoggerAdapter):
    """aiohttp's server log (`aiohttp.server`), for our HTTP servers. A request aiohttp cannot
    parse (bad framing, a header too long: the client's fault, answered 400 by aiohttp) is one
    WARNING line naming the client and the fault: aiohttp logs each as an ERROR with a
    traceback and the request's bytes, so any client could fill the log with tracebacks of
    nothing wrong here. The line leaves out the excerpt of the request's bytes aiohttp's
    message quotes: of a header too long, that is the start of its value, a bearer token's
    included. Everything else (an exception in our handlers) keeps its ERROR and traceback."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        fault = kwargs.get("exc_info")
        if isinstance(fault, HttpProcessingError):
            text = _REQUEST_BYTES.sub("", first_line(fault.message or fault))
            self.logger.warning("%s: %d %s", str(msg) % args, fault.code, text)
            return
        super().log(level, msg, *args, **kwargs)


# aiohttp's quote of the request's bytes in a parser's message: ": b'…'" to the end
_REQUEST_BYTES = re.compile(r":\s*b(['\"]).*$")


SERVER_LOG = _ServerLog(logging.getLogger("aiohttp.server"))


def http_runner(app: web.Application, **options: Any) -> web.AppRunner:
    """The runner of one of our aiohttp servers: no access log, signals left to the bridge,
    malformed requests logged as one line (`_ServerLog`); `options` go to aiohttp."""
    return web.AppRunner(app, access_log=None, handle_signals=False, logger=SERVER_LOG, **options)


async def serve_http(
    runner: web.AppRunner,
    endpoint: str,
    key: str,
    ssl_context: ssl.SSLContext | None = None,
    backlog: int = 128,
) -> int:
    """Set up `runner` and serve it on `endpoint` (HTTPS with `ssl_context`); returns the port
    (useful with port 0). Never shares a port: a second bridge must fail to bind. `key` names
    the setting (e.g. `admin.endpoint`) in the ConfigError."""
    host, _, port = endpoint.rpartition(":")
    await runner.setup()
    site = web.TCPSite(
        runner,
        host.strip("[]"),
        int(port),
        ssl_context=ssl_context,
        reuse_port=False,
        backlog=backlog,
    )
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        # asyncio's strerror is a sentence of its own naming the address again; the bind's
        # own error (its cause) has the system's words, as the gRPC endpoints' message does
        cause = exc.__context__ if isinstance(exc.__context__, OSError) else exc
        raise ConfigError(f"{key}: cannot listen on {endpoint} ({cause.strerror})") from None
    server = site._server
    assert server is not None
    return int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
