//! Record encoding and decoding: the byte layout of PUBLISH and ACK records
//! inside a segment (docs/STORAGE.md §3.2–3.4) and their CRC.
//!
//! Encoding appends straight into a caller-owned, reused `Vec<u8>` (the group
//! commit buffer), so the hot path allocates nothing per record. Decoding
//! never panics: every length is bounds-checked and a CRC mismatch or an
//! undecodable payload is returned as a [`DecodeError`].

use std::ops::Range;

use bytes::Bytes;

use crate::types::{MessageId, QueueId, StoredMessage};

/// Bytes before the record type: CRC (4) + length (4).
pub const FRAME_PREFIX_BYTES: usize = 8;
/// Record type of a PUBLISH record.
pub const TYPE_PUBLISH: u8 = 1;
/// Record type of an ACK record.
pub const TYPE_ACK: u8 = 2;
/// Framed size of an ACK record.
pub const ACK_RECORD_BYTES: usize = FRAME_PREFIX_BYTES + 1 + 4 + 8;
/// Record type of a DELIVERY_COUNT record (docs/STORAGE.md §3.5).
pub const TYPE_DELIVERY_COUNT: u8 = 3;
/// Framed size of a DELIVERY_COUNT record: queue, message id, count.
pub const DELIVERY_COUNT_RECORD_BYTES: usize = FRAME_PREFIX_BYTES + 1 + 4 + 8 + 4;

/// Fixed part of a PUBLISH payload after the type byte: id, flags,
/// published_at_ms, queue count, exchange len, routing key len, properties len.
const PUBLISH_FIXED_BYTES: usize = 8 + 1 + 8 + 2 + 1 + 1 + 4;

/// PUBLISH flags bit 0: the message is transient (not recovered after a restart).
pub const FLAG_TRANSIENT: u8 = 1;
/// PUBLISH flags bit 1: the record also holds the message's AMQP 1.0 sections, as
/// published (docs/STORAGE.md §3.3). Records without it read as before.
pub const FLAG_AMQP10: u8 = 2;
/// Every flag bit this version defines; a record with any other bit set does not decode.
const KNOWN_FLAGS: u8 = FLAG_TRANSIENT | FLAG_AMQP10;
/// After the AMQP 1.0 sections: the body follows as the rest of the record.
const BODY_FOLLOWS: u8 = 0;
/// After the AMQP 1.0 sections: the body is a byte range of them (offset and length, u32
/// each), not written a second time.
const BODY_IN_AMQP10: u8 = 1;

