//! ExportMetricsServiceRequest bytes → the five `metrics_*` tables, one per data point type
//! (otel_delta/convert/metrics.py). The point types share their columns (metric identity,
//! times, attributes, flags, exemplars); `Points` also holds each type's own columns and puts
//! only those its table has. Metrics and their points are read from the request's bytes in
//! place (crate::wire), as spans and log records are: decoding the whole request into prost's
//! messages first, and dropping them after, was a third of the conversion.
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Fields};

use crate::anyvalue::Fallback;
use crate::columns::{
    check_attributes, field_type, hex, id_error, int64, list, strings, struct_fields, timestamp_and_date,
    AttributeColumns, Columns, EncodedAttributes, Rejections, Strings, SPAN_ID_BYTES, TRACE_ID_BYTES,
};
use crate::context::RowContext;
use crate::repeat::{put_repeated_attributes, repeated_strings, AttributeRows};
use crate::otlp::opentelemetry::proto::common::v1::InstrumentationScope;
use crate::otlp::opentelemetry::proto::metrics::v1::AggregationTemporality;
use crate::otlp::opentelemetry::proto::resource::v1::Resource;
use crate::wire::{self, Value};
use crate::{Outcome, Schemas};

/// A data point type, declared in `KINDS` order (`Kind::index`).
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

impl Kind {
    /// The type whose message is field `number` of a Metric (its `data` oneof).
    fn of_data_field(number: u32) -> Option<Kind> {
        match number {
            5 => Some(Kind::Gauge),
            7 => Some(Kind::Sum),
            9 => Some(Kind::Histogram),
            10 => Some(Kind::ExponentialHistogram),
            11 => Some(Kind::Summary),
            _ => None,
        }
    }

    /// Its table's place in `KINDS` (and in the converter's tables).
    fn index(self) -> usize {
        self as usize
    }

    /// The field of its data point holding the point's attributes.
    fn attributes_field(self) -> u32 {
        match self {
            Kind::Histogram => 9,
            Kind::ExponentialHistogram => 1,
            Kind::Gauge | Kind::Sum | Kind::Summary => 7,
        }
    }

    /// The field of its data point holding the point's exemplars (a summary has none).
    fn exemplars_field(self) -> Option<u32> {
        match self {
            Kind::Gauge | Kind::Sum => Some(5),
            Kind::Histogram => Some(8),
            Kind::ExponentialHistogram => Some(11),
            Kind::Summary => None,
        }
    }

    /// A point of this type has its metric's aggregation temporality.
    fn has_temporality(self) -> bool {
        matches!(self, Kind::Sum | Kind::Histogram | Kind::ExponentialHistogram)
    }
}

/// A number point's value, or an exemplar's: the `value` oneof (the last one given wins).
#[derive(Clone, Copy)]
enum Number {
    Double(f64),
    Int(i64),
}

fn double(field: Value<'_>) -> Result<f64, Fallback> {
    Ok(f64::from_bits(field.fixed64()?))
}

/// A `sint32` (zigzag) varint as prost decodes it: truncated to 32 bits first.
fn zigzag32(value: u64) -> i32 {
    let value = value as u32;
    ((value >> 1) as i32) ^ -((value & 1) as i32)
}

/// A metric's fields, read in place.
struct MetricView<'a> {
    name: &'a str,
    description: &'a str,
    unit: &'a str,
    metadata: &'a [u8], // the part holding field 12, its KeyValues (wire::Extent)
    data: Option<(Kind, &'a [u8])>,
}

impl<'a> MetricView<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Fallback> {
        let (mut name, mut description, mut unit) = ("", "", "");
        let mut metadata = wire::Extent::default();
        let mut data = None;
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match number {
                1 => name = field.string()?,
                2 => description = field.string()?,
                3 => unit = field.string()?,
                12 => metadata.add(&reader, &field)?,
                _ => {
                    let Some(kind) = Kind::of_data_field(number) else { continue };
                    if data.is_some() {
                        return Err(Fallback); // the oneof twice: protobuf merges or replaces, left to Python
                    }
                    data = Some((kind, field.bytes()?));
                }
            }
        }
        Ok(Self { name, description, unit, metadata: metadata.of(bytes), data })
    }
}

