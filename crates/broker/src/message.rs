//! `Message`: one published message, shared by every queue it was routed to (`Arc`), never
//! copied per queue. Its names, properties and body are a `MessageBytes`: for a publish
//! taken whole, the publisher's three frames as read, held once.
//!
//! A message published over AMQP 1.0 also keeps its sections as published (`amqp10`), as
//! RabbitMQ 4's message container does: an AMQP 1.0 consumer gets them back unchanged
//! (properties no 0-9-1 field holds, footers, annotations, the exact bare message), while
//! routing, TTL, dead-lettering and 0-9-1 consumers use the 0-9-1 view (`properties_raw`
//! and `body`, the latter a slice of the same bytes). A 0-9-1 message pays one null
//! pointer for this.

use crate::queue_args::MAX_EXPIRY_MS;
use bytes::Bytes;
use warren_codec::{
    BasicProperties, ContentHeader, MessageBytes, PublishProperties, ShortStr, BASIC_CLASS_ID,
};

/// What a queued message costs beyond its bytes: the `Message` and its `Arc`, the
/// `QueuedMessage` in a ready list, and the method/header/body frame overhead (~50 bytes)
/// in the frames it holds.
pub const MESSAGE_OVERHEAD_BYTES: usize = 256;

/// A message a queue keeps whose names, properties and body together are at most this
/// large is copied out of the read buffer it arrived in ([`Message::compacted`]). Its frames
/// are a slice of the publisher's read buffer (up to 64 KiB, more for a larger frame), and a
/// slice keeps the whole buffer alive: 5,000 one-byte messages kept in a queue, each read
/// behind a 60 KB unroutable one, held 294 MiB of RSS (issue 30). At this size a kept
/// message pins at most 16 times its bytes; a copy costs two allocations, and only for
/// messages that stay in a queue (one delivered at once keeps its slices).
pub const COMPACT_MAX_BYTES: usize = 4096;

#[derive(Debug)]
pub struct Message {
    /// Its names, properties and body: for a publish taken whole, the three frames it came
    /// in, held once (`MessageBytes`).
    bytes: MessageBytes,
    /// delivery-mode 2.
    pub persistent: bool,
    pub priority: u8,
    /// Per-message TTL from the `expiration` property, when it parsed as an integer.
    pub expiration_ms: Option<u64>,
    /// The AMQP 1.0 sections as published (delivery-annotations dropped: they are
    /// hop-by-hop); None for a message that did not come over AMQP 1.0. Boxed so that a
    /// 0-9-1 message carries a null pointer only.
    pub amqp10: Option<Box<Bytes>>,
    /// The failed deliveries a dead-lettered copy brings along: the source queue's count
    /// when it died. RabbitMQ 4 carries its `delivery_count` annotation into the
    /// dead-letter queue; each queue then counts on from it in its own copy
    /// (`QueuedMessage::delivery_count`). 0 for a published message. Sits in padding.
    pub inherited_delivery_count: u32,
    /// The copy a queue dead-lettered (it has a death history): an AMQP 1.0 consumer's
    /// header says first-acquirer false, as RabbitMQ 4's `mc_amqp` does for messages with
    /// deaths. Set by dead-lettering and by reading back a stored message with an x-death
    /// header, never on the publish path.
    pub dead_lettered: bool,
}

impl Message {
    /// The exchange it was published to ("" for the default exchange).
    #[inline]
    pub fn exchange(&self) -> &str {
        self.bytes.exchange()
    }

    /// Its routing key as published.
    #[inline]
    pub fn routing_key(&self) -> &str {
        self.bytes.routing_key()
    }

    /// The exchange's name as a short string to keep (a reference-count bump, no copy).
    pub fn exchange_name(&self) -> ShortStr {
        self.bytes.exchange_name()
    }

    /// The routing key as a short string to keep (a reference-count bump, no copy).
    pub fn routing_key_name(&self) -> ShortStr {
        self.bytes.routing_key_name()
    }

    /// Encoded property flags and properties, as a consumer gets them.
    #[inline]
    pub fn properties_raw(&self) -> &[u8] {
        self.bytes.properties_raw()
    }

