//! The two methods that come with every message, decoded straight from their payload bytes:
//! basic.publish (a broker's connection reads one per published message) and basic.deliver
//! (a client's, per delivered message), each taken before the generic `Method::decode`.
//!
//! The generic path builds a `Method` (an enum sized for its largest variant), moves it through
//! the reader's dispatch, and reads each field through a `Reader` that clones the payload
//! `Bytes` (an atomic add and, on drop, an atomic sub) — on the publish→deliver path it cost
//! ~330 instructions per basic.publish (callgrind). These read the fields by index, keep each
//! short string as one slice of the payload, and make an empty one (the default exchange, the
//! usual case) without touching the payload's reference count. Same checks in the same
//! order and the same errors as `Method::decode`: a payload one refuses, the other refuses
//! with the same `CodecError` (unit tests below compare both on every truncation of valid
//! payloads and on malformed strings).

use crate::{BasicDeliver, BasicPublish, CodecError, ShortStr};
use bytes::Bytes;
use std::ops::Range;

const ENDS_EARLY: CodecError = CodecError::Syntax("payload ends early");
const NOT_UTF8: CodecError = CodecError::Syntax("short string is not UTF-8");

/// `None` when the payload is not a basic.publish (class 60, method 40: the caller decodes it
/// the generic way); otherwise what `Method::decode` would make of it.
#[inline]
pub fn decode_basic_publish(payload: &Bytes) -> Option<Result<BasicPublish, CodecError>> {
    if payload.get(..4) != Some(&[0, 60, 0, 40][..]) {
        return None;
    }
    Some(publish_arguments(payload))
}

/// Reserved short (ticket), exchange, routing key, bits.
fn publish_arguments(payload: &Bytes) -> Result<BasicPublish, CodecError> {
    publish_arguments_in(payload, 0, payload.len())
}

/// The basic.publish whose method payload is `bytes[start..end]` (its class and method ids
/// already checked): what `decode_basic_publish` makes of that payload alone, its names
/// slicing `bytes`.
fn publish_arguments_in(
    bytes: &Bytes,
    start: usize,
    end: usize,
) -> Result<BasicPublish, CodecError> {
    let spans = publish_spans_in(bytes, start, end)?;
    Ok(BasicPublish {
        exchange: name_in(bytes, spans.exchange),
        routing_key: name_in(bytes, spans.routing_key),
        mandatory: spans.mandatory,
        immediate: spans.immediate,
    })
}

/// A basic.publish's arguments as places in the buffer its payload is in, its names checked
/// as short strings.
pub(crate) struct PublishSpans {
    pub exchange: Range<usize>,
    pub routing_key: Range<usize>,
    pub mandatory: bool,
    pub immediate: bool,
}

/// The arguments of the basic.publish whose payload is `bytes[start..end]` (its class and
/// method ids already checked), with the same checks and errors as `decode_basic_publish`,
/// without slicing the names out (`publish_frames.rs` keeps the publish's frames whole).
///
/// The usual publish (every argument inside the payload, ASCII names) is read by index in
/// one pass; anything else goes through `Cursor`, whose checks in order give the error.
#[inline]
pub(crate) fn publish_spans_in(
    bytes: &[u8],
    start: usize,
    end: usize,
) -> Result<PublishSpans, CodecError> {
    debug_assert!(start + 4 <= end && end <= bytes.len());
    let arguments = start + 4;
    let args = &bytes[arguments..end];
    // Ticket (2), exchange length at 2, the exchange, routing key length, key, bits.
    if let Some(&exchange_len) = args.get(2) {
        let exchange = 3..3 + exchange_len as usize;
        if let Some(&key_len) = args.get(exchange.end) {
            let key = exchange.end + 1..exchange.end + 1 + key_len as usize;
            if let Some(&bits) = args.get(key.end) {
                if args[exchange.clone()].is_ascii() && args[key.clone()].is_ascii() {
                    return Ok(PublishSpans {
                        exchange: arguments + exchange.start..arguments + exchange.end,
                        routing_key: arguments + key.start..arguments + key.end,
                        mandatory: bits & 1 != 0,
                        immediate: bits & 2 != 0,
                    });
                }
            }
        }
    }
    publish_spans_checked(bytes, start, end)
}

/// `publish_spans_in` field by field, with each check and its error in `Method::decode`'s
/// order.
#[inline(never)]
fn publish_spans_checked(
    bytes: &[u8],
    start: usize,
    end: usize,
) -> Result<PublishSpans, CodecError> {
    let mut c = Cursor {
        payload: bytes,
        pos: start + 4,
        end,
    };
    c.skip(2)?;
    let exchange = c.short_str()?;
    let routing_key = c.short_str()?;
    let bits = c.octet()?;
    Ok(PublishSpans {
        exchange,
        routing_key,
        mandatory: bits & 1 != 0,
        immediate: bits & 2 != 0,
    })
}

