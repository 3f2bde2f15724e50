//! Columns whose rows repeat a few values in runs (a request's resources and scopes, and a
//! metric's name, unit and metadata, on every row that belongs to them), built once the rows
//! are known, at their exact size.
//!
//! Appending the same resource to a builder row after row paid the builder's per-value work
//! (capacity checks, an offset, a validity bit) for every key and value of every row, and grew
//! buffers whose size was only guessed. Here each distinct value is laid out once as Arrow
//! lays it out (`MapRow`), and a run of rows copies those bytes and shifts their offsets.
//!
//! Where the table's schema makes a column (or a map's keys and values) a dictionary
//! (otel_delta/tables/packed.py: how the bridge buffers rows), each distinct value is stored
//! once and a row holds its index: a resource's eight attributes then cost 64 bytes of indices
//! per row instead of some 300 bytes of copies, and the Parquet files keep the columns
//! dictionary-encoded.
use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, MapArray, StringArray, StructArray};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Fields};

use crate::columns::{field_type, struct_fields, Columns};

/// One string column's values and offsets, filled run by run.
struct Utf8Parts {
    values: Vec<u8>,
    offsets: Vec<i32>,
    validity: Option<BooleanBufferBuilder>,
}

impl Utf8Parts {
    fn new(items: usize, bytes: usize, nullable: bool) -> Self {
        // the same limit as arrow's builders (which panic past it): i32 offsets
        assert!(bytes <= i32::MAX as usize, "string column of {bytes} bytes exceeds i32 offsets");
        let mut offsets = Vec::with_capacity(items + 1);
        offsets.push(0);
        let validity = nullable.then(|| BooleanBufferBuilder::new(items));
        Self { values: Vec::with_capacity(bytes), offsets, validity }
    }

    fn finish(self) -> StringArray {
        let nulls = self.validity.map(|mut valid| NullBuffer::new(valid.finish()));
        // the bytes are copies of `str`s cut at their boundaries: valid UTF-8 (checked anyway)
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        StringArray::try_new(offsets, Buffer::from_vec(self.values), nulls)
            .expect("repeated strings are valid UTF-8 with monotonic offsets")
    }
}

/// Distinct strings in the order first seen, each with its index.
#[derive(Default)]
struct Distinct<'a> {
    index: HashMap<&'a str, i32>,
    values: Vec<&'a str>,
}

impl<'a> Distinct<'a> {
    fn id(&mut self, value: &'a str) -> i32 {
        let values = &mut self.values;
        *self.index.entry(value).or_insert_with(|| {
            values.push(value);
            (values.len() - 1) as i32
        })
    }

    /// The dictionary column of `keys` (an index per row; `validity`: which rows are not
    /// null) over these values.
    fn finish(self, keys: Vec<i32>, validity: Option<BooleanBufferBuilder>) -> DictionaryArray<Int32Type> {
        let nulls = validity.map(|mut valid| NullBuffer::new(valid.finish()));
        let keys = Int32Array::new(ScalarBuffer::from(keys), nulls);
        DictionaryArray::try_new(keys, Arc::new(StringArray::from(self.values)))
            .expect("every index points into the distinct values")
    }
}

/// Whether a string column (or a map's keys) is a dictionary in `data_type`.
fn is_dictionary(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Dictionary(_, _))
}

/// `(value, rows)` runs as one string column of `data_type` (None: null), plain or a
/// dictionary.
pub fn repeated_strings<'a>(
    data_type: &DataType,
    runs: impl Iterator<Item = (Option<&'a str>, usize)> + Clone,
) -> ArrayRef {
    if is_dictionary(data_type) {
        return Arc::new(repeated_dictionary(runs));
    }
    let (mut rows, mut bytes, mut nullable) = (0, 0, false);
    for (value, n) in runs.clone() {
        rows += n;
        bytes += value.map_or(0, str::len) * n;
        nullable |= value.is_none() && n > 0;
    }
    let mut parts = Utf8Parts::new(rows, bytes, nullable);
    for (value, n) in runs {
        let text = value.unwrap_or("").as_bytes();
        for _ in 0..n {
            parts.values.extend_from_slice(text);
            parts.offsets.push(parts.values.len() as i32);
        }
        if let Some(valid) = parts.validity.as_mut() {
            valid.append_n(n, value.is_some());
        }
    }
    Arc::new(parts.finish())
}

