"""Lakehouse.create_table on tables that exist already: the properties that follow the
settings (`deltalake.table.checkpoint_interval`, the retentions) are brought up to date."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from deltalake import DeltaTable, Transaction
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta import lakehouse
from otel_delta.config import Settings
from otel_delta.convert import spans_to_arrow
from otel_delta.engines import SparkEngine
from otel_delta.lakehouse import BookkeepingAppends, Lakehouse, append_once
from otel_delta.tables.schemas import DEAD_LETTER_TABLE, DEAD_LETTERS
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


def dead_letter(offset: int) -> pa.Table:
    return pa.Table.from_pylist([{"file": "wal:x", "offset": offset}], schema=DEAD_LETTERS)


def test_appends_kept_open_open_the_table_once(tmp_path: Path, monkeypatch) -> None:
    """A table refusing every row sends every request to the dead letters: opening the
    bookkeeping table for each (a read of its whole log) was two thirds of a dead letter."""
    opened: list[str] = []
    real_open = lakehouse._open_bookkeeping_table

    def counted(root: str, name: str, storage: dict[str, str] | None = None) -> DeltaTable:
        opened.append(name)
        return real_open(root, name, storage)

    monkeypatch.setattr(lakehouse, "_open_bookkeeping_table", counted)
    appends = BookkeepingAppends(str(tmp_path), DEAD_LETTER_TABLE)
    for offset in range(1, 21):
        assert appends.append_once(dead_letter(offset), Transaction("dl", offset))
    assert not appends.append_once(dead_letter(20), Transaction("dl", 20))  # once
    assert opened == [DEAD_LETTER_TABLE]
    assert DeltaTable(str(tmp_path / DEAD_LETTER_TABLE)).to_pyarrow_table().num_rows == 20


def test_appends_kept_open_see_another_writer_s_transactions(tmp_path: Path) -> None:
    """The open handle must not be taken for the table: a transaction another process
    committed meanwhile is not written again, and that process's rows stay."""
    root = str(tmp_path)
    appends = BookkeepingAppends(root, DEAD_LETTER_TABLE)
    assert appends.append_once(dead_letter(1), Transaction("ours", 1))
    assert append_once(root, DEAD_LETTER_TABLE, dead_letter(2), Transaction("theirs", 1))
    assert not appends.append_once(dead_letter(2), Transaction("theirs", 1))
    assert appends.append_once(dead_letter(3), Transaction("ours", 2))
    offsets = DeltaTable(str(tmp_path / DEAD_LETTER_TABLE)).to_pyarrow_table().column("offset")
    assert sorted(offsets.to_pylist()) == [1, 2, 3]


def test_appends_kept_open_open_again_after_an_error(tmp_path: Path) -> None:
    """A failed append drops the handle: the table replaced underneath (restored from a
    backup, say) is read again, not written past on stale state."""
    root = str(tmp_path)
    appends = BookkeepingAppends(root, DEAD_LETTER_TABLE)
    assert appends.append_once(dead_letter(1), Transaction("dl", 1))
    table_dir = tmp_path / DEAD_LETTER_TABLE
    shutil.rmtree(table_dir)
    table_dir.mkdir()
    (table_dir / "_delta_log").write_text("not a directory")  # storage gone wrong
    with pytest.raises(Exception):  # noqa: B017 - whatever delta-rs raises
        appends.append_once(dead_letter(2), Transaction("dl", 2))
    (table_dir / "_delta_log").unlink()
    assert appends.append_once(dead_letter(2), Transaction("dl", 2))  # a new, empty table
    offsets = DeltaTable(str(table_dir)).to_pyarrow_table().column("offset").to_pylist()
    assert offsets == [2]
