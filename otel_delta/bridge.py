"""Wires transports → pipeline → buffer → engines from settings, and owns the orderly shutdown."""

from __future__ import annotations

import asyncio
import logging

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.config import Settings
from otel_delta.connector import DeltaLakeConnector
from otel_delta.engines import Engines
from otel_delta.lakehouse import Lakehouse
from otel_delta.maintenance import Maintainer
from otel_delta.maintenance.settings import maintenance_policy
from otel_delta.pipeline import Decoder, ExportPipeline, use_native
from otel_delta.pipeline.replay import replay
from otel_delta.remote.service import ConnectorServer
from otel_delta.transports import GrpcTransport
from otel_delta.wal import WriteAheadLog

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 30.0


def build_engines(settings: Settings) -> Engines:
    """The engines the bridge commits with (`[deltalake.operations] engine`)."""
    operations = settings.deltalake.operations
    return Engines(
        Lakehouse.from_settings(settings), operations.engine, operations.bulk_threshold_rows
    )


class Bridge:
    """A running otel-delta: call `start`, later `stop` (which commits everything buffered)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engines = build_engines(settings)
        self.buffer: GroupCommitBuffer | None = None
        self.wal: WriteAheadLog | None = None
        self.pipeline: ExportPipeline | None = None
        self.grpc: GrpcTransport | None = None
        self.maintainer: Maintainer | None = None
        self.connector_server: ConnectorServer | None = None
        self.connector_port = 0

    async def start(self) -> int:
        """Start flushing and serving; returns the bound gRPC port."""
        receiver = self.settings.receiver
        remote = self.settings.connector_service
        token = remote.resolved_token() if remote.enabled else ""  # fail before binding
        self.engines.lakehouse.check_writable()
        decoder = Decoder(receiver.convert_workers, use_native(receiver.native_convert))
        buffer_settings = self.settings.buffer
        self.wal = self._open_wal()
        self.buffer = GroupCommitBuffer(
            self.engines,
            flush_interval_seconds=buffer_settings.flush_interval_seconds,
            max_rows=buffer_settings.max_rows,
            max_bytes=buffer_settings.max_bytes,
            retry_after_seconds=buffer_settings.retry_after_seconds,
            app_id=self.wal.app_id if self.wal else None,
            on_committed=self.wal.committed if self.wal else None,
        )
        self.buffer.start()
        if self.wal is not None:
            buffer = self.buffer
            self.wal.on_durable = lambda position, tables: buffer.add(tables, position)
            await replay(self.wal, decoder, self.buffer, self.engines.lakehouse)
            self.wal.start()
        self.pipeline = ExportPipeline(
            self.buffer,
            decoder,
            receiver.max_receive_message_bytes,
            self.wal,
            self.engines.lakehouse.partition_by,
        )
        self.grpc = GrpcTransport(receiver, self.pipeline)
        port = await self.grpc.start()
        policy = maintenance_policy(self.settings)
        if policy is not None:
            self.maintainer = Maintainer(policy)
            self.maintainer.start()
        if remote.enabled:
            connector = DeltaLakeConnector(self.settings)
            self.connector_server = ConnectorServer(connector, remote.endpoint, token)
            self.connector_port = self.connector_server.start()
            log.info("ConnectorService listening on port %d", self.connector_port)
        return port

    def _open_wal(self) -> WriteAheadLog | None:
        """The write-ahead log of `buffer.ack = "wal"`, locked and recovered (None: "commit")."""
        if self.settings.buffer.ack != "wal":
            return None
        settings = self.settings.wal
        wal = WriteAheadLog(
            settings.dir,
            segment_bytes=settings.segment_bytes,
            max_bytes=settings.max_bytes,
            retry_after_seconds=self.settings.buffer.retry_after_seconds,
        )
        wal.open()
        return wal

    async def _drain(self) -> None:
        """Log what is in flight, then commit everything buffered."""
        assert self.buffer is not None
        if self.wal is not None:
            await self.wal.close()
        await self.buffer.close()

    async def stop(self, grace_seconds: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Stop accepting, commit what is buffered, answer the waiting requests."""
        assert self.buffer is not None and self.grpc is not None and self.pipeline is not None
        if self.connector_server is not None:
            await asyncio.to_thread(self.connector_server.stop)
        if self.maintainer is not None:
            await asyncio.to_thread(self.maintainer.stop)
        await asyncio.gather(self.grpc.stop(grace_seconds), self._drain())
        self.pipeline.close()
        stats = self.buffer.stats
        if self.wal is not None:
            log.info("write-ahead log: %d fsyncs", self.wal.syncs)
        log.info(
            "stopped: %d rows in %d commits (%d failed)", stats.rows, stats.commits, stats.failures
        )
