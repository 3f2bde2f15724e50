"""Clustered compaction of today's partition: every row kept once, sorted, statistics as
delta-rs writes them, safe beside appends and deletes."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.table import TableFeatures

from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.errors import ConcurrentModificationError
from otel_delta.maintenance import compaction
from otel_delta.maintenance.tasks import TablePolicy, maintain_table, utc_today
from otel_delta.tables import TABLES
from otel_delta.tables.schemas import SPANS

LAYOUT = TABLES["spans"].layout
OPTIONS = compaction.RewriteOptions()
LATER_MS = 2**62  # a cutoff every file is older than


def spans(
    rng: random.Random, count: int, day: dt.date, first: int, service: str = "svc"
) -> pa.Table:
    base = int(dt.datetime.combine(day, dt.time(1), tzinfo=dt.UTC).timestamp()) * 10**9
    rows = []
    for i in range(first, first + count):
        start = base + rng.randrange(3_600 * 10**9)
        rows.append(
            {
                "service_name": service,
                "date": day,
                "start_time": dt.datetime.fromtimestamp(start // 10**9, dt.UTC),
                "trace_id": f"{rng.getrandbits(128):032x}",
                "span_id": f"{i:016x}",
                "name": rng.choice(["GET /cart", "SELECT products", "publish orders"]),
                "start_time_unix_nano": start,
                "duration_ns": rng.randrange(10**9),
                "attributes": [("http.route", rng.choice(["/cart", "/pay"]))],
                "status_message": "x" * rng.choice([0, 200]),  # too long for a log statistic
            }
        )
    return pa.Table.from_pylist(rows, schema=SPANS)


def spans_table(lake: Path):
    return DeltaLakeConnector(DeltaConfig.for_path(lake)).get_or_create_table("spans")


def fill(
    table, commits: int, per_commit: int = 50, day: dt.date | None = None, service: str = "svc"
) -> pa.Table:
    rng = random.Random(7)
    written = []
    for c in range(commits):
        batch = spans(rng, per_commit, day or utc_today(), c * per_commit, service)
        table.bulk_insert(batch)
        written.append(batch)
    return pa.concat_tables(written)


def row_count(table) -> int:
    return DeltaTable(table.uri).to_pyarrow_table(columns=["span_id"]).num_rows


def by_span(rows: pa.Table) -> list[dict]:
    columns = ["span_id", "trace_id", "start_time_unix_nano", "name", "attributes"]
    return sorted(rows.select(columns).to_pylist(), key=lambda r: r["span_id"])


def log_actions(path: Path, version: int) -> list[dict]:
    entry = path / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in entry.read_text().splitlines()]


# a service name whose partition directory and log path need escaping (space, %, /, non-ASCII)
@pytest.mark.parametrize("service", ["svc", "web shop 50%/ünï"])
def test_rewrite_keeps_every_row_once_sorted_with_delta_rs_statistics(
    tmp_path: Path, service: str
) -> None:
    table = spans_table(tmp_path)
    written = fill(table, commits=12, service=service)
    delta = table.delta()
    before = delta.version()

    result = compaction.compact(delta, LAYOUT, OPTIONS, older_than_ms=LATER_MS)

    assert (result.files_removed, result.files_added, result.rows) == (12, 1, 600)
    fresh = DeltaTable(table.uri)
    assert by_span(fresh.to_pyarrow_table()) == by_span(written)
    files = compaction.candidates(fresh)
    assert len(files) == 1 and files[0].path.rsplit("/", 1)[1].startswith("clustered-")
    assert dict(files[0].partition)["service_name"] == service
    local = pq.read_table(tmp_path / "spans" / unquote(files[0].path))
    # one span per trace here: one row group in time order (the trace order: the next test)
    starts = local["start_time_unix_nano"].to_pylist()
    assert len(set(local["trace_id"].to_pylist())) == 600 and starts == sorted(starts)
    assert (
        pq.read_metadata(tmp_path / "spans" / unquote(files[0].path))
        .row_group(0)
        .column(0)
        .compression
        == "ZSTD"
    )

    # its history entry says what it did (delta-rs records a WRITE with no metrics)
    entry = table.history(1)[0]
    assert entry.metrics == {"num_added_files": 1, "num_removed_files": 12}

    # the swap is one commit, invisible to change readers (after the one taking the lease)
    assert fresh.version() == before + 2
    actions = log_actions(tmp_path / "spans", before + 2)
    changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(changes) == 13 and {c["dataChange"] for c in changes} == {False}

    # statistics equal those delta-rs records for the same rows, where we record one
    ours = json.loads(next(a["add"] for a in actions if "add" in a)["stats"])
    reference = tmp_path / "reference"
    write_deltalake(reference, local, mode="append")
    theirs = json.loads(log_actions(reference, 0)[-1]["add"]["stats"])
    assert ours["numRecords"] == theirs["numRecords"] == 600
    for kind in ("minValues", "maxValues", "nullCount"):
        assert ours[kind], kind
        for column, value in ours[kind].items():
            assert theirs[kind][column] == value, (kind, column)
    assert {"trace_id", "start_time", "start_time_unix_nano"} <= set(ours["minValues"])
    assert "status_message" not in ours["maxValues"]  # 200 characters: left out


def traces(rng: random.Random, count: int, day: dt.date, first: int) -> pa.Table:
    """`count` traces of 1-7 spans each, each trace's spans within a second of its start,
    the traces anywhere in an hour, rows in random order."""
    base = int(dt.datetime.combine(day, dt.time(1), tzinfo=dt.UTC).timestamp()) * 10**9
    rows = []
    for _ in range(count):
        trace_id, start = f"{rng.getrandbits(128):032x}", base + rng.randrange(3_600 * 10**9)
        for _ in range(rng.randint(1, 7)):
            begins = start + rng.randrange(10**9)
            rows.append(
                {
                    "service_name": "svc",
                    "date": day,
                    "trace_id": trace_id,
                    "span_id": f"{first + len(rows):016x}",
                    "start_time_unix_nano": begins,
                    "start_time": dt.datetime.fromtimestamp(begins // 10**9, dt.UTC),
                }
            )
    rng.shuffle(rows)
    return pa.Table.from_pylist(rows, schema=SPANS)


def test_each_row_group_keeps_a_trace_id_range_with_its_traces_in_time_order(
    tmp_path: Path,
) -> None:
    """Compaction sorts by trace id, cuts row groups, then orders the traces inside each row
    group by their first span: a lookup still prunes row groups by trace id range, and
    neighbouring rows have neighbouring times (smaller files)."""
    table = spans_table(tmp_path)
    rng = random.Random(11)
    written = [traces(rng, 40, utc_today(), 1_000 * c) for c in range(6)]
    for batch in written:
        table.bulk_insert(batch)
    options = compaction.RewriteOptions(row_group_rows=100)

    result = compaction.compact(table.delta(), LAYOUT, options, older_than_ms=LATER_MS)

    rows = sum(batch.num_rows for batch in written)
    assert (result.files_added, result.rows) == (1, rows) and rows > 500
    (file,) = compaction.candidates(DeltaTable(table.uri))
    parquet = pq.ParquetFile(tmp_path / "spans" / unquote(file.path))
    assert parquet.metadata.num_rows == rows
    assert parquet.metadata.num_row_groups == -(-rows // 100)
    previous_max = ""
    for g in range(parquet.metadata.num_row_groups):
        group = parquet.read_row_group(g, columns=["trace_id", "start_time_unix_nano"])
        ids = group["trace_id"].to_pylist()
        starts = group["start_time_unix_nano"].to_pylist()
        # the row groups hold consecutive trace id ranges (a trace may straddle a boundary)
        assert min(ids) >= previous_max
        previous_max = max(ids)
        # inside one: each trace's rows together, in time order; traces by their first span
        runs: list[list[int]] = []
        order: list[str] = []
        for index, trace_id in enumerate(ids):
            if index == 0 or trace_id != ids[index - 1]:
                runs.append([])
                order.append(trace_id)
            runs[-1].append(starts[index])
        assert len(runs) == len(set(ids)) > 1, g
        assert all(run == sorted(run) for run in runs)
        firsts = [run[0] for run in runs]
        assert firsts == sorted(firsts) and order != sorted(order), g
    stored = DeltaTable(table.uri).to_pyarrow_table()
    assert by_span(stored) == by_span(pa.concat_tables(written))


def test_young_and_already_clustered_files_are_left(tmp_path: Path) -> None:
    table = spans_table(tmp_path)
    fill(table, commits=4)
    cutoff = int(time.time() * 1000) + 1
    time.sleep(0.01)
    fill(table, commits=3, day=utc_today())
    delta = table.delta()

    first = compaction.compact(delta, LAYOUT, OPTIONS, older_than_ms=cutoff)
    assert first.files_removed == 4
    again = compaction.compact(table.delta(), LAYOUT, OPTIONS, older_than_ms=cutoff)
    assert again.files_removed == 0  # the clustered file and the young ones stay

    yesterday = utc_today() - dt.timedelta(days=1)
    fill(table, commits=3, day=yesterday)
    today_only = compaction.compact(
        table.delta(),
        LAYOUT,
        OPTIONS,
        include=lambda values: values["date"] == utc_today().isoformat(),
        older_than_ms=LATER_MS,
    )
    assert today_only.files_removed == 3  # the young ones of today, not yesterday's
    assert row_count(table) == 4 * 50 + 3 * 50 + 3 * 50


def test_a_concurrent_delete_of_an_input_fails_the_rewrite_and_resurrects_nothing(
    tmp_path: Path,
) -> None:
    table = spans_table(tmp_path)
    fill(table, commits=5)
    delta = table.delta()
    groups = compaction.plan(compaction.candidates(delta), older_than_ms=LATER_MS)
    assert len(groups) == 1

    deleted = table.delete(f"span_id = '{0:016x}'")  # another writer, after the plan
    assert deleted.deleted == 1

    with pytest.raises(Exception, match="concurrent"):
        compaction.rewrite(delta, groups[0], LAYOUT, OPTIONS)
    assert row_count(table) == 5 * 50 - 1
    leftovers = [p for p in (tmp_path / "spans").rglob("clustered-*")]
    assert leftovers == []  # the file of the failed commit is gone


def test_files_a_failed_commit_leaves_behind_are_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As above, but the clean-up fails too (here, reading the log again): the commit's error is
    the one raised, and the files left are named in a warning, not passed over."""
    table = spans_table(tmp_path)
    fill(table, commits=5)
    delta = table.delta()
    groups = compaction.plan(compaction.candidates(delta), older_than_ms=LATER_MS)
    table.delete(f"span_id = '{0:016x}'")

    reads = [delta.update_incremental]

    def refuse() -> None:
        # the swap's own reads before its commit work (as it takes the maintenance lease, and
        # after), the clean-up's not
        if len(reads) > 2:
            raise OSError("injected: the log cannot be read")
        reads.append(reads[0]())

    monkeypatch.setattr(delta, "update_incremental", refuse)
    with caplog.at_level("WARNING"), pytest.raises(Exception, match="concurrent"):
        compaction.rewrite(delta, groups[0], LAYOUT, OPTIONS)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("compaction left 1 file(s)" in w and "injected" in w for w in warnings), warnings
    assert row_count(table) == 5 * 50 - 1


