"""Reads through the connector on bridge-written tables: pruning, time travel, result forms."""

from __future__ import annotations

import hashlib
import json
import time
import types
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, WriterProperties, write_deltalake

from otel_delta.connector import scan
from otel_delta.connector.table import monotonic_times, version_at
from otel_delta.errors import (
    InvalidPredicateError,
    InvalidQueryError,
    TableUnreadableError,
    VersionNotFoundError,
)
from tests.connector import data
from tests.helpers import read_table

pytestmark = pytest.mark.e2e  # tables written by a real bridge (gRPC server)

PARTITIONS = len(data.SERVICES) * len(data.DAYS)
BRIDGE_FILES = PARTITIONS * data.COMMITS_PER_PARTITION


def test_filter_select_limit_order(spans) -> None:
    rows = (
        spans.query()
        .filter("service_name = 'cart'")
        .filter("date = '2024-11-19'")
        .select(["span_id", "name", "start_time_unix_nano"])
        .order_by("start_time_unix_nano")
        .limit(5)
        .to_pylist()
    )
    assert len(rows) == 5
    assert list(rows[0]) == ["span_id", "name", "start_time_unix_nano"]
    starts = [r["start_time_unix_nano"] for r in rows]
    assert starts == sorted(starts)
    assert all(r["name"].startswith("cart ") for r in rows)
    assert starts[0] == data.day_nanos(data.DAYS[0])  # the earliest span of that partition


def test_order_by_descending_gives_the_newest_first_and_mixes_directions(spans) -> None:
    """`"<column> DESC"`, as in SQL: the last spans of a partition, newest first; a column of
    each direction; a direction that is not one is refused at the call."""
    query = spans.query().filter("service_name = 'cart' AND date = '2024-11-19'")
    everything = query.select(["name", "start_time_unix_nano"]).to_pylist()
    newest = (
        spans.query()
        .filter("service_name = 'cart' AND date = '2024-11-19'")
        .select(["name", "start_time_unix_nano"])
        .order_by("start_time_unix_nano desc")
        .limit(5)
        .to_pylist()
    )
    expected = sorted(everything, key=lambda r: r["start_time_unix_nano"], reverse=True)[:5]
    assert [r["start_time_unix_nano"] for r in newest] == [
        r["start_time_unix_nano"] for r in expected
    ]
    mixed = (
        spans.query()
        .filter("service_name = 'cart' AND date = '2024-11-19'")
        .select(["name", "start_time_unix_nano"])
        .order_by("name", "start_time_unix_nano DESC")
        .to_pylist()
    )
    keys = [(r["name"], -r["start_time_unix_nano"]) for r in mixed]
    assert keys == sorted(keys) and len(keys) == len(everything) > 5
    with pytest.raises(InvalidQueryError, match="DESC"):
        spans.query().order_by("start_time_unix_nano DOWN")


def test_arguments_of_the_wrong_kind_are_one_invalid_query_not_an_arrow_error(spans) -> None:
    """A map or list column cannot be sorted, a select takes names, a version fits an i64:
    each is refused at the call with the reason, not by Arrow or delta-rs at the read
    (ArrowTypeError "Sorting not supported for type map<string, string>", OverflowError "int
    too big to convert")."""
    for column in ("attributes", "events DESC"):
        with pytest.raises(InvalidQueryError, match="cannot be sorted") as err:
            spans.query().order_by(column)
        assert err.value.column == column.split()[0]
    with pytest.raises(InvalidQueryError, match="column names"):
        spans.query().select(5)
    with pytest.raises(InvalidQueryError, match="at most"):
        spans.query().version(10**20)


