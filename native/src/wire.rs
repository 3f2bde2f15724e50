//! The protobuf wire format, read in place: fields of a message as slices of the request.
//!
//! The converters walk a request with this instead of decoding it into prost's
//! owned messages first (a `String` or `Vec` allocated, filled and freed for every id, name and
//! attribute). Anything this reader does not take as prost would — a group, a known field
//! with another wire type, a singular message field given twice (which protobuf merges) — is
//! reported as `Fallback`, and the Python reference converter answers for the request.
use crate::anyvalue::Fallback;

pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const FIXED32: u8 = 5;

/// One field's value as it sits on the wire.
#[derive(Clone, Copy)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Value<'a> {
    pub fn wire_type(&self) -> u8 {
        match self {
            Value::Varint(_) => VARINT,
            Value::Fixed64(_) => FIXED64,
            Value::Len(_) => LEN,
            Value::Fixed32(_) => FIXED32,
        }
    }

    pub fn varint(self) -> Result<u64, Fallback> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(Fallback),
        }
    }

    pub fn fixed64(self) -> Result<u64, Fallback> {
        match self {
            Value::Fixed64(v) => Ok(v),
            _ => Err(Fallback),
        }
    }

    pub fn fixed32(self) -> Result<u32, Fallback> {
        match self {
            Value::Fixed32(v) => Ok(v),
            _ => Err(Fallback),
        }
    }

    pub fn bytes(self) -> Result<&'a [u8], Fallback> {
        match self {
            Value::Len(v) => Ok(v),
            _ => Err(Fallback),
        }
    }

    /// A `string` field: UTF-8 checked, as prost checks it.
    pub fn string(self) -> Result<&'a str, Fallback> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Fallback)
    }
}

/// The fields of one message, in wire order.
pub struct Fields<'a> {
    buf: &'a [u8],
    len: usize,         // of the whole message: positions are counted from its start
    field_start: usize, // where the field `next_field` returned last begins
}

pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, len: buf.len(), field_start: 0 }
}

impl<'a> Fields<'a> {
    /// How far into the message the reader is.
    pub fn position(&self) -> usize {
        self.len - self.buf.len()
    }

    /// Where the field `next_field` returned last begins (its key).
    pub fn field_start(&self) -> usize {
        self.field_start
    }

    /// Most varints on the wire (keys, lengths, small numbers) are one byte: read it inline.
    #[inline]
    fn read_varint(&mut self) -> Result<u64, Fallback> {
        match self.buf.split_first() {
            Some((&byte, rest)) if byte < 0x80 => {
                self.buf = rest;
                Ok(u64::from(byte))
            }
            _ => self.read_long_varint(),
        }
    }

    fn read_long_varint(&mut self) -> Result<u64, Fallback> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some((&byte, rest)) = self.buf.split_first() else { return Err(Fallback) };
            self.buf = rest;
            if i == 9 && byte > 1 {
                return Err(Fallback); // more than 64 bits
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(Fallback)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Fallback> {
        if n > self.buf.len() {
            return Err(Fallback);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field (its number and value), None at the end, Fallback if malformed.
    #[inline]
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, Fallback> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        self.field_start = self.position();
        let key = self.read_varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(Fallback);
        }
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(self.read_varint()?),
            FIXED64 => Value::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"))),
            LEN => {
                let n = usize::try_from(self.read_varint()?).map_err(|_| Fallback)?;
                Value::Len(self.take(n)?)
            }
            FIXED32 => Value::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"))),
            _ => return Err(Fallback), // groups (3, 4) and invalid wire types
        };
        Ok(Some((number as u32, value)))
    }
}

/// The part of a message holding every occurrence of one repeated message field: from the
/// first occurrence's key to the end of the last one (empty if there is none). `repeated` over
/// it yields what it yields over the whole message, without walking the fields around it,
/// and nothing at all when the field is absent: a span's attributes, events and links are
/// each found in the one walk that reads the span's other fields.
#[derive(Default, Clone, Copy)]
pub struct Extent {
    start: usize,
    end: usize,
}

impl Extent {
    /// Takes in the occurrence `reader` has just returned, which must be length-delimited.
    pub fn add(&mut self, reader: &Fields<'_>, value: &Value<'_>) -> Result<(), Fallback> {
        expect(value, LEN)?;
        if self.end == 0 {
            self.start = reader.field_start;
        }
        self.end = reader.position();
        Ok(())
    }

    /// This part of `message`, the message the reader walked.
    pub fn of(self, message: &[u8]) -> &[u8] {
        &message[self.start..self.end]
    }
}

/// A known field must come with its type's wire type, or prost refuses the message (unknown
/// fields are skipped whatever theirs).
pub fn expect(value: &Value<'_>, wire_type: u8) -> Result<(), Fallback> {
    if value.wire_type() == wire_type {
        Ok(())
    } else {
        Err(Fallback)
    }
}

/// A singular message field: given twice, protobuf would merge the two, which is left to Python.
pub fn once<'a>(slot: &mut Option<&'a [u8]>, value: Value<'a>) -> Result<(), Fallback> {
    if slot.is_some() {
        return Err(Fallback);
    }
    *slot = Some(value.bytes()?);
    Ok(())
}

/// The singular message `once_field` and the string `url_field` of a message (last wins),
/// with the wire types of its repeated message field `repeated_field` checked.
pub fn header(
    bytes: &[u8],
    once_field: u32,
    repeated_field: u32,
    url_field: u32,
) -> Result<(Option<&[u8]>, &str), Fallback> {
    let (mut message, mut url) = (None, "");
    let mut reader = fields(bytes);
    while let Some((number, field)) = reader.next_field()? {
        if number == once_field {
            once(&mut message, field)?;
        } else if number == repeated_field {
            expect(&field, LEN)?;
        } else if number == url_field {
            url = field.string()?;
        }
    }
    Ok((message, url))
}

/// The messages of a repeated field, in wire order.
pub fn repeated<'a>(bytes: &'a [u8], field: u32) -> impl Iterator<Item = Result<&'a [u8], Fallback>> {
    let mut reader = fields(bytes);
    std::iter::from_fn(move || loop {
        match reader.next_field() {
            Err(e) => return Some(Err(e)),
            Ok(None) => return None,
            Ok(Some((number, value))) if number == field => return Some(value.bytes()),
            Ok(Some(_)) => continue,
        }
    })
}

/// One occurrence of a repeated scalar field whose values have wire type `wire_type` (VARINT
/// or FIXED64): one value, or a packed run of them. Parsers must take both, and a field's
/// occurrences may mix them; `each` gets every value in wire order.
pub fn scalars(value: Value<'_>, wire_type: u8, mut each: impl FnMut(u64)) -> Result<(), Fallback> {
    match value {
        Value::Len(bytes) => {
            let mut run = fields(bytes);
            while !run.buf.is_empty() {
                each(match wire_type {
                    VARINT => run.read_varint()?,
                    FIXED64 => u64::from_le_bytes(run.take(8)?.try_into().expect("8 bytes")),
                    _ => return Err(Fallback),
                });
            }
        }
        Value::Varint(v) if wire_type == VARINT => each(v),
        Value::Fixed64(v) if wire_type == FIXED64 => each(v),
        _ => return Err(Fallback),
    }
    Ok(())
}

pub fn decoded<M: prost::Message + Default>(bytes: Option<&[u8]>) -> Result<Option<M>, Fallback> {
    bytes.map(|b| M::decode(b).map_err(|_| Fallback)).transpose()
}