/// A Gauge, Sum, Histogram, ExponentialHistogram or Summary message, read in place.
struct DataView<'a> {
    points: &'a [u8], // the part holding field 1, its data points
    temporality: i32,
    monotonic: bool,
}

impl<'a> DataView<'a> {
    fn read(kind: Kind, bytes: &'a [u8]) -> Result<Self, Fallback> {
        let mut points = wire::Extent::default();
        let (mut temporality, mut monotonic) = (0, false);
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match (number, kind) {
                (1, _) => points.add(&reader, &field)?,
                (2, k) if k.has_temporality() => temporality = field.varint()? as i32,
                (3, Kind::Sum) => monotonic = field.varint()? != 0,
                _ => {}
            }
        }
        Ok(Self { points: points.of(bytes), temporality, monotonic })
    }
}

/// An exemplar's fields, read in place.
#[derive(Clone, Copy)]
struct ExemplarView<'a> {
    attributes: &'a [u8], // the part holding field 7, its filtered attributes
    time: u64,
    value: Option<Number>,
    trace_id: &'a [u8],
    span_id: &'a [u8],
}

impl<'a> ExemplarView<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Fallback> {
        let mut e = Self { attributes: &[], time: 0, value: None, trace_id: &[], span_id: &[] };
        let mut attributes = wire::Extent::default();
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match number {
                2 => e.time = field.fixed64()?,
                3 => e.value = Some(Number::Double(double(field)?)),
                4 => e.span_id = field.bytes()?,
                5 => e.trace_id = field.bytes()?,
                6 => e.value = Some(Number::Int(field.fixed64()? as i64)),
                7 => attributes.add(&reader, &field)?,
                _ => {}
            }
        }
        e.attributes = attributes.of(bytes);
        Ok(e)
    }
}

fn exemplar_error(exemplars: &[ExemplarView<'_>]) -> Option<String> {
    exemplars.iter().find_map(|e| {
        id_error(e.trace_id, TRACE_ID_BYTES, "exemplar trace_id", false)
            .or_else(|| id_error(e.span_id, SPAN_ID_BYTES, "exemplar span_id", false))
    })
}

/// A point's repeated values, read with its other fields; reused from point to point.
#[derive(Default)]
struct Lists<'a> {
    exemplars: Vec<ExemplarView<'a>>,
    counts: Vec<i64>,
    bounds: Vec<f64>,
    positive: Vec<i64>,
    negative: Vec<i64>,
    quantiles: Vec<(f64, f64)>,
}

impl Lists<'_> {
    fn clear(&mut self) {
        self.exemplars.clear();
        self.counts.clear();
        self.bounds.clear();
        self.positive.clear();
        self.negative.clear();
        self.quantiles.clear();
    }
}

/// A data point's scalar fields, read in place (last occurrence wins, as protobuf decoding
/// has it). Which fields a point has, and their numbers, depend on its type; each type's
/// fields not in its message stay at their defaults.
#[derive(Default)]
struct PointView<'a> {
    attributes: &'a [u8], // the part holding its attributes (`Kind::attributes_field`)
    start: u64,
    time: u64,
    flags: u32,
    number: Option<Number>,
    count: u64,
    sum: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    scale: i32,
    zero_count: u64,
    zero_threshold: f64,
    positive: Option<i32>, // the buckets' offset; None: no buckets message
    negative: Option<i32>,
}

