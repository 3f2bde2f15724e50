"""The OpenTelemetry Python SDK with its default batch processors (512 items per export, one
export at a time, a queue of 2,048) sending 2,000 items/s for 10 s straight to `otel-delta
serve` with the default `buffer.ack = "wal"`: every span and log record is stored exactly once.
With acks that waited for the Delta commit, the SDK dropped most of them ("Queue is full")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.helpers import LOOPBACK, ServeProcess, read_table

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

RATE = 2_000  # items per second
SECONDS = 10
TICK = 0.01  # create RATE * TICK items every TICK seconds
RESOURCE = Resource.create({"service.name": "sdk-load"})


def serve(tmp_path: Path) -> ServeProcess:
    """The shipped defaults but for where things go (and no scheduled maintenance)."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK + f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        f'[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    return ServeProcess(config)


def paced(emit) -> int:
    """Call emit(i) RATE times a second for SECONDS seconds; returns how many were emitted."""
    per_tick = int(RATE * TICK)
    start = time.monotonic()
    emitted = 0
    for tick in range(int(SECONDS / TICK)):
        for _ in range(per_tick):
            emit(emitted)
            emitted += 1
        delay = start + (tick + 1) * TICK - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return emitted


def stored_exactly_once(tmp_path: Path, server: ServeProcess, emitted: int, table: str) -> None:
    """After the SDK flushed: stop the bridge; every emitted item is in `table`, once.
    Items are told apart by their text (span name / log body), unique per item."""
    assert server.stop() == 0
    column = {"spans": "name", "logs": "body"}[table]
    values = read_table(tmp_path / "lake", table).column(column).to_pylist()
    assert emitted == RATE * SECONDS
    assert len(values) == len(set(values)) == emitted, f"{len(set(values))} of {emitted} stored"


def test_sdk_default_batch_span_processor_at_2000_spans_per_second(tmp_path: Path) -> None:
    server = serve(tmp_path)
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=server.endpoint, insecure=True))
    )
    tracer = provider.get_tracer("load")

    def emit(i: int) -> None:
        with tracer.start_as_current_span(f"op{i}"):
            pass

    emitted = paced(emit)
    provider.shutdown()  # flushes the SDK's queue
    stored_exactly_once(tmp_path, server, emitted, "spans")


def test_sdk_default_batch_log_processor_at_2000_records_per_second(tmp_path: Path) -> None:
    server = serve(tmp_path)
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=server.endpoint, insecure=True))
    )
    logger = provider.get_logger("load")

    def emit(i: int) -> None:
        logger.emit(LogRecord(timestamp=time.time_ns(), body=f"record {i}"))

    emitted = paced(emit)
    provider.shutdown()
    stored_exactly_once(tmp_path, server, emitted, "logs")
