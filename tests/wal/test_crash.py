"""`kill -9` at random moments under load, restart, repeat: every acknowledged span is stored,
and nothing is stored twice (ack = "wal", the default). Read back with delta-rs and Spark."""

from __future__ import annotations

import gzip
import random
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta.wal.record import HEADER_BYTES, scan
from otel_delta.wal.segments import SUFFIX
from tests.helpers import LOOPBACK, ServeProcess, read_table
from tests.test_cli import one_span_request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROUNDS = 4
CLIENTS = 4
SPANS_PER_REQUEST = 20


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK
        +  # short flushes: commits (and WAL releases) are in flight whenever the kill comes
        "[buffer]\nflush_interval_seconds = 0.2\nmax_rows = 400\n"
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        f'[wal]\ndir = "{tmp_path / "wal"}"\nsegment_bytes = 65536\n'
    )
    return config


def request(first: int):
    """SPANS_PER_REQUEST spans with span ids first+1 … (ids are unique across the test)."""
    base = one_span_request(first)
    spans = base.resource_spans[0].scope_spans[0].spans
    template = spans[0]
    for k in range(1, SPANS_PER_REQUEST):
        span = spans.add()
        span.CopyFrom(template)
        span.span_id = (first + k + 1).to_bytes(8, "big")
        span.name = f"s{first + k}"
    return base


def load(endpoint: str, stream: int, stop: threading.Event, acked: list[str], sent: list[str]):
    """One client: requests with ids unique to `stream`, until stopped; no retries. Every
    other client gzips its requests (as a Collector does), so the log holds both kinds."""
    compression = grpc.Compression.Gzip if stream % 2 else grpc.Compression.NoCompression
    stub = trace_service_pb2_grpc.TraceServiceStub(
        grpc.insecure_channel(endpoint, compression=compression)
    )
    counter = 0
    while not stop.is_set():
        counter += 1  # from 1: an all-zero trace id would be rejected
        first = (stream * 10**7 + counter) * SPANS_PER_REQUEST
        ids = [f"{first + k + 1:016x}" for k in range(SPANS_PER_REQUEST)]
        sent.extend(ids)
        try:
            response = stub.Export(request(first), timeout=10)
        except grpc.RpcError:
            continue  # not acknowledged (killed, or refused): may or may not be stored
        assert not response.HasField("partial_success"), response
        acked.extend(ids)


def replayed(lines: list[str]) -> int:
    """Records a start found in the WAL and not in Delta (from its replay log line)."""
    found = (re.search(r"(\d+) replayed", line) for line in lines)
    return sum(int(m.group(1)) for m in found if m)


@dataclass
class CrashRun:
    acked: list[str] = field(default_factory=list)  # span ids clients got OK for
    sent: list[str] = field(default_factory=list)  # span ids clients sent
    replays: int = 0  # records the restarts found in the WAL and not in Delta


def crash_under_load(
    config: Path, rounds: int, clients: int, pause: tuple[float, float], seed: int
) -> CrashRun:
    """`rounds` times: serve, `clients` clients sending, `kill -9` after a random pause; then
    a clean start and stop, which replays what the last kill left."""
    rng = random.Random(seed)
    run = CrashRun()
    for round_ in range(rounds):
        server = ServeProcess(config)
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=load,
                args=(server.endpoint, round_ * clients + c, stop, run.acked, run.sent),
            )
            for c in range(clients)
        ]
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(*pause))
        server.kill9()
        stop.set()
        for thread in threads:
            thread.join(30)
        run.replays += replayed(server.lines)
    final = ServeProcess(config)
    assert final.stop() == 0, "".join(final.lines)
    run.replays += replayed(final.lines)
    return run


def test_kill_9_under_load_loses_no_acked_span_and_stores_none_twice(tmp_path: Path, spark):
    run = crash_under_load(write_config(tmp_path), ROUNDS, CLIENTS, (0.5, 3.0), seed=20261123)
    acked, sent, replays = run.acked, run.sent, run.replays

    assert len(acked) > 1000, "too little load to mean anything"
    assert replays > 0, "no restart found anything to replay: the kills came too late"
    stored = read_table(tmp_path / "lake", "spans").column("span_id").to_pylist()
    assert len(stored) == len(set(stored)), "a span was stored twice"
    assert set(acked) <= set(stored), f"{len(set(acked) - set(stored))} acked span(s) lost"
    assert set(stored) <= set(sent)
    frame = spark.read.format("delta").load(str(tmp_path / "lake" / "spans"))
    assert frame.count() == frame.select("span_id").distinct().count() == len(stored)


