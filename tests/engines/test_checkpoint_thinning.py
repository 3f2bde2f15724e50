"""Old checkpoints thinned to the first of each hour (engines/checkpoint_thinning.py): the
rest deleted, the two newest, the oldest and those near the log retention's cutoff kept, and
every version the log still holds read the same by delta-rs and Spark afterwards. Hours pass by
moving the checkpoints' write times back; the first commit is removed as the log cleanup
removes expired ones, so that every version is read from a checkpoint."""

from __future__ import annotations

import logging
import os
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pa_fs
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import Transaction

from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.engines import DeltaRsEngine
from otel_delta.engines.checkpoint_thinning import log_retention_seconds, thin_checkpoints
from otel_delta.lakehouse import Lakehouse
from otel_delta.maintenance.tasks import utc_today
from tests.maintenance.test_compaction import spans

HOUR = 3600
WEEK = 7 * 24 * HOUR


def table_with_checkpoints(path: Path) -> list[int]:
    """13 versions of one row each (0-12), a checkpoint at every odd one, the commit of version
    0 gone (as once expired); the checkpoints' versions."""
    for i in range(13):
        write_deltalake(str(path), pa.table({"n": [i]}), mode="append")
        if i % 2:
            DeltaTable(str(path)).create_checkpoint()
    (path / "_delta_log" / f"{0:020d}.json").unlink()
    return list(range(1, 13, 2))


def every_version_reads(path: Path) -> None:
    for version in range(1, 13):
        read = DeltaTable(str(path), version=version).to_pyarrow_table()
        assert sorted(read.column("n").to_pylist()) == list(range(version + 1))


