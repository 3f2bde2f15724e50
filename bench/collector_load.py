"""A user's Collector as the load (issue #16): the bridge against the single-core limit and
against the Collector's own file exporter, per signal, on the same requests, in one run.

The load is what the Collector's `otlp` exporter sends behind the batch processor: requests of
8,192 items (`send_batch_size`'s default), gzip-compressed, 10 in flight on one connection (the
sending queue's default `num_consumers`). The requests are built, serialized and gzip'd (level 6,
the exporter's default) up front (deterministic seeds), and tools/loadgen (`make loadgen`, Go)
sends them as they are: the server gets the bytes a Collector's exporter sends, and the client,
on the same cores as the server it measures, spends no CPU compressing during the run
(`--client python`: 10 threads sharing one channel, gRPC compressing each send, about 4 µs of
client CPU per span). Per signal (traces, logs, metrics: a gauge/sum/histogram mix), three
measurements:

1. *limit*: in this process, one thread: gunzip + protobuf parse + Parquet zstd of each
   request's converted tables (`bench.limit.run_signal_limit`; conversion is timed, not counted);
2. *bridge*: `otel-delta serve` (its defaults: ack = wal, 10 s flush), fed the requests; rows
   in Delta must equal the items acknowledged once it has exited after SIGTERM;
3. *Collector → file*: the OpenTelemetry Collector (`make collector`) with the otlp receiver and
   the file exporter (`format: proto`, `compression: zstd`), no batch processor (the requests
   are batched already), fed the same requests the same way; the items in its files must equal
   the items acknowledged.

Then telemetrygen → Collector (otlp receiver, batch processor, `otlp_grpc` exporter with gzip,
all at their defaults) → bridge, end to end: spans stored per second, and stored = sent.

Per run: items/s acknowledged (first send → last OK) and stored (first send → server exited),
server CPU per item (from the first send to its exit), Export p50/p99, peak RSS of the server's
process tree, bytes on disk per item. Run from the repository root:

    .venv/bin/python -m bench.collector_load --quick          # smoke run, well under 2 min
    .venv/bin/python -m bench.collector_load                  # 180 requests of 8,192, 6 times
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from bench.common import (
    DB_SYSTEMS,
    METHODS,
    MIB,
    PEERS,
    RESULTS_DIR,
    ROUTES,
    SCHEMA_URL,
    STATUS_CODES,
    BridgeProcess,
    ChildProcess,
    Ingest,
    Pacer,
    Payload,
    ServerStats,
    _kv,
    build_payloads,
    count_rows,
    drive,
    drive_precompressed,
    export_stages,
    finish,
    grpc_sender,
    parquet_bytes,
    serialized_requests,
    shares,
    workdir,
)
from bench.limit import SignalLimit, run_signal_limit
from otel_delta.backfill.files import BadRecord, records
from otel_delta.signals import SIGNALS_BY_NAME
from tests.helpers import free_port
from tests.tools import otelcol_binary, telemetrygen_binary

RESULTS_FILE = RESULTS_DIR / "collector-load-latest.json"
SIGNAL_NAMES = ("traces", "logs", "metrics")
GZIP_LEVEL = 6  # zlib's default, which gRPC's gzip and Go's compress/gzip use too
COLLECTOR_START_SECONDS = 60.0
# `repeat`: 180 requests of metrics take about 3 s, less than one 10 s flush interval, so a
# single pass ends on the one commit its SIGTERM starts; six passes run through several
# flushes of a full buffer, the steady state a Collector's sustained load meets
QUICK = {"requests": 4, "items_per_request": 2048, "e2e_traces": 1500, "repeat": 1}
DEFAULTS = {"requests": 180, "items_per_request": 8192, "e2e_traces": 50_000, "repeat": 6}

# --------------------------------------------------------------------------- workload: logs

LOG_SCOPE = InstrumentationScope(name="opentelemetry.instrumentation.logging", version="0.52b0")
SEVERITIES = ((9, "INFO"), (9, "INFO"), (9, "INFO"), (5, "DEBUG"), (13, "WARN"), (17, "ERROR"))
LOG_LINES = (
    "{method} {route} {status} in {ms} ms",
    "cache miss for key user:{id}, loading from {db}",
    "payment authorized order={id} amount={amount} currency=EUR",
    "retrying request to {peer} (attempt {attempt} of 3)",
    "connection pool exhausted, waited {ms} ms for a connection",
)
LOGGERS = ("app.http", "app.cache", "app.payment", "app.client", "app.db")


def _log_record(rng: random.Random, now_ns: int) -> LogRecord:
    """A record as the SDK's logging bridge emits it: templated message, 6 attributes, and the
    active span's ids on about 60% of records."""
    line = rng.randrange(len(LOG_LINES))
    number, text = rng.choice(SEVERITIES)
    body = LOG_LINES[line].format(
        method=rng.choice(METHODS),
        route=rng.choice(ROUTES),
        status=rng.choice(STATUS_CODES),
        ms=rng.randrange(1, 900),
        id=rng.randrange(10**9),
        db=rng.choice(DB_SYSTEMS),
        amount=round(rng.random() * 500, 2),
        peer=rng.choice(PEERS),
        attempt=rng.randrange(1, 4),
    )
    at = now_ns - rng.randrange(1, 60_000_000_000)
    traced = rng.random() < 0.6
    return LogRecord(
        time_unix_nano=at,
        observed_time_unix_nano=at + rng.randrange(1_000, 5_000_000),
        severity_number=number,  # type: ignore[arg-type]
        severity_text=text,
        body=_kv("body", body).value,
        attributes=[
            _kv("code.function", f"handle_{LOGGERS[line].split('.')[1]}"),
            _kv("code.lineno", rng.randrange(20, 800)),
            _kv("code.filepath", f"/app/{LOGGERS[line].replace('.', '/')}.py"),
            _kv("logger.name", LOGGERS[line]),
            _kv("thread.id", rng.randrange(1, 64)),
            _kv("http.route", rng.choice(ROUTES)),
        ],
        trace_id=rng.randbytes(16) if traced else b"",
        span_id=rng.randbytes(8) if traced else b"",
        flags=1 if traced else 0,
    )


