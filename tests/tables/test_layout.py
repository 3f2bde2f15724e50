"""Column encodings of the files the writer produces (otel_delta/tables/layout.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from otel_delta.connector.bloom import may_contain, read_bitset, xxh64
from otel_delta.convert import logs_to_arrow, metrics_to_arrow, spans_to_arrow
from otel_delta.engines import DeltaRsEngine
from otel_delta.lakehouse import Lakehouse
from otel_delta.maintenance import compaction
from otel_delta.tables import TABLES
from otel_delta.tables.layout import RESOURCE_COLUMNS, bloom_filter_options
from tests import corpus

BASE_NS = 1_795_000_000_123_456_789


def interleaved_traces(traces: int = 40, spans_per_trace: int = 6, seed: int = 3) -> bytes:
    """One request whose spans of many traces arrive interleaved, as a Collector batches them."""
    rng = random.Random(seed)
    spans = []
    for t in range(traces):
        trace_id = rng.randbytes(16)
        root = rng.randbytes(8)
        start = BASE_NS + t * 7_919_000 + rng.randrange(10**6)
        for s in range(spans_per_trace):
            span_id = root if s == 0 else rng.randbytes(8)
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=b"" if s == 0 else root,
                    name=f"op-{s}",
                    start_time_unix_nano=start + s * 1_000,
                    end_time_unix_nano=start + s * 1_000 + rng.randrange(10**7),
                    attributes=[KeyValue(key="n", value=AnyValue(int_value=s))],
                )
            )
    rng.shuffle(spans)
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="layout-svc"))
    )
    return ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()


def spans_table() -> pa.Table:
    request = ExportTraceServiceRequest.FromString(interleaved_traces())
    return spans_to_arrow(request).tables["spans"]


def assert_layout_encodings(encodings: dict[str, set[str]], columns: list[str]) -> None:
    """The spans layout's encodings, on the layout's columns that `columns` has."""
    layout = TABLES["spans"].layout
    delta = [name for name in layout.arrival_delta_columns if name in columns]
    plain = [name for name in layout.plain_columns if name in columns]
    assert len(delta) >= 2 and len(plain) >= 4
    for name in delta:
        assert "DELTA_BINARY_PACKED" in encodings[name], (name, encodings[name])
    for name in (*plain, *delta):
        leaves = [path for path in encodings if path == name or path.startswith(f"{name}.")]
        assert leaves, name
        for leaf in leaves:
            assert not encodings[leaf] & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}, leaf


def column_encodings(parquet: pq.ParquetFile) -> dict[str, set[str]]:
    group = parquet.metadata.row_group(0)
    return {
        group.column(i).path_in_schema: set(group.column(i).encodings)
        for i in range(group.num_columns)
    }


def test_the_writer_encodes_columns_by_the_layout(tmp_path: Path) -> None:
    data = spans_table()
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    engine.append("spans", data)
    table = DeltaTable(str(tmp_path / "spans"))
    (uri,) = table.file_uris()
    parquet = pq.ParquetFile(uri.removeprefix("file://"))
    stored = parquet.read()
    assert stored.num_rows == data.num_rows
    assert sorted(stored["span_id"].to_pylist()) == sorted(data["span_id"].to_pylist())

    encodings = column_encodings(parquet)
    group = parquet.metadata.row_group(0)
    assert_layout_encodings(encodings, data.column_names)
    # columns the layout does not name keep the writer's default (dictionary)
    assert "RLE_DICTIONARY" in encodings["name"]
    # min/max for top-level columns only, none for map and list leaves (attribute values)
    with_stats = {
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).statistics is not None and group.column(i).statistics.has_min_max
    }
    assert {"trace_id", "name", "start_time_unix_nano"} <= with_stats
    # and only for the columns the Delta log records statistics of (the layout's, here)
    assert with_stats == set(TABLES["spans"].layout.stats_columns)
    assert not {path for path in with_stats if "." in path}, with_stats


def test_compaction_keeps_times_delta_encoded_and_gives_the_resource_its_dictionary(
    tmp_path: Path,
) -> None:
    """As ingested (arrival order) the times are DELTA_BINARY_PACKED and the resource's
    columns have no dictionary; as today's compaction writes them (each row group's traces in
    time order) the times stay DELTA_BINARY_PACKED and the resource's columns have their
    dictionary back. (A closed day's Z-order, sorted by trace id alone, writes the times
    PLAIN: tests/maintenance/test_compaction.py.)"""
    data = spans_table()
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    half = data.num_rows // 2
    engine.append("spans", data.slice(0, half))
    engine.append("spans", data.slice(half))
    layout = TABLES["spans"].layout
    times = [name for name in layout.arrival_delta_columns if name in data.column_names]
    resource = [name for name in layout.arrival_plain_columns if name in data.column_names]
    assert len(times) >= 2 and "resource_attributes" in resource

    def encodings_of_live_files() -> list[dict[str, set[str]]]:
        table = DeltaTable(str(tmp_path / "spans"))
        return [
            column_encodings(pq.ParquetFile(uri.removeprefix("file://")))
            for uri in table.file_uris()
        ]

    def leaves(encodings: dict[str, set[str]], name: str) -> list[set[str]]:
        found = [e for path, e in encodings.items() if path.split(".", 1)[0] == name]
        assert found, name
        return found

    dictionary = {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}
    appended = encodings_of_live_files()
    assert len(appended) == 2
    for encodings in appended:
        for name in times:
            assert "DELTA_BINARY_PACKED" in encodings[name], (name, encodings[name])
        for name in resource:
            assert all(not e & dictionary for e in leaves(encodings, name)), name

    done = compaction.compact(
        DeltaTable(str(tmp_path / "spans")),
        layout,
        compaction.RewriteOptions(),
        older_than_ms=2**62,
    )
    assert done.files_removed == 2 and done.files_added == 1
    (clustered,) = encodings_of_live_files()
    for name in times:
        assert "DELTA_BINARY_PACKED" in clustered[name], (name, clustered[name])
        assert not clustered[name] & dictionary, name
    assert clustered["resource_attributes.key_value.key"] & dictionary
    stored = DeltaTable(str(tmp_path / "spans")).to_pyarrow_table()
    assert sorted(stored["span_id"].to_pylist()) == sorted(data["span_id"].to_pylist())


def test_every_signals_ingested_files_keep_the_resource_without_dictionary(
    tmp_path: Path,
) -> None:
    """Spans, logs and each metrics table: the resource's columns repeat one map on every row
    of a request, so the files the bridge appends write them without dictionary."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    converted = {
        **spans_to_arrow(corpus.trace_request()).tables,
        **logs_to_arrow(corpus.logs_request()).tables,
        **metrics_to_arrow(corpus.metrics_request()).tables,
    }
    checked = []
    for name, data in converted.items():
        if not data.num_rows:
            continue
        assert TABLES[name].layout.arrival_plain_columns == RESOURCE_COLUMNS, name
        engine.append(name, data)
        for uri in DeltaTable(str(tmp_path / name)).file_uris():
            encodings = column_encodings(pq.ParquetFile(uri.removeprefix("file://")))
            leaves = [e for path, e in encodings.items() if path.startswith("resource_attributes.")]
            assert leaves and all(not e & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} for e in leaves)
            assert "RLE_DICTIONARY" in encodings["scope_name"], (name, encodings["scope_name"])
        checked.append(name)
    assert {"spans", "logs", "metrics_gauge", "metrics_sum", "metrics_histogram"} <= set(checked)


