"""What the benchmarks share: the synthetic workload, the bridge as users start it, the clients
that drive it, and how results are written. Not a benchmark itself; each `bench/<name>.py` that
answers a question imports from here.

- workload: `build_payloads`, realistic OTLP trace requests, serialized up front;
- `BridgeProcess`: `otel-delta serve` as a child process (temp config), its RSS and CPU sampled
  (`ChildProcess`: the same for any server program);
- `drive`: N gRPC client threads sending the payloads as raw bytes, merged into an `Ingest`;
- `rate_table`: the `spans/s  seconds` table the ingest and limit benchmarks print;
- results: `write_results` (bench/results/*.json), `git_commit`, `machine`, `workdir`.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import platform
import queue
import random
import re
import resource
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from prometheus_client.parser import text_string_to_metric_families

# every door of a benchmarked bridge on loopback, on ports the OS picks (as in the tests)
from tests.helpers import LOOPBACK
from tests.tools import loadgen_binary

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
RSS_SAMPLE_SECONDS = 0.05
SERVER_START_SECONDS = 60.0
SERVER_STOP_SECONDS = 60.0
MIB = 1024 * 1024

# --------------------------------------------------------------------------- workload

SERVICES = ("frontend", "checkout", "cart", "payment", "catalog")
ROUTES = ("/api/cart", "/api/checkout", "/api/products/{id}", "/api/users/{id}", "/health")
METHODS = ("GET", "GET", "GET", "POST", "PUT", "DELETE")
STATUS_CODES = (200, 200, 200, 200, 201, 204, 304, 400, 404, 500)
PEERS = ("cart.svc.cluster.local", "payment.svc.cluster.local", "postgres.db.internal")
DB_SYSTEMS = ("postgresql", "redis", "mysql", "mongodb")
DB_STATEMENTS = (
    "SELECT id, name, price FROM products WHERE id = $1",
    "UPDATE carts SET updated_at = now() WHERE user_id = $1",
    "INSERT INTO orders (user_id, total) VALUES ($1, $2) RETURNING id",
)
KINDS = (Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT, Span.SPAN_KIND_INTERNAL)
SPANS_PER_TRACE = 8
SCOPE = InstrumentationScope(name="opentelemetry.instrumentation.asgi", version="0.52b0")
SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"


@dataclass(frozen=True)
class Payload:
    """One serialized ExportTraceServiceRequest and how many spans it carries."""

    data: bytes
    spans: int


def _kv(key: str, value: str | int | float | bool) -> KeyValue:
    """A KeyValue with the AnyValue field matching the Python type (bool before int)."""
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _resource(index: int, service: str) -> Resource:
    """~8 attributes, as an SDK plus k8s resource detectors would report them."""
    attrs = {
        "service.name": service,
        "service.version": f"1.{index}.3",
        "service.namespace": "shop",
        "service.instance.id": f"{service}-7f9c{index}d-x{index}k2q",
        "deployment.environment": "production",
        "host.name": f"node-{index:02d}.eu-west-1.compute.internal",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": "1.45.2",
    }
    return Resource(attributes=[_kv(k, v) for k, v in attrs.items()])


def _span_attributes(rng: random.Random) -> list[KeyValue]:
    """10 attributes: 6 strings, 2 ints, 1 double, 1 bool (the common HTTP + DB mix)."""
    attrs: dict[str, str | int | float | bool] = {
        "http.method": rng.choice(METHODS),
        "http.route": rng.choice(ROUTES),
        "http.status_code": rng.choice(STATUS_CODES),
        "net.peer.name": rng.choice(PEERS),
        "net.peer.port": rng.choice((5432, 6379, 8080, 443)),
        "db.system": rng.choice(DB_SYSTEMS),
        "db.statement": rng.choice(DB_STATEMENTS),
        "user_agent.original": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36",
        "app.queue.wait_ms": round(rng.random() * 50, 3),
        "app.cache.hit": rng.random() < 0.7,
    }
    return [_kv(k, v) for k, v in attrs.items()]


def _span(rng: random.Random, trace_id: bytes, parent: bytes, now_ns: int) -> Span:
    start = now_ns - rng.randrange(1, 60_000_000_000)
    end = start + rng.randrange(100_000, 500_000_000)
    failed = rng.random() < 0.05
    return Span(
        trace_id=trace_id,
        span_id=rng.randbytes(8),
        parent_span_id=parent,
        name=f"{rng.choice(METHODS)} {rng.choice(ROUTES)}",
        kind=rng.choice(KINDS),
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=_span_attributes(rng),
        events=[
            Span.Event(
                time_unix_nano=start + 1000,
                name="message",
                attributes=[_kv("message.type", "SENT"), _kv("message.id", rng.randrange(1000))],
            )
        ],
        status=Status(code=Status.STATUS_CODE_ERROR, message="upstream timeout")
        if failed
        else Status(),
    )


def _spans(rng: random.Random, count: int, now_ns: int) -> list[Span]:
    """Spans grouped in traces: a root, then children pointing at an earlier span."""
    spans: list[Span] = []
    while len(spans) < count:
        trace_id = rng.randbytes(16)
        trace: list[bytes] = []
        for _ in range(min(SPANS_PER_TRACE, count - len(spans))):
            parent = rng.choice(trace) if trace else b""
            span = _span(rng, trace_id, parent, now_ns)
            trace.append(span.span_id)
            spans.append(span)
    return spans


def shares(count: int, parts: int) -> list[int]:
    """`count` items shared out evenly over `parts` (the first ones get one more)."""
    share, extra = divmod(count, parts)
    return [share + (1 if i < extra else 0) for i in range(parts)]


def _request(
    rng: random.Random, resources: Sequence[Resource], count: int, now_ns: int
) -> ExportTraceServiceRequest:
    """One ResourceSpans per service, the spans shared out evenly."""
    groups = []
    for res, n in zip(resources, shares(count, len(resources)), strict=True):
        if n:
            scope_spans = ScopeSpans(scope=SCOPE, spans=_spans(rng, n, now_ns))
            groups.append(
                ResourceSpans(resource=res, scope_spans=[scope_spans], schema_url=SCHEMA_URL)
            )
    return ExportTraceServiceRequest(resource_spans=groups)


RequestBuilder = Callable[[random.Random, Sequence[Resource], int, int], Any]


def serialized_requests(
    total: int, per_request: int, seed: int, build: RequestBuilder
) -> list[Payload]:
    """Requests of `per_request` items (the last one smaller) from `build(rng, resources,
    count, now_ns)`, serialized up front so no measurement pays for building them. Each
    request lists the services in an order of its own, as a Collector's batches list them
    in the order their exports came in (so each request's dictionaries differ too)."""
    rng = random.Random(seed)
    resources = [_resource(i, name) for i, name in enumerate(SERVICES)]
    now_ns = time.time_ns()
    payloads = []
    for first in range(0, total, per_request):
        count = min(per_request, total - first)
        order = rng.sample(resources, len(resources))
        payloads.append(Payload(build(rng, order, count, now_ns).SerializeToString(), count))
    return payloads


def build_payloads(total_spans: int, spans_per_request: int, seed: int) -> list[Payload]:
    """The trace workload (see `_request`)."""
    return serialized_requests(total_spans, spans_per_request, seed, _request)


# --------------------------------------------------------------------------- the bridge process


@dataclass
class ServerStats:
    """What the sampler saw of the server process tree."""

    peak_rss_bytes: int = 0
    cpu_seconds: float = 0.0  # whole life, including start-up imports and shutdown
    ingest_cpu_seconds: float = 0.0  # from first to last client call only
    samples: int = 0


class ChildProcess:
    """A server started as a child process (any program), with its stderr drained and the RSS
    and CPU of its process tree sampled; `BridgeProcess` is one, `bench.collector_load` runs the
    OpenTelemetry Collector as another."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        self.stats = ServerStats()
        self.log_tail: deque[str] = deque(maxlen=200)
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._stop_sampling = threading.Event()
        # CPU of waited-for children before this one: `stop` takes the difference once it has
        # waited for this one, the whole life of its tree, the last moments before exit included
        self._children_cpu_before = _children_cpu_seconds()
        self.life_cpu_seconds: float | None = None  # set by `stop`
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # a full stderr pipe would block the server: keep reading it for its whole life
        threading.Thread(target=self._drain, daemon=True).start()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log_tail.append(line.rstrip())
            self._lines.put(line)
        self._lines.put(None)

    def _sample(self) -> None:
        """Peak RSS of the server and its children, every 50 ms until it exits."""
        try:
            root = psutil.Process(self.proc.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop_sampling.wait(RSS_SAMPLE_SECONDS):
            try:
                tree = [root, *root.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in tree)
                cpu = _cpu_seconds(tree)
            except psutil.NoSuchProcess:
                return
            self.stats.samples += 1
            self.stats.peak_rss_bytes = max(self.stats.peak_rss_bytes, rss)
            self.stats.cpu_seconds = cpu

    def cpu_seconds(self) -> float:
        """CPU used so far by the server tree (0 once it has gone)."""
        try:
            root = psutil.Process(self.proc.pid)
            return _cpu_seconds([root, *root.children(recursive=True)])
        except psutil.NoSuchProcess:
            return 0.0

    def stop(self) -> int:
        """SIGTERM (a server finishes what it buffered), then its exit code. Also sets
        `life_cpu_seconds`, exact when no other child of the bench exits meanwhile."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=SERVER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            code = -9
        self._stop_sampling.set()
        self._sampler.join(timeout=5)
        self.life_cpu_seconds = _children_cpu_seconds() - self._children_cpu_before
        return code

    def kill(self) -> None:
        self._stop_sampling.set()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class BridgeProcess(ChildProcess):
    """`otel-delta serve` in a child process, with its stderr drained and its RSS sampled."""

    def __init__(
        self,
        workdir: Path,
        flush_interval: float,
        convert_workers: int,
        native: str,
        ack: str | None = "wal",
        buffer_max_bytes: int | None = None,
        source: Path | None = None,
        extra_config: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        """`source`: run the otel_delta package of another source tree (e.g. an older
        checkout, as the baseline of the same run) instead of this one; `ack = None` for a
        version from before the write-ahead log (its config has no such keys); `env`:
        settings as `OTEL_DELTA_<SECTION>__<KEY>` variables (e.g. a lake on S3)."""
        self.lake = workdir / "lake"
        self.config = workdir / "deltalake.toml"
        buffer = f"flush_interval_seconds = {flush_interval}\nmax_rows = 100000\n"
        if ack is not None:
            buffer += f'ack = "{ack}"\n'
        if buffer_max_bytes is not None:
            buffer += f"max_bytes = {buffer_max_bytes}\n"
        wal = f'[wal]\ndir = "{workdir / "wal"}"\n' if ack is not None else ""
        # a baseline tree may predate the HTTP and admin endpoints (and refuse their keys)
        doors = LOOPBACK if source is None else '[receiver]\ngrpc_endpoint = "127.0.0.1:0"\n'
        self.config.write_text(
            f"{doors}convert_workers = {convert_workers}\n"
            f'native_convert = "{native}"\n[buffer]\n{buffer}'
            f'[deltalake]\ntable_path = "{self.lake}"\n{wal}{extra_config}'
        )
        self.http_port = 0  # set by wait_for_port when the bridge serves OTLP/HTTP
        self.admin_port = 0  # set by wait_for_port when the bridge serves its admin endpoint
        super().__init__(
            [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(self.config)],
            # `python -m` puts the working directory first on sys.path: run in the tree whose
            # otel_delta package is wanted
            cwd=source or REPO_ROOT,
            # every run its own WAL, also for a baseline tree whose config has no [wal] keys
            # (an unknown variable is ignored; a shared ./otel-delta-wal would be replayed)
            env={
                **os.environ,
                "OTEL_DELTA_WAL__DIR": str(workdir / "wal"),
                **({"PYTHONPATH": str(source)} if source else {}),
                **(env or {}),
            },
        )

    def wait_for_port(self) -> int:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                break
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if match:
                if http := re.search(r"127\.0\.0\.1:(\d+) \(OTLP/HTTP\)", line):
                    self.http_port = int(http.group(1))
                if admin := re.search(r"admin on 127\.0\.0\.1:(\d+)", line):
                    self.admin_port = int(admin.group(1))
                return int(match.group(1))
        self.kill()
        raise RuntimeError("bridge did not log its port:\n" + "\n".join(self.log_tail))


STAGE_METRIC = "otel_delta_receiver_export_stage_duration_seconds"


def export_stages(admin_port: int) -> dict[str, float]:
    """Mean milliseconds an Export spent in each stage of the bridge's pipeline (slot,
    receive, convert, log or commit), from its /metrics; empty if it has no admin endpoint
    or predates the stage histogram."""
    if not admin_port:
        return {}
    url = f"http://127.0.0.1:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    totals: dict[str, dict[str, float]] = {"_sum": {}, "_count": {}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            suffix = sample.name.removeprefix(STAGE_METRIC)
            if sample.name.startswith(STAGE_METRIC) and suffix in totals:
                stage = sample.labels["stage"]
                totals[suffix][stage] = totals[suffix].get(stage, 0.0) + sample.value
    sums, counts = totals["_sum"], totals["_count"]
    return {stage: sums[stage] / n * 1000 for stage, n in counts.items() if n}


def _cpu_seconds(processes: Sequence[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def _children_cpu_seconds() -> float:
    """User + system CPU of every child this process has waited for (and of theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------- clients


@dataclass
class ClientLog:
    """One client thread's record; merged after the run so threads never share a lock."""

    latencies: list[float] = field(default_factory=list)
    first_send: float = float("inf")
    last_ok: float = 0.0
    acked_spans: int = 0
    rejected_spans: int = 0
    failed_spans: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    stopped_by_deadline: bool = False


# one sender per client thread: payload bytes in, response bytes out (or a raised SendError)
Send = Callable[[bytes, float], bytes]


class SendError(Exception):
    """A refused or failed Export; `code` names it (gRPC code or HTTP status)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _channel(target: str, tls_ca: Path | None = None) -> grpc.Channel:
    options = [
        ("grpc.use_local_subchannel_pool", 1),  # its own TCP connection per client
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1),
    ]
    if tls_ca is None:
        return grpc.insecure_channel(target, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls_ca.read_bytes())
    return grpc.secure_channel(target, credentials, options=options)


def grpc_sender(
    port: int,
    tls_ca: Path | None = None,
    method: str = EXPORT_METHOD,
    compression: grpc.Compression | None = None,
) -> tuple[Send, Callable[[], None]]:
    """OTLP/gRPC on its own connection, connected before the clock starts. `method`: another
    signal's Export; `compression`: e.g. gzip, done by gRPC on each send (as an exporter does).
    Thread-safe: threads sharing one sender have their calls in flight on one connection."""
    channel = _channel(f"127.0.0.1:{port}", tls_ca)
    grpc.channel_ready_future(channel).result(timeout=30)
    export = channel.unary_unary(method)  # no (de)serializer: raw bytes

    def send(data: bytes, timeout: float) -> bytes:
        try:
            return export(data, timeout=timeout, compression=compression)
        except grpc.RpcError as exc:
            raise SendError(exc.code().name) from None

    return send, channel.close


def http_sender(port: int, tls_ca: Path | None = None) -> tuple[Send, Callable[[], None]]:
    """OTLP/HTTP protobuf on one keep-alive connection (as the SDK's and the Collector's
    exporters send it), connected before the clock starts."""
    if tls_ca is None:
        connection: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", port)
    else:
        context = ssl.create_default_context(cafile=str(tls_ca))
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)
    connection.connect()
    headers = {"Content-Type": "application/x-protobuf"}

    def send(data: bytes, timeout: float) -> bytes:
        assert connection.sock is not None
        connection.sock.settimeout(timeout)
        connection.request("POST", "/v1/traces", body=data, headers=headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise SendError(f"HTTP {response.status}")
        return body

    return send, connection.close


def _rejected(response: bytes) -> int:
    """Spans the bridge refused (partial_success); an empty response means none. The logs and
    metrics responses have the same wire layout (partial_success = 1, its count = 1), so this
    reads their rejected log records and data points too."""
    if not response:
        return 0
    return ExportTraceServiceResponse.FromString(response).partial_success.rejected_spans


def _client(
    send: Send,
    payloads: Sequence[Payload],
    work: queue.SimpleQueue[int],
    start: threading.Barrier,
    deadline: float,
    log: ClientLog,
    pace: Pacer | None = None,
) -> None:
    """Send payloads until none are left or the deadline passes; bytes in, bytes out."""
    start.wait()
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            log.stopped_by_deadline = not work.empty()
            return
        try:
            payload = payloads[work.get_nowait()]
        except queue.Empty:
            return
        # open loop: timed from the request's place on the schedule, so a request that waited
        # for a free client (all in flight) counts that wait (no coordinated omission)
        sent = pace.wait() if pace is not None else time.perf_counter()
        log.first_send = min(log.first_send, sent)
        try:
            response = send(payload.data, remaining)
        except SendError as exc:
            log.errors[exc.code] += 1
            log.failed_spans += payload.spans
            continue
        done = time.perf_counter()
        rejected = _rejected(response)
        log.latencies.append(done - sent)
        log.last_ok = done
        log.acked_spans += payload.spans - rejected
        log.rejected_spans += rejected


@dataclass
class Ingest:
    """Merged client-side results of one run against the bridge."""

    clients: int
    requests_ok: int
    spans_acked: int
    spans_rejected: int
    spans_failed: int
    spans_unsent: int
    seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: dict[str, int]
    truncated: bool
    client_cpu_seconds: float
    retries: int = 0  # retryable answers that were retried (drive_precompressed)

    @property
    def rate(self) -> float:
        return self.spans_acked / self.seconds if self.seconds > 0 else 0.0


class Pacer:
    """An open-loop schedule shared by the client threads: request k is sent no earlier than
    `interval` * k after the first, so a run offers a fixed rate (behind schedule, a request
    goes at once). Latency is timed from the scheduled time (`wait` returns it), so time a
    request spent waiting for a client, because all were in flight, is counted."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._next: float | None = None

    def wait(self) -> float:
        """Sleep until the next request's scheduled time; return that time."""
        with self._lock:
            at = time.perf_counter() if self._next is None else self._next
            self._next = at + self.interval
        delay = at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return at


def drive(
    port: int,
    payloads: Sequence[Payload],
    clients: int,
    max_seconds: float,
    sender: Callable[[int], tuple[Send, Callable[[], None]]] = grpc_sender,
    pace: Pacer | None = None,
) -> Ingest:
    """Run `clients` threads, each on its own connection, until all payloads are acked; as
    fast as answers come (closed loop), or on `pace`'s schedule (open loop)."""
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(payloads)):
        work.put(index)
    senders = [sender(port) for _ in range(clients)]  # connected: handshakes are not ingest
    logs = [ClientLog() for _ in range(clients)]
    barrier = threading.Barrier(clients)
    cpu_before = _own_cpu_seconds()
    deadline = time.perf_counter() + max_seconds
    threads = [
        threading.Thread(target=_client, args=(send, payloads, work, barrier, deadline, log, pace))
        for (send, _), log in zip(senders, logs, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_used = _own_cpu_seconds() - cpu_before
    for _, close in senders:
        close()
    return _merge(logs, payloads, work.qsize(), cpu_used)


def drive_precompressed(
    port: int,
    method: str,
    payloads: Sequence[Payload],
    gzipped: Sequence[bytes],
    in_flight: int,
    max_seconds: float,
    interval: float = 0.0,
) -> Ingest:
    """`drive`'s run as a Collector's exporter makes it, by tools/loadgen: `in_flight` requests
    at a time on one connection, each gzip'd before the clock starts (`gzipped`: the payloads'
    bytes, gzip'd by the caller, which also measures with them) and sent with the gzip
    encoding as it is. The client's CPU for
    compressing, 4 µs per span with `drive`, then no longer competes with the server for the
    machine's cores, and the latency is the server's and the transport's only. `interval`:
    open loop (seconds between scheduled sends, latency from the schedule), 0 closed loop.
    A retryable answer is retried as the Collector's exporter would (tools/loadgen), so what a
    run stores is what a Collector would have stored; `Ingest.retries` counts them."""
    with tempfile.TemporaryDirectory(prefix="otel-delta-loadgen-") as folder:
        requests = Path(folder) / "requests"
        with requests.open("wb") as out:
            for body in gzipped:
                out.write(len(body).to_bytes(4, "little") + body)
        command = [str(loadgen_binary()), "-addr", f"127.0.0.1:{port}", "-method", method]
        command += ["-in", str(requests), "-in-flight", str(in_flight)]
        command += ["-max-seconds", str(max_seconds), "-interval", str(interval)]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=max_seconds + 120, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"loadgen failed ({done.returncode}): {done.stderr.strip()}")
    output = json.loads(done.stdout)
    log = ClientLog(stopped_by_deadline=output["deadline_reached"])
    for result in output["results"]:
        items = payloads[result["index"]].spans
        log.first_send = min(log.first_send, result["sent"])
        if result["code"] != "OK":
            log.errors[result["code"]] += 1
            log.failed_spans += items
            continue
        log.last_ok = max(log.last_ok, result["done"])
        log.latencies.append(result["done"] - result["sent"])
        log.acked_spans += items - result["rejected"]
        log.rejected_spans += result["rejected"]
    ingest = _merge([log], payloads, output["unsent"], output["cpu_seconds"])
    retries = sum(result["retries"] for result in output["results"])
    return dataclasses.replace(ingest, clients=in_flight, retries=retries)


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _merge(
    logs: Sequence[ClientLog], payloads: Sequence[Payload], unsent_requests: int, cpu: float
) -> Ingest:
    latencies = np.array([x for log in logs for x in log.latencies]) * 1000
    first = min(log.first_send for log in logs)
    last = max(log.last_ok for log in logs)
    errors: Counter[str] = Counter()
    for log in logs:
        errors.update(log.errors)
    total = sum(p.spans for p in payloads)
    acked = sum(log.acked_spans for log in logs)
    rejected = sum(log.rejected_spans for log in logs)
    failed = sum(log.failed_spans for log in logs)
    return Ingest(
        clients=len(logs),
        requests_ok=len(latencies),
        spans_acked=acked,
        spans_rejected=rejected,
        spans_failed=failed,
        spans_unsent=total - acked - rejected - failed,
        seconds=max(last - first, 0.0),
        p50_ms=float(np.percentile(latencies, 50)) if len(latencies) else 0.0,
        p99_ms=float(np.percentile(latencies, 99)) if len(latencies) else 0.0,
        max_ms=float(latencies.max()) if len(latencies) else 0.0,
        errors=dict(errors),
        truncated=unsent_requests > 0 or any(log.stopped_by_deadline for log in logs),
        client_cpu_seconds=cpu,
    )


# --------------------------------------------------------------------------- the lake, workdir


def count_rows(lake: Path, table: str = "spans") -> int:
    """Rows in a table (the spans table by default) as delta-rs sees them (0 if nothing was
    ever committed)."""
    uri = str(lake / table)
    return DeltaTable(uri).count() if DeltaTable.is_deltatable(uri) else 0


def parquet_bytes(lake: Path, table: str) -> int:
    """Bytes of the table's Parquet files on disk (all of them, whatever the log references)."""
    return sum(path.stat().st_size for path in (lake / table).rglob("*.parquet"))


@contextmanager
def workdir(prefix: str = "otel-delta-bench-") -> Iterator[Path]:
    """A fresh temporary directory, removed afterwards whatever happens."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- reporting

Rate = tuple[str, float | None, float | None]  # name, spans/s, seconds (None: a heading)
Fact = tuple[str, str]  # name, formatted value


def rate_table(sections: Sequence[tuple[Sequence[Rate], Sequence[Fact]]]) -> list[str]:
    """`name  spans/s  seconds` rows, then `name  value` facts, section after section, with all
    names in one column as wide as the longest."""
    names = [name for rates, facts in sections for name, *_ in [*rates, *facts]]
    width = max(len(name) for name in names) + 2
    lines = [f"{'':<{width}}{'spans/s':>12}{'seconds':>10}"]
    for rates, facts in sections:
        for name, rate, seconds in rates:
            numbers = "" if rate is None else f"{rate:>12,.0f}{seconds:>10.2f}"
            lines.append(f"{name:<{width}}{numbers}".rstrip())
        lines += [f"{name:<{width}}{value}" for name, value in facts]
    return lines


def machine(**extra: Any) -> dict[str, Any]:
    """What the figures were measured on: CPU count and Python, plus what the caller adds."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), **extra}


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def write_results(data: dict[str, Any], path: Path) -> None:
    """Write via a temp file so a crashed run never leaves half a JSON behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def run_problem(name: str, result: dict[str, Any]) -> str | None:
    """What makes a bridge run's figures doubtful (rows stored other than the spans acked,
    Export errors, a bad exit), as one line; None for a clean run. `result` has the keys
    rows_in_table, spans_acked, errors and exit_code."""
    if (
        result["rows_in_table"] == result["spans_acked"]
        and not result["errors"]
        and result["exit_code"] == 0
    ):
        return None
    return (
        f"{name}: {result['rows_in_table']} rows stored, {result['spans_acked']} acked; "
        f"errors {result['errors'] or 'none'}; exit {result['exit_code']}"
    )


def finish(path: Path, config: dict[str, Any], problems: list[str], **figures: Any) -> int:
    """The end of a benchmark run: problems printed loudly, the figures written with the run's
    commit, machine and config to `path`; exit code 1 if anything made the figures doubtful."""
    for problem in problems:
        print(f"!!! {problem}", file=sys.stderr)
    write_results(
        {
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "git_commit": git_commit(),
            "machine": machine(platform=platform.platform()),
            "config": config,
            **figures,
            "problems": problems,
        },
        path,
    )
    print(f"results: {path.relative_to(REPO_ROOT)}")
    return 1 if problems else 0
