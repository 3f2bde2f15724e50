"""A crash at each step between a request's arrival and its release from the log (injected
with otel_delta.faults), then a restart: whatever was acknowledged is stored, nothing twice."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta.faults import CRASH_EXIT_CODE
from tests.helpers import LOOPBACK, ServeProcess, read_table
from tests.test_cli import one_span_request

pytestmark = pytest.mark.e2e


def config_file(tmp_path: Path) -> Path:
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK + "[buffer]\nflush_interval_seconds = 0.2\n"
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        f'[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    return config


@pytest.mark.parametrize(
    ("point", "first_request_acked"),
    [
        ("wal-written", False),  # died before the fsync: never answered
        ("wal-synced", False),  # durable, died before answering
        ("delta-committed", True),  # answered, committed, died before releasing the record
    ],
)
def test_crash_at_each_step(tmp_path: Path, point: str, first_request_acked: bool) -> None:
    config = config_file(tmp_path)
    server = ServeProcess(config, env={"OTEL_DELTA_CRASH_AT": point})
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
    acked = []
    for i in range(1, 4):
        try:
            stub.Export(one_span_request(i), timeout=10)
            acked.append(f"s{i}")
        except grpc.RpcError:
            break
    assert server.proc.wait(timeout=30) == CRASH_EXIT_CODE, "the crash point was never reached"
    assert ("s1" in acked) == first_request_acked
    restarted = ServeProcess(config)  # replays the log
    assert restarted.stop() == 0
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert len(names) == len(set(names)), f"stored twice: {names}"
    assert set(acked) <= set(names)
    # the first request reached the log's file in every case: the replay commits it, once
    assert "s1" in names