def test_readers_never_see_a_row_twice_or_miss_one_while_appends_continue(
    tmp_path: Path,
) -> None:
    table = spans_table(tmp_path)
    fill(table, commits=6)
    appended = [6 * 50]  # rows in the table after each append, in commit order
    stop = threading.Event()
    errors: list[BaseException] = []

    def append() -> None:
        rng = random.Random(11)
        first = 10_000
        appender = spans_table(tmp_path)
        try:
            while not stop.is_set():
                appender.bulk_insert(spans(rng, 20, utc_today(), first))
                first += 20
                appended.append(appended[-1] + 20)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    compacted = 0
    try:
        deadline = time.monotonic() + 20
        while compacted < 3 and time.monotonic() < deadline:
            result = compaction.compact(table.delta(), LAYOUT, OPTIONS, older_than_ms=LATER_MS)
            compacted += result.files_added
    finally:
        stop.set()
        thread.join(60)
    assert not errors
    assert compacted >= 3

    delta = DeltaTable(table.uri)
    latest = delta.version()
    seen = []
    for version in range(latest + 1):
        at = DeltaTable(table.uri, version=version)
        ids = at.to_pyarrow_table(columns=["span_id"]).column("span_id").to_pylist()
        assert len(ids) == len(set(ids)), f"a row twice at version {version}"
        seen.append(len(ids))
    assert seen[-1] == appended[-1]
    # every version's count is one the appends produced (compactions change none)
    assert set(seen) <= {50 * k for k in range(6)} | set(appended)
    assert seen == sorted(seen)


