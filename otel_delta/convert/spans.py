"""ExportTraceServiceRequest → Arrow table `spans`."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otel_delta.convert.columns import (
    AttributeColumns,
    KeyRepeats,
    enum_name,
    enum_names,
    list_array,
    struct_array,
    timestamp_and_date,
    unsigned,
)
from otel_delta.convert.context import RowContext
from otel_delta.convert.ids import SPAN_ID_BYTES, TRACE_ID_BYTES, id_error
from otel_delta.convert.result import Converted, Rejections, build_table
from otel_delta.tables.schemas import SPAN_EVENT, SPAN_LINK

KIND_NAMES = enum_names(Span.SpanKind)
STATUS_NAMES = enum_names(Status.StatusCode)


def span_error(span: Span) -> str | None:
    error = (
        id_error(span.trace_id, TRACE_ID_BYTES, "span trace_id", True)
        or id_error(span.span_id, SPAN_ID_BYTES, "span span_id", True)
        or id_error(span.parent_span_id, SPAN_ID_BYTES, "span parent_span_id", False)
    )
    if error:
        return error
    for link in span.links:
        error = id_error(link.trace_id, TRACE_ID_BYTES, "link trace_id", True) or id_error(
            link.span_id, SPAN_ID_BYTES, "link span_id", True
        )
        if error:
            return error
    return None


class _EventColumns:
    def __init__(self, repeats: KeyRepeats) -> None:
        self.offsets = [0]
        self.time: list[int] = []
        self.name: list[str] = []
        self.attributes = AttributeColumns(repeats)
        self.dropped: list[int] = []

    def append(self, events: Iterable[Span.Event]) -> None:
        for event in events:
            self.time.append(event.time_unix_nano)
            self.name.append(event.name)
            repeated = self.attributes.append(event.attributes)
            self.dropped.append(event.dropped_attributes_count + repeated)
        self.offsets.append(len(self.name))

    def array(self) -> pa.Array:
        attrs, types = self.attributes.arrays()
        values = struct_array(
            {
                "time_unix_nano": unsigned(self.time),
                "name": pa.array(self.name, pa.string()),
                "attributes": attrs,
                "attribute_types": types,
                "dropped_attributes_count": pa.array(self.dropped, pa.int64()),
            },
            SPAN_EVENT,
        )
        return list_array(self.offsets, values)


class _LinkColumns:
    def __init__(self, repeats: KeyRepeats) -> None:
        self.offsets = [0]
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.trace_state: list[str] = []
        self.flags: list[int] = []
        self.attributes = AttributeColumns(repeats)
        self.dropped: list[int] = []

    def append(self, links: Iterable[Span.Link]) -> None:
        for link in links:
            self.trace_id.append(link.trace_id.hex())
            self.span_id.append(link.span_id.hex())
            self.trace_state.append(link.trace_state)
            self.flags.append(link.flags)
            repeated = self.attributes.append(link.attributes)
            self.dropped.append(link.dropped_attributes_count + repeated)
        self.offsets.append(len(self.trace_id))

    def array(self) -> pa.Array:
        attrs, types = self.attributes.arrays()
        values = struct_array(
            {
                "trace_id": pa.array(self.trace_id, pa.string()),
                "span_id": pa.array(self.span_id, pa.string()),
                "trace_state": pa.array(self.trace_state, pa.string()),
                "flags": pa.array(self.flags, pa.int64()),
                "attributes": attrs,
                "attribute_types": types,
                "dropped_attributes_count": pa.array(self.dropped, pa.int64()),
            },
            SPAN_LINK,
        )
        return list_array(self.offsets, values)


def spans_to_arrow(request: ExportTraceServiceRequest) -> Converted:
    rejected = Rejections()
    ctx = RowContext(request)
    rows = ctx.new_rows()
    trace_id: list[str] = []
    span_id: list[str] = []
    parent: list[str] = []
    trace_state: list[str] = []
    flags: list[int] = []
    name: list[str] = []
    kind: list[str] = []
    start: list[int] = []
    end: list[int] = []
    status_code: list[str] = []
    status_message: list[str] = []
    attributes = AttributeColumns(ctx.repeats)
    dropped_attributes: list[int] = []
    events = _EventColumns(ctx.repeats)
    dropped_events: list[int] = []
    links = _LinkColumns(ctx.repeats)
    dropped_links: list[int] = []

    for resource_spans in request.resource_spans:
        ctx.enter_resource(resource_spans.resource, resource_spans.schema_url)
        for scope_spans in resource_spans.scope_spans:
            ctx.enter_scope(scope_spans.scope, scope_spans.schema_url)
            for span in scope_spans.spans:
                error = span_error(span)
                if error:
                    rejected.add(error)
                    continue
                rows.add_row()
                trace_id.append(span.trace_id.hex())
                span_id.append(span.span_id.hex())
                parent.append(span.parent_span_id.hex())
                trace_state.append(span.trace_state)
                flags.append(span.flags)
                name.append(span.name)
                kind.append(enum_name(KIND_NAMES, span.kind))
                start.append(span.start_time_unix_nano)
                end.append(span.end_time_unix_nano)
                status = span.status
                status_code.append(enum_name(STATUS_NAMES, status.code))
                status_message.append(status.message)
                repeated = attributes.append(span.attributes)
                dropped_attributes.append(span.dropped_attributes_count + repeated)
                events.append(span.events)
                dropped_events.append(span.dropped_events_count)
                links.append(span.links)
                dropped_links.append(span.dropped_links_count)

    ctx.repeats.note(rejected)
    if not trace_id:
        return Converted({}, rejected)
    start_nanos = unsigned(start)
    end_nanos = unsigned(end)
    start_ts, date = timestamp_and_date(start_nanos)
    attrs, attr_types = attributes.arrays()
    columns = {
        "date": date,
        "start_time": start_ts,
        "trace_id": pa.array(trace_id, pa.string()),
        "span_id": pa.array(span_id, pa.string()),
        "parent_span_id": pa.array(parent, pa.string()),
        "trace_state": pa.array(trace_state, pa.string()),
        "flags": pa.array(flags, pa.int64()),
        "name": pa.array(name, pa.string()),
        "kind": pa.array(kind, pa.string()),
        "start_time_unix_nano": start_nanos,
        "duration_ns": pc.subtract(end_nanos, start_nanos),
        "status_code": pa.array(status_code, pa.string()),
        "status_message": pa.array(status_message, pa.string()),
        "attributes": attrs,
        "attribute_types": attr_types,
        "dropped_attributes_count": pa.array(dropped_attributes, pa.int64()),
        "events": events.array(),
        "dropped_events_count": pa.array(dropped_events, pa.int64()),
        "links": links.array(),
        "dropped_links_count": pa.array(dropped_links, pa.int64()),
        **rows.columns(),
    }
    return Converted({"spans": build_table("spans", columns)}, rejected)
