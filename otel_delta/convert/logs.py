"""ExportLogsServiceRequest → Arrow table `logs`."""

from __future__ import annotations

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otel_delta.convert.anyvalue import encode
from otel_delta.convert.columns import AttributeColumns, timestamp_and_date, unsigned
from otel_delta.convert.context import RowContext
from otel_delta.convert.ids import SPAN_ID_BYTES, TRACE_ID_BYTES, id_error
from otel_delta.convert.result import Converted, Rejections, build_table


def log_error(record: LogRecord) -> str | None:
    return id_error(record.trace_id, TRACE_ID_BYTES, "log trace_id", False) or id_error(
        record.span_id, SPAN_ID_BYTES, "log span_id", False
    )


def logs_to_arrow(request: ExportLogsServiceRequest) -> Converted:
    rejected = Rejections()
    ctx = RowContext(request)
    rows = ctx.new_rows()
    time: list[int] = []
    observed: list[int] = []
    effective: list[int] = []
    severity_number: list[int] = []
    severity_text: list[str] = []
    body: list[str | None] = []
    body_type: list[str | None] = []
    event_name: list[str] = []
    trace_id: list[str] = []
    span_id: list[str] = []
    flags: list[int] = []
    attributes = AttributeColumns(ctx.repeats)
    dropped: list[int] = []

    for resource_logs in request.resource_logs:
        ctx.enter_resource(resource_logs.resource, resource_logs.schema_url)
        for scope_logs in resource_logs.scope_logs:
            ctx.enter_scope(scope_logs.scope, scope_logs.schema_url)
            for record in scope_logs.log_records:
                error = log_error(record)
                if error:
                    rejected.add(error)
                    continue
                rows.add_row()
                time.append(record.time_unix_nano)
                observed.append(record.observed_time_unix_nano)
                effective.append(record.time_unix_nano or record.observed_time_unix_nano)
                severity_number.append(record.severity_number)
                severity_text.append(record.severity_text)
                if record.HasField("body"):
                    text, type_ = encode(record.body)
                else:
                    text, type_ = None, None
                body.append(text)
                body_type.append(type_)
                event_name.append(record.event_name)
                trace_id.append(record.trace_id.hex())
                span_id.append(record.span_id.hex())
                flags.append(record.flags)
                repeated = attributes.append(record.attributes)
                dropped.append(record.dropped_attributes_count + repeated)

    ctx.repeats.note(rejected)
    if not time:
        return Converted({}, rejected)
    timestamp, date = timestamp_and_date(unsigned(effective))
    attrs, attr_types = attributes.arrays()
    columns = {
        "date": date,
        "time": timestamp,
        "time_unix_nano": unsigned(time),
        "observed_time_unix_nano": unsigned(observed),
        "severity_number": pa.array(severity_number, pa.int32()),
        "severity_text": pa.array(severity_text, pa.string()),
        "body": pa.array(body, pa.string()),
        "body_type": pa.array(body_type, pa.string()),
        "event_name": pa.array(event_name, pa.string()),
        "trace_id": pa.array(trace_id, pa.string()),
        "span_id": pa.array(span_id, pa.string()),
        "flags": pa.array(flags, pa.int64()),
        "attributes": attrs,
        "attribute_types": attr_types,
        "dropped_attributes_count": pa.array(dropped, pa.int64()),
        **rows.columns(),
    }
    return Converted({"logs": build_table("logs", columns)}, rejected)
