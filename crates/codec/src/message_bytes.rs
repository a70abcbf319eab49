//! `MessageBytes`: a published message's exchange name, routing key, property block and body,
//! held as one buffer and where each part lies in it.
//!
//! Why one buffer: a basic.publish taken whole off the read buffer (`split_publish`) is one
//! `Bytes` of its three frames, and every part of the message is inside it. Holding that
//! buffer once with four spans costs one reference where four slices cost four (each taken
//! with a call through `Bytes`' vtable and an atomic add, and dropped with another), and it
//! makes the message a third smaller to move. A message from elsewhere (a body over several
//! frames, AMQP 1.0, the store, a dead-lettered copy) has its names and properties copied
//! into one small buffer of their own and keeps its body apart (`joined`).
//!
//! Invariants (kept by every constructor): each span lies inside its buffer, and the names
//! are short strings (valid UTF-8, at most 255 bytes), so they are read back as `&str`
//! without checking again. When the body is in the buffer (`own_body` None), the buffer
//! holds the publish's content header frame and body frame (none for an empty body) as they
//! arrived, around the properties and the body (`content_frames`): a delivery copies them in
//! one piece.

use crate::{BasicProperties, CodecError, PublishProperties, ShortStr, Writer};
use bytes::{Bytes, BytesMut};
use std::ops::Range;

/// The content header frame's bytes before its property flags: the frame header (type,
/// channel, size) and the class, weight and body size.
pub(crate) const CONTENT_HEADER_PREFIX: usize = 7 + 12;

/// Where one part lies in the buffer: `start..end`. `u32` keeps the four spans in 32 bytes;
/// a buffer longer than `u32::MAX` is never held whole (`split_publish` leaves such a
/// publish to the frame-by-frame path, which joins it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    #[inline]
    fn of(range: Range<usize>) -> Span {
        debug_assert!(range.end <= u32::MAX as usize && range.start <= range.end);
        Span {
            start: range.start as u32,
            end: range.end as u32,
        }
    }

    #[inline]
    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    #[inline]
    fn len(self) -> usize {
        (self.end - self.start) as usize
    }
}

/// A message's names, properties and body (see the module comment).
#[derive(Debug, Clone)]
pub struct MessageBytes {
    /// Holds the names and the properties, and the body unless `own_body` holds it.
    bytes: Bytes,
    /// The body, when it is not in `bytes`.
    own_body: Option<Bytes>,
    exchange: Span,
    routing_key: Span,
    properties: Span,
    /// The body's place in `bytes` (unused when `own_body` holds it).
    body: Span,
}

impl MessageBytes {
    /// The parts inside one buffer, as `split_publish` found them: in the frames' order
    /// (names, properties, body, each ending before the next starts, with room for the
    /// frames around them) inside `bytes`, which is at most `u32::MAX` long, asserted here
    /// (a handful of comparisons), since the reads of every part rely on it (`part`); and the names short strings, which the caller checked
    /// while decoding (`publish_spans_in`). Only crate code can make one this way. Inlined
    /// into `split_publish`, where the comparisons fold with what it already knows.
    #[inline(always)]
    pub(crate) fn in_frames(
        bytes: Bytes,
        exchange: Range<usize>,
        routing_key: Range<usize>,
        properties: Range<usize>,
        body: Range<usize>,
    ) -> MessageBytes {
        // The frames' layout that `content_frames` and `copied` read: the content header
        // frame's fixed part between the names and the properties, a frame-end octet after
        // the properties, and one after a body.
        let content_end = match body.is_empty() {
            true => properties.end + 1,
            false => body.end + 1,
        };
        let in_order = exchange.start <= exchange.end
            && exchange.end <= routing_key.start
            && routing_key.start <= routing_key.end
            && routing_key.end + CONTENT_HEADER_PREFIX <= properties.start
            && properties.start <= properties.end
            && properties.end < body.start
            && body.start <= body.end
            && body.end <= bytes.len()
            && content_end <= bytes.len()
            && bytes.len() <= u32::MAX as usize;
        assert!(in_order, "a publish's parts out of their frames' order");
        debug_assert!(ShortStr::is_valid(&bytes[exchange.clone()]));
        debug_assert!(ShortStr::is_valid(&bytes[routing_key.clone()]));
        MessageBytes {
            bytes,
            own_body: None,
            exchange: Span::of(exchange),
            routing_key: Span::of(routing_key),
            properties: Span::of(properties),
            body: Span::of(body),
        }
    }

