"""Bytes on disk: our Delta tables against the OTLP that was sent, on a realistic corpus.

The corpus (bench/corpus.py) is what SDKs in a microservice app emit through a Collector's
batch processor: trace trees across services, semantic-convention attributes, errors with
stack traces, links, correlated logs, metrics. For each signal this prints bytes per item of

- the OTLP requests: protobuf as serialized, gzip (level 6, the Collector's default) and zstd
  (level 3) of each request, as they would cross the wire;
- our tables as ingestion first writes them: each request's rows appended by the bridge's
  writer (pyarrow with the table's layout and codec, committed by delta-rs) as one commit, as
  the bridge's flush does;
  and, as the baseline of the layout, the same commits with delta-rs's default encodings;
- after today's clustered compaction (otel_delta/maintenance/compaction.py, what maintenance
  runs on the open partition);
- once the day is over (`closed`): what maintenance then does to a partition whose files'
  trace id ranges overlap (delta-rs's Z-order by trace id across the partition, then
  bin-packing). On the corpus today's compaction leaves one file per partition, which a
  closed day would keep as it is; a day of real volume leaves several (one per maintenance
  round, at most GROUP_INPUT_BYTES of input each), which overlap. So `closed` is measured on
  a copy of the files as first written: the Z-order's result is the same from either;

and, for spans and logs, where the bytes go: compressed bytes per item of each top-level
column in the compacted files; and what the schema changes issue #14 names would save there
(`what_if`): the compacted files rewritten with the same rows, row groups and encodings, but
the hex ids as fixed-size binary, then also without the TIMESTAMP copy of the nanosecond time,
then also with the table's most frequent attribute keys (HOT_ATTRIBUTES of them, counted over
its rows) moved out of the map into typed columns of their own, as Tempo's dedicated columns
do. `--partition-by date` measures the tables partitioned by date alone, where a trace's spans
(and its log records) share a file instead of spreading over one partition per service.

    .venv/bin/python -m bench.storage --traces 4000
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from deltalake import DeltaTable, WriterProperties, write_deltalake
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from bench.common import RESULTS_DIR, finish, workdir
from bench.corpus import Corpus, build_corpus
from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.convert import metrics_to_arrow
from otel_delta.convert.native import native_converter
from otel_delta.engines.data_files import stats_columns
from otel_delta.maintenance import closed_days, compaction
from otel_delta.maintenance.tasks import TablePolicy
from otel_delta.tables import DEFAULT_PARTITION_BY, TABLES
from otel_delta.tables.layout import COMPACTION_LEVEL, INGEST_LEVEL, parquet_options
from otel_delta.tables.packed import unpack

RESULTS_FILE = RESULTS_DIR / "storage-latest.json"
GZIP_LEVEL = 6  # compress/gzip's default, which the Collector's gzip compression uses
ZSTD_LEVEL = 3  # zstd's default
SIGNALS = ("traces", "logs", "metrics")
TABLES_OF = {
    "traces": ("spans",),
    "logs": ("logs",),
    "metrics": tuple(name for name in TABLES if name.startswith("metrics_")),
}
# what-if schema changes, for the tables with ids: the hex id columns and their bytes as binary,
# and the TIMESTAMP column that repeats a nanosecond BIGINT one
BINARY_IDS = {
    "spans": {"trace_id": 16, "span_id": 8, "parent_span_id": 8},
    "logs": {"trace_id": 16, "span_id": 8},
}
TIMESTAMP_COPIES = {"spans": "start_time", "logs": "time"}
# the most frequent attribute keys a what-if moves into typed columns (the corpus's spans: the
# HTTP, database and server keys of semantic conventions; its logs: the code location keys)
HOT_ATTRIBUTES = 12
TYPED = {"int": pa.int64(), "double": pa.float64(), "bool": pa.bool_()}
EVERYTHING = 2**62  # a cutoff every file is older than
# the baseline of our layout: delta-rs's defaults with the bridge's default codec
DEFAULTS = WriterProperties(compression="ZSTD", compression_level=INGEST_LEVEL)


def requests_of(corpus: Corpus, signal: str) -> list[bytes]:
    return {"traces": corpus.traces, "logs": corpus.logs, "metrics": corpus.metrics}[signal]


def items_of(corpus: Corpus, signal: str) -> int:
    return {
        "traces": corpus.spans,
        "logs": corpus.log_records,
        "metrics": corpus.metric_points,
    }[signal]


def otlp_bytes(requests: list[bytes]) -> dict[str, int]:
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return {
        "otlp_raw": sum(len(r) for r in requests),
        "otlp_gzip": sum(len(gzip.compress(r, compresslevel=GZIP_LEVEL)) for r in requests),
        "otlp_zstd": sum(len(compressor.compress(r)) for r in requests),
    }


def convert(signal: str, request: bytes) -> dict:
    native = native_converter(signal)
    if native is not None:
        converted = native(request)
    else:
        converted = metrics_to_arrow(ExportMetricsServiceRequest.FromString(request))
    assert converted is not None and not converted.rejected.count, "corpus item rejected"
    return converted.tables


def table_bytes(lake: Path, names: tuple[str, ...]) -> tuple[int, int]:
    """(bytes, files) of the live files of the tables that exist."""
    total = files = 0
    for name in names:
        if not (lake / name / "_delta_log").exists():
            continue
        for file in compaction.candidates(DeltaTable(str(lake / name))):
            total += file.size
            files += 1
    return total, files


def column_bytes(lake: Path, name: str) -> dict[str, int]:
    """Compressed bytes of each top-level column over the live files of a table."""
    sizes: dict[str, int] = defaultdict(int)
    delta = DeltaTable(str(lake / name))
    for file in compaction.candidates(delta):
        metadata = pq.read_metadata(lake / name / file.path)
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                sizes[chunk.path_in_schema.split(".", 1)[0]] += chunk.total_compressed_size
    return dict(sizes)


def binary_ids(rows: pa.Table, sizes: dict[str, int]) -> pa.Table:
    """`rows` with the named hex id columns as fixed-size binary (an empty id: null)."""
    for name, size in sizes.items():
        values = [bytes.fromhex(v) if v else None for v in rows.column(name).to_pylist()]
        at = rows.schema.get_field_index(name)
        rows = rows.set_column(
            at, pa.field(name, pa.binary(size)), pa.array(values, pa.binary(size))
        )
    return rows


def hot_keys(files: list[pa.Table], count: int) -> list[str]:
    """The `count` attribute keys found on most rows of `files`."""
    seen: Counter[str] = Counter()
    for rows in files:
        for entries in rows.column("attributes").to_pylist():
            seen.update(key for key, _ in entries or ())
    return [key for key, _ in seen.most_common(count)]


def typed_value(text: str | None, kind: str | None) -> object:
    """An attribute's text as the value of its typed column (`attribute_types` says the type)."""
    if text is None or kind not in TYPED:
        return text
    return {"int": int, "double": float, "bool": lambda t: t == "true"}[kind](text)


