"""Schema versions (otel_delta/tables/versions.py): today's rows appended to a table of schema
version 1 keep it complete (its retired columns computed), whichever writer appends, and both
versions' rows read back as the OTLP that was sent."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_delta.convert import spans_to_arrow
from otel_delta.convert.to_otlp import spans_from_arrow
from otel_delta.engines import DeltaRsEngine
from otel_delta.engines.data_files import table_filesystem
from otel_delta.errors import CommitError
from otel_delta.lakehouse import STATS_COLUMNS, Lakehouse
from otel_delta.stream.convert import FileTarget
from otel_delta.tables import TABLES
from otel_delta.tables.versions import (
    RETIRED,
    SCHEMA_VERSION,
    SCHEMA_VERSION_PROPERTY,
    conform,
)
from tests import corpus
from tests.tables.test_layout import assert_layout_encodings, column_encodings, interleaved_traces


def v1_spans_schema() -> pa.Schema:
    """The spans schema of version 1: the current one plus `end_time_unix_nano` after the
    start time."""
    schema = TABLES["spans"].schema
    at = schema.get_field_index("start_time_unix_nano") + 1
    return schema.insert(at, pa.field("end_time_unix_nano", pa.int64()))


def create_v1_spans(root: Path) -> str:
    """A spans table as otel-delta with schema version 1 created it."""
    lakehouse = Lakehouse(str(root))
    properties = lakehouse.table_properties("spans")
    properties[SCHEMA_VERSION_PROPERTY] = "1"
    properties[STATS_COLUMNS] += ",end_time_unix_nano"
    uri = lakehouse.uri("spans")
    DeltaTable.create(
        uri,
        v1_spans_schema(),
        partition_by=list(lakehouse.partition_by),
        configuration=properties,
        raise_if_key_not_exists=False,
    )
    return uri


def with_a_far_end(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """`request` plus a span ending at 2^63 ns: its stored end reads back negative, and its
    duration wraps, so start + duration overflows unless computed in wrapping arithmetic."""
    scope = request.resource_spans[0].scope_spans[0]
    far = scope.spans.add()
    far.CopyFrom(scope.spans[0])
    far.span_id = bytes.fromhex("0f" * 8)
    far.end_time_unix_nano = 2**63
    return request


def request_end_times(request: ExportTraceServiceRequest) -> dict[str, int]:
    return {
        span.span_id.hex(): span.end_time_unix_nano
        - (2**64 if span.end_time_unix_nano >= 2**63 else 0)
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }


def assert_end_times(table: pa.Table, request: ExportTraceServiceRequest) -> None:
    """Every row's stored end time is the OTLP one (as int64), and start + duration."""
    expected = request_end_times(request)
    assert table.num_rows == len(expected) > 0
    for row in table.select(["span_id", "end_time_unix_nano"]).to_pylist():
        assert row["end_time_unix_nano"] == expected[row["span_id"]], row
    derived = pc.add(table["start_time_unix_nano"], table["duration_ns"])
    assert derived.equals(table["end_time_unix_nano"])


def test_the_current_version_is_2_and_spans_no_longer_store_the_end_time() -> None:
    assert SCHEMA_VERSION == 2
    assert "end_time_unix_nano" not in TABLES["spans"].schema.names
    assert [(c.table, c.name, c.retired_in) for c in RETIRED] == [
        ("spans", "end_time_unix_nano", 2)
    ]


def test_conform_computes_retired_columns_in_the_table_order() -> None:
    request = with_a_far_end(ExportTraceServiceRequest.FromString(interleaved_traces(traces=3)))
    rows = spans_to_arrow(request).tables["spans"]
    laid_out = conform("spans", v1_spans_schema(), rows)
    assert laid_out.schema.names == v1_spans_schema().names
    assert_end_times(laid_out, request)
    # the current schema: the rows as they are, not a copy
    assert conform("spans", TABLES["spans"].schema, rows) is rows


def test_conform_fills_evolved_columns_with_null_and_keeps_unknown_ones_last() -> None:
    rows = pa.table({"b": [1, 2], "a": ["x", "y"], "extra": [True, False]})
    table = pa.schema([("a", pa.string()), ("b", pa.int64()), ("added", pa.float64())])
    laid_out = conform("logs", table, rows)
    assert laid_out.schema.names == ["a", "b", "added", "extra"]
    assert laid_out["added"].null_count == 2
    assert laid_out["a"].to_pylist() == ["x", "y"]


def test_spans_of_either_version_read_back_as_the_request() -> None:
    request = with_a_far_end(corpus.trace_request())
    rows = spans_to_arrow(request).tables["spans"]
    assert spans_from_arrow(rows) == request
    assert spans_from_arrow(conform("spans", v1_spans_schema(), rows)) == request


def test_delta_rs_appends_keep_a_version_1_table_complete(tmp_path: Path) -> None:
    uri = create_v1_spans(tmp_path)
    request = ExportTraceServiceRequest.FromString(interleaved_traces())
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    engine.append("spans", spans_to_arrow(request).tables["spans"])
    table = DeltaTable(uri)
    assert table.metadata().configuration[SCHEMA_VERSION_PROPERTY] == "1"
    stored = table.to_pyarrow_table()
    assert stored.schema.names == v1_spans_schema().names
    assert_end_times(stored, request)
    # written by the bridge's own writer in the table's layout: the end time delta-encoded
    (file,) = table.file_uris()
    parquet = pq.ParquetFile(file.removeprefix("file://"))
    encodings = column_encodings(parquet)
    assert "end_time_unix_nano" in encodings
    assert_layout_encodings(encodings, v1_spans_schema().names)
    # its statistics too, which that table's log records
    end = parquet.schema_arrow.get_field_index("end_time_unix_nano")
    assert parquet.metadata.row_group(0).column(end).statistics.has_min_max
    (add,) = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert add["max.end_time_unix_nano"] == max(request_end_times(request).values())