/// `(value, rows)` runs as one dictionary column: each distinct value once, an index per row.
fn repeated_dictionary<'a>(runs: impl Iterator<Item = (Option<&'a str>, usize)> + Clone) -> DictionaryArray<Int32Type> {
    let rows = runs.clone().map(|(_, n)| n).sum();
    let nullable = runs.clone().any(|(value, n)| value.is_none() && n > 0);
    let mut distinct = Distinct::default();
    let mut keys = Vec::with_capacity(rows);
    let mut validity = nullable.then(|| BooleanBufferBuilder::new(rows));
    for (value, n) in runs {
        let id = value.map_or(0, |v| distinct.id(v));
        keys.extend(std::iter::repeat(id).take(n));
        if let Some(valid) = validity.as_mut() {
            valid.append_n(n, value.is_some());
        }
    }
    distinct.finish(keys, validity)
}

/// `(value, rows)` runs as one int64 column.
pub fn repeated_i64(runs: impl Iterator<Item = (i64, usize)> + Clone) -> ArrayRef {
    let mut values = Vec::with_capacity(runs.clone().map(|(_, n)| n).sum());
    for (value, n) in runs {
        values.extend(std::iter::repeat(value).take(n));
    }
    Arc::new(Int64Array::from(values))
}

/// The entries of one MAP<STRING,STRING> row (values may be null), laid out as the map's
/// key and value columns hold them: a row is repeated by copying its bytes.
#[derive(Default)]
pub struct MapRow {
    keys: Vec<u8>,
    key_ends: Vec<i32>,
    values: Vec<u8>,
    value_ends: Vec<i32>,
    valid: Vec<bool>,
}

impl MapRow {
    pub fn push(&mut self, key: &str, value: Option<&str>) {
        self.keys.extend_from_slice(key.as_bytes());
        self.key_ends.push(self.keys.len() as i32);
        self.values.extend_from_slice(value.unwrap_or("").as_bytes());
        self.value_ends.push(self.values.len() as i32);
        self.valid.push(value.is_some());
    }

    fn len(&self) -> usize {
        self.key_ends.len()
    }

    fn has_null(&self) -> bool {
        self.valid.contains(&false)
    }

    /// Each entry's key and value (None: null), as pushed.
    fn entries(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        (0..self.len()).map(move |i| {
            let value = self.valid[i].then(|| text(&self.values, &self.value_ends, i));
            (text(&self.keys, &self.key_ends, i), value)
        })
    }
}

/// The `i`th of the strings `bytes` holds, each ending at its `ends`.
fn text<'a>(bytes: &'a [u8], ends: &[i32], i: usize) -> &'a str {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    std::str::from_utf8(&bytes[start..ends[i] as usize]).expect("pushed as a str")
}

/// An attribute list as its `attributes` and `attribute_types` map rows.
#[derive(Default)]
pub struct AttributeRows {
    pub values: MapRow,
    pub types: MapRow,
}

impl AttributeRows {
    /// Attributes each row of the list's run holds.
    pub fn entries(&self) -> usize {
        self.values.len()
    }
}

