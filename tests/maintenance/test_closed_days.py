"""A closed day's partitions sorted by trace id across their files: every row once, disjoint
file ranges, our writer's encodings, delta-rs's Z-order where our reader cannot go."""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.table import TableFeatures

from otel_delta.engines.lease import LEASE_APP_ID, Leases, now_ms
from otel_delta.errors import LeaseHeldError
from otel_delta.maintenance import closed_days, compaction
from otel_delta.maintenance.tasks import TablePolicy, maintain_table, utc_today
from otel_delta.tables import TABLES
from tests.maintenance.test_compaction import by_span, fill, spans_table, traces

LAYOUT_SPANS = TABLES["spans"].layout


def trace_ranges(uri: str) -> list[tuple[str, str]]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    return sorted(
        zip(
            actions.column("min.trace_id").to_pylist(),
            actions.column("max.trace_id").to_pylist(),
            strict=True,
        )
    )


def closed_files(uri: str, day: dt.date) -> list[tuple[str, str, str]]:
    """(min trace id, max trace id, local path) of the day's live files, by range."""
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    return sorted(
        (low, high, f"{uri}/{path}")
        for low, high, path, date in zip(
            actions.column("min.trace_id").to_pylist(),
            actions.column("max.trace_id").to_pylist(),
            actions.column("path").to_pylist(),
            actions.column("partition.date").to_pylist(),
            strict=True,
        )
        if date == day
    )


def encodings_of(path: str, column: str) -> tuple[str, ...]:
    group = pq.ParquetFile(path).metadata.row_group(0)
    (found,) = (
        group.column(i).encodings
        for i in range(group.num_columns)
        if group.column(i).path_in_schema == column
    )
    return found


def test_closed_partitions_are_sorted_by_trace_id_across_files_once(tmp_path: Path) -> None:
    table = spans_table(tmp_path)
    yesterday = utc_today() - dt.timedelta(days=1)
    written = fill(table, commits=8, per_commit=400, day=yesterday)
    fill(table, commits=2)  # today's: left to the open-partition compaction
    assert len(trace_ranges(table.uri)) == 10
    # target size small enough that the partition becomes several files
    policy = TablePolicy(vacuum=False, checkpoint=False, target_file_size=64 * 1024)

    report = maintain_table(table, policy)

    assert report.errors == [] and report.partitions_clustered == 1
    closed = closed_files(table.uri, yesterday)
    assert len(closed) >= 3
    assert all(closed[i][0] > closed[i - 1][1] for i in range(1, len(closed)))  # disjoint
    rows = DeltaTable(table.uri).to_pyarrow_table()
    assert by_span(rows.filter(pc.equal(rows["date"], yesterday))) == by_span(written)
    # written by our writer, as today's compaction writes: times delta-encoded in row groups
    # in time order, each file about the target size or less
    for _low, _high, path in closed:
        assert Path(path).name.startswith(compaction.CLUSTERED_PREFIX)
        assert pq.ParquetFile(path).metadata.created_by.startswith("parquet-cpp-arrow")
        assert "DELTA_BINARY_PACKED" in encodings_of(path, "start_time_unix_nano")
        assert Path(path).stat().st_size < 2 * 64 * 1024

    version = DeltaTable(table.uri).version()
    again = maintain_table(table, policy)
    assert again.partitions_clustered == 0 and DeltaTable(table.uri).version() == version