def test_results_match_a_plain_read(spans, lake_path) -> None:
    everything = read_table(lake_path, "spans")
    expected = everything.filter(
        (pc.field("service_name") == "checkout") & (pc.field("duration_ns") > 1_500_000)
    )
    result = spans.query().filter("service_name = 'checkout' AND duration_ns > 1500000").execute()
    assert sorted(result.table["span_id"].to_pylist()) == sorted(expected["span_id"].to_pylist())
    assert result.num_rows > 0
    assert result.table.schema == spans.schema  # all columns, in table order
    assert spans.query().count() == everything.num_rows == data.TOTAL_SPANS + 4


def test_service_filter_prunes_partitions(spans) -> None:
    full = spans.query().explain()
    service = spans.query().filter("service_name = 'cart'").explain()
    assert full.files_total == full.files_scanned >= BRIDGE_FILES
    assert service.files_total == full.files_total
    assert service.files_after_partition_pruning == service.files_scanned
    assert service.files_scanned == len(data.DAYS) * data.COMMITS_PER_PARTITION
    one_day = spans.query().filter("service_name = 'cart' AND date = '2024-11-20'").explain()
    assert one_day.files_scanned == data.COMMITS_PER_PARTITION
    assert one_day.bytes_scanned < service.bytes_scanned < full.bytes_total


def test_statistics_prune_non_partition_columns(spans) -> None:
    # start times grow with the commit number: later commits lie above this bound
    bound = data.day_nanos(data.DAYS[0]) + 150 * 10**9
    plan = spans.query().filter(f"start_time_unix_nano < {bound}").explain()
    assert plan.files_after_partition_pruning == plan.files_total
    assert plan.files_scanned < plan.files_total
    rows = spans.query().filter(f"start_time_unix_nano < {bound}").to_arrow()
    assert rows.num_rows > 0
    assert pc.max(rows["start_time_unix_nano"]).as_py() < bound


def test_trace_is_sorted_and_scans_only_files_that_may_hold_it(spans) -> None:
    wanted = data.trace_id("search", data.DAYS[1], 2, 1).hex()
    trace = spans.trace(wanted)
    assert trace.num_rows == data.SPANS_PER_TRACE
    assert set(trace["trace_id"].to_pylist()) == {wanted}
    starts = trace["start_time_unix_nano"].to_pylist()
    assert starts == sorted(starts)
    plan = spans.trace_query(wanted.upper()).explain()
    assert plan.files_after_partition_pruning == plan.files_total  # no partition helps
    assert 1 <= plan.files_scanned < plan.files_total  # min/max statistics do
    assert spans.trace("00" * 16).num_rows == 0


def test_trace_rejects_bad_ids(spans, lake) -> None:
    for bad in ("xyz", "00" * 15, "'; DROP TABLE spans; --", 5):
        with pytest.raises(InvalidQueryError):
            spans.trace(bad)
    with pytest.raises(InvalidQueryError):
        lake.table("logs").trace("00" * 16)


def test_bad_arguments_are_our_error_at_the_call(spans) -> None:
    """A batch size below 1 and a retention cut-off that is no date are InvalidQueryError,
    not pyarrow's ArrowInvalid at the first batch nor an AttributeError from inside."""
    for bad in (0, -1, 1.5, None):
        with pytest.raises(InvalidQueryError, match="batch_size"):
            spans.query().to_batches(bad)
    assert sum(b.num_rows for b in spans.query().to_batches(1)) == spans.query().count()
    for bad in ("2020-01-01", datetime(2020, 1, 1, tzinfo=UTC), None):
        with pytest.raises(InvalidQueryError, match="expire"):
            spans.expire(bad)


def test_a_lake_without_spans_has_no_trace_rather_than_no_table(tmp_path) -> None:
    """A lake that has received logs only: `trace()` finds no span (the trace's logs may be
    there), where it raised TableNotFoundError; a bad id is still refused."""
    from otel_delta.connector import DeltaConfig, DeltaLakeConnector
    from otel_delta.tables import TABLES

    lake = DeltaLakeConnector(DeltaConfig.for_path(tmp_path / "lake"))
    found = lake.trace("0AF7651916CD43DD8448EB211C80319C")
    assert found.num_rows == 0 and found.schema.equals(TABLES["spans"].schema)
    with pytest.raises(InvalidQueryError):
        lake.trace("xyz")


