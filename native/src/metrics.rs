//! ExportMetricsServiceRequest bytes → the five `metrics_*` tables, one per data point type
//! (otel_delta/convert/metrics.py). The point types share their columns (metric identity,
//! times, attributes, flags, exemplars); `Points` also holds each type's own columns and puts
//! only those its table has.
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Fields};
use prost::Message;

use crate::anyvalue::Fallback;
use crate::columns::{
    field_type, hex, id_error, int64, list, strings, struct_fields, timestamp_and_date,
    AttributeColumns, Columns, EncodedAttributes, Rejections, Strings, SPAN_ID_BYTES, TRACE_ID_BYTES,
};
use crate::context::RowContext;
use crate::otlp::opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
use crate::otlp::opentelemetry::proto::common::v1::{InstrumentationScope, KeyValue};
use crate::otlp::opentelemetry::proto::metrics::v1::{
    exemplar, exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
    AggregationTemporality, Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric,
    NumberDataPoint, SummaryDataPoint,
};
use crate::otlp::opentelemetry::proto::resource::v1::Resource;
use crate::{Outcome, Schemas};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Gauge,
    Sum,
    Histogram,
    ExponentialHistogram,
    Summary,
}

const KINDS: [(Kind, &str); 5] = [
    (Kind::Gauge, "metrics_gauge"),
    (Kind::Sum, "metrics_sum"),
    (Kind::Histogram, "metrics_histogram"),
    (Kind::ExponentialHistogram, "metrics_exponential_histogram"),
    (Kind::Summary, "metrics_summary"),
];

/// What every data point type carries: attributes, start and time, flags, and (all but the
/// summary) exemplars.
trait DataPoint {
    fn head(&self) -> (&[KeyValue], u64, u64, u32);
    fn exemplars(&self) -> &[Exemplar];
}

macro_rules! data_point {
    ($type:ty, $point:ident => $exemplars:expr) => {
        impl DataPoint for $type {
            fn head(&self) -> (&[KeyValue], u64, u64, u32) {
                (&self.attributes, self.start_time_unix_nano, self.time_unix_nano, self.flags)
            }
            fn exemplars(&self) -> &[Exemplar] {
                let $point = self;
                $exemplars
            }
        }
    };
}

data_point!(NumberDataPoint, p => &p.exemplars);
data_point!(HistogramDataPoint, p => &p.exemplars);
data_point!(ExponentialHistogramDataPoint, p => &p.exemplars);
data_point!(SummaryDataPoint, _p => &[]);

fn exemplar_error(exemplars: &[Exemplar]) -> Option<String> {
    exemplars.iter().find_map(|e| {
        id_error(&e.trace_id, TRACE_ID_BYTES, "exemplar trace_id", false)
            .or_else(|| id_error(&e.span_id, SPAN_ID_BYTES, "exemplar span_id", false))
    })
}

fn temporality_name(value: i32) -> String {
    AggregationTemporality::try_from(value)
        .map(|t| t.as_str_name().to_string())
        .unwrap_or_else(|_| value.to_string())
}

/// Python's `repr(name)` for an ASCII name; None for any other, whose message the Python
/// converter words (its escapes of non-ASCII characters follow Unicode's printable classes).
fn ascii_repr(name: &str) -> Option<String> {
    if !name.is_ascii() {
        return None;
    }
    let quote = if name.contains('\'') && !name.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(name.len() + 2);
    out.push(quote);
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    Some(out)
}

fn uint64_list(data_type: &DataType, offsets: Vec<i32>, values: Vec<i64>) -> ArrayRef {
    list(data_type, offsets, Arc::new(Int64Array::from(values)))
}

struct ExemplarColumns {
    offsets: Vec<i32>,
    time: Vec<i64>,
    value_double: Vec<Option<f64>>,
    value_int: Vec<Option<i64>>,
    trace_id: Strings,
    span_id: Strings,
    attributes: AttributeColumns,
}

