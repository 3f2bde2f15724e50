"""ConnectorService: the connector's operations over gRPC, behind a bearer token.

A synchronous gRPC server on its own thread pool and port: delta-rs calls block, and this keeps
them off the bridge's event loop. Every call checks `authorization: Bearer <token>` (constant-
time compare) and maps our typed errors to gRPC status codes through otel_delta.status.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from otel_delta.auth import BearerToken
from otel_delta.errors import InvalidPredicateError, OtelDeltaError, ServerBusyError
from otel_delta.metrics import CONNECTOR_CALLS, CONNECTOR_SECONDS
from otel_delta.net import bind
from otel_delta.remote.protocol import generated, ipc_chunks
from otel_delta.status import status_of

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _guarded(
    servicer: ConnectorServicer, context: grpc.ServicerContext, name: str
) -> Iterator[None]:
    """The bearer-token check, then our errors mapped to status codes, around one RPC."""
    started = time.monotonic()
    code = grpc.StatusCode.OK
    try:
        servicer.token.check_metadata(context.invocation_metadata())
        yield
    except GeneratorExit:  # a stream its client cancelled or stopped reading
        code = grpc.StatusCode.CANCELLED
        raise
    except OtelDeltaError as exc:
        code = status_of(exc)
        context.abort(code, str(exc))
    except Exception as exc:
        code = grpc.StatusCode.INTERNAL
        log.exception("ConnectorService.%s failed", name)
        context.abort(code, f"{type(exc).__name__}: {exc}")
    finally:
        CONNECTOR_CALLS.labels(name, code.name).inc()
        CONNECTOR_SECONDS.labels(name).observe(time.monotonic() - started)


def _rpc(method: Callable) -> Callable:
    """A unary RPC method, guarded."""

    @functools.wraps(method)
    def wrapper(self: ConnectorServicer, request: Any, context: grpc.ServicerContext) -> Any:
        with _guarded(self, context, method.__name__):
            return method(self, request, context)

    return wrapper


def _streaming(method: Callable) -> Callable:
    """A server-streaming RPC method, guarded while it streams too."""

    @functools.wraps(method)
    def wrapper(self: ConnectorServicer, request: Any, context: grpc.ServicerContext) -> Any:
        with _guarded(self, context, method.__name__):
            yield from method(self, request, context)

    return wrapper


class ConnectorServicer:
    """The RPCs; each is a thin call into the connector API."""

    def __init__(self, connector: Any, token: str, query_streams: int = 3) -> None:
        self.connector = connector
        self.token = BearerToken(token)
        self.pb, _ = generated()
        # a Query holds a server thread while its client reads (or does not): at most this
        # many at once, so that the other calls always find a thread
        self._query_slots = threading.BoundedSemaphore(query_streams)

    @_rpc
    def Tables(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.pb.TablesResponse(tables=self.connector.list_tables())

    @_rpc
    def History(self, request: Any, context: grpc.ServicerContext) -> Any:
        entries = self.connector.table(request.table).history(request.limit or None)
        return self.pb.HistoryResponse(
            entries=[
                self.pb.HistoryEntry(
                    version=e.version,
                    timestamp_ms=int(e.timestamp.timestamp() * 1000),
                    operation=e.operation,
                    parameters_json=json.dumps(e.parameters, default=str),
                    metrics_json=json.dumps(e.metrics, default=str),
                    normalized_metrics=e.normalized_metrics,
                )
                for e in entries
            ]
        )

    @_rpc
    def Statistics(self, request: Any, context: grpc.ServicerContext) -> Any:
        s = self.connector.table(request.table).statistics()
        return self.pb.TableStatistics(
            version=s.version,
            size_bytes=s.size_bytes,
            files=s.files,
            partitions=s.partitions,
            rows=s.rows,
            small_files=s.small_files,
            small_file_threshold=s.small_file_threshold,
        )

    @_streaming
    def Query(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if not self._query_slots.acquire(blocking=False):
            raise ServerBusyError(
                "the ConnectorService streams as many queries as it takes; retry later"
            )
        try:
            yield from self._query(request)
        finally:
            self._query_slots.release()

    def _query(self, request: Any) -> Iterator[Any]:
        query = self.connector.table(request.table).query()
        if request.where:
            query = query.filter(request.where)
        if request.columns:
            query = query.select(list(request.columns))
        if request.limit:
            query = query.limit(request.limit)
        if request.HasField("version"):
            query = query.version(request.version)
        if request.as_of:
            query = query.as_of(request.as_of)
        schema = query.schema()
        batches = query.to_batches()
        for data in ipc_chunks(schema, batches):
            yield self.pb.ArrowChunk(data=data)

    @_rpc
    def Optimize(self, request: Any, context: grpc.ServicerContext) -> Any:
        r = self.connector.table(request.table).optimize(
            where=request.where or None, z_order=list(request.z_order) or None
        )
        return self.pb.OptimizeResponse(
            version=r.version,
            files_added=r.files_added,
            files_removed=r.files_removed,
            partitions_optimized=r.partitions_optimized,
        )

    @_rpc
    def Vacuum(self, request: Any, context: grpc.ServicerContext) -> Any:
        hours = request.retention_hours if request.HasField("retention_hours") else None
        r = self.connector.table(request.table).vacuum(
            retention_hours=hours, dry_run=request.dry_run
        )
        return self.pb.VacuumResponse(files=r.files, dry_run=r.dry_run)

    @_rpc
    def Delete(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.where.strip() and not request.partition_path:
            raise InvalidPredicateError("a condition is required", request.where)
        r = self.connector.table(request.table).delete(
            request.where if request.where.strip() else None,
            partition_path=request.partition_path or None,
            hard=request.hard,
            actor=request.actor or None,
        )
        return self.pb.DeleteResponse(
            deleted=r.deleted,
            version=r.version,
            files_purged=r.files_purged,
            log_entries_removed=r.log_entries_removed,
        )

    @_rpc
    def Redact(self, request: Any, context: grpc.ServicerContext) -> Any:
        target = request.WhichOneof("target")
        r = self.connector.table(request.table).redact(
            request.attribute if target == "attribute" else None,
            pattern=request.pattern if target == "pattern" else None,
            mode=request.mode or "hash",
            where=request.where or None,
            partition_path=request.partition_path or None,
            actor=request.actor or None,
        )
        return self.pb.RedactResponse(
            rows_affected=r.rows_affected,
            partitions_rewritten=r.partitions_rewritten,
            version=r.version,
            files_purged=r.files_purged,
            log_entries_removed=r.log_entries_removed,
        )

    @_rpc
    def Restore(self, request: Any, context: grpc.ServicerContext) -> Any:
        # `version` is optional in the proto: unset, it is not version 0 (the empty table);
        # restore() refuses neither or both, as the Python API does
        version = request.version if request.HasField("version") else None
        r = self.connector.table(request.table).restore(
            version, timestamp=request.timestamp or None
        )
        return self.pb.RestoreResponse(version=r.version, restored_to=r.restored_to)


class ConnectorServer:
    """The ConnectorService on its own port; `start` returns the bound port. With
    `credentials` (from `[connector_service.tls]`) it serves TLS only."""

    def __init__(
        self,
        connector: Any,
        endpoint: str,
        token: str,
        workers: int = 4,
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        _, pb_grpc = generated()
        self.endpoint = endpoint
        self._credentials = credentials
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="connector-rpc"),
            options=[("grpc.so_reuseport", 0)],
        )
        pb_grpc.add_ConnectorServiceServicer_to_server(
            ConnectorServicer(connector, token, query_streams=max(1, workers - 1)), self._server
        )
        self.port = 0

    def start(self) -> int:
        self.port = bind(
            self._server, self.endpoint, "connector_service.endpoint", self._credentials
        )
        self._server.start()
        return self.port

    def stop(self, grace_seconds: float = 5.0) -> None:
        self._server.stop(grace_seconds).wait()