/// Puts the `[attributes, attribute_types]` columns `names`, typed from `fields`, each row of a
/// run repeating its attribute list (the repeated twin of `columns::AttributeColumns::finish`).
pub fn put_repeated_attributes<'a>(
    columns: &mut Columns,
    fields: &Fields,
    names: [&'static str; 2],
    runs: impl Iterator<Item = (&'a AttributeRows, usize)> + Clone,
) {
    let [values_name, types_name] = names;
    let values = runs.clone().map(|(rows, n)| (&rows.values, n));
    columns.put(values_name, repeated_map(field_type(fields, values_name), values));
    let types = runs.map(|(rows, n)| (&rows.types, n));
    columns.put(types_name, repeated_map(field_type(fields, types_name), types));
}

/// Appends `n` copies of a row's bytes and of its offsets, shifted past what `parts` holds.
fn copy_rows(parts: &mut Utf8Parts, bytes: &[u8], ends: &[i32], n: usize) {
    for _ in 0..n {
        let base = parts.values.len() as i32;
        parts.values.extend_from_slice(bytes);
        parts.offsets.extend(ends.iter().map(|end| base + end));
    }
}

/// `(row, rows)` runs as one MAP<STRING,STRING> column of `data_type`.
pub fn repeated_map<'a>(data_type: &DataType, runs: impl Iterator<Item = (&'a MapRow, usize)> + Clone) -> ArrayRef {
    let DataType::Map(entries_field, sorted) = data_type else {
        panic!("expected a map type, got {data_type}")
    };
    let fields = struct_fields(entries_field.data_type()).clone();
    if is_dictionary(fields[0].data_type()) {
        let (offsets, keys, values) = repeated_dictionary_entries(runs);
        let entries_array = StructArray::new(fields, vec![Arc::new(keys), Arc::new(values)], None);
        return Arc::new(MapArray::new(entries_field.clone(), offsets, entries_array, None, *sorted));
    }
    let (mut rows, mut entries, mut key_bytes, mut value_bytes, mut nullable) = (0, 0, 0, 0, false);
    for (row, n) in runs.clone() {
        rows += n;
        entries += row.len() * n;
        key_bytes += row.keys.len() * n;
        value_bytes += row.values.len() * n;
        nullable |= n > 0 && row.has_null();
    }
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0i32);
    let mut keys = Utf8Parts::new(entries, key_bytes, false);
    let mut values = Utf8Parts::new(entries, value_bytes, nullable);
    for (row, n) in runs {
        copy_rows(&mut keys, &row.keys, &row.key_ends, n);
        copy_rows(&mut values, &row.values, &row.value_ends, n);
        if let Some(valid) = values.validity.as_mut() {
            for _ in 0..n {
                valid.append_slice(&row.valid);
            }
        }
        let width = row.len() as i32;
        let mut end = *offsets.last().expect("offsets start at 0");
        for _ in 0..n {
            end += width;
            offsets.push(end);
        }
    }
    let entries_array = StructArray::new(fields, vec![Arc::new(keys.finish()), Arc::new(values.finish())], None);
    Arc::new(MapArray::new(
        entries_field.clone(),
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        entries_array,
        None,
        *sorted,
    ))
}

/// The offsets, keys and values of a map column whose keys and values are dictionaries: each
/// distinct row's entries are looked up once, then each row of its run takes their indices.
fn repeated_dictionary_entries<'a>(
    runs: impl Iterator<Item = (&'a MapRow, usize)> + Clone,
) -> (OffsetBuffer<i32>, DictionaryArray<Int32Type>, DictionaryArray<Int32Type>) {
    let (mut rows, mut entries, mut nullable) = (0, 0, false);
    for (row, n) in runs.clone() {
        rows += n;
        entries += row.len() * n;
        nullable |= n > 0 && row.has_null();
    }
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0i32);
    let (mut key_values, mut value_values) = (Distinct::default(), Distinct::default());
    let (mut key_ids, mut value_ids) = (Vec::with_capacity(entries), Vec::with_capacity(entries));
    let mut validity = nullable.then(|| BooleanBufferBuilder::new(entries));
    for (row, n) in runs {
        let keys: Vec<i32> = row.entries().map(|(key, _)| key_values.id(key)).collect();
        let values: Vec<i32> = row.entries().map(|(_, value)| value.map_or(0, |v| value_values.id(v))).collect();
        let mut end = *offsets.last().expect("offsets start at 0");
        for _ in 0..n {
            key_ids.extend_from_slice(&keys);
            value_ids.extend_from_slice(&values);
            if let Some(valid) = validity.as_mut() {
                valid.append_slice(&row.valid);
            }
            end += keys.len() as i32;
            offsets.push(end);
        }
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    (offsets, key_values.finish(key_ids, None), value_values.finish(value_ids, validity))
}
