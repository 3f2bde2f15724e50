"""optimize / vacuum / restore / history / metadata / statistics on bridge-written tables."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.errors import (
    InvalidPredicateError,
    InvalidQueryError,
    PartitionNotFoundError,
    VersionNotFoundError,
)
from otel_delta.tables import TABLES
from otel_delta.tables.versions import SCHEMA_VERSION
from tests.connector import data
from tests.helpers import data_files

pytestmark = pytest.mark.e2e  # tables written by a real bridge (gRPC server)

KEY = ["service_name", "date", "trace_id", "span_id"]


def rows(table) -> pa.Table:
    return table.query().to_arrow().sort_by([(k, "ascending") for k in KEY])


def test_optimize_compacts_and_keeps_rows_identical(spans) -> None:
    before_rows, before_stats = rows(spans), spans.statistics()
    result = spans.optimize()
    after_stats = spans.statistics()
    partitions = len(data.SERVICES) * len(data.DAYS)
    # + the corpus span that shares checkout/2024-11-19 (single-file partitions stay as they are)
    assert result.files_removed == partitions * data.COMMITS_PER_PARTITION + 1
    assert result.files_added == partitions
    assert after_stats.files == before_stats.files - result.files_removed + result.files_added
    assert after_stats.rows == before_stats.rows
    assert rows(spans).equals(before_rows)
    # the OPTIMIZE, between the commits taking and releasing the maintenance lease
    lease_taken, entry, lease_released = spans.history(3)[::-1]
    assert entry.version == result.version and entry.operation == "OPTIMIZE"
    for lease in (lease_taken, lease_released):
        assert lease.operation == "WRITE" and not lease.num_records
    assert lease_released.version == result.version + 1
    assert spans.optimize().files_added == 0  # nothing left to compact


def test_optimize_with_nothing_to_rewrite_commits_nothing(spans) -> None:
    """Nothing to compact: no maintenance lease taken and released (two empty WRITEs in the
    history), and the result names the version the table was at, not the lease's commit, as
    the maintainer's rounds do."""
    partitions = len(data.SERVICES) * len(data.DAYS)
    version = spans.version()
    # files that do not fit two in a file of the target size
    too_small = spans.optimize(target_size=1)
    assert (too_small.version, too_small.files_removed) == (version, 0)
    assert spans.version() == version

    compacted = spans.optimize()
    assert compacted.files_added == partitions
    version = spans.version()  # the lease's release, after the OPTIMIZE
    for where in (None, "service_name = 'cart' AND date = '2024-11-19'"):
        again = spans.optimize(where=where)
        assert (again.version, again.files_added, again.files_removed) == (version, 0, 0)
        assert again.partitions_optimized == 0 and again.metrics["numFilesAdded"] == 0
    assert spans.version() == version
    assert [h.operation for h in spans.history(3)] == ["WRITE", "OPTIMIZE", "WRITE"]

    # a Z-order rewrites a partition's one file too: under the lease, as before
    ordered = spans.optimize(where="service_name = 'cart'", z_order=["trace_id"])
    assert ordered.files_removed == len(data.DAYS) and ordered.version == version + 2
    assert spans.version() == ordered.version + 1


def test_optimize_where_limits_to_partitions(spans) -> None:
    result = spans.optimize(where="service_name = 'cart' AND date = '2024-11-19'")
    assert (result.files_removed, result.files_added) == (data.COMMITS_PER_PARTITION, 1)
    result = spans.optimize(
        where="service_name IN ('search') AND date BETWEEN '2024-11-01' AND '2024-11-30'"
    )
    assert result.files_removed == len(data.DAYS) * data.COMMITS_PER_PARTITION
    with pytest.raises(PartitionNotFoundError) as err:
        spans.optimize(where="service_name = 'carts'")
    assert "carts" in err.value.partition
    with pytest.raises(InvalidPredicateError, match="partition columns"):
        spans.optimize(where="duration_ns > 5")
    with pytest.raises(InvalidPredicateError):
        spans.optimize(where="service_name = 'cart' OR date = '2024-11-19'")
    with pytest.raises(InvalidQueryError):
        spans.optimize(z_order=["service_name"])
    with pytest.raises(InvalidQueryError):
        spans.optimize(z_order=["nope"])


