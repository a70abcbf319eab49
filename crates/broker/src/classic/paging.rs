//! A queue's paging: which messages live on disk only (the paged tail, `tail.rs`), how a
//! new message goes there, how the tail is read back, and where in the store a queue keeps
//! its messages — its durable place, or a spill place registered the first time a queue
//! that is not durable pages out. The rules are in docs/ARCHITECTURE.md (disk-first paging).

use super::queue::{ClassicQueue, ClassicState};
use crate::message::Message;
use crate::queue::{DeadLetters, Queue, QueuedMessage, StoreRef, StoredQueue};
use crate::tail::PagedTail;
use std::sync::{Arc, OnceLock};
use warren_store::{FailedPublishes, MessageId, RecoveredQueue, Store};

/// Where a queue that is not durable pages messages out to: the broker's store, under a
/// queue id registered the first time the queue needs one (most transient queues never do;
/// a restart drops these ids and their records).
#[derive(Debug)]
pub(super) struct SpillPlace {
    pub(super) store: Store,
    pub(super) registered: OnceLock<StoredQueue>,
}

/// Where `page_out` put a new ready message.
pub(super) enum Placed {
    /// Not paged: the caller puts it on the ready list.
    InMemory(QueuedMessage),
    /// In the paged tail; nothing of it stays in memory.
    OnDisk,
    /// It had to join the paged tail (which is not empty) but the store cannot write now:
    /// refused, since putting it in memory ahead of older paged messages would break the
    /// queue's order (a confirming publisher gets a nack).
    Refused,
}

impl ClassicQueue {
    /// Where this queue's messages in the store are, if it has put any there.
    pub(super) fn disk<'a>(&'a self, q: &'a Queue) -> Option<&'a StoredQueue> {
        q.stored
            .as_ref()
            .or_else(|| self.spill.as_ref().and_then(|s| s.registered.get()))
    }

    /// Like `disk`, registering a queue that is not durable in the store on its first
    /// page-out (blocking: one fsync of the store's queue table, once in a queue's life).
    fn disk_for_paging<'a>(&'a self, q: &'a Queue) -> Option<&'a StoredQueue> {
        if let Some(place) = self.disk(q) {
            return Some(place);
        }
        let spill = self.spill.as_ref()?;
        // Padded past 255 bytes, the longest name (a shortstr) a client can declare, so it
        // can never be a durable queue's name in the store's table (see names.rs).
        let home = q.home()?;
        let spill_name = crate::names::spill_queue_name(home.vhost_name(), &q.name);
        match spill.store.register_queue(&spill_name) {
            Ok(id) => {
                let _ = spill.registered.set(StoredQueue {
                    store: spill.store.clone(),
                    id,
                });
                spill.registered.get()
            }
            Err(e) => {
                tracing::warn!(queue = %q.name, error = %e, "store: cannot page this queue out; keeping it in memory");
                None
            }
        }
    }

    /// The record a message is paged out as. Only a durable queue's persistent messages
    /// survive a restart; everything else is flagged transient.
    fn paged_record(q: &Queue, message: &Message) -> warren_store::StoredMessage {
        let mut record = message.to_stored();
        record.transient |= q.stored.is_none();
        record
    }

    /// Sends a new ready message to the paged tail when it must go there: the tail is
    /// non-empty (order) or memory is over the queue's budget. A message not yet in the
    /// store is written to it for that (flagged transient unless it is a durable queue's
    /// persistent message). Gives the message back when it stays in memory: over budget
    /// with an empty tail and a store that cannot write it, it stays there (order holds);
    /// behind a non-empty tail it is refused.
    ///
    /// `append_seq` is the sequence number of the record the publisher appended (0: none).
    /// Its write may have failed already, and the store's report of it (`forget_failed`)
    /// been applied before this id reached the tail: then it is dropped here, or it would
    /// stay counted as a phantom. The store marks a record failed before it reports it,
    /// and the report is applied under this queue's lock, so one of the two sees it.
    pub(super) fn page_out(
        &self,
        q: &Queue,
        st: &mut ClassicState,
        mut m: QueuedMessage,
        append_seq: u64,
    ) -> Placed {
        let Some(budget) = self.memory_budget_bytes(st) else {
            return Placed::InMemory(m);
        };
        if st.tail.is_empty() && st.ready.memory_bytes() + m.message.memory_bytes() <= budget {
            return Placed::InMemory(m);
        }
        let Some(stored) = self.disk_for_paging(q) else {
            return Placed::InMemory(m);
        };
        let store_ref = match m.store_ref {
            Some(r) => r,
            None => match stored
                .store
                .append(&[stored.id], &Self::paged_record(q, &m.message))
            {
                Ok(a) => {
                    let r = StoreRef {
                        id: a.id,
                        location: a.location,
                    };
                    m.store_ref = Some(r);
                    r
                }
                Err(e) if st.tail.is_empty() => {
                    tracing::debug!(queue = %q.name, error = %e, "store: paging a message out failed; keeping it in memory");
                    return Placed::InMemory(m);
                }
                Err(e) => {
                    tracing::debug!(queue = %q.name, error = %e, "store: paging a message out failed; refusing it");
                    return Placed::Refused;
                }
            },
        };
        if append_seq != 0 && stored.store.failed(append_seq) {
            // Not on disk and never will be; its publisher gets a nack.
            return Placed::Refused;
        }
        st.tail.push(
            store_ref.id,
            store_ref.location.position(),
            m.message.size_bytes(),
            m.message.persistent,
        );
        Placed::OnDisk
    }

