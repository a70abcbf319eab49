//! How a broker [`Message`] travels in a quorum queue's Raft log (and on the links between
//! cluster nodes): the machine keeps one opaque byte string per message, so exchange,
//! routing key, raw properties and body are framed into it. Decoding slices the log entry's
//! bytes, so the body is not copied again on the way out.
//!
//! Two layouts, told apart by bit 31 of the properties length (properties are a content
//! header's, far below 2 GiB, so the first layout never sets it):
//!
//! - version 1, every 0-9-1 message (and every entry an older build wrote):
//!   `u8 len | exchange | u8 len | routing key | u32 len | properties | body`;
//! - version 2, a message that also carries what version 1 cannot — its AMQP 1.0 sections
//!   as published (`Message::amqp10`) or the failed deliveries a dead-lettered copy brings
//!   along (`inherited_delivery_count`): `u8 len | exchange | u8 len | routing key |
//!   u32 (len | 1 << 31) | properties | u8 flags | u32 inherited delivery count |` then, with
//!   flag bit 0, `u32 len | sections | u8 body kind` and, for body kind 1 (the body is a
//!   byte range of the sections, a single data section's bytes, stored once as the store
//!   does) `u32 offset | u32 len`; for body kind 0, or without flag bit 0, the body is the
//!   rest. Every other flag bit must be 0.
//!
//! A message is written in version 1 whenever it can be, so entries of 0-9-1 messages stay
//! readable by a previous build (a rolling upgrade's older members).

use crate::message::Message;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use warren_codec::{ContentHeader, FieldValue, ShortStr, BASIC_CLASS_ID};

/// Bit 31 of the properties length: the version 2 layout.
const VERSION_2: u32 = 1 << 31;
/// Version 2 flag: AMQP 1.0 sections follow.
const HAS_AMQP10: u8 = 1;
/// Body kinds after the sections: the rest of the entry, or a range of the sections.
const BODY_FOLLOWS: u8 = 0;
const BODY_IN_SECTIONS: u8 = 1;

/// Frames a message for the log (one copy of its bytes).
pub fn encode(message: &Message) -> Bytes {
    let mut buf = BytesMut::with_capacity(encoded_len(message));
    encode_into(&mut buf, message);
    buf.freeze()
}

/// Whether `message` needs the version 2 layout.
fn needs_version_2(message: &Message) -> bool {
    message.amqp10.is_some() || message.inherited_delivery_count > 0
}

/// Where the body lies inside the AMQP 1.0 sections when it is a slice of them (offset and
/// length), as the AMQP 1.0 publish path builds a single data section's body.
fn body_in_sections(sections: &Bytes, body: &[u8]) -> Option<(u32, u32)> {
    let offset = (body.as_ptr() as usize).checked_sub(sections.as_ptr() as usize)?;
    let end = offset.checked_add(body.len())?;
    if end > sections.len() || sections.len() > u32::MAX as usize {
        return None;
    }
    Some((offset as u32, body.len() as u32))
}

/// The length of [`encode`]'s framing of `message`.
pub fn encoded_len(message: &Message) -> usize {
    let version_1 = 6
        + message.exchange().len()
        + message.routing_key().len()
        + message.properties_raw().len()
        + message.body().len();
    if !needs_version_2(message) {
        return version_1;
    }
    let sections = match message.amqp10.as_deref() {
        None => 0,
        Some(s) => match body_in_sections(s, message.body()) {
            Some(_) => 4 + s.len() + 1 + 8 - message.body().len(),
            None => 4 + s.len() + 1,
        },
    };
    version_1 + 1 + 4 + sections
}

/// Appends [`encode`]'s framing of `message` to `buf` (the forwarding link writes it straight
/// into its outgoing buffer: no allocation of its own).
pub fn encode_into(buf: &mut BytesMut, message: &Message) {
    buf.put_u8(message.exchange().len() as u8);
    buf.put_slice(message.exchange().as_bytes());
    buf.put_u8(message.routing_key().len() as u8);
    buf.put_slice(message.routing_key().as_bytes());
    let properties_len = message.properties_raw().len() as u32;
    if !needs_version_2(message) {
        buf.put_u32(properties_len);
        buf.put_slice(message.properties_raw());
        buf.put_slice(message.body());
        return;
    }
    buf.put_u32(properties_len | VERSION_2);
    buf.put_slice(message.properties_raw());
    let sections = message.amqp10.as_deref();
    buf.put_u8(if sections.is_some() { HAS_AMQP10 } else { 0 });
    buf.put_u32(message.inherited_delivery_count);
    if let Some(sections) = sections {
        buf.put_u32(sections.len() as u32);
        buf.put_slice(sections);
        if let Some((offset, len)) = body_in_sections(sections, message.body()) {
            buf.put_u8(BODY_IN_SECTIONS);
            buf.put_u32(offset);
            buf.put_u32(len);
            return;
        }
        buf.put_u8(BODY_FOLLOWS);
    }
    buf.put_slice(message.body());
}

