"""`otel-delta stream --once` end to end: a real Kafka broker (tests/kafka), Spark's Kafka
source, the tables read back with delta-rs and compared to what the receiver's converters make
of the same requests. The stream runs as users run it, in its own process (its JVM must load
jars/kafka at start)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1 import logs_pb2

from otel_delta.faults import CRASH_EXIT_CODE
from otel_delta.lakehouse import OPERATION
from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.stream.job import STREAM_OPERATION
from otel_delta.tables.schemas import DEAD_LETTER_DESCRIPTION, DEAD_LETTER_TABLE
from tests import corpus
from tests.engines.test_spark import canonical
from tests.helpers import LOOPBACK, ServeProcess
from tests.kafka import KafkaBroker, kafka_broker
from tests.kafka.test_broker import span_request
from tests.tools import ROOT

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 300.0  # a Spark start and a few micro-batches on a busy 2-core machine


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with kafka_broker(tmp_path_factory.mktemp("stream-kafka")) as broker:
        yield broker


def topics(kafka: KafkaBroker, prefix: str, span_partitions: int = 2) -> dict[str, str]:
    names = {"traces": f"{prefix}_spans", "metrics": f"{prefix}_metrics", "logs": f"{prefix}_logs"}
    for signal_name, topic in names.items():
        kafka.create_topic(topic, partitions=span_partitions if signal_name == "traces" else 1)
    return names


def write_config(
    tmp_path: Path,
    kafka: KafkaBroker,
    names: dict[str, str],
    prefix: str = "",
    spark: str = 'master = "local[2]"',
    **extra,
) -> Path:
    """The stream's deltalake.toml; `prefix` adds sections before it (a bridge's, say), `spark`
    is the body of its [spark] section."""
    stream = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "traces_topic": names["traces"],
        "metrics_topic": names["metrics"],
        "logs_topic": names["logs"],
        "trigger_interval_seconds": 1,
        "admin_endpoint": "127.0.0.1:0",
        **extra,
    }
    lines = [
        "[deltalake]",
        f'table_path = "{tmp_path / "lake"}"',
        "[spark]",
        spark,
        "[stream]",
        *(
            f"{k} = {v!r}" if isinstance(v, int | float) else f'{k} = "{v}"'
            for k, v in stream.items()
        ),
    ]
    config = tmp_path / "deltalake.toml"
    config.write_text(prefix + "\n".join(lines) + "\n")
    return config


def stream_command(config: Path, once: bool = True) -> list[str]:
    command = [sys.executable, "-m", "otel_delta.cli", "stream", "--config", str(config)]
    return [*command, "--once"] if once else command


def start_stream(
    config: Path, log: Path, once: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`otel-delta stream` in a process group of its own (killed as a whole), its log written to
    `log`: a file, not a pipe, since a full pipe would block the stream."""
    with log.open("w") as out:
        return subprocess.Popen(
            stream_command(config, once),
            cwd=ROOT,
            env=None if env is None else {**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,
        )


@contextlib.contextmanager
def stream_running(
    config: Path, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    """A running `otel-delta stream` (start_stream), killed with its group if the test leaves
    it running."""
    child = start_stream(config, log, env=env)
    try:
        yield child
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)


def stop_stream(child: subprocess.Popen, log: Path) -> None:
    """SIGTERM, and the orderly stop's exit 0."""
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=120) == 0, log.read_text()[-6000:]