/// Why a frame or record was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes left than the frame needs: a torn write.
    Truncated,
    /// Length field out of range, CRC mismatch or malformed payload.
    Invalid(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated record"),
            DecodeError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

/// Framed length of the PUBLISH record for `msg` routed to `queue_count`
/// queues.
pub fn publish_record_bytes(queue_count: usize, msg: &StoredMessage) -> usize {
    FRAME_PREFIX_BYTES
        + 1
        + PUBLISH_FIXED_BYTES
        + 4 * queue_count
        + msg.exchange.len()
        + msg.routing_key.len()
        + msg.properties.len()
        + body_and_amqp10_bytes(msg)
}

/// Bytes the body takes, with the AMQP 1.0 sections when the message has them.
fn body_and_amqp10_bytes(msg: &StoredMessage) -> usize {
    if msg.amqp10.is_empty() {
        return msg.body.len();
    }
    4 + msg.amqp10.len()
        + 1
        + match body_in_amqp10(msg) {
            Some(_) => 8,
            None => msg.body.len(),
        }
}

/// Where the body lies inside the AMQP 1.0 sections, when it is a slice of them (a data
/// section's bytes, as the AMQP 1.0 publish path builds it): then it is stored once.
fn body_in_amqp10(msg: &StoredMessage) -> Option<(u32, u32)> {
    let outer = msg.amqp10.as_ptr() as usize;
    let inner = msg.body.as_ptr() as usize;
    let offset = inner.checked_sub(outer)?;
    let end = offset.checked_add(msg.body.len())?;
    if end > msg.amqp10.len() || msg.amqp10.len() > u32::MAX as usize {
        return None;
    }
    Some((offset as u32, msg.body.len() as u32))
}

/// Checks that `msg` and `queues` fit the format. Called before anything is
/// reserved so that encoding itself cannot fail.
pub fn validate_publish(queues: &[QueueId], msg: &StoredMessage) -> Result<(), String> {
    if queues.is_empty() || queues.len() > u16::MAX as usize {
        return Err(format!("queue count {} not in 1..=65535", queues.len()));
    }
    if msg.exchange.len() > 255 || msg.routing_key.len() > 255 {
        return Err("exchange and routing key must be at most 255 bytes".into());
    }
    if msg.properties.len() > u32::MAX as usize || msg.amqp10.len() > u32::MAX as usize {
        return Err("properties too large".into());
    }
    // The whole framed record must fit `Location::len` (u32).
    let framed = publish_record_bytes(queues.len(), msg);
    if framed > u32::MAX as usize {
        return Err("message too large".into());
    }
    Ok(())
}

/// Appends a framed PUBLISH record to `buf`. `msg` must have passed
/// [`validate_publish`].
pub fn encode_publish(buf: &mut Vec<u8>, id: MessageId, queues: &[QueueId], msg: &StoredMessage) {
    let start = buf.len();
    let framed = publish_record_bytes(queues.len(), msg);
    buf.reserve(framed);
    buf.extend_from_slice(&[0; 4]); // CRC, filled in below
    buf.extend_from_slice(&((framed - FRAME_PREFIX_BYTES) as u32).to_le_bytes());
    buf.push(TYPE_PUBLISH);
    buf.extend_from_slice(&id.0.to_le_bytes());
    let mut flags = if msg.transient { FLAG_TRANSIENT } else { 0 };
    if !msg.amqp10.is_empty() {
        flags |= FLAG_AMQP10;
    }
    buf.push(flags);
    buf.extend_from_slice(&msg.published_at_ms.to_le_bytes());
    buf.extend_from_slice(&(queues.len() as u16).to_le_bytes());
    for q in queues {
        buf.extend_from_slice(&q.0.to_le_bytes());
    }
    buf.push(msg.exchange.len() as u8);
    buf.extend_from_slice(&msg.exchange);
    buf.push(msg.routing_key.len() as u8);
    buf.extend_from_slice(&msg.routing_key);
    buf.extend_from_slice(&(msg.properties.len() as u32).to_le_bytes());
    buf.extend_from_slice(&msg.properties);
    if !msg.amqp10.is_empty() {
        buf.extend_from_slice(&(msg.amqp10.len() as u32).to_le_bytes());
        buf.extend_from_slice(&msg.amqp10);
        if let Some((offset, len)) = body_in_amqp10(msg) {
            buf.push(BODY_IN_AMQP10);
            buf.extend_from_slice(&offset.to_le_bytes());
            buf.extend_from_slice(&len.to_le_bytes());
            seal(buf, start);
            return;
        }
        buf.push(BODY_FOLLOWS);
    }
    buf.extend_from_slice(&msg.body);
    seal(buf, start);
}

/// Appends a framed ACK record to `buf`.
pub fn encode_ack(buf: &mut Vec<u8>, queue: QueueId, id: MessageId) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&((ACK_RECORD_BYTES - FRAME_PREFIX_BYTES) as u32).to_le_bytes());
    buf.push(TYPE_ACK);
    buf.extend_from_slice(&queue.0.to_le_bytes());
    buf.extend_from_slice(&id.0.to_le_bytes());
    seal(buf, start);
}

/// Appends a framed DELIVERY_COUNT record to `buf`.
pub fn encode_delivery_count(buf: &mut Vec<u8>, queue: QueueId, id: MessageId, count: u32) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(
        &((DELIVERY_COUNT_RECORD_BYTES - FRAME_PREFIX_BYTES) as u32).to_le_bytes(),
    );
    buf.push(TYPE_DELIVERY_COUNT);
    buf.extend_from_slice(&queue.0.to_le_bytes());
    buf.extend_from_slice(&id.0.to_le_bytes());
    buf.extend_from_slice(&count.to_le_bytes());
    seal(buf, start);
}

