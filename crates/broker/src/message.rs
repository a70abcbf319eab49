//! `Message`: one published message, shared by every queue it was routed to (`Arc`), with
//! its body as a `Bytes` slice of the publisher's read buffer — never copied per queue.

use bytes::Bytes;
use warren_codec::{BasicProperties, ShortStr};

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

    /// Bytes a queue accounts for this message (body plus properties).
    pub fn size_bytes(&self) -> usize {
        self.body.len() + self.properties_raw.len()
    }
}