impl<'a> PointView<'a> {
    /// The point of type `kind` in `bytes`; its repeated values go to `lists`, cleared first.
    fn read(kind: Kind, bytes: &'a [u8], lists: &mut Lists<'a>) -> Result<Self, Fallback> {
        use Kind::*;
        lists.clear();
        let mut p = PointView::default();
        let mut attributes = wire::Extent::default();
        let mut reader = wire::fields(bytes);
        while let Some((number, field)) = reader.next_field()? {
            match (kind, number) {
                (_, 2) => p.start = field.fixed64()?,
                (_, 3) => p.time = field.fixed64()?,
                (k, n) if n == k.attributes_field() => attributes.add(&reader, &field)?,
                (k, n) if Some(n) == k.exemplars_field() => {
                    lists.exemplars.push(ExemplarView::read(field.bytes()?)?)
                }
                (Gauge | Sum, 4) => p.number = Some(Number::Double(double(field)?)),
                (Gauge | Sum, 6) => p.number = Some(Number::Int(field.fixed64()? as i64)),
                (Gauge | Sum | Summary, 8) | (Histogram | ExponentialHistogram, 10) => {
                    p.flags = field.varint()? as u32
                }
                (Histogram | ExponentialHistogram | Summary, 4) => p.count = field.fixed64()?,
                (Histogram | ExponentialHistogram | Summary, 5) => p.sum = Some(double(field)?),
                (Histogram, 6) => wire::scalars(field, wire::FIXED64, |c| lists.counts.push(c as i64))?,
                (Histogram, 7) => wire::scalars(field, wire::FIXED64, |b| lists.bounds.push(f64::from_bits(b)))?,
                (Histogram, 11) | (ExponentialHistogram, 12) => p.min = Some(double(field)?),
                (Histogram, 12) | (ExponentialHistogram, 13) => p.max = Some(double(field)?),
                (ExponentialHistogram, 6) => p.scale = zigzag32(field.varint()?),
                (ExponentialHistogram, 7) => p.zero_count = field.fixed64()?,
                (ExponentialHistogram, 8) => read_buckets(field, &mut p.positive, &mut lists.positive)?,
                (ExponentialHistogram, 9) => read_buckets(field, &mut p.negative, &mut lists.negative)?,
                (ExponentialHistogram, 14) => p.zero_threshold = double(field)?,
                (Summary, 6) => lists.quantiles.push(read_quantile(field.bytes()?)?),
                _ => {}
            }
        }
        p.attributes = attributes.of(bytes);
        Ok(p)
    }
}

/// An exponential histogram's `positive` or `negative` Buckets: its offset, its counts to
/// `counts`. Given twice, protobuf would merge the two: left to Python.
fn read_buckets(field: Value<'_>, offset: &mut Option<i32>, counts: &mut Vec<i64>) -> Result<(), Fallback> {
    if offset.is_some() {
        return Err(Fallback);
    }
    let mut value = 0;
    let mut reader = wire::fields(field.bytes()?);
    while let Some((number, field)) = reader.next_field()? {
        match number {
            1 => value = zigzag32(field.varint()?),
            2 => wire::scalars(field, wire::VARINT, |c| counts.push(c as i64))?,
            _ => {}
        }
    }
    *offset = Some(value);
    Ok(())
}

