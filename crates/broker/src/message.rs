//! `Message`: one published message, shared by every queue it was routed to (`Arc`), with
//! its body as a `Bytes` slice of the publisher's read buffer — never copied per queue.

use bytes::Bytes;
use warren_codec::{BasicProperties, ContentHeader, ShortStr, BASIC_CLASS_ID};

#[derive(Debug)]
pub struct Message {
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    /// Encoded property flags and properties, passed through to consumers verbatim.
    pub properties_raw: Bytes,
    pub body: Bytes,
    /// delivery-mode 2.
    pub persistent: bool,
    pub priority: u8,
    /// Per-message TTL from the `expiration` property, when it parsed as an integer.
    pub expiration_ms: Option<u64>,
    /// When paged out (only in the store; names, properties and body empty here): the size
    /// the message has on the queue's books. 0 otherwise.
    pub paged_bytes: usize,
}

impl Message {
    /// Builds a message from decoded properties (which the publish path has already checked).
    pub fn new(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: &BasicProperties,
        properties_raw: Bytes,
        body: Bytes,
    ) -> Message {
        Message {
            exchange,
            routing_key,
            properties_raw,
            body,
            persistent: properties.delivery_mode == Some(2),
            priority: properties.priority.unwrap_or(0),
            expiration_ms: properties
                .expiration
                .as_ref()
                .and_then(|e| e.as_str().parse().ok()),
            paged_bytes: 0,
        }
    }

    /// What stays in memory of a message whose record is in the store: only what ordering,
    /// expiry and limits need. Everything else (names, properties, body) is read back from
    /// the store before delivery (`from_stored`).
    pub fn without_body(&self) -> Message {
        Message {
            exchange: ShortStr::default(),
            routing_key: ShortStr::default(),
            properties_raw: Bytes::new(),
            body: Bytes::new(),
            persistent: self.persistent,
            priority: self.priority,
            expiration_ms: self.expiration_ms,
            paged_bytes: self.size_bytes(),
        }
    }

    /// Rebuilds a message the store kept; None if its stored fields no longer parse.
    pub fn from_stored(stored: warren_store::StoredMessage) -> Option<Message> {
        let header = ContentHeader {
            class_id: BASIC_CLASS_ID,
            body_size: stored.body.len() as u64,
            properties: stored.properties,
        };
        let properties = header.properties().ok()?;
        Some(Message::new(
            ShortStr::from_bytes(stored.exchange)?,
            ShortStr::from_bytes(stored.routing_key)?,
            &properties,
            header.properties,
            stored.body,
        ))
    }

    /// What the store keeps of this message.
    pub fn to_stored(&self) -> warren_store::StoredMessage {
        warren_store::StoredMessage {
            exchange: self.exchange.to_bytes(),
            routing_key: self.routing_key.to_bytes(),
            properties: self.properties_raw.clone(),
            body: self.body.clone(),
        }
    }

    /// Bytes a queue accounts for this message (body plus properties), paged or not: what
    /// `x-max-length-bytes` limits.
    pub fn size_bytes(&self) -> usize {
        self.body.len() + self.properties_raw.len() + self.paged_bytes
    }

    /// Bytes this message holds in memory (what the memory alarm counts).
    pub fn memory_bytes(&self) -> usize {
        self.body.len() + self.properties_raw.len()
    }
}
