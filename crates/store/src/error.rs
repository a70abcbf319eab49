//! Error type of the store.
//!
//! Every fallible public operation returns [`StoreError`]. Corrupt disk data is
//! always reported as [`StoreError::Corrupt`] (never a panic); an I/O failure in
//! the group-commit writer fails the records not yet durable and refuses
//! appends until a retry succeeds ([`StoreError::Unavailable`]).

use std::io;

use crate::types::{MessageId, QueueId};

/// Errors returned by the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating-system I/O error on a caller's path (open, read, metadata).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// Data read from disk failed its CRC or did not decode.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The store was closed: it accepts nothing more.
    #[error("store failed: {0}")]
    Failed(String),
    /// A write or fsync failed (a full disk, an I/O error): the record waited
    /// for never became durable, or an append is refused while the writer
    /// retries. Appends work again once a write succeeds.
    #[error("message store unavailable: {0}")]
    Unavailable(String),
    /// The queue id is not registered (never was, or was deleted).
    #[error("unknown queue {0:?}")]
    UnknownQueue(QueueId),
    /// The (queue, message) reference does not exist (never published to that
    /// queue, or already acked).
    #[error("unknown message {1:?} in queue {0:?}")]
    UnknownMessage(QueueId, MessageId),
    /// Another store (in this or another process) has the directory open.
    #[error("data directory is locked by another store: {0}")]
    Locked(std::path::PathBuf),
    /// The caller passed something the format cannot represent (for example
    /// an exchange name longer than 255 bytes).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Shorthand used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
