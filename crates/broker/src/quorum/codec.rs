//! How a broker [`Message`] travels in a quorum queue's Raft log: the machine keeps one opaque
//! byte string per message, so exchange, routing key, raw properties and body are framed into
//! it (`u8 len | exchange | u8 len | routing key | u32 len | properties | body`). Decoding
//! slices the log entry's bytes, so the body is not copied again on the way out.

use crate::message::Message;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use warren_codec::{ContentHeader, FieldValue, ShortStr, BASIC_CLASS_ID};

/// Frames a message for the log (one copy of its bytes).
pub fn encode(message: &Message) -> Bytes {
    let mut buf = BytesMut::with_capacity(encoded_len(message));
    encode_into(&mut buf, message);
    buf.freeze()
}

/// The length of [`encode`]'s framing of `message`.
pub fn encoded_len(message: &Message) -> usize {
    6 + message.exchange.len()
        + message.routing_key.len()
        + message.properties_raw.len()
        + message.body.len()
}

/// Appends [`encode`]'s framing of `message` to `buf` (the forwarding link writes it straight
/// into its outgoing buffer: no allocation of its own).
pub fn encode_into(buf: &mut BytesMut, message: &Message) {
    buf.put_u8(message.exchange.len() as u8);
    buf.put_slice(message.exchange.as_bytes());
    buf.put_u8(message.routing_key.len() as u8);
    buf.put_slice(message.routing_key.as_bytes());
    buf.put_u32(message.properties_raw.len() as u32);
    buf.put_slice(&message.properties_raw);
    buf.put_slice(&message.body);
}

/// Rebuilds a message framed by [`encode`]; None for bytes that do not parse. A message the
/// queue has returned `delivery_count` times carries RabbitMQ's `x-delivery-count` header
/// (a long, as `rabbit_quorum_queue` adds it), so its properties are re-encoded then; with
/// `always_count` (basic.get, where RabbitMQ 3.10 sets it even to 0) in any case.
pub fn decode(mut framed: Bytes, delivery_count: u32, always_count: bool) -> Option<Message> {
    let exchange = take_short(&mut framed)?;
    let routing_key = take_short(&mut framed)?;
    if framed.remaining() < 4 {
        return None;
    }
    let properties_len = framed.get_u32() as usize;
    if framed.remaining() < properties_len {
        return None;
    }
    let mut properties_raw = framed.split_to(properties_len);
    let body = framed;
    let header = ContentHeader {
        class_id: BASIC_CLASS_ID,
        body_size: body.len() as u64,
        properties: properties_raw.clone(),
    };
    let mut properties = header.properties().ok()?;
    if delivery_count > 0 || always_count {
        properties
            .headers
            .get_or_insert_with(Default::default)
            .insert("x-delivery-count", FieldValue::I64(delivery_count.into()));
        properties_raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
    }
    Some(Message::new(
        exchange,
        routing_key,
        &properties,
        properties_raw,
        body,
    ))
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
        assert_eq!(first.exchange.as_str(), "amq.direct");
        assert_eq!(first.routing_key.as_str(), "key");
        assert_eq!(first.properties_raw, original.properties_raw);
        assert_eq!(&first.body[..], b"body");
        assert!(first.persistent);
        assert_eq!(first.expiration_ms, Some(60000));

        let again = decode(encode(&original), 3, false).expect("decodes");
        let header = ContentHeader {
            class_id: BASIC_CLASS_ID,
            body_size: 4,
            properties: again.properties_raw.clone(),
        };
        let headers = header.properties().unwrap().headers.unwrap();
        assert_eq!(
            headers.get("x-delivery-count").and_then(FieldValue::as_i64),
            Some(3)
        );
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
