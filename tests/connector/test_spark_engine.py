"""engine="spark" gives the same results as delta-rs on copies of the same bridge tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.connector.predicates import parse_predicate
from otel_delta.errors import InvalidPredicateError
from tests.connector import data
from tests.connector.racing import APPENDS, appending_after, operation_at

# Spark on a shared 2-core machine is slow: allow more than the default 300 s per test
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

KEY = ["service_name", "date", "trace_id", "span_id"]


@pytest.fixture
def twins(bridge_lake: Path, tmp_path: Path, spark):
    """The same lakehouse twice: one operated on by delta-rs, one by Spark."""
    lakes = {}
    for engine in ("delta-rs", "spark"):
        path = tmp_path / engine
        shutil.copytree(bridge_lake, path)
        lakes[engine] = DeltaLakeConnector(DeltaConfig.for_path(path), engine=engine, spark=spark)
    return lakes["delta-rs"].table("spans"), lakes["spark"].table("spans")


def normalized(table) -> list[dict]:
    rows = table.query().to_arrow().sort_by([(k, "ascending") for k in KEY]).to_pylist()
    for row in rows:  # map entries: compare as sets, whatever order an engine kept
        for name, value in row.items():
            if isinstance(value, list) and value and isinstance(value[0], tuple):
                row[name] = sorted(value)
    return rows


def test_upsert_same_counts_and_rows(twins) -> None:
    rs, sp = twins
    source = rs.query().filter("service_name = 'cart' AND date = '2024-11-20'").to_arrow()
    source = source.set_column(
        source.schema.get_field_index("name"), "name", pa.array(["it's \\ new"] * len(source))
    )
    extra = {**source.slice(0, 1).to_pylist()[0], "span_id": "00000000000000aa"}
    records = [*source.to_pylist(), extra, extra]
    a, b = rs.upsert(records), sp.upsert(records)
    assert (a.inserted, a.updated, a.deduplicated) == (1, source.num_rows, 1)
    assert (b.inserted, b.updated, b.deduplicated) == (a.inserted, a.updated, a.deduplicated)
    assert b.engine == "spark" and sp.history(1)[0].operation == "MERGE"
    assert normalized(rs) == normalized(sp)


def test_delete_same_counts_and_rows(twins) -> None:
    rs, sp = twins
    for where in (
        "service_name = 'search' AND attributes['http.route'] IN ('/r/0', '/r/2') "
        "OR trace_state = 'it''s' OR status_message = 'a\\b'",  # quoting in both dialects
        "date = DATE '2024-11-19' AND start_time < TIMESTAMP '2024-11-19T08:00:01Z' "
        "OR name LIKE '%op2' AND NOT (status_code = 'STATUS_CODE_ERROR')",
    ):
        a, b = rs.delete(where), sp.delete(where)
        assert a.deleted == b.deleted, where
    assert a.deleted > 0
    assert normalized(rs) == normalized(sp)
    with pytest.raises(InvalidPredicateError):
        sp.delete("1=1 OR service_name = 'x'; DROP TABLE spans")


def test_spark_deletes_by_a_struct_null_test(bridge_lake: Path, tmp_path: Path, spark) -> None:
    """What delta-rs cannot plan (IS NULL on a struct, refused by the connector), Spark can."""
    shutil.copytree(bridge_lake, tmp_path / "lake")
    lake = DeltaLakeConnector(DeltaConfig.for_path(tmp_path / "lake"), spark=spark)
    points = lake.table("metrics_exponential_histogram")
    assert points.delete("negative IS NULL", engine="spark").deleted == 1
    assert points.query().select(["scale"]).to_pylist() == [{"scale": -3}]


def test_optimize_z_order_and_vacuum(twins) -> None:
    rs, sp = twins
    before = normalized(rs)
    where = "service_name = 'cart'"  # two partitions: enough to compare, cheaper on Spark
    a = rs.optimize(where=where, z_order=["trace_id"])
    b = sp.optimize(where=where, z_order=["trace_id"])
    assert a.files_removed == len(data.DAYS) * data.COMMITS_PER_PARTITION
    assert (a.files_added, a.files_removed) == (b.files_added, b.files_removed)
    assert b.engine == "spark" and b.z_order == ["trace_id"]
    assert normalized(rs) == normalized(sp) == before
    assert rs.statistics().files == sp.statistics().files

    # a file a writer has written and not committed yet (e.g. the bridge's next append): Spark's
    # own VACUUM RETAIN 0 HOURS deleted it; both engines leave it until it is a week old
    table_dir = Path(sp.uri)
    in_flight = next(table_dir.glob("service_name=*/date=*")) / "part-in-flight.parquet"
    in_flight.write_bytes(b"PAR1 not committed yet")
    listed_rs = rs.vacuum(retention_hours=0, dry_run=True)
    listed_sp = sp.vacuum(retention_hours=0, dry_run=True)
    # the same unreferenced files: each engine's compaction removed the same originals
    assert sorted(listed_rs.files) == sorted(listed_sp.files)
    assert len(listed_sp.files) == a.files_removed
    removed = sp.vacuum(retention_hours=0)
    assert removed.files == listed_sp.files and not removed.dry_run
    assert not any((table_dir / f).exists() for f in removed.files)
    assert in_flight.exists()
    assert normalized(sp) == before


def test_spark_dialect_renders_what_spark_parses(spark, twins) -> None:
    rs, _ = twins
    schema = rs.schema
    frame = spark.read.format("delta").load(rs.uri)
    for text in (
        "attributes['tenant'] = 't1'",
        "kind NOT IN ('SPAN_KIND_SERVER') AND parent_span_id IS NOT NULL",
        "duration_ns BETWEEN 1000000 AND 2000000 OR name LIKE 'cart%'",
        "name ILIKE 'CART%' OR name NOT ILIKE '%OP2'",
        "date >= '2024-11-20'",
    ):
        predicate = parse_predicate(text, schema)
        assert frame.where(predicate.to_sql("spark")).count() == rs.query().filter(text).count()


def test_restore_and_bulk_insert_same_on_both_engines(twins) -> None:
    rs, sp = twins
    before = normalized(rs)
    start = rs.version()
    assert sp.version() == start
    where = "service_name = 'cart'"
    assert rs.delete(where).deleted == sp.delete(where).deleted > 0
    a, b = rs.restore(start), sp.restore(start)
    assert b.restored_to == a.restored_to == start and b.version == a.version == start + 2
    assert (b.files_added, b.files_removed) == (a.files_added, a.files_removed)
    assert a.files_added > 0
    assert sp.history(1)[0].operation == "RESTORE"
    assert normalized(rs) == normalized(sp) == before

    rows = rs.query().filter(where).limit(3).to_arrow()
    a_insert, b_insert = rs.bulk_insert(rows), sp.bulk_insert(rows)
    assert a_insert.inserted == b_insert.inserted == 3
    assert (a_insert.engine, b_insert.engine) == ("delta-rs", "spark")
    assert "Apache-Spark" in str(sp.delta().history(1)[0].get("engineInfo", ""))
    assert normalized(rs) == normalized(sp)


def test_spark_delete_and_restore_report_their_own_commits(twins, monkeypatch) -> None:
    """The bridge appends while Spark deletes (seconds on Spark): the result still names the
    DELETE, and `restore(version=result.version - 1)` undoes exactly it."""
    _, sp = twins
    search = "service_name = 'search'"
    rows = sp.query().filter(search).count()
    engine = sp.connector.engines.spark
    appending_after(monkeypatch, engine, "delete", sp)
    deleted = sp.delete(search)
    assert deleted.deleted == rows > 0 and deleted.engine == "spark"
    assert operation_at(sp, deleted.version) == "DELETE"
    assert sp.version() == deleted.version + APPENDS

    appending_after(monkeypatch, engine, "restore", sp)
    restored = sp.restore(version=deleted.version - 1)
    assert operation_at(sp, restored.version) == "RESTORE"
    assert sp.version() == restored.version + APPENDS
    monkeypatch.undo()
    assert sp.query().filter(search).count() == rows


def test_spark_optimize_reports_its_own_commit(twins, monkeypatch) -> None:
    _, sp = twins
    appending_after(monkeypatch, sp.connector.engines.spark, "optimize", sp)
    result = sp.optimize(where="service_name = 'cart'")
    assert result.files_removed > 0 and result.engine == "spark"
    assert operation_at(sp, result.version) == "OPTIMIZE"
    # and the commit releasing the maintenance lease the call took (engines/lease.py)
    assert sp.version() == result.version + APPENDS + 1

    # nothing left to compact where no append went: no lease taken and released, and the
    # version the table was at
    monkeypatch.undo()
    version = sp.version()
    again = sp.optimize(where=f"service_name = 'cart' AND date = '{data.DAYS[0]}'")
    assert (again.version, again.files_removed, again.engine) == (version, 0, "spark")
    assert sp.version() == version


def test_spark_upsert_reports_its_own_commit(twins, monkeypatch) -> None:
    _, sp = twins
    engine = sp.connector.engines.spark
    appending_after(monkeypatch, engine, "merge", sp)
    records = sp.query().filter("service_name = 'checkout'").limit(3).to_arrow()
    upserted = sp.upsert(records)
    assert upserted.updated == 3 and upserted.engine == "spark"
    assert operation_at(sp, upserted.version) == "MERGE"
    assert sp.version() == upserted.version + APPENDS


def test_spark_insert_reports_its_own_commit(twins, monkeypatch) -> None:
    from pyspark.sql.readwriter import DataFrameWriter

    _, sp = twins
    before = sp.version()
    appending_after(monkeypatch, DataFrameWriter, "save", sp)  # Spark's commit of the append
    inserted = sp.bulk_insert(data.spans_request("cart", data.DAYS[1], 500))
    assert inserted.inserted > 0 and inserted.engine == "spark"
    assert inserted.version == before + 1
    assert sp.version() == inserted.version + APPENDS


# figures both engines report for each operation, under the names of `normalized_metrics`
COMMON_FIGURES = {
    "WRITE": {"rows_written", "files_added"},
    "MERGE": {
        "source_rows",
        "rows_inserted",
        "rows_updated",
        "rows_deleted",
        "rows_copied",
        "rows_written",
        "files_added",
        "files_removed",
        "execution_time_ms",
        "scan_time_ms",
        "rewrite_time_ms",
    },
    "DELETE": {
        "rows_deleted",
        "rows_copied",
        "files_added",
        "files_removed",
        "execution_time_ms",
        "scan_time_ms",
        "rewrite_time_ms",
    },
    "OPTIMIZE": {"files_added", "files_removed", "bytes_added", "bytes_removed"},
    "RESTORE": {"files_added", "files_removed"},
}


def test_history_metrics_have_one_set_of_names_on_both_engines(
    bridge_lake: Path, tmp_path: Path, spark
) -> None:
    """Commits of both engines on one table: `metrics` as each engine wrote them (Spark's
    camelCase strings, delta-rs's snake_case numbers), `normalized_metrics` under the same
    names as ints, agreeing with what each operation returned."""
    shutil.copytree(bridge_lake, tmp_path / "lake")
    spans = DeltaLakeConnector(DeltaConfig.for_path(tmp_path / "lake"), spark=spark).table("spans")
    day = data.DAYS[0]
    expected: dict[str, dict[int, dict[str, int]]] = {}  # engine -> version -> figures
    for engine, service in (("delta-rs", "cart"), ("spark", "search")):
        where = f"service_name = '{service}' AND date = '{day}'"
        inserted = spans.bulk_insert(data.spans_request(service, day, 7), engine=engine)
        before = spans.version()
        optimized = spans.optimize(where=where, engine=engine)
        restored = spans.restore(version=before, engine=engine)
        upserted = spans.upsert(spans.query().filter(where).limit(3).to_arrow(), engine=engine)
        deleted = spans.delete(f"{where} AND name = '{service} op1'", engine=engine)
        assert upserted.updated == 3 and deleted.deleted > 0 and optimized.files_removed > 1
        expected[engine] = {
            inserted.version: {"rows_written": inserted.inserted},
            upserted.version: {"rows_inserted": 0, "rows_updated": 3},
            deleted.version: {"rows_deleted": deleted.deleted},
            optimized.version: {
                "files_added": optimized.files_added,
                "files_removed": optimized.files_removed,
            },
            restored.version: {
                "files_added": restored.files_added,
                "files_removed": restored.files_removed,
            },
        }
    vacuumed = spans.vacuum(retention_hours=0)  # through delta-rs on either engine
    assert vacuumed.count > 0

    history = {entry.version: entry for entry in spans.history()}
    for engine, commits in expected.items():
        for version, figures in commits.items():
            entry = history[version]
            common = COMMON_FIGURES[entry.operation]
            assert common <= entry.normalized_metrics.keys(), (engine, entry)
            assert figures.items() <= entry.normalized_metrics.items(), (engine, entry)
    for entry in history.values():
        assert all(type(v) is int for v in entry.normalized_metrics.values()), entry

    # `metrics` stay as each engine wrote them
    spark_merge = history[max(v for v in expected["spark"] if history[v].operation == "MERGE")]
    assert spark_merge.metrics["numTargetRowsUpdated"] == "3"
    rs_merge = history[max(v for v in expected["delta-rs"] if history[v].operation == "MERGE")]
    assert rs_merge.metrics["num_target_rows_updated"] == 3

    start, end = (e for e in spans.history(2)[::-1])
    assert (start.operation, end.operation) == ("VACUUM START", "VACUUM END")
    assert start.normalized_metrics["files_to_delete"] == vacuumed.count
    assert end.normalized_metrics["files_deleted"] == vacuumed.count
    assert start.normalized_metrics["bytes_to_delete"] > 0
