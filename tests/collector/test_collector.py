"""The real OpenTelemetry Collector in front of the real bridge: telemetrygen → Collector
(otlp receiver, batch, memory_limiter) → `otel-delta serve`, over OTLP/gRPC and OTLP/HTTP with
gzip, for traces, metrics and logs. Exactly what telemetrygen sent is stored, nothing twice; the
Collector's own `file` exporter, fed the same data, loads with `otel-delta backfill` to the
same rows. Both binaries are built by `make collector` from pinned versions (tools/otelcol)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
import requests

from tests.helpers import (
    LOGS_EXPORT,
    LOOPBACK,
    ServeProcess,
    free_port,
    latin1_logs,
    read_table,
    table_exists,
    wait_until,
)
from tests.tools import otelcol_binary, telemetrygen_binary

pytestmark = pytest.mark.e2e

TRACES, CHILD_SPANS = 150, 3  # → 600 spans
METRICS = 240  # gauge data points
LOGS = 320
EXPECTED = {"spans": TRACES * (1 + CHILD_SPANS), "metrics_gauge": METRICS, "logs": LOGS}
SIGNAL_OF = {"spans": "traces", "metrics_gauge": "metrics", "logs": "logs"}


def collector_config(tmp_path: Path, transport: str, bridge: ServeProcess) -> tuple[Path, dict]:
    ports = {"grpc": free_port(), "http": free_port(), "health": free_port()}
    if transport == "grpc":
        exporter = "otlp_grpc/bridge"
        exporter_config = (
            f"  {exporter}:\n    endpoint: 127.0.0.1:{bridge.port}\n    tls: {{insecure: true}}\n"
        )
    else:
        exporter = "otlp_http/bridge"
        exporter_config = f"  {exporter}:\n    endpoint: http://127.0.0.1:{bridge.http_port}\n"
    exporter_config += (
        "    compression: gzip\n"
        "    retry_on_failure: {enabled: true, initial_interval: 100ms, max_elapsed_time: 60s}\n"
        "    sending_queue: {enabled: true, num_consumers: 4}\n"
    )
    files = "".join(
        f"  file/{signal}:\n    path: {tmp_path / f'{signal}.json'}\n"
        for signal in ("traces", "metrics", "logs")
    )
    pipelines = "".join(
        f"    {signal}:\n      receivers: [otlp]\n      processors: [memory_limiter, batch]\n"
        f"      exporters: [{exporter}, file/{signal}]\n"
        for signal in ("traces", "metrics", "logs")
    )
    config = tmp_path / "otelcol.yaml"
    config.write_text(
        "extensions:\n"
        f"  health_check: {{endpoint: 127.0.0.1:{ports['health']}}}\n"
        "receivers:\n  otlp:\n    protocols:\n"
        f"      grpc: {{endpoint: 127.0.0.1:{ports['grpc']}}}\n"
        f"      http: {{endpoint: 127.0.0.1:{ports['http']}}}\n"
        "processors:\n"
        "  memory_limiter: {check_interval: 1s, limit_mib: 512}\n"
        "  batch: {send_batch_size: 200, timeout: 200ms}\n"
        f"exporters:\n{exporter_config}{files}"
        "service:\n  extensions: [health_check]\n"
        "  telemetry: {metrics: {level: none}, logs: {level: warn}}\n"
        f"  pipelines:\n{pipelines}"
    )
    return config, ports


def config_behind_collector(directory: Path) -> Path:
    """The deltalake.toml of a bridge behind a Collector: its lake and WAL in `directory`,
    flushing every half second, no maintenance."""
    config = directory / "deltalake.toml"
    config.write_text(
        f"{LOOPBACK}[buffer]\nflush_interval_seconds = 0.5\n"
        f'[deltalake]\ntable_path = "{directory / "lake"}"\n'
        "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        f'[wal]\ndir = "{directory / "wal"}"\n'
    )
    return config


def rows(lake: Path, table: str) -> int:
    return read_table(lake, table).num_rows if table_exists(lake, table) else 0


def telemetrygen(signal: str, endpoint: str) -> None:
    counts = {
        "traces": ["--traces", str(TRACES), "--child-spans", str(CHILD_SPANS)],
        "metrics": ["--metrics", str(METRICS)],
        "logs": ["--logs", str(LOGS)],
    }[signal]
    subprocess.run(
        [str(telemetrygen_binary()), signal, "--otlp-endpoint", endpoint, "--otlp-insecure",
         "--rate", "0", "--workers", "1", "--service", f"tg-{signal}", *counts],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


@contextmanager
def running_collector(binary: Path, config: Path, health_port: int) -> Iterator[None]:
    """The Collector `binary` running with `config`, healthy on `health_port`; stopped with
    SIGTERM at the end of the block (its exporters flush) and expected to exit 0."""
    collector = subprocess.Popen(
        [str(binary), "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def healthy() -> bool:
            assert collector.poll() is None, collector.stderr.read() if collector.stderr else ""
            try:
                return requests.get(f"http://127.0.0.1:{health_port}", timeout=2).ok
            except requests.ConnectionError:
                return False

        wait_until(healthy, 60, "the Collector to start")
        yield
        collector.terminate()
        assert collector.wait(timeout=60) == 0
    finally:
        if collector.poll() is None:
            collector.kill()


def feed_through_collector(binary: Path, config: Path, ports: dict, lake: Path) -> None:
    """Start the Collector `binary` with `config` (its OTLP/gRPC receiver and health check on
    `ports`), send telemetrygen's traces, metrics and logs through it, wait until the bridge
    writing `lake` has stored them (EXPECTED), and stop the Collector: its exporters flush."""
    with running_collector(binary, config, ports["health"]):
        for signal in ("traces", "metrics", "logs"):
            telemetrygen(signal, f"127.0.0.1:{ports['grpc']}")
        wait_until(
            lambda: all(rows(lake, table) >= n for table, n in EXPECTED.items()),
            90,
            f"the bridge to store {EXPECTED}",
        )


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_telemetrygen_through_the_collector(tmp_path: Path, transport: str) -> None:
    lake = tmp_path / "lake"
    bridge_config = config_behind_collector(tmp_path)
    bridge = ServeProcess(bridge_config)
    try:
        config, ports = collector_config(tmp_path, transport, bridge)
        feed_through_collector(otelcol_binary(), config, ports, lake)
    finally:
        assert bridge.stop() == 0, "".join(bridge.lines[-20:])

    for table, expected in EXPECTED.items():
        stored = read_table(lake, table)
        assert stored.num_rows == expected, table  # none lost, none twice
        assert set(stored.column("service_name").to_pylist()) == {f"tg-{SIGNAL_OF[table]}"}
    spans = read_table(lake, "spans")
    assert len(set(spans.column("span_id").to_pylist())) == EXPECTED["spans"]

    # the Collector's file exporter saw the same data: backfill loads it to the same rows
    again = tmp_path / "again"
    backfill_config = tmp_path / "backfill.toml"
    backfill_config.write_text(
        f'[deltalake]\ntable_path = "{again}"\n[deltalake.operations]\nengine = "delta-rs"\n'
    )
    files = [str(tmp_path / f"{signal}.json") for signal in ("traces", "metrics", "logs")]
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "backfill", *files,
         "--config", str(backfill_config)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for table in EXPECTED:
        assert sorted_rows(read_table(again, table)) == sorted_rows(read_table(lake, table))


# every `compression` the Collector's exporters take (configcompression) that the bridge
# reads, per transport: otlphttp sends them all; the otlp exporter's zstd and snappy are
# refused by gRPC's C core, which knows no such `grpc-encoding` (README, OTLP/gRPC)
COMPRESSIONS = {
    "grpc": ("none", "gzip"),
    "http": ("none", "gzip", "zstd", "zlib", "deflate", "snappy", "x-snappy-framed", "lz4"),
    "http-json": ("none", "gzip"),  # otlphttp's `encoding: json`: OTLP/JSON bodies
}
COMPRESSED_TRACES = 20  # each with one child span: 40 spans per compression


def test_every_compression_the_collectors_exporters_send(tmp_path: Path) -> None:
    """One Collector, one pipeline per (transport, compression): its own otlp receiver, and
    an exporter to the bridge set to that compression (and, for http-json, OTLP/JSON).
    telemetrygen sends each pipeline its own service's traces; each service's spans are
    stored exactly once (before 2026-11-28,
    OTLP/HTTP's snappy, x-snappy-framed and lz4 were answered 415, and a Collector set to
    them dropped everything it sent)."""
    lake = tmp_path / "lake"
    bridge_config = config_behind_collector(tmp_path)
    pipelines = [(t, c) for t, names in COMPRESSIONS.items() for c in names]
    ports = {pipeline: free_port() for pipeline in pipelines}
    health = free_port()

    def name(transport: str, compression: str) -> str:
        return f"{transport}-{compression}"

    bridge = ServeProcess(bridge_config)
    try:
        receivers = "".join(
            f"  otlp/{name(*p)}:\n    protocols:\n      grpc: {{endpoint: 127.0.0.1:{ports[p]}}}\n"
            for p in pipelines
        )
        exporters = "".join(
            (
                f"  otlp_grpc/{name(t, c)}:\n    endpoint: 127.0.0.1:{bridge.port}\n"
                "    tls: {insecure: true}\n"
                if t == "grpc"
                else f"  otlp_http/{name(t, c)}:\n    endpoint: http://127.0.0.1:{bridge.http_port}\n"
            )
            + f"    compression: {c}\n"
            + ("    encoding: json\n" if t == "http-json" else "")
            + "    retry_on_failure: {enabled: true, initial_interval: 100ms}\n"
            for t, c in pipelines
        )
        service = "".join(
            f"    traces/{name(t, c)}:\n      receivers: [otlp/{name(t, c)}]\n"
            f"      exporters: [{'otlp_grpc' if t == 'grpc' else 'otlp_http'}/{name(t, c)}]\n"
            for t, c in pipelines
        )
        config = tmp_path / "otelcol.yaml"
        config.write_text(
            f"extensions:\n  health_check: {{endpoint: 127.0.0.1:{health}}}\n"
            f"receivers:\n{receivers}exporters:\n{exporters}"
            "service:\n  extensions: [health_check]\n"
            "  telemetry: {metrics: {level: none}, logs: {level: warn}}\n"
            f"  pipelines:\n{service}"
        )
        with running_collector(otelcol_binary(), config, health):
            for pipeline in pipelines:
                subprocess.run(
                    [str(telemetrygen_binary()), "traces",
                     "--otlp-endpoint", f"127.0.0.1:{ports[pipeline]}", "--otlp-insecure",
                     "--rate", "0", "--workers", "1", "--service", f"tg-{name(*pipeline)}",
                     "--traces", str(COMPRESSED_TRACES), "--child-spans", "1"],
                    check=True, capture_output=True, timeout=120,
                )  # fmt: skip
            expected = 2 * COMPRESSED_TRACES * len(pipelines)

            def stored() -> bool:
                return rows(lake, "spans") >= expected

            try:
                wait_until(stored, 90, f"{expected} spans")
            except AssertionError:
                spans = read_table(lake, "spans") if table_exists(lake, "spans") else None
                services = set(spans.column("service_name").to_pylist()) if spans else set()
                raise AssertionError(f"stored only the spans of {sorted(services)}") from None
    finally:
        assert bridge.stop() == 0, "".join(bridge.lines[-20:])

    spans = read_table(lake, "spans")
    by_service: dict[str, list[str]] = {}
    for service_name, span_id in zip(
        spans.column("service_name").to_pylist(), spans.column("span_id").to_pylist(), strict=True
    ):
        by_service.setdefault(service_name, []).append(span_id)
    for pipeline in pipelines:
        ids = by_service.get(f"tg-{name(*pipeline)}", [])
        assert len(ids) == len(set(ids)) == 2 * COMPRESSED_TRACES, pipeline
    assert len(by_service) == len(pipelines)


def test_latin1_logs_through_the_collector_are_stored_repaired(tmp_path: Path) -> None:
    """The Collector does not check that strings are UTF-8 and passes them on over either
    transport. Each record is stored, the Latin-1 bytes replaced by U+FFFD (before 2026-11-29
    the bridge refused the whole request as INVALID_ARGUMENT / 400, and the Collector dropped
    every record of the batch)."""
    lake = tmp_path / "lake"
    bridge = ServeProcess(config_behind_collector(tmp_path))
    transports = ("grpc", "http")
    ports = {transport: free_port() for transport in transports}
    health = free_port()
    try:
        config = tmp_path / "otelcol.yaml"
        config.write_text(
            f"extensions:\n  health_check: {{endpoint: 127.0.0.1:{health}}}\n"
            "receivers:\n"
            + "".join(
                f"  otlp/{t}:\n    protocols:\n      grpc: {{endpoint: 127.0.0.1:{ports[t]}}}\n"
                for t in transports
            )
            + "exporters:\n"
            f"  otlp_grpc/bridge:\n    endpoint: 127.0.0.1:{bridge.port}\n"
            "    tls: {insecure: true}\n"
            f"  otlp_http/bridge:\n    endpoint: http://127.0.0.1:{bridge.http_port}\n"
            "service:\n  extensions: [health_check]\n"
            "  telemetry: {metrics: {level: none}, logs: {level: warn}}\n"
            "  pipelines:\n"
            "    logs/grpc: {receivers: [otlp/grpc], exporters: [otlp_grpc/bridge]}\n"
            "    logs/http: {receivers: [otlp/http], exporters: [otlp_http/bridge]}\n"
        )
        with running_collector(otelcol_binary(), config, health):
            for transport in transports:
                with grpc.insecure_channel(f"127.0.0.1:{ports[transport]}") as channel:
                    export = channel.unary_unary(LOGS_EXPORT)  # the bytes as they are
                    export(latin1_logs(f"latin1-{transport}"), timeout=30)
            wait_until(lambda: rows(lake, "logs") >= 6, 60, "both transports' 3 records")
    finally:
        assert bridge.stop() == 0, "".join(bridge.lines[-20:])

    logs = read_table(lake, "logs")
    for transport in transports:
        mine = [
            (body, dict(attributes))
            for service, body, attributes in zip(
                logs.column("service_name").to_pylist(),
                logs.column("body").to_pylist(),
                logs.column("attributes").to_pylist(),
                strict=True,
            )
            if service == f"latin1-{transport}"
        ]
        assert sorted(mine, key=repr) == sorted(
            [("first", {}), ("caf\ufffd", {"file": "caf\ufffd"}), ("third", {})], key=repr
        ), transport
