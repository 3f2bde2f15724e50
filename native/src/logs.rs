//! ExportLogsServiceRequest bytes → the `logs` table (otel_delta/convert/logs.py).
use arrow_array::builder::StringBuilder;
use prost::Message;

use crate::anyvalue::{encode, Fallback};
use crate::columns::{
    hex, id_error, int32, int64, strings, timestamp_and_date, AttributeColumns, Columns,
    Rejections, SPAN_ID_BYTES, TRACE_ID_BYTES,
};
use crate::context::RowContext;
use crate::otlp::opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest;
use crate::otlp::opentelemetry::proto::logs::v1::LogRecord;
use crate::{Outcome, Schemas};

fn log_error(record: &LogRecord) -> Option<String> {
    id_error(&record.trace_id, TRACE_ID_BYTES, "log trace_id", false)
        .or_else(|| id_error(&record.span_id, SPAN_ID_BYTES, "log span_id", false))
}

#[derive(Default)]
struct LogColumns {
    time: Vec<i64>,
    observed: Vec<i64>,
    effective: Vec<i64>,
    severity_number: Vec<i32>,
    severity_text: StringBuilder,
    body: StringBuilder,
    body_type: StringBuilder,
    event_name: StringBuilder,
    trace_id: StringBuilder,
    span_id: StringBuilder,
    flags: Vec<i64>,
    attributes: AttributeColumns,
    dropped: Vec<i64>,
}

impl LogColumns {
    fn append(&mut self, record: &LogRecord, scratch: &mut String) -> Result<(), Fallback> {
        self.time.push(record.time_unix_nano as i64);
        self.observed.push(record.observed_time_unix_nano as i64);
        let effective = if record.time_unix_nano != 0 {
            record.time_unix_nano
        } else {
            record.observed_time_unix_nano
        };
        self.effective.push(effective as i64);
        self.severity_number.push(record.severity_number);
        self.severity_text.append_value(&record.severity_text);
        // an absent body is (NULL, NULL); a present but empty one is (NULL, "empty")
        let (text, type_) = match &record.body {
            Some(body) => encode(Some(body))?,
            None => (None, None),
        };
        self.body.append_option(text);
        self.body_type.append_option(type_);
        self.event_name.append_value(&record.event_name);
        hex(scratch, &record.trace_id);
        self.trace_id.append_value(&scratch);
        hex(scratch, &record.span_id);
        self.span_id.append_value(&scratch);
        self.flags.push(record.flags as i64);
        self.attributes.append(&record.attributes)?;
        self.dropped.push(record.dropped_attributes_count as i64);
        Ok(())
    }
}

pub fn convert(raw: &[u8], schemas: &Schemas, max_messages: usize) -> Result<Outcome, String> {
    let Ok(request) = ExportLogsServiceRequest::decode(raw) else {
        return Ok(Outcome::Fallback); // Python decodes again and words the error
    };
    let mut rejected = Rejections::new(max_messages);
    let mut ctx = RowContext::default();
    let mut logs = LogColumns::default();
    let mut scratch = String::with_capacity(32);
    let walked: Result<(), Fallback> = (|| {
        for resource_logs in &request.resource_logs {
            ctx.enter_resource(resource_logs.resource.as_ref(), &resource_logs.schema_url)?;
            for scope_logs in &resource_logs.scope_logs {
                ctx.enter_scope(scope_logs.scope.as_ref(), &scope_logs.schema_url)?;
                for record in &scope_logs.log_records {
                    if let Some(error) = log_error(record) {
                        rejected.add(error);
                        continue;
                    }
                    ctx.add_row();
                    logs.append(record, &mut scratch)?;
                }
            }
        }
        Ok(())
    })();
    if walked.is_err() {
        return Ok(Outcome::Fallback);
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