def _log_request(
    rng: random.Random, resources: Sequence[Resource], count: int, now_ns: int
) -> ExportLogsServiceRequest:
    """One ResourceLogs per service, the records shared out evenly."""
    groups = [
        ResourceLogs(
            resource=res,
            scope_logs=[
                ScopeLogs(scope=LOG_SCOPE, log_records=[_log_record(rng, now_ns) for _ in range(n)])
            ],
            schema_url=SCHEMA_URL,
        )
        for res, n in zip(resources, shares(count, len(resources)), strict=True)
        if n
    ]
    return ExportLogsServiceRequest(resource_logs=groups)


def build_log_payloads(total: int, per_request: int, seed: int) -> list[Payload]:
    return serialized_requests(total, per_request, seed, _log_request)


# --------------------------------------------------------------------------- workload: metrics

METRIC_SCOPE = InstrumentationScope(name="opentelemetry.instrumentation.asgi", version="0.52b0")
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
# the SDK's default explicit bucket boundaries
BOUNDS = (0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000)
# (kind, name, unit, weight): 40% gauge points, 40% sum points, 20% histogram points
METRICS = (
    ("gauge", "process.cpu.utilization", "1", 2),
    ("gauge", "process.memory.usage", "By", 1),
    ("gauge", "db.client.connections.usage", "{connection}", 1),
    ("sum", "http.server.request.count", "{request}", 2),
    ("sum", "db.client.operations", "{operation}", 1),
    ("sum", "messaging.client.sent.messages", "{message}", 1),
    ("histogram", "http.server.request.duration", "ms", 1),
    ("histogram", "db.client.operation.duration", "ms", 1),
)


def _point_attributes(rng: random.Random, kind: str) -> list:
    """3-4 attributes, as the HTTP/DB instrumentations and host metrics report them."""
    if kind == "gauge":
        return [
            _kv("cpu", rng.randrange(8)),
            _kv("state", rng.choice(("user", "system", "idle"))),
            _kv("host.arch", "amd64"),
        ]
    return [
        _kv("http.request.method", rng.choice(METHODS)),
        _kv("http.route", rng.choice(ROUTES)),
        _kv("http.response.status_code", rng.choice(STATUS_CODES)),
        _kv("db.system", rng.choice(DB_SYSTEMS)),
    ]


def _metric_point(rng: random.Random, kind: str, now_ns: int) -> Any:
    start, at = now_ns - 3_600_000_000_000, now_ns - rng.randrange(1, 60_000_000_000)
    attributes = _point_attributes(rng, kind)
    if kind == "gauge":
        return NumberDataPoint(
            attributes=attributes, time_unix_nano=at, as_double=round(rng.random(), 4)
        )
    if kind == "sum":
        return NumberDataPoint(
            attributes=attributes,
            start_time_unix_nano=start,
            time_unix_nano=at,
            as_int=rng.randrange(10**6),
        )
    counts = [rng.randrange(0, 200) for _ in range(len(BOUNDS) + 1)]
    observed = sorted(rng.random() * 3000 for _ in range(2))
    return HistogramDataPoint(
        attributes=attributes,
        start_time_unix_nano=start,
        time_unix_nano=at,
        count=sum(counts),
        sum=round(sum(counts) * observed[1] / 2, 3),
        bucket_counts=counts,
        explicit_bounds=BOUNDS,
        min=round(observed[0], 3),
        max=round(observed[1], 3),
    )


