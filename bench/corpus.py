"""A deterministic, realistic OpenTelemetry corpus: what SDKs in a microservice shop send
through a Collector's batch processor. For measuring bytes on disk (bench/storage.py).

Random ids and random attribute values make every column look incompressible and hide what
a real table gains from sorting and encodings, so this corpus is built like real telemetry:

- seven services in four languages, two instances each, with the resource attributes their
  SDKs and the k8s/cloud detectors set (same keys, per-instance values);
- traces of 6-30 spans as real trees: a frontend SERVER span, CLIENT calls answered by SERVER
  spans in the callee, INTERNAL work, database CLIENT spans with semantic-convention query
  attributes, gRPC calls, a Kafka PRODUCER whose CONSUMER runs in a separate trace with a
  link back; children nested in their parents' time, durations log-normal;
- about 3% error traces: ERROR status up the call chain, an `exception` event with a stack
  trace in the service's language, HTTP 500;
- log records tied to spans (trace and span ids, time inside the span): templated messages
  with varying numbers and ids, code location attributes, severities from DEBUG to ERROR;
- metrics every 10 s per instance: HTTP server duration histograms per route/method/status
  (semantic-convention bucket bounds, cumulative), active requests and connection-pool sums,
  memory gauges;
- requests of up to `batch_size` items (the batch processor's default 8,192), grouped by
  resource and scope as the batch processor merges them.

Everything comes from `random.Random(seed)` and `start_unix_nano`: the same arguments give
the same bytes.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from bench.common import _kv

SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
MS = 1_000_000
SECOND = 1_000_000_000
HTTP_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
METRIC_INTERVAL = 10 * SECOND


@dataclass(frozen=True)
class Corpus:
    traces: list[bytes]  # serialized ExportTraceServiceRequest
    logs: list[bytes]  # serialized ExportLogsServiceRequest
    metrics: list[bytes]  # serialized ExportMetricsServiceRequest
    spans: int
    log_records: int
    metric_points: int


@dataclass(frozen=True)
class Service:
    name: str
    language: str
    sdk_version: str
    runtime: tuple[str, str]
    http_scope: tuple[str, str]
    db_scope: tuple[str, str]
    frames: tuple[str, ...]  # stack frame templates in the service's language


SERVICES = (
    Service(
        "frontend",
        "nodejs",
        "1.30.1",
        ("nodejs", "22.12.0"),
        ("@opentelemetry/instrumentation-http", "0.57.1"),
        ("@opentelemetry/instrumentation-redis", "0.46.0"),
        ("    at {fn} (/app/src/{mod}.js:{line}:{col})",),
    ),
    Service(
        "checkout",
        "go",
        "1.34.0",
        ("go", "go1.23.4"),
        ("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", "0.59.0"),
        ("github.com/XSAM/otelsql", "0.36.0"),
        ("main.{fn}(...)\n\t/src/checkout/{mod}.go:{line} +0x{col:x}",),
    ),
    Service(
        "cart",
        "dotnet",
        "1.10.0",
        ("dotnet", "9.0.0"),
        ("OpenTelemetry.Instrumentation.AspNetCore", "1.10.1"),
        ("OpenTelemetry.Instrumentation.StackExchangeRedis", "1.10.0-beta.1"),
        ("   at Cart.{mod}.{fn}() in /src/Cart/{mod}.cs:line {line}",),
    ),
    Service(
        "payment",
        "java",
        "1.45.0",
        ("OpenJDK Runtime Environment", "21.0.5+11-LTS"),
        ("io.opentelemetry.tomcat-10.0", "2.11.0-alpha"),
        ("io.opentelemetry.jdbc", "2.11.0-alpha"),
        ("\tat com.shop.payment.{mod}.{fn}({mod}.java:{line})",),
    ),
    Service(
        "catalog",
        "python",
        "1.29.0",
        ("CPython", "3.12.8"),
        ("opentelemetry.instrumentation.flask", "0.50b0"),
        ("opentelemetry.instrumentation.psycopg", "0.50b0"),
        ('  File "/app/catalog/{mod}.py", line {line}, in {fn}',),
    ),
    Service(
        "shipping",
        "rust",
        "0.27.1",
        ("rustc", "1.83.0"),
        ("opentelemetry-http", "0.27.0"),
        ("sqlx", "0.8.2"),
        ("   {col}: shipping::{mod}::{fn}\n             at ./src/{mod}.rs:{line}:{col}",),
    ),
    Service(
        "email",
        "python",
        "1.29.0",
        ("CPython", "3.12.8"),
        ("opentelemetry.instrumentation.kafka", "0.50b0"),
        ("opentelemetry.instrumentation.smtplib", "0.50b0"),
        ('  File "/app/email/{mod}.py", line {line}, in {fn}',),
    ),
)
BY_NAME = {s.name: s for s in SERVICES}
ROUTES = {  # the frontend's routes and the downstream services each one calls
    ("GET", "/api/products/{id}"): ("catalog",),
    ("GET", "/api/products"): ("catalog",),
    ("GET", "/api/cart"): ("cart", "catalog"),
    ("POST", "/api/cart/items"): ("cart",),
    ("POST", "/api/checkout"): ("checkout",),
    ("GET", "/api/shipping/quote"): ("shipping",),
}
DOWNSTREAM = {  # what each service calls in turn
    "checkout": ("cart", "payment", "shipping"),
    "cart": (),
    "catalog": (),
    "payment": (),
    "shipping": (),
}
QUERIES = {
    "catalog": (
        "postgresql",
        "catalog",
        "SELECT",
        "SELECT id, name, price_cents, currency FROM products WHERE id = $1",
    ),
    "cart": ("redis", "0", "HGETALL", "HGETALL cart:{user}"),
    "checkout": (
        "postgresql",
        "orders",
        "INSERT",
        "INSERT INTO orders (user_id, total_cents, "
        "currency, created_at) VALUES ($1, $2, $3, now()) RETURNING id",
    ),
    "payment": (
        "postgresql",
        "payments",
        "UPDATE",
        "UPDATE payments SET status = $1, updated_at = now() WHERE order_id = $2",
    ),
    "shipping": (
        "postgresql",
        "shipping",
        "SELECT",
        "SELECT zone, rate_cents FROM rates "
        "WHERE country = $1 AND weight_grams <= $2 ORDER BY weight_grams LIMIT 1",
    ),
}
FUNCTIONS = ("handle", "process", "validate", "charge", "lookup", "serialize", "execute", "run")
MODULES = ("server", "handlers", "service", "repository", "client", "middleware", "models")
ERRORS = {
    "nodejs": ("Error", "upstream connect error or disconnect/reset before headers"),
    "go": ("*errors.errorString", "context deadline exceeded"),
    "dotnet": ("System.TimeoutException", "The operation has timed out."),
    "java": (
        "java.sql.SQLTransientConnectionException",
        "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
    ),
    "python": (
        "psycopg.OperationalError",
        "consuming input failed: server closed the connection unexpectedly",
    ),
    "rust": ("sqlx::Error", "pool timed out while waiting for an open connection"),
}


def attributes(pairs: dict[str, str | int | float | bool]) -> list[KeyValue]:
    return [_kv(k, v) for k, v in pairs.items()]


@dataclass
class Instance:
    """One running process of a service: its resource, and the metric state it keeps."""

    service: Service
    resource: Resource
    key: int
    started: int
    histograms: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)
    sums: dict[tuple[str, str, int], float] = field(default_factory=dict)


def instances(rng: random.Random, start: int) -> list[Instance]:
    found = []
    for index, service in enumerate(SERVICES):
        for replica in range(2):
            pod = f"{service.name}-{rng.getrandbits(32):08x}"[:-3] + f"-{rng.getrandbits(20):05x}"
            uid = "-".join(f"{rng.getrandbits(b * 4):0{b}x}" for b in (8, 4, 4, 4, 12))
            resource = Resource(
                attributes=attributes(
                    {
                        "service.name": service.name,
                        "service.namespace": "shop",
                        "service.version": f"2.{index + 3}.{rng.randrange(20)}",
                        "service.instance.id": uid,
                        "deployment.environment.name": "production",
                        "telemetry.sdk.name": "opentelemetry",
                        "telemetry.sdk.language": service.language,
                        "telemetry.sdk.version": service.sdk_version,
                        "host.name": pod,
                        "host.arch": "amd64",
                        "os.type": "linux",
                        "process.pid": 1 + replica * 6,
                        "process.runtime.name": service.runtime[0],
                        "process.runtime.version": service.runtime[1],
                        "k8s.namespace.name": "shop",
                        "k8s.pod.name": pod,
                        "k8s.node.name": f"ip-10-0-{rng.randrange(1, 4)}-{rng.randrange(2, 250)}"
                        ".eu-west-1.compute.internal",
                        "k8s.deployment.name": service.name,
                        "cloud.provider": "aws",
                        "cloud.region": "eu-west-1",
                        "container.id": f"{rng.getrandbits(256):064x}",
                    }
                )
            )
            found.append(
                Instance(service, resource, len(found), start - rng.randrange(3600) * SECOND)
            )
    return found


def scope(name_version: tuple[str, str]) -> InstrumentationScope:
    return InstrumentationScope(name=name_version[0], version=name_version[1])


def new_id(rng: random.Random, bits: int) -> bytes:
    return (rng.getrandbits(bits) | 1).to_bytes(bits // 8, "big")


def duration(rng: random.Random, median_ms: float, sigma: float = 0.8) -> int:
    return max(int(rng.lognormvariate(math.log(median_ms), sigma) * MS), 20_000)


def stack_trace(rng: random.Random, service: Service, kind: str, message: str) -> str:
    lines = [f"{kind}: {message}"]
    for _ in range(rng.randrange(10, 26)):
        lines.append(
            service.frames[0].format(
                fn=rng.choice(FUNCTIONS),
                mod=rng.choice(MODULES),
                line=rng.randrange(12, 900),
                col=rng.randrange(5, 60),
            )
        )
    return "\n".join(lines)


@dataclass
class Emitted:
    """Spans and logs of one instance+scope, keyed so the batcher can group them."""

    spans: dict[tuple[int, tuple[str, str]], list[Span]] = field(
        default_factory=lambda: defaultdict(list)
    )
    logs: dict[tuple[int, tuple[str, str]], list[LogRecord]] = field(
        default_factory=lambda: defaultdict(list)
    )
    order: list[tuple[str, tuple[int, tuple[str, str]], Span | LogRecord]] = field(
        default_factory=list
    )

    def span(self, instance: Instance, scope_of: tuple[str, str], span: Span) -> None:
        self.order.append(("span", (instance.key, scope_of), span))

    def log(self, instance: Instance, scope_of: tuple[str, str], record: LogRecord) -> None:
        self.order.append(("log", (instance.key, scope_of), record))


class TraceBuilder:
    """Builds one trace: spans across services plus the logs their code writes."""

    def __init__(
        self,
        rng: random.Random,
        pick: Callable[[str], Instance],
        out: Emitted,
        failing: bool,
    ) -> None:
        self.rng = rng
        self.pick = pick
        self.out = out
        self.failing = failing
        self.trace_id = new_id(rng, 128)
        self.count = 0
        self.producer: tuple[bytes, bytes, int] | None = None

    def make(
        self,
        instance: Instance,
        scope_of: tuple[str, str],
        name: str,
        kind: int,
        parent: bytes,
        start: int,
        length: int,
        attrs: dict[str, str | int | float | bool],
        error: bool = False,
        remote_parent: bool = False,
    ) -> Span:
        span = Span(
            trace_id=self.trace_id,
            span_id=new_id(self.rng, 64),
            parent_span_id=parent,
            name=name,
            kind=kind,  # type: ignore[arg-type]
            start_time_unix_nano=start,
            end_time_unix_nano=start + length,
            attributes=attributes(attrs),
            flags=0x301 if remote_parent else 0x101,
        )
        if error:
            span.status.CopyFrom(
                Status(code=Status.STATUS_CODE_ERROR, message=ERRORS[instance.service.language][1])
            )
        self.count += 1
        self.out.span(instance, scope_of, span)
        return span

    def log(
        self, instance: Instance, span: Span, severity: int, text: str, body: str, logger: str
    ) -> None:
        at = span.start_time_unix_nano + self.rng.randrange(
            max(span.end_time_unix_nano - span.start_time_unix_nano, 1)
        )
        record = LogRecord(
            time_unix_nano=at,
            observed_time_unix_nano=at + self.rng.randrange(50_000, 3 * MS),
            severity_number=severity,  # type: ignore[arg-type]
            severity_text=text,
            body=AnyValue(string_value=body),
            attributes=attributes(
                {
                    "code.function.name": self.rng.choice(FUNCTIONS),
                    "code.file.path": f"src/{self.rng.choice(MODULES)}",
                    "code.line.number": self.rng.randrange(12, 900),
                }
            ),
            trace_id=span.trace_id,
            span_id=span.span_id,
            flags=1,
        )
        self.out.log(instance, (logger, ""), record)

    def server(
        self, service: str, method: str, route: str, parent: bytes, start: int, budget: int
    ) -> Span:
        """A SERVER span in `service` and everything below it, inside [start, start+budget]."""
        instance = self.pick(service)
        svc = instance.service
        error = self.failing and self.rng.random() < 0.5
        path = route.replace("{id}", str(self.rng.randrange(1, 5000)))
        span = self.make(
            instance,
            svc.http_scope,
            f"{method} {route}",
            Span.SPAN_KIND_SERVER,
            parent,
            start,
            budget,
            {
                "http.request.method": method,
                "url.path": path,
                "url.scheme": "http",
                "http.route": route,
                "http.response.status_code": 500 if error else 200,
                "server.address": f"{service}.shop.svc.cluster.local",
                "server.port": 8080,
                "network.protocol.version": "1.1",
                "client.address": f"10.0.{self.rng.randrange(1, 4)}.{self.rng.randrange(2, 250)}",
                "user_agent.original": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 "
                "(KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
                if service == "frontend"
                else f"{BY_NAME['frontend'].name}/2.3",
            },
            error=error,
            remote_parent=bool(parent),
        )
        cursor = start + budget // 20
        self.log(instance, span, 9, "INFO", f"{method} {path} started", svc.name)
        for callee in ROUTES.get((method, route), DOWNSTREAM.get(service, ())):
            length = min(duration(self.rng, 15), max(budget - (cursor - start) - MS, MS))
            self.client_call(instance, span, callee, cursor, length)
            cursor += length + self.rng.randrange(MS)
        if service in QUERIES:
            for _ in range(self.rng.randrange(1, 4)):
                length = duration(self.rng, 2, 0.6)
                self.db(instance, span, cursor, length)
                cursor += length
        for _ in range(self.rng.randrange(1, 3)):  # in-process work the SDK user traced
            length = duration(self.rng, 1.5, 0.7)
            self.make(
                instance,
                (f"{svc.name}.app", ""),
                f"{self.rng.choice(FUNCTIONS)} {self.rng.choice(MODULES)}",
                Span.SPAN_KIND_INTERNAL,
                span.span_id,
                cursor,
                length,
                {"app.items": self.rng.randrange(1, 40)},
            )
            cursor += length
        if service == "checkout":
            self.produce(instance, span, cursor)
        if error:
            kind, message = ERRORS[svc.language]
            span.events.append(
                Span.Event(
                    time_unix_nano=span.end_time_unix_nano - MS,
                    name="exception",
                    attributes=attributes(
                        {
                            "exception.type": kind,
                            "exception.message": message,
                            "exception.stacktrace": stack_trace(self.rng, svc, kind, message),
                        }
                    ),
                )
            )
            self.log(instance, span, 17, "ERROR", f"request failed: {message}", svc.name)
        else:
            took = (span.end_time_unix_nano - span.start_time_unix_nano) // MS
            self.log(instance, span, 9, "INFO", f"{method} {path} completed in {took} ms", svc.name)
        return span

    def client_call(
        self, instance: Instance, parent: Span, callee: str, start: int, length: int
    ) -> None:
        rpc = callee in ("payment", "shipping") and instance.service.name == "checkout"
        if rpc:
            method = "Charge" if callee == "payment" else "GetQuote"
            client = self.make(
                instance,
                instance.service.http_scope,
                f"{callee}.{callee.capitalize()}Service/{method}",
                Span.SPAN_KIND_CLIENT,
                parent.span_id,
                start,
                length,
                {
                    "rpc.system": "grpc",
                    "rpc.service": f"{callee}.{callee.capitalize()}Service",
                    "rpc.method": method,
                    "rpc.grpc.status_code": 14 if self.failing else 0,
                    "server.address": f"{callee}.shop.svc.cluster.local",
                    "server.port": 50051,
                },
                error=self.failing,
            )
            route, verb = f"/{callee}.{callee.capitalize()}Service/{method}", "POST"
        else:
            verb = "GET" if callee != "cart" else self.rng.choice(("GET", "POST"))
            route = {"catalog": "/products/{id}", "cart": "/cart/{id}"}.get(callee, f"/{callee}")
            client = self.make(
                instance,
                instance.service.http_scope,
                verb,
                Span.SPAN_KIND_CLIENT,
                parent.span_id,
                start,
                length,
                {
                    "http.request.method": verb,
                    "url.full": f"http://{callee}.shop.svc.cluster.local:8080"
                    + route.replace("{id}", str(self.rng.randrange(1, 5000))),
                    "server.address": f"{callee}.shop.svc.cluster.local",
                    "server.port": 8080,
                    "http.response.status_code": 500 if self.failing else 200,
                    "network.peer.address": f"10.0.{self.rng.randrange(1, 4)}."
                    f"{self.rng.randrange(2, 250)}",
                },
                error=self.failing,
            )
        if self.count < 30:
            inner = max(length - 2 * MS, MS)
            self.server(callee, verb, route, client.span_id, start + MS // 2, inner)

    def db(self, instance: Instance, parent: Span, start: int, length: int) -> None:
        system, namespace, operation, text = QUERIES[instance.service.name]
        table = text.split("FROM ")[-1].split(" ")[0] if "FROM" in text else namespace
        span = self.make(
            instance,
            instance.service.db_scope,
            f"{operation} {namespace}.{table}" if system != "redis" else operation,
            Span.SPAN_KIND_CLIENT,
            parent.span_id,
            start,
            length,
            {
                "db.system.name": system,
                "db.namespace": namespace,
                "db.operation.name": operation,
                "db.query.text": text.replace("{user}", str(self.rng.randrange(1, 90_000))),
                "server.address": "postgres.shop.internal" if system != "redis" else "redis",
                "server.port": 5432 if system != "redis" else 6379,
            },
        )
        if self.rng.random() < 0.1:
            span.events.append(
                Span.Event(
                    time_unix_nano=start + length // 2,
                    name="cache.miss",
                    attributes=attributes({"cache.key": f"product:{self.rng.randrange(5000)}"}),
                )
            )
            self.log(
                instance,
                span,
                5,
                "DEBUG",
                f"cache miss for key product:{self.rng.randrange(5000)}",
                instance.service.name,
            )

    def produce(self, instance: Instance, parent: Span, start: int) -> None:
        order = self.rng.randrange(10**6, 10**7)
        span = self.make(
            instance,
            ("go.opentelemetry.io/contrib/instrumentation/github.com/IBM/sarama", "0.59.0"),
            "publish orders",
            Span.SPAN_KIND_PRODUCER,
            parent.span_id,
            start,
            duration(self.rng, 1, 0.5),
            {
                "messaging.system": "kafka",
                "messaging.destination.name": "orders",
                "messaging.operation.type": "publish",
                "messaging.operation.name": "send",
                "messaging.kafka.message.key": str(order),
                "messaging.destination.partition.id": str(order % 6),
            },
        )
        self.producer = (span.trace_id, span.span_id, span.end_time_unix_nano)


def consume(
    rng: random.Random, pick: Callable[[str], Instance], out: Emitted, producer: tuple
) -> int:
    """The email service's CONSUMER span: a trace of its own, linked to the producer."""
    trace_id, span_id, sent = producer
    builder = TraceBuilder(rng, pick, out, failing=False)
    instance = pick("email")
    start = sent + rng.randrange(2 * MS, 400 * MS)
    consumer = builder.make(
        instance,
        instance.service.http_scope,
        "process orders",
        Span.SPAN_KIND_CONSUMER,
        b"",
        start,
        duration(rng, 40),
        {
            "messaging.system": "kafka",
            "messaging.destination.name": "orders",
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": "email",
            "messaging.kafka.offset": rng.randrange(10**6, 10**8),
        },
    )
    consumer.links.append(Span.Link(trace_id=trace_id, span_id=span_id, flags=0x301))
    send = builder.make(
        instance,
        instance.service.db_scope,
        "smtp send",
        Span.SPAN_KIND_CLIENT,
        consumer.span_id,
        start + MS,
        max(consumer.end_time_unix_nano - start - 2 * MS, MS),
        {"server.address": "smtp.mailprovider.example", "server.port": 587},
    )
    builder.log(
        instance,
        send,
        9,
        "INFO",
        f"order confirmation sent to customer {rng.randrange(1, 90_000)}",
        "email.sender",
    )
    return builder.count