def test_map_access_and_timestamps(spans) -> None:
    rows = spans.query().filter("attributes['http.route'] = '/r/2'").select(["attributes"])
    routes = {dict(r["attributes"])["http.route"] for r in rows.to_pylist()}
    assert routes == {"/r/2"}
    day_two = spans.query().filter("start_time >= TIMESTAMP '2024-11-20T00:00:00Z'").to_arrow()
    assert set(day_two["date"].to_pylist()) == {data.DAYS[1]}


def test_time_travel_by_version_and_timestamp(spans) -> None:
    before = spans.version()
    count_before = spans.query().count()
    moment = datetime.now(UTC)
    time.sleep(0.05)
    deleted = spans.delete("service_name = 'search'").deleted
    assert deleted == len(data.DAYS) * data.COMMITS_PER_PARTITION * 12
    assert spans.query().count() == count_before - deleted
    assert spans.query().version(before).count() == count_before
    assert spans.query().as_of(moment).count() == count_before
    assert spans.query().as_of(moment.isoformat()).explain().version == before
    assert spans.query().version(1).explain().version == 1
    with pytest.raises(VersionNotFoundError):
        spans.query().version(before + 10).count()
    with pytest.raises(VersionNotFoundError):
        spans.query().as_of("2001-01-01T00:00:00Z").count()


def test_streams_record_batches(spans) -> None:
    query = spans.query().filter("service_name = 'checkout'").select(["span_id"]).limit(7)
    batches = list(query.to_batches(batch_size=3))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert sum(b.num_rows for b in batches) == 7
    assert batches[0].schema == query.schema()
    full = list(spans.query().to_batches())
    assert sum(b.num_rows for b in full) == spans.query().count()


def test_to_pandas(spans) -> None:
    frame = spans.query().filter("service_name = 'cart'").select(["span_id", "date"]).to_pandas()
    assert list(frame.columns) == ["span_id", "date"]
    assert len(frame) == len(data.DAYS) * data.COMMITS_PER_PARTITION * 12


def test_bad_query_arguments(spans) -> None:
    with pytest.raises(InvalidQueryError) as err:
        spans.query().select(["span_id", "nope"])
    assert err.value.column == "nope"
    with pytest.raises(InvalidQueryError, match=r"start_time_unix_nano \+ duration_ns"):
        spans.query().select(["span_id", "end_time_unix_nano"])  # schema version 1's
    for bad in (-1, "5", True):
        with pytest.raises(InvalidQueryError):
            spans.query().limit(bad)
        with pytest.raises(InvalidQueryError):
            spans.query().version(bad)
    with pytest.raises(InvalidQueryError):
        spans.query().as_of("not a time")
    with pytest.raises(InvalidPredicateError):
        spans.query().filter("servce_name = 'cart'")


def test_millisecond_timestamp_statistics_never_hide_rows(spans) -> None:
    # Delta keeps timestamp min/max in milliseconds: the latest span of a file starts
    # 2 µs after a whole second, above its truncated max statistic.
    latest = (
        spans.query()
        .filter("service_name = 'cart' AND date = '2024-11-19'")
        .select(["start_time"])
        .to_arrow()
    )
    newest = max(latest["start_time"].to_pylist())
    assert newest.microsecond == 2
    where = (
        "service_name = 'cart' AND date = '2024-11-19' "
        f"AND start_time >= TIMESTAMP '{newest.isoformat()}'"
    )
    plan = spans.query().filter(where).explain()
    assert plan.files_after_partition_pruning == data.COMMITS_PER_PARTITION
    assert plan.files_scanned == 1  # the last commit's file; the others pruned by statistics
    assert spans.query().filter(where).count() == 1
    assert spans.delete(where).deleted == 1  # delta-rs agrees on the same predicate