def _metrics(rng: random.Random, count: int, now_ns: int) -> list[Metric]:
    """`count` data points shared out over METRICS by weight (each metric its own points)."""
    weights = [weight for *_, weight in METRICS]
    points: list[list] = [[] for _ in METRICS]
    for index in rng.choices(range(len(METRICS)), weights=weights, k=count):
        points[index].append(_metric_point(rng, METRICS[index][0], now_ns))
    metrics = []
    for (kind, name, unit, _), mine in zip(METRICS, points, strict=True):
        if not mine:
            continue
        metric = Metric(name=name, unit=unit, description=f"{name} ({kind})")
        if kind == "gauge":
            metric.gauge.CopyFrom(Gauge(data_points=mine))
        elif kind == "sum":
            metric.sum.CopyFrom(
                Sum(data_points=mine, aggregation_temporality=CUMULATIVE, is_monotonic=True)
            )
        else:
            metric.histogram.CopyFrom(
                Histogram(data_points=mine, aggregation_temporality=CUMULATIVE)
            )
        metrics.append(metric)
    return metrics


def _metric_request(
    rng: random.Random, resources: Sequence[Resource], count: int, now_ns: int
) -> ExportMetricsServiceRequest:
    """One ResourceMetrics per service, the data points shared out evenly."""
    groups = [
        ResourceMetrics(
            resource=res,
            scope_metrics=[ScopeMetrics(scope=METRIC_SCOPE, metrics=_metrics(rng, n, now_ns))],
            schema_url=SCHEMA_URL,
        )
        for res, n in zip(resources, shares(count, len(resources)), strict=True)
        if n
    ]
    return ExportMetricsServiceRequest(resource_metrics=groups)


def build_metric_payloads(total: int, per_request: int, seed: int) -> list[Payload]:
    return serialized_requests(total, per_request, seed, _metric_request)


BUILDERS = {
    "traces": build_payloads,
    "logs": build_log_payloads,
    "metrics": build_metric_payloads,
}


# --------------------------------------------------------------------------- counting items


def _items(group: Any) -> int:
    """Items in one Resource{Spans,Logs,Metrics}: spans, log records or data points."""
    total = 0
    for scope in getattr(group, "scope_spans", ()):
        total += len(scope.spans)
    for scope in getattr(group, "scope_logs", ()):
        total += len(scope.log_records)
    for scope in getattr(group, "scope_metrics", ()):
        for metric in scope.metrics:
            kind = metric.WhichOneof("data")
            total += len(getattr(metric, kind).data_points) if kind else 0
    return total


def request_items(request: Any) -> int:
    groups = [
        *getattr(request, "resource_spans", ()),
        *getattr(request, "resource_logs", ()),
        *getattr(request, "resource_metrics", ()),
    ]
    return sum(_items(group) for group in groups)


# --------------------------------------------------------------------------- one server run


@dataclass
class ServerRun:
    """One server (bridge or Collector) fed the requests of one signal."""

    name: str
    ingest: Ingest
    stats: ServerStats
    exit_code: int
    stored_items: int  # rows in Delta; items in the Collector's files
    disk_bytes: int  # Parquet files of the signal's tables; the Collector's output files
    cpu_seconds: float  # from the first send until it exited (final commits/flushes included)
    stop_seconds: float  # SIGTERM → exit
    bad_records: int = 0
    stages: dict[str, float] = field(default_factory=dict)  # bridge: mean ms per Export
    offered_rate: float = 0.0  # items/s on a fixed schedule (open loop); 0: closed loop

    @property
    def acked_rate(self) -> float:
        return self.ingest.rate

    @property
    def stored_rate(self) -> float:
        seconds = self.ingest.seconds + self.stop_seconds
        return self.stored_items / seconds if seconds > 0 else 0.0

    @property
    def cpu_us_per_item(self) -> float:
        acked = self.ingest.spans_acked
        return self.cpu_seconds / acked * 1e6 if acked else 0.0

    @property
    def bytes_per_item(self) -> float:
        return self.disk_bytes / self.stored_items if self.stored_items else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.ingest),
            "acked_items_per_s": self.acked_rate,
            "stored_items_per_s": self.stored_rate,
            "stored_items": self.stored_items,
            "server_cpu_seconds": self.cpu_seconds,
            "server_cpu_us_per_item": self.cpu_us_per_item,
            "server_peak_rss_bytes": self.stats.peak_rss_bytes,
            "rss_samples": self.stats.samples,
            "disk_bytes": self.disk_bytes,
            "disk_bytes_per_item": self.bytes_per_item,
            "stop_seconds": self.stop_seconds,
            "exit_code": self.exit_code,
            "bad_records": self.bad_records,
            "export_stage_mean_ms": self.stages,
            "offered_items_per_s": self.offered_rate,
        }


