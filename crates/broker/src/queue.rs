//! Queues: ordered ready messages, the consumers that take them, and the limits RabbitMQ
//! users set with `x-` arguments (length limits and overflow, TTLs, expiry, priorities,
//! dead-lettering).
//!
//! All state sits behind one short-held `parking_lot::Mutex` (never held across an await).
//! Publishing delivers straight to a consumer with credit when nothing is waiting ahead of
//! it, so the common case never stores the message at all. Messages carry a per-queue id
//! that only grows; the ready list is ordered by it, which is how a requeued message gets
//! its old place back. Messages leaving by dead-lettering are collected under the lock and
//! republished after it is released, so a dead-letter route back into this queue cannot
//! deadlock.
//!
//! The ready messages are the oldest in memory (`ReadyList`) and, past a memory budget, the
//! rest on disk only (the paged tail, `queue/paging.rs` and `tail.rs`); the store is where a
//! durable queue's persistent messages live.
//!
//! `Queue` is also the queue-type interface (RabbitMQ's `rabbit_queue_type`): vhosts,
//! exchange routing and channels hold `Arc<Queue>` and call the same methods whatever the
//! type; the fields every type shares (name, flags, arguments, statistics, policies) are
//! here, and [`QueueKind`] says where the messages live. A classic queue's are in `state`
//! below; a quorum queue's in its Raft group (`crate::quorum`); a remote queue's on the
//! node that serves it, reached over a forwarding link (`crate::remote`). Each public method
//! branches once on the kind — a field read, no allocation, lock or task hop — so the
//! classic path is the same as before.

use crate::churn::{DeadLetterSource, DeadLetterStrategy, DeadLettered};
use crate::confirm::{QueueAnswers, RoutedConfirm};
use crate::consumer::{ConnectionEvent, ConnectionId, Consumer, Delivery};
use crate::consumer_set::ConsumerSet;
use crate::dead_letter::DeathReason;
use crate::error::{AmqpError, AmqpResult};
use crate::memory::MemoryMonitor;
use crate::message::Message;
use crate::policy::{effective_queue_limits, AppliedPolicies, Definition};
use crate::quorum::QuorumQueue;
use crate::ready::ReadyList;
use crate::remote::RemoteQueue;
use crate::stats::MessageStats;
use crate::tail::PagedTail;
use parking_lot::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use warren_codec::{FieldTable, ShortStr};
use warren_store::{Appended, MessageId, QueueId, Store};

mod depth;
mod paging;
mod shrink;
pub use crate::queue_args::{Overflow, QueueLimits};
pub use crate::queued_message::{QueuedMessage, StoreRef};
pub use depth::QueueDepth;
use paging::{Placed, SpillPlace};

/// Ready bytes a durable queue keeps in memory; messages behind them live on disk only
/// (the paged tail). `x-queue-mode=lazy` makes it 0.
pub const DEFAULT_MEMORY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Stored or handed to a consumer.
    Accepted,
    /// Refused by `x-overflow=reject-publish`: a confirming publisher gets a nack.
    Rejected,
}

pub(crate) type DeadLetters = Vec<(QueuedMessage, DeathReason)>;

/// How far [`QueueHome::route_dead_letters`] got with the dead-lettered copies: what a quorum
/// queue's at-least-once dead-lettering waits on before it lets its dead messages go.
#[derive(Default)]
pub struct DeadLettersRouted {
    /// Every copy reached at least one queue (false also without a dead-letter exchange).
    pub all_routed: bool,
    /// The store write of the last copy stored for durable target queues: those copies are
    /// safe once it is durable.
    pub stored: Option<(Store, u64)>,
}

/// What a queue hands outward to the vhost it is in. The vhost implements it and a queue
/// holds it weakly, never naming the vhost's type: the queue module does not depend on the
/// vhost module (which holds the queues), so a queue gives its dead letters to its vhost
/// to route instead of routing them through the vhost's exchanges itself.
pub trait QueueHome: Send + Sync {
    /// The vhost's name (error texts; forwarding to the node that serves a queue).
    fn vhost_name(&self) -> &str;
    /// Counts messages that left `queue` dead and, when it has a dead-letter exchange
    /// `dlx`, routes each one's dead-lettered copy (`dead_letter::dead_lettered`) with
    /// `dlx_routing_key` or its own keys, storing persistent copies for durable queues as a
    /// fresh publish. Called without the queue's lock held: a route back into the same
    /// queue must not deadlock.
    ///
    /// With `confirm` (a quorum queue's at-least-once dead-lettering) every target that
    /// confirms on its own (quorum, remote) joins it, and the answer says whether every copy
    /// reached a queue and which store write the durable targets' copies wait on.
    fn route_dead_letters(
        &self,
        queue: &ShortStr,
        dead: DeadLetters,
        dlx: Option<&ShortStr>,
        dlx_routing_key: Option<&ShortStr>,
        confirm: Option<&Arc<QueueAnswers>>,
    ) -> DeadLettersRouted;
    /// The node's dead-letter counters (`messages_dead_lettered_*`).
    fn dead_lettered(&self) -> &DeadLettered;
    /// The peers this vhost forwards to (quorum queue delegates, remote queues).
    fn forward_peers(&self) -> Arc<crate::remote::ForwardPeers>;
}

