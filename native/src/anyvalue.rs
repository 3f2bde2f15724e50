//! AnyValue → (text, type), the encoding of otel_delta/convert/anyvalue.py, byte for byte.
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;

use base64::Engine;

use crate::otlp::opentelemetry::proto::common::v1::{any_value::Value, AnyValue, KeyValue};
use crate::pyrepr::{float_repr, json_float, json_str};

/// Deepest array/kvlist nesting converted natively. Deeper values send the whole request to
/// the Python converter, so decoder recursion limits (prost's vs. upb's) can never differ.
pub const MAX_DEPTH: usize = 16;

/// The request must be converted by the Python reference implementation.
#[derive(Debug)]
pub struct Fallback;

pub type Encoded<'a> = (Option<Cow<'a, str>>, Option<Cow<'static, str>>);

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// (text, type) of one AnyValue; type is None for plain strings (`anyvalue.encode`).
pub fn encode(value: Option<&AnyValue>) -> Result<Encoded<'_>, Fallback> {
    let Some(value) = value.and_then(|v| v.value.as_ref()) else {
        return Ok((None, Some(Cow::Borrowed("empty"))));
    };
    Ok(match value {
        Value::StringValue(s) => (Some(Cow::Borrowed(s.as_str())), None),
        Value::IntValue(i) => (Some(Cow::Owned(i.to_string())), Some(Cow::Borrowed("int"))),
        Value::BoolValue(b) => (
            Some(Cow::Borrowed(if *b { "true" } else { "false" })),
            Some(Cow::Borrowed("bool")),
        ),
        Value::DoubleValue(d) => {
            let mut text = String::new();
            float_repr(&mut text, *d);
            (Some(Cow::Owned(text)), Some(Cow::Borrowed("double")))
        }
        Value::BytesValue(b) => (Some(Cow::Owned(b64(b))), Some(Cow::Borrowed("bytes"))),
        Value::StringValueStrindex(i) => (
            Some(Cow::Owned(i.to_string())),
            Some(Cow::Borrowed("string_strindex")),
        ),
        Value::ArrayValue(_) | Value::KvlistValue(_) => {
            if depth(value) > MAX_DEPTH {
                return Err(Fallback);
            }
            let mut plain_text = String::new();
            plain(&mut plain_text, Some(value));
            let mut typed_text = String::new();
            typed(&mut typed_text, value);
            (Some(Cow::Owned(plain_text)), Some(Cow::Owned(typed_text)))
        }
    })
}

fn depth(value: &Value) -> usize {
    let inner = |v: Option<&AnyValue>| v.and_then(|v| v.value.as_ref()).map_or(0, depth);
    match value {
        Value::ArrayValue(a) => 1 + a.values.iter().map(|v| inner(Some(v))).max().unwrap_or(0),
        Value::KvlistValue(l) => {
            1 + l.values.iter().map(|kv| inner(kv.value.as_ref())).max().unwrap_or(0)
        }
        _ => 0,
    }
}

/// `json.dumps(to_plain(value), separators=(",", ":"), ensure_ascii=False)`.
fn plain(out: &mut String, value: Option<&Value>) {
    let Some(value) = value else {
        out.push_str("null");
        return;
    };
    match value {
        Value::StringValue(s) => json_str(out, s, false),
        Value::BoolValue(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::IntValue(i) => {
            let _ = write!(out, "{i}");
        }
        Value::DoubleValue(d) => json_float(out, *d),
        Value::BytesValue(b) => json_str(out, &b64(b), false),
        Value::StringValueStrindex(i) => {
            let _ = write!(out, "{i}");
        }
        Value::ArrayValue(a) => {
            out.push('[');
            for (i, v) in a.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                plain(out, v.value.as_ref());
            }
            out.push(']');
        }
        Value::KvlistValue(l) => {
            // A Python dict: a repeated key keeps its first position and takes the last value.
            let mut entries: Vec<(&str, Option<&Value>)> = Vec::with_capacity(l.values.len());
            let mut index: HashMap<&str, usize> = HashMap::new();
            for kv in &l.values {
                let v = kv.value.as_ref().and_then(|v| v.value.as_ref());
                match index.get(kv.key.as_str()) {
                    Some(&i) => entries[i].1 = v,
                    None => {
                        index.insert(kv.key.as_str(), entries.len());
                        entries.push((kv.key.as_str(), v));
                    }
                }
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_str(out, k, false);
                out.push(':');
                plain(out, v);
            }
            out.push('}');
        }
    }
}

