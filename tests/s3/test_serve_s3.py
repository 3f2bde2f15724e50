"""The bridge as users start it (`otel-delta serve --config FILE`), its lake on S3 (versitygw):
every signal over both transports lands in the S3 tables; kill -9 under load and two bridges on
one lake (also both running maintenance) store every acknowledged span exactly once, and so
does an S3 outage; the table commands work on the S3 lake."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
import requests
from deltalake import DeltaTable
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_delta.convert.to_otlp import logs_from_arrow, metrics_from_arrow, spans_from_arrow
from otel_delta.lakehouse import READ_VERSION
from otel_delta.tables import TABLES
from tests import corpus
from tests.helpers import LOOPBACK, ServeProcess
from tests.s3 import S3Server, versitygw
from tests.test_cli import one_span_request
from tests.transports.test_end_to_end import logs_by_event, spans_by_id
from tests.wal.test_crash import SPANS_PER_REQUEST, crash_under_load, load, request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROTOBUF = {"Content-Type": "application/x-protobuf"}
# rows of each table that one corpus request of each signal makes
CORPUS_ROWS = {
    "spans": 4,
    "logs": 14,
    "metrics_gauge": 3,
    "metrics_sum": 2,
    "metrics_histogram": 2,
    "metrics_exponential_histogram": 2,
    "metrics_summary": 2,
}
LAKE = "lake"


def write_config(
    tmp_path: Path,
    s3: S3Server,
    name: str = "deltalake.toml",
    wal: str = "wal",
    buffer_lines: str = "",
    wal_lines: str = "",
    table_lines: str = "maintenance_interval_seconds = 0\n",
) -> Path:
    """A deltalake.toml with its lake at s3://bucket/lake, its WAL in tmp_path / wal; no
    maintenance unless `table_lines` (of `[deltalake.table]`) says otherwise."""
    config = tmp_path / name
    config.write_text(
        LOOPBACK
        + "[buffer]\nflush_interval_seconds = 0.5\n"
        + buffer_lines
        + f'[wal]\ndir = "{tmp_path / wal}"\n'
        + wal_lines
        + f'[deltalake]\ntable_path = "{s3.url(LAKE)}"\n'
        + "[deltalake.table]\n"
        + table_lines
        + '[deltalake.operations]\nengine = "delta-rs"\n'
        + s3.toml()
    )
    return config


def table(s3: S3Server, name: str) -> DeltaTable:
    return DeltaTable(s3.url(LAKE, name), storage_options=s3.storage_options())


def read(s3: S3Server, name: str) -> pa.Table:
    return table(s3, name).to_pyarrow_table()


def rows(s3: S3Server) -> dict[str, int]:
    """Rows of each table that exists on S3 so far."""
    options = s3.storage_options()
    return {
        name: read(s3, name).num_rows
        for name in TABLES
        if DeltaTable.is_deltatable(s3.url(LAKE, name), storage_options=options)
    }


def wait_for(what, expected, timeout: float = 60.0):
    """Poll `what()` until it returns `expected` (rows land one flush after the ack)."""
    deadline = time.monotonic() + timeout
    while (found := what()) != expected and time.monotonic() < deadline:
        time.sleep(0.25)
    return found


def metric(server: ServeProcess, name: str, table_name: str) -> float:
    """A per-table counter of the bridge's /metrics (0 if it has no sample yet)."""
    text = requests.get(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=30).text
    pattern = rf'^{name}_total\{{table="{table_name}"\}} (\S+)$'
    found = re.search(pattern, text, re.M)
    return float(found[1]) if found else 0.0


def metric_value(server: ServeProcess, name: str) -> float:
    """A gauge of the bridge's /metrics without labels (0 if it has no sample)."""
    text = requests.get(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=30).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


def send_grpc(server: ServeProcess) -> None:
    channel = grpc.insecure_channel(server.endpoint)
    answers = [
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(corpus.trace_request(), timeout=30),
        metrics_service_pb2_grpc.MetricsServiceStub(channel).Export(
            corpus.metrics_request(), timeout=30
        ),
        logs_service_pb2_grpc.LogsServiceStub(channel).Export(corpus.logs_request(), timeout=30),
    ]
    assert not any(answer.HasField("partial_success") for answer in answers), answers
    channel.close()


