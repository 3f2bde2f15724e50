"""The gRPC server hosting the three OTLP Export services."""

from __future__ import annotations

import grpc

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.config import ReceiverSettings
from otel_delta.errors import ConfigError
from otel_delta.receiver.decode import Decoder, use_native
from otel_delta.receiver.service import generic_handlers
from otel_delta.receiver.signals import SIGNALS


class OtlpReceiver:
    def __init__(self, settings: ReceiverSettings, buffer: GroupCommitBuffer) -> None:
        self.settings = settings
        self.decoder = Decoder(settings.convert_workers, use_native(settings.native_convert))
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
                # never share a port with another process: a second bridge must fail to bind
                ("grpc.so_reuseport", 0),
            ],
        )
        self._server.add_generic_rpc_handlers(generic_handlers(buffer, self.decoder, SIGNALS))
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0)."""
        try:
            self.port = self._server.add_insecure_port(self.settings.grpc_endpoint)
        except RuntimeError as exc:
            raise ConfigError(
                f"receiver.grpc_endpoint: cannot listen on {self.settings.grpc_endpoint} ({exc})"
            ) from None
        if not self.port:
            raise ConfigError(
                f"receiver.grpc_endpoint: cannot listen on {self.settings.grpc_endpoint}"
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
        self.decoder.close()