/// Writes the CRC of `buf[start+4..]` into `buf[start..start+4]`.
fn seal(buf: &mut [u8], start: usize) {
    let crc = crc32fast::hash(&buf[start + 4..]);
    buf[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Returns the framed length of the record starting at `buf[offset]`, after
/// checking that the length field is sane and the whole frame is present.
/// Does not check the CRC (see [`decode`]).
pub fn frame_bytes_at(buf: &[u8], offset: usize) -> Result<usize, DecodeError> {
    let rest = buf.get(offset..).unwrap_or(&[]);
    if rest.len() < FRAME_PREFIX_BYTES + 1 {
        return Err(DecodeError::Truncated);
    }
    let len = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes")) as usize;
    if len == 0 {
        return Err(DecodeError::Invalid("zero record length".into()));
    }
    let framed = FRAME_PREFIX_BYTES + len;
    if framed > rest.len() {
        return Err(DecodeError::Truncated);
    }
    Ok(framed)
}

/// A decoded PUBLISH record that borrows the record bytes; byte ranges are
/// relative to the start of the framed record.
#[derive(Debug, Clone)]
pub struct PublishView<'a> {
    /// Message id.
    pub id: MessageId,
    /// Publish time, ms since the Unix epoch.
    pub published_at_ms: u64,
    /// The message is transient (recovery drops it).
    pub transient: bool,
    queues_raw: &'a [u8],
    exchange: Range<usize>,
    routing_key: Range<usize>,
    properties: Range<usize>,
    body: Range<usize>,
    /// Empty for a message without AMQP 1.0 sections.
    amqp10: Range<usize>,
}

impl PublishView<'_> {
    /// The queue ids the message was published to.
    pub fn queues(&self) -> impl Iterator<Item = QueueId> + '_ {
        self.queues_raw
            .chunks_exact(4)
            .map(|c| QueueId(u32::from_le_bytes(c.try_into().expect("4 bytes"))))
    }

    /// Body length in bytes.
    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// Builds the message as zero-copy slices of `record`, which must be the
    /// same bytes this view was decoded from.
    pub fn message(&self, record: &Bytes) -> StoredMessage {
        StoredMessage {
            exchange: record.slice(self.exchange.clone()),
            routing_key: record.slice(self.routing_key.clone()),
            properties: record.slice(self.properties.clone()),
            body: record.slice(self.body.clone()),
            amqp10: record.slice(self.amqp10.clone()),
            published_at_ms: self.published_at_ms,
            transient: self.transient,
        }
    }
}

/// A decoded record.
#[derive(Debug, Clone)]
pub enum Decoded<'a> {
    /// A message publish.
    Publish(PublishView<'a>),
    /// An ack of one (queue, message) reference.
    Ack {
        /// The queue that acked.
        queue: QueueId,
        /// The acked message.
        id: MessageId,
    },
    /// The failed deliveries of one (queue, message) reference so far; a later record of
    /// the same reference replaces it.
    DeliveryCount {
        /// The queue holding the message.
        queue: QueueId,
        /// The message.
        id: MessageId,
        /// Its delivery-count in that queue.
        count: u32,
    },
}

