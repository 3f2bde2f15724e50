"""Lakehouse.create_table on tables that exist already: the properties that follow the
settings (`deltalake.table.checkpoint_interval`, the retentions) are brought up to date."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta.config import Settings
from otel_delta.convert import spans_to_arrow
from otel_delta.engines import SparkEngine
from otel_delta.lakehouse import Lakehouse
from tests.helpers import ServeProcess, bridge_config
from tests.test_cli import one_span_request

INTERVAL_ENV = "OTEL_DELTA_DELTALAKE__TABLE__CHECKPOINT_INTERVAL"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"


def serve_spans(config: Path, first: int, count: int, env: dict[str, str] | None = None) -> None:
    """`otel-delta serve` as a user starts it, `count` exports of one span each (each
    answered once committed: one commit each), then SIGTERM."""
    serve = ServeProcess(config, env=env)
    try:
        with grpc.insecure_channel(serve.endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            for i in range(first, first + count):
                stub.Export(one_span_request(i), timeout=30)
    finally:
        assert serve.stop() == 0, "".join(serve.lines)


def checkpoints(table: Path) -> list[int]:
    return sorted(
        int(p.name.split(".")[0]) for p in (table / "_delta_log").glob("*.checkpoint.parquet")
    )


@pytest.mark.e2e
def test_an_existing_table_takes_a_changed_checkpoint_interval(tmp_path: Path) -> None:
    """A table made at the default interval (100), then the bridge restarted with
    OTEL_DELTA_DELTALAKE__TABLE__CHECKPOINT_INTERVAL=3: its appends are checkpointed every 3
    commits. Before, the interval was written at creation only, and 9 appends left it at 100
    with no checkpoint."""
    config = bridge_config(tmp_path, '[buffer]\nack = "commit"\nflush_interval_seconds = 0.1\n')
    spans = tmp_path / "lake" / "spans"
    serve_spans(config, 1, 1)
    assert DeltaTable(str(spans)).metadata().configuration[CHECKPOINT_INTERVAL] == "100"
    assert checkpoints(spans) == []

    serve_spans(config, 2, 9, env={INTERVAL_ENV: "3"})

    table = DeltaTable(str(spans))
    assert table.metadata().configuration[CHECKPOINT_INTERVAL] == "3"
    assert table.count() == 10 and table.version() == 11  # the interval's commit, 9 appends
    assert {5, 8, 11} <= set(checkpoints(spans)), checkpoints(spans)  # after every 3rd commit


def test_the_interval_is_written_only_when_it_differs_and_the_setting_wins(
    tmp_path: Path,
) -> None:
    """Reopening with the same setting commits nothing; a value set on the table by other means
    (Spark's ALTER TABLE ... SET TBLPROPERTIES, here delta-rs's equivalent) is set back to the
    setting, as the retentions are: the bridge's writer reopens its table at the setting's
    interval, delta-rs and Spark checkpoint at the table's."""
    settings = Settings(
        deltalake={"table_path": str(tmp_path), "table": {"checkpoint_interval": 3}}
    )
    uri = str(tmp_path / "spans")
    Lakehouse(str(tmp_path)).create_table("spans")
    Lakehouse.from_settings(settings).create_table("spans")
    assert DeltaTable(uri).metadata().configuration[CHECKPOINT_INTERVAL] == "3"
    version = DeltaTable(uri).version()
    Lakehouse.from_settings(settings).create_table("spans")
    assert DeltaTable(uri).version() == version  # nothing to change: no commit

    DeltaTable(uri).alter.set_table_properties({CHECKPOINT_INTERVAL: "10"})
    Lakehouse.from_settings(settings).create_table("spans")
    assert DeltaTable(uri).metadata().configuration[CHECKPOINT_INTERVAL] == "3"


@pytest.mark.e2e
def test_spark_appends_to_an_existing_table_follow_a_changed_interval(
    tmp_path: Path, spark
) -> None:
    """The Spark engine opens its tables through the same Lakehouse.create_table, and Spark
    checkpoints at the table's interval: after every 3rd version here, as delta-rs does."""
    Lakehouse(str(tmp_path)).create_table("spans")  # at the default, 100
    engine = SparkEngine(Lakehouse(str(tmp_path), checkpoint_interval=3), lambda: spark)
    rows = spans_to_arrow(one_span_request(1)).tables["spans"]
    for _ in range(6):
        engine.append("spans", rows)
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.metadata().configuration[CHECKPOINT_INTERVAL] == "3"
    assert table.version() == 7  # the create, the interval's commit, 6 appends
    assert {3, 6} <= set(checkpoints(tmp_path / "spans")), checkpoints(tmp_path / "spans")
