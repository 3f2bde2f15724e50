//! Column builders shared by the signal converters (otel_delta/convert/columns.py, ids.py,
//! result.py). Arrow types always come from the schema Python hands over, never from here.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, StringBuilder};
use arrow_array::{make_array, Array, ArrayRef, Int32Array, Int64Array, ListArray, MapArray, StructArray};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Fields};

use crate::anyvalue::{encode, encode_wire, Encoded, Fallback};
use crate::repeat::AttributeRows;
use crate::wire;
use crate::otlp::opentelemetry::proto::common::v1::KeyValue;

pub const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// Named columns of one Arrow struct (a table or a nested struct), assembled in schema order.
#[derive(Default)]
pub struct Columns(HashMap<&'static str, ArrayRef>);

impl Columns {
    pub fn put(&mut self, name: &'static str, array: ArrayRef) {
        self.0.insert(name, array);
    }

    /// The struct of `fields`; a missing or mistyped column is a programming error.
    pub fn into_struct(mut self, fields: &Fields) -> Result<StructArray, String> {
        let arrays = fields
            .iter()
            .map(|f| {
                let array = self
                    .0
                    .remove(f.name().as_str())
                    .ok_or_else(|| format!("native converter has no column {}", f.name()))?;
                Ok(retype(array, f.data_type()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if let Some(extra) = self.0.keys().next() {
            return Err(format!("native converter column {extra} is not in the schema"));
        }
        StructArray::try_new(fields.clone(), arrays, None).map_err(|e| e.to_string())
    }
}

/// Same physical layout, the schema's logical type (int64 → timestamp, int32 → date32).
fn retype(array: ArrayRef, data_type: &DataType) -> ArrayRef {
    if array.data_type() == data_type || array.data_type().is_nested() {
        return array;
    }
    match array.to_data().into_builder().data_type(data_type.clone()).build() {
        Ok(data) => make_array(data),
        Err(_) => array, // left as is: StructArray::try_new reports the mismatch
    }
}

pub fn struct_fields(data_type: &DataType) -> &Fields {
    match data_type {
        DataType::Struct(fields) => fields,
        DataType::List(item) => struct_fields(item.data_type()),
        other => panic!("expected a struct or list of struct, got {other}"),
    }
}

pub fn field_type<'a>(fields: &'a Fields, name: &str) -> &'a DataType {
    fields
        .iter()
        .find(|f| f.name() == name)
        .unwrap_or_else(|| panic!("schema has no field {name}"))
        .data_type()
}

pub fn int64(values: Vec<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(values))
}

pub fn int32(values: Vec<i32>) -> ArrayRef {
    Arc::new(Int32Array::from(values))
}

/// What a builder held at the end of the last request this thread converted, per byte of
/// that request: a builder that starts there need not grow. Growing by doubling copied each
/// buffer about once more and faulted in fresh pages each time (perf: about a fifth of the
/// conversion), and left capacities up to 2x what the rows hold, which the ingest buffer counts.
#[derive(Default)]
struct Sizes {
    request_bytes: usize,
    per_byte: HashMap<(&'static str, u8), (f64, f64)>, // (items, value bytes) per request byte
}

thread_local! {
    static SIZES: RefCell<Sizes> = RefCell::new(Sizes::default());
}

/// Room above last time's share: requests of one source vary a little in their mix.
const SLACK: f64 = 1.1;

/// A conversion of a `bytes`-long request starts on this thread (sizes `Strings::sized`).
pub fn begin_request(bytes: usize) {
    SIZES.with(|sizes| sizes.borrow_mut().request_bytes = bytes.max(1));
}

/// The size of the request this thread is converting (`begin_request`).
pub fn request_bytes() -> usize {
    SIZES.with(|sizes| sizes.borrow().request_bytes)
}

/// A string column builder; `sized` ones start at the size the same column reached for the
/// last request this thread converted, scaled to this request's size (`Sizes`).
#[derive(Default)]
pub struct Strings {
    key: Option<(&'static str, u8)>,
    builder: StringBuilder,
}

impl Strings {
    pub fn sized(name: &'static str, part: u8) -> Self {
        let key = (name, part);
        let builder = SIZES.with(|sizes| {
            let sizes = sizes.borrow();
            match sizes.per_byte.get(&key) {
                Some((items, bytes)) => {
                    let scale = sizes.request_bytes as f64 * SLACK;
                    StringBuilder::with_capacity((items * scale) as usize, (bytes * scale) as usize)
                }
                None => StringBuilder::new(),
            }
        });
        Self { key: Some(key), builder }
    }

    /// The column; a sized builder notes what it needed, for the next request.
    pub fn finish(&mut self) -> arrow_array::StringArray {
        if let Some(key) = self.key {
            let (items, bytes) = (self.builder.len(), self.builder.values_slice().len());
            SIZES.with(|sizes| {
                let mut sizes = sizes.borrow_mut();
                let request = sizes.request_bytes as f64;
                sizes.per_byte.insert(key, (items as f64 / request, bytes as f64 / request));
            });
        }
        self.builder.finish()
    }
}

impl Deref for Strings {
    type Target = StringBuilder;
    fn deref(&self) -> &StringBuilder {
        &self.builder
    }
}

impl DerefMut for Strings {
    fn deref_mut(&mut self) -> &mut StringBuilder {
        &mut self.builder
    }
}

pub fn strings(mut builder: Strings) -> ArrayRef {
    Arc::new(builder.finish())
}

/// A list column of `data_type` (List<T>) over `values`.
pub fn list(data_type: &DataType, offsets: Vec<i32>, values: ArrayRef) -> ArrayRef {
    let DataType::List(item) = data_type else { panic!("expected a list type, got {data_type}") };
    let values = retype(values, item.data_type());
    Arc::new(ListArray::new(item.clone(), OffsetBuffer::new(ScalarBuffer::from(offsets)), values, None))
}

/// `(floor(nanos / 1000) µs, floor(nanos / day))`: the TIMESTAMP and DATE of int64 nanos.
pub fn timestamp_and_date(nanos: &[i64]) -> (ArrayRef, ArrayRef) {
    let micros: Vec<i64> = nanos.iter().map(|n| n.div_euclid(1000)).collect();
    let days: Vec<i32> = nanos.iter().map(|n| n.div_euclid(NANOS_PER_DAY) as i32).collect();
    (int64(micros), int32(days))
}

pub fn hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.clear();
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
}

pub const TRACE_ID_BYTES: usize = 16;
pub const SPAN_ID_BYTES: usize = 8;

/// Why `value` is not a valid id (`ids.id_error`), or None.
pub fn id_error(value: &[u8], size: usize, what: &str, required: bool) -> Option<String> {
    if value.is_empty() {
        return required.then(|| format!("{what} is empty"));
    }
    if value.len() != size {
        return Some(format!("{what} must be {size} bytes, got {}", value.len()));
    }
    if required && value.iter().all(|b| *b == 0) {
        return Some(format!("{what} is all zeroes"));
    }
    None
}

/// Invalid items dropped from one request (`result.Rejections`).
pub struct Rejections {
    pub count: u64,
    pub messages: Vec<String>,
    max: usize,
}

impl Rejections {
    pub fn new(max: usize) -> Self {
        Self { count: 0, messages: Vec::new(), max }
    }

    pub fn add(&mut self, message: String) {
        self.count += 1;
        self.note(message);
    }

    /// A problem that drops nothing countable (e.g. a metric without data).
    pub fn note(&mut self, message: String) {
        if self.messages.len() < self.max && !self.messages.contains(&message) {
            self.messages.push(message);
        }
    }
}

/// The key and the value's bytes (None: absent) of one KeyValue message, read in place.
pub fn key_value(bytes: &[u8]) -> Result<(&str, Option<&[u8]>), Fallback> {
    let mut key = "";
    let mut value = None;
    let mut reader = wire::fields(bytes);
    while let Some((number, field)) = reader.next_field()? {
        match number {
            1 => key = field.string()?,
            2 => wire::once(&mut value, field)?,
            3 => wire::expect(&field, wire::VARINT)?, // key_strindex: not used
            _ => {}
        }
    }
    Ok((key, value))
}

/// The key and encoded value of each KeyValue in field `field` of `message`, read in place.
fn wire_attributes<'a>(
    message: &'a [u8],
    field: u32,
) -> impl Iterator<Item = Result<(&'a str, Encoded<'a>), Fallback>> {
    wire::repeated(message, field).map(|kv| {
        let (key, value) = key_value(kv?)?;
        Ok((key, encode_wire(value)?))
    })
}

/// Reads the KeyValues of field `field` as `AttributeColumns::append_wire` would, making no
/// row: a rejected item's attributes must decode (and nest no deeper) as an accepted one's.
pub fn check_attributes(message: &[u8], field: u32) -> Result<(), Fallback> {
    wire_attributes(message, field).try_for_each(|attribute| attribute.map(|_| ()))
}

/// One MAP<STRING,STRING> column being built.
#[derive(Default)]
struct MapColumn {
    offsets: Vec<i32>,
    keys: Strings,
    values: Strings,
}

impl MapColumn {
    fn new() -> Self {
        Self { offsets: vec![0], ..Default::default() }
    }

    /// Keys and values `Strings::sized` as `name`'s (its parts `first`, `first + 1`).
    fn sized(name: &'static str, first: u8) -> Self {
        Self { offsets: vec![0], keys: Strings::sized(name, first), values: Strings::sized(name, first + 1) }
    }

    fn end_row(&mut self) {
        self.offsets.push(self.keys.len() as i32);
    }

    fn finish(mut self, data_type: &DataType) -> ArrayRef {
        let DataType::Map(entries, sorted) = data_type else {
            panic!("expected a map type, got {data_type}")
        };
        let fields = struct_fields(entries.data_type()).clone();
        let columns: Vec<ArrayRef> = vec![Arc::new(self.keys.finish()), Arc::new(self.values.finish())];
        let entries_array = StructArray::new(fields, columns, None);
        Arc::new(MapArray::new(
            entries.clone(),
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            entries_array,
            None,
            *sorted,
        ))
    }
}

/// Attribute lists longer than this go to the Python converter: an SDK keeps at most 128
/// attributes (its default attribute count limit), and the bound keeps `KeyCheck`'s
/// comparisons in check whatever the keys.
const MAX_NATIVE_ATTRIBUTES: usize = 128;

/// The keys of one attribute list read so far, to find a repeated one. OTLP says keys are
/// unique; a list that repeats one goes to the Python converter (`columns.KeyRepeats`), which
/// keeps the last value of each key and tells the sender. A 64-bit mask of a cheap hash of
/// each key (its length and end bytes) rules out a repeat for almost every key; only a key
/// whose bit is set already is compared with the keys before it.
#[derive(Default)]
struct KeyCheck {
    mask: u64,
    count: usize,
}

impl KeyCheck {
    /// Err(Fallback) if `key` is one of the list's `earlier` keys, or the list is too long.
    fn add<'k, I: Iterator<Item = &'k [u8]>>(
        &mut self,
        key: &str,
        earlier: impl FnOnce() -> I,
    ) -> Result<(), Fallback> {
        self.count += 1;
        if self.count > MAX_NATIVE_ATTRIBUTES {
            return Err(Fallback);
        }
        let bytes = key.as_bytes();
        let (first, last) = (bytes.first().copied().unwrap_or(0), bytes.last().copied().unwrap_or(0));
        let bit = 1u64 << ((bytes.len() + 7 * first as usize + 13 * last as usize) & 63);
        if self.mask & bit != 0 && earlier().any(|k| k == bytes) {
            return Err(Fallback);
        }
        self.mask |= bit;
        Ok(())
    }
}

/// The builder's values from item `from` on: the keys of the row being built.
fn row_keys(builder: &StringBuilder, from: usize) -> impl Iterator<Item = &[u8]> {
    let (offsets, values) = (builder.offsets_slice(), builder.values_slice());
    (from..builder.len()).map(move |i| &values[offsets[i] as usize..offsets[i + 1] as usize])
}

/// An attribute list encoded once (for resources and scopes, repeated on every row).
#[derive(Default, Clone)]
pub struct EncodedAttributes {
    pairs: Vec<(String, Option<String>)>,
    types: Vec<(String, String)>,
}

impl EncodedAttributes {
    pub fn new(kvs: &[KeyValue]) -> Result<Self, Fallback> {
        let mut out = Self::default();
        let mut keys = KeyCheck::default();
        for kv in kvs {
            keys.add(&kv.key, || out.pairs.iter().map(|(k, _)| k.as_bytes()))?;
            let (text, type_) = encode(kv.value.as_ref())?;
            out.pairs.push((kv.key.clone(), text.map(|t| t.into_owned())));
            if let Some(type_) = type_ {
                out.types.push((kv.key.clone(), type_.into_owned()));
            }
        }
        Ok(out)
    }

    /// The KeyValue messages of field `field` of `message`, read in place (crate::wire).
    pub fn from_wire(message: &[u8], field: u32) -> Result<Self, Fallback> {
        let mut out = Self::default();
        let mut keys = KeyCheck::default();
        for attribute in wire_attributes(message, field) {
            let (key, (text, type_)) = attribute?;
            keys.add(key, || out.pairs.iter().map(|(k, _)| k.as_bytes()))?;
            out.pairs.push((key.to_string(), text.map(|t| t.into_owned())));
            if let Some(type_) = type_ {
                out.types.push((key.to_string(), type_.into_owned()));
            }
        }
        Ok(out)
    }

    /// Its `attributes` and `attribute_types` rows, for columns that repeat them (crate::repeat).
    pub fn map_rows(&self) -> AttributeRows {
        let mut rows = AttributeRows::default();
        for (key, text) in &self.pairs {
            rows.values.push(key, text.as_deref());
        }
        for (key, type_) in &self.types {
            rows.types.push(key, Some(type_));
        }
        rows
    }
}

/// The `attributes` and `attribute_types` map columns (`columns.AttributeColumns`).
pub struct AttributeColumns {
    values: MapColumn,
    types: MapColumn,
}

impl Default for AttributeColumns {
    fn default() -> Self {
        Self { values: MapColumn::new(), types: MapColumn::new() }
    }
}

impl AttributeColumns {
    /// Builders `Strings::sized` as `name`'s parts `first` to `first + 3` were.
    pub fn sized(name: &'static str, first: u8) -> Self {
        Self { values: MapColumn::sized(name, first), types: MapColumn::sized(name, first + 2) }
    }

    /// One row: the KeyValue messages of field `field` of `message`, read in place
    /// (crate::wire).
    pub fn append_wire(&mut self, message: &[u8], field: u32) -> Result<(), Fallback> {
        let (row, mut keys) = (self.values.keys.len(), KeyCheck::default());
        for attribute in wire_attributes(message, field) {
            let (key, (text, type_)) = attribute?;
            keys.add(key, || row_keys(&self.values.keys, row))?;
            self.values.keys.append_value(key);
            self.values.values.append_option(text);
            if let Some(type_) = type_ {
                self.types.keys.append_value(key);
                self.types.values.append_value(type_);
            }
        }
        self.values.end_row();
        self.types.end_row();
        Ok(())
    }

    /// Puts `<prefix>attributes` and `<prefix>attribute_types` typed from `fields`.
    pub fn finish(self, fields: &Fields, names: [&'static str; 2], columns: &mut Columns) {
        let [values_name, types_name] = names;
        columns.put(values_name, self.values.finish(field_type(fields, values_name)));
        columns.put(types_name, self.types.finish(field_type(fields, types_name)));
    }
}
