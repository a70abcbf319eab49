//! `Reader`: a cursor over one frame payload that hands out zero-copy slices. Every read is
//! bounds-checked and fails with a syntax error rather than panicking on short input.
//!
//! Decoding is linear in the payload: each byte is read once, at its own nesting level, and
//! entries are appended without looking for their key. No count limit is needed beyond the
//! frame's: an entry takes at least two bytes (an array element one), so a payload of
//! frame_max bytes holds at most frame_max of them, and decodes to a few tens of bytes of
//! memory per payload byte.

use crate::{CodecError, FieldTable, FieldValue, LongStr, ShortStr};
use bytes::Bytes;

/// Field tables may nest (tables in arrays in tables); this bounds the recursion so hostile
/// input cannot overflow the stack.
const MAX_NESTING_DEPTH: u32 = 64;

pub struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unread rest of the payload.
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }

    /// The unread rest of the payload, the reader done: no new reference is taken.
    pub fn into_rest(mut self) -> Bytes {
        bytes::Buf::advance(&mut self.buf, self.pos);
        self.buf
    }

    fn take(&mut self, n: usize) -> Result<&[u8], CodecError> {
        if self.remaining() < n {
            return Err(CodecError::Syntax("payload ends early"));
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
    }

    fn take_bytes(&mut self, n: usize) -> Result<Bytes, CodecError> {
        if self.remaining() < n {
            return Err(CodecError::Syntax("payload ends early"));
        }
        let slice = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(slice)
    }

    pub fn octet(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    pub fn short(&mut self) -> Result<u16, CodecError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn long(&mut self) -> Result<u32, CodecError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }

    pub fn longlong(&mut self) -> Result<u64, CodecError> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn shortstr(&mut self) -> Result<ShortStr, CodecError> {
        let len = self.octet()? as usize;
        let bytes = self.take_bytes(len)?;
        ShortStr::from_bytes(bytes).ok_or(CodecError::Syntax("short string is not UTF-8"))
    }

    /// Checks a short string as `shortstr` does (same errors) without keeping it.
    pub fn skip_shortstr(&mut self) -> Result<(), CodecError> {
        let len = self.octet()? as usize;
        if ShortStr::is_valid(self.take(len)?) {
            Ok(())
        } else {
            Err(CodecError::Syntax("short string is not UTF-8"))
        }
    }

    pub fn longstr(&mut self) -> Result<LongStr, CodecError> {
        let len = self.long()? as usize;
        self.take_bytes(len)
    }

    pub fn table(&mut self) -> Result<FieldTable, CodecError> {
        self.table_at_depth(0)
    }

    fn table_at_depth(&mut self, depth: u32) -> Result<FieldTable, CodecError> {
        if depth > MAX_NESTING_DEPTH {
            return Err(CodecError::Syntax("field table nested too deep"));
        }
        let len = self.long()? as usize;
        let mut inner = Reader::new(self.take_bytes(len)?);
        let mut table = FieldTable::default();
        while inner.remaining() > 0 {
            let key = inner.shortstr()?;
            let value = inner.field_value(depth)?;
            table.push(key, value);
        }
        Ok(table)
    }

    fn array(&mut self, depth: u32) -> Result<Vec<FieldValue>, CodecError> {
        if depth > MAX_NESTING_DEPTH {
            return Err(CodecError::Syntax("field array nested too deep"));
        }
        let len = self.long()? as usize;
        let mut inner = Reader::new(self.take_bytes(len)?);
        let mut values = Vec::new();
        while inner.remaining() > 0 {
            values.push(inner.field_value(depth)?);
        }
        Ok(values)
    }

    /// One tagged value, with the type octets RabbitMQ accepts (its errata to the 0-9-1 spec:
    /// `s` is a signed 16-bit integer, `l` signed 64-bit, `x` a byte array; like RabbitMQ's
    /// parser we also take `L` as a signed 64-bit integer, and write it back as `l`).
    fn field_value(&mut self, depth: u32) -> Result<FieldValue, CodecError> {
        let tag = self.octet()?;
        Ok(match tag {
            b't' => FieldValue::Bool(self.octet()? != 0),
            b'b' => FieldValue::I8(self.octet()? as i8),
            b'B' => FieldValue::U8(self.octet()?),
            b's' => FieldValue::I16(self.short()? as i16),
            b'u' => FieldValue::U16(self.short()?),
            b'I' => FieldValue::I32(self.long()? as i32),
            b'i' => FieldValue::U32(self.long()?),
            b'l' | b'L' => FieldValue::I64(self.longlong()? as i64),
            b'f' => FieldValue::F32(f32::from_bits(self.long()?)),
            b'd' => FieldValue::F64(f64::from_bits(self.longlong()?)),
            b'D' => {
                let scale = self.octet()?;
                let value = self.long()?;
                FieldValue::Decimal { scale, value }
            }
            b'S' => FieldValue::LongStr(self.longstr()?),
            b'x' => FieldValue::Bytes(self.longstr()?),
            b'A' => FieldValue::Array(self.array(depth + 1)?),
            b'T' => FieldValue::Timestamp(self.longlong()?),
            b'F' => FieldValue::Table(self.table_at_depth(depth + 1)?),
            b'V' => FieldValue::Void,
            other => return Err(CodecError::UnknownFieldType(other as char)),
        })
    }
}
