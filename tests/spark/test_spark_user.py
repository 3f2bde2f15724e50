"""A Spark user's own operations on the tables a running bridge (`otel-delta serve`) appends to."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.maintenance.compaction import CompactionResult, RewriteOptions, compact
from otel_delta.tables import TABLES
from tests import corpus
from tests.helpers import ServeProcess, bridge_config, wait_until
from tests.wal.test_crash import SPANS_PER_REQUEST, request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def export(endpoint: str, count: int, first_request: int, acked: list[str]) -> None:
    """`count` requests of SPANS_PER_REQUEST spans with ids unique to `first_request`."""
    stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(endpoint))
    for counter in range(first_request, first_request + count):
        first = counter * SPANS_PER_REQUEST
        stub.Export(request(first), timeout=30)
        acked.extend(f"{first + k + 1:016x}" for k in range(SPANS_PER_REQUEST))


def stored(spans: Path) -> list[str]:
    return DeltaTable(str(spans)).to_pyarrow_table(columns=["span_id"])["span_id"].to_pylist()


def test_a_feature_delta_rs_cannot_write_holds_commits_with_one_line(tmp_path: Path, spark):
    """A Spark user turns on in-commit timestamps, a writer feature delta-rs 1.6.6 cannot
    write: every commit of the bridge must wait (its rows stay in the write-ahead log), and
    says so in one line per attempt naming the way out, instead of retrying a commit that
    cannot succeed as if the store had failed; once the feature is dropped the rows land."""
    server = ServeProcess(
        bridge_config(
            tmp_path,
            "[buffer]\nflush_interval_seconds = 0.2\n"
            "[deltalake.table]\nmaintenance_interval_seconds = 0\n",
        )
    )
    spans = tmp_path / "lake" / "spans"
    table = f"delta.`{spans}`"
    acked: list[str] = []
    try:
        export(server.endpoint, 3, 1, acked)
        wait_until(lambda: DeltaTable.is_deltatable(str(spans)) and len(stored(spans)) == 60)
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableInCommitTimestamps'=true)")
        before = len(server.lines)
        export(server.endpoint, 3, 100, acked)  # acknowledged: in the write-ahead log

        def refusals() -> list[str]:
            return [line for line in server.lines[before:] if "commit to spans failed" in line]

        wait_until(lambda: len(refusals()) >= 2, timeout=120, what="two refused commits")
        assert all("(attempt" not in line for line in refusals()), refusals()
        assert "DROP FEATURE" in refusals()[0] and "InCommitTimestamp" in refusals()[0]
        assert len(stored(spans)) == 60

        spark.sql(f"ALTER TABLE {table} DROP FEATURE inCommitTimestamp")
        wait_until(lambda: len(stored(spans)) == 120, timeout=180, what="the held rows")
    finally:
        code = server.stop()
    assert code == 0
    assert sorted(stored(spans)) == sorted(acked)
    by_spark = [r.span_id for r in spark.sql(f"SELECT span_id FROM {table}").collect()]
    assert sorted(by_spark) == sorted(acked)


def test_the_connector_reads_a_table_with_deletion_vectors_as_spark_does(
    bridge, lakehouse: Path, spark, caplog
) -> None:
    """A Spark user turns deletion vectors on and deletes rows: the connector's queries (whose
    scans read the Parquet files through delta-rs's pyarrow dataset, which cannot apply them)
    refused the table. They now read it through delta-rs's DataFusion, which applies them:
    the rows Spark reads, with and without a filter, whole or streamed."""
    traces, _, _ = bridge.stubs(bridge.channel())
    traces.Export(corpus.trace_request())
    table = f"delta.`{lakehouse / 'spans'}`"
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableDeletionVectors'=true)")
    spark.sql(f"DELETE FROM {table} WHERE kind = 'SPAN_KIND_SERVER'")
    assert "deletionVectors" in (DeltaTable(str(lakehouse / "spans")).protocol().reader_features)

    def by_spark(where: str = "TRUE") -> list[str]:
        rows = spark.sql(f"SELECT span_id FROM {table} WHERE {where}").collect()
        return sorted(row.span_id for row in rows)

    spans = DeltaLakeConnector(DeltaConfig.for_path(lakehouse)).table("spans")
    everything = spans.query().to_arrow()
    assert sorted(everything.column("span_id").to_pylist()) == by_spark()
    assert everything.schema == spans.query().schema()
    assert "SPAN_KIND_SERVER" not in everything.column("kind").to_pylist()
    client = spans.query().filter("kind = 'SPAN_KIND_UNSPECIFIED'").select(["span_id"])
    streamed = pa.Table.from_batches(list(client.to_batches(batch_size=1)))
    assert sorted(streamed.column("span_id").to_pylist()) == by_spark(
        "kind = 'SPAN_KIND_UNSPECIFIED'"
    )
    assert spans.query().filter("kind = 'SPAN_KIND_SERVER'").count() == 0
    # and the compaction of today's files skips the table, saying so (it said nothing)
    with caplog.at_level(logging.WARNING, logger="otel_delta.maintenance.compaction"):
        result = compact(
            DeltaTable(str(lakehouse / "spans")), TABLES["spans"].layout, RewriteOptions()
        )
    assert result == CompactionResult()
    assert "compaction skips" in caplog.text and "deletion vectors" in caplog.text