/// `json.dumps(json_format.MessageToDict(value), separators=(",", ":"))` of an AnyValue.
fn typed(out: &mut String, value: &Value) {
    out.push('{');
    match value {
        Value::StringValue(s) => {
            out.push_str("\"stringValue\":");
            json_str(out, s, true);
        }
        Value::BoolValue(b) => {
            out.push_str(if *b { "\"boolValue\":true" } else { "\"boolValue\":false" })
        }
        Value::IntValue(i) => {
            let _ = write!(out, "\"intValue\":\"{i}\"");
        }
        Value::DoubleValue(d) => {
            out.push_str("\"doubleValue\":");
            if d.is_nan() {
                out.push_str("\"NaN\"");
            } else if d.is_infinite() {
                out.push_str(if *d < 0.0 { "\"-Infinity\"" } else { "\"Infinity\"" });
            } else {
                float_repr(out, *d);
            }
        }
        Value::BytesValue(b) => {
            out.push_str("\"bytesValue\":");
            json_str(out, &b64(b), true);
        }
        Value::StringValueStrindex(i) => {
            let _ = write!(out, "\"stringValueStrindex\":{i}");
        }
        Value::ArrayValue(a) => {
            out.push_str("\"arrayValue\":{");
            if !a.values.is_empty() {
                out.push_str("\"values\":[");
                for (i, v) in a.values.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    typed_any(out, v);
                }
                out.push(']');
            }
            out.push('}');
        }
        Value::KvlistValue(l) => {
            out.push_str("\"kvlistValue\":{");
            if !l.values.is_empty() {
                out.push_str("\"values\":[");
                for (i, kv) in l.values.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    typed_kv(out, kv);
                }
                out.push(']');
            }
            out.push('}');
        }
    }
    out.push('}');
}

fn typed_any(out: &mut String, value: &AnyValue) {
    match value.value.as_ref() {
        Some(v) => typed(out, v),
        None => out.push_str("{}"),
    }
}

/// MessageToDict of a KeyValue: fields in number order, defaults and unset messages omitted.
fn typed_kv(out: &mut String, kv: &KeyValue) {
    out.push('{');
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !first {
            out.push(',');
        }
        first = false;
    };
    if !kv.key.is_empty() {
        sep(out);
        out.push_str("\"key\":");
        json_str(out, &kv.key, true);
    }
    if let Some(v) = &kv.value {
        sep(out);
        out.push_str("\"value\":");
        typed_any(out, v);
    }
    if kv.key_strindex != 0 {
        sep(out);
        let _ = write!(out, "\"keyStrindex\":{}", kv.key_strindex);
    }
    out.push('}');
}

/// `encode` of an AnyValue given as its wire bytes (None: the KeyValue had no value), read in
/// place (crate::wire). Array and kvlist values are decoded with prost and go through `encode`.
pub fn encode_wire(value: Option<&[u8]>) -> Result<Encoded<'_>, Fallback> {
    use crate::wire::{expect, fields, Value as Wire, FIXED64, LEN, VARINT};
    let Some(bytes) = value else { return encode(None) };
    let mut last: Option<(u32, Wire<'_>)> = None;
    let mut string = ""; // the last string_value, UTF-8 checked
    let mut nested = false;
    let mut reader = fields(bytes);
    while let Some((number, field)) = reader.next_field()? {
        let wire_type = match number {
            1 | 5 | 6 | 7 => LEN,
            2 | 3 | 8 => VARINT,
            4 => FIXED64,
            _ => continue, // unknown: skipped, as prost skips it
        };
        expect(&field, wire_type)?;
        if number == 1 {
            string = field.string()?; // every occurrence is checked, as prost checks it
        }
        nested |= number == 5 || number == 6;
        last = Some((number, field));
    }
    if nested {
        // protobuf merges repeated message fields of a oneof: prost's decoder does it
        let decoded = <AnyValue as prost::Message>::decode(bytes).map_err(|_| Fallback)?;
        let (text, type_) = encode(Some(&decoded))?;
        return Ok((text.map(|t| Cow::Owned(t.into_owned())), type_));
    }
    let Some((number, field)) = last else { return Ok((None, Some(Cow::Borrowed("empty")))) };
    Ok(match (number, field) {
        (1, _) => (Some(Cow::Borrowed(string)), None),
        (2, f) => {
            let b = f.varint()? != 0;
            (Some(Cow::Borrowed(if b { "true" } else { "false" })), Some(Cow::Borrowed("bool")))
        }
        (3, f) => (Some(Cow::Owned((f.varint()? as i64).to_string())), Some(Cow::Borrowed("int"))),
        (4, f) => {
            let mut text = String::new();
            float_repr(&mut text, f64::from_bits(f.fixed64()?));
            (Some(Cow::Owned(text)), Some(Cow::Borrowed("double")))
        }
        (7, f) => (Some(Cow::Owned(b64(f.bytes()?))), Some(Cow::Borrowed("bytes"))),
        (8, f) => (
            Some(Cow::Owned((f.varint()? as i32).to_string())),
            Some(Cow::Borrowed("string_strindex")),
        ),
        _ => unreachable!("only oneof fields are kept"),
    })
}