/// `None` when the payload is not a basic.deliver (class 60, method 60); otherwise what
/// `Method::decode` would make of it.
#[inline]
pub fn decode_basic_deliver(payload: &Bytes) -> Option<Result<BasicDeliver, CodecError>> {
    if payload.get(..4) != Some(&[0, 60, 0, 60][..]) {
        return None;
    }
    Some(deliver_arguments(payload))
}

/// Consumer tag, delivery tag, bits, exchange, routing key.
fn deliver_arguments(payload: &Bytes) -> Result<BasicDeliver, CodecError> {
    let mut c = Cursor {
        payload,
        pos: 4,
        end: payload.len(),
    };
    let consumer_tag = c.short_str()?;
    let delivery_tag = c.longlong()?;
    let redelivered = c.octet()? & 1 != 0;
    let exchange = c.short_str()?;
    let routing_key = c.short_str()?;
    Ok(BasicDeliver {
        consumer_tag: name_in(payload, consumer_tag),
        delivery_tag,
        redelivered,
        exchange: name_in(payload, exchange),
        routing_key: name_in(payload, routing_key),
    })
}

/// The short string `Cursor::short_str` found at `range` of `bytes`. Empty:
/// `ShortStr::default()`, no reference taken on the payload.
#[inline]
fn name_in(bytes: &Bytes, range: Range<usize>) -> ShortStr {
    match range.is_empty() {
        true => ShortStr::default(),
        // Checked by `short_str`; the fallback is never taken.
        false => ShortStr::from_bytes(bytes.slice(range)).unwrap_or_default(),
    }
}

/// A read position in a payload, `payload[..end]`; each read checks the bounds as
/// `Reader`'s does.
struct Cursor<'a> {
    payload: &'a [u8],
    pos: usize,
    end: usize,
}