    /// The names and properties copied into one buffer of their own, the body kept as it
    /// is (one allocation for a message that did not arrive as one publish).
    pub fn joined(
        exchange: &ShortStr,
        routing_key: &ShortStr,
        properties: &[u8],
        body: Bytes,
    ) -> MessageBytes {
        let mut joined = Vec::with_capacity(exchange.len() + routing_key.len() + properties.len());
        let mut put = |part: &[u8]| {
            let at = joined.len();
            joined.extend_from_slice(part);
            Span::of(at..joined.len())
        };
        let exchange = put(exchange.as_bytes());
        let routing_key = put(routing_key.as_bytes());
        let properties = put(properties);
        MessageBytes {
            bytes: Bytes::from(joined),
            own_body: Some(body),
            exchange,
            routing_key,
            properties,
            body: Span::default(),
        }
    }

    /// The names and `properties` encoded into one buffer of their own, the body kept as it
    /// is: one allocation for a message built from decoded properties (AMQP 1.0's). None
    /// when a name is longer than a short string.
    pub fn encoded(
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
        body: Bytes,
    ) -> Option<MessageBytes> {
        if exchange.len() > ShortStr::MAX_LEN || routing_key.len() > ShortStr::MAX_LEN {
            return None;
        }
        let mut joined = BytesMut::with_capacity(exchange.len() + routing_key.len() + 64);
        joined.extend_from_slice(exchange.as_bytes());
        joined.extend_from_slice(routing_key.as_bytes());
        let names = joined.len();
        properties.encode(&mut Writer::new(&mut joined));
        Some(MessageBytes {
            exchange: Span::of(0..exchange.len()),
            routing_key: Span::of(exchange.len()..names),
            properties: Span::of(names..joined.len()),
            bytes: joined.freeze(),
            own_body: Some(body),
            body: Span::default(),
        })
    }

    /// Every part copied into an allocation of its own, so that keeping the copy keeps no
    /// read buffer alive: for a publish's frames, the names through the end of the body
    /// frame (one allocation, the frames' layout kept); otherwise the names and properties,
    /// and the body apart.
    pub fn copied(&self) -> MessageBytes {
        if self.own_body.is_some() {
            let body = Bytes::copy_from_slice(self.body());
            return MessageBytes::joined(
                &self.exchange_name(),
                &self.routing_key_name(),
                self.properties_raw(),
                body,
            );
        }
        // Every span starts at or after the names (`in_frames`' order), so none goes below 0.
        let from = self.exchange.start;
        let end = self.content_end();
        let shift = |span: Span| Span {
            start: span.start - from,
            end: span.end - from,
        };
        MessageBytes {
            bytes: Bytes::copy_from_slice(&self.bytes[from as usize..end]),
            own_body: None,
            exchange: shift(self.exchange),
            routing_key: shift(self.routing_key),
            properties: shift(self.properties),
            body: shift(self.body),
        }
    }

    /// Where the content frames end in `bytes` (the body frame's end octet, or the header
    /// frame's for an empty body). Only for a message whose body is in `bytes`.
    #[inline]
    fn content_end(&self) -> usize {
        match self.body.len() {
            0 => self.properties.end as usize + 1,
            _ => self.body.end as usize + 1,
        }
    }

    /// The content header frame and the body frame (none for an empty body) as they arrived,
    /// when this holds a publish's frames (see the module's invariants): their channel is
    /// the publisher's, and the header's weight octets are the publisher's.
    #[inline]
    pub(crate) fn content_frames(&self) -> Option<&[u8]> {
        if self.own_body.is_some() {
            return None;
        }
        let start = self.properties.start as usize - CONTENT_HEADER_PREFIX;
        Some(self.part(Span::of(start..self.content_end())))
    }

