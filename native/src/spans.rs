//! ExportTraceServiceRequest bytes → the `spans` table (otel_delta/convert/spans.py).
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::StructArray;
use prost::Message;

use crate::anyvalue::Fallback;
use crate::columns::{
    field_type, hex, id_error, int64, list, strings, struct_fields, timestamp_and_date,
    AttributeColumns, Columns, Rejections, SPAN_ID_BYTES, TRACE_ID_BYTES,
};
use crate::context::RowContext;
use crate::otlp::opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
use crate::otlp::opentelemetry::proto::trace::v1::{span, status, Span};
use crate::{Outcome, Schemas};

fn span_error(span: &Span) -> Option<String> {
    id_error(&span.trace_id, TRACE_ID_BYTES, "span trace_id", true)
        .or_else(|| id_error(&span.span_id, SPAN_ID_BYTES, "span span_id", true))
        .or_else(|| id_error(&span.parent_span_id, SPAN_ID_BYTES, "span parent_span_id", false))
        .or_else(|| {
            span.links.iter().find_map(|link| {
                id_error(&link.trace_id, TRACE_ID_BYTES, "link trace_id", true)
                    .or_else(|| id_error(&link.span_id, SPAN_ID_BYTES, "link span_id", true))
            })
        })
}

/// Enum name, or the number as text for values newer than the proto (`columns.enum_name`).
fn kind_name(value: i32) -> String {
    span::SpanKind::try_from(value)
        .map(|k| k.as_str_name().to_string())
        .unwrap_or_else(|_| value.to_string())
}

fn status_name(value: i32) -> String {
    status::StatusCode::try_from(value)
        .map(|k| k.as_str_name().to_string())
        .unwrap_or_else(|_| value.to_string())
}

struct EventColumns {
    offsets: Vec<i32>,
    time: Vec<i64>,
    name: StringBuilder,
    attributes: AttributeColumns,
    dropped: Vec<i64>,
}

impl EventColumns {
    fn append(&mut self, events: &[span::Event]) -> Result<(), Fallback> {
        for event in events {
            self.time.push(event.time_unix_nano as i64);
            self.name.append_value(&event.name);
            self.attributes.append(&event.attributes)?;
            self.dropped.push(event.dropped_attributes_count as i64);
        }
        self.offsets.push(self.time.len() as i32);
        Ok(())
    }
}

struct LinkColumns {
    offsets: Vec<i32>,
    trace_id: StringBuilder,
    span_id: StringBuilder,
    trace_state: StringBuilder,
    flags: Vec<i64>,
    attributes: AttributeColumns,
    dropped: Vec<i64>,
}

impl LinkColumns {
    fn append(&mut self, links: &[span::Link], scratch: &mut String) -> Result<(), Fallback> {
        for link in links {
            hex(scratch, &link.trace_id);
            self.trace_id.append_value(&scratch);
            hex(scratch, &link.span_id);
            self.span_id.append_value(&scratch);
            self.trace_state.append_value(&link.trace_state);
            self.flags.push(link.flags as i64);
            self.attributes.append(&link.attributes)?;
            self.dropped.push(link.dropped_attributes_count as i64);
        }
        self.offsets.push(self.flags.len() as i32);
        Ok(())
    }
}

#[derive(Default)]
struct SpanColumns {
    start: Vec<i64>,
    duration: Vec<i64>, // end − start, wrapping: the end itself is not stored (tables/versions.py)
    trace_id: StringBuilder,
    span_id: StringBuilder,
    parent: StringBuilder,
    trace_state: StringBuilder,
    flags: Vec<i64>,
    name: StringBuilder,
    kind: StringBuilder,
    status_code: StringBuilder,
    status_message: StringBuilder,
    attributes: AttributeColumns,
    dropped_attributes: Vec<i64>,
    dropped_events: Vec<i64>,
    dropped_links: Vec<i64>,
}

impl SpanColumns {
    fn append(&mut self, span: &Span, scratch: &mut String) -> Result<(), Fallback> {
        hex(scratch, &span.trace_id);
        self.trace_id.append_value(&scratch);
        hex(scratch, &span.span_id);
        self.span_id.append_value(&scratch);
        hex(scratch, &span.parent_span_id);
        self.parent.append_value(&scratch);
        self.trace_state.append_value(&span.trace_state);
        self.flags.push(span.flags as i64);
        self.name.append_value(&span.name);
        self.kind.append_value(kind_name(span.kind));
        let (start, end) = (span.start_time_unix_nano as i64, span.end_time_unix_nano as i64);
        self.start.push(start);
        self.duration.push(end.wrapping_sub(start));
        let (code, message) = span.status.as_ref().map_or((0, ""), |s| (s.code, s.message.as_str()));
        self.status_code.append_value(status_name(code));
        self.status_message.append_value(message);
        self.attributes.append(&span.attributes)?;
        self.dropped_attributes.push(span.dropped_attributes_count as i64);
        self.dropped_events.push(span.dropped_events_count as i64);
        self.dropped_links.push(span.dropped_links_count as i64);
        Ok(())
    }
}