def record_metrics(instance: Instance, route: tuple[str, str], status: int, seconds: float) -> None:
    key = (route[0], route[1], status)
    buckets = instance.histograms.setdefault(key, [0] * (len(HTTP_BOUNDS) + 1))
    index = next((i for i, b in enumerate(HTTP_BOUNDS) if seconds <= b), len(HTTP_BOUNDS))
    buckets[index] += 1
    instance.sums[key] = instance.sums.get(key, 0.0) + seconds


def metric_points(
    rng: random.Random, instance: Instance, at: int
) -> tuple[list[tuple[tuple[str, str], m.Metric]], int]:
    """One collection of an instance's metrics at `at`: (scope, metric) pairs, point count."""
    service = instance.service
    histogram = m.Metric(
        name="http.server.request.duration",
        description="Duration of HTTP server requests.",
        unit="s",
        histogram=m.Histogram(aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE),
    )
    for (method, route, status), buckets in sorted(instance.histograms.items()):
        histogram.histogram.data_points.append(
            m.HistogramDataPoint(
                start_time_unix_nano=instance.started,
                time_unix_nano=at,
                count=sum(buckets),
                sum=round(instance.sums[(method, route, status)], 6),
                bucket_counts=buckets,
                explicit_bounds=HTTP_BOUNDS,
                attributes=attributes(
                    {
                        "http.request.method": method,
                        "http.route": route,
                        "http.response.status_code": status,
                        "url.scheme": "http",
                    }
                ),
            )
        )
    active = m.Metric(
        name="http.server.active_requests",
        description="Number of active HTTP server requests.",
        unit="{request}",
        sum=m.Sum(
            aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE,
            is_monotonic=False,
            data_points=[
                m.NumberDataPoint(
                    start_time_unix_nano=instance.started,
                    time_unix_nano=at,
                    as_int=rng.randrange(0, 12),
                    attributes=attributes({"http.request.method": "GET", "url.scheme": "http"}),
                )
            ],
        ),
    )
    pool = m.Metric(
        name="db.client.connection.count",
        description="The number of connections that are currently in state described by the "
        "state attribute.",
        unit="{connection}",
        sum=m.Sum(
            aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE,
            is_monotonic=False,
            data_points=[
                m.NumberDataPoint(
                    start_time_unix_nano=instance.started,
                    time_unix_nano=at,
                    as_int=used if state == "used" else 10 - used,
                    attributes=attributes(
                        {
                            "db.client.connection.pool.name": "main",
                            "db.client.connection.state": state,
                        }
                    ),
                )
                for used in (rng.randrange(0, 10),)
                for state in ("idle", "used")
            ],
        ),
    )
    memory = m.Metric(
        name="process.memory.usage",
        description="The amount of physical memory in use.",
        unit="By",
        gauge=m.Gauge(
            data_points=[
                m.NumberDataPoint(time_unix_nano=at, as_int=180_000_000 + rng.randrange(40_000_000))
            ]
        ),
    )
    cpu = m.Metric(
        name="process.cpu.utilization",
        description="Difference in process.cpu.time since the last measurement, divided by "
        "the elapsed time and number of CPUs available to the process.",
        unit="1",
        gauge=m.Gauge(
            data_points=[m.NumberDataPoint(time_unix_nano=at, as_double=round(rng.random(), 4))]
        ),
    )
    http = (service.http_scope, histogram), (service.http_scope, active)
    runtime = (
        (("opentelemetry-runtime-metrics", service.sdk_version), memory),
        (
            ("opentelemetry-runtime-metrics", service.sdk_version),
            cpu,
        ),
    )
    pairs = [*http, (service.db_scope, pool), *runtime]
    return pairs, len(histogram.histogram.data_points) + 2 + 1 + 2