    /// The same names and body with another property block (a rewritten reply-to, a
    /// removed BCC header): the names and properties copied into a buffer of their own.
    pub fn with_properties(self, properties: &[u8]) -> MessageBytes {
        let body = self.body_bytes();
        MessageBytes::joined(
            &self.exchange_name(),
            &self.routing_key_name(),
            properties,
            body,
        )
    }

    /// The bytes `span` covers, without a second bounds check: every span of this message is
    /// inside `bytes` (the module's invariants, asserted by `in_frames` and kept by how the
    /// other constructors lay their buffers out), and these reads are on every delivery (a
    /// checked slice here cost 57 instructions per publish→deliver).
    #[inline]
    fn part(&self, span: Span) -> &[u8] {
        debug_assert!(span.start <= span.end && span.end as usize <= self.bytes.len());
        // SAFETY: in bounds, as said above.
        unsafe { self.bytes.get_unchecked(span.range()) }
    }

    #[inline]
    fn exchange_raw(&self) -> &[u8] {
        self.part(self.exchange)
    }

    #[inline]
    fn routing_key_raw(&self) -> &[u8] {
        self.part(self.routing_key)
    }

    /// The exchange it was published to ("" for the default exchange).
    #[inline]
    pub fn exchange(&self) -> &str {
        // SAFETY: the constructors checked the name is UTF-8 (module invariant).
        unsafe { std::str::from_utf8_unchecked(self.exchange_raw()) }
    }

    /// Its routing key as published.
    #[inline]
    pub fn routing_key(&self) -> &str {
        // SAFETY: as in `exchange`.
        unsafe { std::str::from_utf8_unchecked(self.routing_key_raw()) }
    }

    /// The exchange's name to keep (a reference-count bump, no copy).
    pub fn exchange_name(&self) -> ShortStr {
        self.name(self.exchange)
    }

    /// The routing key to keep (a reference-count bump, no copy).
    pub fn routing_key_name(&self) -> ShortStr {
        self.name(self.routing_key)
    }

    fn name(&self, span: Span) -> ShortStr {
        if span.len() == 0 {
            return ShortStr::default();
        }
        // Checked by the constructors (module invariant); the fallback is never taken.
        ShortStr::from_bytes(self.bytes.slice(span.range())).unwrap_or_default()
    }

    /// Property flags and properties, as the publisher encoded them.
    #[inline]
    pub fn properties_raw(&self) -> &[u8] {
        self.part(self.properties)
    }

    /// The property block to keep (a reference-count bump, no copy).
    pub fn properties_bytes(&self) -> Bytes {
        self.bytes.slice(self.properties.range())
    }

    /// What routing and the publish checks read of the properties (`PublishProperties`).
    #[inline]
    pub fn publish_properties(&self) -> Result<PublishProperties, CodecError> {
        PublishProperties::decode_lazy(self.properties_raw(), || self.properties_bytes())
    }

    #[inline]
    pub fn body(&self) -> &[u8] {
        match &self.own_body {
            Some(body) => body,
            None => self.part(self.body),
        }
    }

    /// The body to keep (a reference-count bump, no copy).
    pub fn body_bytes(&self) -> Bytes {
        match &self.own_body {
            Some(body) => body.clone(),
            None => self.bytes.slice(self.body.range()),
        }
    }

    /// Bytes the parts hold together (names, properties and body).
    pub fn len(&self) -> usize {
        self.exchange.len() + self.routing_key.len() + self.properties.len() + self.body().len()
    }

