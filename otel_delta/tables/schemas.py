"""Arrow schemas of the seven telemetry tables: the single definition every other module uses.

Conventions (documented for users in docs/schema.md):
- nanosecond times are exact `*_unix_nano` BIGINT columns, with a TIMESTAMP (UTC, µs) for SQL;
- ids are lowercase hex strings; unsigned 32/64-bit OTLP integers are stored in BIGINT
  (uint64 values above 2^63-1 are stored bit-for-bit, so they read back negative);
- attributes are `MAP<STRING,STRING>` readable by key, plus a sparse `*_types` map that records
  the original type of every value that was not a plain string (see convert/anyvalue.py).

These are the current version's schemas (tables/versions.py: what older versions stored).
"""

from __future__ import annotations

import pyarrow as pa

STRING = pa.string()
INT64 = pa.int64()
INT32 = pa.int32()
FLOAT64 = pa.float64()
ATTRIBUTES = pa.map_(pa.string(), pa.string())
TIMESTAMP = pa.timestamp("us", tz="UTC")


def attribute_fields(prefix: str = "") -> list[pa.Field]:
    """The three columns that carry one OTLP attribute list losslessly."""
    return [
        pa.field(f"{prefix}attributes", ATTRIBUTES),
        pa.field(f"{prefix}attribute_types", ATTRIBUTES),
        pa.field(f"{prefix}dropped_attributes_count", INT64),
    ]


ENTITY_REF = pa.struct(
    [
        pa.field("schema_url", STRING),
        pa.field("type", STRING),
        pa.field("id_keys", pa.list_(STRING)),
        pa.field("description_keys", pa.list_(STRING)),
    ]
)

PARTITION_FIELDS = [pa.field("service_name", STRING), pa.field("date", pa.date32())]

RESOURCE_FIELDS = [
    *attribute_fields("resource_"),
    pa.field("resource_entity_refs", pa.list_(ENTITY_REF)),
    pa.field("resource_schema_url", STRING),
]

SCOPE_FIELDS = [
    pa.field("scope_name", STRING),
    pa.field("scope_version", STRING),
    *attribute_fields("scope_"),
    pa.field("scope_schema_url", STRING),
]

SPAN_EVENT = pa.struct(
    [pa.field("time_unix_nano", INT64), pa.field("name", STRING), *attribute_fields()]
)
SPAN_LINK = pa.struct(
    [
        pa.field("trace_id", STRING),
        pa.field("span_id", STRING),
        pa.field("trace_state", STRING),
        pa.field("flags", INT64),
        *attribute_fields(),
    ]
)

SPANS = pa.schema(
    [
        *PARTITION_FIELDS,
        pa.field("start_time", TIMESTAMP),
        pa.field("trace_id", STRING),
        pa.field("span_id", STRING),
        pa.field("parent_span_id", STRING),
        pa.field("trace_state", STRING),
        pa.field("flags", INT64),
        pa.field("name", STRING),
        pa.field("kind", STRING),
        pa.field("start_time_unix_nano", INT64),
        pa.field("duration_ns", INT64),
        pa.field("status_code", STRING),
        pa.field("status_message", STRING),
        *attribute_fields(),
        pa.field("events", pa.list_(SPAN_EVENT)),
        pa.field("dropped_events_count", INT64),
        pa.field("links", pa.list_(SPAN_LINK)),
        pa.field("dropped_links_count", INT64),
        *RESOURCE_FIELDS,
        *SCOPE_FIELDS,
    ]
)

LOGS = pa.schema(
    [
        *PARTITION_FIELDS,
        pa.field("time", TIMESTAMP),
        pa.field("time_unix_nano", INT64),
        pa.field("observed_time_unix_nano", INT64),
        pa.field("severity_number", INT32),
        pa.field("severity_text", STRING),
        pa.field("body", STRING),
        pa.field("body_type", STRING),
        pa.field("event_name", STRING),
        pa.field("trace_id", STRING),
        pa.field("span_id", STRING),
        pa.field("flags", INT64),
        *attribute_fields(),
        *RESOURCE_FIELDS,
        *SCOPE_FIELDS,
    ]
)

EXEMPLAR = pa.struct(
    [
        pa.field("time_unix_nano", INT64),
        pa.field("value_double", FLOAT64),
        pa.field("value_int", INT64),
        pa.field("trace_id", STRING),
        pa.field("span_id", STRING),
        pa.field("filtered_attributes", ATTRIBUTES),
        pa.field("filtered_attribute_types", ATTRIBUTES),
    ]
)

METRIC_POINT_FIELDS = [
    *PARTITION_FIELDS,
    pa.field("time", TIMESTAMP),
    pa.field("metric_name", STRING),
    pa.field("metric_description", STRING),
    pa.field("metric_unit", STRING),
    pa.field("metric_metadata", ATTRIBUTES),
    pa.field("metric_metadata_types", ATTRIBUTES),
    pa.field("start_time_unix_nano", INT64),
    pa.field("time_unix_nano", INT64),
    pa.field("attributes", ATTRIBUTES),
    pa.field("attribute_types", ATTRIBUTES),
    pa.field("flags", INT64),
]
EXEMPLARS = pa.field("exemplars", pa.list_(EXEMPLAR))  # every point type but summary
METRIC_TAIL = [*RESOURCE_FIELDS, *SCOPE_FIELDS]

TEMPORALITY = pa.field("aggregation_temporality", STRING)
BUCKETS = pa.struct([pa.field("offset", INT32), pa.field("bucket_counts", pa.list_(INT64))])