def _batches(items: Iterable[tuple], size: int) -> Iterable[list[tuple]]:
    batch: list[tuple] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _by_resource_and_scope(
    batch: list[tuple[int, tuple[str, str], Any]],
) -> dict[int, dict[tuple[str, str], list[Any]]]:
    """A batch's items grouped as the batch processor merges them: per resource, per scope."""
    grouped: dict[int, dict[tuple[str, str], list[Any]]] = defaultdict(lambda: defaultdict(list))
    for key, scope_of, item in batch:
        grouped[key][scope_of].append(item)
    return grouped


def _trace_requests(
    order: list[tuple[int, tuple[str, str], Span]], resources: list[Resource], size: int
) -> list[bytes]:
    out = []
    for batch in _batches(order, size):
        request = ExportTraceServiceRequest()
        for key, scopes in _by_resource_and_scope(batch).items():
            rs = ResourceSpans(resource=resources[key], schema_url=SCHEMA_URL)
            for scope_of, spans in scopes.items():
                rs.scope_spans.append(
                    ScopeSpans(scope=scope(scope_of), spans=spans, schema_url=SCHEMA_URL)
                )
            request.resource_spans.append(rs)
        out.append(request.SerializeToString())
    return out


def _log_requests(
    order: list[tuple[int, tuple[str, str], LogRecord]], resources: list[Resource], size: int
) -> list[bytes]:
    out = []
    for batch in _batches(order, size):
        request = ExportLogsServiceRequest()
        for key, scopes in _by_resource_and_scope(batch).items():
            rl = ResourceLogs(resource=resources[key], schema_url=SCHEMA_URL)
            for scope_of, records in scopes.items():
                rl.scope_logs.append(ScopeLogs(scope=scope(scope_of), log_records=records))
            request.resource_logs.append(rl)
        out.append(request.SerializeToString())
    return out


