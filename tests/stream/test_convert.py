"""The stream's conversion of a batch of Kafka messages (otel_delta/stream/convert.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.stream.convert import FileTarget, convert_messages


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
    tables, dead, rejected, _ = convert_messages(messages(latin1), {"otlp_logs": "logs"})
    assert (dead, rejected) == ([], 0)
    assert pa.concat_tables(tables["logs"]).column("body").to_pylist() == ["\ufffdt"] * 2


def logs_request(body: str) -> ExportLogsServiceRequest:
    record = logs_pb2.LogRecord(body=AnyValue(string_value=body))
    return ExportLogsServiceRequest(
        resource_logs=[logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])]
    )


def test_a_message_whose_first_bytes_read_as_a_newline_and_a_brace_is_protobuf() -> None:
    """A request whose first resource group is 123 bytes long starts with b"\\n{", as OTLP/JSON
    after a newline does: told apart by the backfill's rule (backfill/decode.py)."""
    value = next(
        v
        for v in (logs_request("x" * n).SerializeToString() for n in range(1, 200))
        if v[:2] == b"\n{"
    )
    tables, dead, rejected, _ = convert_messages(messages(value), {"otlp_logs": "logs"})
    assert (dead, rejected) == ([], 0)
    assert pa.concat_tables(tables["logs"]).num_rows == 1


def test_a_json_message_after_whitespace_is_json() -> None:
    """OTLP/JSON is told by its `{` after any whitespace, in a Kafka message as in a file's
    record; the stream took such a message for protobuf, and sent it to the dead letters."""
    json_logs = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"j"}}]}]}]}'
    values = [b"\n" + json_logs, b" \r\n\t" + json_logs]
    tables, dead, rejected, _ = convert_messages(messages(*values), {"otlp_logs": "logs"})
    assert (dead, rejected) == ([], 0)
    assert pa.concat_tables(tables["logs"]).column("body").to_pylist() == ["j", "j"]


def test_a_message_that_is_neither_goes_to_the_dead_letters_with_why() -> None:
    values = [b"\n{ not json", b"\x0a\x05junk", b'{"resourceSpans":[]}']
    _, dead, _, _ = convert_messages(messages(*values), {"otlp_logs": "logs"})
    reasons = [d["reason"].split(": ", 1)[1] for d in dead]
    assert reasons[0].startswith("invalid JSON")
    assert reasons[1].startswith("not an OTLP protobuf ExportLogsServiceRequest")
    assert reasons[2] == "an OTLP/JSON ExportTraceServiceRequest on a topic of logs"


def spans_message(service: str, start: int) -> bytes:
    span = trace_pb2.Span(
        trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="s", start_time_unix_nano=start
    )
    resource = trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=[span])])
    resource.resource.attributes.add(key="service.name").value.string_value = service
    return ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()


def test_messages_pass_the_receiver_s_admission_rules(tmp_path: Path) -> None:
    """Found by the streaming review: a `service.name` too long for a directory name failed
    the batch's task (OSError: File name too long) at every run, so its Kafka partition
    stopped for good; a time at or after 2^63 ns went under a date before 1970, where
    retention deletes it. Now the name is shortened, the time refused and said."""
    long_name = "svc-" + "x" * 400
    batch = pa.record_batch(
        {
            "topic": ["otlp_spans"] * 2,
            "partition": [3, 3],
            "offset": [7, 8],
            "value": [spans_message(long_name, 10**18), spans_message("ok", 2**63 + 5)],
        }
    )
    partition_by = ("service_name", "date")
    tables, dead, rejected, reason = convert_messages(batch, {"otlp_spans": "traces"}, partition_by)
    assert (dead, rejected) == ([], 1)
    assert reason.startswith("otlp_spans/3 at 8: ") and "2^63" in reason
    spans = pa.concat_tables(tables["spans"])
    (service,) = spans.column("service_name").to_pylist()
    assert service.startswith("svc-xxx") and "~" in service
    assert dict(spans.column("resource_attributes")[0].as_py())["service.name"] == long_name
    target = FileTarget(
        root=str(tmp_path),
        storage=None,
        partition_by=partition_by,
        compression="ZSTD",
        compression_level=3,
        stats_columns={"spans": None},
        schemas={},
    )
    (written,) = target.write("spans", spans)  # was: OSError, File name too long
    assert written["rows"] == 1
