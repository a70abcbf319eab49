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
}

/// An ordered list of (key, value); keys are unique (a later insert replaces).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldTable(Vec<(ShortStr, FieldValue)>);

impl FieldTable {
    pub fn new() -> FieldTable {
        FieldTable::default()
    }

    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.0
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    pub fn insert(&mut self, key: impl Into<ShortStr>, value: FieldValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<FieldValue> {
        let at = self.0.iter().position(|(k, _)| k.as_str() == key)?;
        Some(self.0.remove(at).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ShortStr, &FieldValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(ShortStr, FieldValue)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (ShortStr, FieldValue)>>(iter: I) -> FieldTable {
        let mut table = FieldTable::new();
        for (k, v) in iter {
            table.insert(k, v);
        }
        table
    }
}