def send_http(server: ServeProcess) -> None:
    assert server.http_port, "serve did not report its OTLP/HTTP port"
    for path, message, response_type in (
        ("/v1/traces", corpus.trace_request(), trace_service_pb2.ExportTraceServiceResponse),
        ("/v1/metrics", corpus.metrics_request(), metrics_service_pb2.ExportMetricsServiceResponse),
        ("/v1/logs", corpus.logs_request(), logs_service_pb2.ExportLogsServiceResponse),
    ):
        answer = requests.post(
            f"http://127.0.0.1:{server.http_port}{path}",
            data=message.SerializeToString(),
            headers=PROTOBUF,
            timeout=30,
        )
        assert answer.status_code == 200, (path, answer.status_code, answer.content)
        assert not response_type.FromString(answer.content).HasField("partial_success")


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_every_signal_lands_in_the_s3_tables(tmp_path: Path, s3: S3Server, transport: str):
    server = ServeProcess(write_config(tmp_path, s3))
    try:
        (send_grpc if transport == "grpc" else send_http)(server)
        # acknowledged once in the WAL: the rows reach S3 at the next flush, while it runs
        assert wait_for(lambda: rows(s3), CORPUS_ROWS) == CORPUS_ROWS
        for name in TABLES:
            assert metric(server, "otel_delta_commits", name) >= 1, name
            assert metric(server, "otel_delta_commit_failures", name) == 0, name
    finally:
        code = server.stop()
    assert code == 0, "".join(server.lines)

    # after a clean stop: the same rows, once each, every field as sent
    assert rows(s3) == CORPUS_ROWS
    spans = read(s3, "spans")
    assert len(set(spans.column("span_id").to_pylist())) == spans.num_rows
    assert spans_by_id(spans_from_arrow(spans)) == spans_by_id(corpus.trace_request())
    metric_tables = {n: read(s3, n) for n in TABLES if n.startswith("metrics_")}
    assert metrics_from_arrow(metric_tables) == corpus.metrics_request()
    assert logs_by_event(logs_from_arrow(read(s3, "logs"))) == logs_by_event(corpus.logs_request())
    for name in TABLES:  # stored as Delta tables in the bucket, not anywhere else
        keys = s3.objects(LAKE, name)
        assert f"{LAKE}/{name}/_delta_log/00000000000000000000.json" in keys, keys
        assert any(key.endswith(".parquet") for key in keys), keys
    assert not (tmp_path / "lakehouse").exists()


def test_kill_9_under_load_loses_no_acked_span_and_stores_none_twice(tmp_path: Path, s3: S3Server):
    """tests/wal/test_crash.py, smaller, on S3: kill -9 while commits to S3 are in flight,
    restart on the same WAL, repeat; then a clean restart replays the rest."""
    # short flushes, small commits and segments: commits to S3 are in flight at every kill
    config = write_config(
        tmp_path, s3, buffer_lines="max_rows = 400\n", wal_lines="segment_bytes = 65536\n"
    )
    run = crash_under_load(config, rounds=2, clients=3, pause=(1.5, 3.0), seed=20261124)
    acked, sent, replays = run.acked, run.sent, run.replays

    assert len(acked) > 500, "too little load to mean anything"
    assert replays > 0, "no restart found anything to replay: the kills came too late"
    stored = read(s3, "spans").column("span_id").to_pylist()
    assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} span(s) twice"
    assert set(acked) <= set(stored), f"{len(set(acked) - set(stored))} acked span(s) lost"
    assert set(stored) <= set(sent)


def stored_once(s3: S3Server, acked: list[str]) -> list[str]:
    """The span ids of the S3 lake's spans table, checked: enough load to mean anything, no
    span twice, every acknowledged one there."""
    assert len(acked) > 500, "too little load to mean anything"
    stored = read(s3, "spans").column("span_id").to_pylist()
    assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} span(s) twice"
    assert set(acked) <= set(stored), f"{len(set(acked) - set(stored))} acked span(s) lost"
    return stored