def _rewrite_in_small_row_groups(lake_path, rows_per_group: int) -> None:
    """Rewrite the spans table sorted by trace_id, with delta-rs, in many small row groups."""
    uri = str(lake_path / "spans")
    table = DeltaTable(uri).to_pyarrow_table().sort_by([("trace_id", "ascending")])
    write_deltalake(
        uri,
        table,
        mode="overwrite",
        partition_by=["service_name", "date"],
        writer_properties=WriterProperties(max_row_group_size=rows_per_group),
    )


def test_trace_lookup_skips_row_groups_by_parquet_statistics(spans, lake_path) -> None:
    wanted = data.trace_id("checkout", data.DAYS[0], 1, 2).hex()
    before = spans.trace(wanted)
    _rewrite_in_small_row_groups(lake_path, rows_per_group=data.SPANS_PER_TRACE)
    plan = spans.trace_query(wanted).explain()
    assert plan.files_scanned >= 1
    # a file holds several row groups; their trace_id ranges are narrow after sorting
    assert plan.row_groups_total > plan.files_scanned
    assert 1 <= plan.row_groups_scanned < plan.row_groups_total
    after = spans.trace(wanted)
    assert after.num_rows == data.SPANS_PER_TRACE
    assert after.equals(before)  # same rows, same order, same schema


@pytest.mark.parametrize("filter_rows", [scan.FILTER_ROWS, 4])
def test_row_group_reads_match_a_plain_read(spans, lake_path, monkeypatch, filter_rows) -> None:
    _rewrite_in_small_row_groups(lake_path, rows_per_group=7)
    # row groups spread over several batches, tested for matches a few rows at a time
    monkeypatch.setattr(scan, "FILTER_ROWS", filter_rows)
    everything = read_table(lake_path, "spans")
    expected = sorted(everything.filter(pc.field("duration_ns") > 1_500_000)["span_id"].to_pylist())
    result = spans.query().filter("duration_ns > 1500000").select(["span_id"]).execute()
    assert result.scan.row_groups_total > result.scan.files_scanned
    assert sorted(result.table["span_id"].to_pylist()) == expected
    query = spans.query().filter("duration_ns > 1500000").select(["span_id"])
    streamed = pa.Table.from_batches(list(query.to_batches(batch_size=3)))
    assert sorted(streamed["span_id"].to_pylist()) == expected
    # every row group matches: the rest are read without testing their filter column first
    wide = everything.filter(pc.field("duration_ns") >= 0).num_rows
    assert wide > 0.9 * everything.num_rows
    assert spans.query().filter("duration_ns >= 0").count() == wide
    limited = spans.query().filter("duration_ns > 1500000").limit(3).to_arrow()
    assert limited.num_rows == 3
    assert all(d > 1_500_000 for d in limited["duration_ns"].to_pylist())


def test_partition_values_that_need_url_encoding_are_read(spans) -> None:
    # add actions hold such paths encoded once more than the files on disk
    service = "odd svc/100%é"
    row = spans.query().filter("service_name = 'cart'").limit(1).to_arrow()
    spans.bulk_insert(row.set_column(0, "service_name", pa.array([service])))
    where = f"service_name = '{service}'"
    assert spans.query().filter(where).explain().files_scanned == 1
    found = spans.query().filter(where).to_arrow()
    assert found["service_name"].to_pylist() == [service]
    assert found["span_id"].to_pylist() == row["span_id"].to_pylist()
    assert spans.trace(row["trace_id"][0].as_py())["service_name"].to_pylist().count(service) == 1