    /// Whether every part is empty (no property block either: a message built by hand).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_in_one_buffer_read_back_as_published() {
        // Names, a content header's fixed part, properties, a frame end and a body frame's
        // header, a body, its frame end.
        let frames = Bytes::from_static(b"..ex..key.....................\x00\x00........body!");
        let m = MessageBytes::in_frames(frames.clone(), 2..4, 6..9, 30..32, 40..44);
        assert_eq!(
            (m.exchange(), m.routing_key(), m.properties_raw(), m.body()),
            ("ex", "key", &b"\x00\x00"[..], &b"body"[..])
        );
        assert_eq!(&*m.exchange_name(), "ex");
        assert_eq!(m.len(), 2 + 3 + 2 + 4);
        assert_eq!(
            m.publish_properties().unwrap(),
            PublishProperties::default()
        );
        // Out of order, without room for the frames, or outside the buffer: refused before
        // any part is read.
        for (properties, body) in [
            (30..32, 0..0),
            (20..22, 40..44),
            (30..32, 32..36),
            (30..32, 41..45),
        ] {
            let frames = frames.clone();
            let made = std::panic::catch_unwind(|| {
                MessageBytes::in_frames(frames, 2..4, 6..9, properties, body)
            });
            assert!(made.is_err());
        }
    }

    /// A publish as a client sends it: method, header and (unless empty) body frames.
    fn published(body: &[u8]) -> MessageBytes {
        use crate::{write_body_frames, write_content_header, write_method, BasicPublish};
        let mut buf = bytes::BytesMut::new();
        let publish = BasicPublish {
            exchange: "amq.direct".into(),
            routing_key: "key".into(),
            mandatory: false,
            immediate: false,
        };
        write_method(&mut buf, 1, &publish.into());
        let properties = crate::ContentHeader::new(
            crate::BASIC_CLASS_ID,
            0,
            &BasicProperties {
                delivery_mode: Some(1),
                ..Default::default()
            },
        );
        let class = crate::BASIC_CLASS_ID;
        write_content_header(
            &mut buf,
            1,
            class,
            body.len() as u64,
            &properties.properties,
        );
        write_body_frames(&mut buf, 1, body, 4096);
        let taken = crate::split_publish(&mut buf, 4096).expect("whole");
        taken.publish.expect("decodes").message
    }

    #[test]
    fn a_copy_of_a_publish_keeps_its_parts_and_frames_empty_body_or_not() {
        for body in [&b""[..], b"x", b"hello world"] {
            let m = published(body);
            let copy = m.copied();
            for x in [&m, &copy] {
                assert_eq!((x.exchange(), x.routing_key()), ("amq.direct", "key"));
                assert_eq!(x.body(), body);
                assert_eq!(&x.body_bytes()[..], body);
                assert_eq!(x.properties_raw(), m.properties_raw());
                assert_eq!(x.content_frames(), m.content_frames());
                assert_eq!(x.len(), m.len());
            }
            assert!(copy.bytes.len() < 64, "names to body frame only");
        }
    }

    #[test]
    fn joined_copied_and_rewritten_parts_keep_their_values() {
        let body = Bytes::from_static(b"hello");
        let m = MessageBytes::joined(&"amq.direct".into(), &"k".into(), b"\x00\x00", body);
        let copy = m.copied();
        for x in [&m, &copy] {
            assert_eq!(
                (x.exchange(), x.routing_key(), x.properties_raw(), x.body()),
                ("amq.direct", "k", &b"\x00\x00"[..], &b"hello"[..])
            );
        }
        assert!(copy.own_body.is_some() && m.content_frames().is_none());
        let rewritten = copy.with_properties(b"\x10\x00\x02");
        assert_eq!(rewritten.properties_raw(), b"\x10\x00\x02");
        assert_eq!(
            (rewritten.routing_key(), rewritten.body()),
            ("k", &b"hello"[..])
        );
        let properties = BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        let encoded = MessageBytes::encoded("x", "rk", &properties, Bytes::new()).unwrap();
        let expected = crate::ContentHeader::new(crate::BASIC_CLASS_ID, 0, &properties);
        assert_eq!(encoded.properties_raw(), &expected.properties[..]);
        assert_eq!((encoded.exchange(), encoded.routing_key()), ("x", "rk"));
        assert!(MessageBytes::encoded("x", &"k".repeat(256), &properties, Bytes::new()).is_none());
    }
}