def hot_columns(rows: pa.Table, keys: list[str]) -> pa.Table:
    """`rows` with each of `keys` moved out of `attributes`/`attribute_types` into a column of
    its own (`attr.<key>`), typed as the key's values are (text when they mix types)."""
    maps = [dict(entries or ()) for entries in rows.column("attributes").to_pylist()]
    types = [dict(entries or ()) for entries in rows.column("attribute_types").to_pylist()]
    for key in keys:
        pairs = [
            (values.pop(key, None), kinds.pop(key, None))
            for values, kinds in zip(maps, types, strict=True)
        ]
        found = {kind for text, kind in pairs if text is not None}
        kind = found.pop() if len(found) == 1 else None
        values = [typed_value(text, kind) for text, _ in pairs]
        rows = rows.append_column(f"attr.{key}", pa.array(values, TYPED.get(kind, pa.string())))
    for column, values in (("attributes", maps), ("attribute_types", types)):
        at = rows.schema.get_field_index(column)
        field = rows.schema.field(at)
        rows = rows.set_column(at, field, pa.array([list(v.items()) for v in values], field.type))
    return rows


def what_if(lake: Path, name: str, level: int) -> dict[str, int]:
    """Bytes of the table's live (compacted) files rewritten as compaction writes them, each as
    it is (the control), with binary ids, with binary ids and no TIMESTAMP copy, and with those
    and the table's hot attributes as typed columns."""
    delta = DeltaTable(str(lake / name))
    layout = TABLES[name].layout
    row_group_rows = compaction.RewriteOptions().row_group_rows
    with_stats = stats_columns(delta)
    sizes: dict[str, int] = {}
    files = [pq.read_table(lake / name / file.path) for file in compaction.candidates(delta)]
    hot = hot_keys(files, HOT_ATTRIBUTES)
    for as_is in files:
        binary = binary_ids(as_is, BINARY_IDS[name])
        no_timestamp = binary.drop_columns([TIMESTAMP_COPIES[name]])
        variants = {
            "as_is": as_is,
            "binary_ids": binary,
            "binary_ids_no_timestamp": no_timestamp,
            "binary_ids_no_timestamp_hot_attributes": hot_columns(no_timestamp, hot),
        }
        for variant, rows in variants.items():
            options = parquet_options(
                layout, rows.schema, "zstd", level, with_stats, clustered=True
            )
            sink = pa.BufferOutputStream()
            pq.write_table(rows, sink, row_group_size=row_group_rows, **options)
            sizes[variant] = sizes.get(variant, 0) + sink.getvalue().size
    return sizes


