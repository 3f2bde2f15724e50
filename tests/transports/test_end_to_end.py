"""Real clients → real gRPC server → real Delta tables, read back with delta-rs."""

from __future__ import annotations

import pytest

from otel_delta.convert.to_otlp import logs_from_arrow, metrics_from_arrow, spans_from_arrow
from otel_delta.tables import TABLES
from tests import corpus
from tests.helpers import read_table

pytestmark = pytest.mark.e2e


def spans_by_id(request) -> dict:
    """span id → (resource, scope, span): order-free, since Delta reads partitions in any order."""
    return {
        span.span_id.hex(): (rs.resource, rs.schema_url, ss.scope, ss.schema_url, span)
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }


def logs_by_event(request) -> dict:
    return {
        rec.event_name: (rl.resource, rl.schema_url, sl.scope, sl.schema_url, rec)
        for rl in request.resource_logs
        for sl in rl.scope_logs
        for rec in sl.log_records
    }


def test_corpus_survives_grpc_and_delta(bridge, lakehouse) -> None:
    """Every OTLP field, sent over gRPC, stored in Delta, read back, is the request again."""
    traces, metrics, logs = bridge.stubs(bridge.channel())
    assert not traces.Export(corpus.trace_request()).HasField("partial_success")
    metrics.Export(corpus.metrics_request())
    logs.Export(corpus.logs_request())

    # The Export answers only after the commit: the rows must be readable right now.
    spans = read_table(lakehouse, "spans")
    assert spans.num_rows == 4
    assert spans_by_id(spans_from_arrow(spans)) == spans_by_id(corpus.trace_request())

    metric_tables = {n: read_table(lakehouse, n) for n in TABLES if n.startswith("metrics_")}
    assert metrics_from_arrow(metric_tables) == corpus.metrics_request()

    logs_table = read_table(lakehouse, "logs")
    assert logs_by_event(logs_from_arrow(logs_table)) == logs_by_event(corpus.logs_request())


def test_stored_schema_is_the_declared_schema(bridge, lakehouse) -> None:
    traces, metrics, logs = bridge.stubs(bridge.channel())
    traces.Export(corpus.trace_request())
    metrics.Export(corpus.metrics_request())
    logs.Export(corpus.logs_request())
    for name, spec in TABLES.items():
        assert read_table(lakehouse, name).schema.equals(spec.schema), name