def _load(
    server: ChildProcess,
    port: int,
    signal: str,
    payloads: Sequence[Payload],
    gzipped: Sequence[bytes],
    args,
    rate: float,
) -> tuple[Ingest, float]:
    """The collector-like load: `in_flight` requests at a time on one gRPC connection, gzip'd;
    `rate` > 0: on a fixed schedule of that many items/s (open loop).
    `--client loadgen`: compressed before the run and sent as they are (tools/loadgen);
    `python`: `in_flight` threads sharing one channel, gRPC compressing each send. Returns the
    client-side results and the server's CPU before it began."""
    method = f"/{SIGNALS_BY_NAME[signal].grpc_service}/Export"
    # open loop: the requests of `rate` items/s, each on its schedule
    interval = payloads[0].spans / rate if rate else 0.0
    if args.client == "loadgen":
        cpu_before = server.cpu_seconds()
        ingest = drive_precompressed(
            port, method, payloads, gzipped, args.in_flight, args.max_seconds, interval
        )
        return ingest, cpu_before
    send, close = grpc_sender(port, method=method, compression=grpc.Compression.Gzip)
    try:
        cpu_before = server.cpu_seconds()
        pace = Pacer(interval) if interval else None
        ingest = drive(
            port, payloads, args.in_flight, args.max_seconds, lambda _: (send, _noop), pace
        )
    finally:
        close()
    return ingest, cpu_before


def _noop() -> None:
    pass


def _stop(server: ChildProcess, cpu_before: float) -> tuple[int, float, float]:
    """SIGTERM and wait: exit code, seconds it took, server CPU from the first send to exit."""
    stopping = time.perf_counter()
    code = server.stop()
    seconds = time.perf_counter() - stopping
    life = server.life_cpu_seconds if server.life_cpu_seconds is not None else 0.0
    if code != 0:
        print("\n".join(server.log_tail), file=sys.stderr)
    return code, seconds, max(life - cpu_before, 0.0)


def run_bridge(
    signal: str, payloads: Sequence[Payload], gzipped: Sequence[bytes], args, rate: float
) -> ServerRun:
    """The bridge on a fresh lake, fed the requests (`rate`: see `_load`)."""
    tables = SIGNALS_BY_NAME[signal].tables
    with workdir() as path:
        server = BridgeProcess(
            path, args.flush_interval, args.convert_workers, args.native, ack=args.ack
        )
        try:
            port = server.wait_for_port()
            ingest, cpu_before = _load(server, port, signal, payloads, gzipped, args, rate)
            stages = export_stages(server.admin_port)
        except BaseException:
            server.kill()
            raise
        code, stop_seconds, cpu = _stop(server, cpu_before)
        return ServerRun(
            name=f"bridge offered {rate:,.0f}/s" if rate else "bridge",
            ingest=ingest,
            stats=server.stats,
            exit_code=code,
            stored_items=sum(count_rows(server.lake, table) for table in tables),
            disk_bytes=sum(parquet_bytes(server.lake, table) for table in tables),
            cpu_seconds=cpu,
            stop_seconds=stop_seconds,
            stages=stages,
            offered_rate=rate,
        )


class CollectorProcess(ChildProcess):
    """The OpenTelemetry Collector built by `make collector`, with the given YAML config."""

    def __init__(self, workdir: Path, config: str) -> None:
        path = workdir / "otelcol.yaml"
        path.write_text(config)
        super().__init__([str(otelcol_binary()), "--config", str(path)], workdir, dict(os.environ))

    def wait_for_port(self, port: int) -> None:
        """The receiver listens once the pipelines behind it have started."""
        deadline = time.monotonic() + COLLECTOR_START_SECONDS
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError("the Collector did not start:\n" + "\n".join(self.log_tail))


COLLECTOR_SERVICE = "  telemetry: {metrics: {level: none}, logs: {level: warn}}\n"


def file_peer_config(signal: str, port: int, out: Path) -> str:
    """otlp receiver → file exporter (proto, zstd), no processors: the requests come batched."""
    return (
        "receivers:\n  otlp:\n    protocols:\n"
        f"      grpc: {{endpoint: 127.0.0.1:{port}, max_recv_msg_size_mib: 512}}\n"
        "exporters:\n"
        f"  file:\n    path: {out / f'{signal}.pb'}\n    format: proto\n    compression: zstd\n"
        f"service:\n{COLLECTOR_SERVICE}"
        f"  pipelines:\n    {signal}:\n      receivers: [otlp]\n      exporters: [file]\n"
    )


