//! Strings that are not UTF-8 in a request, repaired: the native walk of otel_delta/convert/utf8.py
//! (its Python walk is the reference, and the module docstring says why this exists). The walk is
//! led by a table of the request's message types built from the protobuf descriptors in Python,
//! so it knows which length-delimited fields are strings and which are messages.
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::wire::{self, Value};

/// Deeper than protobuf's own parsers nest (upb: 100): such a request is not repaired, and its
/// parse refuses it as before (and the walk's recursion stays far from the stack's end).
const MAX_DEPTH: usize = 128;

/// A string or message field of a message type: its name, and its type's index for a message.
type FieldsOf = HashMap<u32, (String, Option<usize>)>;

/// The walk over one message type's requests (index 0 of the table is the request itself).
#[pyclass(frozen)]
pub struct Utf8Repair {
    messages: Vec<FieldsOf>,
}

struct Walk<'t> {
    messages: &'t [FieldsOf],
    strings: usize,
    first_field: Option<Vec<&'t str>>,
}

impl<'t> Walk<'t> {
    /// The message's bytes with its strings repaired, None if none needed it, Err if the bytes
    /// are not such a message (or nest too deep).
    fn message(&mut self, index: usize, buf: &[u8], path: &mut Vec<&'t str>) -> Result<Option<Vec<u8>>, ()> {
        if path.len() > MAX_DEPTH {
            return Err(());
        }
        let fields = &self.messages[index];
        let mut out: Option<Vec<u8>> = None;
        let mut kept = 0; // buf[kept..] is not in `out` yet
        let mut reader = wire::fields(buf);
        while let Some((number, value)) = reader.next_field().map_err(|_| ())? {
            let Value::Len(bytes) = value else { continue };
            let Some((name, child)) = fields.get(&number) else { continue };
            if std::str::from_utf8(bytes).is_ok() {
                continue; // see the Python walk: a valid message is not looked into
            }
            path.push(name.as_str());
            let repaired = match child {
                Some(child) => self.message(*child, bytes, path)?,
                None => {
                    self.strings += 1;
                    if self.first_field.is_none() {
                        self.first_field = Some(path.clone());
                    }
                    Some(String::from_utf8_lossy(bytes).into_owned().into_bytes())
                }
            };
            path.pop();
            if let Some(repaired) = repaired {
                let out = out.get_or_insert_with(|| Vec::with_capacity(buf.len() + 64));
                out.extend_from_slice(&buf[kept..reader.field_start()]);
                put_varint(out, u64::from(number) << 3 | u64::from(wire::LEN));
                put_varint(out, repaired.len() as u64);
                out.extend_from_slice(&repaired);
                kept = reader.position();
            }
        }
        Ok(out.map(|mut out| {
            out.extend_from_slice(&buf[kept..]);
            out
        }))
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[pymethods]
impl Utf8Repair {
    /// `messages[i]`: message type i's string and message fields, by number: (name, the index
    /// of a message field's type, or None for a string).
    #[new]
    fn new(messages: Vec<HashMap<u32, (String, Option<usize>)>>) -> PyResult<Self> {
        let count = messages.len();
        let valid = messages.iter().flat_map(|m| m.values()).all(|(_, c)| c.is_none_or(|c| c < count));
        if count == 0 || !valid {
            return Err(pyo3::exceptions::PyValueError::new_err("a field names no message type of the table"));
        }
        Ok(Utf8Repair { messages })
    }

    /// (the repaired bytes, how many strings, the first one's field names) or None, as
    /// `otel_delta.convert.utf8.repair` answers.
    fn repair<'py>(&self, py: Python<'py>, raw: &[u8]) -> Option<(Bound<'py, PyBytes>, usize, Vec<String>)> {
        let mut walk = Walk { messages: &self.messages, strings: 0, first_field: None };
        let data = walk.message(0, raw, &mut Vec::new()).ok()??;
        let first = walk.first_field.unwrap_or_default().into_iter().map(str::to_string).collect();
        Some((PyBytes::new(py, &data), walk.strings, first))
    }
}
