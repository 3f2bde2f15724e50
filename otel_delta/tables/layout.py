"""How each telemetry table's Parquet columns are encoded, and why its rows are not re-sorted.

Applied to every delta-rs write of a telemetry table (appends, merges, deletes, compaction):

- **Row order is not changed on append.** Sorting each commit by trace id and time was measured
  (82k spans of bench.common's workload, one commit): the sort itself takes 0.3 µs/span but
  reordering the nested columns (attribute maps, events) takes ~4.6 µs/span, about as much as
  the Parquet encode, and the file came out no smaller (pyarrow's writer: 60.5 unsorted vs
  61.0 B/span sorted). Rows are sorted by `cluster_columns` in compaction instead, off the
  ingest path (otel_delta/maintenance/compaction.py).
- **Ids unique per row** (`span_id`) are not dictionary-encoded: a dictionary of values that never
  repeat is pure overhead (a page of values plus an index per row).
- **Nanosecond times** use DELTA_BINARY_PACKED in files as ingestion writes them:
  neighbouring times differ by far less than their magnitude, so deltas take a few bits where
  plain values take 8 bytes before zstd. Measured on 40k spans of bench.common's workload
  written by delta-rs (zstd 3, one file): 68.6 B/span with the writer's defaults, 61.1 with
  this layout (per column, with pyarrow's writer: span_id 11.0 → 8.1 B, each nanosecond time
  8.2 → 4.7 B). In **clustered** files (sorted by trace id alone: delta-rs's Z-order, which
  sorts a closed day of a table our reader cannot read, maintenance/closed_days.py) a trace's
  times are close but the next trace starts anywhere, so a miniblock of 32 deltas is as wide
  as its widest jump; there PLAIN values, which zstd compresses with the file's stronger
  level, are smaller. bench/storage.py's corpus, pyarrow's writer, zstd 15 per service
  (2026-11-26): spans sorted by trace id -4.1% (each time column about 0.75 B/span less),
  logs -3.2%. Our compaction (today's, and a closed day's) puts each row group's traces in
  the order of their first time (maintenance/compaction.py), so its files keep
  DELTA_BINARY_PACKED: there it gave spans 34.9 -> 34.5 B and log records 32.8 -> 31.9
  against PLAIN (the same session).
  BYTE_STREAM_SPLIT was smaller still (spans -6.3% with the duration too), but Spark 4.0's
  vectorized Parquet reader refuses it ("Unsupported encoding: BYTE_STREAM_SPLIT"), so no
  column uses it.
- **Resource columns** (the same map repeated on every row of a request) are not
  dictionary-encoded as ingestion writes them: zstd takes the repeats for less than the
  dictionary's hashing of every key and value of every row. On the corpus, first-written
  spans 1.1% and logs 1.2% smaller, and the Parquet encode 5% (spans) and 10% (logs) less
  CPU; clustered files keep the dictionary, which is 0.7% smaller there. Rows that come packed
  (tables/packed.py: the bridge's native converter holds these columns as Arrow dictionaries)
  keep the dictionary as ingested too, in files of at least `packed.DICTIONARY_MIN_ROWS`
  rows: the Collector-like load's tables (20 requests per file, one thread, the bridge's system
  allocator) were written in 2.27 / 2.47 / 3.15 µs per metric point / log record / span
  against 3.14 / 2.77 / 4.28 for plain rows without it, into files 0.1-0.3% smaller.
- **Statistics only where a query can use them** (`stats_columns`, the table property
  `delta.dataSkippingStatsColumns`): times, trace id, names, kinds and status. Every file's
  add action carries its statistics in every commit and checkpoint; measured over 1,000
  commits of 200 spans (5 partitions each), the statistics of all 33 columns were 5.7 of the
  checkpoint's 6.3 MB (1.1 KB per file). Random ids (`span_id`, `parent_span_id`) span the
  whole range in every file, so their min/max never rule a file out.

Only top-level columns can be configured this way: delta-rs names a column by its top-level
name, so nested fields (event times, attribute maps) keep the writer's defaults.

Ids stay lowercase hex strings rather than binary: delta-rs 1.6 records no statistics at all
for a BINARY column in the Delta log (checked: a table with a binary and a string column gets
min/max/nullCount for the string only), so binary ids would make every trace lookup open every
file of the table.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from otel_delta.tables.dictionary_types import has_dictionary

# the codecs our files take a level for, with the levels pyarrow's writer accepts (zstd's
# negative "fast" levels left out); the config refuses any other level at start
CODEC_LEVELS = {"zstd": (1, 22), "gzip": (1, 9), "brotli": (1, 11)}
LEVELLED_CODECS = tuple(CODEC_LEVELS)
# zstd level of the files compaction writes (`compaction_compression_level`): they are written
# once and kept for months. bench/storage.py, spans + logs after compaction, 3 runs per level
# (2026-11-25): levels 9 / 15 / 17 took 14.7-15.1 / 21.4-23.8 / 28.9-34.6 µs per item of
# compaction and gave 40.5 / 37.9 / 37.2 B per span, 39.7 / 37.0 / 36.5 per log record.
COMPACTION_LEVEL = 15
# zstd level of the files ingestion writes (`compression_level`). Level 1 beat zstd's default 3
# on both counts, on every file size measured (bench/storage.py's corpus, pyarrow's writer, the
# layout; 2026-11-25): one request per commit, spans 46.6 vs 47.3 B and 5.4 vs 5.7 µs, logs
# 39.8 vs 41.2 B and 4.0 vs 4.2 µs; the whole corpus as one commit, spans 36.1 vs 38.2 B, logs
# 34.0 vs 36.4 B, at the same or less CPU. (Sorted, at 15, compaction's files are smaller still.)
INGEST_LEVEL = 1
# values the Parquet writer takes per step (pyarrow's default: 1,024): each step computes the
# levels of every leaf, encodes, and checks the page and dictionary sizes. The Collector-like
# load's tables (bench/collector_load.py, 20 requests of 8,192 items, one thread, the default
# and 16,384 alternating in one process, median µs per item): spans 3.85 -> 3.62, metrics
# 1.44 / 1.45 -> 1.39 / 1.40, logs 1.54 -> 1.55, the files within 0.1% of their size. Under the
# traces load, two alternating pairs: 8.6 / 8.1 against 9.3 / 10.2 µs of CPU per span; metrics
# within the runs' spread (2026-11-27). A page may overrun its 1 MiB target by one step's values
WRITE_BATCH_SIZE = 16_384
# false-positive rate of the bloom filters of files as ingested: a lookup reads the rest of a
# row group for about one in twenty files that do not hold its id
BLOOM_FPP = 0.05


@dataclass(frozen=True)
class Layout:
    """Column encodings of one table's files, and the row order compaction gives them.

    Three kinds of file: as ingestion writes them (rows in arrival order), as our compaction
    writes them (row groups by `cluster_columns`, each in near time order) and as delta-rs's
    Z-order leaves them (`clustered`: sorted by the first cluster column alone).
    Some encodings pay in one kind and cost in another, so a few settings apply to some kinds
    only."""

    # values seldom repeat within a page: no dictionary (for a nested column, for its leaves)
    plain_columns: tuple[str, ...] = ()
    # no dictionary in files in arrival order only (their leaves); compacted files keep it
    arrival_plain_columns: tuple[str, ...] = ()
    delta_columns: tuple[str, ...] = ()  # int64 times, values: DELTA_BINARY_PACKED in every file
    # int64 times: DELTA_BINARY_PACKED in near time order, PLAIN (no dictionary) when
    # Z-ordered by the first cluster column alone
    arrival_delta_columns: tuple[str, ...] = ()
    cluster_columns: tuple[str, ...] = ()  # compaction sorts rows by these (maintenance)
    # the columns whose min/max/null counts the Delta log records (delta.dataSkippingStatsColumns)
    stats_columns: tuple[str, ...] = ()
    # looked up by value (a trace by its id): files as ingested, in arrival order, where every
    # row group's values span the whole range, get a bloom filter per row group on these
    # (`bloom_filter_options`); compaction's files are sorted by them and skip by statistics
    bloom_columns: tuple[str, ...] = ()


def parquet_options(
    layout: Layout,
    schema: pa.Schema,
    compression: str,
    compression_level: int,
    stats_columns: Collection[str] | None = None,
    *,
    clustered: bool = False,
) -> dict[str, Any]:
    """pyarrow `ParquetWriter` options of a layout: the same encodings delta-rs is given
    (lakehouse.column_properties), for the files our own code writes (engines/data_files).

    `stats_columns`: the columns whose statistics the table's Delta log records (None: every
    column); the files carry min/max for those and the layout's, the only ones a reader prunes
    by. Statistics of the others (random ids, status messages, URLs, counts) cost bytes in
    every page header and footer: without them bench/storage.py's first-written spans were
    2.1% smaller, logs 1.9%.

    `clustered`: compaction's files, whose rows are grouped by the layout's cluster key (the
    resource's columns keep their dictionary); their times stay in near time order, so they
    keep the arrival encodings."""
    encodings = column_encodings(layout)
    plain = set(layout.plain_columns) | set(encodings)
    if not clustered:
        plain |= set(layout.arrival_plain_columns)
    # a column handed over as a dictionary (packed rows, tables/packed.py) keeps it; written
    # plain, each value would be copied out of the dictionary (measured dearer: see above)
    plain -= {field.name for field in schema if has_dictionary(field.type)}
    with_stats = None if stats_columns is None else {*stats_columns, *layout.stats_columns}
    codec = compression.lower().replace("uncompressed", "none")
    return {
        "compression": codec,
        "compression_level": compression_level if codec in LEVELLED_CODECS else None,
        "use_dictionary": [
            path for path in _leaf_paths(schema) if path.split(".", 1)[0] not in plain
        ],
        "column_encoding": encodings or None,
        # min/max of top-level columns only: those of map and list leaves (attribute keys
        # and values) serve no reader's pruning and cost a comparison per value, 2.4% of the
        # bridge's CPU under the Collector load (perf)
        "write_statistics": [
            path
            for path in _leaf_paths(schema)
            if "." not in path and (with_stats is None or path in with_stats)
        ],
        # no ARROW:schema footer entry (a base64 copy of the Arrow schema): readers of a Delta
        # table take the schema from its log, and the Parquet types say the rest. It was 5.5 of
        # a spans file's 13.4 KB footer; bench/storage.py's first-written spans + logs are 8%
        # smaller without it
        "store_schema": False,
        "write_batch_size": WRITE_BATCH_SIZE,
    }


def bloom_filter_options(
    layout: Layout, schema: pa.Schema, rows: int
) -> dict[str, dict[str, float]] | None:
    """pyarrow `ParquetWriter` bloom filters of a file as ingested, of `rows` rows (None: none).

    Sized for `rows` distinct values (Arrow caps it at a row group's rows) at BLOOM_FPP: a span
    file's trace ids number about a third of its rows, but counting them costs about 0.1 µs a
    row, and the bytes last only until compaction rewrites the file without them. On
    bench/storage.py's corpus (2026-11-27) spans as first written took 45.5 -> 45.9 B, log
    records 38.8 -> 39.5 (sized by the count of distinct ids: the same)."""
    columns = [name for name in layout.bloom_columns if name in schema.names]
    if not columns or rows <= 0:
        return None
    return {name: {"ndv": rows, "fpp": BLOOM_FPP} for name in columns}


def column_encodings(layout: Layout, *, clustered: bool = False) -> dict[str, str]:
    """The non-default encodings of a layout, by top-level column, for files in arrival order
    or `clustered` (sorted by the first cluster column alone: delta-rs's Z-order)."""
    arrival = "PLAIN" if clustered else "DELTA_BINARY_PACKED"
    return {
        **{name: "DELTA_BINARY_PACKED" for name in layout.delta_columns},
        **{name: arrival for name in layout.arrival_delta_columns},
    }


@lru_cache(maxsize=32)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """Parquet leaf column paths of an Arrow schema (what per-column options name)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    return tuple(metadata.schema.column(i).path for i in range(metadata.num_columns))


# the resource's columns, repeated on every row a request's resource covers
RESOURCE_COLUMNS = (
    "resource_attributes",
    "resource_attribute_types",
    "resource_dropped_attributes_count",
    "resource_entity_refs",
    "resource_schema_url",
)
SPAN_LAYOUT = Layout(
    # events and links: every leaf (exception messages and stack traces, linked ids) without
    # dictionary; bench/storage.py's spans 46.6 -> 46.0 B as first written, 36.95 -> 36.81
    # clustered, and about 5% less encoding time (2026-11-25)
    plain_columns=("span_id", "parent_span_id", "trace_id", "duration_ns", "events", "links"),
    arrival_plain_columns=RESOURCE_COLUMNS,
    # end_time_unix_nano: stored by tables of schema version 1 only (tables/versions.py)
    arrival_delta_columns=("start_time_unix_nano", "end_time_unix_nano", "start_time"),
    cluster_columns=("trace_id", "start_time_unix_nano"),
    bloom_columns=("trace_id",),
    stats_columns=(
        "start_time",
        "trace_id",
        "name",
        "kind",
        "start_time_unix_nano",
        "duration_ns",
        "status_code",
        "scope_name",
    ),
)
LOG_LAYOUT = Layout(
    # body: messages seldom repeat whole (they carry ids and values); without dictionary,
    # bench/storage.py's log records were 0.5 B smaller, first written and clustered
    plain_columns=("span_id", "trace_id", "body"),
    arrival_plain_columns=RESOURCE_COLUMNS,
    arrival_delta_columns=("time_unix_nano", "observed_time_unix_nano", "time"),
    cluster_columns=("trace_id", "time_unix_nano"),
    bloom_columns=("trace_id",),
    stats_columns=(
        "time",
        "time_unix_nano",
        "observed_time_unix_nano",
        "severity_number",
        "severity_text",
        "trace_id",
        "event_name",
        "scope_name",
    ),
)
METRIC_LAYOUT = Layout(
    # as for spans and logs: bench/storage.py's metrics 104.4 -> 99.0 B/point as first written
    # (one flush: small files, where dictionary pages weigh most); the Collector-like metrics
    # load's tables, 20 requests in one file: 6% less encoding time, 0.4% larger (2026-11-26)
    arrival_plain_columns=RESOURCE_COLUMNS,
    # measured values seldom repeat: a dictionary of them is hashing for nothing. The
    # Collector-like metrics load's tables (bench/collector_load.py, 30 requests, per service),
    # B per row as ingested / compacted (sorted, zstd 15), dictionary against plain: a gauge's
    # value_double 3.25 / 2.99 against 3.00 / 2.65, a histogram's sum 9.10 / 6.78 against
    # 7.39 / 5.08, min 6.11 / 5.43 against 4.36 / 3.68, max 6.29 / 5.51 against 4.55 / 3.76;
    # encoding them took 0.07-0.12 against 0.03-0.06 µs per row (2026-11-26)
    plain_columns=("value_double", "sum", "min", "max"),
    # sorted by name then time, a metric's points share or step their times: deltas stay small.
    # Integer values and counts too, whatever the order: deltas take the bits of the values'
    # spread, where a dictionary takes an index per row and a page of values. The same tables:
    # a sum's value_int 5.40 / 5.46 B per row with a dictionary, 3.54 / 3.64 plain, 2.67 / 2.67
    # delta-encoded; a histogram's count 1.61 / 1.60, 1.63 / 1.78, 1.43 / 1.42
    delta_columns=("start_time_unix_nano", "time_unix_nano", "time", "value_int", "count"),
    cluster_columns=("metric_name", "time_unix_nano"),
    stats_columns=("time", "metric_name", "start_time_unix_nano", "time_unix_nano", "scope_name"),
)
