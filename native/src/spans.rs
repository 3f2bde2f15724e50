//! ExportTraceServiceRequest bytes → the `spans` table (otel_delta/convert/spans.py).
use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::StructArray;

use crate::anyvalue::Fallback;
use crate::columns::{
    check_attributes, field_type, hex, id_error, int64, list, strings, struct_fields,
    timestamp_and_date, AttributeColumns, Columns, Rejections, Strings, SPAN_ID_BYTES, TRACE_ID_BYTES,
};
use crate::context::RowContext;
use crate::otlp::opentelemetry::proto::trace::v1::{span, status};
use crate::wire;
use crate::{Outcome, Schemas};

/// Enum name, or the number as text for values newer than the proto (`columns.enum_name`).
fn kind_name(value: i32) -> Cow<'static, str> {
    span::SpanKind::try_from(value)
        .map(|k| Cow::Borrowed(k.as_str_name()))
        .unwrap_or_else(|_| Cow::Owned(value.to_string()))
}

fn status_name(value: i32) -> Cow<'static, str> {
    status::StatusCode::try_from(value)
        .map(|k| Cow::Borrowed(k.as_str_name()))
        .unwrap_or_else(|_| Cow::Owned(value.to_string()))
}

/// A span's scalar fields, read in place (last occurrence wins, as protobuf decoding does);
/// its attributes, events and links are read from their parts of the span (`wire::Extent`)
/// when the row is appended.
#[derive(Default)]
struct SpanView<'a> {
    attributes: &'a [u8],
    events: &'a [u8],
    links: &'a [u8],
    trace_id: &'a [u8],
    span_id: &'a [u8],
    trace_state: &'a str,
    parent: &'a [u8],
    flags: u32,
    name: &'a str,
    kind: i32,
    start: u64,
    end: u64,
    dropped_attributes: u32,
    dropped_events: u32,
    dropped_links: u32,
    status: Option<&'a [u8]>,
}

impl<'a> SpanView<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Fallback> {
        let mut span = SpanView::default();
        let mut attributes = wire::Extent::default();
        let (mut events, mut links) = (attributes, attributes);
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match number {
                1 => span.trace_id = field.bytes()?,
                2 => span.span_id = field.bytes()?,
                3 => span.trace_state = field.string()?,
                4 => span.parent = field.bytes()?,
                5 => span.name = field.string()?,
                6 => span.kind = field.varint()? as i32,
                7 => span.start = field.fixed64()?,
                8 => span.end = field.fixed64()?,
                9 => attributes.add(&reader, &field)?,
                11 => events.add(&reader, &field)?,
                13 => links.add(&reader, &field)?,
                10 => span.dropped_attributes = field.varint()? as u32,
                12 => span.dropped_events = field.varint()? as u32,
                14 => span.dropped_links = field.varint()? as u32,
                15 => wire::once(&mut span.status, field)?,
                16 => span.flags = field.fixed32()?,
                _ => {}
            }
        }
        span.attributes = attributes.of(bytes);
        span.events = events.of(bytes);
        span.links = links.of(bytes);
        Ok(span)
    }

    /// Why the span is rejected (`ids.id_error` of its ids, then of each link's), or None.
    fn error(&self) -> Result<Option<String>, Fallback> {
        let own = id_error(self.trace_id, TRACE_ID_BYTES, "span trace_id", true)
            .or_else(|| id_error(self.span_id, SPAN_ID_BYTES, "span span_id", true))
            .or_else(|| id_error(self.parent, SPAN_ID_BYTES, "span parent_span_id", false));
        if own.is_some() {
            return Ok(own);
        }
        for link in wire::repeated(self.links, 13) {
            let link = LinkView::read(link?)?;
            let error = id_error(link.trace_id, TRACE_ID_BYTES, "link trace_id", true)
                .or_else(|| id_error(link.span_id, SPAN_ID_BYTES, "link span_id", true));
            if error.is_some() {
                return Ok(error);
            }
        }
        Ok(None)
    }

    /// `(code, message)` of its status (0 and "" without one).
    fn status(&self) -> Result<(i32, &'a str), Fallback> {
        let Some(bytes) = self.status else { return Ok((0, "")) };
        let (mut code, mut message) = (0, "");
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match number {
                2 => message = field.string()?,
                3 => code = field.varint()? as i32,
                _ => {}
            }
        }
        Ok((code, message))
    }
}

#[derive(Default)]
struct LinkView<'a> {
    attributes: &'a [u8],
    trace_id: &'a [u8],
    span_id: &'a [u8],
    trace_state: &'a str,
    dropped: u32,
    flags: u32,
}

impl<'a> LinkView<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Fallback> {
        let mut link = LinkView::default();
        let mut attributes = wire::Extent::default();
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match number {
                1 => link.trace_id = field.bytes()?,
                2 => link.span_id = field.bytes()?,
                3 => link.trace_state = field.string()?,
                4 => attributes.add(&reader, &field)?,
                5 => link.dropped = field.varint()? as u32,
                6 => link.flags = field.fixed32()?,
                _ => {}
            }
        }
        link.attributes = attributes.of(bytes);
        Ok(link)
    }
}

struct EventColumns {
    offsets: Vec<i32>,
    time: Vec<i64>,
    name: Strings,
    attributes: AttributeColumns,
    dropped: Vec<i64>,
}