/// Rebuilds a message framed by [`encode`] (either layout); None for bytes that do not
/// parse. A message the queue has returned `delivery_count` times carries RabbitMQ's
/// `x-delivery-count` header (a long, as `rabbit_quorum_queue` adds it), so its properties
/// are re-encoded then; with `always_count` (basic.get, where RabbitMQ 3.10 sets it even to
/// 0) in any case. A message with an `x-death` header is known as dead-lettered (an AMQP 1.0
/// consumer gets its deaths as annotations), as when the store reads one back.
pub fn decode(mut framed: Bytes, delivery_count: u32, always_count: bool) -> Option<Message> {
    let exchange = take_short(&mut framed)?;
    let routing_key = take_short(&mut framed)?;
    if framed.remaining() < 4 {
        return None;
    }
    let properties_field = framed.get_u32();
    let version_2 = properties_field & VERSION_2 != 0;
    let properties_len = (properties_field & !VERSION_2) as usize;
    if framed.remaining() < properties_len {
        return None;
    }
    let mut properties_raw = framed.split_to(properties_len);
    let mut inherited_delivery_count = 0;
    let mut sections = Bytes::new();
    let body = if version_2 {
        if framed.remaining() < 5 {
            return None;
        }
        let flags = framed.get_u8();
        if flags & !HAS_AMQP10 != 0 {
            return None;
        }
        inherited_delivery_count = framed.get_u32();
        if flags & HAS_AMQP10 == 0 {
            framed
        } else {
            if framed.remaining() < 4 {
                return None;
            }
            let sections_len = framed.get_u32() as usize;
            if framed.remaining() < sections_len + 1 {
                return None;
            }
            sections = framed.split_to(sections_len);
            match framed.get_u8() {
                BODY_FOLLOWS => framed,
                BODY_IN_SECTIONS if framed.remaining() == 8 => {
                    let offset = framed.get_u32() as usize;
                    let len = framed.get_u32() as usize;
                    let end = offset.checked_add(len)?;
                    if end > sections.len() {
                        return None;
                    }
                    sections.slice(offset..end)
                }
                _ => return None,
            }
        }
    } else {
        framed
    };
    let header = ContentHeader {
        class_id: BASIC_CLASS_ID,
        body_size: body.len() as u64,
        properties: properties_raw.clone(),
    };
    let mut properties = header.properties().ok()?;
    let dead_lettered = properties
        .headers
        .as_ref()
        .is_some_and(|h| h.get("x-death").is_some());
    if delivery_count > 0 || always_count {
        properties
            .headers
            .get_or_insert_with(Default::default)
            .insert("x-delivery-count", FieldValue::I64(delivery_count.into()));
        properties_raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
    }
    let mut message = Message::new(exchange, routing_key, &properties, properties_raw, body)
        .with_amqp10(sections);
    message.inherited_delivery_count = inherited_delivery_count;
    message.dead_lettered = dead_lettered;
    Some(message)
}

