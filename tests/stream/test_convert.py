"""The stream's conversion of a batch of Kafka messages (otel_delta/stream/convert.py)."""

from __future__ import annotations

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1 import logs_pb2

from otel_delta.stream.convert import convert_messages


def messages(*values: bytes) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "topic": ["otlp_logs"] * len(values),
            "partition": [0] * len(values),
            "offset": list(range(len(values))),
            "value": list(values),
        }
    )


def test_a_message_with_strings_that_are_not_utf8_is_stored_repaired() -> None:
    """A Collector's kafka exporter passes on what its receivers got (convert/utf8.py); before
    2026-11-29 the whole message went to the dead letters."""
    record = logs_pb2.LogRecord(body=AnyValue(string_value="\x01\x02"))
    request = ExportLogsServiceRequest(
        resource_logs=[
            logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(log_records=[record] * 2)])
        ]
    )
    latin1 = request.SerializeToString().replace(b"\x01\x02", b"\xe9t")
    tables, dead, rejected = convert_messages(messages(latin1), {"otlp_logs": "logs"})
    assert (dead, rejected) == ([], 0)
    assert pa.concat_tables(tables["logs"]).column("body").to_pylist() == ["\ufffdt"] * 2
