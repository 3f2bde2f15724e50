"""`otel-delta serve` as a user runs it: a real process, real signals."""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.cli import exit_code
from otel_delta.errors import (
    BackfillError,
    CommitError,
    ConcurrentModificationError,
    ConfigError,
    InvalidPredicateError,
    OtelDeltaError,
    StoreUnavailableError,
    StreamFailedError,
    TableNotFoundError,
    UsageError,
)
from tests.helpers import LOOPBACK, ServeProcess, bridge_config, read_table

pytestmark = pytest.mark.e2e


def serve_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)]


def run_serve(config: Path) -> subprocess.CompletedProcess:
    """`serve` that is expected to fail at start: its exit code and stderr."""
    return subprocess.run(serve_command(config), capture_output=True, text=True, timeout=60)


def one_span_request(i: int) -> ExportTraceServiceRequest:
    span = trace_pb2.Span(
        trace_id=i.to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name=f"s{i}"
    )
    return ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=[span])])]
    )


def test_sigterm_commits_requests_in_flight_and_exits_zero(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    config = tmp_path / "deltalake.toml"
    # a flush interval far longer than the test: only shutdown can commit these rows
    config.write_text(
        f"{LOOPBACK}"
        f'[buffer]\nflush_interval_seconds = 600\nack = "commit"\n'
        f'[deltalake]\ntable_path = "{lake}"\n'
    )
    serve = ServeProcess(config)
    proc = serve.proc
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.endpoint))
    in_flight = [stub.Export.future(one_span_request(i)) for i in range(1, 21)]
    time.sleep(1.0)  # let every request reach the buffer
    assert not any(f.done() for f in in_flight)
    proc.send_signal(signal.SIGTERM)
    for future in in_flight:
        future.result(timeout=30)  # every waiting request is answered OK
    assert proc.wait(timeout=30) == 0
    assert read_table(lake, "spans").num_rows == 20


def test_a_failed_operation_exits_1_and_input_the_command_cannot_take_2() -> None:
    """As the README's Command line section says: the same command may succeed later (1), or
    not as given (2). A lost commit race and a failed stream exited 2 before, as bad input."""
    failed: list[OtelDeltaError] = [
        StoreUnavailableError("spans", "s3://lake/spans", "Connection refused"),
        ConcurrentModificationError("spans", 4, 3),
        CommitError("commit failed"),
        StreamFailedError("kafka broker gone"),
    ]
    refused: list[OtelDeltaError] = [
        ConfigError("x: unknown key"),
        UsageError("delete needs --where"),
        TableNotFoundError("spans"),
        InvalidPredicateError("bad", "x ="),
        BackfillError("backfill: x: no such file or directory"),
    ]
    assert [exit_code(error) for error in failed] == [1] * len(failed)
    assert [exit_code(error) for error in refused] == [2] * len(refused)


def test_bad_config_is_one_clear_line(tmp_path: Path) -> None:
    config = tmp_path / "deltalake.toml"
    config.write_text("[buffer]\nmax_rows = 0\n")
    result = run_serve(config)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "buffer.max_rows" in lines[0] and "greater than 0" in lines[0]
    assert "Traceback" not in result.stderr


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'{LOOPBACK}[deltalake]\ntable_path = "{tmp_path}"\n[wal]\ndir = "{tmp_path / "wal-1"}"\n'
    )
    serve = ServeProcess(config)
    first = serve.proc
    try:
        config.write_text(
            f'[receiver]\ngrpc_endpoint = "{serve.endpoint}"\n[wal]\ndir = "{tmp_path / "wal-2"}"\n'
        )
        result = run_serve(config)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "receiver.grpc_endpoint" in lines[0], result.stderr
        assert "address already in use" in lines[0].lower()
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=30) == 0


def test_unusable_wal_dir_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'{LOOPBACK}[deltalake]\ntable_path = "{tmp_path}"\n[wal]\ndir = "{blocker / "wal"}"\n'
    )
    result = run_serve(config)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "wal.dir" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_in_wal_mode_answers_quickly_and_commits_everything(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """ack = "wal": Exports are answered long before the (600 s) flush; SIGTERM commits them,
    So does SIGHUP (the terminal `serve` ran in closed), which used to kill it at once, with no
    log line: nothing acknowledged was lost (the log replays it), but nothing was committed."""
    lake = tmp_path / "lake"
    config = bridge_config(tmp_path, "[buffer]\nflush_interval_seconds = 600\n")
    serve = ServeProcess(config)
    proc = serve.proc
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.endpoint))
    for i in range(1, 21):
        stub.Export(one_span_request(i), timeout=10)  # acknowledged from the log
    assert not (lake / "spans").exists()  # nothing committed yet
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 0
    assert sorted(read_table(lake, "spans")["name"].to_pylist()) == sorted(
        f"s{i}" for i in range(1, 21)
    )


