//! `PublishProperties`: the few content properties a broker acts on when it routes a publish,
//! read straight off the raw property block.
//!
//! A broker forwards a message's properties to consumers as the bytes the publisher sent
//! (`ContentHeader::properties`); to route and check it, it needs only delivery-mode,
//! priority, expiration, reply-to, user-id and the headers. Decoding all fourteen into a
//! `BasicProperties` (some 400 bytes, moved through several `Result`s) cost ~250
//! instructions of memcpy per message on the publish→deliver path (callgrind); this reads
//! the same block with the same checks and the same errors, keeps those six, and checks the
//! other short strings in place without copying them out.

use crate::{CodecError, FieldTable, Reader, ShortStr};
use bytes::Bytes;

/// `ContentHeader::properties`' error for a block with bytes after its properties.
const TRAILING_BYTES: CodecError = CodecError::Syntax("bytes after the content properties");

/// What routing and the publish checks need of a message's properties (`None`: flag clear).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PublishProperties {
    pub headers: Option<FieldTable>,
    pub reply_to: Option<ShortStr>,
    pub expiration: Option<ShortStr>,
    pub user_id: Option<ShortStr>,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
}

impl PublishProperties {
    /// Reads a property block (flags, then the present properties) exactly as
    /// `BasicProperties::decode` followed by the trailing-bytes check does: a block one of
    /// them refuses, the other refuses with the same error.
    pub fn decode(raw: &Bytes) -> Result<PublishProperties, CodecError> {
        Self::decode_lazy(raw, || raw.clone())
    }

    /// `decode` of the block `raw`, whose `Bytes` (for the short strings kept) `owned` makes
    /// only when some property is set.
    #[inline]
    pub fn decode_lazy(
        raw: &[u8],
        owned: impl FnOnce() -> Bytes,
    ) -> Result<PublishProperties, CodecError> {
        if let [0, 0, rest @ ..] = raw {
            // No property set (a publisher's default), read without a reader on the block.
            return match rest.is_empty() {
                true => Ok(PublishProperties::default()),
                false => Err(TRAILING_BYTES),
            };
        }
        Self::decode_set(owned())
    }