def _files_covering(lake_path, table: str, trace_id: str) -> int:
    """Files of the table whose trace_id statistics do not rule `trace_id` out."""
    covering = 0
    for path in DeltaTable(str(lake_path / table)).file_uris():
        metadata = pq.read_metadata(path)
        index = metadata.schema.names.index("trace_id")
        for g in range(metadata.num_row_groups):
            chunk = metadata.row_group(g).column(index)
            assert chunk.bloom_filter_offset is not None  # every file as ingested has one
            statistics = chunk.statistics
            covering += statistics.min <= trace_id <= statistics.max
    return covering


def test_trace_lookup_in_files_as_ingested_skips_row_groups_by_bloom_filters(
    spans, lake_path
) -> None:
    wanted = data.trace_id("checkout", data.DAYS[0], 1, 2).hex()
    absent = data.trace_id("a trace no file holds").hex()
    for trace_id, rows in ((wanted, data.SPANS_PER_TRACE), (absent, 0)):
        covering = _files_covering(lake_path, "spans", trace_id)
        assert covering >= 3  # ids in arrival order: statistics alone would read these
        plan = spans.trace_query(trace_id).explain()
        assert plan.row_groups_scanned < covering  # the filters rule the id out of the rest
        assert plan.row_groups_scanned >= (1 if rows else 0)
        assert spans.trace(trace_id).num_rows == rows


def test_a_struct_column_can_be_tested_for_null(lake) -> None:
    """An exponential histogram's `negative` range (a struct) may be absent: which points have
    one is a question the filter answers, though the struct cannot be compared."""
    points = lake.table("metrics_exponential_histogram")
    with_negative = points.query().filter("negative IS NOT NULL").select(["scale"]).to_pylist()
    without = points.query().filter("negative IS NULL AND scale > 0").select(["scale"]).to_pylist()
    assert with_negative == [{"scale": -3}]
    assert without == [{"scale": 20}]


def test_delta_rs_refuses_to_delete_by_a_struct_null_test_and_deletes_nothing(lake) -> None:
    """delta-rs's delete cannot plan `IS NULL` on a struct (its kernel answers "unknown
    column"): the connector says so, naming the column and the engine that can."""
    points = lake.table("metrics_exponential_histogram")
    before = points.version()
    with pytest.raises(InvalidPredicateError, match=r"on negative .*engine='spark'"):
        points.delete("negative IS NULL")
    assert points.version() == before
    assert points.query().count() == 2


def test_time_travel_by_timestamp_when_a_writer_s_clock_is_behind(spans, monkeypatch) -> None:
    """Two writers whose clocks differ (another bridge, a Spark job): a commit stamped before
    its predecessor made `as_of` pick the latest version stamped at or before the time asked,
    and so every version before it, also one committed after that time. The commits' times
    are made monotonic, as Delta's history does. The clock behind is this process's, set back
    for one commit (no second host here)."""
    from otel_delta.engines import delta_rs

    template = spans.query().limit(1).to_pylist()[0]

    def insert(name: str) -> None:
        span_id = hashlib.sha256(name.encode()).hexdigest()[:16]
        spans.bulk_insert([{**template, "span_id": span_id, "name": name}])

    insert("before the moment")
    time.sleep(0.05)
    moment = datetime.now(UTC)
    time.sleep(0.05)
    insert("after the moment")
    behind = types.SimpleNamespace(time=lambda: time.time() - 3600)
    monkeypatch.setattr(delta_rs, "time", behind)
    insert("after, on a clock behind")
    monkeypatch.undo()

    names = spans.query().as_of(moment).filter("name LIKE '%moment%'").to_arrow()["name"]
    assert names.to_pylist() == ["before the moment"]
    # history shows the times as_of goes by: in version order, and each one found by it,
    # also when the commit stamped later than the clock-behind one is not shown (limit 1)
    for limit in (3, 1):
        history = spans.history(limit=limit)
        times = [h.timestamp for h in history]
        assert times == sorted(times, reverse=True)
        for entry in history:
            assert spans.query().as_of(entry.timestamp).explain().version == entry.version