impl ExemplarColumns {
    /// Builders `Strings::sized` as the table `name`'s parts 50-55 were.
    fn new(name: &'static str) -> Self {
        Self {
            offsets: vec![0],
            time: Vec::new(),
            value_double: Vec::new(),
            value_int: Vec::new(),
            trace_id: Strings::sized(name, 50),
            span_id: Strings::sized(name, 51),
            attributes: AttributeColumns::sized(name, 52),
        }
    }

    fn append(&mut self, exemplars: &[Exemplar], scratch: &mut String) -> Result<(), Fallback> {
        for e in exemplars {
            self.time.push(e.time_unix_nano as i64);
            self.value_double.push(match e.value {
                Some(exemplar::Value::AsDouble(v)) => Some(v),
                _ => None,
            });
            self.value_int.push(match e.value {
                Some(exemplar::Value::AsInt(v)) => Some(v),
                _ => None,
            });
            hex(scratch, &e.trace_id);
            self.trace_id.append_value(&scratch);
            hex(scratch, &e.span_id);
            self.span_id.append_value(&scratch);
            self.attributes.append(&e.filtered_attributes)?;
        }
        self.offsets.push(self.time.len() as i32);
        Ok(())
    }

    fn finish(self, data_type: &DataType) -> Result<ArrayRef, String> {
        let fields = struct_fields(data_type);
        let mut c = Columns::default();
        c.put("time_unix_nano", int64(self.time));
        c.put("value_double", Arc::new(Float64Array::from(self.value_double)));
        c.put("value_int", Arc::new(Int64Array::from(self.value_int)));
        c.put("trace_id", strings(self.trace_id));
        c.put("span_id", strings(self.span_id));
        self.attributes
            .finish(fields, ["filtered_attributes", "filtered_attribute_types"], &mut c);
        Ok(list(data_type, self.offsets, Arc::new(c.into_struct(fields)?)))
    }
}

/// One exponential histogram side (`positive` or `negative`): null where the point has none.
struct BucketColumns {
    present: Vec<bool>,
    offset: Vec<i32>,
    offsets: Vec<i32>,
    counts: Vec<i64>,
}

impl BucketColumns {
    fn new() -> Self {
        Self { present: Vec::new(), offset: Vec::new(), offsets: vec![0], counts: Vec::new() }
    }

    fn append(&mut self, buckets: Option<&Buckets>) {
        self.present.push(buckets.is_some());
        self.offset.push(buckets.map_or(0, |b| b.offset));
        if let Some(b) = buckets {
            self.counts.extend(b.bucket_counts.iter().map(|c| *c as i64));
        }
        self.offsets.push(self.counts.len() as i32);
    }

    fn finish(self, data_type: &DataType) -> Result<ArrayRef, String> {
        let fields = struct_fields(data_type);
        let counts = uint64_list(field_type(fields, "bucket_counts"), self.offsets, self.counts);
        let mut columns: Vec<ArrayRef> = Vec::new();
        for field in fields.iter() {
            match field.name().as_str() {
                "offset" => columns.push(Arc::new(Int32Array::from(self.offset.clone()))),
                "bucket_counts" => columns.push(counts.clone()),
                other => return Err(format!("native converter has no bucket column {other}")),
            }
        }
        let nulls = NullBuffer::from(self.present);
        let array = StructArray::try_new(fields.clone(), columns, Some(nulls))
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(array))
    }
}

/// The rows of one metrics table: the columns every point has and its type's own.
struct Points {
    kind: Kind,
    ctx: RowContext,
    entered: Option<(usize, usize)>, // the resource and scope `ctx` holds (walk numbering)
    metric_name: Strings,
    metric_description: Strings,
    metric_unit: Strings,
    metric_metadata: AttributeColumns,
    start: Vec<i64>,
    time: Vec<i64>,
    attributes: AttributeColumns,
    flags: Vec<i64>,
    exemplars: ExemplarColumns,
    // gauge, sum
    value_double: Vec<Option<f64>>,
    value_int: Vec<Option<i64>>,
    // sum, histogram, exponential histogram
    temporality: Strings,
    monotonic: Vec<bool>,
    // histogram, exponential histogram, summary
    count: Vec<i64>,
    sum: Vec<Option<f64>>,
    min: Vec<Option<f64>>,
    max: Vec<Option<f64>>,
    // histogram
    bucket_offsets: Vec<i32>,
    bucket_counts: Vec<i64>,
    bound_offsets: Vec<i32>,
    bounds: Vec<f64>,
    // exponential histogram
    scale: Vec<i32>,
    zero_count: Vec<i64>,
    zero_threshold: Vec<f64>,
    positive: BucketColumns,
    negative: BucketColumns,
    // summary
    quantile_offsets: Vec<i32>,
    quantile: Vec<f64>,
    quantile_value: Vec<f64>,
}