    /// `decode` of a block with some property set.
    #[inline(never)]
    fn decode_set(raw: Bytes) -> Result<PublishProperties, CodecError> {
        let mut r = Reader::new(raw);
        let flags = r.short()?;
        if flags & 1 != 0 {
            return Err(CodecError::Syntax("property flags continuation"));
        }
        let mut p = PublishProperties::default();
        let present = |bit: u16| flags & (1 << bit) != 0;
        if present(15) {
            r.skip_shortstr()?; // content-type
        }
        if present(14) {
            r.skip_shortstr()?; // content-encoding
        }
        if present(13) {
            p.headers = Some(r.table()?);
        }
        if present(12) {
            p.delivery_mode = Some(r.octet()?);
        }
        if present(11) {
            p.priority = Some(r.octet()?);
        }
        if present(10) {
            r.skip_shortstr()?; // correlation-id
        }
        if present(9) {
            p.reply_to = Some(r.shortstr()?);
        }
        if present(8) {
            p.expiration = Some(r.shortstr()?);
        }
        if present(7) {
            r.skip_shortstr()?; // message-id
        }
        if present(6) {
            r.longlong()?; // timestamp
        }
        if present(5) {
            r.skip_shortstr()?; // type
        }
        if present(4) {
            p.user_id = Some(r.shortstr()?);
        }
        if present(3) {
            r.skip_shortstr()?; // app-id
        }
        if present(2) {
            r.skip_shortstr()?; // reserved (cluster-id)
        }
        if r.remaining() != 0 {
            return Err(TRAILING_BYTES);
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BasicProperties, ContentHeader, FieldValue, BASIC_CLASS_ID};

    fn full() -> BasicProperties {
        let mut headers = FieldTable::new();
        headers.insert("CC", FieldValue::Array(vec![FieldValue::string("a")]));
        BasicProperties {
            content_type: Some("text/plain".into()),
            content_encoding: Some("gzip".into()),
            headers: Some(headers),
            delivery_mode: Some(2),
            priority: Some(7),
            correlation_id: Some("c-1".into()),
            reply_to: Some("replies".into()),
            expiration: Some("60000".into()),
            message_id: Some("m-1".into()),
            timestamp: Some(1_700_000_000),
            message_type: Some("t".into()),
            user_id: Some("guest".into()),
            app_id: Some("app".into()),
            reserved: Some("cluster".into()),
        }
    }

    fn raw(p: &BasicProperties) -> Bytes {
        ContentHeader::new(BASIC_CLASS_ID, 0, p).properties
    }

    /// What the full decoder makes of a block, reduced to the fields kept here.
    fn via_full_decode(raw: &Bytes) -> Result<PublishProperties, CodecError> {
        let header = ContentHeader {
            class_id: BASIC_CLASS_ID,
            body_size: 0,
            properties: raw.clone(),
        };
        header.properties().map(|b| PublishProperties {
            headers: b.headers,
            reply_to: b.reply_to,
            expiration: b.expiration,
            user_id: b.user_id,
            delivery_mode: b.delivery_mode,
            priority: b.priority,
        })
    }

    #[test]
    fn keeps_the_routing_fields_of_every_property_combination() {
        let all = full();
        for mask in [0u16, 0xfffc, 0x1000, 0x0200, 0x2000, 0x8010, 0x4ffc, 0xa5a4] {
            let mut p = BasicProperties::default();
            let bit = |n: u16| mask & (1 << n) != 0;
            if bit(15) {
                p.content_type = all.content_type.clone();
            }
            if bit(14) {
                p.content_encoding = all.content_encoding.clone();
            }
            if bit(13) {
                p.headers = all.headers.clone();
            }
            if bit(12) {
                p.delivery_mode = all.delivery_mode;
            }
            if bit(11) {
                p.priority = all.priority;
            }
            if bit(10) {
                p.correlation_id = all.correlation_id.clone();
            }
            if bit(9) {
                p.reply_to = all.reply_to.clone();
            }
            if bit(8) {
                p.expiration = all.expiration.clone();
            }
            if bit(7) {
                p.message_id = all.message_id.clone();
            }
            if bit(6) {
                p.timestamp = all.timestamp;
            }
            if bit(5) {
                p.message_type = all.message_type.clone();
            }
            if bit(4) {
                p.user_id = all.user_id.clone();
            }
            if bit(3) {
                p.app_id = all.app_id.clone();
            }
            if bit(2) {
                p.reserved = all.reserved.clone();
            }
            let block = raw(&p);
            let got = PublishProperties::decode(&block).expect("valid block");
            assert_eq!(Ok(got.clone()), via_full_decode(&block), "mask {mask:#x}");
            assert_eq!(got.delivery_mode, p.delivery_mode);
            assert_eq!(got.user_id, p.user_id);
        }
    }

    #[test]
    fn refuses_what_the_full_decoder_refuses_with_the_same_error() {
        let block = raw(&full());
        // Every truncation, then the block with a trailing byte.
        for len in 0..block.len() {
            let cut = block.slice(..len);
            let ours = PublishProperties::decode(&cut);
            assert!(ours.is_err(), "truncated to {len} bytes");
            assert_eq!(ours, via_full_decode(&cut), "truncated to {len} bytes");
        }
        let mut longer = block.to_vec();
        longer.push(0);
        let longer = Bytes::from(longer);
        assert_eq!(
            PublishProperties::decode(&longer),
            Err(CodecError::Syntax("bytes after the content properties"))
        );
        assert_eq!(PublishProperties::decode(&longer), via_full_decode(&longer));
        // No property set, alone and with bytes after it.
        for empty in [&[0u8, 0][..], &[0, 0, 7][..], &[0][..]] {
            let empty = Bytes::copy_from_slice(empty);
            assert_eq!(PublishProperties::decode(&empty), via_full_decode(&empty));
        }
        assert_eq!(
            PublishProperties::decode(&Bytes::from_static(&[0, 0])),
            Ok(PublishProperties::default())
        );
        // A continuation flag word, and a content-type (not kept) that is not UTF-8.
        let continuation = Bytes::from_static(&[0x00, 0x01]);
        assert_eq!(
            PublishProperties::decode(&continuation),
            via_full_decode(&continuation)
        );
        let bad_utf8 = Bytes::from_static(&[0x80, 0x00, 2, 0xc3, 0x28]);
        assert_eq!(
            PublishProperties::decode(&bad_utf8),
            Err(CodecError::Syntax("short string is not UTF-8"))
        );
        assert_eq!(
            PublishProperties::decode(&bad_utf8),
            via_full_decode(&bad_utf8)
        );
    }
}
