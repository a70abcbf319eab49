//! The classic queue type: ordered ready messages in this process, the consumers that take
//! them, and the limits RabbitMQ users set with `x-` arguments (length limits and overflow,
//! TTLs, expiry, priorities, dead-lettering).
//!
//! All state sits behind one short-held `parking_lot::Mutex` (never held across an await).
//! Publishing delivers straight to a consumer with credit when nothing is waiting ahead of
//! it, so the common case never stores the message at all. Messages carry a per-queue id
//! that only grows; the ready list is ordered by it, which is how a requeued message gets
//! its old place back. Messages leaving by dead-lettering are collected under the lock and
//! handed to the record (`Queue::dead_letter`) after it is released, so a dead-letter route
//! back into this queue cannot deadlock.
//!
//! The ready messages are the oldest in memory (`ReadyList`) and, past a memory budget, the
//! rest on disk only (the paged tail, `paging.rs` and `tail.rs`); the store is where a
//! durable queue's persistent messages live.

use super::paging::{Placed, SpillPlace};
use crate::confirm::RoutedConfirm;
use crate::consumer::{ConnectionEvent, ConnectionId, Consumer, Delivery};
use crate::consumer_set::ConsumerSet;
use crate::consumer_use::ConsumerUse;
use crate::dead_letter::DeathReason;
use crate::error::{AmqpError, AmqpResult};
use crate::memory::MemoryMonitor;
use crate::message::Message;
use crate::policy::AppliedPolicies;
use crate::queue::QueueHandle;
use crate::queue::{DeadLetters, Overflow, Queue, QueueLimits, QueuedMessage, StoreRef};
use crate::queue_type::{Enqueued, Got, QueueDepth, QueueType};
use crate::ready::ReadyList;
use crate::stats::MessageStats;
use crate::tail::PagedTail;
use parking_lot::Mutex;
use std::any::Any;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use warren_store::{
    Appended, FailedPublishes, MessageId, QueueId, RecoveredQueue, RoaringTreemap, Store,
};

/// Ready bytes a durable queue keeps in memory; messages behind them live on disk only
/// (the paged tail). `x-queue-mode=lazy` makes it 0.
pub const DEFAULT_MEMORY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// A message's `timestamp` property (seconds), read from its encoded properties.
fn timestamp_s(m: &Message) -> Option<u64> {
    warren_codec::BasicProperties::decode(&mut warren_codec::Reader::new(m.properties_bytes()))
        .ok()
        .and_then(|p| p.timestamp)
}

/// The messages handed to consumers and not yet settled (they are held by the consumers'
/// channels, not here): how many, their bytes, and the persistent ones among them.
#[derive(Debug, Default)]
struct UnackedTally {
    count: usize,
    bytes: usize,
    persistent: usize,
    persistent_bytes: usize,
}

impl UnackedTally {
    fn add(&mut self, m: &Message) {
        self.count += 1;
        self.bytes += m.size_bytes();
        if m.persistent {
            self.persistent += 1;
            self.persistent_bytes += m.size_bytes();
        }
    }

    /// Saturating: a settle may name a message handed out before a purge or restart reset
    /// the tally.
    fn sub(&mut self, m: &Message) {
        self.count = self.count.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(m.size_bytes());
        if m.persistent {
            self.persistent = self.persistent.saturating_sub(1);
            self.persistent_bytes = self.persistent_bytes.saturating_sub(m.size_bytes());
        }
    }
}

