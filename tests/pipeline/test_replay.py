"""A start that replays the write-ahead log after a crash (pipeline/replay.py), seen from its
admin endpoint: liveness answers and readiness says how far the replay is, so that a
Kubernetes liveness probe does not kill a bridge that is replaying (it took minutes for a full
log, and the endpoint answered only afterwards). A SIGTERM during the replay stops it between
two records (it waited for the whole replay, past a pod's terminationGracePeriod)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ServeProcess, free_port, read_table, wait_until
from tests.test_cli import one_span_request

pytestmark = pytest.mark.e2e

PAUSE_SECONDS = 3  # before each record the restart replays
# the stopped replay: 60 records at 5 s each take 5 minutes, the stop far less than that
STOPPED_RECORDS = 60
STOPPED_PAUSE_SECONDS = 5
STOP_TIMEOUT_SECONDS = 90
# the replay while the commits fail: a log of several times `buffer.max_bytes` of rows
BOUND_BYTES = 4 * 1024 * 1024
BOUNDED_RECORDS = 48
RECORD_ATTRIBUTE_BYTES = 256 * 1024  # each span: an attribute this large
FAILED_COMMITS = 3  # the commits fail (and back off) this many times before the store is back


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def answers(url: str) -> bool:
    try:
        get(url)
    except OSError:
        return False
    return True


def replaying(admin: str) -> bool:
    """Whether the bridge whose admin endpoint is `admin` says it replays its log."""
    return answers(f"http://{admin}/healthz") and "replaying" in get(f"http://{admin}/readyz")[1]


def crashed_with_acked_spans(
    tmp_path: Path,
    count: int,
    *,
    admin: str = "",
    receiver: str = "",
    buffer: str = "",
    request: Callable[[int], ExportTraceServiceRequest] = one_span_request,
) -> Path:
    """The config of a bridge that acknowledged the spans s1..s<count> (in its log, none
    committed: only a stop commits) and was then killed with kill -9."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'[admin]\nendpoint = "{admin}"\n'
        f'[receiver]\ngrpc_endpoint = "127.0.0.1:0"\nhttp_endpoint = ""\n{receiver}'
        f"[buffer]\nflush_interval_seconds = 600\n{buffer}"
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        f'[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    server = ServeProcess(config)
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
    for i in range(1, count + 1):
        stub.Export(request(i), timeout=10)  # acknowledged: in the log
    server.kill9()
    return config


@contextlib.contextmanager
def restarting(
    config: Path, join_seconds: float, *, pause: bool = True
) -> Iterator[list[ServeProcess]]:
    """A restart that pauses before each record it replays (unless not `pause`), on a thread
    of its own (a ServeProcess returns once it listens, after the replay); the list it is put
    in once up. A failed check in the block leaves no bridge running; a restart that does not
    come up fails the test."""
    started: list[ServeProcess] = []
    env = {"OTEL_DELTA_PAUSE_AT": f"wal-replaying:{PAUSE_SECONDS}"} if pause else {}
    restart = threading.Thread(
        target=lambda: started.append(ServeProcess(config, timeout=join_seconds, env=env))
    )
    restart.start()
    try:
        yield started
    except BaseException:
        restart.join(join_seconds)
        for server in started:
            server.kill9()
        raise
    restart.join(join_seconds)
    assert started, "the restart did not come up"


def test_the_admin_endpoint_answers_while_the_log_is_replayed(tmp_path: Path) -> None:
    admin = f"127.0.0.1:{free_port()}"
    config = crashed_with_acked_spans(tmp_path, 2, admin=admin)
    with restarting(config, 60) as started:
        wait_until(lambda: answers(f"http://{admin}/healthz"), 60, "the admin endpoint")
        assert not started, "the replay was over before the endpoint was asked"
        assert get(f"http://{admin}/healthz") == (200, "ok\n")
        status, body = get(f"http://{admin}/readyz")
        assert status == 503
        receiver = next(c for c in json.loads(body)["checks"] if c["name"] == "receiver")
        assert "replaying the write-ahead log" in receiver["detail"]
        status, metrics = get(f"http://{admin}/metrics")
        assert status == 200 and "otel_delta_wal_pending_records" in metrics
    restarted = started[0]
    assert get(f"http://{admin}/readyz")[0] == 200
    assert restarted.stop() == 0
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names) == ["s1", "s2"]


