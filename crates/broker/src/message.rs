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

    /// What the store keeps of this message, stamped with the time it is written (TTLs of
    /// a message read back count from it). A transient message is only ever written to page
    /// it out of memory, and is flagged so that a restart drops it.
    pub fn to_stored(&self) -> warren_store::StoredMessage {
        let published_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        warren_store::StoredMessage {
            exchange: self.exchange.to_bytes(),
            routing_key: self.routing_key.to_bytes(),
            properties: self.properties_raw.clone(),
            body: self.body.clone(),
            published_at_ms,
            transient: !self.persistent,
        }
    }

    /// Bytes a queue accounts for this message: its body, as RabbitMQ counts them for
    /// `x-max-length-bytes` (properties and overheads ignored).
    pub fn size_bytes(&self) -> usize {
        self.body.len()
    }

    /// Bytes this message holds in memory (what the memory alarm counts).
    pub fn memory_bytes(&self) -> usize {
        self.body.len() + self.properties_raw.len()
    }
}