def count_file_items(signal: str, out: Path) -> tuple[int, int, int]:
    """(items, bad records, bytes) of the file exporter's output, read as backfill reads it."""
    request_type = SIGNALS_BY_NAME[signal].request
    items = bad = size = 0
    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        size += len(data)
        for record in records(data, "otlp-proto"):
            if isinstance(record, BadRecord):
                bad += 1
            else:
                items += request_items(request_type.FromString(record.payload))
    return items, bad, size


def run_peer(signal: str, payloads: Sequence[Payload], gzipped: Sequence[bytes], args) -> ServerRun:
    with workdir("otel-delta-bench-otelcol-") as path:
        out = path / "out"
        out.mkdir()
        port = free_port()
        server = CollectorProcess(path, file_peer_config(signal, port, out))
        try:
            server.wait_for_port(port)
            ingest, cpu_before = _load(server, port, signal, payloads, gzipped, args, args.rate)
        except BaseException:
            server.kill()
            raise
        code, stop_seconds, cpu = _stop(server, cpu_before)
        items, bad, size = count_file_items(signal, out)
        return ServerRun(
            name="collector",
            ingest=ingest,
            stats=server.stats,
            exit_code=code,
            stored_items=items,
            disk_bytes=size,
            cpu_seconds=cpu,
            stop_seconds=stop_seconds,
            bad_records=bad,
            offered_rate=args.rate,
        )


# --------------------------------------------------------------------------- end to end


@dataclass
class EndToEnd:
    """telemetrygen → Collector (batch, otlp_grpc + gzip) → bridge."""

    spans_requested: int  # workers x traces per worker x (1 + child spans)
    spans_sent: int  # as telemetrygen logged them
    spans_stored: int
    seconds: float  # telemetrygen started → bridge exited (final commits included)
    generator_seconds: float  # telemetrygen started → exited
    telemetrygen_exit: int
    collector_exit: int
    bridge_exit: int
    collector_peak_rss_bytes: int
    bridge_peak_rss_bytes: int
    disk_bytes: int

    @property
    def stored_rate(self) -> float:
        return self.spans_stored / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "stored_spans_per_s": self.stored_rate}


def forwarding_config(port: int, bridge_port: int) -> str:
    """What a user runs in front of the bridge: batch processor and otlp exporter, defaults
    (8,192-span batches, gzip, sending queue with 10 consumers)."""
    return (
        "receivers:\n  otlp:\n    protocols:\n"
        f"      grpc: {{endpoint: 127.0.0.1:{port}}}\n"
        "processors:\n  batch: {}\n"
        "exporters:\n  otlp_grpc/bridge:\n"
        f"    endpoint: 127.0.0.1:{bridge_port}\n    tls: {{insecure: true}}\n"
        "    compression: gzip\n"
        f"service:\n{COLLECTOR_SERVICE}"
        "  pipelines:\n    traces:\n      receivers: [otlp]\n      processors: [batch]\n"
        "      exporters: [otlp_grpc/bridge]\n"
    )


def _per_worker(args) -> int:
    return -(-args.e2e_traces // args.e2e_workers)


def _requested(args) -> int:
    return args.e2e_workers * _per_worker(args) * (1 + args.e2e_child_spans)


def _telemetrygen(args, port: int) -> tuple[int, int, float]:
    """Run telemetrygen; (exit code, spans it generated by its own log, seconds)."""
    per_worker = _per_worker(args)
    argv = [
        str(telemetrygen_binary()), "traces", "--otlp-endpoint", f"127.0.0.1:{port}",
        "--otlp-insecure", "--service", "tg-bench", "--workers", str(args.e2e_workers),
        "--rate", str(args.e2e_rate), "--traces", str(per_worker),
        "--child-spans", str(args.e2e_child_spans), "--batch-size", "512",
    ]  # fmt: skip
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.max_seconds)
    except subprocess.TimeoutExpired as exc:
        log = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        code = -9
    else:
        log, code = done.stderr, done.returncode
    seconds = time.perf_counter() - started
    if code != 0:
        print(log[-2000:], file=sys.stderr)
    # one `traces generated {"worker": i, "traces": n}` line per worker
    traces = sum(int(n) for n in re.findall(r'traces generated.*"traces": (\d+)', log))
    return code, traces * (1 + args.e2e_child_spans), seconds