def test_two_bridges_on_one_s3_lake_store_every_acked_span_once(tmp_path: Path, s3: S3Server):
    servers = [
        # small commits (max_rows): each bridge commits back to back, so they race for versions
        ServeProcess(
            write_config(
                tmp_path, s3, f"bridge{i}.toml", wal=f"wal{i}", buffer_lines="max_rows = 200\n"
            )
        )
        for i in range(2)
    ]
    acked: list[str] = []
    sent: list[str] = []
    stop = threading.Event()
    try:
        clients = [
            threading.Thread(target=load, args=(servers[c % 2].endpoint, c, stop, acked, sent))
            for c in range(4)
        ]
        for client in clients:
            client.start()
        time.sleep(5)
        stop.set()
        for client in clients:
            client.join(30)
        # both bridges committed to the one spans table, several times each, without a failure
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            metric(s, "otel_delta_commits", "spans") < 2 for s in servers
        ):
            time.sleep(0.25)
        for server in servers:
            assert metric(server, "otel_delta_commits", "spans") >= 2
            assert metric(server, "otel_delta_commit_failures", "spans") == 0
        # every acked span committed: no commit is left for the stop, after the scrape below
        while time.monotonic() < deadline and any(
            metric_value(s, "otel_delta_wal_pending_records") for s in servers
        ):
            time.sleep(0.25)
        races = sum(metric(s, "otel_delta_commit_races", "spans") for s in servers)
    finally:
        codes = [server.stop() for server in servers]
    assert codes == [0, 0], "".join(servers[0].lines + servers[1].lines)

    stored = stored_once(s3, acked)
    assert set(stored) <= set(sent)
    # the two bridges did race for versions: some commit was rebased onto a newer one than
    # it was planned on (the bridge's appends record that version; delta-rs's own writes
    # count their retries)
    rebased = sum(
        int(c["version"]) - 1 > int(c.get(READ_VERSION, c["version"]))
        or c.get("operationMetrics", {}).get("num_retries", 0) > 0
        for c in table(s3, "spans").history()
    )
    assert rebased > 0, "the two bridges never raced for a version: the test proves nothing"
    # and /metrics said so: each bridge commit that lost its version, counted once
    bridge_rebased = sum(
        int(c["version"]) - 1 > int(c[READ_VERSION])
        for c in table(s3, "spans").history()
        if READ_VERSION in c
    )
    assert races == bridge_rebased > 0


def maintenance_runs(server: ServeProcess, step: str, outcome: str) -> float:
    """otel_delta_maintenance_runs_total of one step and outcome (0 if it has no sample)."""
    text = requests.get(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=30).text
    pattern = rf'^otel_delta_maintenance_runs_total\{{outcome="{outcome}",step="{step}"\}} (\S+)$'
    found = re.search(pattern, text, re.M)
    return float(found[1]) if found else 0.0


def load_today(
    endpoint: str, stream: int, stop: threading.Event, acked: list[str], days_ago: int = 0
) -> None:
    """As tests.wal.test_crash.load, with spans that start now (or `days_ago` days before):
    today's partition, which maintenance compacts while it is written, or a closed day's,
    which it sorts and bin-packs again as late data arrives (`load`'s spans are of
    1970-01-01)."""
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(endpoint))
    counter = 0
    while not stop.is_set():
        counter += 1
        first = (stream * 10**7 + counter) * SPANS_PER_REQUEST
        message = request(first)
        for span in message.resource_spans[0].scope_spans[0].spans:
            span.start_time_unix_nano = span.end_time_unix_nano = (
                time.time_ns() - days_ago * 86_400 * 10**9
            )
        try:
            stub.Export(message, timeout=10)
        except grpc.RpcError:
            continue
        acked.extend(f"{first + k + 1:016x}" for k in range(SPANS_PER_REQUEST))


REWRITES = ("clustering", "compaction", "open_compaction")