def checkpoints(path: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.checkpoint.parquet"))


def written_at(path: Path, version: int, seconds: float) -> None:
    entry = path / "_delta_log" / f"{version:020d}.checkpoint.parquet"
    os.utime(entry, (seconds, seconds))


def age(path: Path, now: float) -> None:
    """Checkpoints 1 and 3 written in one hour five hours back, 5 and 7 in the next hour, 9
    and 11 within the last hour."""
    hour = (now // HOUR - 5) * HOUR
    for version, at in ((1, hour + 60), (3, hour + 600), (5, hour + HOUR + 60)):
        written_at(path, version, at)
    for version, at in ((7, hour + HOUR + 120), (9, now - 600), (11, now - 60)):
        written_at(path, version, at)


def all_in_one_hour_long_ago(path: Path, now: float) -> None:
    hour = (now // HOUR - 30) * HOUR
    for i, version in enumerate(checkpoints(path)):
        written_at(path, version, hour + i)


def filesystem(path: Path) -> pa_fs.FileSystem:
    return pa_fs.SubTreeFileSystem(str(path), pa_fs.LocalFileSystem())


def test_the_first_checkpoint_of_each_hour_is_kept_and_every_version_reads_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t"
    assert table_with_checkpoints(path) == checkpoints(path)
    every_version_reads(path)
    now = time.time()
    age(path, now)

    assert thin_checkpoints(filesystem(path), now, WEEK) == [3, 7]

    assert checkpoints(path) == [1, 5, 9, 11]
    every_version_reads(path)
    assert DeltaTable(str(path)).version() == 12
    assert thin_checkpoints(filesystem(path), now, WEEK) == []  # nothing more to thin


def test_young_checkpoints_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table_with_checkpoints(path)
    assert thin_checkpoints(filesystem(path), time.time(), WEEK) == []
    assert len(checkpoints(path)) == 6


def test_the_oldest_and_the_two_newest_stay_whatever_their_hour(tmp_path: Path) -> None:
    """All six in one hour, long ago: the first (where the log's replay starts) and the two
    newest (every open starts from the newest; a handle opened before it reads the one before)
    are kept."""
    path = tmp_path / "t"
    table_with_checkpoints(path)
    now = time.time()
    all_in_one_hour_long_ago(path, now)

    assert thin_checkpoints(filesystem(path), now, WEEK) == [3, 5, 7]

    assert checkpoints(path) == [1, 9, 11]
    every_version_reads(path)


def test_checkpoints_near_the_log_retention_cutoff_are_left_to_the_log_cleanup(
    tmp_path: Path,
) -> None:
    """At a 10 h log retention, checkpoints written before 8 h ago stay (another process's
    cleanup may be keeping one of them as its base); 7 goes, second in its hour."""
    path = tmp_path / "t"
    table_with_checkpoints(path)
    now = time.time()
    early, later = (now // HOUR - 9) * HOUR, (now // HOUR - 5) * HOUR
    for version, at in ((1, early + 60), (3, early + 120), (5, later + 60), (7, later + 120)):
        written_at(path, version, at)

    assert thin_checkpoints(filesystem(path), now, 10 * HOUR) == [7]
    assert thin_checkpoints(filesystem(path), now, None) == []  # a retention not understood
    every_version_reads(path)


def test_a_users_handle_built_on_a_thinned_checkpoint_reads_and_updates(tmp_path: Path) -> None:
    """A user's long-lived `DeltaTable` (a service, a notebook) opened at version 4 was built on
    checkpoint 3, which the thinning deletes: it still reads its version, lists the history,
    travels to another version and updates to the newest; once updated it looks up transactions
    and vacuums again (before that, delta-rs 1.x looks for checkpoint 3 there: README, known
    limits)."""
    path = tmp_path / "t"
    table_with_checkpoints(path)
    handle = DeltaTable(str(path), version=4)
    now = time.time()
    age(path, now)

    assert 3 in thin_checkpoints(filesystem(path), now, WEEK)

    assert 3 not in checkpoints(path)
    assert sorted(handle.to_pyarrow_table().column("n").to_pylist()) == list(range(5))
    assert len(handle.history()) == 12  # versions 1-12: the commit of 0 has expired
    handle.update_incremental()
    assert handle.version() == 12
    assert sorted(handle.to_pyarrow_table().column("n").to_pylist()) == list(range(13))
    assert handle.transaction_version("no-such-app") is None
    assert handle.vacuum(dry_run=True) == []
    handle.load_as_version(6)
    assert sorted(handle.to_pyarrow_table().column("n").to_pylist()) == list(range(7))


def test_multi_part_checkpoints_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table_with_checkpoints(path)
    now = time.time()
    all_in_one_hour_long_ago(path, now)
    part = path / "_delta_log" / f"{5:020d}.checkpoint.0000000001.0000000002.parquet"
    part.write_bytes(b"")  # its version is not ours to thin, its classic checkpoint either

    assert thin_checkpoints(filesystem(path), now, WEEK) == [3, 7]
    assert part.exists() and 5 in checkpoints(path)


def test_the_log_retention_is_read_from_the_table() -> None:
    assert log_retention_seconds({}) == 30 * 24 * HOUR
    assert log_retention_seconds({"delta.logRetentionDuration": "interval 604800 seconds"}) == WEEK
    assert log_retention_seconds({"delta.logRetentionDuration": "interval 2 weeks"}) == 2 * WEEK
    assert log_retention_seconds({"delta.logRetentionDuration": "INTERVAL 1 DAY"}) == 86400
    assert log_retention_seconds({"delta.logRetentionDuration": "1 hour"}) == HOUR
    assert log_retention_seconds({"delta.logRetentionDuration": "interval 1 fortnight"}) is None


def test_the_log_cleanup_of_a_table_thins_them(tmp_path: Path) -> None:
    """`Table.cleanup_log`, which the maintainer's checkpoint step calls every round."""
    config = DeltaConfig.for_path(tmp_path)
    table = DeltaLakeConnector(config).get_or_create_table("spans")
    path = Path(table.uri)
    for i in range(12):
        table.bulk_insert(spans(random.Random(i), 5, utc_today(), i * 5))
        if i % 2:
            table.checkpoint()
    made = checkpoints(path)
    assert len(made) == 6
    hour = (time.time() // HOUR - 3) * HOUR
    for i, version in enumerate(made[:-1]):
        written_at(path, version, hour + i)

    table.cleanup_log()

    assert checkpoints(path) == [made[0], made[-2], made[-1]]
    assert DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"]).num_rows == 60


@pytest.mark.timeout(300)
def test_spark_reads_every_version_after_thinning(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    table_with_checkpoints(path)
    now = time.time()
    age(path, now)
    assert thin_checkpoints(filesystem(path), now, WEEK) == [3, 7]

    for version in (1, 2, 3, 4, 7, 8, 12):
        frame = spark.read.format("delta").option("versionAsOf", version).load(str(path))
        assert sorted(row.n for row in frame.collect()) == list(range(version + 1))


def test_a_writer_handle_built_on_a_thinned_checkpoint_appends_at_its_first_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The bridge's cached handle (engines/delta_rs.py) reads transactions from the checkpoint
    it was built on; after following only its own commits it can be built on one the cleanup
    thinned since. Its next append reopens it rather than failing an attempt (a WARNING) on
    "checkpoint not found"."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    uri = str(tmp_path / "spans")
    rng, day = random.Random(1), utc_today()
    ids = iter(range(1, 1000))

    def append() -> int:
        row = next(ids)
        return engine.append("spans", spans(rng, 3, day, row * 3), Transaction("wal", row))

    append()  # version 1 (0 made the table)
    DeltaTable(uri).create_checkpoint()  # the first of its hour: kept
    write_deltalake(uri, spans(rng, 3, day, 900), mode="append")  # another writer: 2
    DeltaTable(uri).create_checkpoint()
    append()  # 3: the handle catches up, built on checkpoint 2
    for _ in range(2):  # two newer checkpoints (the maintainer's) past the handle's own commits
        DeltaTable(uri).create_checkpoint()
        append()
    path = tmp_path / "spans"
    assert checkpoints(path) == [1, 2, 3, 4]
    now = time.time()
    hour = (now // HOUR - 3) * HOUR
    written_at(path, 1, hour + 60)
    written_at(path, 2, hour + 1800)
    assert thin_checkpoints(filesystem(path), now, WEEK) == [2]

    with caplog.at_level(logging.WARNING):
        assert append() == 6
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert DeltaTable(uri).to_pyarrow_table(columns=["span_id"]).num_rows == 18