def run_end_to_end(args) -> EndToEnd:
    with workdir() as path:
        (path / "bridge").mkdir()
        (path / "otelcol").mkdir()
        bridge = BridgeProcess(
            path / "bridge", args.flush_interval, args.convert_workers, args.native, ack=args.ack
        )
        collector: CollectorProcess | None = None
        try:
            bridge_port = bridge.wait_for_port()
            port = free_port()
            collector = CollectorProcess(path / "otelcol", forwarding_config(port, bridge_port))
            collector.wait_for_port(port)
            started = time.perf_counter()
            generator_exit, sent, generator_seconds = _telemetrygen(args, port)
            collector_exit = collector.stop()  # flushes its batch and drains its queue
        except BaseException:
            if collector is not None:
                collector.kill()
            bridge.kill()
            raise
        bridge_exit = bridge.stop()
        finished = time.perf_counter()
        for name, server, code in (
            ("collector", collector, collector_exit),
            ("bridge", bridge, bridge_exit),
        ):
            if code != 0:
                print(f"{name}:", *server.log_tail, sep="\n", file=sys.stderr)
        return EndToEnd(
            spans_requested=_requested(args),
            spans_sent=sent,
            spans_stored=count_rows(bridge.lake, "spans"),
            seconds=finished - started,
            generator_seconds=generator_seconds,
            telemetrygen_exit=generator_exit,
            collector_exit=collector_exit,
            bridge_exit=bridge_exit,
            collector_peak_rss_bytes=collector.stats.peak_rss_bytes,
            bridge_peak_rss_bytes=bridge.stats.peak_rss_bytes,
            disk_bytes=parquet_bytes(bridge.lake, "spans"),
        )


# --------------------------------------------------------------------------- report


@dataclass
class SignalResult:
    signal: str
    requests: int
    items: int
    request_bytes: int
    gzip_bytes: int
    build_seconds: float
    limit: SignalLimit
    bridge: ServerRun
    peer: ServerRun | None
    # --latency-at: the bridge again, offered that fraction of `bridge`'s stored rate
    paced: ServerRun | None = None
    repeat: int = 1  # the built requests were sent this many times over (the limit saw them once)

    def to_json(self) -> dict[str, Any]:
        limit = {
            **asdict(self.limit),
            "limit_items_per_s": self.limit.limit_rate,
            "limit_cpu_us_per_item": self.limit.cpu_us_per_item,
            "parquet_bytes_per_item": self.limit.parquet_bytes / max(self.limit.items, 1),
        }
        bridge = self.bridge.to_json()
        peer = self.peer.to_json() if self.peer else None
        return {
            "requests": self.requests,
            "items": self.items,
            "request_bytes": self.request_bytes,
            "gzip_bytes": self.gzip_bytes,
            "build_seconds": self.build_seconds,
            "limit": limit,
            "bridge": bridge,
            "collector_file": peer,
            "bridge_paced": self.paced.to_json() if self.paced else None,
            "bridge_stored_over_limit": self.bridge.stored_rate / max(self.limit.limit_rate, 1e-9),
            "bridge_stored_over_collector": (
                self.bridge.stored_rate / self.peer.stored_rate
                if self.peer and self.peer.stored_rate
                else None
            ),
        }


HEADER = (
    f"{'':<22}{'acked/s':>10}{'stored/s':>10}{'us/item':>9}{'p50 ms':>8}{'p99 ms':>8}"
    f"{'RSS MiB':>9}{'B/item':>8}"
)


def _row(name: str, run: ServerRun) -> str:
    i = run.ingest
    return (
        f"  {name:<20}{run.acked_rate:>10,.0f}{run.stored_rate:>10,.0f}{run.cpu_us_per_item:>9.1f}"
        f"{i.p50_ms:>8.0f}{i.p99_ms:>8.0f}{run.stats.peak_rss_bytes / MIB:>9,.0f}"
        f"{run.bytes_per_item:>8.1f}"
    )


