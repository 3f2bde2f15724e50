//! ExportLogsServiceRequest bytes → the `logs` table (otel_delta/convert/logs.py).

use crate::anyvalue::{encode_wire, Encoded, Fallback};
use crate::columns::{
    check_attributes, hex, id_error, int32, int64, strings, timestamp_and_date, AttributeColumns,
    Columns, Rejections, Strings, SPAN_ID_BYTES, TRACE_ID_BYTES,
};
use crate::context::RowContext;
use crate::wire;
use crate::{Outcome, Schemas};

/// A log record's fields, read in place (last occurrence wins, as protobuf decoding does);
/// its attributes are read from their part of the record (`wire::Extent`) when the row is
/// appended.
#[derive(Default)]
struct RecordView<'a> {
    attributes: &'a [u8],
    time: u64,
    observed: u64,
    severity_number: i32,
    severity_text: &'a str,
    body: Option<&'a [u8]>,
    dropped: u32,
    flags: u32,
    trace_id: &'a [u8],
    span_id: &'a [u8],
    event_name: &'a str,
}

impl<'a> RecordView<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Fallback> {
        let mut record = RecordView::default();
        let mut attributes = wire::Extent::default();
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match number {
                1 => record.time = field.fixed64()?,
                2 => record.severity_number = field.varint()? as i32,
                3 => record.severity_text = field.string()?,
                5 => wire::once(&mut record.body, field)?,
                6 => attributes.add(&reader, &field)?,
                7 => record.dropped = field.varint()? as u32,
                8 => record.flags = field.fixed32()?,
                9 => record.trace_id = field.bytes()?,
                10 => record.span_id = field.bytes()?,
                11 => record.observed = field.fixed64()?,
                12 => record.event_name = field.string()?,
                _ => {}
            }
        }
        record.attributes = attributes.of(bytes);
        Ok(record)
    }

    /// Why the record is rejected (`ids.id_error` of its ids), or None.
    fn error(&self) -> Option<String> {
        id_error(self.trace_id, TRACE_ID_BYTES, "log trace_id", false)
            .or_else(|| id_error(self.span_id, SPAN_ID_BYTES, "log span_id", false))
    }

    /// (text, type) of the body: an absent body is (NULL, NULL), a present but empty one
    /// (NULL, "empty").
    fn body(&self) -> Result<Encoded<'a>, Fallback> {
        match self.body {
            Some(body) => encode_wire(Some(body)),
            None => Ok((None, None)),
        }
    }
}

#[derive(Default)]
struct LogColumns {
    time: Vec<i64>,
    observed: Vec<i64>,
    effective: Vec<i64>,
    severity_number: Vec<i32>,
    severity_text: Strings,
    body: Strings,
    body_type: Strings,
    event_name: Strings,
    trace_id: Strings,
    span_id: Strings,
    flags: Vec<i64>,
    attributes: AttributeColumns,
    dropped: Vec<i64>,
}

impl LogColumns {
    fn append(&mut self, record: &RecordView<'_>, scratch: &mut String) -> Result<(), Fallback> {
        self.time.push(record.time as i64);
        self.observed.push(record.observed as i64);
        let effective = if record.time != 0 { record.time } else { record.observed };
        self.effective.push(effective as i64);
        self.severity_number.push(record.severity_number);
        self.severity_text.append_value(record.severity_text);
        let (text, type_) = record.body()?;
        self.body.append_option(text);
        self.body_type.append_option(type_);
        self.event_name.append_value(record.event_name);
        hex(scratch, record.trace_id);
        self.trace_id.append_value(&scratch);
        hex(scratch, record.span_id);
        self.span_id.append_value(&scratch);
        self.flags.push(i64::from(record.flags));
        self.attributes.append_wire(record.attributes, 6)?;
        self.dropped.push(i64::from(record.dropped));
        Ok(())
    }
}

pub fn convert(raw: &[u8], schemas: &Schemas, max_messages: usize) -> Result<Outcome, String> {
    let mut rejected = Rejections::new(max_messages);
    crate::columns::begin_request(raw.len());
    let mut ctx = RowContext::new();
    let mut logs = LogColumns {
        severity_text: Strings::sized("logs", 30),
        body: Strings::sized("logs", 31),
        body_type: Strings::sized("logs", 32),
        event_name: Strings::sized("logs", 33),
        trace_id: Strings::sized("logs", 34),
        span_id: Strings::sized("logs", 35),
        attributes: AttributeColumns::sized("logs", 40),
        ..LogColumns::default()
    };
    let mut scratch = String::with_capacity(32);
    // read in place (crate::wire); whatever it does not take as prost would, Python answers
    let walked = ctx.walk_wire(raw, |ctx, record| {
        let record = RecordView::read(record)?;
        if let Some(error) = record.error() {
            // not a row, but its bytes must decode as an accepted record's would
            record.body()?;
            check_attributes(record.attributes, 6)?;
            rejected.add(error);
            return Ok(());
        }
        ctx.add_row();
        logs.append(&record, &mut scratch)
    });
    if walked.is_err() {
        return Ok(Outcome::Fallback); // Python decodes again and words any error
    }
    if logs.time.is_empty() {
        return Ok(Outcome::Converted(Vec::new(), rejected));
    }
    let fields = crate::schema_of(schemas, "logs")?.fields();
    let mut columns: Columns = ctx.finish(fields)?;
    let (time, date) = timestamp_and_date(&logs.effective);
    columns.put("date", date);
    columns.put("time", time);
    columns.put("time_unix_nano", int64(logs.time));
    columns.put("observed_time_unix_nano", int64(logs.observed));
    columns.put("severity_number", int32(logs.severity_number));
    columns.put("severity_text", strings(logs.severity_text));
    columns.put("body", strings(logs.body));
    columns.put("body_type", strings(logs.body_type));
    columns.put("event_name", strings(logs.event_name));
    columns.put("trace_id", strings(logs.trace_id));
    columns.put("span_id", strings(logs.span_id));
    columns.put("flags", int64(logs.flags));
    logs.attributes.finish(fields, ["attributes", "attribute_types"], &mut columns);
    columns.put("dropped_attributes_count", int64(logs.dropped));
    Ok(Outcome::Converted(vec![("logs", columns.into_struct(fields)?)], rejected))
}
