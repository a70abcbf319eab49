//! Plain value types shared by every layer: identifiers, locations, the
//! message itself, options and the recovery result.
//!
//! These types carry no behaviour beyond construction; the record encoding of
//! [`StoredMessage`] lives in `record.rs`.

use std::collections::HashMap;

use bytes::Bytes;

/// Stable, persisted queue identifier. Assigned by
/// [`crate::Store::register_queue`]; never reused after deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u32);

/// Store-wide message identifier. Strictly increasing in log order, also
/// across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u64);

/// Where a PUBLISH record lives: segment number, byte offset of the record's
/// first byte, and the framed record length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    /// Segment number (`msgs/{segment:08}.seg`).
    pub segment: u32,
    /// Offset of the record's CRC field within the segment file.
    pub offset: u32,
    /// Framed length (8-byte prefix included).
    pub len: u32,
}

/// A persistent message as the store keeps it. The store never interprets
/// any field: `properties` are the raw AMQP content-header property bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredMessage {
    /// Exchange name (AMQP shortstr, at most 255 bytes).
    pub exchange: Bytes,
    /// Routing key (AMQP shortstr, at most 255 bytes).
    pub routing_key: Bytes,
    /// Encoded content-header properties, opaque.
    pub properties: Bytes,
    /// Message body.
    pub body: Bytes,
}

impl StoredMessage {
    /// Convenience constructor.
    pub fn new(
        exchange: impl Into<Bytes>,
        routing_key: impl Into<Bytes>,
        properties: impl Into<Bytes>,
        body: impl Into<Bytes>,
    ) -> Self {
        StoredMessage {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            properties: properties.into(),
            body: body.into(),
        }
    }
}

/// Result of [`crate::Store::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Sequence number of the PUBLISH record; durable once
    /// `durable_seq() >= seq`.
    pub seq: u64,
    /// The message's id (used to ack it).
    pub id: MessageId,
    /// Where the record is (used to read it back).
    pub location: Location,
}

/// Whether the writer fsyncs each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Group commit: one `fdatasync` per batch, then signal durability.
    #[default]
    Always,
    /// Never fsync: a batch is reported durable as soon as it was written to
    /// the OS. Survives `kill -9` of the broker, NOT power loss or a kernel
    /// crash. Speed over safety, by the user's explicit choice.
    Never,
}

/// Options for [`crate::Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Fsync policy of the group-commit writer.
    pub sync: SyncPolicy,
    /// Roll over to a new segment once the next record would end past this
    /// size. At most `u32::MAX`, at least 4096.
    pub segment_size_bytes: u64,
    /// Appends wait (back-pressure) while more than this many encoded bytes
    /// are waiting for the writer.
    pub max_pending_bytes: usize,
    /// Return full message contents from recovery (zero-copy slices of the
    /// segment buffers) instead of only ids and locations.
    pub recover_bodies: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncPolicy::Always,
            segment_size_bytes: 64 * 1024 * 1024,
            max_pending_bytes: 16 * 1024 * 1024,
            recover_bodies: false,
        }
    }
}

/// One live (un-acked) message found by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredMessage {
    /// Message id (ack with it).
    pub id: MessageId,
    /// Location of the PUBLISH record (read the body with it).
    pub location: Location,
    /// The message, if [`StoreOptions::recover_bodies`] was set.
    pub message: Option<StoredMessage>,
}

/// A registered queue and its live messages, in publish order.
#[derive(Debug, Clone, Default)]
pub struct RecoveredQueue {
    /// The name given to `register_queue`.
    pub name: String,
    /// Live messages in publish (= message id) order. All of them may have
    /// been delivered before the crash: the broker should mark them
    /// redelivered.
    pub messages: Vec<RecoveredMessage>,
}

/// What recovery found and did, for logging and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files scanned.
    pub segments_scanned: u64,
    /// Valid records read.
    pub records_read: u64,
    /// Bytes cut from the tail of the last segment (torn/corrupt tail).
    pub truncated_bytes: u64,
    /// Bytes ignored after a corrupt record in a non-last segment.
    pub skipped_bytes: u64,
    /// Segments removed because nothing in them was live any more.
    pub segments_removed: u64,
}

/// Everything [`crate::Store::open`] recovered.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// The last blob passed to `save_definitions`, if any.
    pub definitions: Option<Vec<u8>>,
    /// Every registered queue, with its live messages.
    pub queues: HashMap<QueueId, RecoveredQueue>,
    /// Scan statistics.
    pub report: RecoveryReport,
}

/// Counters since open. `records_written / fsyncs` is "confirms per fsync".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Records (publish + ack) handed to the OS by the writer.
    pub records_written: u64,
    /// Bytes handed to the OS by the writer (segment headers included).
    pub bytes_written: u64,
    /// Batches written.
    pub batches: u64,
    /// `fdatasync` calls on segment files.
    pub fsyncs: u64,
    /// Segment files created since open.
    pub segments_created: u64,
    /// Segment files removed since open (recovery included).
    pub segments_removed: u64,
    /// Segment files currently on disk.
    pub segments: u64,
    /// Live (queue, message) references.
    pub live_references: u64,
    /// Highest durable sequence number.
    pub durable_seq: u64,
}
