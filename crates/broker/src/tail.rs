//! `PagedTail`: the part of a durable queue that lives on disk only.
//!
//! A durable queue keeps its oldest messages in memory (the ready list) up to a memory
//! budget; every message behind them is only in the store, and the queue remembers them
//! as a compressed set of store ids (about one bit per message while ids are dense) plus
//! a scan cursor into the store's log. That is what lets a queue hold millions of
//! messages in a few megabytes: nothing per message stays in memory.
//!
//! Invariants:
//! - every message in the tail is newer, in queue order, than every message in memory, so
//!   while the tail is non-empty new messages join the tail, never the ready list;
//! - `cursor` is at or before the log position of every id in the set, so scanning the log
//!   forward from it meets all of the tail's messages, in id order, and misses none; a
//!   scan takes only ids still in the set, so records it passes again are not duplicated;
//! - `bytes` is the sum of the body sizes of the messages in `ids`;
//! - `maybe_delivered` is a subset of `ids`.

use roaring::RoaringTreemap;
use warren_store::{LogPosition, MessageId, QueueId, RecoveredQueue, ScannedMessage, Store};

/// At most this many messages are read back into memory per refill.
pub const PAGE_IN_BATCH_MESSAGES: usize = 1024;
/// ... or this many body bytes (at least one message is always read).
pub const PAGE_IN_BATCH_BYTES: usize = 2 * 1024 * 1024;

/// A queue's paged messages: absent while there are none. Most queues never page, and an
/// empty tail held inline would cost every queue ~100 bytes (three id sets, a cursor, two
/// counts); boxed on the first paged message and dropped with the last, it costs 8.
#[derive(Debug, Default)]
pub struct PagedTail(Option<Box<Tail>>);

/// The paged messages of a queue that has some (see the module's invariants).
#[derive(Debug, Default)]
struct Tail {
    /// Store ids of the messages on disk only.
    ids: RoaringTreemap,
    /// Sum of their body sizes (what `x-max-length-bytes` counts).
    bytes: u64,
    /// Where the next scan starts: at or before the record of the smallest id in `ids`.
    cursor: LogPosition,
    /// Store ids that came back from a restart and may have been delivered before it (all
    /// of them after a crash; after a clean stop, those not in the store's clean-shutdown
    /// record): they go out marked redelivered. A subset of `ids`.
    maybe_delivered: RoaringTreemap,
    /// The transient messages among `ids` (paged out to save memory, not to keep them) and
    /// their body bytes: the rest are the persistent ones RabbitMQ's `messages_persistent`
    /// counts. A subset of `ids`; after a restart empty (transient messages do not survive).
    transient: RoaringTreemap,
    transient_bytes: u64,
}

/// A message read back from the tail, with what the queue needs to put it in memory.
pub struct PagedIn {
    pub scanned: ScannedMessage,
    pub redelivered: bool,
}

impl PagedTail {
    /// The tail a queue restarts with: every live message the store recovered for it.
    pub fn recovered(recovered: RecoveredQueue) -> PagedTail {
        let mut tail = PagedTail(Some(Box::new(Tail::recovered(recovered))));
        tail.drop_if_empty();
        tail
    }

    /// Persistent messages in the tail, and their body bytes.
    pub fn persistent(&self) -> (u64, u64) {
        self.0.as_ref().map_or((0, 0), |t| t.persistent())
    }

    /// The ids of the tail's messages that were never delivered (for the store's
    /// clean-shutdown record).
    pub fn undelivered(&self) -> RoaringTreemap {
        self.0.as_ref().map(|t| t.undelivered()).unwrap_or_default()
    }

    pub fn len(&self) -> u64 {
        self.0.as_ref().map_or(0, |t| t.ids.len())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |t| t.bytes)
    }

    /// Adds a message the store holds at `position` (see `Tail::push`).
    pub fn push(
        &mut self,
        id: MessageId,
        position: LogPosition,
        body_bytes: usize,
        persistent: bool,
    ) {
        let tail = self.0.get_or_insert_with(Box::default);
        tail.push(id, position, body_bytes, persistent);
    }

    /// Reads the next batch back from the store, oldest first, and removes it from the
    /// tail (see `Tail::page_in`). Blocking I/O.
    pub fn page_in(&mut self, store: &Store, queue: QueueId) -> Vec<PagedIn> {
        let Some(tail) = &mut self.0 else {
            return Vec::new();
        };
        let out = tail.page_in(store, queue);
        self.drop_if_empty();
        out
    }

    /// Drops the messages of `failed` (id, body bytes) that are in the tail: their PUBLISH
    /// records never reached the disk. Returns how many were here.
    pub fn forget(&mut self, failed: &[(MessageId, u32)]) -> u64 {
        let Some(tail) = &mut self.0 else {
            return 0;
        };
        let dropped = tail.forget(failed);
        self.drop_if_empty();
        dropped
    }

    /// Empties the tail, returning the ids it held (a purge acks them in the store).
    pub fn take_ids(&mut self) -> RoaringTreemap {
        self.0.take().map(|t| t.ids).unwrap_or_default()
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Invariant: a tail without messages is absent (what `is_empty` reads).
    fn drop_if_empty(&mut self) {
        if self.0.as_ref().is_some_and(|t| t.ids.is_empty()) {
            self.0 = None;
        }
    }
}