def nothing_commits_before_a_kill(tmp_path: Path) -> Path:
    """The config of a bridge on loopback ports whose flush is an hour away: what it acks
    stays in its log until a kill -9."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK + "[buffer]\nflush_interval_seconds = 3600\n"
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        f'[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    return config


def test_compressed_requests_are_logged_as_sent_and_replayed_after_kill_9(tmp_path: Path):
    """A gzip'd Export over gRPC (the Collector's default) and over OTLP/HTTP: the log keeps
    each as it came (an eighth of the bytes under the Collector's load), the bridge is killed
    before any commit, and the restart replays both from the compressed records."""
    config = nothing_commits_before_a_kill(tmp_path)
    server = ServeProcess(config)
    over_grpc, over_http = request(1_000), request(2_000)
    channel = grpc.insecure_channel(server.endpoint, compression=grpc.Compression.Gzip)
    trace_service_pb2_grpc.TraceServiceStub(channel).Export(over_grpc, timeout=10)
    channel.close()
    sent = gzip.compress(over_http.SerializeToString())
    answer = urllib.request.urlopen(
        urllib.request.Request(
            f"http://127.0.0.1:{server.http_port}/v1/traces",
            data=sent,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        ),
        timeout=10,
    )
    assert answer.status == 200
    server.kill9()

    logged = [
        r
        for segment in sorted((tmp_path / "wal").glob(f"*{SUFFIX}"))
        for r in scan(segment.read_bytes()).records
    ]
    assert [r.encoding for r in logged] == ["gzip", "gzip"]
    assert gzip.decompress(logged[0].payload) == over_grpc.SerializeToString()
    assert logged[1].payload == sent  # byte for byte as it came
    assert len(logged[1].payload) < len(over_http.SerializeToString())

    final = ServeProcess(config)
    assert final.stop() == 0, "".join(final.lines)
    assert replayed(final.lines) == 2
    stored = read_table(tmp_path / "lake", "spans").column("span_id").to_pylist()
    expected = [
        s.span_id.hex()
        for r in (over_grpc, over_http)
        for s in r.resource_spans[0].scope_spans[0].spans
    ]
    assert sorted(stored) == sorted(expected)


def test_a_damaged_record_after_kill_9_loses_that_request_only(tmp_path: Path):
    """20 acknowledged one-span requests, kill -9, one payload byte of the fifth record
    flipped (a bad disk block): the restart stores the other 19 spans, once each. It cut the
    file at the damage as a torn tail, losing the 15 acknowledged records after it."""
    config = nothing_commits_before_a_kill(tmp_path)
    server = ServeProcess(config)
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
    for i in range(1, 21):
        stub.Export(one_span_request(i), timeout=10)  # acknowledged: in the log
    server.kill9()

    [segment] = sorted((tmp_path / "wal").glob(f"*{SUFFIX}"))
    records = scan(segment.read_bytes()).records
    assert [r.position for r in records] == list(range(1, 21))
    fifth = sum(r.size for r in records[:4])
    data = bytearray(segment.read_bytes())
    data[fifth + HEADER_BYTES + len(records[4].payload) // 2] ^= 0x01
    segment.write_bytes(bytes(data))

    final = ServeProcess(config)
    assert final.stop() == 0, "".join(final.lines)
    stored = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(stored) == sorted(f"s{i}" for i in range(1, 21) if i != 5)
    [damage] = [line for line in final.lines if "is damaged" in line]
    assert segment.name in damage and f"bytes {fifth}-{fifth + records[4].size - 1}" in damage
    assert "1 record lost (position 5)" in damage and "19 record(s)" in damage
    assert replayed(final.lines) == 19
    assert not any("torn tail" in line for line in final.lines)