    /// Reads the paged tail into memory until the ready list holds a message (a batch read
    /// back may have expired whole). False when both are empty.
    pub(super) fn ensure_ready(
        &self,
        q: &Queue,
        st: &mut ClassicState,
        dead: &mut DeadLetters,
    ) -> bool {
        while st.ready.is_empty() {
            if !self.refill(q, st, dead) {
                return false;
            }
        }
        true
    }

    /// Reads the next batch of the paged tail into memory (expiring what has expired
    /// meanwhile). Returns false when there was nothing to read.
    pub(super) fn refill(&self, q: &Queue, st: &mut ClassicState, dead: &mut DeadLetters) -> bool {
        let Some(stored) = self.disk(q) else {
            return false;
        };
        if st.tail.is_empty() {
            return false;
        }
        let queue_ttl_ms = st.limits.message_ttl_ms;
        for paged in st.tail.page_in(&stored.store, stored.id) {
            let scanned = paged.scanned;
            let store_ref = StoreRef {
                id: scanned.id,
                location: scanned.location,
            };
            let published_at_ms = scanned.message.published_at_ms;
            let Some(message) = Message::from_stored(scanned.message) else {
                tracing::error!(queue = %q.name, "a stored message no longer parses; dropping it");
                self.forget_id(q, store_ref.id);
                continue;
            };
            let id = st.next_message_id;
            st.next_message_id += 1;
            let queued = QueuedMessage {
                id,
                expires_at: Self::expiry_since(queue_ttl_ms, &message, published_at_ms),
                // A recovered message's count is the store's (docs/STORAGE.md §3.5).
                delivery_count: if paged.redelivered {
                    stored
                        .store
                        .delivery_count(stored.id, store_ref.id)
                        .unwrap_or(message.inherited_delivery_count)
                } else {
                    message.inherited_delivery_count
                },
                message: Arc::new(message),
                redelivered: paged.redelivered,
                via: 0,
                store_ref: Some(store_ref),
            };
            self.memory.add(queued.message.memory_bytes());
            st.ready.push_back(queued);
        }
        self.expire(st, dead);
        true
    }

    /// Drops from the paged tail the messages whose PUBLISH records failed (docs/STORAGE.md
    /// §11): they are not on disk and never will be, so reading them back would only find
    /// nothing. Messages of the report held in memory (ready or delivered) go on as they
    /// are: deliverable, just not durable (acking them leaves the store alone, which no
    /// longer knows them).
    pub(super) fn forget_failed_publishes(&self, q: &Queue, failed: &FailedPublishes) {
        let Some(stored) = self.disk(q) else {
            return;
        };
        let Some(messages) = failed.queues.get(&stored.id) else {
            return;
        };
        let dropped = self.state.lock().tail.forget(messages);
        if dropped > 0 {
            tracing::warn!(queue = %q.name, dropped, "paged-out messages whose store write failed are gone (their publishers were nacked)");
        }
    }

    /// Removes a message that leaves the queue for good from the store.
    pub(super) fn forget(&self, q: &Queue, m: &QueuedMessage) {
        if let Some(r) = m.store_ref {
            self.forget_id(q, r.id);
        }
    }

    pub(super) fn forget_id(&self, q: &Queue, id: MessageId) {
        if let Some(stored) = self.disk(q) {
            if let Err(e) = stored.store.ack(stored.id, id) {
                tracing::debug!(queue = %q.name, error = %e, "store ack failed");
            }
        }
    }

    /// Gives the queue the messages the store recovered for it: they become its paged
    /// tail (nothing is read now); those that may have reached a consumer before the
    /// restart (all but the store's clean-shutdown record's) go out marked redelivered. A queue that does not page (a priority queue)
    /// reads them all into memory now.
    pub(super) fn restore_tail(&self, q: &Queue, recovered: RecoveredQueue) {
        let mut dead = DeadLetters::new();
        {
            let mut st = self.state.lock();
            st.tail = PagedTail::recovered(recovered);
            if !self.pageable {
                while self.refill(q, &mut st, &mut dead) {}
            }
        }
        self.dead_letter(q, dead);
    }
}