def measure(corpus: Corpus, level: int, partition_by: list[str]) -> dict:
    figures: dict = {"signals": {}, "columns": {}, "what_if": {}}
    with workdir() as path:
        lake = path / "lake"
        connector = DeltaLakeConnector(DeltaConfig.for_path(lake, partition_by=partition_by))
        for signal in SIGNALS:
            requests = requests_of(corpus, signal)
            items = items_of(corpus, signal)
            row = {"items": items, **otlp_bytes(requests)}
            started = time.monotonic()
            for request in requests:
                for name, rows in convert(signal, request).items():
                    # as the bridge commits a flush: the converter's rows, packed
                    connector.engines.delta_rs.append(name, rows)
                    write_deltalake(  # the same rows and commits, the writer's defaults
                        path / "defaults" / name,
                        unpack(rows),
                        mode="append",
                        partition_by=partition_by,
                        writer_properties=DEFAULTS,
                    )
            row["ingest_seconds"] = round(time.monotonic() - started, 2)
            row["writer_defaults"], _ = table_bytes(path / "defaults", TABLES_OF[signal])
            row["first_written"], row["first_written_files"] = table_bytes(lake, TABLES_OF[signal])
            for name in TABLES_OF[signal]:
                if (lake / name).exists():
                    shutil.copytree(lake / name, path / "closed" / name)
            started = time.monotonic()
            options = compaction.RewriteOptions(compression_level=level)
            for name in TABLES_OF[signal]:
                if (lake / name / "_delta_log").exists():
                    delta = DeltaTable(str(lake / name))
                    compaction.compact(
                        delta, TABLES[name].layout, options, older_than_ms=EVERYTHING
                    )
            row["compaction_seconds"] = round(time.monotonic() - started, 2)
            row["clustered"], row["clustered_files"] = table_bytes(lake, TABLES_OF[signal])
            for name in TABLES_OF[signal][:1]:
                figures["columns"][name] = column_bytes(lake, name)
                if name in BINARY_IDS:
                    figures["what_if"][name] = what_if(lake, name, level)
            closed = DeltaLakeConnector(
                DeltaConfig.for_path(path / "closed", partition_by=partition_by)
            )
            for name in TABLES_OF[signal]:
                if (path / "closed" / name / "_delta_log").exists():
                    # once the day is over: sorted across the partition, then bin-packed
                    closed_days.cluster_partitions(
                        DeltaTable(str(path / "closed" / name)),
                        TABLES[name].layout,
                        options,
                        include=lambda values: True,
                        target_size=TablePolicy().target_file_size,
                    )
                    closed.table(name).optimize()
            row["closed"], row["closed_files"] = table_bytes(path / "closed", TABLES_OF[signal])
            figures["signals"][signal] = row
    return figures


def report(figures: dict) -> list[str]:
    lines = [
        "bytes per item       OTLP raw    gzip    zstd | writer defaults  first written"
        "  clustered  closed  | gzip / clustered"
    ]
    for signal, row in figures["signals"].items():
        n = row["items"]
        per = {k: row[k] / n for k in ("otlp_raw", "otlp_gzip", "otlp_zstd")}
        ours = {k: row[k] / n for k in ("writer_defaults", "first_written", "clustered", "closed")}
        lines.append(
            f"{signal:8} {n:>9,}  {per['otlp_raw']:9.1f} {per['otlp_gzip']:7.1f} "
            f"{per['otlp_zstd']:7.1f} | {ours['writer_defaults']:15.1f} "
            f"{ours['first_written']:14.1f} {ours['clustered']:10.1f}"
            f" {ours['closed']:7.1f}  | {per['otlp_gzip'] / ours['clustered']:5.2f}x"
        )
    spans, logs = figures["signals"]["traces"], figures["signals"]["logs"]
    gzip_total = spans["otlp_gzip"] + logs["otlp_gzip"]
    for state in ("writer_defaults", "first_written", "clustered", "closed"):
        ours = spans[state] + logs[state]
        lines.append(f"spans + logs, {state}: OTLP+gzip / ours = {gzip_total / ours:.2f}x")
    if what := figures["what_if"]:
        lines.append("the compacted spans + logs rewritten (schema changes not made, measured):")
        for variant in what["spans"]:
            ours = what["spans"][variant] + what["logs"][variant]
            per = ", ".join(
                f"{name} {what[name][variant] / figures['signals'][signal]['items']:.1f} B"
                for name, signal in (("spans", "traces"), ("logs", "logs"))
            )
            lines.append(f"  {variant:38} {per}: OTLP+gzip / ours = {gzip_total / ours:.2f}x")
    for name, sizes in figures["columns"].items():
        items = figures["signals"]["traces" if name == "spans" else "logs"]["items"]
        if name.startswith("metrics_"):
            continue
        total = sum(sizes.values())
        top = sorted(sizes.items(), key=lambda kv: -kv[1])[:12]
        lines.append(f"{name}: where the clustered bytes go (B/item, share)")
        lines.extend(f"  {col:32} {b / items:7.2f}  {b / total:6.1%}" for col, b in top)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--level", type=int, default=COMPACTION_LEVEL, help="compaction zstd level")
    parser.add_argument(
        "--partition-by",
        default=",".join(DEFAULT_PARTITION_BY),
        help="the tables' partition columns, comma-separated (deltalake.partition_by)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    corpus = build_corpus(args.traces, seed=args.seed)
    print(
        f"corpus: {corpus.spans:,} spans, {corpus.log_records:,} log records, "
        f"{corpus.metric_points:,} metric points in {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    figures = measure(corpus, args.level, args.partition_by.split(","))
    for line in report(figures):
        print(line)
    return finish(RESULTS_FILE, vars(args), [], **figures)


if __name__ == "__main__":
    sys.exit(main())
