"""Every connector operation on an S3 lakehouse (versitygw), on delta-rs and on Spark (issue #13).

Each test gets a lake of its own on a fresh bucket, filled as the bridge fills it: the receiver's
converter turns OTLP trace requests (3 services x 2 days x 3 requests of 12 spans) into rows and
the bridge's writer (the delta-rs engine) appends them, one commit and one file per request.
Then the engine under test operates on it through `DeltaLakeConnector(engine=...)`; Spark is the
shared test session, pointed at the server as tests/s3/test_spark_s3.py does. Results are read
back from S3 with delta-rs (`DeltaTable(uri, storage_options=...)`).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute
import pytest
from deltalake import DeltaTable, write_deltalake
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.connector.pruning import file_stats
from otel_delta.connector.scan import BloomFilters, files_dataset
from otel_delta.connector.table import Table
from otel_delta.engines.checkpoint_thinning import thin_checkpoints
from otel_delta.engines.data_files import table_filesystem
from otel_delta.errors import StoreUnavailableError, TableNotFoundError, VersionNotFoundError
from otel_delta.privacy import keyed_hash
from otel_delta.signals import SIGNALS_BY_NAME
from tests.connector import data
from tests.connector.test_erasure import holds
from tests.s3 import S3Server, versitygw
from tests.s3.test_spark_s3 import use_s3

# Spark on a shared 2-core machine, on S3: allow more than the default 300 s per test
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

LAKE = "lake"
ENGINES = ["delta-rs", "spark"]
FILES = len(data.SERVICES) * len(data.DAYS) * data.COMMITS_PER_PARTITION  # one per request
PARTITION_SPANS = data.COMMITS_PER_PARTITION * data.TRACES_PER_REQUEST * data.SPANS_PER_TRACE
REQUEST_SPANS = data.TRACES_PER_REQUEST * data.SPANS_PER_TRACE
FIRST_DAY, SECOND_DAY = data.DAYS


def converted(request: ExportTraceServiceRequest) -> pa.Table:
    """The spans rows the receiver makes of a request."""
    return SIGNALS_BY_NAME["traces"].convert(request).tables["spans"]


def s3_lake(s3: S3Server, engine: str, spark=None) -> DeltaLakeConnector:
    """A connector on s3://bucket/lake (storage options as a deltalake.toml gives them), filled
    by the bridge's writer with data.all_requests(): versions 1 … FILES, one file each."""
    config = DeltaConfig.for_path(s3.url(LAKE), storage={"options": s3.storage_options()})
    lake = DeltaLakeConnector(config, engine=engine, spark=spark)
    for request in data.all_requests():
        lake.engines.delta_rs.append("spans", converted(request))
    return lake


def at_start_of_a_second() -> None:
    """Wait for the next whole second of the clock: commits made moments after this one share
    its second in S3's Last-Modified (which S3 gives in whole seconds)."""
    time.sleep(1.02 - time.time() % 1)


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    return request.param


@pytest.fixture
def lake(request, s3: S3Server, engine: str) -> DeltaLakeConnector:
    session = None
    if engine == "spark":
        session = request.getfixturevalue("spark")  # started only for the Spark cases
        use_s3(session, s3)
    return s3_lake(s3, engine, session)


@pytest.fixture
def spans(lake: DeltaLakeConnector) -> Table:
    return lake.table("spans")


def stored(s3: S3Server, version: int | None = None) -> pa.Table:
    """The spans table as delta-rs reads it back from S3 (latest or the given version)."""
    table = DeltaTable(s3.url(LAKE, "spans"), storage_options=s3.storage_options(), version=version)
    return table.to_pyarrow_table()


def span_ids(table: pa.Table) -> list[str]:
    return sorted(table.column("span_id").to_pylist())


def data_objects(s3: S3Server) -> set[str]:
    """Parquet objects of the spans table on the server, relative to the table root."""
    prefix = f"{LAKE}/spans/"
    return {
        key.removeprefix(prefix)
        for key in s3.objects(LAKE, "spans")
        if key.endswith(".parquet") and "/_delta_log/" not in f"/{key}"
    }