def big_partition_requests(count: int, spans_each: int, seed: int = 1):
    """`count` requests of random traces in one partition, and all their trace ids."""
    rng = random.Random(seed)
    ids: list[str] = []
    requests = []
    for _ in range(count):
        spans = []
        for i in range(spans_each):
            trace = rng.randbytes(16)
            ids.append(trace.hex())
            spans.append(
                trace_pb2.Span(
                    trace_id=trace,
                    span_id=rng.randbytes(8),
                    name="op",
                    start_time_unix_nano=data.day_nanos(data.DAYS[0]) + i,
                )
            )
        resource = Resource(attributes=[data.attr("service.name", "big")])
        requests.append(
            ExportTraceServiceRequest(
                resource_spans=[
                    trace_pb2.ResourceSpans(
                        resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=spans)]
                    )
                ]
            )
        )
    return requests, ids


def test_z_order_makes_trace_lookups_scan_fewer_files(spans) -> None:
    requests, ids = big_partition_requests(12, 400)
    for request in requests:
        spans.bulk_insert(request)
    wanted = ids[1234]
    big = "service_name = 'big'"
    lookup = f"{big} AND trace_id = '{wanted}'"
    before = spans.query().filter(lookup).explain()
    before_whole_table = spans.trace_query(wanted).explain()
    before_rows = spans.query().filter(big).to_arrow().sort_by("span_id")
    assert before.files_scanned == 12  # random ids: every appended file's range covers it

    result = spans.optimize(where=big, z_order=["trace_id"], target_size=48 * 1024)
    assert result.z_order == ["trace_id"] and result.files_added > 1
    after = spans.query().filter(lookup).explain()
    assert after.files_after_partition_pruning == result.files_added
    assert after.files_scanned <= 2  # z-ordered files hold narrow trace_id ranges
    after_whole_table = spans.trace_query(wanted).explain()
    assert after_whole_table.files_scanned < before_whole_table.files_scanned
    assert spans.trace(wanted)["trace_id"].to_pylist() == [wanted]
    assert spans.query().filter(big).to_arrow().sort_by("span_id").equals(before_rows)


def test_vacuum_dry_run_lists_then_removes_unreferenced_files(spans, lake_path) -> None:
    spans.optimize()  # the appended files are now unreferenced
    kept = spans.vacuum(dry_run=True)  # default retention: 168 hours, nothing old enough
    assert kept.files == [] and kept.retention_hours == 168
    listed = spans.vacuum(retention_hours=0, dry_run=True)
    partitions = len(data.SERVICES) * len(data.DAYS)
    assert len(listed.files) >= partitions * data.COMMITS_PER_PARTITION
    assert all((lake_path / "spans" / f).is_file() for f in listed.files)
    removed = spans.vacuum(retention_hours=0)
    assert sorted(removed.files) == sorted(listed.files)
    assert not any((lake_path / "spans" / f).exists() for f in removed.files)
    assert spans.query().count() == data.TOTAL_SPANS + 4  # the current version is intact
    with pytest.raises(InvalidQueryError):
        spans.vacuum(retention_hours=-1)


def test_vacuum_counts_only_the_files_it_removed(spans, lake_path) -> None:
    """delta-rs lists a removed file until its tombstone expires, also after a vacuum deleted
    it: only files that were on disk are listed and counted (result and history), and a vacuum
    with nothing left to delete commits nothing."""
    table = lake_path / "spans"
    spans.optimize()
    on_disk = data_files(table)
    first = spans.vacuum(retention_hours=0)
    gone = on_disk - data_files(table)
    assert gone and sorted(first.files) == sorted(gone)

    version = spans.version()
    assert spans.vacuum(retention_hours=0, dry_run=True).files == []  # tombstones, no files
    assert spans.vacuum(retention_hours=0).files == []
    assert spans.version() == version  # no VACUUM START/END claiming deleted files

    spans.delete("name = 'cart op1'")  # rewrites cart's compacted file of each day
    on_disk = data_files(table)
    listed = spans.vacuum(retention_hours=0, dry_run=True)
    second = spans.vacuum(retention_hours=0)
    gone = on_disk - data_files(table)
    assert len(gone) == len(data.DAYS)
    assert sorted(listed.files) == sorted(second.files) == sorted(gone)
    end, start = spans.history(2)
    assert (end.operation, end.metrics["numDeletedFiles"]) == ("VACUUM END", len(gone))
    assert (start.operation, start.metrics["numFilesToDelete"]) == ("VACUUM START", len(gone))


