"""Old checkpoints thinned to the first of each hour (engines/checkpoint_thinning.py): the
rest deleted, the newest and the oldest kept, and every version the log still holds read the
same by delta-rs and Spark afterwards. Hours pass by moving the checkpoints' write times back."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pa_fs
import pytest
from deltalake import DeltaTable, write_deltalake

from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.engines.checkpoint_thinning import thin_checkpoints
from otel_delta.maintenance.tasks import utc_today
from tests.maintenance.test_compaction import spans

HOUR = 3600


def table_with_checkpoints(path: Path) -> list[int]:
    """13 versions of one row each (0-12), a checkpoint at every odd one; their versions."""
    for i in range(13):
        write_deltalake(str(path), pa.table({"n": [i]}), mode="append")
        if i % 2:
            DeltaTable(str(path)).create_checkpoint()
    return list(range(1, 13, 2))


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


def filesystem(path: Path) -> pa_fs.FileSystem:
    return pa_fs.SubTreeFileSystem(str(path), pa_fs.LocalFileSystem())


def test_the_first_checkpoint_of_each_hour_is_kept_and_every_version_reads_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t"
    assert table_with_checkpoints(path) == checkpoints(path)
    now = time.time()
    age(path, now)

    assert thin_checkpoints(filesystem(path), now) == [3, 7]

    assert checkpoints(path) == [1, 5, 9, 11]
    for version in range(13):
        read = DeltaTable(str(path), version=version).to_pyarrow_table()
        assert sorted(read.column("n").to_pylist()) == list(range(version + 1))
    assert DeltaTable(str(path)).version() == 12
    assert thin_checkpoints(filesystem(path), now) == []  # nothing more to thin


def test_young_checkpoints_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table_with_checkpoints(path)
    assert thin_checkpoints(filesystem(path), time.time()) == []
    assert len(checkpoints(path)) == 6


def test_the_oldest_and_the_newest_stay_whatever_their_hour(tmp_path: Path) -> None:
    """All six in one hour, long ago: the first (where the log's replay starts) and the
    newest (where every open starts) are kept."""
    path = tmp_path / "t"
    table_with_checkpoints(path)
    now = time.time()
    hour = (now // HOUR - 30) * HOUR
    for i, version in enumerate(checkpoints(path)):
        written_at(path, version, hour + i)

    assert thin_checkpoints(filesystem(path), now) == [3, 5, 7, 9]

    assert checkpoints(path) == [1, 11]
    assert DeltaTable(str(path), version=10).to_pyarrow_table().num_rows == 11


def test_the_log_cleanup_of_a_table_thins_them(tmp_path: Path) -> None:
    """`Table.cleanup_log`, which the maintainer's checkpoint step and `otel-delta` call."""
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

    assert checkpoints(path) == [made[0], made[-1]]
    assert DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"]).num_rows == 60


@pytest.mark.timeout(300)
def test_spark_reads_every_version_after_thinning(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    table_with_checkpoints(path)
    now = time.time()
    age(path, now)
    assert thin_checkpoints(filesystem(path), now) == [3, 7]

    for version in (2, 3, 4, 7, 8, 12):
        frame = spark.read.format("delta").option("versionAsOf", version).load(str(path))
        assert sorted(row.n for row in frame.collect()) == list(range(version + 1))