def test_sigterm_while_an_http_body_is_arriving_answers_it_503_and_exits_zero(
    tmp_path: Path,
) -> None:
    """A request whose body has not arrived is not accepted yet: SIGTERM answers it at once with
    the retryable 503 instead of waiting for the rest, and the bridge exits 0 with what was
    acknowledged before committed."""
    lake = tmp_path / "lake"
    config = bridge_config(tmp_path)
    serve = ServeProcess(config)
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(serve.endpoint))
    stub.Export(one_span_request(1), timeout=10)
    body = one_span_request(2).SerializeToString()
    stalled = socket.create_connection(("127.0.0.1", serve.http_port))
    stalled.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        + f"Content-Length: {len(body) + 100}\r\n\r\n".encode()
        + body  # 100 bytes short: the body never completes
    )
    time.sleep(0.5)  # the request holds its slot, reading
    code = serve.stop(timeout=60)
    stalled.settimeout(10)
    assert stalled.recv(65536).startswith(b"HTTP/1.1 503")
    stalled.close()
    stderr = "".join(serve.lines)
    assert code == 0, stderr
    assert "Traceback" not in stderr and "stopped:" in stderr
    assert read_table(lake, "spans")["name"].to_pylist() == ["s1"]


def test_many_idle_connections_do_not_stall_exports(tmp_path: Path) -> None:
    """Started under `ulimit -n 1024` (a common default), 1,100 idle client connections plus
    one that exports: serve raises its soft limit, so the export is answered."""
    wanted = 1_100
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted + 200:
        raise AssertionError(f"this machine's hard open-files limit {hard} is too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted + 200), hard))
    config = bridge_config(tmp_path)
    server = ServeProcess(config, open_files_soft_limit=1024)
    idle = []
    try:
        for _ in range(wanted):
            channel = grpc.insecure_channel(
                server.endpoint, options=[("grpc.use_local_subchannel_pool", 1)]
            )
            grpc.channel_ready_future(channel).result(timeout=30)
            idle.append(channel)
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
        stub.Export(one_span_request(1), timeout=30)
    finally:
        for channel in idle:
            channel.close()
        assert server.stop() == 0
    assert read_table(tmp_path / "lake", "spans").num_rows == 1


def test_serve_opens_every_door_and_logs_json(tmp_path: Path) -> None:
    """As a user starts it: gRPC, HTTP and admin ports in the first line, the log as JSON."""
    import json

    import requests

    lake = tmp_path / "lake"
    config = bridge_config(tmp_path, '[logging]\nformat = "json"\n')
    server = ServeProcess(config)
    try:
        assert server.http_port and server.admin_port
        answer = requests.post(
            f"http://127.0.0.1:{server.http_port}/v1/traces",
            data=one_span_request(1).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert answer.status_code == 200
        ready = requests.get(f"http://127.0.0.1:{server.admin_port}/readyz", timeout=30)
        assert ready.status_code == 200
        metrics = server.metrics()
        assert "otel_delta_receiver_requests_total" in metrics
        # the stream job's series are on its own endpoint, not a bridge's (always zero here)
        assert "otel_delta_stream_" not in metrics
    finally:
        assert server.stop() == 0
    entries = [json.loads(line) for line in server.lines if line.strip()]
    assert entries and all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    assert "(OTLP/HTTP)" in entries[0]["message"] or any(
        "(OTLP/HTTP)" in e["message"] for e in entries
    )
    assert read_table(lake, "spans").num_rows == 1


def test_failed_tls_handshakes_leave_the_json_log_json(tmp_path: Path, monkeypatch) -> None:
    """A plaintext client, a port scan or a load balancer's TCP check on the TLS port fails its
    handshake; gRPC's core reported each one on stderr at INFO in a format of its own
    (`I1128 01:38:56.716080 ... Handshake failed ...`), one line per connection, which a log
    shipper reading `[logging] format = "json"` cannot parse."""
    import json

    from tests.certs import make_certs

    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    certs = make_certs(tmp_path / "certs")
    config = bridge_config(
        tmp_path,
        f'[receiver.tls]\ncert_file = "{certs.server_cert}"\nkey_file = "{certs.server_key}"\n'
        '[logging]\nformat = "json"\n',
    )
    server = ServeProcess(config)
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain:
                plain.sendall(b"GET / HTTP/1.1\r\nHost: otel-delta\r\n\r\n")
                plain.recv(100)  # the server ends the connection
        time.sleep(0.5)
    finally:
        assert server.stop() == 0
    lines = [line for line in server.lines if line.strip()]
    not_json = [line for line in lines if not line.startswith("{")]
    assert not not_json, not_json
    assert all({"time", "level", "logger", "message"} <= set(json.loads(x)) for x in lines)


def test_the_configurations_warnings_are_json_in_a_json_log(tmp_path: Path) -> None:
    """The warnings the configuration gives while it loads (a compatibility key, a short
    vacuum retention) came before the switch to JSON, as text lines at the top of the log."""
    import json

    config = bridge_config(
        tmp_path,
        '[logging]\nformat = "json"\n[deltalake.table]\nparallelism = 4\nretention_hours = 0\n',
    )
    server = ServeProcess(config)
    assert server.stop() == 0
    lines = [line for line in server.lines if line.strip()]
    not_json = [line for line in lines if not line.startswith("{")]
    assert not not_json, not_json
    messages = [json.loads(line)["message"] for line in lines]
    assert any("parallelism is accepted for compatibility" in m for m in messages), messages
    assert any("retention_hours = 0" in m for m in messages), messages


def damage(table: Path) -> None:
    """A table whose first commit is not JSON, as a torn copy or a stray write leaves it."""
    (table / "_delta_log").mkdir(parents=True, exist_ok=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text("garbage, not a commit\n")


def test_a_damaged_table_does_not_stop_a_start_with_nothing_to_replay(tmp_path: Path) -> None:
    """An empty write-ahead log has nothing to replay into any table: a table that cannot be
    read is named in a warning and left out, and the other tables take their rows."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc

    from tests import corpus

    lake = tmp_path / "lake"
    damage(lake / "spans")
    config = bridge_config(tmp_path)
    server = ServeProcess(config)
    try:
        logs = logs_service_pb2_grpc.LogsServiceStub(grpc.insecure_channel(server.endpoint))
        logs.Export(corpus.logs_request(), timeout=30)
    finally:
        assert server.stop() == 0
    assert any("table 'spans'" in line and "cannot be read" in line for line in server.lines)
    assert read_table(lake, "logs").num_rows == len(
        [
            r
            for rl in corpus.logs_request().resource_logs
            for s in rl.scope_logs
            for r in s.log_records
        ]
    )


def test_a_damaged_table_with_records_to_replay_is_one_clear_line(tmp_path: Path) -> None:
    """Replay must know what each table holds; one that cannot be read stops the start with a
    line naming it and delta-rs's error, not a traceback with a Rust backtrace."""
    lake = tmp_path / "lake"
    # acknowledged once logged; a flush interval far longer than the test: nothing committed
    config = bridge_config(tmp_path, "[buffer]\nflush_interval_seconds = 600\n")
    server = ServeProcess(config)
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
    stub.Export(one_span_request(1), timeout=30)
    server.kill9()
    damage(lake / "spans")
    result = run_serve(config)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "table 'spans'" in lines[0] and "cannot be read" in lines[0], lines[0]
    assert "Json error" in lines[0], lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("ack", ["wal", "commit"])
def test_the_first_line_says_where_an_ok_leaves_a_request(tmp_path: Path, ack: str) -> None:
    """A deltalake.toml from before the write-ahead log (where OK meant committed) has no
    `ack`: after an upgrade the default answers from a local directory, which must outlive the
    process. The line that says where the bridge listens says which, and where."""
    config = bridge_config(tmp_path, f'[buffer]\nack = "{ack}"\n')
    server = ServeProcess(config)
    assert server.stop() == 0
    first = next(line for line in server.lines if "listening on" in line)
    if ack == "wal":
        assert f"OK once in the write-ahead log in {tmp_path / 'wal'}" in first
    else:
        assert "OK once committed" in first