def _metric_requests(
    collections: list[tuple[int, list[tuple[tuple[str, str], m.Metric]], int]],
    resources: list[Resource],
    size: int,
) -> list[bytes]:
    out: list[bytes] = []
    request = ExportMetricsServiceRequest()
    points = 0
    for key, pairs, count in collections:
        if points and points + count > size:
            out.append(request.SerializeToString())
            request, points = ExportMetricsServiceRequest(), 0
        rm = ResourceMetrics(resource=resources[key], schema_url=SCHEMA_URL)
        scopes: dict[tuple[str, str], list[m.Metric]] = defaultdict(list)
        for scope_of, metric in pairs:
            scopes[scope_of].append(metric)
        for scope_of, metrics in scopes.items():
            rm.scope_metrics.append(m.ScopeMetrics(scope=scope(scope_of), metrics=metrics))
        request.resource_metrics.append(rm)
        points += count
    if points:
        out.append(request.SerializeToString())
    return out


ResourceMetrics = m.ResourceMetrics


def build_corpus(
    traces: int,
    *,
    seed: int = 7,
    batch_size: int = 8192,
    start_unix_nano: int = 1_767_225_600_000_000_000,
) -> Corpus:
    """`traces` traces (plus the email service's consumer traces) arriving at about 20/s,
    their logs, and the metrics the instances report every 10 s over the same time span."""
    rng = random.Random(seed)
    fleet = instances(rng, start_unix_nano)
    by_service: dict[str, list[Instance]] = defaultdict(list)
    for instance in fleet:
        by_service[instance.service.name].append(instance)

    def pick(service: str) -> Instance:
        return rng.choice(by_service[service])

    out = Emitted()
    spans = 0
    gap = SECOND // 20  # about 20 requests/s reach the frontend
    clock = start_unix_nano
    collections: list[tuple[int, list[tuple[tuple[str, str], m.Metric]], int]] = []
    metric_count = 0
    next_collection = start_unix_nano + METRIC_INTERVAL
    routes = list(ROUTES)
    for _ in range(traces):
        clock += rng.randrange(1, 2 * gap)
        while clock >= next_collection:
            for instance in fleet:
                pairs, count = metric_points(rng, instance, next_collection)
                collections.append((instance.key, pairs, count))
                metric_count += count
            next_collection += METRIC_INTERVAL
        builder = TraceBuilder(rng, pick, out, failing=rng.random() < 0.04)
        method, route = rng.choice(routes)
        root = builder.server("frontend", method, route, b"", clock, duration(rng, 60))
        seconds = (root.end_time_unix_nano - root.start_time_unix_nano) / SECOND
        status = 500 if root.status.code == Status.STATUS_CODE_ERROR else 200
        record_metrics(by_service["frontend"][0], (method, route), status, seconds)
        spans += builder.count
        if builder.producer is not None:
            spans += consume(rng, pick, out, builder.producer)

    span_order = [(key[0], key[1], item) for kind, key, item in out.order if kind == "span"]
    log_order = [(key[0], key[1], item) for kind, key, item in out.order if kind == "log"]
    resources = [instance.resource for instance in fleet]
    return Corpus(
        traces=_trace_requests(span_order, resources, batch_size),  # type: ignore[arg-type]
        logs=_log_requests(log_order, resources, batch_size),  # type: ignore[arg-type]
        metrics=_metric_requests(collections, resources, batch_size),
        spans=spans,
        log_records=len(log_order),
        metric_points=metric_count,
    )


def main() -> None:
    import gzip
    import time

    started = time.monotonic()
    corpus = build_corpus(2_000)
    print(f"built in {time.monotonic() - started:.1f} s")
    for name, requests, items in (
        ("spans", corpus.traces, corpus.spans),
        ("log records", corpus.logs, corpus.log_records),
        ("metric points", corpus.metrics, corpus.metric_points),
    ):
        raw = sum(len(r) for r in requests)
        packed = sum(len(gzip.compress(r)) for r in requests)
        print(
            f"{items:>8,} {name:14} in {len(requests)} requests: {raw / items:7.1f} B raw, "
            f"{packed / items:6.1f} B gzip per item"
        )


if __name__ == "__main__":
    main()