/// Verifies the CRC of one exactly-framed record and decodes it.
pub fn decode(record: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let framed = frame_bytes_at(record, 0)?;
    if framed != record.len() {
        return Err(DecodeError::Invalid(format!(
            "record length {framed} does not match {} bytes given",
            record.len()
        )));
    }
    let stored_crc = u32::from_le_bytes(record[0..4].try_into().expect("4 bytes"));
    let actual_crc = crc32fast::hash(&record[4..]);
    if stored_crc != actual_crc {
        return Err(DecodeError::Invalid(format!(
            "CRC mismatch (stored {stored_crc:#010x}, computed {actual_crc:#010x})"
        )));
    }
    let mut r = Reader {
        buf: record,
        pos: FRAME_PREFIX_BYTES + 1,
    };
    match record[FRAME_PREFIX_BYTES] {
        TYPE_PUBLISH => {
            let id = MessageId(r.u64()?);
            let flags = r.u8()?;
            if flags & !KNOWN_FLAGS != 0 {
                return Err(DecodeError::Invalid(format!(
                    "unknown publish flags {flags:#04x}"
                )));
            }
            let published_at_ms = r.u64()?;
            let queue_count = r.u16()? as usize;
            if queue_count == 0 {
                return Err(DecodeError::Invalid("publish with no queue".into()));
            }
            let queues_raw = &record[r.range(queue_count * 4)?];
            let exchange_len = r.u8()? as usize;
            let exchange = r.range(exchange_len)?;
            let routing_key_len = r.u8()? as usize;
            let routing_key = r.range(routing_key_len)?;
            let properties_len = r.u32()? as usize;
            let properties = r.range(properties_len)?;
            let (amqp10, body) = if flags & FLAG_AMQP10 != 0 {
                let amqp10_len = r.u32()? as usize;
                let amqp10 = r.range(amqp10_len)?;
                let body = match r.u8()? {
                    BODY_FOLLOWS => r.pos..record.len(),
                    BODY_IN_AMQP10 => {
                        let offset = r.u32()? as usize;
                        let len = r.u32()? as usize;
                        if r.pos != record.len() || offset.saturating_add(len) > amqp10_len {
                            return Err(DecodeError::Invalid(
                                "body range outside the AMQP 1.0 sections".into(),
                            ));
                        }
                        amqp10.start + offset..amqp10.start + offset + len
                    }
                    other => {
                        return Err(DecodeError::Invalid(format!("unknown body kind {other}")))
                    }
                };
                (amqp10, body)
            } else {
                (0..0, r.pos..record.len())
            };
            Ok(Decoded::Publish(PublishView {
                id,
                published_at_ms,
                transient: flags & FLAG_TRANSIENT != 0,
                queues_raw,
                exchange,
                routing_key,
                properties,
                body,
                amqp10,
            }))
        }
        TYPE_ACK => {
            let queue = QueueId(r.u32()?);
            let id = MessageId(r.u64()?);
            if r.pos != record.len() {
                return Err(DecodeError::Invalid("trailing bytes in ack".into()));
            }
            Ok(Decoded::Ack { queue, id })
        }
        TYPE_DELIVERY_COUNT => {
            let queue = QueueId(r.u32()?);
            let id = MessageId(r.u64()?);
            let count = r.u32()?;
            if r.pos != record.len() {
                return Err(DecodeError::Invalid(
                    "trailing bytes in delivery count".into(),
                ));
            }
            Ok(Decoded::DeliveryCount { queue, id, count })
        }
        other => Err(DecodeError::Invalid(format!("unknown record type {other}"))),
    }
}