def test_vacuum_deletes_uncommitted_files_only_once_they_are_a_week_old(spans, lake_path) -> None:
    """A writer that dies between writing its files and committing them (the bridge, the
    stream, a compaction) leaves files no commit references: vacuum deletes them, but only past
    max(retention, 168 h) whatever the retention, for a younger one may belong to a commit in
    flight (VACUUM RETAIN 0 HOURS beside a serving bridge would delete rows it acknowledged)."""
    import os
    import time

    table = lake_path / "spans"
    partition = next(p for p in table.glob("service_name=*/date=*") if p.is_dir())
    young = partition / "part-in-flight.zstd.parquet"
    old = partition / "part-left-by-a-crash.zstd.parquet"
    for orphan in (young, old):
        orphan.write_bytes(b"PAR1 not committed")
    eight_days_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (eight_days_ago, eight_days_ago))
    relative = str(old.relative_to(table))

    assert spans.vacuum(retention_hours=0, dry_run=True).files == [relative]
    assert spans.vacuum(dry_run=True).files == [relative]  # the default retention: 168 h
    removed = spans.vacuum(retention_hours=0)
    assert removed.files == [relative]
    assert not old.exists() and young.exists()
    assert spans.query().count() == data.TOTAL_SPANS + 4  # every committed file is there


def test_restore_brings_back_old_rows(spans) -> None:
    version = spans.version()
    original = rows(spans)
    spans.delete("service_name = 'checkout'")
    spans.upsert([{**original.slice(0, 1).to_pylist()[0], "name": "changed"}])
    assert rows(spans).num_rows < original.num_rows
    result = spans.restore(version)
    assert result.restored_to == version and result.version == version + 3
    assert rows(spans).equals(original)
    assert spans.history(1)[0].operation == "RESTORE"

    moment = datetime.now(UTC)
    spans.delete("service_name = 'cart'")
    assert spans.restore(timestamp=moment).restored_to == version + 3
    assert rows(spans).equals(original)
    with pytest.raises(VersionNotFoundError):
        spans.restore(spans.version() + 5)
    with pytest.raises(InvalidQueryError):
        spans.restore()
    with pytest.raises(InvalidQueryError):
        spans.restore(1, timestamp=moment)


def test_history_metadata_statistics(spans) -> None:
    history = spans.history()
    assert [h.version for h in history] == list(range(spans.version(), -1, -1))
    assert history[-1].operation == "CREATE TABLE"
    assert history[0].operation == "WRITE" and history[0].num_records == 4  # the corpus
    assert sum(h.num_records or 0 for h in history) == data.TOTAL_SPANS + 4
    # the bridge's appends, under the names both engines' commits share
    assert {"rows_written", "files_added"} <= history[0].normalized_metrics.keys()
    assert all(h.normalized_metrics.get("rows_written") == h.num_records for h in history)
    assert len(spans.history(3)) == 3
    assert isinstance(history[0].timestamp, datetime)

    meta = spans.metadata()
    assert meta.version == spans.version() and meta.name == "spans"
    assert meta.schema == TABLES["spans"].schema
    assert meta.partition_columns == ["service_name", "date"]
    assert meta.schema_version == SCHEMA_VERSION
    assert meta.properties["delta.checkpointInterval"] == "100"
    assert meta.description == TABLES["spans"].description

    stats = spans.statistics()
    partitions = len(data.SERVICES) * len(data.DAYS) + 2  # the corpus adds two
    assert stats.partitions == partitions
    assert stats.rows == data.TOTAL_SPANS + 4
    assert stats.files == len(data.SERVICES) * len(data.DAYS) * data.COMMITS_PER_PARTITION + 3
    assert stats.small_files == stats.files  # all far below 64 MiB
    on_disk = sum(p.stat().st_size for p in Path(spans.uri).rglob("*.parquet"))
    assert stats.size_bytes == on_disk