    /// The properties to keep (a reference-count bump, no copy).
    pub fn properties_bytes(&self) -> Bytes {
        self.bytes.properties_bytes()
    }

    #[inline]
    pub fn body(&self) -> &[u8] {
        self.bytes.body()
    }

    /// The body to keep (a reference-count bump, no copy).
    pub fn body_bytes(&self) -> Bytes {
        self.bytes.body_bytes()
    }

    /// Its names, properties and body together, as a delivery writes them.
    #[inline]
    pub fn content(&self) -> &MessageBytes {
        &self.bytes
    }

    /// The same message with another body (tests build AMQP 1.0 layouts with it).
    #[cfg(test)]
    pub(crate) fn with_body(mut self, body: Bytes) -> Message {
        let bytes = &self.bytes;
        self.bytes = MessageBytes::joined(
            &bytes.exchange_name(),
            &bytes.routing_key_name(),
            bytes.properties_raw(),
            body,
        );
        self
    }

    /// Builds a message from decoded properties (which the publish path has already
    /// checked); its names and properties are copied into one buffer (`MessageBytes::joined`).
    pub fn new(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: &BasicProperties,
        properties_raw: Bytes,
        body: Bytes,
    ) -> Message {
        Message::with_fields(
            MessageBytes::joined(&exchange, &routing_key, &properties_raw, body),
            properties.delivery_mode,
            properties.priority,
            properties.expiration.as_ref(),
        )
    }

    /// Builds a message from decoded properties, encoded into the buffer that holds its
    /// names (AMQP 1.0's publish path: one allocation). None when a name is longer than a
    /// short string.
    pub fn encoded(
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
        body: Bytes,
    ) -> Option<Message> {
        let bytes = MessageBytes::encoded(exchange, routing_key, properties, body)?;
        Some(Message::with_fields(
            bytes,
            properties.delivery_mode,
            properties.priority,
            properties.expiration.as_ref(),
        ))
    }

    /// Builds a published message from the properties the publish path read
    /// (`PublishProperties`, already checked), without a full `BasicProperties`.
    #[inline(always)]
    pub fn from_publish(bytes: MessageBytes, properties: &PublishProperties) -> Message {
        Message::with_fields(
            bytes,
            properties.delivery_mode,
            properties.priority,
            properties.expiration.as_ref(),
        )
    }

    #[inline(always)]
    fn with_fields(
        bytes: MessageBytes,
        delivery_mode: Option<u8>,
        priority: Option<u8>,
        expiration: Option<&ShortStr>,
    ) -> Message {
        Message {
            bytes,
            persistent: delivery_mode == Some(2),
            priority: priority.unwrap_or(0),
            expiration_ms: expiration.and_then(|e| parse_expiration(e).ok()),
            amqp10: None,
            inherited_delivery_count: 0,
            dead_lettered: false,
        }
    }

    /// The message with its AMQP 1.0 sections kept (the 0-9-1 view already built from
    /// them); empty sections keep none.
    pub fn with_amqp10(mut self, sections: Bytes) -> Message {
        self.amqp10 = (!sections.is_empty()).then(|| Box::new(sections));
        self
    }

    /// Rebuilds a message the store kept; None if its stored fields no longer parse.
    pub fn from_stored(stored: warren_store::StoredMessage) -> Option<Message> {
        let header = ContentHeader {
            class_id: BASIC_CLASS_ID,
            body_size: stored.body.len() as u64,
            properties: stored.properties,
        };
        let properties = header.properties().ok()?;
        let dead_lettered = properties
            .headers
            .as_ref()
            .is_some_and(|h| h.get("x-death").is_some());
        let mut message = Message::new(
            ShortStr::from_bytes(stored.exchange)?,
            ShortStr::from_bytes(stored.routing_key)?,
            &properties,
            header.properties,
            stored.body,
        );
        message.dead_lettered = dead_lettered;
        Some(message.with_amqp10(stored.amqp10))
    }