def test_maintenance_round_clusters_todays_old_files(tmp_path: Path) -> None:
    table = spans_table(tmp_path)
    fill(table, commits=4)
    time.sleep(1.2)
    fill(table, commits=2)  # younger than the minimum age: left
    policy = TablePolicy(vacuum=False, checkpoint=False, open_partition_age_seconds=1.0)

    report = maintain_table(table, policy)

    assert report.errors == []
    assert (report.open_files_compacted, report.open_files_written) == (4, 1)
    assert row_count(table) == 6 * 50
    off = maintain_table(
        table, TablePolicy(vacuum=False, checkpoint=False, open_partition_age_seconds=0)
    )
    assert off.open_files_compacted == 0


def test_a_table_with_deletion_vectors_is_left_to_delta_rs(tmp_path: Path) -> None:
    """Raw Parquet reads would bring back rows a deletion vector hides (Spark can turn them
    on): such a table is never rewritten by this compaction."""
    table = spans_table(tmp_path)
    fill(table, commits=3)
    table.delta().alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )

    result = compaction.compact(table.delta(), LAYOUT, OPTIONS, older_than_ms=LATER_MS)

    assert result.files_removed == 0
    assert len(compaction.candidates(table.delta())) == 3


def test_two_compactions_of_the_same_files_keep_each_row_once(tmp_path: Path) -> None:
    """Two replicas' maintainers (each its own handle on the table) plan the same group and
    both rewrite it: the first swap lands, the second fails instead of adding every row of the
    group again (delta-rs 1.6 commits both by itself: lakehouse.rewrite_transaction)."""
    table = spans_table(tmp_path)
    fill(table, commits=5)
    ours, theirs = table.delta(), spans_table(tmp_path).delta()
    group = compaction.plan(compaction.candidates(ours), older_than_ms=LATER_MS)[0]
    same = compaction.plan(compaction.candidates(theirs), older_than_ms=LATER_MS)[0]
    assert [f.path for f in group] == [f.path for f in same]

    compaction.rewrite(theirs, same, LAYOUT, OPTIONS)
    with pytest.raises(ConcurrentModificationError, match="removed 5 of the 5 files"):
        compaction.rewrite(ours, group, LAYOUT, OPTIONS)
    ids = DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().column("span_id").to_pylist()
    assert sorted(ids) == [f"{i:016x}" for i in range(5 * 50)]
    clustered = [p for p in (tmp_path / "spans").rglob("clustered-*")]
    assert len(clustered) == 1  # the losing rewrite's file is gone