#[derive(Debug)]
pub(super) struct ClassicState {
    /// The oldest ready messages, in memory.
    pub(super) ready: ReadyList,
    /// The ready messages behind them, on disk only (always empty without a store).
    pub(super) tail: PagedTail,
    unacked: UnackedTally,
    consumers: ConsumerSet,
    /// How much of the time the consumers had room (`consumer_capacity`).
    consumer_use: ConsumerUse,
    pub(super) next_message_id: u64,
    had_consumer: bool,
    /// A task is watching this queue's message expiry.
    expiry_timer: bool,
    /// When that task wakes next (None while it runs or there is none): a message that
    /// comes back or arrives expiring before then wakes it (`expiry_wake`).
    expiry_wake_at: Option<Instant>,
    /// A task will give back the ready list's buffer if it is still empty (`shrink.rs`).
    pub(super) shrink_timer: bool,
    /// What the queue acts on: the record's limits (arguments combined with policies),
    /// copied here under the lock publish takes anyway, so a policy change needs nothing
    /// on the hot path.
    pub(super) limits: Arc<QueueLimits>,
}

/// A classic queue's messages and consumers (see the module comment).
#[derive(Debug)]
pub struct ClassicQueue {
    pub(super) memory: Arc<MemoryMonitor>,
    /// For queues that are not durable, when the broker has a store: where they page out to.
    /// Boxed: a durable queue never has one, and inline it took 32 bytes in every queue.
    pub(super) spill: Option<Box<SpillPlace>>,
    /// Whether ready messages may go to the paged tail: not without a store, and not for
    /// priority queues (their order is not one log's). See `memory_budget_bytes`.
    pub(super) pageable: bool,
    /// Its record has a place in the store: persistent messages are kept there (what
    /// `messages_persistent` counts).
    durable_in_store: bool,
    /// Wakes the expiry task before its time (see `ClassicState::expiry_wake_at`).
    /// Made with the expiry task: most queues never have one (48 bytes each otherwise).
    expiry_wake: OnceLock<Arc<tokio::sync::Notify>>,
    pub(super) state: Mutex<ClassicState>,
}

impl ClassicQueue {
    /// A classic queue acting on `limits`; `durable_in_store` when its record has a place
    /// in the store (`Queue::stored`), else `spill`, the store it may page out to.
    pub fn new(
        limits: Arc<QueueLimits>,
        memory: Arc<MemoryMonitor>,
        durable_in_store: bool,
        spill: Option<Store>,
    ) -> ClassicQueue {
        let spill = spill.filter(|_| !durable_in_store).map(|store| {
            Box::new(SpillPlace {
                store,
                registered: OnceLock::new(),
            })
        });
        let pageable = (durable_in_store || spill.is_some()) && limits.max_priority.is_none();
        ClassicQueue {
            memory,
            spill,
            pageable,
            durable_in_store,
            expiry_wake: OnceLock::new(),
            state: Mutex::new(ClassicState {
                ready: ReadyList::new(limits.max_priority.unwrap_or(0)),
                tail: PagedTail::default(),
                unacked: UnackedTally::default(),
                consumers: ConsumerSet::new(limits.single_active_consumer),
                consumer_use: ConsumerUse::default(),
                next_message_id: 0,
                had_consumer: false,
                expiry_timer: false,
                expiry_wake_at: None,
                shrink_timer: false,
                limits,
            }),
        }
    }

    /// The classic side of a queue record; None for another type.
    pub(super) fn of(queue: &Queue) -> Option<&ClassicQueue> {
        queue.type_state::<ClassicQueue>()
    }