def test_a_partition_of_many_buckets_is_sorted_through_spill_files(tmp_path: Path) -> None:
    """Buckets far smaller than the partition (so rows go through many spill files), traces
    of several spans, and rows whose trace id is null: every row once, the file's row groups
    in trace id order, each trace's rows in a row group together."""
    table = spans_table(tmp_path)
    yesterday = utc_today() - dt.timedelta(days=1)
    rng = random.Random(5)
    batches = [traces(rng, 60, yesterday, 1_000 * c) for c in range(8)]
    orphans = batches[0].slice(0, 5)
    orphans = orphans.set_column(
        orphans.schema.get_field_index("trace_id"), "trace_id", pa.nulls(5, pa.string())
    )
    span_id = orphans.schema.get_field_index("span_id")
    ids = pa.array([f"orphan-{i}" for i in range(5)])
    for batch in batches:
        table.bulk_insert(batch)
    # rows without a trace id, as another writer may leave them (the connector refuses them)
    orphans = orphans.set_column(span_id, "span_id", ids)
    table.connector.engines.delta_rs.append("spans", orphans)
    batches.append(orphans)
    delta = table.delta()
    files = compaction.candidates(delta)
    options = compaction.RewriteOptions(group_input_bytes=4 * 1024, row_group_rows=64)
    buckets = closed_days._buckets(files, options, 1 << 30)
    assert buckets >= 8

    result = closed_days.sort_partition(delta, files, LAYOUT_SPANS, options, target_size=1 << 30)

    total = sum(batch.num_rows for batch in batches)
    assert (result.files_removed, result.files_added, result.rows) == (len(files), 1, total)
    stored = DeltaTable(table.uri).to_pyarrow_table()
    assert by_span(stored) == by_span(pa.concat_tables(batches))
    ((_low, _high, path),) = closed_files(table.uri, yesterday)
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.num_row_groups > buckets // 2
    previous = ""
    for g in range(parquet.metadata.num_row_groups):
        ids = parquet.read_row_group(g, columns=["trace_id"])["trace_id"].to_pylist()
        present = [i for i in ids if i is not None]
        if present:
            assert min(present) >= previous, g
            previous = max(present)
        runs = [i for n, i in enumerate(ids) if n == 0 or i != ids[n - 1]]
        assert len(runs) == len(set(runs)), g  # a trace's rows in a row group: one run
    assert ids.count(None) == 5  # null trace ids sort last, as pyarrow sorts them


def test_a_table_with_deletion_vectors_is_left_to_delta_rs_z_order(tmp_path: Path) -> None:
    """Our reader would bring back rows a deletion vector hides: delta-rs sorts such a table's
    closed days, by trace id alone, with the times PLAIN (layout.py)."""
    table = spans_table(tmp_path)
    yesterday = utc_today() - dt.timedelta(days=1)
    written = fill(table, commits=4, per_commit=200, day=yesterday)
    table.delta().alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )

    result = closed_days.cluster_partitions(
        table.delta(),
        LAYOUT_SPANS,
        compaction.RewriteOptions(),
        include=lambda values: True,
        target_size=1 << 30,
    )

    assert result.partitions == 1 and result.files_removed == 4
    ((_low, _high, path),) = closed_files(table.uri, yesterday)
    assert pq.ParquetFile(path).metadata.created_by.startswith("parquet-rs")
    times = encodings_of(path, "start_time_unix_nano")
    assert "DELTA_BINARY_PACKED" not in times and "PLAIN" in times, times
    assert by_span(pq.read_table(path)) == by_span(written)  # no row deleted: the file is all


# a process (not this one) sorting a closed day through delta-rs's Z-order, with a lease of
# argv[2] seconds, as a bridge's maintainer does (tasks.py)
Z_ORDER_PROCESS = """
import sys
from deltalake import DeltaTable
from otel_delta.maintenance import closed_days, compaction
from otel_delta.tables import TABLES
result = closed_days.cluster_partitions(
    DeltaTable(sys.argv[1]),
    TABLES["spans"].layout,
    compaction.RewriteOptions(lease_seconds=float(sys.argv[2])),
    include=lambda values: True,
    target_size=1 << 30,
)
print(result.partitions, result.files_removed)
"""


