"""The readers users query telemetry with, on files written in the table layout
(DELTA_BINARY_PACKED times, ids without dictionary), as appended and as compaction rewrites
them: delta-rs, Polars, DuckDB and Spark all read the same rows, and the trace-id lookup a
user would write in each returns that trace's spans."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_delta.engines import DeltaRsEngine
from otel_delta.lakehouse import Lakehouse
from otel_delta.maintenance import compaction
from otel_delta.tables import TABLES
from otel_delta.tables.versions import RETIRED
from tests.tables.test_layout import (
    METRIC_VALUES,
    interleaved_traces,
    metric_tables,
    spans_table,
)
from tests.tables.test_versions import request_end_times

pytestmark = pytest.mark.e2e

SCALARS = ["trace_id", "span_id", "parent_span_id", "name", "start_time_unix_nano",
           "duration_ns"]  # fmt: skip
# the OTLP end time of each span sent, and the SQL that gives it back (schema version 2)
SENT_END_TIMES = request_end_times(ExportTraceServiceRequest.FromString(interleaved_traces()))
(END_TIME,) = (column.sql for column in RETIRED if column.name == "end_time_unix_nano")


def rows(table: pa.Table, columns: Sequence[str] = SCALARS) -> list[str]:
    """Each row's values in `columns`, as text, sorted: text orders rows with nulls in them,
    and tells an integer from a double of the same value."""
    return sorted(map(repr, zip(*(table[name].to_pylist() for name in columns), strict=True)))


@pytest.fixture(scope="module", params=["appended", "clustered"])
def written(request, tmp_path_factory) -> tuple[Path, pa.Table]:
    """The spans as ingestion writes them (delta-rs), or after maintenance's clustered
    compaction rewrote them (pyarrow's writer, sorted by trace id, statistics of our own)."""
    root = tmp_path_factory.mktemp("readers")
    data = spans_table()
    engine = DeltaRsEngine(Lakehouse(str(root)))
    if request.param == "appended":
        engine.append("spans", data)
    else:
        step = -(-data.num_rows // 4)
        for start in range(0, data.num_rows, step):
            engine.append("spans", data.slice(start, step))
        delta = DeltaTable(str(root / "spans"))
        done = compaction.compact(
            delta, TABLES["spans"].layout, compaction.RewriteOptions(), older_than_ms=2**62
        )
        assert done.files_removed == 4 and done.files_added == 1
    return root / "spans", data


def some_trace(data: pa.Table) -> tuple[str, int]:
    trace_id = data["trace_id"][0].as_py()
    return trace_id, data["trace_id"].to_pylist().count(trace_id)


def test_delta_rs_reads_every_row(written) -> None:
    path, data = written
    assert rows(DeltaTable(str(path)).to_pyarrow_table()) == rows(data)


def test_polars_reads_every_row_and_finds_a_trace(written) -> None:
    path, data = written
    frame = pl.read_delta(str(path))
    assert rows(frame.to_arrow()) == rows(data)
    trace_id, count = some_trace(data)
    found = pl.scan_delta(str(path)).filter(pl.col("trace_id") == trace_id).collect()
    assert found.height == count
    # the span's end time, as a user computes it (tables/versions.py)
    ends = found.select(end=pl.col("start_time_unix_nano") + pl.col("duration_ns"))["end"]
    assert dict(zip(found["span_id"].to_list(), ends.to_list(), strict=True)) == {
        span_id: SENT_END_TIMES[span_id] for span_id in found["span_id"].to_list()
    }


def test_duckdb_reads_every_row_and_finds_a_trace(written) -> None:
    path, data = written
    dataset = DeltaTable(str(path)).to_pyarrow_dataset()  # DuckDB scans it in place
    connection = duckdb.connect()
    connection.register("spans", dataset)
    assert rows(connection.sql("SELECT * FROM spans").to_arrow_table()) == rows(data)
    trace_id, count = some_trace(data)
    found = connection.execute(
        f"SELECT span_id, {END_TIME} FROM spans WHERE trace_id = ? ORDER BY start_time_unix_nano",
        [trace_id],
    ).fetchall()
    assert len(found) == count
    assert dict(found) == {span_id: SENT_END_TIMES[span_id] for span_id, _ in found}


def test_spark_reads_every_row_and_finds_a_trace(written, spark) -> None:
    path, data = written
    frame = spark.read.format("delta").load(str(path))
    assert rows(frame.toArrow()) == rows(data)
    trace_id, count = some_trace(data)
    frame.createOrReplaceTempView("layout_spans")
    found = spark.sql(
        f"SELECT span_id, {END_TIME} AS end FROM layout_spans WHERE trace_id = '{trace_id}'"
    ).collect()
    assert len(found) == count
    assert {row.span_id: row.end for row in found} == {
        row.span_id: SENT_END_TIMES[row.span_id] for row in found
    }


def test_spark_and_duckdb_read_the_metric_values_as_written(tmp_path: Path, spark) -> None:
    """Integer values delta-encoded and doubles without dictionary (the metrics layout), with
    the corpus's extremes (INT64 min, a count past 2^63 stored bit for bit) and nulls."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    for name, data in metric_tables().items():
        engine.append(name, data)
        columns = [c for c in METRIC_VALUES if c in data.column_names]
        frame = spark.read.format("delta").load(str(tmp_path / name)).select(*columns)
        assert rows(frame.toArrow(), columns) == rows(data, columns)
        # DuckDB's own Parquet reader on the table's files
        files = [u.removeprefix("file://") for u in DeltaTable(str(tmp_path / name)).file_uris()]
        listed = ", ".join(f"'{f}'" for f in files)
        duck = duckdb.connect().sql(f"SELECT * FROM read_parquet([{listed}])").to_arrow_table()
        assert rows(duck, columns) == rows(data, columns)