    /// What the store keeps of this message, stamped with the time it is written (TTLs of
    /// a message read back count from it). A transient message is only ever written to page
    /// it out of memory, and is flagged so that a restart drops it.
    pub fn to_stored(&self) -> warren_store::StoredMessage {
        let published_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        warren_store::StoredMessage {
            exchange: self.exchange_name().to_bytes(),
            routing_key: self.routing_key_name().to_bytes(),
            properties: self.properties_bytes(),
            body: self.body_bytes(),
            amqp10: self.amqp10.as_deref().cloned().unwrap_or_default(),
            published_at_ms,
            transient: !self.persistent,
        }
    }

    /// A copy of this message whose names, properties and body share one allocation of
    /// their own (`MessageBytes::copied`), so that keeping it keeps nothing else; None when
    /// they are larger than [`COMPACT_MAX_BYTES`] together or the message came over AMQP
    /// 1.0 (its body is a slice of its sections, kept whole).
    pub fn compacted(&self) -> Option<Message> {
        if self.bytes.len() > COMPACT_MAX_BYTES || self.amqp10.is_some() {
            return None;
        }
        Some(Message {
            bytes: self.bytes.copied(),
            persistent: self.persistent,
            priority: self.priority,
            expiration_ms: self.expiration_ms,
            amqp10: None,
            inherited_delivery_count: self.inherited_delivery_count,
            dead_lettered: self.dead_lettered,
        })
    }

    /// Bytes a queue accounts for this message: its body, as RabbitMQ counts them for
    /// `x-max-length-bytes` (properties and overheads ignored).
    pub fn size_bytes(&self) -> usize {
        self.body().len()
    }

    /// Bytes this message holds in memory (what the memory alarm and the paging budget
    /// count): body, properties, names and a fixed overhead for the message itself, its
    /// queue entry and the frame headers it pins in the publisher's read buffer. Without the
    /// overhead a million one-byte messages would count as 1 MB while holding hundreds.
    pub fn memory_bytes(&self) -> usize {
        MESSAGE_OVERHEAD_BYTES
            + self.bytes.len()
            + self
                .amqp10
                .as_ref()
                .map_or(0, |s| s.len().saturating_sub(self.body().len()))
    }
}