def stopped_while_replaying(
    config: Path, ready: Callable[[list[str]], bool], env: dict[str, str] | None = None
) -> tuple[int, int]:
    """Start the bridge, SIGTERM it once its log lines are `ready`, check it stopped its
    replay at once (exit 0, never listening) and said so; (records read, records in the log)."""
    replaying = ServeProcess(config, env=env, listening=False)
    try:
        wait_until(lambda: ready(replaying.lines), 60, "the replay")
        code = replaying.stop(timeout=STOP_TIMEOUT_SECONDS)
    finally:
        if replaying.proc.poll() is None:  # the replay did not stop: no bridge left running
            replaying.kill9()
    output = "".join(replaying.lines)
    assert code == 0, output
    assert "listening" not in output
    stopped = re.search(r"replay stopped after (\d+) of (\d+) record\(s\)", output)
    assert stopped, output
    read, total = int(stopped.group(1)), int(stopped.group(2))
    assert f"the other {total - read} stay in the log" in output
    return read, total


def test_sigterm_during_the_replay_stops_it_and_the_next_start_replays_the_rest(
    tmp_path: Path,
) -> None:
    """Kubernetes stopping a pod whose bridge replays a long log after a crash: the stop
    commits what the replay has buffered, leaves the rest in the log and exits 0; the next
    start stores the rest, and no span twice."""
    config = crashed_with_acked_spans(tmp_path, STOPPED_RECORDS)

    pause = {"OTEL_DELTA_PAUSE_AT": f"wal-replaying:{STOPPED_PAUSE_SECONDS}"}
    # the third pause: two records are read, and buffered
    read, total = stopped_while_replaying(
        config,
        lambda lines: sum("pausing at wal-replaying" in line for line in lines) >= 3,
        env=pause,
    )
    assert total == STOPPED_RECORDS and 2 <= read < total
    # what it had read is committed; the rest is in the log only
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names, key=lambda n: int(n[1:])) == [f"s{i}" for i in range(1, read + 1)]

    restarted = ServeProcess(config)
    assert restarted.stop() == 0
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names, key=lambda n: int(n[1:])) == [
        f"s{i}" for i in range(1, STOPPED_RECORDS + 1)
    ]


def test_a_worker_killed_during_the_replay_does_not_fail_the_start(tmp_path: Path) -> None:
    """With `receiver.convert_workers`, a worker that dies while the start replays the log (the
    OOM killer, under the replay's buffered rows) failed the start: its pool was broken for
    good. The record gets one more try in a new pool."""
    admin = f"127.0.0.1:{free_port()}"
    config = crashed_with_acked_spans(tmp_path, 2, admin=admin, receiver="convert_workers = 1\n")
    with restarting(config, 120) as started:
        wait_until(lambda: replaying(admin), 60, "the replay")
        [bridge] = [p for p in psutil.Process().children() if "serve" in p.cmdline()]
        [worker] = [p for p in bridge.children() if "spawn_main" in " ".join(p.cmdline())]
        worker.kill()  # while the replay pauses before its first record
    restarted = started[0]
    assert restarted.stop() == 0
    died = [line for line in restarted.lines if "convert worker process died" in line]
    assert len(died) == 1, "".join(restarted.lines)
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names) == ["s1", "s2"]