pub fn convert(raw: &[u8], schemas: &Schemas, max_messages: usize) -> Result<Outcome, String> {
    let Ok(request) = ExportTraceServiceRequest::decode(raw) else {
        return Ok(Outcome::Fallback); // Python decodes again and words the error
    };
    let mut rejected = Rejections::new(max_messages);
    let mut ctx = RowContext::default();
    let mut spans = SpanColumns::default();
    let mut events = EventColumns {
        offsets: vec![0],
        time: Vec::new(),
        name: StringBuilder::new(),
        attributes: AttributeColumns::default(),
        dropped: Vec::new(),
    };
    let mut links = LinkColumns {
        offsets: vec![0],
        trace_id: StringBuilder::new(),
        span_id: StringBuilder::new(),
        trace_state: StringBuilder::new(),
        flags: Vec::new(),
        attributes: AttributeColumns::default(),
        dropped: Vec::new(),
    };
    let mut scratch = String::with_capacity(32);
    let walked: Result<(), Fallback> = (|| {
        for resource_spans in &request.resource_spans {
            ctx.enter_resource(resource_spans.resource.as_ref(), &resource_spans.schema_url)?;
            for scope_spans in &resource_spans.scope_spans {
                ctx.enter_scope(scope_spans.scope.as_ref(), &scope_spans.schema_url)?;
                for span in &scope_spans.spans {
                    if let Some(error) = span_error(span) {
                        rejected.add(error);
                        continue;
                    }
                    ctx.add_row();
                    spans.append(span, &mut scratch)?;
                    events.append(&span.events)?;
                    links.append(&span.links, &mut scratch)?;
                }
            }
        }
        Ok(())
    })();
    if walked.is_err() {
        return Ok(Outcome::Fallback);
    }
    if spans.flags.is_empty() {
        return Ok(Outcome::Converted(Vec::new(), rejected));
    }
    let fields = crate::schema_of(schemas, "spans")?.fields();
    let mut columns = ctx.finish(fields)?;
    let (start_time, date) = timestamp_and_date(&spans.start);
    columns.put("date", date);
    columns.put("start_time", start_time);
    columns.put("trace_id", strings(spans.trace_id));
    columns.put("span_id", strings(spans.span_id));
    columns.put("parent_span_id", strings(spans.parent));
    columns.put("trace_state", strings(spans.trace_state));
    columns.put("flags", int64(spans.flags));
    columns.put("name", strings(spans.name));
    columns.put("kind", strings(spans.kind));
    columns.put("start_time_unix_nano", int64(spans.start));
    columns.put("duration_ns", int64(spans.duration));
    columns.put("status_code", strings(spans.status_code));
    columns.put("status_message", strings(spans.status_message));
    spans.attributes.finish(fields, ["attributes", "attribute_types"], &mut columns);
    columns.put("dropped_attributes_count", int64(spans.dropped_attributes));
    columns.put("dropped_events_count", int64(spans.dropped_events));
    columns.put("dropped_links_count", int64(spans.dropped_links));

    let events_type = field_type(fields, "events");
    let event_fields = struct_fields(events_type);
    let mut event = Columns::default();
    event.put("time_unix_nano", int64(events.time));
    event.put("name", strings(events.name));
    events.attributes.finish(event_fields, ["attributes", "attribute_types"], &mut event);
    event.put("dropped_attributes_count", int64(events.dropped));
    let event = Arc::new(event.into_struct(event_fields)?);
    columns.put("events", list(events_type, events.offsets, event));

    let links_type = field_type(fields, "links");
    let link_fields = struct_fields(links_type);
    let mut link = Columns::default();
    link.put("trace_id", strings(links.trace_id));
    link.put("span_id", strings(links.span_id));
    link.put("trace_state", strings(links.trace_state));
    link.put("flags", int64(links.flags));
    links.attributes.finish(link_fields, ["attributes", "attribute_types"], &mut link);
    link.put("dropped_attributes_count", int64(links.dropped));
    let link = Arc::new(link.into_struct(link_fields)?);
    columns.put("links", list(links_type, links.offsets, link));

    let table: StructArray = columns.into_struct(fields)?;
    Ok(Outcome::Converted(vec![("spans", table)], rejected))
}