def test_the_lake_is_on_s3(s3: S3Server) -> None:
    lake = s3_lake(s3, "delta-rs")
    assert lake.list_tables() == ["spans"]
    assert lake.uri("spans") == s3.url(LAKE, "spans")
    assert DeltaTable(lake.uri("spans"), storage_options=s3.storage_options()).version() == FILES
    assert len(data_objects(s3)) == FILES
    assert stored(s3).num_rows == data.TOTAL_SPANS


def test_a_store_that_is_down_is_named_with_its_cause(tmp_path: Path) -> None:
    """The store refusing connections: opening a table is StoreUnavailableError (ours,
    UNAVAILABLE for the ConnectorService) with the cause, not delta-rs's OSError "Generic S3
    error"; a table command from another process says so in one line, exit code 1."""
    with versitygw(tmp_path / "s3") as s3:  # its own server: the session's is not stopped
        s3_lake(s3, "delta-rs")
        config = tmp_path / "deltalake.toml"
        config.write_text(f'[deltalake]\ntable_path = "{s3.url(LAKE)}"\n{s3.toml()}')
        with s3.down():
            lake = DeltaLakeConnector(DeltaConfig.from_toml(config))
            with pytest.raises(StoreUnavailableError, match="Connection refused"):
                lake.table("spans")
            command = ["delete", "spans", "--where", "name = 'x'", "--yes", "--config"]
            child = subprocess.run(
                [sys.executable, "-m", "otel_delta.cli", *command, str(config)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=300,
            )
        assert stored(s3).num_rows == data.TOTAL_SPANS  # nothing deleted
    assert child.returncode == 1, child.stderr
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1, child.stderr
    assert lines[0].startswith(f"otel-delta: table 'spans' at {s3.url(LAKE, 'spans')}: the store")
    assert "Connection refused" in lines[0] and "\x1b[" not in lines[0]


def test_a_store_that_goes_down_after_the_table_is_open_is_named_too(tmp_path: Path) -> None:
    """A table opened, then the store down: each operation says so with our error (the
    ConnectorService's UNAVAILABLE, the CLI's exit code 1), as opening it does, where delta-rs
    raised OSError "Kernel error -> Generic S3 error"; nothing is changed."""
    with versitygw(tmp_path / "s3") as s3:
        spans = s3_lake(s3, "delta-rs").table("spans")
        operations = {
            "version": spans.version,
            "history": lambda: spans.history(2),
            "query": lambda: spans.query().filter("service_name = 'cart'").to_arrow(),
            "delete": lambda: spans.delete("name = 'x'"),
            "trace": lambda: spans.trace("0" * 32),
        }
        with s3.down():
            for name, operation in operations.items():
                with pytest.raises(StoreUnavailableError, match="Generic S3 error"):
                    operation()
                    pytest.fail(f"{name} succeeded with the store down")
        assert stored(s3).num_rows == data.TOTAL_SPANS


def test_upsert_and_bulk_insert(spans: Table, s3: S3Server, engine: str) -> None:
    start = spans.version()
    where = f"service_name = 'cart' AND date = '{SECOND_DAY}'"
    existing = spans.query().filter(where).to_arrow()
    assert existing.num_rows == PARTITION_SPANS
    renamed = existing.set_column(
        existing.schema.get_field_index("name"),
        "name",
        pa.array(["renamed on s3"] * existing.num_rows),
    )
    new_request = data.spans_request("cart", SECOND_DAY, 7)  # 12 new spans, same partition
    new = converted(new_request).to_pylist()
    records = [*renamed.to_pylist(), *new, new[0]]  # and one duplicate inside the batch

    result = spans.upsert(records)
    assert (result.inserted, result.updated, result.deduplicated) == (
        REQUEST_SPANS,
        PARTITION_SPANS,
        1,
    )
    assert result.engine == engine and result.version == start + 1
    assert spans.history(1)[0].operation == "MERGE"
    table = stored(s3)
    assert table.num_rows == data.TOTAL_SPANS + REQUEST_SPANS
    names = dict(
        zip(table.column("span_id").to_pylist(), table.column("name").to_pylist(), strict=True)
    )
    assert {names[i] for i in existing.column("span_id").to_pylist()} == {"renamed on s3"}
    assert {names[row["span_id"]] for row in new} == {row["name"] for row in new}

    # the same OTLP request again: every span matches, nothing is inserted
    again = spans.upsert(new_request)
    assert (again.inserted, again.updated, again.deduplicated) == (0, REQUEST_SPANS, 0)
    assert again.version == start + 2

    inserted = spans.bulk_insert(converted(data.spans_request("search", FIRST_DAY, 9)))
    assert (inserted.inserted, inserted.version, inserted.engine) == (
        REQUEST_SPANS,
        start + 3,
        engine,
    )
    assert stored(s3).num_rows == data.TOTAL_SPANS + 2 * REQUEST_SPANS


def test_delete_query_and_time_travel(lake: DeltaLakeConnector, s3: S3Server, engine: str):
    spans = lake.table("spans")
    # the bridge writes one more commit, and the delete follows it moments later
    at_start_of_a_second()
    lake.engines.delta_rs.append("spans", converted(data.spans_request("checkout", SECOND_DAY, 8)))
    total = data.TOTAL_SPANS + REQUEST_SPANS
    before = spans.version()
    committed_before = spans.history(1)[0].timestamp
    where = f"service_name = 'search' AND date = '{FIRST_DAY}'"
    deleted = spans.delete(where)
    assert (deleted.deleted, deleted.version, deleted.engine) == (
        PARTITION_SPANS,
        before + 1,
        engine,
    )
    assert spans.history(1)[0].operation == "DELETE"
    remaining = total - PARTITION_SPANS
    assert stored(s3).num_rows == remaining
    assert stored(s3, before).num_rows == total

    # filter + select + limit, pruned by partition values on the S3 table's log
    query = (
        spans.query()
        .filter("service_name = 'search' AND duration_ns >= 2000000")
        .select(["trace_id", "span_id", "date", "duration_ns"])
        .limit(5)
    )
    result = query.execute()
    assert result.table.column_names == ["trace_id", "span_id", "date", "duration_ns"]
    assert result.num_rows == 5
    assert set(result.table.column("date").to_pylist()) == {SECOND_DAY}
    assert min(result.table.column("duration_ns").to_pylist()) >= 2_000_000
    assert result.scan.files_total == FILES + 1 - data.COMMITS_PER_PARTITION
    assert result.scan.files_after_partition_pruning == data.COMMITS_PER_PARTITION
    # spans 1 and 2 of each trace last >= 2 ms: two thirds of the partition that is left
    assert spans.query().filter("service_name = 'search' AND duration_ns >= 2000000").count() == (
        PARTITION_SPANS * 2 // 3
    )
    assert spans.query().filter(where).count() == 0
    assert spans.query().count() == remaining

    # a trace lookup reads one trace, in start order
    trace_id = data.trace_id("cart", FIRST_DAY, 0, 0).hex()
    trace = lake.trace(trace_id)
    assert trace.num_rows == data.SPANS_PER_TRACE
    assert set(trace.column("trace_id").to_pylist()) == {trace_id}
    starts = trace.column("start_time_unix_nano").to_pylist()
    assert starts == sorted(starts)

    # time travel: by version, and by time (the last commit before the delete, and now)
    assert spans.query().version(before).filter(where).count() == PARTITION_SPANS
    assert spans.query().version(before).count() == total
    as_of_before = spans.query().as_of(committed_before)
    assert as_of_before.execute().scan.version == before
    assert as_of_before.filter(where).count() == PARTITION_SPANS
    now = dt.datetime.now(dt.UTC)
    assert spans.query().as_of(now).execute().scan.version == before + 1
    assert spans.query().as_of(now).count() == remaining


def test_history_metadata_and_statistics(spans: Table, s3: S3Server, engine: str) -> None:
    written = spans.bulk_insert(converted(data.spans_request("checkout", FIRST_DAY, 5)))
    history = spans.history()
    assert [h.version for h in history] == list(range(written.version, -1, -1))
    assert history[-1].operation == "CREATE TABLE"
    assert {h.operation for h in history[1:-1]} == {"WRITE"}
    assert history[0].operation == "WRITE" and history[0].num_records == REQUEST_SPANS
    if engine == "spark":  # the last commit is Spark's, the others the bridge writer's
        assert "Apache-Spark" in str(history[0].user)
    assert [h.version for h in spans.history(3)] == [written.version - i for i in range(3)]

    metadata = spans.metadata()
    assert metadata.uri == s3.url(LAKE, "spans") and metadata.version == written.version
    assert metadata.partition_columns == ["service_name", "date"]
    assert metadata.schema_version is not None and metadata.created_time is not None
    assert metadata.properties["delta.checkpointInterval"] == "100"
    assert "span_id" in metadata.schema.names

    stats = spans.statistics()
    assert stats.version == written.version
    assert stats.rows == data.TOTAL_SPANS + REQUEST_SPANS
    # the bridge's files, plus one of delta-rs's append (Spark's may be split in several)
    assert stats.files == len(data_objects(s3)) > FILES
    assert stats.partitions == len(data.SERVICES) * len(data.DAYS)
    assert stats.small_files == stats.files  # all far below 64 MiB
    assert stats.size_bytes > 0


def test_optimize_z_order_and_vacuum(spans: Table, s3: S3Server, engine: str) -> None:
    original = span_ids(stored(s3))
    compacted = spans.optimize(where="service_name = 'cart'")
    cart_files = len(data.DAYS) * data.COMMITS_PER_PARTITION
    assert (compacted.files_removed, compacted.files_added) == (cart_files, len(data.DAYS))
    # each optimize takes the table's maintenance lease first and releases it after: a commit
    # of no rows on either side (engines/lease.py)
    assert compacted.engine == engine and compacted.version == FILES + 2
    taken, optimized, released = spans.history(3)[::-1]
    assert optimized.operation == "OPTIMIZE" and optimized.version == compacted.version
    assert not taken.num_records and not released.num_records
    assert spans.statistics().files == FILES - cart_files + len(data.DAYS)

    ordered = spans.optimize(z_order=["trace_id"])
    assert ordered.z_order == ["trace_id"] and ordered.engine == engine
    assert ordered.files_removed > 0 and ordered.version == compacted.version + 3
    partitions = len(data.SERVICES) * len(data.DAYS)
    assert spans.statistics().files == partitions  # every partition in one file
    assert span_ids(stored(s3)) == original

    live = set(pa.table(spans.delta().get_add_actions(flatten=True)).column("path").to_pylist())
    listed = spans.vacuum(retention_hours=0, dry_run=True)
    assert listed.dry_run and listed.engine == engine
    assert len(listed.files) == compacted.files_removed + ordered.files_removed
    on_server = data_objects(s3)
    assert set(listed.files) <= on_server  # relative to the table root, still there
    assert len(on_server) == len(listed.files) + partitions
    assert not set(listed.files) & live  # none of them is in the table any more

    removed = spans.vacuum(retention_hours=0)
    assert not removed.dry_run and sorted(removed.files) == sorted(listed.files)
    assert data_objects(s3) == on_server - set(listed.files)  # the objects are gone
    assert len(data_objects(s3)) == partitions
    assert span_ids(stored(s3)) == original


def test_restore(spans: Table, s3: S3Server, engine: str) -> None:
    start = spans.version()
    original = span_ids(stored(s3))
    cart = len(data.DAYS) * PARTITION_SPANS
    at_start_of_a_second()  # the delete and the restore after it: moments apart
    assert spans.delete("service_name = 'cart'").deleted == cart
    deleted_at = spans.history(1)[0].timestamp
    assert stored(s3).num_rows == data.TOTAL_SPANS - cart

    restored = spans.restore(start, engine=engine)
    assert (restored.restored_to, restored.version) == (start, start + 2)
    cart_files = len(data.DAYS) * data.COMMITS_PER_PARTITION
    assert (restored.files_added, restored.files_removed) == (cart_files, 0)
    assert spans.history(1)[0].operation == "RESTORE"
    assert span_ids(stored(s3)) == original

    # by time: the moment of the delete commit is the deleted state again
    again = spans.restore(timestamp=deleted_at)
    assert (again.restored_to, again.version) == (start + 1, start + 3)
    assert stored(s3).num_rows == data.TOTAL_SPANS - cart


def test_checkpoint_and_log_cleanup(s3: S3Server) -> None:
    """Not an engine's: both run on delta-rs."""
    lake = s3_lake(s3, "delta-rs")
    spans = lake.table("spans")
    # log entries expire at once: all those a checkpoint makes redundant can go
    spans.delta().alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds"}, raise_if_not_exists=False
    )
    version = FILES + 1

    def log_entries() -> list[str]:
        return [k for k in s3.objects(LAKE, "spans", "_delta_log") if k.endswith(".json")]

    assert len(log_entries()) == version + 1
    assert spans.checkpoint() == version
    checkpoint = f"{LAKE}/spans/_delta_log/{version:020d}.checkpoint.parquet"
    assert checkpoint in s3.objects(LAKE, "spans", "_delta_log")

    removed = spans.cleanup_log()
    left = log_entries()
    assert left == [f"{LAKE}/spans/_delta_log/{version:020d}.json"]  # delta-rs cleaned up on S3
    assert removed == version  # and the connector says how many entries went
    table = DeltaTable(spans.uri, storage_options=s3.storage_options())
    assert table.version() == version  # read from the checkpoint
    assert table.to_pyarrow_table().num_rows == data.TOTAL_SPANS


