"""`[deltalake.table] log_retention_hours`: the tables' delta.logRetentionDuration, set on new
tables and on existing ones, and the maintenance checkpoint removing the log entries older than
it (file times moved back, as hours passing would)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.bridge import build_engines
from otel_delta.config import Settings
from otel_delta.lakehouse import FILE_RETENTION, LOG_RETENTION, Lakehouse
from otel_delta.maintenance.tasks import TablePolicy, maintain_table, utc_today
from tests.maintenance.test_compaction import spans

POLICY = TablePolicy(optimize=False, vacuum=False)


def spans_table(path: Path, **table: object):
    config = DeltaConfig.for_path(path, table=table)
    return DeltaLakeConnector(config).get_or_create_table("spans")


def commits(path: Path) -> list[int]:
    log = path / "spans" / "_delta_log"
    return sorted(int(p.name.split(".")[0]) for p in log.glob("*.json"))


def age_log(path: Path, hours: float) -> None:
    then = time.time() - hours * 3600
    for entry in (path / "spans" / "_delta_log").iterdir():
        os.utime(entry, (then, then))


def insert(table, rng: random.Random, count: int, first: int) -> None:
    for i in range(count):
        table.bulk_insert(spans(rng, 5, utc_today(), (first + i) * 5))


def test_expired_log_entries_are_removed_by_the_maintenance_checkpoint(tmp_path: Path) -> None:
    table = spans_table(tmp_path, log_retention_hours=2)
    delta = DeltaTable(table.uri)
    assert delta.metadata().configuration[LOG_RETENTION] == "interval 7200 seconds"
    rng = random.Random(3)
    insert(table, rng, 12, 0)
    assert maintain_table(table, POLICY).checkpointed
    old = DeltaTable(table.uri).version()
    age_log(tmp_path, 3)  # three hours pass
    insert(table, rng, 6, 12)

    report = maintain_table(table, POLICY)

    assert report.errors == [] and report.checkpointed
    left = commits(tmp_path)
    assert left[0] >= old and left[-1] == DeltaTable(table.uri).version()
    assert DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"]).num_rows == 18 * 5


def test_by_default_entries_go_once_a_week_old(tmp_path: Path) -> None:
    table = spans_table(tmp_path)
    assert (
        DeltaTable(table.uri).metadata().configuration[LOG_RETENTION] == "interval 604800 seconds"
    )
    rng = random.Random(3)
    insert(table, rng, 12, 0)
    maintain_table(table, POLICY)
    age_log(tmp_path, 3)
    insert(table, rng, 6, 12)
    maintain_table(table, POLICY)
    assert commits(tmp_path)[0] == 0  # three hours are well inside a week
    age_log(tmp_path, 7 * 24 + 1)
    insert(table, rng, 6, 18)
    assert maintain_table(table, POLICY).checkpointed
    assert commits(tmp_path)[0] > 0
    assert DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"]).num_rows == 24 * 5


def test_an_existing_table_gets_the_configured_retention(tmp_path: Path) -> None:
    Lakehouse(str(tmp_path)).create_table("spans")
    uri = str(tmp_path / "spans")
    assert LOG_RETENTION not in DeltaTable(uri).metadata().configuration
    Lakehouse(str(tmp_path), log_retention_hours=24).create_table("spans")
    assert DeltaTable(uri).metadata().configuration[LOG_RETENTION] == "interval 86400 seconds"
    version = DeltaTable(uri).version()
    Lakehouse(str(tmp_path), log_retention_hours=24).create_table("spans")
    assert DeltaTable(uri).version() == version  # nothing to change: no commit
    # Delta's own 30 days, set again on a table that held another retention (an upgrade from a
    # version whose default was a week, configured back to 30 days), is written, not skipped
    Lakehouse(str(tmp_path), log_retention_hours=720).create_table("spans")
    assert DeltaTable(uri).metadata().configuration[LOG_RETENTION] == "interval 2592000 seconds"


def configured_retention(path: Path, **table: object) -> str:
    settings = Settings(deltalake={"table_path": str(path), "table": table})
    Lakehouse.from_settings(settings).create_table("spans")
    return DeltaTable(str(path / "spans")).metadata().configuration.get(LOG_RETENTION, "Delta's")


def test_the_log_keeps_its_entries_as_long_as_the_tombstones_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    """Unset, log_retention_hours follows the removed files' retention: a version older than
    that has lost its compacted files to vacuum. Delta's default (30 days) is not used."""
    week = "interval 604800 seconds"
    assert configured_retention(tmp_path / "defaults") == week
    # 48 h of removed files, plus two maintenance intervals of an hour
    assert (
        configured_retention(tmp_path / "two-days", retention_hours=48) == "interval 180000 seconds"
    )
    assert (
        configured_retention(tmp_path / "day", log_retention_hours=24) == "interval 86400 seconds"
    )
    # nothing vacuums: old versions keep their files, and the log Delta's 30 days
    assert configured_retention(tmp_path / "kept", vacuum_enabled=False) == "Delta's"
    # as set: Delta's default (30 days) is written as no property at all
    assert configured_retention(tmp_path / "month", log_retention_hours=720) == "Delta's"