/// Where the walk is: the current resource and scope, and their numbers.
struct Place<'a> {
    resource: Option<&'a Resource>,
    resource_url: &'a str,
    scope: Option<&'a InstrumentationScope>,
    scope_url: &'a str,
    number: (usize, usize),
}

/// The metric a point belongs to, its metadata encoded once.
struct MetricInfo<'a> {
    metric: &'a Metric,
    metadata: EncodedAttributes,
}

impl Points {
    /// The rows of the table `name` (its builders `Strings::sized`).
    fn new(kind: Kind, name: &'static str) -> Self {
        Self {
            kind,
            ctx: RowContext::sized(name),
            entered: None,
            metric_name: Strings::sized(name, 30),
            metric_description: Strings::sized(name, 31),
            metric_unit: Strings::sized(name, 32),
            metric_metadata: AttributeColumns::sized(name, 40),
            start: Vec::new(),
            time: Vec::new(),
            attributes: AttributeColumns::sized(name, 44),
            flags: Vec::new(),
            exemplars: ExemplarColumns::new(name),
            value_double: Vec::new(),
            value_int: Vec::new(),
            temporality: Strings::sized(name, 33),
            monotonic: Vec::new(),
            count: Vec::new(),
            sum: Vec::new(),
            min: Vec::new(),
            max: Vec::new(),
            bucket_offsets: vec![0],
            bucket_counts: Vec::new(),
            bound_offsets: vec![0],
            bounds: Vec::new(),
            scale: Vec::new(),
            zero_count: Vec::new(),
            zero_threshold: Vec::new(),
            positive: BucketColumns::new(),
            negative: BucketColumns::new(),
            quantile_offsets: vec![0],
            quantile: Vec::new(),
            quantile_value: Vec::new(),
        }
    }

    /// The columns every point has, and true; or false when an exemplar's id is invalid and
    /// the point is rejected. The caller then appends the type's own columns.
    fn add_point(
        &mut self,
        place: &Place,
        metric: &MetricInfo,
        point: &impl DataPoint,
        rejected: &mut Rejections,
        scratch: &mut String,
    ) -> Result<bool, Fallback> {
        if let Some(error) = exemplar_error(point.exemplars()) {
            rejected.add(error);
            return Ok(false);
        }
        if self.entered != Some(place.number) {
            if self.entered.map(|(r, _)| r) != Some(place.number.0) {
                self.ctx.enter_resource(place.resource, place.resource_url)?;
            }
            self.ctx.enter_scope(place.scope, place.scope_url)?;
            self.entered = Some(place.number);
        }
        let (attributes, start, time, flags) = point.head();
        self.ctx.add_row();
        self.metric_name.append_value(&metric.metric.name);
        self.metric_description.append_value(&metric.metric.description);
        self.metric_unit.append_value(&metric.metric.unit);
        self.metric_metadata.append_encoded(&metric.metadata);
        self.start.push(start as i64);
        self.time.push(time as i64);
        self.attributes.append(attributes)?;
        self.flags.push(flags as i64);
        if self.kind != Kind::Summary {
            self.exemplars.append(point.exemplars(), scratch)?;
        }
        Ok(true)
    }

    fn number_value(&mut self, point: &NumberDataPoint) {
        self.value_double.push(match point.value {
            Some(number_data_point::Value::AsDouble(v)) => Some(v),
            _ => None,
        });
        self.value_int.push(match point.value {
            Some(number_data_point::Value::AsInt(v)) => Some(v),
            _ => None,
        });
    }