def test_trace_lookup_reads_the_bloom_filters_from_s3(s3: S3Server) -> None:
    """The filters of the bridge's files are read through the table's S3 file system: each
    file's filter holds every trace id of the file, and a lookup reads only what they let
    through (not every file's row group)."""
    lake = s3_lake(s3, "delta-rs")
    spans = lake.table("spans")
    delta = spans.delta()
    files = file_stats(pa.table(delta.get_add_actions(flatten=True)))
    dataset = files_dataset(delta, files)
    for fragment in dataset.get_fragments():
        filters = BloomFilters(fragment, fragment.metadata, {"trace_id"})
        try:
            ids = fragment.to_table(columns=["trace_id"])["trace_id"].to_pylist()
            assert ids and all(filters.probe(0, "trace_id", i) is True for i in ids)
        finally:
            filters.close()
    wanted = data.trace_id("cart", FIRST_DAY, 0, 0).hex()
    plan = spans.trace_query(wanted).explain()
    # the files Delta's statistics leave (random ids: most), then what the filters let through
    assert plan.row_groups_total >= 3
    assert 1 <= plan.row_groups_scanned < plan.row_groups_total
    assert spans.trace(wanted).num_rows == data.SPANS_PER_TRACE


def test_delete_table(s3: S3Server) -> None:
    lake = s3_lake(s3, "delta-rs")
    lake.get_or_create_table("logs")
    assert lake.list_tables() == ["spans", "logs"]
    assert any(key.endswith(".parquet") for key in s3.objects(LAKE, "spans"))
    lake.delete_table("spans")
    assert lake.list_tables() == ["logs"]
    assert s3.objects(LAKE, "spans") == []  # log and data files are gone from the bucket
    with pytest.raises(TableNotFoundError):
        lake.delete_table("spans")
    again = lake.get_or_create_table("spans")  # the name can be used again, empty
    assert again.version() == 0 and again.query().count() == 0


