//! A small, fast AMQP 0-9-1 client on Warren's own codec, just what a load tool needs: PLAIN
//! login, channels, declarations, batched publishing, streamed deliveries, acks, qos, publisher
//! confirms, returns and transactions.
//!
//! Each connection runs two tasks: a reader that splits frames and dispatches them to
//! channels (deliveries go to per-consumer queues, confirms and returns to synchronous hooks),
//! and a writer that flushes a shared output buffer. Publishers append frames to that buffer
//! under a short lock, so every frame written while the previous write was in flight leaves
//! in the next single `write` call: many frames per syscall without any timer.

mod channel;
mod confirms;
mod connection;
mod outbox;
mod uri;

pub use channel::{
    encode_properties, Channel, ChannelHooks, Delivery, DeliveryHook, MessageTemplate,
    PublishTemplate, QueueOptions,
};
pub use connection::Connection;
pub use uri::{AmqpUri, BrokerUris};

/// Why a client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("connection closed: {0}")]
    ConnectionClosed(String),
    #[error("channel closed by the broker: {0}")]
    ChannelClosed(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("i/o error: {0}")]
    Io(String),
}

pub type Result<T> = std::result::Result<T, ClientError>;