def test_version_at_makes_the_commit_times_monotonic() -> None:
    history = [  # newest first, as the log is read; the clock of version 3 was behind
        {"version": 3, "timestamp": 1_000},
        {"version": 2, "timestamp": 2_000},
        {"version": 1, "timestamp": 1_500},
        {"version": 0},
    ]
    assert version_at(history, 1_499) == 0
    assert version_at(history, 1_999) == 1  # version 3 (1,000) comes after 2 (2,000)
    assert version_at(history, 2_000) == 2
    assert version_at(history, 2_001) == 3
    assert version_at([], 2_001) is None
    assert version_at([{"version": 0, "timestamp": 5}], 4) is None
    # a first commit without a commit info: the epoch, not -inf (history's datetime failed)
    untimed = monotonic_times([{"version": 1, "timestamp": 5}, {"version": 0}])
    assert [at for at, _ in untimed] == [0.0, 5.0]


def test_a_read_through_datafusion_names_a_missing_or_broken_file_as_ours(tmp_path) -> None:
    """The read of a table with deletion vectors (delta-rs's DataFusion) fails as its rows are
    iterated, not when it is planned: a data file gone (vacuumed, for a past version) is
    FileNotFoundError, which the query turns into VersionNotFoundError as the pyarrow scan's
    does, and a file that is not Parquet is TableUnreadableError; both were pyarrow's
    ArrowInvalid. Tested on a plain table, which DataFusion reads the same way."""
    path = tmp_path / "t"
    rows = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    write_deltalake(str(path), rows)
    delta = DeltaTable(str(path))
    (data_file,) = [p for p in path.iterdir() if p.suffix == ".parquet"]

    def read() -> list[pa.RecordBatch]:
        return list(scan.deletion_vectors_applied(delta, ["x"], None, rows.schema, 2))

    assert pa.Table.from_batches(read()).equals(rows)
    data_file.write_bytes(b"not parquet at all")
    with pytest.raises(TableUnreadableError):
        read()
    data_file.unlink()
    with pytest.raises(FileNotFoundError):
        read()


def test_as_of_in_a_long_log_searches_and_reads_a_window_not_every_commit(
    spans, monkeypatch
) -> None:
    """On an object store each commit read is a GET, and `as_of` read every commit the log
    held (a week of 10 s flushes: 60,480). In a long log it now searches by the commits'
    stamps and makes the times monotonic over a window around what it finds: the same
    versions as reading everything, here with a writer's clock 5 s behind in the middle, and
    a few hundred reads instead of thousands."""
    from otel_delta.connector import table as table_module
    from otel_delta.engines import commit_log

    log_dir = Path(spans.uri) / "_delta_log"
    first = spans.version() + 1
    start_ms = 1_900_000_000_000
    stamps = {}
    for version in range(first, first + 2_000):  # commits of a commitInfo alone (as a lease's)
        stamp = start_ms + (version - first) * 1_000
        if version == first + 1_200:
            stamp -= 5_000  # this writer's clock is behind
        stamps[version] = stamp
        info = {"commitInfo": {"timestamp": stamp, "operation": "SET TBLPROPERTIES"}}
        (log_dir / f"{version:020d}.json").write_text(json.dumps(info) + "\n")
    spans._delta = None  # the handle follows the log on its next open
    whole = commit_log.history(spans._files(), spans.version())
    reads = []
    counted = commit_log.commit_info

    def counting(filesystem, version):
        reads.append(version)
        return counted(filesystem, version)

    monkeypatch.setattr(commit_log, "commit_info", counting)
    for offset_ms in (-1, 0, 500, 999_000, 1_195_500, 1_196_000, 1_200_000, 1_999_000, 10**9):
        limit_ms = start_ms + offset_ms
        reads.clear()
        found = spans._version_at(limit_ms)
        assert found == table_module.version_at(whole, limit_ms), offset_ms
        assert len(reads) < 300, (offset_ms, len(reads))