def test_hard_delete(
    lake: DeltaLakeConnector, s3: S3Server, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3 and on both engines: the rows leave every object of the table, the log before the
    purge is gone, the audit record is written."""
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "s3-key")
    spans = lake.table("spans")
    victim = stored(s3).filter(pa.compute.equal(stored(s3)["service_name"], "cart"))
    ids = victim.column("span_id").to_pylist()[:3]
    spans.optimize(where="service_name = 'cart'")  # tombstones holding the rows, too
    before = spans.version()
    folder = s3.root / s3.bucket / LAKE / "spans"
    assert holds(folder, *ids)
    in_list = ", ".join(f"'{i}'" for i in ids)
    result = spans.delete(f"span_id IN ({in_list})", hard=True, actor="s3-test")
    assert (result.deleted, result.hard, result.engine) == (3, True, engine)
    assert holds(folder, *ids) == []
    assert stored(s3).num_rows == data.TOTAL_SPANS - 3
    with pytest.raises(VersionNotFoundError):
        spans.query().version(before).count()
    audit = lake.audit_log().to_pylist()
    assert [(r["actor"], r["rows_affected"]) for r in audit] == [("s3-test", 3)]
    assert not any(i in audit[0]["predicate"] for i in ids)


def test_redact_and_partition_scoped_delete(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "s3-key")
    lake = s3_lake(s3, "delta-rs")
    spans = lake.table("spans")
    day = FIRST_DAY.isoformat()
    scoped = spans.delete("name = 'cart op1'", partition_path=f"service_name=cart/date={day}")
    assert scoped.deleted == PARTITION_SPANS // data.SPANS_PER_TRACE
    result = spans.redact("service.name", mode="hash", where="service_name = 'search'")
    assert result.rows_affected == 2 * PARTITION_SPANS and result.partitions_rewritten == 2
    searched = stored(s3).filter(pa.compute.equal(stored(s3)["service_name"], "search"))
    assert {dict(r)["service.name"] for r in searched["resource_attributes"].to_pylist()} == {
        keyed_hash("search", b"s3-key")
    }
    assert lake.audit_log().column("operation").to_pylist() == ["redact"]
    assert spans.operation_metrics()["redact"].count == 1


def test_change_data_feed_and_scoped_upsert(s3: S3Server) -> None:
    config = DeltaConfig.for_path(
        s3.url(LAKE), storage={"options": s3.storage_options()}, table={"change_data_feed": True}
    )
    lake = DeltaLakeConnector(config, engine="delta-rs")
    for request in data.all_requests()[:2]:
        lake.engines.delta_rs.append("spans", converted(request))
    spans = lake.table("spans")
    day = FIRST_DAY.isoformat()
    rows = spans.query().filter(f"service_name = 'cart' AND date = '{day}'").to_pylist()[:2]
    result = spans.upsert(
        [{**row, "name": "renamed"} for row in rows], partition_path=f"service_name=cart/date={day}"
    )
    assert result.updated == 2
    spans.delete("name = 'renamed'")
    changes = spans.changes(1)
    kinds = sorted(
        zip(
            changes["_commit_version"].to_pylist(), changes["_change_type"].to_pylist(), strict=True
        )
    )
    assert kinds.count((3, "update_postimage")) == 2 and kinds.count((4, "delete")) == 2
    assert kinds.count((1, "insert")) == REQUEST_SPANS


def test_old_checkpoints_are_thinned_on_s3(s3: S3Server) -> None:
    """engines/checkpoint_thinning.py on the object store: write times from the store's
    listing, five hours on (the checkpoints were written within seconds, so in one or two
    clock hours): the oldest and the two newest stay, the rest of each hour goes, and every
    version reads the same from the checkpoints left (the first commit removed, as once
    expired)."""
    uri, options = s3.url("thinned", "t"), s3.storage_options()
    for i in range(13):
        write_deltalake(uri, pa.table({"n": [i]}), mode="append", storage_options=options)
        if i % 2:
            DeltaTable(uri, storage_options=options).create_checkpoint()
    files = table_filesystem(uri, options, create=False)
    files.delete_file(f"_delta_log/{0:020d}.json")

    thinned = thin_checkpoints(files, time.time() + 5 * 3600, 7 * 24 * 3600)

    assert len(thinned) >= 2 and not {1, 9, 11} & set(thinned)
    for version in range(1, 13):
        read = DeltaTable(uri, version=version, storage_options=options).to_pyarrow_table()
        assert sorted(read.column("n").to_pylist()) == list(range(version + 1))