/// Bounds-checked little-endian cursor; every read fails with
/// `DecodeError::Invalid` rather than panicking.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn range(&mut self, n: usize) -> Result<Range<usize>, DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.buf.len())
            .ok_or_else(|| DecodeError::Invalid("field runs past end of record".into()))?;
        let range = self.pos..end;
        self.pos = end;
        Ok(range)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let range = self.range(N)?;
        Ok(self.buf[range].try_into().expect("range has N bytes"))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredMessage {
        StoredMessage {
            published_at_ms: 1_700_000_000_123,
            ..StoredMessage::new("amq.direct", "rk.1", vec![0x80, 0, 1, 2], vec![7u8; 1000])
        }
    }

    #[test]
    fn publish_round_trip() {
        let msg = sample();
        let queues = [QueueId(1), QueueId(7), QueueId(u32::MAX)];
        let mut buf = vec![0xAA; 3]; // encoding appends after existing bytes
        encode_publish(&mut buf, MessageId(42), &queues, &msg);
        assert_eq!(buf.len() - 3, publish_record_bytes(queues.len(), &msg));
        let record = Bytes::from(buf).slice(3..);
        match decode(&record).unwrap() {
            Decoded::Publish(view) => {
                assert_eq!(view.id, MessageId(42));
                assert_eq!(view.queues().collect::<Vec<_>>(), queues);
                assert_eq!(view.message(&record), msg);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn transient_flag_and_publish_time_round_trip() {
        let msg = StoredMessage {
            transient: true,
            published_at_ms: u64::MAX,
            ..sample()
        };
        let mut buf = Vec::new();
        encode_publish(&mut buf, MessageId(5), &[QueueId(2)], &msg);
        assert_eq!(buf.len(), publish_record_bytes(1, &msg));
        // Layout: frame prefix, type, id, then the flags byte and the publish time.
        assert_eq!(buf[FRAME_PREFIX_BYTES + 1 + 8], FLAG_TRANSIENT);
        let record = Bytes::from(buf);
        let Decoded::Publish(view) = decode(&record).unwrap() else {
            panic!("not a publish")
        };
        assert!(view.transient);
        assert_eq!(view.published_at_ms, u64::MAX);
        assert_eq!(view.body_len(), 1000);
        assert_eq!(view.message(&record), msg);
    }

    #[test]
    fn unknown_flag_bits_do_not_decode() {
        for bit in 2..8 {
            let mut buf = Vec::new();
            encode_publish(&mut buf, MessageId(5), &[QueueId(2)], &sample());
            buf[FRAME_PREFIX_BYTES + 1 + 8] |= 1 << bit;
            seal(&mut buf, 0); // a valid CRC: the flags themselves must be rejected
            assert!(
                matches!(decode(&buf), Err(DecodeError::Invalid(_))),
                "flag bit {bit} accepted"
            );
        }
    }

    #[test]
    fn amqp10_sections_round_trip_with_the_body_stored_once() {
        // The body is the data section's bytes inside the sections, as the AMQP 1.0
        // publish path slices it.
        let sections = Bytes::from_static(b"\x00\x53\x73\x45\x00\x53\x75\xa0\x05hello");
        let msg = StoredMessage {
            amqp10: sections.clone(),
            body: sections.slice(9..),
            ..sample()
        };
        let mut buf = Vec::new();
        encode_publish(&mut buf, MessageId(9), &[QueueId(3)], &msg);
        assert_eq!(buf.len(), publish_record_bytes(1, &msg));
        assert_eq!(
            buf.len(),
            publish_record_bytes(1, &sample()) - 1000 + 4 + sections.len() + 1 + 8,
            "the body is not written twice"
        );
        assert_eq!(buf[FRAME_PREFIX_BYTES + 1 + 8], FLAG_AMQP10);
        let record = Bytes::from(buf);
        let Decoded::Publish(view) = decode(&record).unwrap() else {
            panic!("not a publish")
        };
        assert_eq!(view.body_len(), 5);
        let back = view.message(&record);
        assert_eq!(back, msg);
        assert_eq!(&back.body[..], b"hello");
    }

    #[test]
    fn amqp10_sections_with_a_separate_body_round_trip() {
        let msg = StoredMessage {
            amqp10: Bytes::from_static(b"\x00\x53\x77\xa1\x02hi"),
            transient: true,
            ..sample()
        };
        let mut buf = Vec::new();
        encode_publish(&mut buf, MessageId(9), &[QueueId(3)], &msg);
        assert_eq!(buf.len(), publish_record_bytes(1, &msg));
        let record = Bytes::from(buf);
        let Decoded::Publish(view) = decode(&record).unwrap() else {
            panic!("not a publish")
        };
        assert_eq!(view.body_len(), 1000);
        assert_eq!(view.message(&record), msg);
    }

    #[test]
    fn a_body_range_outside_the_amqp10_sections_does_not_decode() {
        let sections = Bytes::from_static(b"\x00\x53\x75\xa0\x02hi");
        let msg = StoredMessage {
            amqp10: sections.clone(),
            body: sections.slice(5..),
            ..StoredMessage::default()
        };
        let mut buf = Vec::new();
        encode_publish(&mut buf, MessageId(1), &[QueueId(1)], &msg);
        let len_at = buf.len() - 4;
        buf[len_at..].copy_from_slice(&100u32.to_le_bytes());
        seal(&mut buf, 0);
        assert!(matches!(decode(&buf), Err(DecodeError::Invalid(_))));
    }

    #[test]
    fn single_queue_overhead_is_38_bytes() {
        let msg = StoredMessage::default();
        assert_eq!(publish_record_bytes(1, &msg), 38);
    }

    #[test]
    fn empty_fields_round_trip() {
        let msg = StoredMessage::default();
        let mut buf = Vec::new();
        encode_publish(&mut buf, MessageId(0), &[QueueId(0)], &msg);
        let record = Bytes::from(buf);
        let Decoded::Publish(view) = decode(&record).unwrap() else {
            panic!("not a publish")
        };
        assert_eq!(view.message(&record), msg);
    }

    #[test]
    fn ack_round_trip() {
        let mut buf = Vec::new();
        encode_ack(&mut buf, QueueId(3), MessageId(u64::MAX));
        assert_eq!(buf.len(), ACK_RECORD_BYTES);
        match decode(&buf).unwrap() {
            Decoded::Ack { queue, id } => {
                assert_eq!(queue, QueueId(3));
                assert_eq!(id, MessageId(u64::MAX));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn delivery_count_round_trip() {
        let mut buf = Vec::new();
        encode_delivery_count(&mut buf, QueueId(7), MessageId(42), 3);
        assert_eq!(buf.len(), DELIVERY_COUNT_RECORD_BYTES);
        match decode(&buf).unwrap() {
            Decoded::DeliveryCount { queue, id, count } => {
                assert_eq!((queue, id, count), (QueueId(7), MessageId(42), 3));
            }
            other => panic!("unexpected {other:?}"),
        }
        // One byte more is not a delivery count record.
        let mut long = buf.clone();
        long.push(0);
        let len = (long.len() - FRAME_PREFIX_BYTES) as u32;
        long[4..8].copy_from_slice(&len.to_le_bytes());
        seal(&mut long, 0);
        assert!(matches!(decode(&long), Err(DecodeError::Invalid(_))));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut buf = Vec::new();
        encode_publish(&mut buf, MessageId(9), &[QueueId(1)], &sample());
        for bit in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            // A flip in the length field may turn into "truncated" or a length
            // mismatch; anything but a successful decode is fine.
            assert!(decode(&bad).is_err(), "bit {bit} flip not detected");
        }
    }

    #[test]
    fn truncated_frames_are_reported_as_truncated() {
        let mut buf = Vec::new();
        encode_ack(&mut buf, QueueId(1), MessageId(1));
        for cut in 0..buf.len() {
            assert_eq!(frame_bytes_at(&buf[..cut], 0), Err(DecodeError::Truncated));
        }
        assert_eq!(frame_bytes_at(&buf, 0), Ok(ACK_RECORD_BYTES));
    }

    #[test]
    fn zero_filled_tail_is_invalid() {
        let zeros = [0u8; 64];
        assert!(matches!(
            frame_bytes_at(&zeros, 0),
            Err(DecodeError::Invalid(_))
        ));
    }

    #[test]
    fn garbage_never_panics() {
        // Cheap deterministic fuzz: random bytes with a valid-looking frame.
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 64) as usize + 1;
            let mut rec = vec![0u8; FRAME_PREFIX_BYTES + len];
            for (i, b) in rec.iter_mut().enumerate() {
                *b = (state >> (i % 56)) as u8;
            }
            rec[4..8].copy_from_slice(&(len as u32).to_le_bytes());
            rec[8] = (state % 3) as u8;
            seal(&mut rec, 0);
            let _ = decode(&rec);
        }
    }
}
