"""docs/metrics.md's queries — a counter's rate, a p99 from histogram buckets, a gauge's last
value — run as written (the lake's path and the window put in) on Spark, against points the
OpenTelemetry SDK exported to `otel-delta serve` across a restart of the exporting process, and
checked against what the SDK was given."""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from tests.helpers import ServeProcess, bridge_config

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
DOC_LAKE = "/path/to/lakehouse"
DOC_START, DOC_END, DOC_SECONDS = "2026-11-21 10:00:00 UTC", "2026-11-21 10:05:00 UTC", "/ 300"
BOUNDS = [5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0]
ROUTES = ("/a", "/b")


@dataclass
class Exported:
    lake: Path
    start_ns: int = 0  # the window: from after the first export until after the last
    end_ns: int = 0
    increase: dict[str, int] = field(default_factory=dict)  # per route, after the baseline
    latencies: list[float] = field(default_factory=list)  # recorded after the baseline
    queues: dict[str, int] = field(default_factory=dict)  # the last values observed


def timestamp(ns: int) -> str:
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    """Two lives of one process (same service.instance.id; the second starts its counters and
    histograms from 0 with a new start time), four and three cumulative exports. The window
    starts after the first export, so that export is not in it and the second is the
    baseline: what was counted before it is not in the answer, what the second life counted
    is, whole."""
    directory = tmp_path_factory.mktemp("metric_queries")
    config = bridge_config(directory)
    out = Exported(directory / "lake", increase=dict.fromkeys(ROUTES, 0))
    rnd = random.Random(11)
    queues: dict[str, int] = {}
    serve = ServeProcess(config)
    try:
        for life, exports in enumerate((4, 3)):
            reader = PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=serve.endpoint, insecure=True),
                export_interval_millis=3_600_000,
            )
            resource = Resource.create({"service.name": "checkout", "service.instance.id": "i-1"})
            duration = View(
                instrument_name="http.server.duration",
                aggregation=ExplicitBucketHistogramAggregation(boundaries=BOUNDS),
            )
            provider = MeterProvider(resource=resource, metric_readers=[reader], views=[duration])
            meter = provider.get_meter("shop")
            requests = meter.create_counter("http.server.requests", unit="{request}")
            latency = meter.create_histogram("http.server.duration", unit="ms")

            def observe(options):
                return [Observation(v, {"queue": k}) for k, v in queues.items()]

            meter.create_observable_gauge("queue.length", [observe])
            for cycle in range(exports):
                # the window's first export is its baseline: it counts what comes after it
                counted = (life, cycle) not in ((0, 0), (0, 1))
                for route in ROUTES:
                    n = rnd.randint(3, 15)
                    requests.add(n, {"route": route})
                    values = [
                        rnd.choice((rnd.uniform(0, 60), rnd.uniform(60, 1500))) for _ in range(n)
                    ]
                    for value in values:
                        latency.record(value, {"route": route})
                    if counted:
                        out.increase[route] += n
                        out.latencies += values
                queues.update(orders=rnd.randint(0, 99), emails=rnd.randint(0, 99))
                reader.force_flush()
                if not out.start_ns:
                    out.start_ns = -(-time.time_ns() // 1000) * 1000  # after it, on a µs
            provider.shutdown()  # one more export, of the same values
        out.queues = dict(queues)
        out.end_ns = time.time_ns() + 1_000_000_000
    finally:
        assert serve.stop() == 0  # commits what it holds
    return out


def doc_query(heading: str, exported: Exported) -> str:
    """The SQL under `heading` in docs/metrics.md, with this lake and window put in."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (sql,) = re.findall(r"```sql\n(.*?)```", section, re.S)
    seconds = (exported.end_ns - exported.start_ns) / 1e9
    for placeholder, value in (
        (DOC_LAKE, str(exported.lake)),
        (DOC_START, timestamp(exported.start_ns)),
        (DOC_END, timestamp(exported.end_ns)),
        (DOC_SECONDS, f"/ {seconds!r}"),
    ):
        assert placeholder in sql or placeholder == DOC_SECONDS
        sql = sql.replace(placeholder, value)
    return sql


def histogram_quantile(q: float, values: list[float]) -> float:
    """Prometheus's histogram_quantile over the buckets of BOUNDS that `values` fill."""
    counts = [0] * (len(BOUNDS) + 1)
    for value in values:
        counts[next((i for i, b in enumerate(BOUNDS) if value <= b), len(BOUNDS))] += 1
    rank, below = q * sum(counts), 0
    for i, n in enumerate(counts):
        if n and below + n >= rank:
            if i == len(BOUNDS):
                return BOUNDS[-1]
            lower = BOUNDS[i - 1] if i else 0.0
            return lower + (BOUNDS[i] - lower) * (rank - below) / n
        below += n
    raise AssertionError("no bucket holds the rank")


def test_rate_of_a_counter_across_a_reset(spark, exported: Exported) -> None:
    rows = spark.sql(doc_query("Rate of a counter", exported)).collect()
    seconds = (exported.end_ns - exported.start_ns) / 1e9
    got = {re.search(r'"route":"([^"]+)"', r.series).group(1): r for r in rows}
    assert {route: r.increase for route, r in got.items()} == exported.increase
    for route, row in got.items():
        assert row.per_second == pytest.approx(exported.increase[route] / seconds)
        assert (row.service_name, row.instance) == ("checkout", "i-1")


@pytest.mark.parametrize("q", [0.99, 0.01, 1.0])  # as written; the first bucket; the +Inf one
def test_quantile_from_histogram_buckets(spark, exported: Exported, q: float) -> None:
    sql = doc_query("p99 from histogram buckets", exported).replace("* 0.99", f"* {q}")
    [row] = spark.sql(sql).collect()
    assert row.p99 == pytest.approx(histogram_quantile(q, exported.latencies))


def test_last_value_of_a_gauge_per_series(spark, exported: Exported) -> None:
    rows = spark.sql(doc_query("Last value of a gauge per series", exported)).collect()
    got = {re.search(r'"queue":"([^"]+)"', r.series).group(1): r.last_value for r in rows}
    assert got == {queue: float(value) for queue, value in exported.queues.items()}