METRIC_VALUES = ("value_int", "value_double", "count", "sum", "min", "max")


def metric_tables() -> dict[str, pa.Table]:
    """The corpus's metrics tables (extreme, negative and null values among them)."""
    converted = metrics_to_arrow(corpus.metrics_request()).tables
    return {name: data for name, data in converted.items() if data.num_rows}


def test_metric_values_are_plain_and_integers_delta_encoded_as_appended_and_compacted(
    tmp_path: Path,
) -> None:
    """A measured value seldom repeats: no dictionary for the doubles, DELTA_BINARY_PACKED
    for the integers (value_int, count), in the files ingestion appends and in those
    compaction writes; every value reads back as written."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    dictionary = {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}
    checked: set[str] = set()
    for name, data in metric_tables().items():
        layout = TABLES[name].layout
        integers = [
            c for c in layout.delta_columns if c in METRIC_VALUES and c in data.column_names
        ]
        doubles = [c for c in layout.plain_columns if c in data.column_names]
        assert integers or doubles, name
        half = max(1, data.num_rows // 2)
        engine.append(name, data.slice(0, half))
        engine.append(name, data.slice(half))
        delta = DeltaTable(str(tmp_path / name))
        appended = [pq.ParquetFile(uri.removeprefix("file://")) for uri in delta.file_uris()]
        done = compaction.compact(delta, layout, compaction.RewriteOptions(), older_than_ms=2**62)
        assert done.files_added == 1, name
        (compacted,) = DeltaTable(str(tmp_path / name)).file_uris()
        for parquet in [*appended, pq.ParquetFile(compacted.removeprefix("file://"))]:
            encodings = column_encodings(parquet)
            for column in integers:
                assert "DELTA_BINARY_PACKED" in encodings[column], (name, column)
            for column in (*integers, *doubles):
                assert not encodings[column] & dictionary, (name, column, encodings[column])
        stored = DeltaTable(str(tmp_path / name)).to_pyarrow_table()
        for column in (*integers, *doubles):
            assert sorted(map(str, stored[column].to_pylist())) == sorted(
                map(str, data[column].to_pylist())
            ), (name, column)
        checked.update(integers + doubles)
    assert set(METRIC_VALUES) <= checked


def _trace_id_filters(table: DeltaTable) -> list[tuple[list[str], bytes | None]]:
    """Per row group of the table's live files: its trace ids and their bloom filter."""
    found = []
    for uri in table.file_uris():
        path = uri.removeprefix("file://")
        parquet = pq.ParquetFile(path)
        index = parquet.metadata.schema.names.index("trace_id")
        with pa.OSFile(path) as source:
            for g in range(parquet.metadata.num_row_groups):
                chunk = parquet.metadata.row_group(g).column(index)
                bitset = None
                if chunk.bloom_filter_offset is not None:
                    bitset = read_bitset(
                        source, chunk.bloom_filter_offset, chunk.bloom_filter_length
                    )
                    assert bitset is not None
                ids = parquet.read_row_group(g, columns=["trace_id"])["trace_id"].to_pylist()
                found.append((ids, bitset))
    return found


