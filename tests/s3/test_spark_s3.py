"""Spark on S3 with the jars `make jars` provisions (hadoop-aws, the AWS SDK) and our S3 LogStore:
Spark writes and reads the bridge's S3 tables with the same storage options as delta-rs, and
Spark and delta-rs committing to one S3 table at the same time lose no acknowledged commit
(Spark's own S3 store checks for a commit and then PUTs it: it can replace delta-rs's)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.engines.delta_rs import DeltaRsEngine
from otel_delta.engines.spark import SparkEngine
from otel_delta.lakehouse import Lakehouse, s3a_conf
from otel_delta.logstores import S3_LOGSTORE_CLASS
from otel_delta.signals import SIGNALS_BY_NAME
from tests.s3 import S3Server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DELTA_RS_APPENDS = 24
SPARK_APPENDS = 8


def rows(first: int, count: int) -> pa.Table:
    """`count` spans with span ids first … first+count-1, through the receiver's converter."""
    now = time.time_ns()
    spans = [
        trace_pb2.Span(
            trace_id=(1).to_bytes(16, "big"),
            span_id=(first + i).to_bytes(8, "big"),
            name="race",
            start_time_unix_nano=now,
            end_time_unix_nano=now + 1,
        )
        for i in range(count)
    ]
    request = ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=spans)])]
    )
    return SIGNALS_BY_NAME["traces"].convert(request).tables["spans"]


def s3_lakehouse(s3: S3Server) -> Lakehouse:
    return Lakehouse(root=s3.url("lake"), storage_options=s3.storage_options())


def use_s3(spark, s3: S3Server) -> None:
    """The shared test session, pointed at this server (S3A reads its settings per bucket)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(s3.storage_options()).items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)


def test_spark_and_delta_rs_share_an_s3_table_without_losing_a_commit(spark, s3) -> None:
    use_s3(spark, s3)
    lake = s3_lakehouse(s3)
    delta_rs = DeltaRsEngine(lake)
    spark_engine = SparkEngine(lake, session=spark)
    delta_rs.append("spans", rows(1, 1))  # the table, created by the bridge's engine

    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, lake.uri("spans")
    )
    store = log.store().getDelegate(log.logPath()).logStoreImpl().getClass().getName()
    assert store == S3_LOGSTORE_CLASS

    acked: dict[str, list[int]] = {"delta-rs": [], "spark": []}
    errors: list[str] = []

    def delta_rs_writer(offset: int) -> None:
        for k in range(DELTA_RS_APPENDS // 2):
            first = 1_000 + offset + k
            try:
                delta_rs.append("spans", rows(first, 1))
                acked["delta-rs"].append(first)
            except Exception as exc:  # an error is a failure of this test, reported below
                errors.append(f"delta-rs: {exc}")

    def spark_writer() -> None:
        for k in range(SPARK_APPENDS):
            first = 1_000_000 + k * 10
            try:
                spark_engine.append("spans", rows(first, 10))
                acked["spark"].append(first)
            except Exception as exc:
                errors.append(f"spark: {str(exc).splitlines()[0]}")

    threads = [
        threading.Thread(target=delta_rs_writer, args=(0,)),
        threading.Thread(target=delta_rs_writer, args=(500,)),
        threading.Thread(target=spark_writer),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors

    expected = {f"{n:016x}" for n in [1, *acked["delta-rs"]]}
    expected |= {f"{first + i:016x}" for first in acked["spark"] for i in range(10)}
    table = DeltaTable(lake.uri("spans"), storage_options=s3.storage_options())
    stored = table.to_pyarrow_table(columns=["span_id"]).column("span_id").to_pylist()
    assert len(stored) == len(expected) and set(stored) == expected  # none lost, none twice
    assert table.version() == 1 + DELTA_RS_APPENDS + SPARK_APPENDS  # create, seed, one per commit
    # and Spark reads the same table from S3
    assert spark.read.format("delta").load(lake.uri("spans")).count() == len(expected)