    /// The clock is read only for messages that can expire: most never do, and publish is
    /// the hot path.
    fn expiry_for(st: &ClassicState, message: &Message) -> Option<Instant> {
        let ttl_ms = match (st.limits.message_ttl_ms, message.expiration_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ttl_ms.map(|ms| Instant::now() + Duration::from_millis(ms))
    }

    /// Expiry of a message read back from disk: TTLs count from when it was published.
    /// (A paged message gets the queue's TTL of now: the store keeps no per-queue expiry.)
    pub(super) fn expiry_since(
        queue_ttl_ms: Option<u64>,
        message: &Message,
        published_at_ms: u64,
    ) -> Option<Instant> {
        let ttl_ms = match (queue_ttl_ms, message.expiration_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }?;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let left_ms = published_at_ms
            .saturating_add(ttl_ms)
            .saturating_sub(now_ms);
        Some(Instant::now() + Duration::from_millis(left_ms))
    }

    /// Routes one message into the queue: straight to a consumer with credit if none are
    /// waiting ahead of it, otherwise onto the ready list (applying `x-max-length`).
    /// `stored` is set when the caller appended the message to the store for this queue.
    fn publish(&self, q: &Arc<Queue>, message: Arc<Message>, stored: Option<Appended>) -> Enqueued {
        let store_ref = stored.map(|a| StoreRef {
            id: a.id,
            location: a.location,
        });
        let append_seq = stored.map_or(0, |a| a.seq);
        let mut dead = DeadLetters::new();
        let outcome = {
            let mut st = self.state.lock();
            if q.is_deleted() {
                return Enqueued::Accepted;
            }
            MessageStats::add(&q.stats.publish, 1);
            let id = st.next_message_id;
            st.next_message_id += 1;
            let queued = QueuedMessage {
                id,
                expires_at: Self::expiry_for(&st, &message),
                delivery_count: message.inherited_delivery_count,
                message,
                redelivered: false,
                via: 0,
                store_ref,
            };
            self.expire(&mut st, &mut dead);
            if st.ready.is_empty() && st.tail.is_empty() {
                match self.hand_to_consumer(q, &mut st, Some(queued)) {
                    Ok(()) => Enqueued::Accepted,
                    Err(Some(back)) => self.push_ready(q, &mut st, back, append_seq, &mut dead),
                    Err(None) => unreachable!("an offered message comes back when not taken"),
                }
            } else {
                let outcome = self.push_ready(q, &mut st, queued, append_seq, &mut dead);
                self.dispatch(q, &mut st, &mut dead);
                outcome
            }
        };
        self.dead_letter(q, dead);
        outcome
    }

    fn over_limit(st: &ClassicState, extra_messages: usize, extra_bytes: usize) -> bool {
        let len = st.ready.len() as u64 + st.tail.len() + extra_messages as u64;
        let bytes = st.ready.bytes() as u64 + st.tail.bytes() + extra_bytes as u64;
        st.limits.max_length.is_some_and(|m| len > m)
            || st.limits.max_length_bytes.is_some_and(|m| bytes > m)
    }

    /// `append_seq`: the sequence number of the store record the publisher appended for
    /// this message (0 when none).
    fn push_ready(
        &self,
        q: &Arc<Queue>,
        st: &mut ClassicState,
        queued: QueuedMessage,
        append_seq: u64,
        dead: &mut DeadLetters,
    ) -> Enqueued {
        let size = queued.message.size_bytes();
        let overflow = st.limits.overflow.unwrap_or(Overflow::DropHead);
        if overflow != Overflow::DropHead && Self::over_limit(st, 1, size) {
            if overflow == Overflow::RejectPublishDlx {
                dead.push((queued, DeathReason::MaxLen));
            } else {
                self.forget(q, &queued);
            }
            return Enqueued::Rejected;
        }
        if queued.expires_at.is_some_and(|t| t <= Instant::now()) {
            // TTL 0: only a consumer waiting right now could have taken it.
            dead.push((queued, DeathReason::Expired));
            return Enqueued::Accepted;
        }
        let expires_at = queued.expires_at;
        match self.page_out(q, st, queued, append_seq) {
            Placed::InMemory(mut queued) => {
                // Kept, maybe for long: a small message no longer pins its read buffer.
                if let Some(compact) = queued.message.compacted() {
                    queued.message = crate::message_pool::shared(compact);
                }
                self.memory.add(queued.message.memory_bytes());
                st.ready.push_back(queued);
            }
            Placed::OnDisk => {}
            Placed::Refused => return Enqueued::Rejected,
        }
        self.drop_head_over_limit(q, st, dead);
        if let Some(at) = expires_at {
            self.watch_expiry_by(q, st, at);
        }
        Enqueued::Accepted
    }

    /// A ready message expires at `at`: starts the expiry task, or wakes it when it sleeps
    /// past `at` (a requeued message, or a shorter per-message TTL, can expire before the
    /// message the task waits for). A queue-wide TTL never wakes it on publish.
    fn watch_expiry_by(&self, q: &Arc<Queue>, st: &mut ClassicState, at: Instant) {
        if !st.expiry_timer {
            st.expiry_timer = true;
            watch_message_expiry(q, self.expiry_wake.get_or_init(Arc::default).clone());
        } else if st.expiry_wake_at.is_some_and(|wake| at < wake) {
            st.expiry_wake_at = None;
            if let Some(wake) = self.expiry_wake.get() {
                wake.notify_one();
            }
        }
    }

    /// `x-overflow=drop-head` (the default): while the queue is over `x-max-length(-bytes)`,
    /// drops (to be dead-lettered, reason maxlen) from the head. RabbitMQ does this after a
    /// publish and after messages come back (requeue, recover, channel close); the
    /// reject-publish modes only refuse publishes and keep requeued messages past the limit.
    fn drop_head_over_limit(&self, q: &Queue, st: &mut ClassicState, dead: &mut DeadLetters) {
        if st.limits.overflow.unwrap_or(Overflow::DropHead) != Overflow::DropHead {
            return;
        }
        while Self::over_limit(st, 0, 0) {
            self.ensure_ready(q, st, dead);
            match st.ready.pop_oldest_lowest() {
                Some(dropped) => {
                    self.memory.sub(dropped.message.memory_bytes());
                    dead.push((dropped, DeathReason::MaxLen));
                }
                None => break,
            }
        }
    }

    /// Drops expired messages from the head, to be dead-lettered.
    #[inline]
    pub(super) fn expire(&self, st: &mut ClassicState, dead: &mut DeadLetters) {
        let Some(next) = st.ready.next_expiry() else {
            return;
        };
        self.expire_due(st, next, dead);
    }

    /// `expire` once some message has an expiry (`next`, the earliest).
    #[inline(never)]
    fn expire_due(&self, st: &mut ClassicState, next: Instant, dead: &mut DeadLetters) {
        let now = Instant::now();
        if next <= now {
            let mut expired = Vec::new();
            st.ready.take_expired(now, &mut expired);
            for m in expired {
                self.memory.sub(m.message.memory_bytes());
                dead.push((m, DeathReason::Expired));
            }
        }
    }

    /// Hands dead messages to the record, which routes them to the dead-letter exchange
    /// (dropped if there is none); their store records go first.
    #[inline]
    pub(super) fn dead_letter(&self, q: &Queue, dead: DeadLetters) {
        if dead.is_empty() {
            return;
        }
        self.dead_letter_some(q, dead);
    }

    #[inline(never)]
    fn dead_letter_some(&self, q: &Queue, dead: DeadLetters) {
        for (m, _) in &dead {
            self.forget(q, m);
        }
        q.dead_letter(dead);
    }

    /// Offers a message to the consumers (by priority, then round-robin: `ConsumerSet`):
    /// `offered`, or with `None` the head of the ready list, which is only taken once a
    /// consumer with credit is found, so a queue whose consumers are all blocked leaves its
    /// head in place (taking it and putting it back cost more than the rest of a publish to
    /// a deep queue). `Err` when no consumer took it, with the message if it is not in the
    /// ready list.
    fn hand_to_consumer(
        &self,
        q: &Arc<Queue>,
        st: &mut ClassicState,
        mut offered: Option<QueuedMessage>,
    ) -> Result<(), Option<QueuedMessage>> {
        loop {
            // Borrowed from the set, which keeps it alive while the lock is held: the one
            // reference taken is the delivery's own.
            let Some(consumer) = st.consumers.pick() else {
                return Err(offered);
            };
            let mut queued = match offered.take() {
                Some(m) => m,
                None => {
                    let head = st.ready.pop_front().ok_or(None)?;
                    self.memory.sub(head.message.memory_bytes());
                    head
                }
            };
            let cost = crate::consumer::pipeline_cost(&queued.message);
            consumer.take_credit(cost);
            let no_ack = consumer.no_ack;
            if !no_ack {
                st.unacked.add(&queued.message);
            } else {
                // Delivered without ack: gone for the queue. (Should the connection turn out
                // dead, the message comes back without its store id.)
                self.forget(q, &queued);
                queued.store_ref = None;
            }
            let event = ConnectionEvent::Deliver(Delivery {
                consumer: consumer.clone(),
                queue: Some(QueueHandle::new(q.clone())),
                message: queued,
            });
            match consumer.send(event) {
                Ok(()) => return Ok(()),
                Err(ConnectionEvent::Deliver(d)) => {
                    // The connection is gone: drop its consumer, try the next one.
                    d.consumer.return_credit(cost);
                    if !no_ack {
                        st.unacked.sub(&d.message.message);
                    }
                    st.consumers.remove_consumer(&d.consumer);
                    offered = Some(d.message);
                }
                Err(_) => unreachable!("send returns the event it was given"),
            }
        }
    }

    /// Moves ready messages to consumers while any has credit; a ready list this emptied
    /// gives its buffer back a while later.
    fn dispatch(&self, q: &Arc<Queue>, st: &mut ClassicState, dead: &mut DeadLetters) {
        self.dispatch_ready(q, st, dead);
        super::shrink::shrink_later(q, st);
    }

    fn dispatch_ready(&self, q: &Arc<Queue>, st: &mut ClassicState, dead: &mut DeadLetters) {
        if st.consumers.is_empty() {
            return;
        }
        if st.ready.is_empty() && st.tail.is_empty() {
            st.consumer_use.active();
            return;
        }
        loop {
            // Before each hand-off, not once per dispatch: the message behind the one just
            // delivered may have expired while the one in front was alive (RabbitMQ never
            // hands out an expired message; a look at the head's expiry is all it costs).
            self.expire(st, dead);
            if !self.ensure_ready(q, st, dead) {
                st.consumer_use.active();
                return;
            }
            match self.hand_to_consumer(q, st, None) {
                Ok(()) => {}
                Err(None) => {
                    st.consumer_use.inactive();
                    return;
                }
                Err(Some(taken)) => {
                    // Taken from the head, then its consumer's connection was found gone
                    // and no other could take it.
                    self.insert_ready(st, taken);
                    st.consumer_use.inactive();
                    return;
                }
            }
        }
    }

    /// Runs `f` on the locked state and then dead-letters what it collected.
    fn with_state<R>(
        &self,
        q: &Queue,
        f: impl FnOnce(&mut ClassicState, &mut DeadLetters) -> R,
    ) -> R {
        let mut dead = DeadLetters::new();
        let (r, moved) = {
            let mut st = self.state.lock();
            let before = (Self::ready_count(&st), st.unacked.count);
            let r = f(&mut st, &mut dead);
            (r, before != (Self::ready_count(&st), st.unacked.count))
        };
        // Whatever moved the counts (an expiry a count found, a dispatch), the monitoring
        // readers see it (`queue_activity.rs`); a read that moved nothing marks nothing.
        if moved {
            q.note_change();
        }
        self.dead_letter(q, dead);
        r
    }

    /// Puts a message back where its id says it belongs (usually the head). It stays in
    /// memory: it is older than anything in the paged tail.
    fn insert_ready(&self, st: &mut ClassicState, m: QueuedMessage) {
        self.memory.add(m.message.memory_bytes());
        st.ready.insert_by_id(m);
    }

    /// Writes the delivery-count of a persistent message of a durable queue to the store
    /// when it goes back to the queue after a failed delivery, so a restart keeps it.
    /// RabbitMQ 4 keeps it in the quorum queue's log (every change) and, for a classic
    /// queue, in the recovery terms written at a clean shutdown (lost after a crash); one
    /// small record on this slow path (a failed delivery, never a plain ack, publish or
    /// 0-9-1 requeue of a message that never failed) keeps it across crashes too. A
    /// message released again after a failed delivery writes its unchanged count once more.
    fn persist_delivery_count(q: &Queue, m: &QueuedMessage) {
        if m.delivery_count == 0 || !m.message.persistent {
            return;
        }
        if let (Some(stored), Some(r)) = (&q.stored, m.store_ref) {
            if let Err(e) = stored
                .store
                .set_delivery_count(stored.id, r.id, m.delivery_count)
            {
                tracing::debug!(queue = %q.name, error = %e, "storing a delivery count failed");
            }
        }
    }

    fn ready_count(st: &ClassicState) -> u32 {
        (st.ready.len() as u64 + st.tail.len()).min(u64::from(u32::MAX)) as u32
    }

    /// In-memory bytes of ready messages beyond which messages go to the paged tail; None
    /// when the queue does not page.
    pub(super) fn memory_budget_bytes(&self, st: &ClassicState) -> Option<usize> {
        self.pageable.then_some(if st.limits.lazy {
            0
        } else {
            DEFAULT_MEMORY_BUDGET_BYTES
        })
    }
}

/// A task that expires messages at the head when their time comes, so TTL'd messages leave
/// (and dead-letter) without waiting for a consumer or a publish to notice.
fn watch_message_expiry(q: &Arc<Queue>, wake: Arc<tokio::sync::Notify>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let queue = Arc::downgrade(q);
    runtime.spawn(async move {
        loop {
            let wait = {
                let Some(queue) = queue.upgrade() else { return };
                let Some(classic) = ClassicQueue::of(&queue) else {
                    return;
                };
                let mut dead = DeadLetters::new();
                let wait = {
                    let mut st = classic.state.lock();
                    classic.expire(&mut st, &mut dead);
                    // Paged messages expire too, once read back to the head.
                    classic.ensure_ready(&queue, &mut st, &mut dead);
                    let now = Instant::now();
                    if queue.is_deleted() || st.ready.is_empty() {
                        st.expiry_timer = false;
                        st.expiry_wake_at = None;
                        None
                    } else {
                        // Heads without expiry may still have expiring messages behind
                        // them: look again in a second.
                        let wait = st.ready.next_expiry().map_or(Duration::from_secs(1), |t| {
                            t.saturating_duration_since(now).min(Duration::from_secs(1))
                        });
                        let wait = wait.max(Duration::from_millis(1));
                        st.expiry_wake_at = Some(now + wait);
                        Some(wait)
                    }
                };
                if !dead.is_empty() {
                    queue.note_change();
                }
                classic.dead_letter(&queue, dead);
                wait
            };
            match wait {
                None => return,
                // A wake-up given while the task was busy is kept by the Notify and ends
                // this sleep at once: the task looks again, nothing is missed.
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = wake.notified() => {}
                    }
                }
            }
        }
    });
}