/// The queue types: where a queue's messages live and who delivers them.
#[derive(Debug)]
pub enum QueueKind {
    /// In this process: the ready list, the paged tail and the message store.
    Classic,
    /// In a Raft group replicated over the node's shared write-ahead log.
    Quorum(Box<QuorumQueue>),
    /// On another node of the cluster, which serves the queue; this is its record there.
    Remote(Box<RemoteQueue>),
}

#[derive(Debug)]
struct QueueState {
    /// The oldest ready messages, in memory.
    ready: ReadyList,
    /// The ready messages behind them, on disk only (always empty without a store).
    tail: PagedTail,
    unacked: usize,
    consumers: ConsumerSet,
    next_message_id: u64,
    had_consumer: bool,
    deleted: bool,
    /// A task is watching this queue's message expiry.
    expiry_timer: bool,
    /// A task will give back the ready list's buffer if it is still empty (`shrink.rs`).
    shrink_timer: bool,
    /// What the queue acts on: its arguments combined with its policies. Here, under the
    /// lock publish takes anyway, so a policy change needs nothing on the hot path.
    limits: QueueLimits,
    /// The policy and operator policy that apply to the queue.
    policies: AppliedPolicies,
}

/// A durable queue's place in the message store.
#[derive(Debug, Clone)]
pub struct StoredQueue {
    pub store: Store,
    pub id: QueueId,
}

#[derive(Debug)]
pub struct Queue {
    pub name: ShortStr,
    pub durable: bool,
    pub exclusive_owner: Option<ConnectionId>,
    pub auto_delete: bool,
    /// The arguments it was declared with (policies do not change them).
    pub arguments: FieldTable,
    memory: Arc<MemoryMonitor>,
    /// The vhost, as far as a queue needs it (`QueueHome`): weak, so queues do not keep
    /// their vhost alive.
    home: Weak<dyn QueueHome>,
    /// Set for durable queues when the broker has a store: persistent messages go there.
    pub stored: Option<StoredQueue>,
    /// For other queues, when the broker has a store: where they page out to.
    spill: Option<SpillPlace>,
    /// Whether ready messages may go to the paged tail: not without a store, and not for
    /// priority queues (their order is not one log's). See `memory_budget_bytes`.
    pageable: bool,
    /// A task is watching for this queue's `expires` (see `VHost::watch_expiry`).
    pub(crate) expiry_watched: AtomicBool,
    last_used: Mutex<Instant>,
    state: Mutex<QueueState>,
    /// Messages routed here, delivered, got and acked (the API's message_stats).
    pub stats: MessageStats,
    kind: QueueKind,
}

