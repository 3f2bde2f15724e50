"""Run a real bridge (gRPC server + buffer + delta-rs writer) inside a test."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_delta.bridge import Bridge
from otel_delta.config import Settings
from otel_delta.convert import Converted
from otel_delta.pipeline import Decoder
from otel_delta.signals import Signal

# Test servers listen on loopback only, on ports the OS picks: every door of the bridge
LOOPBACK = (
    '[admin]\nendpoint = "127.0.0.1:0"\n'
    '[receiver]\ngrpc_endpoint = "127.0.0.1:0"\nhttp_endpoint = "127.0.0.1:0"\n'
)
LOOPBACK_RECEIVER = {"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0"}


def bridge_config(directory: Path, sections: str = "") -> Path:
    """`directory`/deltalake.toml of a bridge on loopback ports (LOOPBACK) with `sections` (TOML
    sections of their own, e.g. `[buffer]` or `[logging]`), its lake in `directory`/lake and
    its write-ahead log in `directory`/wal."""
    config = directory / "deltalake.toml"
    config.write_text(
        f'{LOOPBACK}{sections}[deltalake]\ntable_path = "{directory / "lake"}"\n'
        f'[wal]\ndir = "{directory / "wal"}"\n'
    )
    return config


# below Linux's ephemeral range (32768-60999): a port the kernel handed out for `bind(0)` is
# also what it hands the next outgoing connection, and a Collector's own clients took one
# between the test picking it and the Collector binding it ("address already in use")
UNEPHEMERAL_PORTS = range(20000, 32768)


@cache
def _decoder(native: bool) -> Decoder:
    return Decoder(0, native)


def decode_once(
    signal: Signal, raw: bytes, native: bool = False, partition_by: Sequence[str] = ()
) -> Converted:
    """What the receiver's decoder makes of `raw`: the converter (native if asked and able),
    its UTF-8 repair and the admission rules for `partition_by`, as a request goes through
    them; InvalidRequestError if the bytes are not the request."""
    return asyncio.run(_decoder(native).decode(signal, raw, partition_by))


def free_port() -> int:
    """A loopback port free right now (for servers that cannot be told to pick one), outside
    the range the kernel takes ports for outgoing connections from."""
    while True:
        port = random.choice(UNEPHEMERAL_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def wait_until(condition: Callable[[], object], timeout: float = 60.0, what: str = "") -> None:
    """Poll `condition` until it is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or 'the condition'}")
        time.sleep(0.1)


def make_settings(
    table_path: Path,
    convert_workers: int = 0,
    *,
    ack: str = "commit",
    wal_dir: Path | None = None,
    receiver: dict[str, Any] | None = None,
    admin: dict[str, Any] | None = None,
    **buffer: float,
) -> Settings:
    """Settings of an in-process test bridge. `ack = "commit"` by default: these tests read a
    table right after an Export returns, which only that mode promises; the write-ahead-log
    mode (the product's default) has tests of its own. Each bridge gets its own WAL directory
    unless one is given (a restart reuses it)."""
    wal = wal_dir or table_path.parent / f"wal-{uuid.uuid4().hex[:8]}"
    return Settings(
        receiver={**LOOPBACK_RECEIVER, "convert_workers": convert_workers, **(receiver or {})},
        admin={"endpoint": "127.0.0.1:0", **(admin or {})},
        buffer={"flush_interval_seconds": 0.1, "ack": ack, **buffer},
        deltalake={"table_path": str(table_path)},
        wal={"dir": str(wal)},
    )


class RunningBridge:
    """A Bridge on its own event loop thread, driven from synchronous test code."""

    def __init__(self, settings: Settings) -> None:
        if "max_resident_bytes" not in settings.buffer.model_fields_set:
            # the RSS is the pytest process's, not the bridge's: no memory limit unless set
            # (tests/buffer/test_resident_limit.py runs one in a bridge of its own)
            buffer = settings.buffer.model_copy(update={"max_resident_bytes": 0})
            settings = settings.model_copy(update={"buffer": buffer})
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


def data_files(table: Path) -> set[str]:
    """The Parquet data files on disk under a local table, relative to it (not the log's
    checkpoints, nor `_change_data`): what a vacuum or a purge really removed is the
    difference of two of these sets."""
    return {
        str(path.relative_to(table))
        for path in table.rglob("*.parquet")
        if not path.relative_to(table).parts[0].startswith("_")
    }


