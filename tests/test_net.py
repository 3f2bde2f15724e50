"""Binding our servers (`otel_delta/net.py`): a configured address that cannot be used is one
ConfigError naming the setting, never a traceback nor gRPC core's own line."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from aiohttp import web

from otel_delta.errors import ConfigError
from otel_delta.net import bind, bound_endpoint, http_runner, serve_http


@pytest.fixture
def taken() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.fixture
def grpc_server() -> Iterator[grpc.Server]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    yield server
    server.stop(None)


def test_bind_answers_the_port_it_got(grpc_server: grpc.Server) -> None:
    port = bind(grpc_server, "127.0.0.1:0", "receiver.grpc_endpoint")
    assert port > 0
    assert bound_endpoint("127.0.0.1:0", port) == f"127.0.0.1:{port}"


def test_a_port_in_use_is_one_config_error_naming_the_setting(
    grpc_server: grpc.Server, taken: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        bind(grpc_server, f"127.0.0.1:{taken}", "receiver.grpc_endpoint")
    message = str(caught.value)
    assert message.startswith("config error: receiver.grpc_endpoint: cannot listen on")
    assert "\n" not in message


def test_an_address_not_of_this_host_is_a_config_error(grpc_server: grpc.Server) -> None:
    with pytest.raises(
        ConfigError, match=r"receiver\.grpc_endpoint: cannot listen on 192\.0\.2\.1"
    ):
        bind(grpc_server, "192.0.2.1:4317", "receiver.grpc_endpoint")


def test_an_http_server_never_shares_its_port(taken: int) -> None:
    async def scenario() -> tuple[int, str]:
        first = http_runner(web.Application())
        port = await serve_http(first, "127.0.0.1:0", "admin.endpoint")
        try:
            with pytest.raises(ConfigError) as caught:
                await serve_http(
                    http_runner(web.Application()), f"127.0.0.1:{port}", "admin.endpoint"
                )
            with pytest.raises(ConfigError):
                await serve_http(
                    http_runner(web.Application()), f"127.0.0.1:{taken}", "receiver.http_endpoint"
                )
        finally:
            await first.cleanup()
        return port, str(caught.value)

    port, message = asyncio.run(scenario())
    assert port > 0
    assert message == (
        f"config error: admin.endpoint: cannot listen on 127.0.0.1:{port} (Address already in use)"
    )
