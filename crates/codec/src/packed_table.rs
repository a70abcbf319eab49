//! `PackedTable`: a field table kept for a long time (a connection's client properties) as
//! its wire encoding, in one allocation of exactly its size, and decoded when read.
//!
//! Why: a decoded `FieldTable` is a `Vec` of 72-byte entries per nesting level (room for
//! four or eight from the first push), and its keys and string values are slices of the
//! frame it was decoded from — so a table kept for a connection's life kept that
//! connection's whole handshake read buffer alive with it. A typical client's properties
//! were ~1.2 KB of vectors plus a pinned 2 KiB buffer; packed they are their ~300 encoded
//! bytes (issue 12: 10,000 pairs within 300 MB). They are read only by the HTTP API.

use crate::{FieldTable, Reader, Writer};
use bytes::{Bytes, BytesMut};

/// A field table as its encoding (length prefix included); empty for an empty table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PackedTable(Bytes);

impl PackedTable {
    /// Encodes `table` into an allocation of its own (none for an empty table).
    pub fn pack(table: &FieldTable) -> PackedTable {
        if table.is_empty() {
            return PackedTable::default();
        }
        let mut encoded = BytesMut::new();
        Writer::new(&mut encoded).table(table);
        // Copied once more so the allocation is exactly the encoding, not the room the
        // writer grew.
        PackedTable(Bytes::copy_from_slice(&encoded))
    }

    /// The table again (what `pack` was given, up to the integer tags RabbitMQ's parser
    /// treats as one, as every re-encoding does).
    pub fn unpack(&self) -> FieldTable {
        if self.0.is_empty() {
            return FieldTable::default();
        }
        // Cannot fail on what `pack` wrote; an empty table rather than a panic if it did.
        Reader::new(self.0.clone()).table().unwrap_or_default()
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldValue;

    #[test]
    fn a_packed_table_unpacks_to_the_same_entries_and_holds_only_its_encoding() {
        let mut caps = FieldTable::new();
        caps.insert("publisher_confirms", FieldValue::Bool(true));
        caps.insert("consumer_cancel_notify", FieldValue::Bool(true));
        let mut props = FieldTable::new();
        props.insert("product", FieldValue::string("warren-perf"));
        props.insert("capabilities", FieldValue::Table(caps));
        props.insert("n", FieldValue::I64(-3));
        props.push("product".into(), FieldValue::string("a duplicate, kept"));
        let packed = PackedTable::pack(&props);
        assert_eq!(packed.unpack(), props);
        let mut encoded = BytesMut::new();
        Writer::new(&mut encoded).table(&props);
        assert_eq!(packed.len(), encoded.len());
        assert!(PackedTable::pack(&FieldTable::new()).is_empty());
        assert_eq!(PackedTable::default().unpack(), FieldTable::new());
    }

    #[test]
    fn a_packed_table_does_not_keep_the_buffer_it_was_decoded_from() {
        let mut props = FieldTable::new();
        props.insert("product", FieldValue::string("client"));
        let mut frame = BytesMut::new();
        Writer::new(&mut frame).table(&props);
        let frame = frame.freeze();
        let decoded = Reader::new(frame.clone()).table().unwrap();
        let packed = PackedTable::pack(&decoded);
        drop(decoded);
        // The frame's bytes are unique again: nothing packed points into them.
        assert!(frame.is_unique());
        assert_eq!(packed.unpack(), props);
    }
}