def render(args, results: Sequence[SignalResult], e2e: EndToEnd | None) -> str:
    lines = [
        f"otel-delta under a Collector's load: {args.items_per_request:,} items/request, gzip, "
        f"up to {args.in_flight} in flight on one connection, {args.requests} requests per "
        f"signal{f' sent {args.repeat} times over' if args.repeat > 1 else ''}, "
        f"{os.cpu_count()} CPUs; bridge ack = {args.ack}, flush {args.flush_interval} s; "
        f"client {args.client}",
        f"open loop: {args.rate:,.0f} items/s offered" if args.rate else "closed loop",
        "(stored/s: first send -> server exited; us/item: server CPU, first send -> exit;"
        " B/item: on disk)",
        "",
        HEADER,
    ]
    for r in results:
        lim = r.limit
        lines.append(
            f"{r.signal} ({r.items:,} items, {r.request_bytes / MIB:,.1f} MiB OTLP, "
            f"{r.gzip_bytes / MIB:,.1f} MiB gzip)"
        )
        lines.append(
            f"  {'limit, 1 thread':<20}{lim.limit_rate:>10,.0f}{'':>10}{lim.cpu_us_per_item:>9.1f}"
            f"{'':>8}{'':>8}{'':>9}{lim.parquet_bytes / max(lim.items, 1):>8.1f}"
        )
        lines.append(_row("bridge", r.bridge))
        if r.bridge.stages:
            spent = ", ".join(f"{k} {v:.1f}" for k, v in r.bridge.stages.items())
            lines.append(f"  bridge Export stages, mean ms: {spent}")
        if r.paced:
            share = r.paced.offered_rate / max(r.bridge.stored_rate, 1e-9)
            lines.append(_row(f"bridge at {share:.0%}", r.paced))
            spent = ", ".join(f"{k} {v:.1f}" for k, v in r.paced.stages.items())
            lines.append(
                f"    offered {r.paced.offered_rate:,.0f}/s, {share:.0%} of the bridge's stored "
                f"rate above; Export stages, mean ms: {spent}"
            )
        if r.peer:
            lines.append(_row("Collector -> file", r.peer))
        parts = [
            f"gunzip {lim.rate(lim.gunzip_seconds):,.0f}/s",
            f"parse {lim.rate(lim.parse_seconds):,.0f}/s",
            f"Parquet {lim.rate(lim.encode_seconds):,.0f}/s",
            f"(convert {lim.rate(lim.convert_seconds):,.0f}/s, not in the limit)",
        ]
        lines.append(f"  limit stages: {', '.join(parts)}")
        ratio = f"  bridge stored/limit {r.bridge.stored_rate / max(lim.limit_rate, 1e-9):.1%}"
        if r.peer and r.peer.stored_rate:
            ratio += f", bridge/Collector {r.bridge.stored_rate / r.peer.stored_rate:.2f}x"
        clients = f"bench client CPU {r.bridge.ingest.client_cpu_seconds:.1f} s (bridge run)"
        lines.append(f"{ratio}; {clients}")
        for run in (r.bridge, r.paced, r.peer):
            if run and run.ingest.retries:
                lines.append(
                    f"  {run.name}: {run.ingest.retries} retryable answers (overloaded), "
                    "each request retried as the Collector's exporter retries it"
                )
    if e2e:
        lines += [
            "",
            f"telemetrygen ({args.e2e_workers} workers x {args.e2e_rate:g} traces/s) -> "
            f"Collector (batch, otlp gzip) -> bridge: {e2e.spans_stored:,} of "
            f"{e2e.spans_sent:,} spans stored, {e2e.stored_rate:,.0f} spans/s "
            f"({e2e.seconds:.1f} s to the bridge's exit; telemetrygen ran "
            f"{e2e.generator_seconds:.1f} s); peak RSS Collector "
            f"{e2e.collector_peak_rss_bytes / MIB:,.0f} MiB, bridge "
            f"{e2e.bridge_peak_rss_bytes / MIB:,.0f} MiB; "
            f"{e2e.disk_bytes / max(e2e.spans_stored, 1):.1f} B/span on disk",
        ]
    return "\n".join(lines)


def problems(results: Sequence[SignalResult], e2e: EndToEnd | None) -> list[str]:
    found = []
    for r in results:
        for run in (r.bridge, r.paced, r.peer):
            if run is None:
                continue
            where, i = f"{r.signal} {run.name}", run.ingest
            if run.stored_items != i.spans_acked:
                found.append(
                    f"{where}: STORED {run.stored_items:,} items, ACKED {i.spans_acked:,}"
                    + (f" ({i.spans_failed:,} got an error)" if i.spans_failed else "")
                )
            if i.errors:
                found.append(f"{where}: EXPORT ERRORS {i.errors} ({i.spans_failed:,} items)")
            if i.spans_rejected:
                found.append(f"{where}: REJECTED {i.spans_rejected:,} items")
            if i.truncated:
                found.append(f"{where}: TRUNCATED by --max-seconds: {i.spans_unsent:,} unsent")
            if run.exit_code != 0:
                found.append(f"{where}: EXIT CODE {run.exit_code} after SIGTERM")
            if run.bad_records:
                found.append(f"{where}: {run.bad_records} unreadable records in its files")
        if r.limit.items * r.repeat != r.items:
            found.append(f"{r.signal} limit: converted {r.limit.items:,} of {r.items:,} items")
    if e2e:
        if e2e.spans_stored != e2e.spans_sent:
            found.append(
                f"end to end: STORED {e2e.spans_stored:,} spans, telemetrygen SENT "
                f"{e2e.spans_sent:,}"
            )
        if e2e.spans_sent != e2e.spans_requested:
            found.append(
                f"end to end: telemetrygen logged {e2e.spans_sent:,} spans, "
                f"{e2e.spans_requested:,} asked for"
            )
        exits = (e2e.telemetrygen_exit, e2e.collector_exit, e2e.bridge_exit)
        if any(exits):
            found.append(f"end to end: exit codes telemetrygen/Collector/bridge {exits}")
    return found


# --------------------------------------------------------------------------- main


