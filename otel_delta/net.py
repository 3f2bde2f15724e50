"""Binding a gRPC server to a configured HOST:PORT, with one clear line when it cannot."""

from __future__ import annotations

from typing import Any

from otel_delta.errors import ConfigError


def bind(server: Any, endpoint: str, key: str, credentials: Any = None) -> int:
    """Bind `server` (grpc or grpc.aio) to `endpoint`, with TLS when `credentials` are given;
    returns the port (useful with port 0). `key` names the setting (e.g.
    `receiver.grpc_endpoint`) in the ConfigError."""
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
