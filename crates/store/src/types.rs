//! Plain value types shared by every layer: identifiers, locations, the
//! message itself, options and the recovery result.
//!
//! These types carry no behaviour beyond construction; the record encoding of
//! [`StoredMessage`] lives in `record.rs`.

use std::collections::HashMap;

use bytes::Bytes;
use roaring::RoaringTreemap;

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
    /// The message's AMQP 1.0 sections as published (empty for an AMQP 0-9-1 message),
    /// opaque. When `body` is a slice of them, the record holds it only once.
    pub amqp10: Bytes,
    /// Wall-clock publish time in ms since the Unix epoch; queue and message TTLs count
    /// from it when a message is read back from disk.
    pub published_at_ms: u64,
    /// A transient message written only to page it out of memory: it is live while the
    /// store is open (and must be acked like any other) but recovery drops it.
    pub transient: bool,
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
            amqp10: Bytes::new(),
            published_at_ms: 0,
            transient: false,
        }
    }
}

/// A place in the message log: a segment and a byte offset in it. Positions order like
/// the log does (segment first), so a queue can keep one as its scan cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPosition {
    /// Segment number.
    pub segment: u32,
    /// Byte offset within the segment.
    pub offset: u32,
}

impl Location {
    /// Where this record starts.
    pub fn position(&self) -> LogPosition {
        LogPosition {
            segment: self.segment,
            offset: self.offset,
        }
    }
}

/// One message found by [`crate::Store::scan_queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedMessage {
    /// Message id (ack with it).
    pub id: MessageId,
    /// Where its PUBLISH record is.
    pub location: Location,
    /// The message itself (zero-copy slices of one read buffer).
    pub message: StoredMessage,
}

/// Result of [`crate::Store::scan_queue`].
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Messages found, in log (= message id) order.
    pub messages: Vec<ScannedMessage>,
    /// Where to continue: just past the last record examined.
    pub next: LogPosition,
    /// The scan reached the end of everything appended so far.
    pub end_of_log: bool,
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
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncPolicy::Always,
            segment_size_bytes: 64 * 1024 * 1024,
            max_pending_bytes: 16 * 1024 * 1024,
        }
    }
}

/// A registered queue as recovery found it. Memory is a compressed id set, not a list
/// of messages: a queue with 10M messages costs about 1.25 MB here. The messages
/// themselves are read with [`crate::Store::scan_queue`] from `first`.
#[derive(Debug, Clone, Default)]
pub struct RecoveredQueue {
    /// The name given to `register_queue`.
    pub name: String,
    /// Ids of the queue's live persistent messages (transient records are not
    /// recovered).
    pub live: RoaringTreemap,
    /// Those of them known never delivered: the clean-shutdown record's (§2.1), empty after
    /// a crash. The others may have reached a consumer: the broker marks them redelivered.
    pub undelivered: RoaringTreemap,
    /// Sum of the body lengths of those messages.
    pub live_body_bytes: u64,
    /// Where the first of them starts (`None` when there are none). Scanning from here
    /// yields every live message of the queue in id order.
    pub first: Option<LogPosition>,
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

/// The definitions as [`crate::Store::load_definitions`] reads them back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredDefinitions {
    /// The last blob saved (None if never saved or corrupt)...
    pub blob: Option<Vec<u8>>,
    /// ...and the changes journaled after it, in order.
    pub changes: Vec<Vec<u8>>,
}

/// Everything [`crate::Store::open`] recovered.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// The last blob passed to `save_definitions`, if any...
    pub definitions: Option<Vec<u8>>,
    /// ...and the changes passed to `append_definitions` after it, in order.
    pub definitions_changes: Vec<Vec<u8>>,
    /// Every registered queue holding live messages, with them (an empty queue is only in
    /// the queue table: [`crate::Store::queue_ids`]).
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
    /// Dead segments whose ACKs were carried forward so they could be removed
    /// before the older segments they acked into (docs/STORAGE.md §5).
    pub segments_carried: u64,
    /// ACK records re-appended by carrying.
    pub acks_carried: u64,
    /// Segment files currently on disk.
    pub segments: u64,
    /// Live (queue, message) references.
    pub live_references: u64,
    /// Highest durable sequence number.
    pub durable_seq: u64,
}