impl Tail {
    fn recovered(recovered: RecoveredQueue) -> Tail {
        Tail {
            maybe_delivered: &recovered.live - &recovered.undelivered,
            ids: recovered.live,
            bytes: recovered.live_body_bytes,
            cursor: recovered.first.unwrap_or_default(),
            transient: RoaringTreemap::new(),
            transient_bytes: 0,
        }
    }

    fn persistent(&self) -> (u64, u64) {
        (
            self.ids.len() - self.transient.len(),
            self.bytes.saturating_sub(self.transient_bytes),
        )
    }

    /// Takes message `id` (of `body_bytes`) out of the transient count if it is there.
    fn forget_transient(&mut self, id: u64, body_bytes: u64) {
        if self.transient.remove(id) {
            self.transient_bytes = self.transient_bytes.saturating_sub(body_bytes);
        }
    }

    fn undelivered(&self) -> RoaringTreemap {
        &self.ids - &self.maybe_delivered
    }

    /// Adds a message the store holds at `position`.
    ///
    /// Two publishers can append to the store in one order and reach the queue in the
    /// other, so an id may arrive below ids already here: the cursor then moves back to
    /// it. Rescanning records again is harmless — only ids still in the set are taken.
    fn push(&mut self, id: MessageId, position: LogPosition, body_bytes: usize, persistent: bool) {
        if self.ids.is_empty() || position < self.cursor {
            self.cursor = position;
        }
        if !self.ids.push(id.0) {
            self.ids.insert(id.0);
        }
        self.bytes += body_bytes as u64;
        if !persistent && self.transient.insert(id.0) {
            self.transient_bytes += body_bytes as u64;
        }
    }

    /// Reads the next batch back from the store, oldest first, and removes it from the
    /// tail. Blocking I/O. If the store's log ends before the tail does (which would be a
    /// bug, or records lost to corruption), the rest of the tail is dropped with an error
    /// logged rather than waited for forever.
    fn page_in(&mut self, store: &Store, queue: QueueId) -> Vec<PagedIn> {
        let mut out = Vec::new();
        while out.is_empty() && !self.ids.is_empty() {
            let ids = &self.ids;
            let scan = match store.scan_queue(
                queue,
                self.cursor,
                &mut |id| ids.contains(id.0),
                PAGE_IN_BATCH_MESSAGES,
                PAGE_IN_BATCH_BYTES,
            ) {
                Ok(scan) => scan,
                Err(e) => {
                    tracing::error!(?queue, error = %e, lost = self.ids.len(), "reading a queue's messages back from the store failed; dropping them");
                    self.ids.clear();
                    break;
                }
            };
            self.cursor = scan.next;
            for scanned in scan.messages {
                self.ids.remove(scanned.id.0);
                let body_bytes = scanned.message.body.len() as u64;
                self.bytes = self.bytes.saturating_sub(body_bytes);
                self.forget_transient(scanned.id.0, body_bytes);
                out.push(PagedIn {
                    redelivered: self.maybe_delivered.remove(scanned.id.0),
                    scanned,
                });
            }
            if out.is_empty() && scan.end_of_log {
                // Ids whose PUBLISH failed end up here if the store's report of them has not
                // been applied yet (Queue::forget_failed); anything else is a bug or
                // records lost to corruption.
                tracing::warn!(
                    ?queue,
                    lost = self.ids.len(),
                    "the store's log ended before the queue's paged messages did (a failed store write?); dropping them"
                );
                self.ids.clear();
            }
        }
        out
    }

    /// The cursor stays: it is still at or before every id left.
    fn forget(&mut self, failed: &[(MessageId, u32)]) -> u64 {
        let mut dropped = 0;
        for &(id, body_bytes) in failed {
            self.maybe_delivered.remove(id.0);
            if self.ids.remove(id.0) {
                self.bytes = self.bytes.saturating_sub(u64::from(body_bytes));
                self.forget_transient(id.0, u64::from(body_bytes));
                dropped += 1;
            }
        }
        dropped
    }
}
