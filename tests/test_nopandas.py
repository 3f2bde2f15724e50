"""pandas stays out of the serving bridge (otel_delta/nopandas.py), yet works when asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.helpers import LOOPBACK, ServeProcess, read_table, wait_until

AFTER_KEEPING_OUT = """
import sys
import pyarrow as pa
from otel_delta.nopandas import keep_pandas_unloaded
keep_pandas_unloaded()
pa.array([1, None]); pa.array(["x"]); pa.scalar(0, pa.date32()); pa.table({"a": [1]}).to_pylist()
print("pandas" in sys.modules)
print(type(pa.table({"a": [1]}).to_pandas()).__name__)  # an explicit use still works
"""


def test_pyarrow_conversions_no_longer_load_pandas_but_to_pandas_works() -> None:
    out = subprocess.run(
        [sys.executable, "-c", AFTER_KEEPING_OUT], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "DataFrame"]


def mapped_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.e2e
def test_a_serving_bridge_never_loads_pandas(tmp_path: Path) -> None:
    """Exports from the OpenTelemetry SDK, commits, and a maintenance round that clusters
    today's files: no pandas library is ever mapped into the bridge."""
    lake = tmp_path / "lake"
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'{LOOPBACK}[deltalake]\ntable_path = "{lake}"\n[wal]\ndir = "{tmp_path / "wal"}"\n'
        "[buffer]\nflush_interval_seconds = 0.2\n"
        "[deltalake.table]\nmaintenance_interval_seconds = 1\n"
        "open_partition_compaction_age_seconds = 0.1\n"
    )
    server = ServeProcess(config)
    try:
        for batch in range(3):  # three commits, so maintenance has files to cluster
            provider = TracerProvider(resource=Resource.create({"service.name": "lean"}))
            exporter = OTLPSpanExporter(endpoint=server.endpoint, insecure=True)
            provider.add_span_processor(BatchSpanProcessor(exporter))
            for i in range(200):
                with provider.get_tracer("t").start_as_current_span(f"span-{batch}-{i}"):
                    pass
            provider.shutdown()
            wait_until(lambda b=batch: len(list((lake / "spans").rglob("*.parquet"))) > b)
        wait_until(
            lambda: any("clustered into" in line for line in server.lines),
            what="a maintenance round that clusters today's files",
        )
        assert "site-packages/pyarrow" in mapped_libraries(server.proc.pid)  # the check works
        assert "site-packages/pandas" not in mapped_libraries(server.proc.pid)
    finally:
        assert server.stop() == 0
    assert read_table(lake, "spans").num_rows == 600