def large_span_request(i: int) -> ExportTraceServiceRequest:
    """Span s<i>, with an attribute of RECORD_ATTRIBUTE_BYTES."""
    request = one_span_request(i)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    value = AnyValue(string_value=f"{i:08d}" * (RECORD_ATTRIBUTE_BYTES // 8))
    span.attributes.append(KeyValue(key="payload", value=value))
    return request


def metric(metrics: str, name: str, **labels: str) -> float:
    """The value of the sample `name` with `labels` in /metrics text (0: none yet)."""
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def crashed_before_a_store_down(tmp_path: Path, admin: str = "") -> tuple[Path, Path]:
    """A bridge killed with BOUNDED_RECORDS large acked spans in its log and none committed,
    its config bounded to BOUND_BYTES for the restart (the crashed bridge had the default,
    which took every request without a commit), and the store refusing the spans table's
    commits: the first version of its log is taken (by a directory, the returned `blocker`),
    which reading the table does not see (no table yet: nothing to skip)."""
    config = crashed_with_acked_spans(
        tmp_path,
        BOUNDED_RECORDS,
        admin=admin,
        buffer="max_resident_bytes = 0\n",
        request=large_span_request,
    )
    config.write_text(
        config.read_text().replace("[buffer]\n", f"[buffer]\nmax_bytes = {BOUND_BYTES}\n")
    )
    spans = tmp_path / "lake" / "spans"
    assert not spans.exists(), "the crashed bridge committed"
    blocker = spans / "_delta_log" / f"{0:020d}.json"
    blocker.mkdir(parents=True)
    return config, blocker


def test_the_replay_waits_for_room_in_the_buffer_while_the_commits_fail(
    tmp_path: Path,
) -> None:
    """A restart after a crash whose store refuses the commits (a full disk, an outage): the
    replay read the whole log into the buffer regardless of `buffer.max_bytes`, as the commits
    backed off (its flush returned at once, committing nothing); with a log of gigabytes of
    requests, the bridge was killed out of memory, restarted, replayed again. The replay
    waits for room instead, as live requests do, and says so on /readyz; once the store is
    back, every span is stored, once."""
    admin = f"127.0.0.1:{free_port()}"
    config, blocker = crashed_before_a_store_down(tmp_path, admin)
    peak = 0.0

    def sample() -> str:
        """/metrics, keeping the buffer's peak."""
        nonlocal peak
        metrics = get(f"http://{admin}/metrics")[1]
        peak = max(peak, metric(metrics, "otel_delta_buffer_bytes"))
        return metrics

    with restarting(config, 300, pause=False) as started:
        wait_until(lambda: answers(f"http://{admin}/healthz"), 60, "the admin endpoint")
        # commits failed and backed off a few times: the replay has had all the time it needs
        # to read the whole log, had it not waited
        wait_until(
            lambda: (
                metric(sample(), "otel_delta_commit_failures_total", table="spans")
                >= FAILED_COMMITS
                or started
            ),
            120,
            "failed commits",
        )
        status, ready = get(f"http://{admin}/readyz")
        metrics = sample()
        buffered = metric(metrics, "otel_delta_buffer_bytes")
        assert peak <= BOUND_BYTES, f"{peak} bytes buffered, over {BOUND_BYTES}"
        assert not started and status == 503, "the replay read the whole log into the buffer"
        receiver = next(c for c in json.loads(ready)["checks"] if c["name"] == "receiver")
        assert "waiting for the commits to make room in the buffer" in receiver["detail"]
        read = re.search(r"\((\d+) records read", receiver["detail"])
        assert read and 0 < int(read.group(1)) < BOUNDED_RECORDS, receiver["detail"]
        assert 0 < buffered <= BOUND_BYTES
        blocker.rmdir()  # the store is back
        wait_until(lambda: sample() and bool(started), 240, "the rest of the replay")
    assert peak <= BOUND_BYTES, f"{peak} bytes buffered, over {BOUND_BYTES}"
    restarted = started[0]
    assert restarted.stop() == 0
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names, key=lambda n: int(n[1:])) == [
        f"s{i}" for i in range(1, BOUNDED_RECORDS + 1)
    ]


def test_sigterm_while_the_replay_waits_for_room_stops_it(tmp_path: Path) -> None:
    """A replay waiting for commits that do not land (the store down) still stops on
    SIGTERM, at once, without buffering the record it waits with: the stop's commit fails too,
    so everything stays in the log, and the next start, the store back, stores every span
    once."""
    config, blocker = crashed_before_a_store_down(tmp_path)

    read, total = stopped_while_replaying(
        config,
        lambda lines: any("replay waits for commits" in ln or "listening" in ln for ln in lines),
    )
    assert total == BOUNDED_RECORDS and 0 < read < total

    blocker.rmdir()  # the store is back
    restarted = ServeProcess(config)
    assert restarted.stop() == 0
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names, key=lambda n: int(n[1:])) == [
        f"s{i}" for i in range(1, BOUNDED_RECORDS + 1)
    ]