    fn distribution(&mut self, count: u64, sum: Option<f64>, min: Option<f64>, max: Option<f64>) {
        self.count.push(count as i64);
        self.sum.push(sum);
        self.min.push(min);
        self.max.push(max);
    }

    fn finish(self, fields: &Fields) -> Result<Option<StructArray>, String> {
        if self.time.is_empty() {
            return Ok(None);
        }
        let mut columns = self.ctx.finish(fields)?;
        let (time, date) = timestamp_and_date(&self.time);
        columns.put("date", date);
        columns.put("time", time);
        columns.put("metric_name", strings(self.metric_name));
        columns.put("metric_description", strings(self.metric_description));
        columns.put("metric_unit", strings(self.metric_unit));
        self.metric_metadata
            .finish(fields, ["metric_metadata", "metric_metadata_types"], &mut columns);
        columns.put("start_time_unix_nano", int64(self.start));
        columns.put("time_unix_nano", int64(self.time));
        self.attributes.finish(fields, ["attributes", "attribute_types"], &mut columns);
        columns.put("flags", int64(self.flags));
        let kind = self.kind;
        if kind != Kind::Summary {
            columns.put("exemplars", self.exemplars.finish(field_type(fields, "exemplars"))?);
        }
        if matches!(kind, Kind::Gauge | Kind::Sum) {
            columns.put("value_double", Arc::new(Float64Array::from(self.value_double)));
            columns.put("value_int", Arc::new(Int64Array::from(self.value_int)));
        }
        if matches!(kind, Kind::Sum | Kind::Histogram | Kind::ExponentialHistogram) {
            columns.put("aggregation_temporality", strings(self.temporality));
        }
        if kind == Kind::Sum {
            columns.put("is_monotonic", Arc::new(BooleanArray::from(self.monotonic)));
        }
        if matches!(kind, Kind::Histogram | Kind::ExponentialHistogram | Kind::Summary) {
            columns.put("count", int64(self.count));
            columns.put("sum", Arc::new(Float64Array::from(self.sum)));
        }
        if matches!(kind, Kind::Histogram | Kind::ExponentialHistogram) {
            columns.put("min", Arc::new(Float64Array::from(self.min)));
            columns.put("max", Arc::new(Float64Array::from(self.max)));
        }
        if kind == Kind::Histogram {
            let counts_type = field_type(fields, "bucket_counts");
            columns.put("bucket_counts", uint64_list(counts_type, self.bucket_offsets, self.bucket_counts));
            let bounds = Arc::new(Float64Array::from(self.bounds));
            columns.put("explicit_bounds", list(field_type(fields, "explicit_bounds"), self.bound_offsets, bounds));
        }
        if kind == Kind::ExponentialHistogram {
            columns.put("scale", Arc::new(Int32Array::from(self.scale)));
            columns.put("zero_count", int64(self.zero_count));
            columns.put("zero_threshold", Arc::new(Float64Array::from(self.zero_threshold)));
            columns.put("positive", self.positive.finish(field_type(fields, "positive"))?);
            columns.put("negative", self.negative.finish(field_type(fields, "negative"))?);
        }
        if kind == Kind::Summary {
            let values_type = field_type(fields, "quantile_values");
            let item_fields = struct_fields(values_type);
            let mut item = Columns::default();
            item.put("quantile", Arc::new(Float64Array::from(self.quantile)));
            item.put("value", Arc::new(Float64Array::from(self.quantile_value)));
            let item = Arc::new(item.into_struct(item_fields)?);
            columns.put("quantile_values", list(values_type, self.quantile_offsets, item));
        }
        Ok(Some(columns.into_struct(fields)?))
    }
}