/// Reads the `expiration` property as RabbitMQ does (`rabbit_basic:parse_expiration`): an
/// optionally signed decimal integer and nothing else, from 0 to ten years of milliseconds.
/// The error is the Erlang term RabbitMQ prints in its 406 ("no_integer",
/// "{value_negative,-10}", "{leftover_string,\"abc\"}", "{value_too_large,N}").
pub fn parse_expiration(text: &str) -> Result<u64, String> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let digits_end = unsigned
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(unsigned.len());
    if digits_end == 0 {
        return Err("no_integer".to_owned());
    }
    let (digits, rest) = unsigned.split_at(digits_end);
    if !rest.is_empty() {
        let escaped = rest.replace('\\', "\\\\").replace('"', "\\\"");
        return Err(format!("{{leftover_string,\"{escaped}\"}}"));
    }
    let digits = match digits.trim_start_matches('0') {
        "" => "0",
        d => d,
    };
    let sign = if negative { "-" } else { "" };
    if negative && digits != "0" {
        return Err(format!("{{value_negative,{sign}{digits}}}"));
    }
    match digits.parse::<u64>() {
        Ok(ms) if ms <= MAX_EXPIRY_MS => Ok(ms),
        _ => Err(format!("{{value_too_large,{digits}}}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_message_is_compacted_out_of_its_read_buffer_and_a_large_one_is_not() {
        // One 64 KiB read buffer holding a small publish's parts among other bytes.
        let buffer = Bytes::from(vec![b'r'; 64 * 1024]);
        let slice = |at: usize, len: usize| buffer.slice(at..at + len);
        let properties = BasicProperties {
            delivery_mode: Some(2),
            expiration: Some("60000".into()),
            ..Default::default()
        };
        let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
        let small = Message::new(
            ShortStr::from_bytes(slice(100, 3)).unwrap(),
            ShortStr::from_bytes(slice(200, 5)).unwrap(),
            &properties,
            raw,
            slice(60_000, 1),
        );
        let compact = small.compacted().expect("small");
        let inside = |b: &[u8]| {
            let range = buffer.as_ptr_range();
            range.contains(&b.as_ptr())
        };
        for (a, b) in [
            (compact.exchange().as_bytes(), small.exchange().as_bytes()),
            (
                compact.routing_key().as_bytes(),
                small.routing_key().as_bytes(),
            ),
            (compact.properties_raw(), small.properties_raw()),
            (compact.body(), small.body()),
        ] {
            assert_eq!(a, b);
            assert!(!inside(a) || a.is_empty(), "still in the read buffer");
        }
        assert!(compact.persistent && compact.expiration_ms == Some(60_000));
        let large = Message::new(
            ShortStr::from_static(""),
            ShortStr::from_static("q"),
            &BasicProperties::default(),
            Bytes::new(),
            slice(0, COMPACT_MAX_BYTES + 1),
        );
        assert!(
            large.compacted().is_none(),
            "most of a buffer: kept as it is"
        );
    }

    #[test]
    fn amqp10_sections_survive_the_store_record() {
        let sections = Bytes::from_static(b"\x00\x53\x73\x45\x00\x53\x75\xa0\x02hi");
        let properties = BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties;
        let m = Message::new(
            ShortStr::from("amq.direct"),
            ShortStr::from("k"),
            &properties,
            raw,
            sections.slice(9..),
        )
        .with_amqp10(sections.clone());
        let back = Message::from_stored(m.to_stored()).unwrap();
        assert_eq!(back.amqp10.as_deref(), Some(&sections));
        assert_eq!(back.body(), b"hi");
        assert!(back.persistent);
        let plain = Message::from_stored(
            Message::new(
                ShortStr::from(""),
                ShortStr::from("q"),
                &properties,
                ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties,
                Bytes::from_static(b"x"),
            )
            .to_stored(),
        )
        .unwrap();
        assert!(plain.amqp10.is_none());
        assert!(!back.dead_lettered && !plain.dead_lettered);
    }

    #[test]
    fn a_dead_lettered_amqp10_copy_keeps_its_sections_and_is_known_as_dead_lettered_after_a_restart(
    ) {
        use crate::dead_letter::{dead_lettered, DeathReason};
        let sections = Bytes::from_static(b"\x00\x53\x75\xa0\x02hi");
        let properties = BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        let m = Message::new(
            ShortStr::from(""),
            ShortStr::from("q"),
            &properties,
            ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties,
            sections.slice(5..),
        )
        .with_amqp10(sections.clone());
        let (copy, _) = dead_lettered(&m, "q", DeathReason::Rejected, &ShortStr::from(""), None);
        assert!(copy.dead_lettered && copy.persistent);
        assert_eq!(copy.amqp10.as_deref(), Some(&sections));
        let back = Message::from_stored(copy.to_stored()).unwrap();
        assert!(back.dead_lettered, "its x-death header says so");
        assert_eq!(back.amqp10.as_deref(), Some(&sections));
        assert_eq!(back.body(), b"hi");
    }

    #[test]
    fn expiration_as_rabbitmq_reads_it() {
        assert_eq!(parse_expiration("0"), Ok(0));
        assert_eq!(parse_expiration("+10"), Ok(10));
        assert_eq!(parse_expiration("-0"), Ok(0));
        assert_eq!(parse_expiration("0060000"), Ok(60000));
        assert_eq!(parse_expiration("foobar").unwrap_err(), "no_integer");
        assert_eq!(parse_expiration("").unwrap_err(), "no_integer");
        assert_eq!(parse_expiration(" 10").unwrap_err(), "no_integer");
        assert_eq!(parse_expiration("-").unwrap_err(), "no_integer");
        assert_eq!(parse_expiration("-10").unwrap_err(), "{value_negative,-10}");
        assert_eq!(
            parse_expiration("10abc").unwrap_err(),
            "{leftover_string,\"abc\"}"
        );
        assert_eq!(
            parse_expiration("1.5").unwrap_err(),
            "{leftover_string,\".5\"}"
        );
        assert_eq!(
            parse_expiration("400000000000").unwrap_err(),
            "{value_too_large,400000000000}"
        );
        assert_eq!(
            parse_expiration("99999999999999999999999").unwrap_err(),
            "{value_too_large,99999999999999999999999}"
        );
    }
}
