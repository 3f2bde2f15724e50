"""Wires transports → pipeline → buffer → engines from settings, reports readiness and gauges
to the admin endpoint, and owns the orderly shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

import grpc

from otel_delta.admin import AdminServer, Check, Gauge
from otel_delta.auth import BearerToken
from otel_delta.buffer import GroupCommitBuffer
from otel_delta.config import Settings
from otel_delta.connector import DeltaLakeConnector
from otel_delta.engines import Engines
from otel_delta.lakehouse import Lakehouse
from otel_delta.maintenance import Maintainer
from otel_delta.maintenance.settings import maintenance_policy
from otel_delta.pipeline import Decoder, ExportPipeline, use_native
from otel_delta.pipeline.dead_letters import DeadLetters
from otel_delta.pipeline.replay import ReplayReport, replay
from otel_delta.remote.service import ConnectorServer
from otel_delta.spark.session import check_can_start
from otel_delta.transports import GrpcTransport, HttpTransport
from otel_delta.transports.tls import ServerTls, grpc_credentials
from otel_delta.wal import WriteAheadLog

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 30.0
READINESS_POLL_SECONDS = 1.0  # how often the gRPC health service follows /readyz


def build_engines(settings: Settings) -> Engines:
    """The engines the bridge commits with (`[deltalake.operations] engine`). When its
    maintainer checkpoints, expired log entries are left to it (Lakehouse.append_hooks)."""
    operations = settings.deltalake.operations
    lakehouse = Lakehouse.from_settings(settings)
    policy = maintenance_policy(settings)
    if policy is not None and policy.table.checkpoint:
        lakehouse = replace(lakehouse, expired_logs_on_commit=False)
    return Engines(lakehouse, operations.engine, operations.bulk_threshold_rows)


class Bridge:
    """A running otel-delta: call `start`, later `stop` (which commits everything buffered)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engines = build_engines(settings)
        self.buffer: GroupCommitBuffer | None = None
        self.wal: WriteAheadLog | None = None
        self.pipeline: ExportPipeline | None = None
        self.grpc: GrpcTransport | None = None
        self.http: HttpTransport | None = None
        self.admin: AdminServer | None = None
        self._stopping = False
        self._replay: ReplayReport | None = None  # while the start replays the log
        self._health_task: asyncio.Task[None] | None = None
        self.maintainer: Maintainer | None = None
        self.connector_server: ConnectorServer | None = None
        self.connector_port = 0

    async def start(self, stopping: asyncio.Event | None = None) -> int:
        """Start flushing and serving; returns the bound gRPC port. 0 when `stopping` was set
        during the replay of the write-ahead log: nothing serves, and `stop` commits what the
        replay buffered."""
        receiver = self.settings.receiver
        remote = self.settings.connector_service
        token = remote.resolved_token() if remote.enabled else ""  # fail before binding
        remote_tls = (  # its files too
            grpc_credentials(ServerTls(remote.tls, "connector_service.tls"))
            if remote.enabled and remote.tls.enabled
            else None
        )
        # read once for both transports: one WARNING, not two, for a rotation that does not load
        receiver_tls = ServerTls(receiver.tls) if receiver.tls.enabled else None
        receiver_token = receiver.auth.resolved_token()
        bearer = BearerToken(receiver_token) if receiver_token else None
        self.engines.lakehouse.check_writable()
        if self.engines.mode == "spark":
            check_can_start()  # Spark starts at the first commit: what would stop it, now
        if self.settings.admin.endpoint:
            # before the replay, which can take minutes after a crash: a liveness probe gets its
            # answer meanwhile, /readyz says how far the replay is, /metrics the log
            self.admin = AdminServer(self.settings.admin, self.checks, self.gauges)
            await self.admin.start()
        try:
            return await self._start_serving(remote_tls, receiver_tls, bearer, token, stopping)
        except BaseException:
            if self.admin is not None:  # a start that failed leaves no endpoint behind
                await self.admin.stop()
                self.admin = None
            raise

    async def _start_serving(
        self,
        remote_tls: grpc.ServerCredentials | None,
        receiver_tls: ServerTls | None,
        bearer: BearerToken | None,
        token: str,
        stopping: asyncio.Event | None,
    ) -> int:
        """The rest of `start`, from the replay of the write-ahead log to the open ports."""
        receiver = self.settings.receiver
        remote = self.settings.connector_service
        decoder = Decoder(receiver.convert_workers, use_native(receiver.native_convert))
        buffer_settings = self.settings.buffer
        self.wal = self._open_wal()
        self.buffer = GroupCommitBuffer(
            self.engines,
            flush_interval_seconds=buffer_settings.flush_interval_seconds,
            max_rows=buffer_settings.max_rows,
            max_bytes=buffer_settings.max_bytes,
            retry_after_seconds=buffer_settings.retry_after_seconds,
            max_resident_bytes=buffer_settings.resident_limit(),
            app_id=self.wal.app_id if self.wal else None,
            on_committed=self.wal.committed if self.wal else None,
            on_rejected=(DeadLetters(self.engines.lakehouse, self.wal).write if self.wal else None),
        )
        self.buffer.start()
        if self.wal is not None:
            buffer = self.buffer
            # rows: the Converted the pipeline logged (pipeline/export.py)
            self.wal.on_durable = lambda position, rows: buffer.add(
                rows.tables, position, rows.held
            )
            self.wal.on_full = buffer.flush_soon
            self._replay = ReplayReport()
            report = await replay(
                self.wal, decoder, self.buffer, self.engines.lakehouse, self._replay, stopping
            )
            self._replay = None
            if report.stopped:
                decoder.close()
                return 0
            self.wal.start()
        self.pipeline = ExportPipeline(
            self.buffer,
            decoder,
            receiver.max_receive_message_bytes,
            self.wal,
            self.engines.lakehouse.partition_by,
            receiver.max_concurrent_requests,
        )
        self.grpc = GrpcTransport(receiver, self.pipeline, bearer, receiver_tls)
        port = await self.grpc.start()
        if receiver.http_endpoint:
            self.http = HttpTransport(receiver, self.pipeline, bearer, tls=receiver_tls)
            await self.http.start()
        self._health_task = asyncio.get_running_loop().create_task(
            self._follow_readiness(), name="grpc-health"
        )
        policy = maintenance_policy(self.settings)
        if policy is not None:
            self.maintainer = Maintainer(policy)
            self.maintainer.start()
        if remote.enabled:
            connector = DeltaLakeConnector(self.settings)
            self.connector_server = ConnectorServer(
                connector, remote.endpoint, token, credentials=remote_tls
            )
            self.connector_port = self.connector_server.start()
            host = remote.endpoint.rpartition(":")[0]
            log.info(
                "ConnectorService listening on %s:%d%s",
                host,
                self.connector_port,
                " with TLS" if remote.tls.enabled else "",
            )
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
            owner=self.engines.lakehouse.root,
        )
        wal.open()
        return wal

    def checks(self) -> list[Check]:
        """What /readyz reports: can this bridge take telemetry and store it?"""
        detail = ""
        if self._stopping:
            detail = "stopping"
        elif self._replay is not None:
            detail = f"replaying the write-ahead log ({self._replay.records} records read)"
            if self._replay.waiting:
                detail += ", waiting for the commits to make room in the buffer"
        checks = [Check("receiver", not self._stopping and self.grpc is not None, detail)]
        if self.wal is not None:
            refusing = self.wal.refusing()
            checks.append(
                Check(
                    "wal",
                    not refusing,
                    refusing
                    or f"{self.wal.disk_bytes} of {self.wal.max_bytes} bytes on disk "
                    f"({self.wal.pending_records} records await their commits)",
                )
            )
        if self.buffer is not None:
            checks.append(self._commits_check(self.buffer))
        return checks

    def _commits_check(self, buffer: GroupCommitBuffer) -> Check:
        """Commits fail the check once they have failed, or one has run without an answer,
        for `commit_failure_seconds`: a store that hangs (accepts connections, never answers)
        fails no commit until the object store client gives up, minutes later."""
        limit = self.settings.admin.commit_failure_seconds
        failing, running = buffer.failing_seconds(), buffer.running_seconds()
        if running >= limit > failing:  # failing says more: a retry is running after failures
            return Check("commits", False, f"a commit has been running for {running:.0f} s")
        detail = f"failing for {failing:.0f} s" if failing else ""
        if failing and (cause := buffer.failure()):
            detail += f" ({cause})"
        return Check("commits", failing < limit, detail)

    def gauges(self) -> list[Gauge]:
        """The running bridge's state, for /metrics."""
        gauges = [Gauge("ready", "1 when /readyz passes", float(all(c.ok for c in self.checks())))]
        if self.buffer is not None:
            gauges += [
                Gauge(
                    "buffer_bytes",
                    "Arrow bytes buffered or being committed",
                    self.buffer.buffered_bytes,
                ),
                Gauge(
                    "buffer_reserved_bytes",
                    "Bytes held for requests being converted",
                    self.buffer.reserved_bytes,
                ),
                Gauge(
                    "buffer_max_resident_bytes",
                    "The resident memory (process_resident_memory_bytes) at which requests "
                    "wait, then are told to retry (0: no limit)",
                    self.buffer.max_resident_bytes or 0,
                ),
                Gauge(
                    "commit_running_seconds",
                    "How long the oldest commit in progress has been running",
                    self.buffer.running_seconds(),
                ),
                Gauge(
                    "commit_failing_seconds",
                    "How long commits to some table have failed",
                    self.buffer.failing_seconds(),
                ),
            ]
        if self.wal is not None:
            gauges += [
                Gauge(
                    "wal_bytes", "Bytes of write-ahead log segments on disk", self.wal.disk_bytes
                ),
                Gauge("wal_segments", "Write-ahead log segments on disk", self.wal.segment_count),
                Gauge(
                    "wal_pending_records",
                    "Logged requests not yet committed to Delta",
                    self.wal.pending_records,
                ),
            ]
        if self.maintainer is not None:
            for table, files in sorted(self.maintainer.logs.items()):
                for kind, count in (("commit", files.commits), ("checkpoint", files.checkpoints)):
                    gauges.append(
                        Gauge(
                            "table_log_files",
                            "Files in a table's Delta log after the last maintenance cleanup, "
                            "by kind: what every open lists on a local disk",
                            count,
                            (("table", table), ("kind", kind)),
                        )
                    )
                gauges.append(
                    Gauge(
                        "table_log_bytes",
                        "Bytes of a table's Delta log after the last maintenance cleanup",
                        files.bytes,
                        (("table", table),),
                    )
                )
        return gauges

    async def _follow_readiness(self) -> None:
        """Keep the gRPC health service (for gRPC probes) in step with /readyz."""
        serving = True
        while not self._stopping:
            await asyncio.sleep(READINESS_POLL_SECONDS)
            ready = all(check.ok for check in self.checks())
            if ready != serving and self.grpc is not None and not self._stopping:
                await self.grpc.set_serving(ready)
                serving = ready

    async def _drain(self) -> None:
        """Log what is in flight, then commit everything buffered."""
        assert self.buffer is not None
        if self.wal is not None:
            await self.wal.close(drain=self.buffer.close())
        else:
            await self.buffer.close()

    async def stop(self, grace_seconds: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Stop accepting, commit what is buffered, answer the waiting requests. After a start
        stopped during its replay (no transports yet): commit what the replay buffered."""
        assert self.buffer is not None
        self._stopping = True
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        if self.connector_server is not None:
            await asyncio.to_thread(self.connector_server.stop)
        stopping = [self.grpc.stop(grace_seconds)] if self.grpc is not None else []
        if self.http is not None:
            stopping.append(self.http.stop(grace_seconds))
        # the maintainer's round in progress ends beside the transports and the drain, not
        # before them: on a store that hangs it lasts minutes, and the receiver must stop now
        if self.maintainer is not None:
            stopping.append(asyncio.to_thread(self.maintainer.stop))
        await asyncio.gather(*stopping, self._drain())
        if self.pipeline is not None:
            self.pipeline.close()
        if self.admin is not None:
            await self.admin.stop()
        stats = self.buffer.stats
        if self.wal is not None:
            log.info("write-ahead log: %d fsyncs", self.wal.syncs)
        log.info(
            "stopped: %d rows in %d commits (%d failed)", stats.rows, stats.commits, stats.failures
        )