class ServeProcess:
    """`otel-delta serve --config FILE` as a user starts it; stderr is drained on a thread
    (kept in `lines`) so a chatty server never blocks on a full pipe."""

    def __init__(
        self,
        config: Path,
        timeout: float = 60,
        open_files_soft_limit: int | None = None,
        env: dict[str, str] | None = None,
        own_process_group: bool = False,
        listening: bool = True,
        wrapper: Sequence[str] = (),
    ) -> None:
        """`own_process_group`: the server leads a process group of its own, as a command in
        a terminal does (a Ctrl-C goes to the group: os.killpg(server.proc.pid, SIGINT)).
        `listening=False`: return once the process runs, not once it listens (a start to be
        stopped before it listens, e.g. while it replays its write-ahead log). `wrapper`: a
        command the server runs under (e.g. strace and its options)."""
        argv = [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)]
        if open_files_soft_limit is not None:  # as if started under `ulimit -Sn`
            argv = ["sh", "-c", 'ulimit -Sn "$0" && exec "$@"', str(open_files_soft_limit), *argv]
        argv = [*wrapper, *argv]
        # no preexec_fn: Python in a forked child of this process (which runs gRPC clients)
        # is what otel_delta/grpcenv.py explains; without one, Popen need not run any
        self.proc = subprocess.Popen(
            argv,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            process_group=0 if own_process_group else None,
        )
        self.lines: list[str] = []
        ready = threading.Event()
        self.port = 0
        self.http_port = 0  # 0: no OTLP/HTTP (or not started)
        self.admin_port = 0

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if match and not ready.is_set():
                    self.port = int(match.group(1))
                    if http := re.search(r"127\.0\.0\.1:(\d+) \(OTLP/HTTP\)", line):
                        self.http_port = int(http.group(1))
                    if admin := re.search(r"admin on 127\.0\.0\.1:(\d+)", line):
                        self.admin_port = int(admin.group(1))
                    ready.set()
            ready.set()

        self._drainer = threading.Thread(target=drain, daemon=True)
        self._drainer.start()
        if not listening:
            self.endpoint = ""
            return
        if not ready.wait(timeout) or not self.port:
            code = self.proc.poll()
            self.proc.kill()
            raise AssertionError(f"serve did not start (exit code {code}):\n" + "".join(self.lines))
        self.endpoint = f"127.0.0.1:{self.port}"

    def metrics(self) -> str:
        """The bridge's admin /metrics, as text."""
        url = f"http://127.0.0.1:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read().decode()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._drainer.join(10)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._drainer.join(10)
        return code


LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
PLACEHOLDER = "\x01\x02\x03\x04"  # 4 bytes, swapped below for 4 bytes that are not UTF-8


def latin1_logs(service: str) -> bytes:
    """Three log records of `service`, the second's body and attribute in Latin-1 ("café"
    as b"caf\\xe9"): what a Collector's filelog receiver reading a Latin-1 file passes on."""
    records = [
        logs_pb2.LogRecord(body=AnyValue(string_value="first")),
        logs_pb2.LogRecord(
            body=AnyValue(string_value=PLACEHOLDER),
            attributes=[KeyValue(key="file", value=AnyValue(string_value=PLACEHOLDER))],
        ),
        logs_pb2.LogRecord(body=AnyValue(string_value="third")),
    ]
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))]
    )
    request = ExportLogsServiceRequest(
        resource_logs=[
            logs_pb2.ResourceLogs(
                resource=resource, scope_logs=[logs_pb2.ScopeLogs(log_records=records)]
            )
        ]
    )
    return request.SerializeToString().replace(PLACEHOLDER.encode(), b"caf\xe9")


@contextmanager
def refusing_new_files(directory: Path) -> Iterator[None]:
    """`directory` refuses new files and deletions in it, as a store that stops taking writes
    does (reads go on): read-only for a user, immutable (chattr +i) for root, whom permissions
    do not stop."""
    root = os.geteuid() == 0
    if root:
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode:
            pytest.fail(f"chattr +i {directory} failed: this test needs a file system with it")
    else:
        directory.chmod(0o555)
    try:
        yield
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        else:
            directory.chmod(0o755)