impl Cursor<'_> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&[u8], CodecError> {
        let end = self.pos + n;
        if end > self.end {
            return Err(ENDS_EARLY);
        }
        let bytes = &self.payload[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<(), CodecError> {
        self.take(n).map(|_| ())
    }

    #[inline]
    fn octet(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    #[inline]
    fn longlong(&mut self) -> Result<u64, CodecError> {
        let bytes = self.take(8)?;
        Ok(u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// Where a short string lies, checked as `Reader::shortstr` checks it (`name_in` makes
    /// it a `ShortStr`).
    #[inline]
    fn short_str(&mut self) -> Result<Range<usize>, CodecError> {
        let len = self.octet()? as usize;
        let start = self.pos;
        let bytes = self.take(len)?;
        match len == 0 || ShortStr::is_valid(bytes) {
            true => Ok(start..self.pos),
            false => Err(NOT_UTF8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_method, FrameKind, Method, Reader};
    use bytes::BytesMut;

    fn generic_publish(payload: &Bytes) -> Result<BasicPublish, CodecError> {
        match Method::decode(&mut Reader::new(payload.clone()))? {
            Method::BasicPublish(m) => Ok(m),
            other => panic!("decoded as {}", other.name()),
        }
    }

    fn generic_deliver(payload: &Bytes) -> Result<BasicDeliver, CodecError> {
        match Method::decode(&mut Reader::new(payload.clone()))? {
            Method::BasicDeliver(m) => Ok(m),
            other => panic!("decoded as {}", other.name()),
        }
    }

    /// Both decoders agree on this payload: the same method, or the same error.
    fn same_as_generic(payload: &Bytes) {
        match payload.get(..4) {
            Some([0, 60, 0, 40]) => assert_eq!(
                decode_basic_publish(payload).expect("a basic.publish"),
                generic_publish(payload),
                "payload {payload:?}"
            ),
            Some([0, 60, 0, 60]) => assert_eq!(
                decode_basic_deliver(payload).expect("a basic.deliver"),
                generic_deliver(payload),
                "payload {payload:?}"
            ),
            _ => panic!("not a publish or deliver: {payload:?}"),
        }
    }

    /// The method frame's payload, as a peer writes it.
    fn payload_of(m: Method) -> Bytes {
        let mut out = BytesMut::new();
        write_method(&mut out, 1, &m);
        let frame = crate::parse_frame(&mut out, 0).unwrap().unwrap();
        assert_eq!(frame.kind, FrameKind::Method);
        frame.payload
    }

    const STRINGS: [&str; 4] = ["", "q", "é-x.y", "amq.topic"];

    fn methods() -> Vec<Method> {
        let long = "k".repeat(255);
        let mut all = vec![];
        for exchange in STRINGS {
            for routing_key in STRINGS.iter().copied().chain([long.as_str()]) {
                for bits in 0..4u8 {
                    all.push(Method::BasicPublish(BasicPublish {
                        exchange: exchange.into(),
                        routing_key: routing_key.into(),
                        mandatory: bits & 1 != 0,
                        immediate: bits & 2 != 0,
                    }));
                }
                for (consumer_tag, delivery_tag) in [("", 0), ("ctag-1", u64::MAX), ("ç", 7)] {
                    all.push(Method::BasicDeliver(BasicDeliver {
                        consumer_tag: consumer_tag.into(),
                        delivery_tag,
                        redelivered: delivery_tag == 7,
                        exchange: exchange.into(),
                        routing_key: routing_key.into(),
                    }));
                }
            }
        }
        all
    }

    #[test]
    fn valid_methods_decode_as_the_generic_decoder_does() {
        for m in methods() {
            let payload = payload_of(m.clone());
            let fast = match &m {
                Method::BasicPublish(_) => {
                    Method::BasicPublish(decode_basic_publish(&payload).unwrap().unwrap())
                }
                _ => Method::BasicDeliver(decode_basic_deliver(&payload).unwrap().unwrap()),
            };
            assert_eq!(fast, m);
            same_as_generic(&payload);
        }
    }

    #[test]
    fn every_truncation_fails_as_the_generic_decoder_does() {
        for m in methods() {
            let payload = payload_of(m);
            for len in 4..payload.len() {
                same_as_generic(&payload.slice(..len));
            }
        }
    }

    #[test]
    fn trailing_bytes_and_other_bits_are_ignored_as_by_the_generic_decoder() {
        for m in methods() {
            let mut payload = BytesMut::from(&payload_of(m)[..]);
            // The publish's bits are its last octet; set every unused bit of it.
            if payload[3] == 40 {
                let last = payload.len() - 1;
                payload[last] |= 0xfc;
            }
            payload.extend_from_slice(b"trailing");
            same_as_generic(&payload.freeze());
        }
    }

    #[test]
    fn invalid_utf8_fails_as_the_generic_decoder_does_even_before_a_short_read() {
        // A bad string in each position, then the rest whole, cut right after the bad
        // string, or cut inside the next field (the UTF-8 error must win, as it comes first).
        let bad: [&[u8]; 3] = [&[0xff, 0xfe], &[0x80], &[0xf0, 0x9f, 0x98]];
        for bad in bad {
            let short_str = |s: &[u8]| [&[s.len() as u8][..], s].concat();
            let publishes = [
                [
                    &[0, 60, 0, 40, 0, 0][..],
                    &short_str(bad),
                    &short_str(b"q"),
                    &[0],
                ]
                .concat(),
                [
                    &[0, 60, 0, 40, 0, 0][..],
                    &short_str(b""),
                    &short_str(bad),
                    &[0],
                ]
                .concat(),
            ];
            let tag = [0u8; 8];
            let delivers = [
                [&[0, 60, 0, 60][..], &short_str(bad), &tag, &[0], &[0], &[0]].concat(),
                [
                    &[0, 60, 0, 60][..],
                    &short_str(b"c"),
                    &tag,
                    &[0],
                    &short_str(bad),
                    &[0],
                ]
                .concat(),
                [
                    &[0, 60, 0, 60][..],
                    &short_str(b"c"),
                    &tag,
                    &[0],
                    &[0],
                    &short_str(bad),
                ]
                .concat(),
            ];
            for payload in publishes.iter().chain(delivers.iter()) {
                let payload = Bytes::from(payload.clone());
                for len in 4..=payload.len() {
                    same_as_generic(&payload.slice(..len));
                }
            }
        }
    }

    #[test]
    fn other_methods_are_left_to_the_generic_decoder() {
        for payload in [
            &[][..],
            &[0, 60][..],
            &[0, 60, 0][..],
            &[0, 60, 0, 41, 0, 0, 0, 0, 0][..],
            &[0, 61, 0, 40, 0, 0, 0, 0, 0][..],
            &[1, 60, 0, 40, 0, 0, 0, 0, 0][..],
            &[0, 60, 0, 61, 0, 0, 0, 0, 0][..],
        ] {
            let payload = Bytes::copy_from_slice(payload);
            assert!(decode_basic_publish(&payload).is_none());
            assert!(decode_basic_deliver(&payload).is_none());
        }
    }

    #[test]
    fn strings_are_slices_of_the_payload_not_copies() {
        let payload = payload_of(Method::BasicPublish(BasicPublish {
            exchange: "".into(),
            routing_key: "q".into(),
            ..Default::default()
        }));
        let fast = decode_basic_publish(&payload).unwrap().unwrap();
        assert!(fast.exchange.is_empty());
        assert_eq!(fast.routing_key.as_bytes().as_ptr(), payload[8..].as_ptr());
    }
}