def test_the_z_order_fallback_keeps_its_lease_however_long_it_runs(tmp_path: Path) -> None:
    """delta-rs's Z-order cannot carry the lease in its commit: one that runs past its lease
    (here paused for several leases before it plans) keeps it by renewals, so another process
    cannot take it and rewrite the same files meanwhile (their rows would be stored twice)."""
    table = spans_table(tmp_path)
    yesterday = utc_today() - dt.timedelta(days=1)
    written = fill(table, commits=4, per_commit=200, day=yesterday)
    table.delta().alter.add_feature(  # left to delta-rs's Z-order
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    lease = 2.0  # s: renewed once less than 1 s is left, looked at every 0.5 s
    env = {**os.environ, "OTEL_DELTA_PAUSE_AT": "z-order-leased:8"}  # four leases
    argv = [sys.executable, "-c", Z_ORDER_PROCESS, table.uri, str(lease)]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        while (first := DeltaTable(table.uri).transaction_version(LEASE_APP_ID)) is None:
            assert run.poll() is None, run.communicate()
            time.sleep(0.05)
        while now_ms() <= first:  # the lease it took has run out: only renewals hold it now
            time.sleep(0.05)
        theirs, checks = Leases(), 0
        while run.poll() is None:
            with pytest.raises(LeaseHeldError):
                theirs.hold(DeltaTable(table.uri), 60.0)
            checks += 1
            time.sleep(0.2)
        out, err = run.communicate()
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()

    assert run.returncode == 0, err
    assert out.split() == ["1", "4"] and checks > 0 and theirs.held() == []
    ((_low, _high, path),) = closed_files(table.uri, yesterday)  # the one file sorted
    assert by_span(pq.read_table(path)) == by_span(written)  # every row once


def test_a_concurrent_delete_of_an_input_fails_the_sort_and_resurrects_nothing(
    tmp_path: Path,
) -> None:
    """The sort read its inputs before another writer deleted a row from one: its commit
    fails instead of bringing the row back, and the files it wrote are deleted."""
    table = spans_table(tmp_path)
    yesterday = utc_today() - dt.timedelta(days=1)
    fill(table, commits=5, per_commit=100, day=yesterday)
    delta = table.delta()
    files = compaction.candidates(delta)

    deleted = table.delete(f"span_id = '{0:016x}'")  # another writer, after the listing
    assert deleted.deleted == 1

    options = compaction.RewriteOptions(group_input_bytes=8 * 1024)  # several buckets
    with pytest.raises(Exception, match="concurrent"):
        closed_days.sort_partition(delta, files, LAYOUT_SPANS, options, target_size=16 * 1024)
    stored = DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"])
    assert stored.num_rows == 5 * 100 - 1 and f"{0:016x}" not in stored["span_id"].to_pylist()
    assert list((tmp_path / "spans").rglob(f"{compaction.CLUSTERED_PREFIX}*")) == []


def test_bucket_boundaries_cut_the_partition_evenly_reading_each_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample that places the spill buckets' boundaries spans every file, however their
    sizes differ, and opens each file once (on an object store, a footer read each)."""
    rng = random.Random(5)
    paths, keys = [], []
    for i, rows in enumerate((5_000, 40_000, 15_000)):
        ids = [None if rng.random() < 0.01 else f"{rng.getrandbits(128):032x}" for _ in range(rows)]
        times = [rng.randrange(10**18) for _ in range(rows)]
        path = str(tmp_path / f"{i}.parquet")
        pq.write_table(pa.table({"trace_id": ids, "start_time_unix_nano": times}), path)
        paths.append(path)
        keys += [(t, s) for t, s in zip(ids, times, strict=True) if t is not None]
    opened: list[str] = []
    real_parquet = closed_days._parquet

    def counting(filesystem: pa_fs.FileSystem, path: str) -> Any:  # the context manager
        opened.append(path)
        return real_parquet(filesystem, path)

    monkeypatch.setattr(closed_days, "_parquet", counting)
    cuts = closed_days._boundaries(
        pa_fs.LocalFileSystem(), paths, "trace_id", "start_time_unix_nano", 4
    )
    assert opened == paths
    assert len(cuts) == 3
    keys.sort()
    edges = [0, *(bisect.bisect_left(keys, cut) for cut in cuts), len(keys)]
    quarter = len(keys) / 4
    assert all(
        abs((end - start) - quarter) < 0.15 * quarter for start, end in itertools.pairwise(edges)
    )
