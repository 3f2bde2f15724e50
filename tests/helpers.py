"""Run a real bridge (gRPC server + buffer + delta-rs writer) inside a test."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pyarrow as pa
from deltalake import DeltaTable
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta.bridge import Bridge
from otel_delta.config import Settings


def make_settings(table_path: Path, convert_workers: int = 0, **buffer: float) -> Settings:
    return Settings(
        receiver={"grpc_endpoint": "127.0.0.1:0", "convert_workers": convert_workers},
        buffer={"flush_interval_seconds": 0.1, **buffer},
        deltalake={"table_path": str(table_path)},
    )


class RunningBridge:
    """A Bridge on its own event loop thread, driven from synchronous test code."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bridge = Bridge(settings)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = self.call(self.bridge.start())
        self.endpoint = f"127.0.0.1:{self.port}"
        self.stopped = False

    def call(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, grace_seconds: float = 30.0) -> None:
        if not self.stopped:
            self.stopped = True
            self.call(self.bridge.stop(grace_seconds))
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def channel(self, **options) -> grpc.Channel:
        return grpc.insecure_channel(self.endpoint, **options)

    def stubs(self, channel: grpc.Channel):
        return (
            trace_service_pb2_grpc.TraceServiceStub(channel),
            metrics_service_pb2_grpc.MetricsServiceStub(channel),
            logs_service_pb2_grpc.LogsServiceStub(channel),
        )


@contextmanager
def running_bridge(table_path: Path, **buffer: float) -> Iterator[RunningBridge]:
    bridge = RunningBridge(make_settings(table_path, **buffer))
    try:
        yield bridge
    finally:
        bridge.stop()


def read_table(table_path: Path, name: str) -> pa.Table:
    """A table as stored, read back with delta-rs, rows in write order."""
    return DeltaTable(str(table_path / name)).to_pyarrow_table()


def table_exists(table_path: Path, name: str) -> bool:
    return DeltaTable.is_deltatable(str(table_path / name))