def test_files_as_ingested_have_bloom_filters_on_the_trace_id_and_compacted_ones_not(
    tmp_path: Path,
) -> None:
    """Arrival order leaves every row group's trace ids spanning the whole range: a filter
    per row group holds each of them (connector/bloom.py reads it). Compaction sorts by the
    trace id, and its files skip by statistics: no filter there. Metrics have no trace id."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    rows = {
        "spans": spans_table(),
        "logs": logs_to_arrow(corpus.logs_request()).tables["logs"],
    }
    for name, data in rows.items():
        half = data.num_rows // 2
        engine.append(name, data.slice(0, half))  # two files: compaction joins them
        engine.append(name, data.slice(half))
        assert TABLES[name].layout.bloom_columns == ("trace_id",)
        ingested = _trace_id_filters(DeltaTable(str(tmp_path / name)))
        assert ingested and all(bitset is not None for _, bitset in ingested)
        for ids, bitset in ingested:
            assert bitset is not None
            assert all(may_contain(bitset, xxh64(i.encode())) for i in ids)
        done = compaction.compact(
            DeltaTable(str(tmp_path / name)),
            TABLES[name].layout,
            compaction.RewriteOptions(),
            older_than_ms=2**62,
        )
        assert done.files_added >= 1
        compacted = _trace_id_filters(DeltaTable(str(tmp_path / name)))
        assert compacted and all(bitset is None for _, bitset in compacted)
    gauge = metrics_to_arrow(corpus.metrics_request()).tables["metrics_gauge"]
    assert TABLES["metrics_gauge"].layout.bloom_columns == ()
    assert bloom_filter_options(TABLES["metrics_gauge"].layout, gauge.schema, 10) is None
    assert bloom_filter_options(TABLES["spans"].layout, rows["spans"].schema, 0) is None