impl QueueType for ClassicQueue {
    fn type_name(&self) -> &'static str {
        "classic"
    }

    fn served_here(&self) -> bool {
        true
    }

    fn confirms_later(&self) -> bool {
        false
    }

    fn answers_get_later(&self) -> bool {
        false
    }

    #[inline]
    fn enqueue(
        &self,
        queue: &Arc<Queue>,
        message: &Arc<Message>,
        stored: Option<Appended>,
        _confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued {
        // Confirmed through the store (the publish's append), not by the queue.
        let stored = stored.filter(|_| queue.stored.is_some());
        self.publish(queue, message.clone(), stored)
    }

    /// `requeued` go back to their old places (marked redelivered; then `x-max-length`
    /// applies, as after a publish). Then dispatches.
    fn settle(
        &self,
        queue: &Arc<Queue>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        for m in &acked {
            self.forget(queue, m);
        }
        self.with_state(queue, |st, dead| {
            for m in acked.iter().chain(&requeued).chain(&rejected) {
                st.unacked.sub(&m.message);
            }
            if queue.is_deleted() {
                return;
            }
            let any_requeued = !requeued.is_empty();
            let soonest = requeued.iter().filter_map(|m| m.expires_at).min();
            for mut m in requeued {
                m.redelivered = true;
                Self::persist_delivery_count(queue, &m);
                self.insert_ready(st, m);
            }
            if let Some(at) = soonest {
                self.watch_expiry_by(queue, st, at);
            }
            if any_requeued {
                self.drop_head_over_limit(queue, st, dead);
            }
            dead.extend(rejected.into_iter().map(|m| (m, DeathReason::Rejected)));
            self.dispatch(queue, st, dead);
        });
        // Done with: the allocations of messages no other queue holds are reused.
        for m in acked {
            crate::message_pool::recycle(m.message);
        }
    }

    fn return_undelivered(
        &self,
        queue: &Arc<Queue>,
        messages: Vec<QueuedMessage>,
        were_unacked: bool,
    ) {
        if were_unacked {
            self.release(queue, messages);
            return;
        }
        self.with_state(queue, |st, dead| {
            if queue.is_deleted() {
                return;
            }
            let soonest = messages.iter().filter_map(|m| m.expires_at).min();
            for m in messages {
                self.insert_ready(st, m);
            }
            if let Some(at) = soonest {
                self.watch_expiry_by(queue, st, at);
            }
            self.drop_head_over_limit(queue, st, dead);
            self.dispatch(queue, st, dead);
        })
    }

    fn kick(&self, queue: &Arc<Queue>) {
        self.with_state(queue, |st, dead| self.dispatch(queue, st, dead));
    }

    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        self.with_state(queue, |st, dead| {
            if queue.is_deleted() {
                return Err(AmqpError::not_found(format!(
                    "no queue '{}' in vhost '{}'",
                    queue.name,
                    queue.vhost_name()
                )));
            }
            if st.consumers.has_exclusive() || (consumer.exclusive && !st.consumers.is_empty()) {
                return Err(AmqpError::access_refused(format!(
                    "queue '{}' in vhost '{}' in exclusive use",
                    queue.name,
                    queue.vhost_name()
                )));
            }
            st.consumers.push(consumer);
            st.had_consumer = true;
            self.dispatch(queue, st, dead);
            Ok(())
        })
    }

    fn remove_consumer(
        &self,
        queue: &Queue,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        let mut st = self.state.lock();
        let consumer =
            st.consumers
                .remove(connection, channel, &warren_codec::ShortStr::from(tag))?;
        let now_unused = queue.auto_delete && st.had_consumer && st.consumers.is_empty();
        drop(st);
        queue.touch();
        Some((consumer, now_unused))
    }

    fn get(&self, queue: &Arc<Queue>, no_ack: bool) -> Got {
        self.with_state(queue, |st, dead| {
            self.expire(st, dead);
            self.ensure_ready(queue, st, dead);
            let m = st.ready.pop_front()?;
            super::shrink::shrink_later(queue, st);
            self.memory.sub(m.message.memory_bytes());
            if !no_ack {
                st.unacked.add(&m.message);
            } else {
                self.forget(queue, &m);
            }
            Some((m, Self::ready_count(st)))
        })
    }

    /// Drops every ready message (in memory and paged); the store forgets them too.
    fn purge(&self, queue: &Queue) -> u32 {
        let mut st = self.state.lock();
        self.memory.sub(st.ready.memory_bytes());
        let purged = st.ready.drain_all();
        let paged = st.tail.take_ids();
        drop(st);
        for m in &purged {
            self.forget(queue, m);
        }
        for id in &paged {
            self.forget_id(queue, MessageId(id));
        }
        (purged.len() as u64 + paged.len()).min(u64::from(u32::MAX)) as u32
    }

    fn mark_deleted(&self, queue: &Queue) -> (Vec<Arc<Consumer>>, u32) {
        let mut st = self.state.lock();
        self.memory.sub(st.ready.memory_bytes());
        let n = Self::ready_count(&st);
        st.ready.drain_all();
        st.tail.clear();
        if let Some(stored) = self.disk(queue) {
            if let Err(e) = stored.store.delete_queue(stored.id) {
                tracing::warn!(queue = %queue.name, error = %e, "store: deleting queue failed");
            }
        }
        (st.consumers.take_all(), n)
    }

    fn detach(&self, queue: &Queue) -> Vec<Arc<Consumer>> {
        let mut st = self.state.lock();
        queue.set_deleted();
        st.consumers.take_all()
    }

    fn message_count(&self, queue: &Arc<Queue>) -> u32 {
        self.with_state(queue, |st, dead| {
            self.expire(st, dead);
            Self::ready_count(st)
        })
    }

    fn consumer_count(&self) -> u32 {
        self.state.lock().consumers.len() as u32
    }

    fn unacked_count(&self) -> u32 {
        self.state.lock().unacked.count as u32
    }

    fn depth(&self) -> QueueDepth {
        let st = self.state.lock();
        let ready_in_memory = st.ready.len() as u64;
        let ready_in_memory_bytes = st.ready.bytes() as u64;
        let paged_out = st.tail.len();
        let paged_out_bytes = st.tail.bytes();
        let (persistent, persistent_bytes) = match self.durable_in_store {
            true => {
                let (ready, ready_bytes) = st.ready.persistent();
                let (paged, paged_bytes) = st.tail.persistent();
                (
                    (ready + st.unacked.persistent) as u64 + paged,
                    (ready_bytes + st.unacked.persistent_bytes) as u64 + paged_bytes,
                )
            }
            false => (0, 0),
        };
        QueueDepth {
            ready: ready_in_memory + paged_out,
            ready_bytes: ready_in_memory_bytes + paged_out_bytes,
            ready_in_memory,
            ready_in_memory_bytes,
            paged_out,
            paged_out_bytes,
            unacked: st.unacked.count as u64,
            unacked_bytes: st.unacked.bytes as u64,
            persistent,
            persistent_bytes,
            head_timestamp_s: st.ready.front().and_then(|m| timestamp_s(&m.message)),
            consumers: st.consumers.len() as u64,
            consumer_capacity: match st.consumers.is_empty() {
                true => Some(0.0),
                false => Some(st.consumer_use.capacity_at(Instant::now())),
            },
        }
    }

    fn unused(&self) -> Option<bool> {
        Some(self.state.lock().consumers.is_empty())
    }

    /// A lower length limit drops (dead-letters) the excess from the head under drop-head.
    fn apply_policies(&self, queue: &Arc<Queue>, limits: &Arc<QueueLimits>, _: &AppliedPolicies) {
        self.with_state(queue, |st, dead| {
            st.limits = limits.clone();
            if !queue.is_deleted() {
                self.drop_head_over_limit(queue, st, dead);
            }
        });
    }

    fn forget_failed(&self, queue: &Queue, failed: &FailedPublishes) {
        self.forget_failed_publishes(queue, failed)
    }

    fn restore(&self, queue: &Queue, recovered: RecoveredQueue) {
        self.restore_tail(queue, recovered)
    }

    fn undelivered_in_store(&self, queue: &Queue) -> Option<(QueueId, RoaringTreemap)> {
        let stored = self.disk(queue)?;
        let st = self.state.lock();
        let mut never = st.tail.undelivered();
        for m in st.ready.iter() {
            if let (false, Some(r)) = (m.redelivered, m.store_ref) {
                never.insert(r.id.0);
            }
        }
        Some((stored.id, never))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