def test_a_new_table_records_the_current_version(tmp_path: Path) -> None:
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    engine.append("spans", spans_to_arrow(corpus.trace_request()).tables["spans"])
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.metadata().configuration[SCHEMA_VERSION_PROPERTY] == str(SCHEMA_VERSION)
    assert "end_time_unix_nano" not in table.schema().to_arrow().names


def test_stream_files_for_a_version_1_table_carry_its_columns(tmp_path: Path) -> None:
    uri = create_v1_spans(tmp_path)
    request = ExportTraceServiceRequest.FromString(interleaved_traces(traces=5))
    target = FileTarget(
        root=str(tmp_path),
        storage=None,
        partition_by=("service_name", "date"),
        compression="ZSTD",
        compression_level=3,
        stats_columns={"spans": None},
        schemas={"spans": pa.schema(DeltaTable(uri).schema().to_arrow())},
    )
    (written,) = target.write("spans", spans_to_arrow(request).tables["spans"])
    with table_filesystem(uri, None).open_input_file(written["path"]) as file:
        stored = pq.read_table(file)
    assert "end_time_unix_nano" in stored.column_names
    assert_end_times(stored, request)


@pytest.mark.e2e
def test_spark_appends_keep_a_version_1_table_complete(tmp_path: Path, spark) -> None:
    from otel_delta.engines import SparkEngine

    uri = create_v1_spans(tmp_path)
    request = with_a_far_end(ExportTraceServiceRequest.FromString(interleaved_traces(traces=8)))
    engine = SparkEngine(Lakehouse(str(tmp_path)), lambda: spark)
    engine.append("spans", spans_to_arrow(request).tables["spans"])
    stored = DeltaTable(uri).to_pyarrow_table()
    assert stored.schema.names == v1_spans_schema().names
    assert_end_times(stored, request)
    # and a query's end time is the stored one (but for the span ending past 2^63 ns, where
    # ANSI SQL reports the overflow)
    (row,) = (
        spark.read.format("delta")
        .load(uri)
        .where("end_time_unix_nano >= 0")
        .selectExpr(f"count_if(end_time_unix_nano != {RETIRED[0].sql}) AS wrong", "count(*) AS n")
        .collect()
    )
    assert row.wrong == 0 and row.n == stored.num_rows - 1


def test_connector_upserts_keep_a_version_1_table_complete(tmp_path: Path) -> None:
    from otel_delta.connector import DeltaConfig, DeltaLakeConnector

    uri = create_v1_spans(tmp_path)
    first = ExportTraceServiceRequest.FromString(interleaved_traces(traces=4))
    spans = DeltaLakeConnector(DeltaConfig.for_path(tmp_path)).table("spans")
    assert spans.upsert(first).inserted == 24
    again = ExportTraceServiceRequest.FromString(interleaved_traces(traces=4))
    for span in again.resource_spans[0].scope_spans[0].spans:
        span.end_time_unix_nano += 5  # a changed end time: updated in place
    assert spans.upsert(again).updated == 24
    stored = DeltaTable(uri).to_pyarrow_table()
    assert stored.schema.names == v1_spans_schema().names
    assert_end_times(stored, again)


def test_a_table_of_a_newer_version_takes_no_rows_of_this_one(tmp_path: Path) -> None:
    """After a downgrade, a table a newer otel-delta created is refused by every writer of rows
    (the bridge's appends, the connector's upsert and insert alike) and left as it was: its
    columns may mean what this version does not know. The connector's upsert wrote into it,
    and an insert with a new column added the column before the append refused."""
    from otel_delta.connector import DeltaConfig, DeltaLakeConnector

    DeltaRsEngine(Lakehouse(str(tmp_path))).append(
        "spans", spans_to_arrow(corpus.trace_request()).tables["spans"]
    )
    uri = str(tmp_path / "spans")
    newer = str(SCHEMA_VERSION + 1)
    DeltaTable(uri).alter.set_table_properties(
        {SCHEMA_VERSION_PROPERTY: newer}, raise_if_not_exists=False
    )
    before = DeltaTable(uri)
    refusal = f"table spans has schema version {newer}, newer than this bridge's"
    with pytest.raises(CommitError, match=refusal):
        DeltaRsEngine(Lakehouse(str(tmp_path))).append(
            "spans", spans_to_arrow(corpus.trace_request()).tables["spans"]
        )
    spans = DeltaLakeConnector(DeltaConfig.for_path(tmp_path)).table("spans")
    with pytest.raises(CommitError, match=refusal):
        spans.upsert(corpus.trace_request())
    with_new_column = [{**before.to_pyarrow_table().to_pylist()[0], "ticket": "T-1"}]
    with pytest.raises(CommitError, match=refusal):
        spans.bulk_insert(with_new_column)
    after = DeltaTable(uri)
    assert after.version() == before.version()
    assert after.schema().to_arrow() == before.schema().to_arrow()
