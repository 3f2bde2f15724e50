"""Spark (delta-spark) reads every table the bridge writes, with the same values as delta-rs."""

from __future__ import annotations

import pytest

from otel_delta.tables import TABLES
from tests import corpus
from tests.helpers import read_table

pytestmark = pytest.mark.e2e


def test_spark_reads_all_seven_tables(bridge, lakehouse, spark) -> None:
    traces, metrics, logs = bridge.stubs(bridge.channel())
    traces.Export(corpus.trace_request())
    metrics.Export(corpus.metrics_request())
    logs.Export(corpus.logs_request())

    for name in TABLES:
        frame = spark.read.format("delta").load(str(lakehouse / name))
        assert frame.columns == TABLES[name].schema.names, name
        by_spark = frame.toArrow()
        by_delta_rs = read_table(lakehouse, name)
        assert by_spark.num_rows == by_delta_rs.num_rows > 0, name
        key = "time_unix_nano" if "time_unix_nano" in frame.columns else "span_id"
        for column in ("service_name", "date", key, "attributes"):
            spark_values = sorted(map(str, by_spark.sort_by(key)[column].to_pylist()))
            rs_values = sorted(map(str, by_delta_rs.sort_by(key)[column].to_pylist()))
            assert spark_values == rs_values, (name, column)

    path = lakehouse / "spans"
    rows = spark.sql(
        f"SELECT attributes['http.route'] AS route, attribute_types['int'] AS int_type, "
        f"start_time_unix_nano, CAST(start_time AS STRING) AS ts "
        f"FROM delta.`{path}` WHERE service_name = 'checkout' AND kind = 'SPAN_KIND_SERVER'"
    ).collect()
    assert [(r.route, r.int_type, r.start_time_unix_nano) for r in rows] == [
        ("/users/{id}", "int", corpus.T0)
    ]
    assert rows[0].ts == "2024-11-19 07:06:40.123456"  # µs TIMESTAMP in UTC; exact ns beside it
