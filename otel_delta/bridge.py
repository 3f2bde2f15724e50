"""Wires receiver → buffer → writer from settings, and owns the orderly shutdown."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.config import Settings
from otel_delta.maintenance import Maintainer
from otel_delta.maintenance.settings import maintenance_policy
from otel_delta.receiver import OtlpReceiver
from otel_delta.writer.base import TableWriter
from otel_delta.writer.delta_rs import DeltaRsWriter, WriterOptions
from otel_delta.writer.routing import RoutingWriter
from otel_delta.writer.spark import SparkWriter

if TYPE_CHECKING:
    from otel_delta.remote.service import ConnectorServer

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 30.0


def writer_options(settings: Settings) -> WriterOptions:
    lake = settings.deltalake
    return WriterOptions(
        table_root=lake.resolved_table_path(),
        partition_by=tuple(lake.partition_by),
        storage_options=dict(lake.storage.options),
        compression=lake.table.compression,
        compression_level=lake.table.compression_level,
        target_file_size=lake.storage.file_size_target,
        checkpoint_interval=lake.table.checkpoint_interval,
        max_commit_retries=lake.operations.max_commit_retries,
    )


def build_writer(settings: Settings) -> TableWriter:
    """delta-rs for ingestion; Spark (started lazily) for bulk appends, per `engine`."""
    options = writer_options(settings)
    operations = settings.deltalake.operations
    small = DeltaRsWriter(options)
    if operations.engine == "delta-rs":
        return small

    def start_spark():
        from otel_delta.spark.session import spark_session

        return spark_session(settings.spark)

    return RoutingWriter(
        small, SparkWriter(options, start_spark), operations.engine, operations.bulk_threshold_rows
    )


class Bridge:
    """A running otel-delta: call `start`, later `stop` (which commits everything buffered)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.writer = build_writer(settings)
        self.buffer: GroupCommitBuffer | None = None
        self.receiver: OtlpReceiver | None = None
        self.maintainer: Maintainer | None = None
        self.connector_server: ConnectorServer | None = None
        self.connector_port = 0

    async def start(self) -> int:
        """Start flushing and serving; returns the bound gRPC port."""
        remote = self.settings.connector_service
        token = remote.resolved_token() if remote.enabled else ""  # fail before binding
        buffer_settings = self.settings.buffer
        self.buffer = GroupCommitBuffer(
            self.writer,
            flush_interval_seconds=buffer_settings.flush_interval_seconds,
            max_rows=buffer_settings.max_rows,
            max_bytes=buffer_settings.max_bytes,
            retry_after_seconds=buffer_settings.retry_after_seconds,
        )
        self.buffer.start()
        self.receiver = OtlpReceiver(self.settings.receiver, self.buffer)
        port = await self.receiver.start()
        policy = maintenance_policy(self.settings)
        if policy is not None:
            self.maintainer = Maintainer(policy)
            self.maintainer.start()
        if remote.enabled:
            from otel_delta.connector import DeltaLakeConnector  # it imports this module
            from otel_delta.remote.service import ConnectorServer

            connector = DeltaLakeConnector(self.settings)
            self.connector_server = ConnectorServer(connector, remote.endpoint, token)
            self.connector_port = self.connector_server.start()
            log.info("ConnectorService listening on port %d", self.connector_port)
        return port

    async def stop(self, grace_seconds: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Stop accepting, commit what is buffered, answer the waiting requests."""
        assert self.buffer is not None and self.receiver is not None
        if self.connector_server is not None:
            await asyncio.to_thread(self.connector_server.stop)
        if self.maintainer is not None:
            await asyncio.to_thread(self.maintainer.stop)
        await asyncio.gather(self.receiver.stop(grace_seconds), self.buffer.close())
        stats = self.buffer.stats
        log.info(
            "stopped: %d rows in %d commits (%d failed)", stats.rows, stats.commits, stats.failures
        )