/// A summary's ValueAtQuantile: (quantile, value).
fn read_quantile(bytes: &[u8]) -> Result<(f64, f64), Fallback> {
    let (mut quantile, mut value) = (0.0, 0.0);
    let mut reader = wire::fields(bytes);
    while let Some((number, field)) = reader.next_field()? {
        match number {
            1 => quantile = double(field)?,
            2 => value = double(field)?,
            _ => {}
        }
    }
    Ok((quantile, value))
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

    fn append(&mut self, exemplars: &[ExemplarView<'_>], scratch: &mut String) -> Result<(), Fallback> {
        for e in exemplars {
            self.time.push(e.time as i64);
            self.value_double.push(match e.value {
                Some(Number::Double(v)) => Some(v),
                _ => None,
            });
            self.value_int.push(match e.value {
                Some(Number::Int(v)) => Some(v),
                _ => None,
            });
            hex(scratch, e.trace_id);
            self.trace_id.append_value(&scratch);
            hex(scratch, e.span_id);
            self.span_id.append_value(&scratch);
            self.attributes.append_wire(e.attributes, 7)?;
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

    /// One point's side: its offset (None: the point has no such buckets) and its counts.
    fn append(&mut self, offset: Option<i32>, counts: &[i64]) {
        self.present.push(offset.is_some());
        self.offset.push(offset.unwrap_or(0));
        self.counts.extend_from_slice(counts);
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
    metrics: Vec<EncodedMetric>,       // the metrics with points here, and how many each
    metric_entered: Option<usize>,     // the last of them (walk numbering)
    start: Vec<i64>,
    time: Vec<i64>,
    attributes: AttributeColumns,
    flags: Vec<i64>,
    exemplars: ExemplarColumns,
    // gauge, sum
    value_double: Vec<Option<f64>>,
    value_int: Vec<Option<i64>>,
    // sum (its aggregation temporality, and histograms', is the metric's: EncodedMetric)
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
    number: usize, // in the request
    name: &'a str,
    description: &'a str,
    unit: &'a str,
    metadata: EncodedAttributes,
    temporality: Option<String>, // the name, for the types that have one
}

/// A metric as its columns hold it on every point (crate::repeat), and its points' count here.
struct EncodedMetric {
    name: String,
    description: String,
    unit: String,
    metadata: AttributeRows,
    temporality: Option<String>,
    points: usize,
}

impl Points {
    /// The rows of the table `name` (its builders `Strings::sized`).
    fn new(kind: Kind, name: &'static str) -> Self {
        Self {
            kind,
            ctx: RowContext::new(),
            entered: None,
            metrics: Vec::new(),
            metric_entered: None,
            start: Vec::new(),
            time: Vec::new(),
            attributes: AttributeColumns::sized(name, 44),
            flags: Vec::new(),
            exemplars: ExemplarColumns::new(name),
            value_double: Vec::new(),
            value_int: Vec::new(),
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
        point: &PointView<'_>,
        exemplars: &[ExemplarView<'_>],
        rejected: &mut Rejections,
        scratch: &mut String,
    ) -> Result<bool, Fallback> {
        let attributes_field = self.kind.attributes_field();
        if let Some(error) = exemplar_error(exemplars) {
            // not a row, but its bytes must decode as an accepted point's would
            check_attributes(point.attributes, attributes_field)?;
            for e in exemplars {
                check_attributes(e.attributes, 7)?;
            }
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
        self.ctx.add_row();
        if self.metric_entered != Some(metric.number) {
            self.metrics.push(EncodedMetric {
                name: metric.name.to_string(),
                description: metric.description.to_string(),
                unit: metric.unit.to_string(),
                metadata: metric.metadata.map_rows(),
                temporality: metric.temporality.clone(),
                points: 0,
            });
            self.metric_entered = Some(metric.number);
        }
        self.metrics.last_mut().expect("entered above").points += 1;
        self.start.push(point.start as i64);
        self.time.push(point.time as i64);
        self.attributes.append_wire(point.attributes, attributes_field)?;
        self.flags.push(i64::from(point.flags));
        if self.kind != Kind::Summary {
            self.exemplars.append(exemplars, scratch)?;
        }
        Ok(true)
    }

    fn number_value(&mut self, value: Option<Number>) {
        self.value_double.push(match value {
            Some(Number::Double(v)) => Some(v),
            _ => None,
        });
        self.value_int.push(match value {
            Some(Number::Int(v)) => Some(v),
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
        let metrics = || self.metrics.iter().map(|m| (m, m.points));
        let runs = metrics().map(|(m, n)| (Some(m.name.as_str()), n));
        columns.put("metric_name", repeated_strings(field_type(fields, "metric_name"), runs));
        let runs = metrics().map(|(m, n)| (Some(m.description.as_str()), n));
        columns.put("metric_description", repeated_strings(field_type(fields, "metric_description"), runs));
        let runs = metrics().map(|(m, n)| (Some(m.unit.as_str()), n));
        columns.put("metric_unit", repeated_strings(field_type(fields, "metric_unit"), runs));
        let names = ["metric_metadata", "metric_metadata_types"];
        put_repeated_attributes(&mut columns, fields, names, metrics().map(|(m, n)| (&m.metadata, n)));
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
            let temporality = metrics().map(|(m, n)| (m.temporality.as_deref(), n));
            let kind = field_type(fields, "aggregation_temporality");
            columns.put("aggregation_temporality", repeated_strings(kind, temporality));
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

/// Appends the points of one metric of type `kind`, its message `data`, to its table.
fn append_metric<'a>(
    tables: &mut [Points; 5],
    place: &Place,
    metric: &MetricInfo,
    kind: Kind,
    data: DataView<'a>,
    lists: &mut Lists<'a>,
    rejected: &mut Rejections,
    scratch: &mut String,
) -> Result<(), Fallback> {
    let t = &mut tables[kind.index()];
    for point in wire::repeated(data.points, 1) {
        let p = PointView::read(kind, point?, lists)?;
        if !t.add_point(place, metric, &p, &lists.exemplars, rejected, scratch)? {
            continue;
        }
        match kind {
            Kind::Gauge => t.number_value(p.number),
            Kind::Sum => {
                t.number_value(p.number);
                t.monotonic.push(data.monotonic);
            }
            Kind::Histogram => {
                t.distribution(p.count, p.sum, p.min, p.max);
                t.bucket_counts.extend_from_slice(&lists.counts);
                t.bucket_offsets.push(t.bucket_counts.len() as i32);
                t.bounds.extend_from_slice(&lists.bounds);
                t.bound_offsets.push(t.bounds.len() as i32);
            }
            Kind::ExponentialHistogram => {
                t.distribution(p.count, p.sum, p.min, p.max);
                t.scale.push(p.scale);
                t.zero_count.push(p.zero_count as i64);
                t.zero_threshold.push(p.zero_threshold);
                t.positive.append(p.positive, &lists.positive);
                t.negative.append(p.negative, &lists.negative);
            }
            Kind::Summary => {
                t.distribution(p.count, Some(p.sum.unwrap_or(0.0)), None, None);
                for (quantile, value) in &lists.quantiles {
                    t.quantile.push(*quantile);
                    t.quantile_value.push(*value);
                }
                t.quantile_offsets.push(t.quantile.len() as i32);
            }
        }
    }
    Ok(())
}

/// Walks the request's resources, scopes and metrics, appending every point to its table.
fn walk<'a>(
    raw: &'a [u8],
    tables: &mut [Points; 5],
    lists: &mut Lists<'a>,
    rejected: &mut Rejections,
    scratch: &mut String,
) -> Result<(), Fallback> {
    let mut metric_number = 0;
    for (r, resource_part) in wire::repeated(raw, 1).enumerate() {
        let resource_part = resource_part?;
        let (resource, resource_url) = wire::header(resource_part, 1, 2, 3)?;
        let resource = wire::decoded::<Resource>(resource)?;
        for (s, scope_part) in wire::repeated(resource_part, 2).enumerate() {
            let scope_part = scope_part?;
            let (scope, scope_url) = wire::header(scope_part, 1, 2, 3)?;
            let scope = wire::decoded::<InstrumentationScope>(scope)?;
            let place = Place {
                resource: resource.as_ref(),
                resource_url,
                scope: scope.as_ref(),
                scope_url,
                number: (r, s),
            };
            for metric in wire::repeated(scope_part, 2) {
                let metric = MetricView::read(metric?)?;
                let metadata = EncodedAttributes::from_wire(metric.metadata, 12)?;
                let Some((kind, data)) = metric.data else {
                    let name = ascii_repr(metric.name).ok_or(Fallback)?;
                    rejected.note(format!("metric {name} has no data points and was dropped"));
                    continue;
                };
                let data = DataView::read(kind, data)?;
                if data.points.is_empty() {
                    // a gauge, sum or histogram of no points: nothing to store, but said, as
                    // for a metric with no data at all (its name and unit are not kept)
                    let name = ascii_repr(metric.name).ok_or(Fallback)?;
                    rejected.note(format!("metric {name} has no data points and was dropped"));
                    continue;
                }
                metric_number += 1;
                let info = MetricInfo {
                    number: metric_number,
                    name: metric.name,
                    description: metric.description,
                    unit: metric.unit,
                    metadata,
                    temporality: kind.has_temporality().then(|| temporality_name(data.temporality)),
                };
                append_metric(tables, &place, &info, kind, data, lists, rejected, scratch)?;
            }
        }
    }
    Ok(())
}

pub fn convert(raw: &[u8], schemas: &Schemas, max_messages: usize) -> Result<Outcome, String> {
    let mut rejected = Rejections::new(max_messages);
    crate::columns::begin_request(raw.len());
    let mut tables = KINDS.map(|(kind, name)| Points::new(kind, name));
    let mut scratch = String::with_capacity(32);
    // read in place (crate::wire); whatever it does not take as prost would, Python answers
    if walk(raw, &mut tables, &mut Lists::default(), &mut rejected, &mut scratch).is_err() {
        return Ok(Outcome::Fallback); // Python decodes again and words any error
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
