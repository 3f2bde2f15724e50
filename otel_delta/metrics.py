"""The bridge's own metrics, in Prometheus form, served on `[admin] endpoint` at /metrics.

Counters and histograms are module-level (one bridge per process is how it runs); what a
running bridge holds right now — WAL and buffer sizes, readiness — is read at scrape time by
a collector the bridge registers (otel_delta.admin). Names follow Prometheus conventions:
`otel_delta_` prefix, `_total` counters, base units (seconds, bytes).
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Histogram, disable_created_metrics

disable_created_metrics()  # `_created` series double the output and no dashboard reads them

# export and commit latencies: from a millisecond (a WAL ack) to a minute (a stuck commit)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

REQUESTS = Counter(
    "otel_delta_receiver_requests",
    "OTLP Export requests by transport, signal and outcome "
    "(accepted, partial, retryable, rejected, unauthenticated)",
    ["transport", "signal", "outcome"],
)
REFUSED_REQUESTS = Counter(
    "otel_delta_receiver_refused_requests",
    "OTLP Export requests refused as a whole, by reason (the error, e.g. buffer_full, "
    "wal_full, invalid_request, request_too_large, unauthenticated, internal)",
    ["transport", "signal", "reason"],
)
ACCEPTED_ITEMS = Counter(
    "otel_delta_receiver_accepted_items",
    "Spans, data points or log records accepted (stored or logged for storing)",
    ["signal"],
)
REFUSED_ITEMS = Counter(
    "otel_delta_receiver_refused_items",
    "Items refused by admission (partial_success), by reason",
    ["signal", "reason"],
)
REPAIRED_STRINGS = Counter(
    "otel_delta_receiver_repaired_strings",
    "Strings that were not UTF-8, stored with U+FFFD in place of their invalid bytes "
    "(partial_success warns the client)",
    ["signal"],
)
EXPORT_SECONDS = Histogram(
    "otel_delta_receiver_export_duration_seconds",
    "Time from receiving an Export to answering it",
    ["transport", "signal"],
    buckets=LATENCY_BUCKETS,
)
# an Export's stages: from a tenth of a millisecond (a small request's conversion) up
STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, *LATENCY_BUCKETS)
EXPORT_STAGE_SECONDS = Histogram(
    "otel_delta_receiver_export_stage_duration_seconds",
    "Time an Export spent in each stage of the pipeline (pipeline/stages.py): slot, "
    "receive, convert, then log (ack = wal) or commit (ack = commit)",
    ["signal", "stage"],
    buckets=STAGE_BUCKETS,
)
WAL_SYNCS = Counter("otel_delta_wal_fsyncs", "fsyncs of the write-ahead log (one per group)")
WAL_SYNC_SECONDS = Histogram(
    "otel_delta_wal_fsync_duration_seconds",
    "Duration of one write-ahead log fsync",
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
)
COMMITS = Counter("otel_delta_commits", "Delta commits of buffered rows, by table", ["table"])
COMMIT_ROWS = Counter("otel_delta_commit_rows", "Rows committed to Delta, by table", ["table"])
COMMIT_BYTES = Counter(
    "otel_delta_commit_bytes", "Arrow bytes of the rows committed to Delta, by table", ["table"]
)
COMMIT_FAILURES = Counter(
    "otel_delta_commit_failures",
    "Commits of a group of requests that failed after every retry (held and retried later), by "
    "table",
    ["table"],
)
COMMIT_RACES = Counter(
    "otel_delta_commit_races",
    "Commits of rows that another writer's commit (another bridge on the lake, maintenance, "
    "the connector) beat to the version they were planned on, committed on a later one, by table",
    ["table"],
)
REJECTED_ROWS = Counter(
    "otel_delta_rejected_rows",
    "Rows a table refused for what they hold (a constraint, a type), by table",
    ["table"],
)
DEAD_LETTERS = Counter(
    "otel_delta_dead_letters",
    "Logged requests moved to the _dead_letters table because a table refused their rows",
    ["table"],
)
COMMIT_SECONDS = Histogram(
    "otel_delta_commit_duration_seconds",
    "Duration of one Delta commit, by table",
    ["table"],
    buckets=LATENCY_BUCKETS,
)
MAINTENANCE_RUNS = Counter(
    "otel_delta_maintenance_runs",
    "Scheduled maintenance steps, by step and outcome (ok, failed, skipped: another process "
    "holds the table's maintenance lease)",
    ["step", "outcome"],
)
MAINTENANCE_SECONDS = Histogram(
    "otel_delta_maintenance_duration_seconds",
    "Duration of one scheduled maintenance step",
    ["step"],
    buckets=(0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600),
)
CONNECTOR_CALLS = Counter(
    "otel_delta_connector_calls",
    "ConnectorService calls by method and gRPC status code",
    ["method", "code"],
)
CONNECTOR_SECONDS = Histogram(
    "otel_delta_connector_call_duration_seconds",
    "Duration of one ConnectorService call (upsert, query, optimize, ...)",
    ["method"],
    buckets=LATENCY_BUCKETS,
)

OPERATION_SECONDS = Histogram(
    "otel_delta_connector_operation_duration_seconds",
    "Duration of one connector operation in this process (API, CLI or ConnectorService)",
    ["table", "operation", "outcome"],
    buckets=LATENCY_BUCKETS,
)
OPERATION_ROWS = Counter(
    "otel_delta_connector_operation_rows",
    "Rows written, deleted, read or rewritten by connector operations",
    ["table", "operation"],
)


__all__ = ["REGISTRY"]