fn take_short(framed: &mut Bytes) -> Option<ShortStr> {
    if framed.remaining() < 1 {
        return None;
    }
    let len = framed.get_u8() as usize;
    if framed.remaining() < len {
        return None;
    }
    ShortStr::from_bytes(framed.split_to(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_codec::BasicProperties;

    fn message() -> Message {
        let properties = BasicProperties {
            delivery_mode: Some(2),
            expiration: Some(ShortStr::from("60000")),
            ..BasicProperties::default()
        };
        let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
        Message::new(
            ShortStr::from("amq.direct"),
            ShortStr::from("key"),
            &properties,
            raw,
            Bytes::from_static(b"body"),
        )
    }

    #[test]
    fn round_trips_and_adds_the_delivery_count_when_returned() {
        let original = message();
        let first = decode(encode(&original), 0, false).expect("decodes");
        assert_eq!(first.exchange(), "amq.direct");
        assert_eq!(first.routing_key(), "key");
        assert_eq!(first.properties_raw(), original.properties_raw());
        assert_eq!(first.body(), b"body");
        assert!(first.persistent);
        assert_eq!(first.expiration_ms, Some(60000));

        let again = decode(encode(&original), 3, false).expect("decodes");
        let header = ContentHeader {
            class_id: BASIC_CLASS_ID,
            body_size: 4,
            properties: again.properties_bytes(),
        };
        let headers = header.properties().unwrap().headers.unwrap();
        assert_eq!(
            headers.get("x-delivery-count").and_then(FieldValue::as_i64),
            Some(3)
        );
    }

    /// An entry as the previous build's encoder (version 1 only) wrote it: exchange
    /// "amq.direct", routing key "key", properties with delivery-mode 2 and expiration
    /// "60000" (flags 0x1100), body "body".
    const PREVIOUS_BUILD_ENTRY: &[u8] =
        b"\x0aamq.direct\x03key\x00\x00\x00\x09\x11\x00\x02\x0560000body";

    #[test]
    fn entries_written_by_the_previous_build_still_decode_and_091_messages_keep_that_layout() {
        let decoded = decode(Bytes::from_static(PREVIOUS_BUILD_ENTRY), 0, false).unwrap();
        assert_eq!(decoded.exchange(), "amq.direct");
        assert_eq!(decoded.routing_key(), "key");
        assert_eq!(decoded.body(), b"body");
        assert!(decoded.persistent);
        assert_eq!(decoded.expiration_ms, Some(60000));
        assert!(decoded.amqp10.is_none());
        assert_eq!(decoded.inherited_delivery_count, 0);
        // A 0-9-1 message is still written exactly so: a previous build reads it.
        assert_eq!(&encode(&message())[..], PREVIOUS_BUILD_ENTRY);
        assert_eq!(encoded_len(&message()), PREVIOUS_BUILD_ENTRY.len());
    }

    /// A message as the AMQP 1.0 publish path builds it: properties, data section "hi"
    /// and a footer; the body is a slice of the sections.
    fn amqp10_message() -> Message {
        let sections = Bytes::from_static(
            b"\x00\x53\x72\xc1\x0c\x02\xa3\x05x-opt\xa1\x02an\x00\x53\x75\xa0\x02hi\x00\x53\x78\xc1\x01\x00",
        );
        let mut m = message();
        m = m.with_body(sections.slice(22..24));
        assert_eq!(m.body(), b"hi");
        m.with_amqp10(sections)
    }

    #[test]
    fn amqp10_sections_travel_byte_for_byte_with_the_body_stored_once() {
        let original = amqp10_message();
        let framed = encode(&original);
        assert_eq!(framed.len(), encoded_len(&original));
        let sections = original.amqp10.as_deref().unwrap();
        // Version 1 plus flags, count, the sections' length and bytes, kind and range:
        // the body is not written a second time.
        assert_eq!(
            framed.len(),
            6 + 10 + 3 + 9 + 1 + 4 + 4 + sections.len() + 1 + 8
        );
        let back = decode(framed.clone(), 0, false).unwrap();
        assert_eq!(back.amqp10.as_deref(), Some(sections));
        assert_eq!(back.body(), b"hi");
        assert_eq!(back.properties_raw(), original.properties_raw());
        assert!(back.persistent && !back.dead_lettered);
        // Re-encoded (the forwarding link, a dead-lettered copy) it is the same entry.
        assert_eq!(encode(&back), framed);
        // A body that is not a slice of the sections follows them.
        let mut copied = amqp10_message();
        copied = copied.with_body(Bytes::from_static(b"hi"));
        copied.inherited_delivery_count = 4;
        let framed = encode(&copied);
        assert_eq!(framed.len(), encoded_len(&copied));
        let back = decode(framed, 2, false).unwrap();
        assert_eq!(back.amqp10.as_deref(), Some(sections));
        assert_eq!(back.body(), b"hi");
        assert_eq!(back.inherited_delivery_count, 4);
    }

    #[test]
    fn a_dead_lettered_copy_keeps_its_count_and_is_known_as_dead_lettered() {
        use crate::dead_letter::{dead_lettered, DeathReason};
        let (mut copy, _) = dead_lettered(
            &amqp10_message(),
            "q",
            DeathReason::Rejected,
            &ShortStr::from(""),
            None,
        );
        copy.inherited_delivery_count = 3;
        let back = decode(encode(&copy), 0, false).unwrap();
        assert!(back.dead_lettered, "its x-death header says so");
        assert_eq!(back.inherited_delivery_count, 3);
        assert_eq!(back.amqp10, copy.amqp10);
        // Without sections, the count alone asks for version 2 too.
        let mut plain = message();
        plain.inherited_delivery_count = 1;
        assert_eq!(
            decode(encode(&plain), 0, false)
                .unwrap()
                .inherited_delivery_count,
            1
        );
    }

    #[test]
    fn malformed_version_2_entries_do_not_parse() {
        let framed = encode(&amqp10_message()).to_vec();
        for cut in 0..framed.len() {
            assert!(
                decode(Bytes::from(framed[..cut].to_vec()), 0, false).is_none(),
                "cut at {cut}"
            );
        }
        let flags_at = 1 + 10 + 1 + 3 + 4 + 9;
        let mut unknown_flag = framed.clone();
        unknown_flag[flags_at] |= 0x80;
        assert!(decode(Bytes::from(unknown_flag), 0, false).is_none());
        // A body range beyond the sections.
        let mut beyond = framed.clone();
        let len = beyond.len();
        beyond[len - 4..].copy_from_slice(&200u32.to_be_bytes());
        assert!(decode(Bytes::from(beyond), 0, false).is_none());
        let mut trailing = framed;
        trailing.push(0);
        assert!(decode(Bytes::from(trailing), 0, false).is_none());
    }

    #[test]
    fn truncated_bytes_do_not_parse() {
        let framed = encode(&message());
        for cut in [0, 1, 5, 12] {
            assert!(
                decode(framed.slice(..cut), 0, false).is_none(),
                "cut at {cut}"
            );
        }
    }
}
