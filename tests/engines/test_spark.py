"""The Spark writer against real tables: parity with delta-rs, and both engines on one table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from otel_delta.engines import DeltaRsEngine, SparkEngine
from otel_delta.lakehouse import Lakehouse
from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.tables import TABLES
from tests import corpus

pytestmark = pytest.mark.e2e


def corpus_tables() -> dict[str, pa.Table]:
    """Every table's rows from the every-field corpus, converted as the receiver does."""
    tables: dict[str, pa.Table] = {}
    for signal, request in (
        ("traces", corpus.trace_request()),
        ("metrics", corpus.metrics_request()),
        ("logs", corpus.logs_request()),
    ):
        tables.update(SIGNALS_BY_NAME[signal].convert(request).tables)
    assert set(tables) == set(TABLES)
    return tables


def sort_key(table: pa.Table) -> list[tuple[str, str]]:
    """Every scalar column: a total order, whatever order each engine wrote the rows in."""
    return [(f.name, "ascending") for f in table.schema if not pa.types.is_nested(f.type)]


def canonical(table: pa.Table) -> pa.Table:
    return table.sort_by(sort_key(table))


def spark_writer(root: Path, spark) -> SparkEngine:
    return SparkEngine(Lakehouse(str(root)), lambda: spark)


def test_spark_and_delta_rs_write_identical_tables(tmp_path: Path, spark) -> None:
    rs_root, spark_root = tmp_path / "rs", tmp_path / "spark"
    rs, sp = DeltaRsEngine(Lakehouse(str(rs_root))), spark_writer(spark_root, spark)
    for name, data in corpus_tables().items():
        rs.append(name, data)
        assert sp.append(name, data) == 1  # version 0 is the create, 1 the append
        by_rs = DeltaTable(str(rs_root / name))
        by_spark = DeltaTable(str(spark_root / name))
        # schema, partitioning, properties and protocol: the same whichever engine wrote
        assert by_spark.schema() == by_rs.schema(), name
        assert by_spark.metadata().partition_columns == by_rs.metadata().partition_columns
        assert by_spark.metadata().configuration == by_rs.metadata().configuration
        assert by_spark.metadata().description == TABLES[name].description
        assert by_spark.protocol() == by_rs.protocol(), name
        # read back by delta-rs: identical Arrow schema (maps, lists, structs, µs UTC, date32)
        # and identical rows, uint64 above 2^63 included
        rs_rows, spark_rows = by_rs.to_pyarrow_table(), by_spark.to_pyarrow_table()
        assert spark_rows.schema == rs_rows.schema == data.schema, name
        assert canonical(spark_rows).equals(canonical(rs_rows)), name
        # read back by Spark: the same rows from both tables
        frames = [
            spark.read.format("delta").load(str(root / name)) for root in (rs_root, spark_root)
        ]
        assert frames[0].schema == frames[1].schema
        arrow = [canonical(frame.toArrow()) for frame in frames]
        assert arrow[0].equals(arrow[1]) and arrow[0].num_rows == data.num_rows, name


def test_spark_files_are_zstd_parquet_with_int64_timestamps(tmp_path: Path, spark) -> None:
    import pyarrow.parquet as pq

    spark_writer(tmp_path, spark).append("spans", corpus_tables()["spans"])
    uri = DeltaTable(str(tmp_path / "spans")).file_uris()[0]
    meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
    column = meta.row_group(0).column(meta.schema.names.index("start_time"))
    assert column.compression == "ZSTD"
    assert column.physical_type == "INT64"  # not legacy INT96


def test_table_written_by_both_engines_stays_usable_by_both(tmp_path: Path, spark) -> None:
    data = corpus_tables()["logs"]
    rs, sp = DeltaRsEngine(Lakehouse(str(tmp_path))), spark_writer(tmp_path, spark)
    rs.append("logs", data)
    sp.append("logs", data)
    rs.append("logs", data)
    sp.append("logs", data)
    table = DeltaTable(str(tmp_path / "logs"))
    assert table.version() == 4
    assert table.to_pyarrow_table().num_rows == 4 * data.num_rows
    assert spark.read.format("delta").load(str(tmp_path / "logs")).count() == 4 * data.num_rows
    # a delta-rs writer opened before Spark's commits still appends (it reloads on conflict)
    assert rs.append("logs", data) == 5


def test_table_created_by_plain_spark_is_writable_by_delta_rs(tmp_path: Path, spark) -> None:
    """A user's own Spark job creates the table (session defaults: no deletion vectors etc.)."""
    data = corpus_tables()["spans"]
    path = str(tmp_path / "spans")
    spark.createDataFrame(data).write.format("delta").partitionBy("service_name", "date").option(
        "delta.checkpointInterval", "100"
    ).save(path)
    protocol = DeltaTable(path).protocol()
    assert protocol.reader_features is None or "deletionVectors" not in protocol.reader_features
    rs = DeltaRsEngine(Lakehouse(str(tmp_path)))
    rs.append("spans", data)
    assert canonical(DeltaTable(path).to_pyarrow_table()).equals(
        canonical(pa.concat_tables([data, data]))
    )


def test_a_commit_conflict_in_the_jvm_is_one_the_engine_retries(tmp_path: Path, spark) -> None:
    """Delta's conflicts (io.delta.exceptions.*) reach Python as the exceptions `conflicts()`
    names, so the connector re-runs an operation that lost a race against an append (e.g. the
    bridge's) and ends in ConcurrentModificationError, instead of a raw Py4JJavaError on the
    first conflict. delta-spark converts them only once `delta.exceptions.captured` is loaded."""
    retry_on = spark_writer(tmp_path, spark).conflicts()
    jvm = spark.sparkContext._jvm
    conflict = jvm.io.delta.exceptions.ConcurrentAppendException("Files were added")
    with pytest.raises(retry_on):
        jvm.scala.util.Failure(conflict).get()  # throws it, as a failed DELETE/MERGE would
