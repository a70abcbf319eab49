//! `Writer`: appends AMQP primitives to a `BytesMut` (the connection's output buffer), so
//! encoding a method costs no allocation once the buffer has grown to its working size.

use crate::{FieldTable, FieldValue};
use bytes::{BufMut, BytesMut};

pub struct Writer<'a> {
    buf: &'a mut BytesMut,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut BytesMut) -> Writer<'a> {
        Writer { buf }
    }

    pub fn octet(&mut self, v: u8) {
        self.buf.put_u8(v);
    }

    pub fn short(&mut self, v: u16) {
        self.buf.put_u16(v);
    }

    pub fn long(&mut self, v: u32) {
        self.buf.put_u32(v);
    }

    pub fn longlong(&mut self, v: u64) {
        self.buf.put_u64(v);
    }

    pub fn bytes(&mut self, v: &[u8]) {
        self.buf.put_slice(v);
    }

    /// Strings over 255 bytes are cut: `ShortStr` cannot hold one, so only a `&str` literal
    /// passed by our own code could, and cutting beats emitting a corrupt frame.
    pub fn shortstr(&mut self, v: &str) {
        let bytes = &v.as_bytes()[..v.len().min(255)];
        self.buf.put_u8(bytes.len() as u8);
        self.buf.put_slice(bytes);
    }

    pub fn longstr(&mut self, v: &[u8]) {
        self.buf.put_u32(v.len() as u32);
        self.buf.put_slice(v);
    }

    /// Writes a length-prefixed block: reserves the 4-byte length, runs `body`, patches it.
    fn length_prefixed(&mut self, body: impl FnOnce(&mut Writer)) {
        let at = self.buf.len();
        self.buf.put_u32(0);
        body(self);
        let len = (self.buf.len() - at - 4) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    pub fn table(&mut self, table: &FieldTable) {
        self.length_prefixed(|w| {
            for (key, value) in table.iter() {
                w.shortstr(key);
                w.field_value(value);
            }
        });
    }

    fn field_value(&mut self, value: &FieldValue) {
        match value {
            FieldValue::Bool(v) => {
                self.octet(b't');
                self.octet(u8::from(*v));
            }
            FieldValue::I8(v) => {
                self.octet(b'b');
                self.octet(*v as u8);
            }
            FieldValue::U8(v) => {
                self.octet(b'B');
                self.octet(*v);
            }
            FieldValue::I16(v) => {
                self.octet(b's');
                self.short(*v as u16);
            }
            FieldValue::U16(v) => {
                self.octet(b'u');
                self.short(*v);
            }
            FieldValue::I32(v) => {
                self.octet(b'I');
                self.long(*v as u32);
            }
            FieldValue::U32(v) => {
                self.octet(b'i');
                self.long(*v);
            }
            FieldValue::I64(v) => {
                self.octet(b'l');
                self.longlong(*v as u64);
            }
            FieldValue::F32(v) => {
                self.octet(b'f');
                self.long(v.to_bits());
            }
            FieldValue::F64(v) => {
                self.octet(b'd');
                self.longlong(v.to_bits());
            }
            FieldValue::Decimal { scale, value } => {
                self.octet(b'D');
                self.octet(*scale);
                self.long(*value);
            }
            FieldValue::LongStr(v) => {
                self.octet(b'S');
                self.longstr(v);
            }
            FieldValue::Bytes(v) => {
                self.octet(b'x');
                self.longstr(v);
            }
            FieldValue::Array(values) => {
                self.octet(b'A');
                self.length_prefixed(|w| {
                    for v in values {
                        w.field_value(v);
                    }
                });
            }
            FieldValue::Timestamp(v) => {
                self.octet(b'T');
                self.longlong(*v);
            }
            FieldValue::Table(t) => {
                self.octet(b'F');
                self.table(t);
            }
            FieldValue::Void => self.octet(b'V'),
        }
    }
}