METRICS_GAUGE = pa.schema(
    [
        *METRIC_POINT_FIELDS,
        EXEMPLARS,
        pa.field("value_double", FLOAT64),
        pa.field("value_int", INT64),
        *METRIC_TAIL,
    ]
)
METRICS_SUM = pa.schema(
    [
        *METRIC_POINT_FIELDS,
        EXEMPLARS,
        pa.field("value_double", FLOAT64),
        pa.field("value_int", INT64),
        TEMPORALITY,
        pa.field("is_monotonic", pa.bool_()),
        *METRIC_TAIL,
    ]
)
METRICS_HISTOGRAM = pa.schema(
    [
        *METRIC_POINT_FIELDS,
        EXEMPLARS,
        pa.field("count", INT64),
        pa.field("sum", FLOAT64),
        pa.field("min", FLOAT64),
        pa.field("max", FLOAT64),
        pa.field("bucket_counts", pa.list_(INT64)),
        pa.field("explicit_bounds", pa.list_(FLOAT64)),
        TEMPORALITY,
        *METRIC_TAIL,
    ]
)
METRICS_EXPONENTIAL_HISTOGRAM = pa.schema(
    [
        *METRIC_POINT_FIELDS,
        EXEMPLARS,
        pa.field("count", INT64),
        pa.field("sum", FLOAT64),
        pa.field("min", FLOAT64),
        pa.field("max", FLOAT64),
        pa.field("scale", INT32),
        pa.field("zero_count", INT64),
        pa.field("zero_threshold", FLOAT64),
        pa.field("positive", BUCKETS),
        pa.field("negative", BUCKETS),
        TEMPORALITY,
        *METRIC_TAIL,
    ]
)
METRICS_SUMMARY = pa.schema(
    [
        *METRIC_POINT_FIELDS,
        pa.field("count", INT64),
        pa.field("sum", FLOAT64),
        pa.field(
            "quantile_values",
            pa.list_(pa.struct([pa.field("quantile", FLOAT64), pa.field("value", FLOAT64)])),
        ),
        *METRIC_TAIL,
    ]
)

# Bookkeeping tables beside the telemetry tables, not partitioned: the dead letters (of
# `otel-delta backfill` and of the bridge) and the backfill's ledger.
DEAD_LETTER_TABLE = "_dead_letters"
# the table's Delta description, whichever writer creates it first
DEAD_LETTER_DESCRIPTION = (
    "otel-delta dead letters: input that could not be stored (backfill records, Kafka messages, "
    "write-ahead log records a table refused), with where it came from and why"
)
DEAD_LETTERS = pa.schema(
    [
        pa.field("file", STRING),
        pa.field("file_sha256", STRING),
        pa.field("offset", INT64),  # byte offset of the record in the (decompressed) file
        pa.field("line", INT64),  # 1-based line number for OTLP/JSON lines, NULL otherwise
        pa.field("reason", STRING),
        # backfill: the undecodable record (first 1 MiB); bridge: the whole logged request
        pa.field("raw", pa.binary()),
        pa.field("loaded_at", TIMESTAMP),
    ]
)
# Hard deletes and redactions: one row per operation, at the root of the table path. Values
# that were erased appear only as keyed hashes (otel_delta.privacy), never in clear.
AUDIT_TABLE = "_audit"
AUDIT = pa.schema(
    [
        pa.field("at", TIMESTAMP),
        pa.field("actor", STRING),  # who asked (actor= on the call, --actor on the CLI)
        pa.field("operation", STRING),  # hard_delete | redact
        pa.field("table_name", STRING),
        pa.field("predicate", STRING),  # its literals replaced by their keyed hashes
        pa.field("rows_affected", INT64),
        pa.field("files_purged", INT64),  # data files physically removed
        pa.field("log_entries_removed", INT64),  # commits, checkpoints, change data files
        pa.field("version_before", INT64),
        pa.field("version_after", INT64),  # the table's version once the data is gone
    ]
)
# The backfill's ledger: one row per file loaded, keyed by the SHA-256 of its bytes
LEDGER_TABLE = "_backfill_files"
BACKFILL_FILES = pa.schema(
    [
        pa.field("file_sha256", STRING),
        pa.field("file", STRING),
        pa.field("batch_id", STRING),
        pa.field("records", INT64),
        pa.field("rows", INT64),
        pa.field("rejected", INT64),
        pa.field("dead_letters", INT64),
        pa.field("loaded_at", TIMESTAMP),
    ]
)
# The backfill's loads as they start and finish: a load that a crash stopped between its table
# commits and its ledger append is finished by the next run, whatever files that run is given
# (backfill/batches.py)
BATCHES_TABLE = "_backfill_batches"
BACKFILL_BATCHES = pa.schema(
    [
        pa.field("batch_id", STRING),
        # one load of the batch: a batch (its set of files) may be loaded again after a load
        # that committed nothing, so a batch's finished row says nothing of a later load's
        pa.field("attempt", STRING),
        pa.field("event", STRING),  # started: one row per file of the load; finished: one row
        pa.field("file_sha256", STRING),  # NULL in a finished row
        pa.field("file", STRING),  # the path the load read it from; NULL in a finished row
        pa.field("format", STRING),  # the load's --format, in its first started row
        pa.field("at", TIMESTAMP),
    ]
)
# every bookkeeping table: its schema and Delta description, whichever writer creates it
BOOKKEEPING_TABLES: dict[str, tuple[pa.Schema, str]] = {
    DEAD_LETTER_TABLE: (DEAD_LETTERS, DEAD_LETTER_DESCRIPTION),
    AUDIT_TABLE: (AUDIT, "otel-delta: hard deletes and redactions"),
    LEDGER_TABLE: (BACKFILL_FILES, f"otel-delta backfill bookkeeping: {LEDGER_TABLE}"),
    BATCHES_TABLE: (BACKFILL_BATCHES, f"otel-delta backfill bookkeeping: {BATCHES_TABLE}"),
}