def run_signal(signal: str, args) -> SignalResult:
    total = args.requests * args.items_per_request
    started = time.perf_counter()
    built = BUILDERS[signal](total, args.items_per_request, args.seed)
    zipped = [gzip.compress(p.data, GZIP_LEVEL) for p in built]
    build_seconds = time.perf_counter() - started
    print(f"{signal}: {len(built)} requests built in {build_seconds:.1f} s", file=sys.stderr)
    # sent `repeat` times over: a run of several flush intervals without building as many
    payloads, compressed = built * args.repeat, zipped * args.repeat
    limit = run_signal_limit(signal, zipped)  # a rate: the built requests once are enough
    bridge = run_bridge(signal, payloads, compressed, args, args.rate)
    paced = None
    if args.latency_at:  # the fraction of the rate just stored
        paced = run_bridge(signal, payloads, compressed, args, args.latency_at * bridge.stored_rate)
    peer = None if args.no_collector else run_peer(signal, payloads, compressed, args)
    return SignalResult(
        signal=signal,
        requests=len(payloads),
        items=sum(p.spans for p in payloads),
        request_bytes=sum(len(p.data) for p in payloads),
        gzip_bytes=sum(len(c) for c in compressed),
        build_seconds=build_seconds,
        limit=limit,
        bridge=bridge,
        peer=peer,
        paced=paced,
        repeat=args.repeat,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--signals", default=",".join(SIGNAL_NAMES), help="comma-separated: traces,logs,metrics"
    )
    parser.add_argument(
        "--requests", type=int, default=None, help=f"per signal (default {DEFAULTS['requests']})"
    )
    parser.add_argument(
        "--items-per-request",
        type=int,
        default=None,
        help="the batch processor's send_batch_size (default 8192)",
    )
    parser.add_argument(
        "--in-flight", type=int, default=10, help="concurrent Exports on the one connection"
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes for a smoke run (explicit flags win)"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=300.0, help="hard limit of each sending phase"
    )
    parser.add_argument(
        "--e2e-traces",
        type=int,
        default=None,
        help=f"telemetrygen traces end to end, all workers (default {DEFAULTS['e2e_traces']:,};"
        " 0: skip)",
    )
    parser.add_argument("--e2e-child-spans", type=int, default=3)
    parser.add_argument("--e2e-workers", type=int, default=8, help="telemetrygen --workers")
    parser.add_argument(
        "--e2e-rate",
        type=float,
        default=2000,
        help="telemetrygen --rate, traces/s per worker (0 overflows its SDK queue: drops)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="items/s offered on a fixed schedule (open loop; 0: closed loop, as fast as acked)",
    )
    parser.add_argument(
        "--latency-at",
        type=float,
        default=0.0,
        help="after the closed-loop bridge run, run the bridge again offered this fraction of "
        "the rate it stored (e.g. 0.8: issue #16's Export latency at 80%%); 0: skip",
    )
    parser.add_argument("--no-collector", action="store_true", help="skip the file-exporter peer")
    parser.add_argument(
        "--client",
        choices=["loadgen", "python"],
        default="loadgen",
        help="loadgen: requests gzip'd before the run (make loadgen); python: gRPC gzips each send",
    )
    parser.add_argument("--flush-interval", type=float, default=10.0, help="the bridge's default")
    parser.add_argument("--convert-workers", type=int, default=0, help="the bridge's default")
    parser.add_argument("--native", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--ack", choices=["wal", "commit"], default="wal")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument(
        "--repeat",
        type=int,
        help="send the built requests this many times over (the same bytes, each copy stored; "
        "default 6): a run of several flushes without building as many requests",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sizes = QUICK if args.quick else DEFAULTS
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    signals = [s.strip() for s in args.signals.split(",") if s.strip()]
    if unknown := set(signals) - set(SIGNAL_NAMES):
        raise SystemExit(f"unknown signals {sorted(unknown)}; choose from {SIGNAL_NAMES}")
    if not 0 <= args.latency_at <= 1:
        raise SystemExit("--latency-at is a fraction of the stored rate, from 0 to 1")
    if args.latency_at and args.rate:
        raise SystemExit("--latency-at follows a closed-loop run: leave --rate at 0")
    if (
        min(args.requests, args.items_per_request, args.in_flight, args.e2e_workers, args.repeat)
        <= 0
    ):
        raise SystemExit(
            "--requests, --items-per-request, --in-flight, --e2e-workers and --repeat must be "
            "positive"
        )
    results = [run_signal(signal, args) for signal in signals]
    e2e = run_end_to_end(args) if args.e2e_traces > 0 else None
    print(render(args, results, e2e))
    return finish(
        RESULTS_FILE,
        vars(args),
        problems(results, e2e),
        signals={r.signal: r.to_json() for r in results},
        end_to_end=e2e.to_json() if e2e else None,
    )


if __name__ == "__main__":
    sys.exit(main())