impl Queue {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        limits: QueueLimits,
        memory: Arc<MemoryMonitor>,
        home: Weak<dyn QueueHome>,
        stored: Option<StoredQueue>,
        spill: Option<Store>,
    ) -> Queue {
        let spill = spill.filter(|_| stored.is_none()).map(|store| SpillPlace {
            store,
            registered: OnceLock::new(),
        });
        let ready = ReadyList::new(limits.max_priority.unwrap_or(0));
        let consumers = ConsumerSet::new(limits.single_active_consumer);
        let pageable = (stored.is_some() || spill.is_some()) && limits.max_priority.is_none();
        Queue {
            name,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            memory,
            home,
            stored,
            spill,
            pageable,
            expiry_watched: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
            state: Mutex::new(QueueState {
                ready,
                tail: PagedTail::default(),
                unacked: 0,
                consumers,
                next_message_id: 0,
                had_consumer: false,
                deleted: false,
                expiry_timer: false,
                shrink_timer: false,
                limits,
                policies: AppliedPolicies::default(),
            }),
            stats: MessageStats::default(),
            kind: QueueKind::Classic,
        }
    }

    /// A classic queue with default limits, no vhost and no store: for unit tests of the
    /// queue's own behaviour.
    #[cfg(test)]
    pub(crate) fn standalone(name: &str) -> Arc<Queue> {
        Arc::new(Queue::new(
            ShortStr::from(name),
            false,
            None,
            false,
            FieldTable::new(),
            QueueLimits::default(),
            Arc::new(MemoryMonitor::new(usize::MAX, Arc::default())),
            Weak::<crate::vhost::VHost>::new(),
            None,
            None,
        ))
    }

    /// Makes this queue one of another type (at creation).
    pub fn with_kind(mut self, kind: QueueKind) -> Queue {
        self.kind = kind;
        self
    }

    pub fn kind(&self) -> &QueueKind {
        &self.kind
    }

    /// The quorum side of a quorum queue.
    pub fn quorum(&self) -> Option<&QuorumQueue> {
        match &self.kind {
            QueueKind::Quorum(qq) => Some(qq.as_ref()),
            QueueKind::Classic | QueueKind::Remote(_) => None,
        }
    }

    /// The remote side of a queue another node serves.
    /// A classic queue served by a node that is down (`RemoteQueue::home_is_down`).
    #[inline]
    pub fn home_is_down(&self) -> bool {
        matches!(&self.kind, QueueKind::Remote(r) if r.home_is_down())
    }

    pub fn remote(&self) -> Option<&RemoteQueue> {
        match &self.kind {
            QueueKind::Remote(r) => Some(r.as_ref()),
            QueueKind::Classic | QueueKind::Quorum(_) => None,
        }
    }

    /// Whether a publisher confirm waits for the queue's own answer (`publish_confirmed`
    /// with a [`QueueAnswers`]) rather than for the message store.
    pub fn confirms_later(&self) -> bool {
        !matches!(self.kind, QueueKind::Classic)
    }

    /// Whether basic.get is answered asynchronously (`get_async`) rather than by `get`.
    pub fn answers_get_later(&self) -> bool {
        !matches!(self.kind, QueueKind::Classic)
    }

    /// The vhost the queue is in, as the queue sees it (None once the vhost is gone).
    pub(crate) fn home(&self) -> Option<Arc<dyn QueueHome>> {
        self.home.upgrade()
    }

    /// Whether this node serves the queue: its home for a classic queue, its group's leader
    /// for a quorum queue (not a remote record of a queue another node serves). In a cluster
    /// exactly one node serves a queue at a time, so per-node figures summed over the nodes
    /// (Prometheus) count each queue once, as RabbitMQ's do.
    pub fn served_here(&self) -> bool {
        match &self.kind {
            QueueKind::Classic => true,
            QueueKind::Quorum(qq) => qq.is_leading(),
            QueueKind::Remote(_) => false,
        }
    }

    /// The type's name as RabbitMQ's API and `x-queue-type` spell it.
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            QueueKind::Classic => "classic",
            QueueKind::Quorum(_) => "quorum",
            QueueKind::Remote(r) => r.served_type(),
        }
    }

    /// Publishes to a quorum queue with a publisher confirm: `confirm` is answered once the
    /// group committed the message; to a remote queue, once the serving queue accepted it.
    /// A classic queue confirms through the store instead.
    pub fn publish_confirmed(
        self: &Arc<Self>,
        message: Arc<Message>,
        stored: Option<Appended>,
        confirm: Option<&Arc<QueueAnswers>>,
    ) -> Enqueued {
        match &self.kind {
            QueueKind::Quorum(qq) => {
                MessageStats::add(&self.stats.publish, 1);
                qq.enqueue(&message, confirm);
                Enqueued::Accepted
            }
            // Counted by the serving queue (the API adds every node's counters).
            QueueKind::Remote(r) => r.publish(&message, confirm),
            QueueKind::Classic => self.publish(message, stored),
        }
    }

    /// Routes one published message into the queue, whatever its type: the channel's publish
    /// path calls this for every queue the message reached. `stored` is the message's append
    /// to the store, if the publish made one (only a queue that keeps its messages there
    /// takes it); `confirm` is the publish's confirm when the channel confirms, which a queue
    /// type that confirms on its own (a quorum queue: once its group committed) joins.
    #[inline]
    pub fn publish_routed(
        self: &Arc<Self>,
        message: &Arc<Message>,
        stored: Option<Appended>,
        confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued {
        match &self.kind {
            QueueKind::Classic => {
                let stored = stored.filter(|_| self.stored.is_some());
                self.publish(message.clone(), stored)
            }
            QueueKind::Quorum(qq) => {
                MessageStats::add(&self.stats.publish, 1);
                qq.enqueue(message, confirm.map(RoutedConfirm::join));
                Enqueued::Accepted
            }
            QueueKind::Remote(r) => {
                // Confirmed once the serving node's queue accepted it, and counted there.
                r.publish(message, confirm.map(RoutedConfirm::join))
            }
        }
    }

    /// The clock is read only for messages that can expire: most never do, and publish is
    /// the hot path.
    fn expiry_for(st: &QueueState, message: &Message) -> Option<Instant> {
        let ttl_ms = match (st.limits.message_ttl_ms, message.expiration_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ttl_ms.map(|ms| Instant::now() + Duration::from_millis(ms))
    }

    /// Expiry of a message read back from disk: TTLs count from when it was published.
    /// (A paged message gets the queue's TTL of now: the store keeps no per-queue expiry.)
    fn expiry_since(
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
    pub fn publish(self: &Arc<Self>, message: Arc<Message>, stored: Option<Appended>) -> Enqueued {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => {
                MessageStats::add(&self.stats.publish, 1);
                qq.enqueue(&message, None);
                return Enqueued::Accepted;
            }
            QueueKind::Remote(r) => return r.publish(&message, None),
        }
        let store_ref = stored.map(|a| StoreRef {
            id: a.id,
            location: a.location,
        });
        let append_seq = stored.map_or(0, |a| a.seq);
        let mut dead = DeadLetters::new();
        let outcome = {
            let mut st = self.state.lock();
            if st.deleted {
                return Enqueued::Accepted;
            }
            MessageStats::add(&self.stats.publish, 1);
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
                match self.hand_to_consumer(&mut st, Some(queued)) {
                    Ok(()) => Enqueued::Accepted,
                    Err(Some(back)) => self.push_ready(&mut st, back, append_seq, &mut dead),
                    Err(None) => unreachable!("an offered message comes back when not taken"),
                }
            } else {
                let outcome = self.push_ready(&mut st, queued, append_seq, &mut dead);
                self.dispatch(&mut st, &mut dead);
                outcome
            }
        };
        self.dead_letter(dead);
        outcome
    }

    fn over_limit(&self, st: &QueueState, extra_messages: usize, extra_bytes: usize) -> bool {
        let len = st.ready.len() as u64 + st.tail.len() + extra_messages as u64;
        let bytes = st.ready.bytes() as u64 + st.tail.bytes() + extra_bytes as u64;
        st.limits.max_length.is_some_and(|m| len > m)
            || st.limits.max_length_bytes.is_some_and(|m| bytes > m)
    }

    /// `append_seq`: the sequence number of the store record the publisher appended for
    /// this message (0 when none).
    fn push_ready(
        self: &Arc<Self>,
        st: &mut QueueState,
        queued: QueuedMessage,
        append_seq: u64,
        dead: &mut DeadLetters,
    ) -> Enqueued {
        let size = queued.message.size_bytes();
        let overflow = st.limits.overflow.unwrap_or(Overflow::DropHead);
        if overflow != Overflow::DropHead && self.over_limit(st, 1, size) {
            if overflow == Overflow::RejectPublishDlx {
                dead.push((queued, DeathReason::MaxLen));
            } else {
                self.forget(&queued);
            }
            return Enqueued::Rejected;
        }
        if queued.expires_at.is_some_and(|t| t <= Instant::now()) {
            // TTL 0: only a consumer waiting right now could have taken it.
            dead.push((queued, DeathReason::Expired));
            return Enqueued::Accepted;
        }
        let expiring = queued.expires_at.is_some();
        match self.page_out(st, queued, append_seq) {
            Placed::InMemory(queued) => {
                self.memory.add(queued.message.memory_bytes());
                st.ready.push_back(queued);
            }
            Placed::OnDisk => {}
            Placed::Refused => return Enqueued::Rejected,
        }
        self.drop_head_over_limit(st, dead);
        if expiring && !st.expiry_timer {
            st.expiry_timer = true;
            self.watch_message_expiry();
        }
        Enqueued::Accepted
    }

    /// `x-overflow=drop-head` (the default): while the queue is over `x-max-length(-bytes)`,
    /// drops (to be dead-lettered, reason maxlen) from the head. RabbitMQ does this after a
    /// publish and after messages come back (requeue, recover, channel close); the
    /// reject-publish modes only refuse publishes and keep requeued messages past the limit.
    fn drop_head_over_limit(&self, st: &mut QueueState, dead: &mut DeadLetters) {
        if st.limits.overflow.unwrap_or(Overflow::DropHead) != Overflow::DropHead {
            return;
        }
        while self.over_limit(st, 0, 0) {
            self.ensure_ready(st, dead);
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
    fn expire(&self, st: &mut QueueState, dead: &mut DeadLetters) {
        let Some(next) = st.ready.next_expiry() else {
            return;
        };
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

    /// A task that expires messages at the head when their time comes, so TTL'd messages
    /// leave (and dead-letter) without waiting for a consumer or a publish to notice.
    fn watch_message_expiry(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queue = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                let wait = {
                    let Some(queue) = queue.upgrade() else { return };
                    let mut dead = DeadLetters::new();
                    let wait = {
                        let mut st = queue.state.lock();
                        queue.expire(&mut st, &mut dead);
                        // Paged messages expire too, once read back to the head.
                        queue.ensure_ready(&mut st, &mut dead);
                        let now = Instant::now();
                        if st.deleted || st.ready.is_empty() {
                            st.expiry_timer = false;
                            None
                        } else {
                            // Heads without expiry may still have expiring messages behind
                            // them: look again in a second.
                            Some(st.ready.next_expiry().map_or(Duration::from_secs(1), |t| {
                                t.saturating_duration_since(now).min(Duration::from_secs(1))
                            }))
                        }
                    };
                    queue.dead_letter(dead);
                    wait
                };
                match wait {
                    None => return,
                    Some(wait) => tokio::time::sleep(wait.max(Duration::from_millis(1))).await,
                }
            }
        });
    }

    /// Republishes dead messages to the dead-letter exchange (dropped if there is none).
    pub(crate) fn dead_letter(&self, dead: DeadLetters) {
        self.dead_letter_confirmed(dead, None);
    }

    /// [`Queue::dead_letter`], the targets that confirm on their own joining `confirm`.
    pub(crate) fn dead_letter_confirmed(
        &self,
        dead: DeadLetters,
        confirm: Option<&Arc<QueueAnswers>>,
    ) -> DeadLettersRouted {
        if dead.is_empty() {
            return DeadLettersRouted {
                all_routed: true,
                stored: None,
            };
        }
        for (m, _) in &dead {
            self.forget(m);
        }
        // Read now, not at collection: a policy may have changed it in between, and the
        // message goes where the queue's settings say when it leaves.
        let (dlx, dlx_routing_key) = {
            let st = self.state.lock();
            (
                st.limits.dead_letter_exchange.clone(),
                st.limits.dead_letter_routing_key.clone(),
            )
        };
        let home = self.home.upgrade();
        // Counted here once per death; at-least-once copies, which may be sent several
        // times, are counted by the quorum queue when they die (`crate::quorum`).
        if let (Some(home), None) = (&home, confirm) {
            let source = match self.kind {
                QueueKind::Quorum(_) => DeadLetterSource::Quorum,
                _ => DeadLetterSource::Classic,
            };
            let strategy = match dlx {
                Some(_) => DeadLetterStrategy::AtMostOnce,
                None => DeadLetterStrategy::Disabled,
            };
            for (_, reason) in &dead {
                home.dead_lettered().add(source, *reason, strategy, 1);
            }
        }
        match home {
            Some(home) => home.route_dead_letters(
                &self.name,
                dead,
                dlx.as_ref(),
                dlx_routing_key.as_ref(),
                confirm,
            ),
            None => DeadLettersRouted::default(),
        }
    }

    /// Offers a message to the consumers (by priority, then round-robin: `ConsumerSet`):
    /// `offered`, or with `None` the head of the ready list, which is only taken once a
    /// consumer with credit is found, so a queue whose consumers are all blocked leaves its
    /// head in place (taking it and putting it back cost more than the rest of a publish to
    /// a deep queue). `Err` when no consumer took it, with the message if it is not in the
    /// ready list.
    fn hand_to_consumer(
        self: &Arc<Self>,
        st: &mut QueueState,
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
                st.unacked += 1;
            } else {
                // Delivered without ack: gone for the queue. (Should the connection turn out
                // dead, the message comes back without its store id.)
                self.forget(&queued);
                queued.store_ref = None;
            }
            let event = ConnectionEvent::Deliver(Delivery {
                consumer: consumer.clone(),
                queue: Some(self.clone()),
                message: queued,
            });
            match consumer.send(event) {
                Ok(()) => return Ok(()),
                Err(ConnectionEvent::Deliver(d)) => {
                    // The connection is gone: drop its consumer, try the next one.
                    d.consumer.return_credit(cost);
                    if !no_ack {
                        st.unacked -= 1;
                    }
                    st.consumers.remove_where(|c| std::ptr::eq(c, &*d.consumer));
                    offered = Some(d.message);
                }
                Err(_) => unreachable!("send returns the event it was given"),
            }
        }
    }

    /// Moves ready messages to consumers while any has credit; a ready list this emptied
    /// gives its buffer back a while later.
    fn dispatch(self: &Arc<Self>, st: &mut QueueState, dead: &mut DeadLetters) {
        self.dispatch_ready(st, dead);
        self.shrink_later(st);
    }

    fn dispatch_ready(self: &Arc<Self>, st: &mut QueueState, dead: &mut DeadLetters) {
        if st.consumers.is_empty() || (st.ready.is_empty() && st.tail.is_empty()) {
            return;
        }
        self.expire(st, dead);
        loop {
            if !self.ensure_ready(st, dead) {
                return;
            }
            match self.hand_to_consumer(st, None) {
                Ok(()) => {}
                Err(None) => return,
                Err(Some(taken)) => {
                    // Taken from the head, then its consumer's connection was found gone
                    // and no other could take it.
                    self.insert_ready(st, taken);
                    return;
                }
            }
        }
    }

    /// Runs `f` on the locked state and then dead-letters what it collected.
    fn with_state<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut QueueState, &mut DeadLetters) -> R,
    ) -> R {
        let mut dead = DeadLetters::new();
        let r = f(&mut self.state.lock(), &mut dead);
        self.dead_letter(dead);
        r
    }

    /// Re-runs dispatch after credit was freed somewhere.
    pub fn kick(self: &Arc<Self>) {
        if !matches!(self.kind, QueueKind::Classic) {
            // The group's (or the serving node's) prefetch paces a quorum or remote queue's
            // deliveries, not pipeline credit here.
            return;
        }
        self.with_state(|st, dead| self.dispatch(st, dead));
    }

    /// Puts a message back where its id says it belongs (usually the head). It stays in
    /// memory: it is older than anything in the paged tail.
    fn insert_ready(&self, st: &mut QueueState, m: QueuedMessage) {
        self.memory.add(m.message.memory_bytes());
        st.ready.insert_by_id(m);
    }

    /// Settles deliveries: `acked` are done, `requeued` go back to their old places (marked
    /// redelivered; then `x-max-length` applies, as after a publish), `rejected` are
    /// dead-lettered. Then dispatches.
    pub fn settle(
        self: &Arc<Self>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => return qq.settle(&acked, &requeued, &rejected, false),
            QueueKind::Remote(r) => return r.settle(&acked, &requeued, &rejected),
        }
        for m in &acked {
            self.forget(m);
        }
        self.with_state(|st, dead| {
            st.unacked = st
                .unacked
                .saturating_sub(acked.len() + requeued.len() + rejected.len());
            if st.deleted {
                return;
            }
            let any_requeued = !requeued.is_empty();
            for mut m in requeued {
                m.redelivered = true;
                self.persist_delivery_count(&m);
                self.insert_ready(st, m);
            }
            if any_requeued {
                self.drop_head_over_limit(st, dead);
            }
            dead.extend(rejected.into_iter().map(|m| (m, DeathReason::Rejected)));
            self.dispatch(st, dead);
        });
        // Done with: the allocations of messages no other queue holds are reused.
        for m in acked {
            crate::message_pool::recycle(m.message);
        }
    }

    /// Writes the delivery-count of a persistent message of a durable queue to the store
    /// when it goes back to the queue after a failed delivery, so a restart keeps it.
    /// RabbitMQ 4 keeps it in the quorum queue's log (every change) and, for a classic
    /// queue, in the recovery terms written at a clean shutdown (lost after a crash); one
    /// small record on this slow path (a failed delivery, never a plain ack, publish or
    /// 0-9-1 requeue of a message that never failed) keeps it across crashes too. A
    /// message released again after a failed delivery writes its unchanged count once more.
    fn persist_delivery_count(&self, m: &QueuedMessage) {
        if m.delivery_count == 0 || !m.message.persistent {
            return;
        }
        if let (Some(stored), Some(r)) = (&self.stored, m.store_ref) {
            if let Err(e) = stored
                .store
                .set_delivery_count(stored.id, r.id, m.delivery_count)
            {
                tracing::debug!(queue = %self.name, error = %e, "storing a delivery count failed");
            }
        }
    }

    /// Requeues the unacked deliveries of a channel that went away. A classic queue puts
    /// them back where their ids say (as any requeue); a quorum queue back at the head, where
    /// RabbitMQ returns a downed consumer's messages (a client's own requeue goes to the back).
    pub fn release(self: &Arc<Self>, messages: Vec<QueuedMessage>) {
        if let QueueKind::Quorum(qq) = &self.kind {
            qq.settle(&[], &messages, &[], true);
            return;
        }
        self.settle(Vec::new(), messages, Vec::new());
    }

    /// Puts back messages that were handed to a connection but never reached the client
    /// (its channel closed first). They were not counted as unacked for no-ack consumers.
    pub fn return_undelivered(self: &Arc<Self>, messages: Vec<QueuedMessage>, were_unacked: bool) {
        if !matches!(self.kind, QueueKind::Classic) && !were_unacked {
            // A no-ack quorum or remote delivery was settled when it was handed over (at
            // most once).
            return;
        }
        if were_unacked {
            self.release(messages);
            return;
        }
        self.with_state(|st, dead| {
            if st.deleted {
                return;
            }
            for m in messages {
                self.insert_ready(st, m);
            }
            self.drop_head_over_limit(st, dead);
            self.dispatch(st, dead);
        })
    }

    /// The name of the vhost this queue is in, for error texts.
    pub(crate) fn vhost_name(&self) -> String {
        self.home
            .upgrade()
            .map_or_else(|| "/".to_owned(), |v| v.vhost_name().to_owned())
    }

    pub fn add_consumer(self: &Arc<Self>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => return qq.add_consumer(self, consumer),
            QueueKind::Remote(r) => {
                // The serving queue checks exclusivity; a refusal comes back as basic.cancel,
                // and so does a link lost meanwhile (the client consumes again).
                if let Err(consumer) = r.add_consumer(consumer) {
                    tracing::debug!(consumer = %consumer.tag, node = %r.node(), "consumer cancelled: no live link to the queue's node");
                    let _ = consumer.send(ConnectionEvent::ConsumerCancelled {
                        channel: consumer.channel,
                        consumer_tag: consumer.tag.clone(),
                    });
                }
                return Ok(());
            }
        }
        self.with_state(|st, dead| {
            if st.deleted {
                return Err(AmqpError::not_found(format!(
                    "no queue '{}' in vhost '{}'",
                    self.name,
                    self.vhost_name()
                )));
            }
            if st.consumers.iter().any(|c| c.exclusive)
                || (consumer.exclusive && !st.consumers.is_empty())
            {
                return Err(AmqpError::access_refused(format!(
                    "queue '{}' in vhost '{}' in exclusive use",
                    self.name,
                    self.vhost_name()
                )));
            }
            st.consumers.push(consumer);
            st.had_consumer = true;
            self.dispatch(st, dead);
            Ok(())
        })
    }

    /// Removes a consumer by channel and tag. Returns it, and whether the queue is now an
    /// auto-delete queue that lost its last consumer (the caller deletes it).
    pub fn remove_consumer(
        &self,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        if let QueueKind::Quorum(qq) = &self.kind {
            // A quorum queue is never auto-delete.
            let consumer = qq.remove_consumer(connection, channel, tag)?;
            self.touch();
            return Some((consumer, false));
        }
        if let QueueKind::Remote(r) = &self.kind {
            // The serving node deletes an auto-delete queue that lost its last consumer.
            let consumer = r.remove_consumer(connection, channel, tag)?;
            return Some((consumer, false));
        }
        let mut st = self.state.lock();
        let consumer = st.consumers.remove_where(|c| {
            c.connection == connection && c.channel == channel && c.tag.as_str() == tag
        })?;
        let now_unused = self.auto_delete && st.had_consumer && st.consumers.is_empty();
        drop(st);
        self.touch();
        Some((consumer, now_unused))
    }

    /// basic.get: the next ready message and how many remain.
    pub fn get(self: &Arc<Self>, no_ack: bool) -> Option<(QueuedMessage, u32)> {
        self.touch();
        if self.answers_get_later() {
            // basic.get on a quorum or remote queue goes through `Queue::get_async`.
            return None;
        }
        self.with_state(|st, dead| {
            self.expire(st, dead);
            self.ensure_ready(st, dead);
            let m = st.ready.pop_front()?;
            self.shrink_later(st);
            self.memory.sub(m.message.memory_bytes());
            if !no_ack {
                st.unacked += 1;
            } else {
                self.forget(&m);
            }
            Some((m, Self::ready_count(st)))
        })
    }

    fn ready_count(st: &QueueState) -> u32 {
        (st.ready.len() as u64 + st.tail.len()).min(u64::from(u32::MAX)) as u32
    }

    /// Drops every ready message (in memory and paged); the store forgets them too.
    pub fn purge(&self) -> u32 {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => return qq.purge(),
            QueueKind::Remote(r) => return r.purge(),
        }
        let mut st = self.state.lock();
        self.memory.sub(st.ready.memory_bytes());
        let purged = st.ready.drain_all();
        let paged = st.tail.take_ids();
        drop(st);
        for m in &purged {
            self.forget(m);
        }
        for id in &paged {
            self.forget_id(MessageId(id));
        }
        (purged.len() as u64 + paged.len()).min(u64::from(u32::MAX)) as u32
    }

    /// Marks the queue deleted and empties it; returns the consumers to notify and how many
    /// ready messages it held.
    pub fn mark_deleted(&self) -> (Vec<Arc<Consumer>>, u32) {
        let mut st = self.state.lock();
        st.deleted = true;
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => {
                drop(st);
                return qq.mark_deleted();
            }
            QueueKind::Remote(r) => {
                drop(st);
                return r.mark_deleted();
            }
        }
        self.memory.sub(st.ready.memory_bytes());
        let n = Self::ready_count(&st);
        st.ready.drain_all();
        st.tail.clear();
        if let Some(stored) = self.disk() {
            if let Err(e) = stored.store.delete_queue(stored.id) {
                tracing::warn!(queue = %self.name, error = %e, "store: deleting queue failed");
            }
        }
        (st.consumers.take_all(), n)
    }

    /// This node stops serving the queue here (`VHost::set_serving`): no more deliveries
    /// from this object, and its local consumers are returned (to be told basic.cancel).
    /// Unlike `mark_deleted`, the queue's data stays: a classic queue's stored messages, a
    /// quorum queue's group; a remote record's consumers are cancelled at the serving node.
    pub(crate) fn detach(&self) -> Vec<Arc<Consumer>> {
        match &self.kind {
            QueueKind::Quorum(qq) => qq.detach_consumers(),
            QueueKind::Remote(r) => r.mark_deleted().0,
            QueueKind::Classic => {
                let mut st = self.state.lock();
                st.deleted = true;
                st.consumers.take_all()
            }
        }
    }

    /// Ready messages (expired ones leave first, as a client polling the count expects).
    pub fn message_count(self: &Arc<Self>) -> u32 {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => return qq.message_count(),
            QueueKind::Remote(r) => return r.message_count(),
        }
        self.with_state(|st, dead| {
            self.expire(st, dead);
            Self::ready_count(st)
        })
    }

    pub fn consumer_count(&self) -> u32 {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => return qq.consumer_count(),
            QueueKind::Remote(r) => return r.consumer_count(),
        }
        self.state.lock().consumers.len() as u32
    }

    pub fn unacked_count(&self) -> u32 {
        match &self.kind {
            QueueKind::Classic => {}
            QueueKind::Quorum(qq) => return qq.unacked_count(),
            // Held on the serving node, which counts them.
            QueueKind::Remote(_) => return 0,
        }
        self.state.lock().unacked as u32
    }

    pub fn is_deleted(&self) -> bool {
        self.state.lock().deleted
    }

    /// Records use (consume, get, declare) for `x-expires`.
    pub fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    /// True when the queue has had no consumers and no use for its whole `x-expires`.
    pub fn expired(&self) -> bool {
        let Some(expires_ms) = self.expires_ms() else {
            return false;
        };
        let idle = self.last_used.lock().elapsed().as_millis() as u64;
        let unused = match &self.kind {
            QueueKind::Quorum(qq) => !qq.has_consumers(),
            // The serving node expires the queue; its deletion reaches every node.
            QueueKind::Remote(_) => return false,
            QueueKind::Classic => self.state.lock().consumers.is_empty(),
        };
        idle >= expires_ms && unused
    }

    /// How long the queue may stay unused before it is deleted (`x-expires` / policy).
    pub fn expires_ms(&self) -> Option<u64> {
        self.state.lock().limits.expires_ms
    }

    /// In-memory bytes of ready messages beyond which messages go to the paged tail; None
    /// when the queue does not page.
    fn memory_budget_bytes(&self, st: &QueueState) -> Option<usize> {
        let lazy = st.limits.lazy;
        self.pageable
            .then_some(if lazy { 0 } else { DEFAULT_MEMORY_BUDGET_BYTES })
    }

    /// The limits the queue acts on now (arguments and policies combined).
    pub fn limits(&self) -> QueueLimits {
        self.state.lock().limits.clone()
    }

    /// The policies that apply to the queue (for the management API's `policy`,
    /// `operator_policy` and `effective_policy_definition`).
    pub fn policies(&self) -> AppliedPolicies {
        self.state.lock().policies.clone()
    }

    pub fn effective_policy_definition(&self) -> Definition {
        self.state.lock().policies.effective_definition()
    }

    /// Applies a (new) set of policies at once, as RabbitMQ does on a policy change: a
    /// lower length limit drops (dead-letters) the excess from the head under drop-head;
    /// a new `expires` counts from now; a new TTL, dead-letter target or overflow mode
    /// holds for what happens next (messages already queued keep the expiry they got when
    /// they arrived, as in RabbitMQ). Returns true when the policies changed.
    pub fn apply_policies(self: &Arc<Self>, policies: AppliedPolicies) -> bool {
        let limits = effective_queue_limits(&self.arguments, &policies);
        if let QueueKind::Quorum(qq) = &self.kind {
            let config = crate::quorum::queue_config(&self.arguments, &policies);
            let at_least_once = crate::quorum::dead_letter_at_least_once(
                &self.arguments,
                &policies,
                &config,
                limits.dead_letter_exchange.is_some(),
            );
            qq.set_config(config, at_least_once);
        }
        let changed = self.with_state(|st, dead| {
            if st.policies == policies {
                return false;
            }
            let expires_changed = st.limits.expires_ms != limits.expires_ms;
            // Priority and single-active-consumer are arguments only.
            st.limits = QueueLimits {
                max_priority: st.limits.max_priority,
                single_active_consumer: st.limits.single_active_consumer,
                ..limits
            };
            st.policies = policies;
            if !st.deleted {
                self.drop_head_over_limit(st, dead);
            }
            if expires_changed {
                *self.last_used.lock() = Instant::now();
            }
            true
        });
        changed
    }
}