/// Appends one metric's points to its table (`tables` in KINDS order).
fn append_metric(
    tables: &mut [Points; 5],
    place: &Place,
    metric: &MetricInfo,
    rejected: &mut Rejections,
    scratch: &mut String,
) -> Result<(), Fallback> {
    let Some(data) = metric.metric.data.as_ref() else { return Ok(()) };
    match data {
        Data::Gauge(g) => {
            let t = &mut tables[0];
            for p in &g.data_points {
                if t.add_point(place, metric, p, rejected, scratch)? {
                    t.number_value(p);
                }
            }
        }
        Data::Sum(s) => {
            let t = &mut tables[1];
            let temporality = temporality_name(s.aggregation_temporality);
            for p in &s.data_points {
                if t.add_point(place, metric, p, rejected, scratch)? {
                    t.number_value(p);
                    t.temporality.append_value(&temporality);
                    t.monotonic.push(s.is_monotonic);
                }
            }
        }
        Data::Histogram(h) => {
            let t = &mut tables[2];
            let temporality = temporality_name(h.aggregation_temporality);
            for p in &h.data_points {
                if t.add_point(place, metric, p, rejected, scratch)? {
                    t.distribution(p.count, p.sum, p.min, p.max);
                    t.temporality.append_value(&temporality);
                    t.bucket_counts.extend(p.bucket_counts.iter().map(|c| *c as i64));
                    t.bucket_offsets.push(t.bucket_counts.len() as i32);
                    t.bounds.extend_from_slice(&p.explicit_bounds);
                    t.bound_offsets.push(t.bounds.len() as i32);
                }
            }
        }
        Data::ExponentialHistogram(h) => {
            let t = &mut tables[3];
            let temporality = temporality_name(h.aggregation_temporality);
            for p in &h.data_points {
                if t.add_point(place, metric, p, rejected, scratch)? {
                    t.distribution(p.count, p.sum, p.min, p.max);
                    t.temporality.append_value(&temporality);
                    t.scale.push(p.scale);
                    t.zero_count.push(p.zero_count as i64);
                    t.zero_threshold.push(p.zero_threshold);
                    t.positive.append(p.positive.as_ref());
                    t.negative.append(p.negative.as_ref());
                }
            }
        }
        Data::Summary(s) => {
            let t = &mut tables[4];
            for p in &s.data_points {
                if t.add_point(place, metric, p, rejected, scratch)? {
                    t.distribution(p.count, Some(p.sum), None, None);
                    for q in &p.quantile_values {
                        t.quantile.push(q.quantile);
                        t.quantile_value.push(q.value);
                    }
                    t.quantile_offsets.push(t.quantile.len() as i32);
                }
            }
        }
    }
    Ok(())
}

pub fn convert(raw: &[u8], schemas: &Schemas, max_messages: usize) -> Result<Outcome, String> {
    let Ok(request) = ExportMetricsServiceRequest::decode(raw) else {
        return Ok(Outcome::Fallback); // Python decodes again and words the error
    };
    let mut rejected = Rejections::new(max_messages);
    crate::columns::begin_request(raw.len());
    let mut tables = KINDS.map(|(kind, name)| Points::new(kind, name));
    let mut scratch = String::with_capacity(32);
    let walked: Result<(), Fallback> = (|| {
        for (r, resource_metrics) in request.resource_metrics.iter().enumerate() {
            for (s, scope_metrics) in resource_metrics.scope_metrics.iter().enumerate() {
                let place = Place {
                    resource: resource_metrics.resource.as_ref(),
                    resource_url: &resource_metrics.schema_url,
                    scope: scope_metrics.scope.as_ref(),
                    scope_url: &scope_metrics.schema_url,
                    number: (r, s),
                };
                for metric in &scope_metrics.metrics {
                    if metric.data.is_none() {
                        let name = ascii_repr(&metric.name).ok_or(Fallback)?;
                        rejected.note(format!("metric {name} has no data points and was dropped"));
                        continue;
                    }
                    let info = MetricInfo { metric, metadata: EncodedAttributes::new(&metric.metadata)? };
                    append_metric(&mut tables, &place, &info, &mut rejected, &mut scratch)?;
                }
            }
        }
        Ok(())
    })();
    if walked.is_err() {
        return Ok(Outcome::Fallback);
    }
    let mut out = Vec::new();
    for (points, (_, name)) in tables.into_iter().zip(KINDS) {
        let schema = crate::schema_of(schemas, name)?;
        if let Some(table) = points.finish(schema.fields())? {
            out.push((name, table));
        }
    }
    Ok(Outcome::Converted(out, rejected))
}