def run_stream(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`otel-delta stream` with `config` run to its end, its output captured."""
    return subprocess.run(
        stream_command(config),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def run_once(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    child = run_stream(config, env)
    assert child.returncode == 0, child.stderr[-6000:]
    return child


def produce(kafka: KafkaBroker, topic: str, requests: list) -> None:
    kafka.produce(topic, [r.SerializeToString() for r in requests])


def expected(sent: dict[str, list]) -> dict[str, pa.Table]:
    """What the receiver stores for the same requests."""
    parts: dict[str, list[pa.Table]] = {}
    for signal_name, requests in sent.items():
        for request in requests:
            converted = SIGNALS_BY_NAME[signal_name].convert(request)
            for name, table in converted.tables.items():
                if table.num_rows:
                    parts.setdefault(name, []).append(table)
    return {name: pa.concat_tables(tables) for name, tables in parts.items()}


def behind_of(line: str) -> dict[str, int]:
    """topic → messages behind, from a progress line ("...; messages behind: a 3, b 0")."""
    pairs = line.rsplit("messages behind: ", 1)[1].split(", ")
    return {topic: int(count) for topic, count in (pair.rsplit(" ", 1) for pair in pairs)}


def scrape(port: int) -> dict[str, float]:
    """The /metrics samples, `name{labels}` → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def lake_table(root: Path, name: str) -> pa.Table:
    return DeltaTable(str(root / "lake" / name)).to_pyarrow_table()


def versions(root: Path, names) -> dict[str, int]:
    return {name: DeltaTable(str(root / "lake" / name)).version() for name in names}


def assert_stored(root: Path, sent: dict[str, list]) -> dict[str, pa.Table]:
    wanted = expected(sent)
    for name, table in wanted.items():
        assert canonical(lake_table(root, name)).equals(canonical(table)), name
    return wanted


def test_stream_stores_every_signal_as_the_receiver_would_exactly_once(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    names = topics(kafka, "once")
    sent = {
        "traces": [span_request(i) for i in range(20)] + [corpus.trace_request()],
        "metrics": [corpus.metrics_request()] * 2,
        "logs": [corpus.logs_request()] * 3,
    }
    for signal_name, requests in sent.items():
        produce(kafka, names[signal_name], requests)
    config = write_config(tmp_path, kafka, names, max_offsets_per_trigger=8)
    child = run_once(config)
    wanted = assert_stored(tmp_path, sent)
    # 26 messages, at most 8 a batch: the progress log counts down what is left to read
    behind = [behind_of(line) for line in child.stderr.splitlines() if "progress of batch" in line]
    assert len(behind) >= 4, child.stderr[-3000:]
    totals = [sum(b.values()) for b in behind]
    assert totals[0] >= 26 - 8 and totals[-1] == 0 and totals == sorted(totals, reverse=True)
    assert set(behind[-1]) == set(names.values())
    assert not DeltaTable.is_deltatable(str(tmp_path / "lake" / DEAD_LETTER_TABLE))

    # nothing new: nothing added
    before = versions(tmp_path, wanted)
    run_once(config)
    assert versions(tmp_path, wanted) == before

    # more messages: only they are added
    more = {"traces": [span_request(i) for i in range(20, 30)], "logs": [corpus.logs_request()]}
    for signal_name, requests in more.items():
        produce(kafka, names[signal_name], requests)
        sent[signal_name] += requests
    run_once(config)
    assert_stored(tmp_path, sent)


def test_undecodable_message_goes_to_dead_letters_and_the_rest_is_stored(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    names = topics(kafka, "dead", span_partitions=1)
    garbage = b"\xff\xff\xff\xff not an OTLP request"
    kafka.produce(names["traces"], [span_request(0).SerializeToString()])
    kafka.produce(names["traces"], [garbage])
    kafka.produce(names["traces"], [span_request(1).SerializeToString()])
    produce(kafka, names["logs"], [corpus.logs_request()])
    run_once(write_config(tmp_path, kafka, names))
    assert_stored(
        tmp_path, {"traces": [span_request(0), span_request(1)], "logs": [corpus.logs_request()]}
    )
    (dead,) = lake_table(tmp_path, DEAD_LETTER_TABLE).to_pylist()
    topic = names["traces"]
    assert dead["file"] == f"kafka://{topic}/0"
    assert dead["offset"] == 1 and dead["line"] is None
    assert dead["reason"].startswith(f"topic {topic} partition 0 offset 1: not an OTLP protobuf")
    assert dead["raw"] == garbage
    table = DeltaTable(str(tmp_path / "lake" / DEAD_LETTER_TABLE))
    assert table.metadata().description == DEAD_LETTER_DESCRIPTION  # not the backfill's


def brace_logs(body: str) -> ExportLogsServiceRequest:
    record = logs_pb2.LogRecord(
        time_unix_nano=corpus.T0,
        observed_time_unix_nano=corpus.T0,
        body=AnyValue(string_value=body),
    )
    return ExportLogsServiceRequest(
        resource_logs=[logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])]
    )


def test_a_newline_and_a_brace_begin_protobuf_or_json_and_both_are_stored(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """A protobuf request whose first resource group is 123 bytes long starts with b"\\n{", as
    OTLP/JSON after a newline does: each is stored as what it is (the JSON went to the dead
    letters as protobuf that does not parse; backfill/decode.decode_payload is the one rule)."""
    names = topics(kafka, "brace", span_partitions=1)
    protobuf = next(
        r
        for r in (brace_logs("p" * n) for n in range(1, 200))
        if r.SerializeToString()[:2] == b"\n{"
    )
    from_json = brace_logs("sent as OTLP/JSON")
    kafka.produce(
        names["logs"],
        [protobuf.SerializeToString(), b"\n" + json_format.MessageToJson(from_json).encode()],
    )
    run_once(write_config(tmp_path, kafka, names))
    assert_stored(tmp_path, {"logs": [protobuf, from_json]})
    assert not DeltaTable.is_deltatable(str(tmp_path / "lake" / DEAD_LETTER_TABLE))


def test_killed_stream_rerun_stores_every_message_exactly_once(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """kill -9 (the driver and its JVM) after the first micro-batches, then run again."""
    names = topics(kafka, "kill", span_partitions=2)
    sent = {"traces": [span_request(i) for i in range(60)]}
    produce(kafka, names["traces"], sent["traces"])
    config = write_config(tmp_path, kafka, names, max_offsets_per_trigger=6)
    child = start_stream(config, tmp_path / "stream.log", once=True)
    spans = tmp_path / "lake" / "spans"
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if DeltaTable.is_deltatable(str(spans)) and DeltaTable(str(spans)).version() >= 2:
                break
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    stored = lake_table(tmp_path, "spans").num_rows
    assert 0 < stored < 60, "killed after some, not all, micro-batches"
    run_once(config)
    rows = lake_table(tmp_path, "spans")
    assert sorted(rows.column("name").to_pylist()) == sorted(f"span-{i}" for i in range(60))
    assert_stored(tmp_path, sent)


def test_stream_without_once_runs_until_sigterm_and_stops_cleanly(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    names = topics(kafka, "term", span_partitions=1)
    config = write_config(tmp_path, kafka, names)
    log = tmp_path / "stream.log"
    with stream_running(config, log) as child:
        produce(kafka, names["traces"], [span_request(i) for i in range(5)])
        spans = tmp_path / "lake" / "spans"
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (DeltaTable.is_deltatable(str(spans)) and lake_table(tmp_path, "spans").num_rows):
            assert child.poll() is None and time.monotonic() < deadline, "no rows streamed"
            time.sleep(0.5)
        # a later message: the running query picks it up in a later micro-batch
        produce(kafka, names["traces"], [span_request(5)])
        while lake_table(tmp_path, "spans").num_rows < 6:
            assert child.poll() is None and time.monotonic() < deadline, "no second batch"
            time.sleep(0.5)
        # its /metrics: rows per table, nothing behind; /readyz while it runs
        [port] = re.findall(r"/readyz on 127\.0\.0\.1:(\d+)", log.read_text())
        topic = names["traces"]
        wanted = {
            'otel_delta_stream_rows_total{table="spans"}': 6.0,
            f'otel_delta_stream_topic_messages_behind{{signal="traces",topic="{topic}"}}': 0.0,
            "otel_delta_stream_messages_behind": 0.0,
            "otel_delta_stream_dead_letters_total": 0.0,
        }
        while {k: scrape(int(port)).get(k) for k in wanted} != wanted:
            assert time.monotonic() < deadline, scrape(int(port))
            time.sleep(0.5)
        assert scrape(int(port))["otel_delta_stream_batches_total"] >= 2
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as ready:
            assert ready.status == 200
        stop_stream(child, log)
        assert "stopping the streaming query" in log.read_text()
    assert_stored(tmp_path, {"traces": [span_request(i) for i in range(6)]})


def test_sigterm_mid_batch_stops_in_order_and_the_next_start_runs_the_batch(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """SIGTERM while the executors convert a batch: the stop interrupts its Spark job. Spark
    overflowed its stack recognizing py4j's error as a stop (a 1,100-line StackOverflowError
    dump, then py4j's traceback); now one line says so. Nothing of the batch is committed,
    and the next start stores it, once."""
    names = topics(kafka, "mid", span_partitions=1)
    sent = [span_request(i) for i in range(8)]
    produce(kafka, names["traces"], sent)
    config = write_config(tmp_path, kafka, names)
    log = tmp_path / "stream.log"
    with stream_running(config, log, {"OTEL_DELTA_PAUSE_AT": "stream-converting:60"}) as child:
        deadline = time.monotonic() + RUN_TIMEOUT
        while "pausing at stream-converting" not in log.read_text():
            assert child.poll() is None and time.monotonic() < deadline, log.read_text()[-6000:]
            time.sleep(0.2)
        stop_stream(child, log)
    text = log.read_text()
    assert "batch 0 interrupted by the stop: the next start runs it again" in text
    for noise in ("StackOverflowError", "Traceback", "Exception in thread"):
        assert noise not in text, text[-6000:]
    spans = tmp_path / "lake" / "spans"
    assert not DeltaTable.is_deltatable(str(spans)) or lake_table(tmp_path, "spans").num_rows == 0
    run_once(config)
    assert_stored(tmp_path, {"traces": sent})


def writers(history: list[dict]) -> list[str]:
    """Who made each commit of a table, oldest first: "stream" or "bridge"."""
    order = sorted(history, key=lambda commit: commit["version"])
    return ["stream" if c.get(OPERATION) == STREAM_OPERATION else "bridge" for c in order]


def test_stream_and_bridge_write_the_same_table_at_once(kafka: KafkaBroker, tmp_path: Path) -> None:
    """One deltalake.toml for both processes (their admin endpoints differ): the bridge's appends
    and the stream's commits of its executors' files go to the same spans partition at the same
    time; every span of either path is stored exactly once."""
    names = topics(kafka, "both", span_partitions=2)
    produce(kafka, names["traces"], [span_request(i) for i in range(40)])
    bridge_sections = (
        f'{LOOPBACK}[wal]\ndir = "{tmp_path / "wal"}"\n[buffer]\nflush_interval_seconds = 0.2\n'
    )
    config = write_config(tmp_path, kafka, names, bridge_sections, max_offsets_per_trigger=4)
    log = tmp_path / "stream.log"
    spans = tmp_path / "lake" / "spans"
    bridge = ServeProcess(config)
    try:
        with stream_running(config, log) as child:
            deadline = time.monotonic() + RUN_TIMEOUT
            while not DeltaTable.is_deltatable(str(spans)):  # the stream's first batch
                assert child.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            with grpc.insecure_channel(bridge.endpoint) as channel:
                stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                for i in range(100, 140):
                    stub.Export(span_request(i), timeout=60)
                    time.sleep(0.2)
            while lake_table(tmp_path, "spans").num_rows < 80:
                assert child.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.5)
            stop_stream(child, log)
    finally:
        assert bridge.stop() == 0, "".join(bridge.lines)[-3000:]
    stored = lake_table(tmp_path, "spans").column("name").to_pylist()
    wanted = [f"span-{i}" for i in [*range(40), *range(100, 140)]]
    assert sorted(stored) == sorted(wanted)
    assert_stored(tmp_path, {"traces": [span_request(i) for i in [*range(40), *range(100, 140)]]})
    # the two writers really interleaved: a bridge commit between two of the stream's
    made = writers(DeltaTable(str(spans)).history())
    first, last = made.index("stream"), len(made) - 1 - made[::-1].index("stream")
    assert "bridge" in made[first:last], made


def test_crash_between_two_tables_of_a_batch_stores_each_once(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """The job dies right after the first table of its first micro-batch committed (logs, then
    spans); the rerun repeats the batch: logs are skipped by their Delta transaction, spans are
    written, nothing twice."""
    names = topics(kafka, "crash", span_partitions=1)
    sent = {"traces": [span_request(i) for i in range(10)], "logs": [corpus.logs_request()] * 2}
    for signal_name, requests in sent.items():
        produce(kafka, names[signal_name], requests)
    config = write_config(tmp_path, kafka, names)
    crashed = subprocess.run(
        stream_command(config),
        cwd=ROOT,
        env={**os.environ, "OTEL_DELTA_CRASH_AT": "stream-table-committed"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    assert lake_table(tmp_path, "logs").num_rows > 0  # the first table committed
    assert not DeltaTable.is_deltatable(str(tmp_path / "lake" / "spans"))  # the second did not
    logs_version = DeltaTable(str(tmp_path / "lake" / "logs")).version()
    rerun = run_once(config)
    assert_stored(tmp_path, sent)
    assert DeltaTable(str(tmp_path / "lake" / "logs")).version() == logs_version  # skipped
    # and said so: the rerun's line counted the skipped logs rows as appended again
    [line] = [text for text in rerun.stderr.splitlines() if "stream.job: batch 0:" in text]
    assert "→ spans 10;" in line and "logs already held the batch" in line, line


def test_a_topic_that_does_not_exist_is_one_line(kafka: KafkaBroker, tmp_path: Path) -> None:
    """The brokers do not have the topic (the Collector has not written yet, or a typo): Spark
    logged the query's failure at ERROR with its 45-line Java stack trace before the job's own
    line, which named an exception but no topic."""
    names = {"traces": "absent_spans", "metrics": "", "logs": ""}
    child = run_stream(write_config(tmp_path, kafka, names))
    assert child.returncode == 1, child.stderr[-3000:]
    last = child.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"otel-delta: stream failed: a topic it reads does not exist on {kafka.bootstrap_servers}"
        " (one of absent_spans;"
    ), last
    for noise in ("\tat ", "ERROR MicroBatchExecution", "Traceback"):
        assert noise not in child.stderr, child.stderr[-3000:]