def test_bridges_that_all_run_maintenance_store_every_acked_span_once(tmp_path: Path, s3: S3Server):
    """Two bridges on one lake, both running maintenance every 0.5 s while both take load, of
    today and of yesterday (late data: the closed day is sorted and bin-packed again every
    round). Without the maintenance lease their rewrites raced for the same files and both
    landed (delta-rs's own bin-packing checks nothing: spans were stored up to 192 times);
    with it, one bridge rewrites and the other skips its rewrites."""
    table_lines = (
        "maintenance_interval_seconds = 0.5\nopen_partition_compaction_age_seconds = 0.5\n"
    )
    servers = [
        ServeProcess(
            write_config(
                tmp_path,
                s3,
                f"bridge{i}.toml",
                wal=f"wal{i}",
                buffer_lines="max_rows = 200\n",
                table_lines=table_lines,
            )
        )
        for i in range(2)
    ]
    acked: list[str] = []
    stop = threading.Event()
    try:
        clients = [
            threading.Thread(
                target=load_today, args=(servers[c % 2].endpoint, c, stop, acked, c // 2)
            )
            for c in range(4)
        ]
        for client in clients:
            client.start()
        # the load goes on (at least 8 s, at most 120) until one bridge has rewritten both
        # days' files, each round the other's skipped (how soon depends on the machine)
        started = time.monotonic()
        while time.monotonic() - started < 120:
            time.sleep(0.5)
            skipped = [maintenance_runs(s, "open_compaction", "skipped") for s in servers]
            if time.monotonic() - started > 8 and any(skipped) and rewrites(s3) >= 4:
                break
        skipped = [maintenance_runs(s, "open_compaction", "skipped") for s in servers]
        failed = [sum(maintenance_runs(s, step, "failed") for step in REWRITES) for s in servers]
        stop.set()
        for client in clients:
            client.join(30)
    finally:
        codes = [server.stop() for server in servers]
    assert codes == [0, 0], "".join(servers[0].lines + servers[1].lines)

    stored_once(s3, acked)
    assert rewrites(s3) >= 4, "maintenance rewrote too little to mean anything"
    assert sorted(bool(n) for n in skipped) == [False, True], skipped  # one skipped, one did
    warnings = [line for s in servers for line in s.lines if "failed" in line]
    assert failed == [0, 0], warnings  # no rewrite lost a race: they never ran at once


def rewrites(s3: S3Server) -> int:
    """Commits of the spans table that rewrote files (ours and delta-rs's own)."""
    return sum(
        1
        for entry in table(s3, "spans").history()
        if entry["operation"] == "OPTIMIZE" or entry.get("otel_delta.operation") == "compaction"
    )


def ready(server: ServeProcess) -> int:
    return requests.get(f"http://127.0.0.1:{server.admin_port}/readyz", timeout=30).status_code


def commits_check(server: ServeProcess) -> dict:
    """The `commits` check of /readyz: ok and detail."""
    answer = requests.get(f"http://127.0.0.1:{server.admin_port}/readyz", timeout=30).json()
    return next(check for check in answer["checks"] if check["name"] == "commits")


class Sender:
    """Span requests to one bridge, with ids unique across the test; `acked` holds the ids
    of every span acknowledged (fsync'd in the WAL)."""

    def __init__(self, server: ServeProcess, acked: list[str] | None = None) -> None:
        self.stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
        self.acked = acked if acked is not None else []

    def send(self, count: int) -> None:
        for _ in range(count):
            first = (len(self.acked) // SPANS_PER_REQUEST + 1) * SPANS_PER_REQUEST
            self.stub.Export(request(first), timeout=30)
            self.acked.extend(f"{first + k + 1:016x}" for k in range(SPANS_PER_REQUEST))


def one_line_records(lines: list[str]) -> None:
    """Every log record is one plain line: no colour codes, no traceback or continuation."""
    colours = [line for line in lines if "\x1b[" in line]
    assert not colours, f"terminal colour codes in the log (stderr is no terminal): {colours[:2]!r}"
    continued = [line for line in lines if not re.match(r"\d{4}-\d\d-\d\d ", line)]
    assert not continued, f"log records over several lines: {continued[:3]!r}"


@pytest.mark.parametrize("fault", ["down", "refusing_keys"])
def test_an_s3_outage_delays_commits_and_loses_no_acked_span(tmp_path: Path, fault: str):
    """S3 refusing connections (or our keys: restarted with another secret) for a while:
    Exports are still acknowledged (WAL), commits fail and are retried, /readyz turns 503, and
    once S3 is back every acked span lands, once; the failures, the maintainer's too, are
    logged as plain one-line records."""
    with versitygw(tmp_path / "s3") as s3:  # its own server: the session's is not stopped
        config = write_config(tmp_path, s3)
        env = {
            "OTEL_DELTA_ADMIN__COMMIT_FAILURE_SECONDS": "1",
            "OTEL_DELTA_DELTALAKE__TABLE__MAINTENANCE_INTERVAL_SECONDS": "1",
        }
        server = ServeProcess(config, env=env)
        sender = Sender(server)
        send, acked = sender.send, sender.acked
        try:
            send(5)
            assert wait_for(lambda: read(s3, "spans").num_rows, len(acked)) == len(acked)
            with getattr(s3, fault)():
                send(10)
                assert wait_for(
                    lambda: metric(server, "otel_delta_commit_failures", "spans") > 0, True
                )
                assert wait_for(lambda: ready(server), 503) == 503
                # a maintenance round during the outage stops at the first table, in one line
                stopped = "maintenance round stopped: table 'spans' at "
                assert wait_for(lambda: any(stopped in line for line in server.lines), True)
                send(5)
            assert wait_for(lambda: read(s3, "spans").num_rows, len(acked)) == len(acked)
            assert wait_for(lambda: ready(server), 200) == 200
        finally:
            code = server.stop()
        assert code == 0, "".join(server.lines)
        stored = read(s3, "spans").column("span_id").to_pylist()
    assert sorted(stored) == sorted(acked)  # every acked span, once
    failures = [line for line in server.lines if "commit to spans failed" in line]
    assert failures, "".join(server.lines)
    one_line_records(server.lines)
    # one line per round: the tables after spans are not tried too (the same store refuses)
    assert not [line for line in server.lines if "maintenance round stopped: table 'logs'" in line]


def test_a_hung_s3_fails_readyz_and_a_stop_leaves_the_rest_to_the_wal(tmp_path: Path):
    """S3 accepting connections and never answering (SIGSTOP): a commit hangs rather than
    fails (the object store client gives up after minutes), so /readyz reports the commit by
    its age; SIGTERM then exits after `buffer.stop_timeout_seconds` with code 1 and one line,
    instead of waiting out the client's retries; the next start commits every acked span."""
    with versitygw(tmp_path / "s3") as s3:  # its own server: the session's is not stopped
        config = write_config(tmp_path, s3)
        env = {
            "OTEL_DELTA_ADMIN__COMMIT_FAILURE_SECONDS": "1",
            "OTEL_DELTA_BUFFER__STOP_TIMEOUT_SECONDS": "5",
        }
        server = ServeProcess(config, env=env)
        sender = Sender(server)
        try:
            sender.send(5)
            committed = len(sender.acked)
            assert wait_for(lambda: read(s3, "spans").num_rows, committed) == committed
            with s3.hung():
                sender.send(5)  # acknowledged from the WAL; their commit hangs
                assert wait_for(lambda: commits_check(server)["ok"], False) is False
                assert "a commit has been running for" in commits_check(server)["detail"]
                assert metric_value(server, "otel_delta_commit_running_seconds") >= 1
                # bounded: without the stop timeout this takes 4 attempts of 180 s
                code = server.stop(timeout=120)
        finally:
            if server.proc.poll() is None:
                server.kill9()
        left_the_rest_to_the_wal(server, code, "stop did not finish within 5 s")
        assert read(s3, "spans").num_rows == committed  # the rest is in the WAL
        restart_commits_every_acked_span_once(config, s3, sender)


def left_the_rest_to_the_wal(server: ServeProcess, code: int, why: str) -> None:
    """The stop gave up: exit code 1, one line saying `why` and that the rest is in the WAL."""
    assert code == 1, "".join(server.lines)
    left = [line for line in server.lines if why in line]
    assert len(left) == 1, "".join(server.lines)
    assert "stay in the write-ahead log for the next start" in left[0]
    one_line_records(server.lines)


def restart_commits_every_acked_span_once(config: Path, s3, sender: Sender) -> None:
    """The next start commits what the WAL kept: every acknowledged span, once."""
    again = ServeProcess(config)
    try:
        acked = len(sender.acked)
        assert wait_for(lambda: read(s3, "spans").num_rows, acked) == acked
    finally:
        assert again.stop() == 0, "".join(again.lines)
    stored = read(s3, "spans").column("span_id").to_pylist()
    assert sorted(stored) == sorted(sender.acked)  # every acked span, once


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_during_a_hung_stop_exits_at_once(tmp_path: Path, signum: int):
    """An operator whose stop hangs on a store that does not answer sends the signal again (a
    second Ctrl-C): it was ignored, and the stop waited out `buffer.stop_timeout_seconds`
    (60 s by default, here an hour). It exits with code 1 and one line, as at the timeout;
    what was acknowledged is in the WAL and the next start commits it."""
    with versitygw(tmp_path / "s3") as s3:  # its own server: the session's is not stopped
        config = write_config(tmp_path, s3)
        server = ServeProcess(config, env={"OTEL_DELTA_BUFFER__STOP_TIMEOUT_SECONDS": "3600"})
        sender = Sender(server)
        try:
            with s3.hung():
                sender.send(5)  # acknowledged from the WAL; their commit hangs
                assert wait_for(
                    lambda: metric_value(server, "otel_delta_commit_running_seconds") > 0, True
                )
                server.proc.send_signal(signum)
                assert wait_for(lambda: any("stopping:" in line for line in server.lines), True)
                server.proc.send_signal(signum)
                code = server.proc.wait(timeout=120)
                server._drainer.join(10)
        finally:
            if server.proc.poll() is None:
                server.kill9()
        left_the_rest_to_the_wal(server, code, "a second signal during the stop")
        restart_commits_every_acked_span_once(config, s3, sender)


def cli(config: Path, *argv: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", *argv, "--config", str(config)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert result.returncode == 0, (argv, result.returncode, result.stdout, result.stderr)
    return result


def json_lines(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_table_commands_on_the_s3_lake(tmp_path: Path, s3: S3Server):
    config = write_config(tmp_path, s3)
    server = ServeProcess(config)
    try:
        send_grpc(server)
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
        for i in range(1, 4):  # more commits, and more files in the one partition
            stub.Export(one_span_request(i), timeout=30)
            wait_for(lambda i=i: read(s3, "spans").num_rows if rows(s3) else 0, 4 + i)
    finally:
        assert server.stop() == 0, "".join(server.lines)
    spans = table(s3, "spans")
    version = spans.version()
    assert version >= 3 and spans.to_pyarrow_table().num_rows == 7

    listed = {r["table"]: r for r in json_lines(cli(config, "tables", "--format", "json"))}
    assert {name: r["rows"] for name, r in listed.items()} == {**CORPUS_ROWS, "spans": 7}
    assert listed["spans"]["version"] == version

    where = "service_name = 'unknown_service'"
    found = json_lines(
        cli(config, "query", "spans", "--where", where, "--select", "name", "--format", "json")
    )
    assert sorted(r["name"] for r in found) == ["no service", "s1", "s2", "s3"]
    text = cli(config, "query", "spans", "--limit", "2").stdout.splitlines()
    assert text[0].startswith("service_name") and len(text) == 2 + 2

    history = json_lines(cli(config, "history", "spans", "--format", "json"))
    assert [h["version"] for h in history] == list(range(version, -1, -1))

    optimized = json.loads(cli(config, "optimize", "spans", "--format", "json").stdout)
    assert optimized["files_removed"] > 0 and optimized["files_added"] > 0, optimized
    # the optimize, between the commits taking and releasing the maintenance lease
    assert table(s3, "spans").version() == version + 3
    assert table(s3, "spans").to_pyarrow_table().num_rows == 7

    before = s3.objects(LAKE, "spans")
    dry_run = cli(config, "vacuum", "spans", "--retention-hours", "0", "--dry-run")
    assert dry_run.stdout.strip(), "the files optimize replaced should be listed"
    doomed = json_lines(
        cli(config, "vacuum", "spans", "--retention-hours", "0", "--dry-run", "--format", "json")
    )
    assert len(doomed) == optimized["files_removed"]
    assert s3.objects(LAKE, "spans") == before  # a dry run deletes nothing