def bridge_settings(path: Path, interval: float) -> Settings:
    table = {"log_retention_hours": 2, "checkpoint_interval": 4}
    table["maintenance_interval_seconds"] = interval
    return Settings(deltalake={"table_path": str(path), "table": table})


def append_past_expiry(engines, path: Path) -> None:
    """14 appends through the bridge's writer; the first 9 entries are 3 h old (expired at a
    2 h retention) before the last 5, which pass the checkpoint at version 12."""
    rng = random.Random(5)
    for i in range(14):
        if i == 9:
            age_log(path, 3)
        engines.delta_rs.append("spans", spans(rng, 5, utc_today(), i * 5))


def test_the_bridges_appends_leave_expired_log_entries_to_its_maintainer(tmp_path: Path) -> None:
    """delta-rs's own cleanup after each commit lists the whole log; with a maintainer that
    checkpoints, the bridge's appends skip it and the maintenance checkpoint removes them."""
    engines = build_engines(bridge_settings(tmp_path, 3600))
    assert not engines.lakehouse.expired_logs_on_commit
    append_past_expiry(engines, tmp_path)
    assert commits(tmp_path)[0] == 0  # expired, but left in place by the appends

    table = spans_table(tmp_path, log_retention_hours=2)
    assert maintain_table(table, POLICY).checkpointed
    assert commits(tmp_path)[0] > 0
    assert DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"]).num_rows == 14 * 5


def test_without_a_maintainer_delta_rs_removes_expired_log_entries_itself(tmp_path: Path) -> None:
    engines = build_engines(bridge_settings(tmp_path, 0))  # maintenance off
    assert engines.lakehouse.expired_logs_on_commit
    append_past_expiry(engines, tmp_path)
    assert commits(tmp_path)[0] > 0
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table(columns=["span_id"]).num_rows == 70


def removed_in_checkpoint(path: Path) -> int:
    """Tombstones (remove actions) in the table's latest checkpoint."""
    log = path / "spans" / "_delta_log"
    latest = sorted(log.glob("*.checkpoint.parquet"))[-1]
    removes = pq.read_table(latest, columns=["remove"]).column("remove")
    return len(removes) - removes.null_count


def test_checkpoints_drop_the_tombstones_older_than_the_tables_file_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delta.deletedFileRetentionDuration, as the lakehouse sets it (here 0 h: the floor of a
    day lowered, and no maintenance interval's margin): checkpoints, and so every open of the
    table, stop carrying the expired tombstones; the vacuum before them still deletes the
    removed files."""
    monkeypatch.setattr("otel_delta.lakehouse.MIN_FILE_RETENTION_HOURS", 0.0)
    short, default = tmp_path / "short", tmp_path / "default"
    tables = {
        short: spans_table(short, retention_hours=0, maintenance_interval_seconds=0),
        default: spans_table(default),
    }
    assert DeltaTable(tables[short].uri).metadata().configuration[FILE_RETENTION] == (
        "interval 0 seconds"
    )
    assert FILE_RETENTION not in DeltaTable(tables[default].uri).metadata().configuration
    policy = TablePolicy(retention_hours=0, open_partition_age_seconds=1e-3)
    for path, table in tables.items():
        insert(table, random.Random(3), 6, 0)
        live = {f.name for f in (path / "spans").rglob("part-*.parquet")}
        report = maintain_table(table, policy)
        assert report.errors == [] and report.open_files_compacted == 6 and report.checkpointed
        assert not {f.name for f in (path / "spans").rglob("part-*.parquet")} & live  # vacuumed
    assert removed_in_checkpoint(short) == 0
    assert removed_in_checkpoint(default) == 6


def test_the_tombstone_retention_follows_retention_hours_and_the_maintenance_interval() -> None:
    def retention(**table: float) -> float:
        return Lakehouse.from_settings(Settings(deltalake={"table": table})).file_retention_hours

    assert retention() == 168  # Delta's default: no table property
    assert retention(retention_hours=48) == 50  # two rounds of the default hourly maintenance
    assert retention(retention_hours=48, maintenance_interval_seconds=0) == 48
    assert retention(retention_hours=0, maintenance_interval_seconds=0) == 24  # at least a day
    lake = Lakehouse("/unused", file_retention_hours=26)
    assert lake.configured_properties() == {
        "delta.checkpointInterval": "100",
        FILE_RETENTION: "interval 93600 seconds",
    }