impl EventColumns {
    /// The events (field 11) in `events`, the part of a span holding them; `append` false:
    /// only read them (a rejected span's events must decode as they would have, but make no
    /// row).
    fn append_wire(&mut self, events: &[u8], append: bool) -> Result<(), Fallback> {
        for event in wire::repeated(events, 11) {
            let event = event?;
            let (mut time, mut name, mut dropped) = (0u64, "", 0u32);
            let mut attributes = wire::Extent::default();
            let mut fields = wire::fields(event);
            while let Some((number, field)) = fields.next_field()? {
                match number {
                    1 => time = field.fixed64()?,
                    2 => name = field.string()?,
                    3 => attributes.add(&fields, &field)?,
                    4 => dropped = field.varint()? as u32,
                    _ => {}
                }
            }
            let attributes = attributes.of(event);
            if append {
                self.time.push(time as i64);
                self.name.append_value(name);
                self.attributes.append_wire(attributes, 3)?;
                self.dropped.push(i64::from(dropped));
            } else {
                check_attributes(attributes, 3)?;
            }
        }
        if append {
            self.offsets.push(self.time.len() as i32);
        }
        Ok(())
    }
}

struct LinkColumns {
    offsets: Vec<i32>,
    trace_id: Strings,
    span_id: Strings,
    trace_state: Strings,
    flags: Vec<i64>,
    attributes: AttributeColumns,
    dropped: Vec<i64>,
}

impl LinkColumns {
    /// The links (field 13) in `links`, the part of a span holding them; `append` false:
    /// only read them.
    fn append_wire(&mut self, links: &[u8], scratch: &mut String, append: bool) -> Result<(), Fallback> {
        for link in wire::repeated(links, 13) {
            let link = LinkView::read(link?)?;
            if !append {
                check_attributes(link.attributes, 4)?;
                continue;
            }
            hex(scratch, link.trace_id);
            self.trace_id.append_value(&scratch);
            hex(scratch, link.span_id);
            self.span_id.append_value(&scratch);
            self.trace_state.append_value(link.trace_state);
            self.flags.push(i64::from(link.flags));
            self.attributes.append_wire(link.attributes, 4)?;
            self.dropped.push(i64::from(link.dropped));
        }
        if append {
            self.offsets.push(self.flags.len() as i32);
        }
        Ok(())
    }
}

#[derive(Default)]
struct SpanColumns {
    start: Vec<i64>,
    duration: Vec<i64>, // end − start, wrapping: the end itself is not stored (tables/versions.py)
    trace_id: Strings,
    span_id: Strings,
    parent: Strings,
    trace_state: Strings,
    flags: Vec<i64>,
    name: Strings,
    kind: Strings,
    status_code: Strings,
    status_message: Strings,
    attributes: AttributeColumns,
    dropped_attributes: Vec<i64>,
    dropped_events: Vec<i64>,
    dropped_links: Vec<i64>,
}

impl SpanColumns {
    fn append(&mut self, span: &SpanView<'_>, scratch: &mut String) -> Result<(), Fallback> {
        hex(scratch, span.trace_id);
        self.trace_id.append_value(&scratch);
        hex(scratch, span.span_id);
        self.span_id.append_value(&scratch);
        hex(scratch, span.parent);
        self.parent.append_value(&scratch);
        self.trace_state.append_value(span.trace_state);
        self.flags.push(i64::from(span.flags));
        self.name.append_value(span.name);
        self.kind.append_value(kind_name(span.kind));
        let (start, end) = (span.start as i64, span.end as i64);
        self.start.push(start);
        self.duration.push(end.wrapping_sub(start));
        let (code, message) = span.status()?;
        self.status_code.append_value(status_name(code));
        self.status_message.append_value(message);
        self.attributes.append_wire(span.attributes, 9)?;
        self.dropped_attributes.push(i64::from(span.dropped_attributes));
        self.dropped_events.push(i64::from(span.dropped_events));
        self.dropped_links.push(i64::from(span.dropped_links));
        Ok(())
    }
}

pub fn convert(raw: &[u8], schemas: &Schemas, max_messages: usize) -> Result<Outcome, String> {
    let mut rejected = Rejections::new(max_messages);
    crate::columns::begin_request(raw.len());
    let mut ctx = RowContext::new();
    let mut spans = SpanColumns {
        trace_id: Strings::sized("spans", 30),
        span_id: Strings::sized("spans", 31),
        parent: Strings::sized("spans", 32),
        trace_state: Strings::sized("spans", 33),
        name: Strings::sized("spans", 34),
        kind: Strings::sized("spans", 35),
        status_code: Strings::sized("spans", 36),
        status_message: Strings::sized("spans", 37),
        attributes: AttributeColumns::sized("spans", 40),
        ..SpanColumns::default()
    };
    let mut events = EventColumns {
        offsets: vec![0],
        time: Vec::new(),
        name: Strings::sized("spans", 50),
        attributes: AttributeColumns::sized("spans", 52),
        dropped: Vec::new(),
    };
    let mut links = LinkColumns {
        offsets: vec![0],
        trace_id: Strings::sized("spans", 60),
        span_id: Strings::sized("spans", 61),
        trace_state: Strings::sized("spans", 62),
        flags: Vec::new(),
        attributes: AttributeColumns::sized("spans", 64),
        dropped: Vec::new(),
    };
    let mut scratch = String::with_capacity(32);
    // read in place (crate::wire); whatever it does not take as prost would, Python answers
    let walked = ctx.walk_wire(raw, |ctx, span| {
        let span = SpanView::read(span)?;
        if let Some(error) = span.error()? {
            // not a row, but its bytes must decode as an accepted span's would
            span.status()?;
            check_attributes(span.attributes, 9)?;
            events.append_wire(span.events, false)?;
            links.append_wire(span.links, &mut scratch, false)?;
            rejected.add(error);
            return Ok(());
        }
        ctx.add_row();
        spans.append(&span, &mut scratch)?;
        events.append_wire(span.events, true)?;
        links.append_wire(span.links, &mut scratch, true)
    });
    if walked.is_err() {
        return Ok(Outcome::Fallback); // Python decodes again and words any error
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
