//! Field tables and their values: the typed maps AMQP uses for arguments, client properties
//! and message headers. Order is kept as received (RabbitMQ echoes headers in order).

use crate::ShortStr;
use bytes::Bytes;

/// A tagged field value, one variant per type octet RabbitMQ accepts.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
    Decimal { scale: u8, value: u32 },
    LongStr(Bytes),
    Bytes(Bytes),
    Array(Vec<FieldValue>),
    Timestamp(u64),
    Table(FieldTable),
    Void,
}

impl FieldValue {
    /// The value as an integer, for arguments like `x-max-length` that clients send with
    /// whatever integer width their library picks.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            FieldValue::I8(v) => v.into(),
            FieldValue::U8(v) => v.into(),
            FieldValue::I16(v) => v.into(),
            FieldValue::U16(v) => v.into(),
            FieldValue::I32(v) => v.into(),
            FieldValue::U32(v) => v.into(),
            FieldValue::I64(v) => v,
            FieldValue::Timestamp(v) => i64::try_from(v).ok()?,
            _ => return None,
        })
    }

    /// The value as text, for string arguments (`x-match`, `x-dead-letter-exchange`).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            FieldValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn string(s: impl Into<String>) -> FieldValue {
        FieldValue::LongStr(Bytes::from(s.into()))
    }

    /// The value's type as RabbitMQ names it in error texts ("signedint", "longstr", …).
    pub fn type_name(&self) -> &'static str {
        match self {
            FieldValue::Bool(_) => "bool",
            FieldValue::I8(_) => "byte",
            FieldValue::U8(_) => "unsignedbyte",
            FieldValue::I16(_) => "short",
            FieldValue::U16(_) => "unsignedshort",
            FieldValue::I32(_) => "signedint",
            FieldValue::U32(_) => "unsignedint",
            FieldValue::I64(_) => "long",
            FieldValue::F32(_) => "float",
            FieldValue::F64(_) => "double",
            FieldValue::Decimal { .. } => "decimal",
            FieldValue::LongStr(_) => "longstr",
            FieldValue::Bytes(_) => "binary",
            FieldValue::Array(_) => "array",
            FieldValue::Timestamp(_) => "timestamp",
            FieldValue::Table(_) => "table",
            FieldValue::Void => "void",
        }
    }

    /// The value when it is one of the integer types (not a timestamp), as RabbitMQ's
    /// argument checks accept them.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            FieldValue::Timestamp(_) => None,
            v => v.as_i64(),
        }
    }
}

/// An ordered list of (key, value), kept as received.
///
/// A table from the wire may repeat a key: RabbitMQ keeps a received table as a list and so
/// do we, and re-encoding it gives back every entry in order. `get`, `insert` and `remove`
/// address the *first* entry with a key, as RabbitMQ's `table_lookup` and `keystore` do; later
/// duplicates are only seen by `iter`. Decoding appends with `push`, so a table of n entries
/// decodes in O(n); a lookup scans, which is cheapest for the few-key tables clients send, and
/// code that looks up many keys in one peer-sized table builds an index of its own (see the
/// headers exchange).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldTable(Vec<(ShortStr, FieldValue)>);

impl FieldTable {
    pub fn new() -> FieldTable {
        FieldTable::default()
    }

    /// The value of the first entry with `key`.
    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.0
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    /// Replaces the value of the first entry with `key`, or appends one (O(len): for tables
    /// the broker builds, not for decoding).
    pub fn insert(&mut self, key: impl Into<ShortStr>, value: FieldValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// Appends an entry without looking for its key, as decoding does: O(1).
    pub fn push(&mut self, key: ShortStr, value: FieldValue) {
        self.0.push((key, value));
    }

    /// Takes out the first entry with `key`.
    pub fn remove(&mut self, key: &str) -> Option<FieldValue> {
        let at = self.0.iter().position(|(k, _)| k.as_str() == key)?;
        Some(self.0.remove(at).1)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&ShortStr, &FieldValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Collects entries as given, duplicates included (like a decoded table).
impl FromIterator<(ShortStr, FieldValue)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (ShortStr, FieldValue)>>(iter: I) -> FieldTable {
        FieldTable(iter.into_iter().collect())
    }
}