def test_history_numbers_commits_by_the_log_when_one_lands_while_it_reads(
    spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit lands right after history has opened the table: delta-rs's history numbers
    the commits it read from the latest version it sees afterwards (delta-io/delta-rs#4488),
    so every version shifted by one; the connector's numbers come from the log's entries."""
    from otel_delta.connector.table import Table

    requests, _ids = big_partition_requests(1, 10)
    before = spans.version()
    opened = Table.delta
    landed: list[int] = []

    def and_then_a_commit(self: Table, version: int | None = None):
        handle = opened(self, version)
        if not landed:
            landed.append(1)
            spans.bulk_insert(requests[0])
        return handle

    monkeypatch.setattr(Table, "delta", and_then_a_commit)
    history = spans.history(3)
    monkeypatch.undo()
    assert landed and spans.version() == before + 1
    assert [h.version for h in history] == [before, before - 1, before - 2]
    truth = {h.version: h for h in spans.history()}
    assert truth[before + 1].num_records == 10
    assert [(h.timestamp, h.operation, h.num_records) for h in history] == [
        (truth[v].timestamp, truth[v].operation, truth[v].num_records)
        for v in range(before, before - 3, -1)
    ]


def test_history_counts_the_rows_an_upsert_wrote_as_spark_does(spans) -> None:
    """An upsert that updates one row rewrites its file: `num_records` is every row written
    (updated and copied), Spark's numOutputRows for the same MERGE; it was delta-rs's
    inserted rows alone, 0 here where Spark's history said the file's row count."""
    row = spans.query().filter("service_name = 'cart' AND date = '2024-11-19'").limit(1)
    result = spans.upsert([{**row.to_pylist()[0], "name": "renamed"}])
    assert (result.inserted, result.updated) == (0, 1)
    entry = spans.history(1)[0]
    assert entry.operation == "MERGE"
    assert entry.num_records == entry.metrics["num_output_rows"] > 1


def test_small_file_threshold_comes_from_config(lake_path) -> None:
    config = DeltaConfig.for_path(lake_path, storage={"min_file_size": 1})
    stats = DeltaLakeConnector(config).table("spans").statistics()
    assert stats.small_files == 0 and stats.small_file_threshold == 1


def test_checkpoint_and_log_cleanup(spans, lake_path) -> None:
    log_dir = lake_path / "spans" / "_delta_log"
    version = spans.checkpoint()
    assert version == spans.version()
    assert (log_dir / f"{version:020d}.checkpoint.parquet").is_file()
    assert spans.cleanup_log() == 0  # every entry is younger than the 30-day log retention
    assert spans.query().version(0).count() == 0  # time travel still reaches version 0

    spans.delta().alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    latest = spans.checkpoint()
    removed = spans.cleanup_log()
    assert removed > 0
    assert not (log_dir / f"{0:020d}.json").exists()
    assert spans.query().count() == data.TOTAL_SPANS + 4
    assert spans.version() == latest


def test_a_vacuumed_version_is_a_version_not_found(spans, lake_path) -> None:
    """Time travel to a version whose files vacuum removed: VersionNotFoundError saying so, from
    a query, a stream of batches and a restore, not the file system's error."""
    version = spans.version()
    spans.delete("service_name = 'checkout'")  # its files are no longer referenced
    spans.vacuum(retention_hours=0)
    assert version in [entry.version for entry in spans.history()]  # the log still has it
    for read in (
        lambda: spans.query().version(version).count(),
        lambda: list(spans.query().version(version).to_batches()),
    ):
        with pytest.raises(VersionNotFoundError, match="removed by vacuum"):
            read()
    with pytest.raises(VersionNotFoundError, match="removed by vacuum"):
        spans.restore(version)
    assert spans.query().version(version + 1).count() > 0  # what is still referenced reads


def test_restoring_the_current_version_changes_nothing(spans) -> None:
    version = spans.version()
    for result in (spans.restore(version), spans.restore(timestamp=datetime.now(UTC))):
        assert (result.version, result.restored_to) == (version, version)
        assert (result.files_added, result.files_removed) == (0, 0)
    assert spans.version() == version  # no commit


def test_arguments_out_of_range_are_invalid_queries(spans) -> None:
    for bad in (0, -1, "a", True):
        with pytest.raises(InvalidQueryError, match="limit"):
            spans.history(bad)
    for bad in (0, -1, "big"):
        with pytest.raises(InvalidQueryError, match="target_size"):
            spans.optimize(target_size=bad)
    # beyond what delta-rs holds in milliseconds: a Rust panic (a BaseException) before
    with pytest.raises(InvalidQueryError, match="retention_hours must be at most"):
        spans.vacuum(retention_hours=2**62, dry_run=True)
    assert spans.vacuum(retention_hours=2**63 // 3_600_000 - 1, dry_run=True).files == []
    with pytest.raises(InvalidQueryError, match="not both"):
        spans.query().version(1).as_of(datetime.now(UTC))
    with pytest.raises(InvalidQueryError, match="not both"):
        spans.query().as_of(datetime.now(UTC)).version(1)
