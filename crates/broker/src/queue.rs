//! A queue's record: what every queue type shares — name, flags, arguments, the policies that
//! apply and the limits they make, statistics, use for `x-expires`, the vhost it is in — and
//! its type ([`QueueType`]), which holds where the messages live and who delivers them.
//!
//! Vhosts, exchange routing, channels, AMQP 1.0 sessions, the HTTP API and Prometheus hold
//! `Arc<Queue>` and call these methods whatever the type (RabbitMQ's `rabbit_queue_type`):
//! each forwards to the type with one virtual call — no allocation, lock or task hop — so a
//! classic queue's publish costs what it did when it was the only type. What a session keeps
//! of a queue it consumes from is the narrower [`QueueHandle`] (at the end of this file).
//!
//! Invariants: `settings` holds the limits every type reads off the hot path; a classic
//! queue keeps its own copy under its state lock (publish takes that lock anyway), set by
//! `QueueType::apply_policies` whenever `settings` changes. `deleted` is set once, before
//! the type empties the queue, and never cleared.

use crate::churn::{DeadLetterStrategy, DeadLettered};
use crate::confirm::{ConfirmTo, QueueAnswers, RoutedConfirm};
use crate::consumer::{ConnectionEvent, ConnectionId, Consumer};
use crate::dead_letter::DeathReason;
use crate::error::AmqpResult;
use crate::message::Message;
use crate::policy::{effective_queue_limits, AppliedPolicies, Definition};
use crate::queue_type::{Got, QueueType, Replicas};
use crate::stats::QueueStats;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;
use warren_codec::{FieldTable, ShortStr};
use warren_store::{Appended, FailedPublishes, QueueId, RecoveredQueue, RoaringTreemap, Store};

pub use crate::queue_args::{Overflow, QueueLimits};
pub use crate::queue_type::{Enqueued, QueueDepth};
pub use crate::queued_message::{QueuedMessage, StoreRef};

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
    /// A queue's first change since the monitoring readers last read it
    /// (`Queue::note_change`).
    fn queue_changed(&self, queue: &ShortStr);
}

/// A durable queue's place in the message store.
#[derive(Debug, Clone)]
pub struct StoredQueue {
    pub store: Store,
    pub id: QueueId,
}

/// The queue's policies and what they make of its arguments.
#[derive(Debug)]
struct Settings {
    limits: Arc<QueueLimits>,
    policies: AppliedPolicies,
}

/// Milliseconds on the process's monotonic clock: what a queue keeps of its last use
/// (8 bytes, where an `Instant` under a lock took 24 in every queue).
fn monotonic_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[derive(Debug)]
pub struct Queue {
    pub name: ShortStr,
    pub durable: bool,
    pub exclusive_owner: Option<ConnectionId>,
    pub auto_delete: bool,
    /// The arguments it was declared with (policies do not change them).
    pub arguments: FieldTable,
    /// The vhost, as far as a queue needs it (`QueueHome`): weak, so queues do not keep
    /// their vhost alive.
    home: Weak<dyn QueueHome>,
    /// Set for durable queues when the broker has a store: persistent messages go there.
    pub stored: Option<StoredQueue>,
    /// A task is watching for this queue's `expires` (see `VHost::watch_expiry`).
    pub(crate) expiry_watched: AtomicBool,
    /// When it was last used (`monotonic_ms`), for `x-expires`.
    last_used_ms: AtomicU64,
    settings: Mutex<Settings>,
    deleted: AtomicBool,
    /// Messages routed here, delivered, got and acked (the API's message_stats).
    pub stats: QueueStats,
    /// Marked since the monitoring readers last read the queue (`queue_activity.rs`).
    changed: AtomicBool,
    kind: Box<dyn QueueType>,
}

/// A vhost keeps its queues by name and in name order (`named_entries.rs`).
impl crate::named_entries::Named for Queue {
    fn name(&self) -> &ShortStr {
        &self.name
    }
}

impl Queue {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        limits: Arc<QueueLimits>,
        home: Weak<dyn QueueHome>,
        stored: Option<StoredQueue>,
        kind: Box<dyn QueueType>,
    ) -> Queue {
        Queue {
            name,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            home,
            stored,
            expiry_watched: AtomicBool::new(false),
            last_used_ms: AtomicU64::new(monotonic_ms()),
            settings: Mutex::new(Settings {
                limits,
                policies: AppliedPolicies::default(),
            }),
            deleted: AtomicBool::new(false),
            stats: QueueStats::default(),
            changed: AtomicBool::new(false),
            kind,
        }
    }

    /// Marks the queue for the monitoring readers (`queue_activity.rs`): its counters or
    /// depth may have moved. One relaxed load unless this is the first mark since a reader
    /// looked.
    #[inline]
    pub fn note_change(&self) {
        if !self.changed.load(Ordering::Relaxed) {
            self.note_first_change();
        }
    }

    #[cold]
    #[inline(never)]
    fn note_first_change(&self) {
        if !self.changed.swap(true, Ordering::AcqRel) {
            if let Some(home) = self.home.upgrade() {
                home.queue_changed(&self.name);
            }
        }
    }

    /// A monitoring reader is about to read the queue: a change from now on marks it again
    /// (cleared before the read, so a change during the read is not lost).
    pub fn begin_reading(&self) {
        self.changed.store(false, Ordering::SeqCst);
    }

    /// The type's own state, for the type's own code (cluster, recovery): `None` when the
    /// queue is of another type.
    pub fn type_state<T: QueueType>(&self) -> Option<&T> {
        self.kind.as_any().downcast_ref::<T>()
    }

    /// A classic queue served by a node that is down: a publish leaves it out.
    #[inline]
    pub fn home_is_down(&self) -> bool {
        self.kind.home_is_down()
    }

    /// The node that serves the queue when it is not this one.
    pub fn home_node(&self) -> Option<&str> {
        self.kind.home_node()
    }

    /// False while the node holding the queue's messages cannot be reached.
    pub fn is_reachable(&self) -> bool {
        self.kind.is_reachable()
    }

    /// The members of a replicated queue (a quorum queue's group).
    pub fn replicas(&self) -> Option<Replicas> {
        self.kind.replicas()
    }

    /// Whether a consumer may come from a channel with a global prefetch limit.
    pub fn supports_global_qos(&self) -> bool {
        self.kind.supports_global_qos()
    }

    /// Whether a publisher confirm waits for the queue's own answer rather than for the
    /// message store.
    pub fn confirms_later(&self) -> bool {
        self.kind.confirms_later()
    }

    /// Whether basic.get is answered asynchronously (`get_later`) rather than by `get`.
    pub fn answers_get_later(&self) -> bool {
        self.kind.answers_get_later()
    }

    /// The vhost the queue is in, as the queue sees it (None once the vhost is gone).
    pub(crate) fn home(&self) -> Option<Arc<dyn QueueHome>> {
        self.home.upgrade()
    }

    /// Whether this node serves the queue (see [`QueueType::served_here`]).
    pub fn served_here(&self) -> bool {
        self.kind.served_here()
    }

    /// See [`QueueType::counts_move_unmarked`].
    pub fn counts_move_unmarked(&self) -> bool {
        self.kind.counts_move_unmarked()
    }

    /// The type's name as RabbitMQ's API and `x-queue-type` spell it.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }

    /// Routes one published message into the queue, whatever its type: `VHost::publish`
    /// calls this for every queue the message reached. `stored` is the message's append to
    /// the store, if the publish made one (only a queue that keeps its messages there takes
    /// it); `confirm` is the publish's confirm when the publisher confirms, which a queue
    /// type that confirms on its own (quorum: once its group committed) joins.
    #[inline]
    pub fn publish_routed(
        self: &Arc<Self>,
        message: &Arc<Message>,
        stored: Option<Appended>,
        confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued {
        let enqueued = self.kind.enqueue(self, message, stored, confirm);
        self.note_change();
        enqueued
    }

    /// [`Queue::publish_routed`] for one message whose confirm answers `confirm` (made by
    /// the caller: a forwarded publish, a batch of dead letters).
    pub fn publish_confirmed(
        self: &Arc<Self>,
        message: Arc<Message>,
        stored: Option<Appended>,
        confirm: Option<&Arc<QueueAnswers>>,
    ) -> Enqueued {
        let mut routed = confirm.and_then(|c| RoutedConfirm::new(ConfirmTo::Joining(c)));
        let enqueued = self.kind.enqueue(self, &message, stored, routed.as_mut());
        self.note_change();
        enqueued
    }

    /// Routes one message into the queue without a confirm.
    pub fn publish(self: &Arc<Self>, message: Arc<Message>, stored: Option<Appended>) -> Enqueued {
        let enqueued = self.kind.enqueue(self, &message, stored, None);
        self.note_change();
        enqueued
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
        // Read now, not at collection: a policy may have changed it in between, and the
        // message goes where the queue's settings say when it leaves.
        let (dlx, dlx_routing_key) = {
            let settings = self.settings.lock();
            (
                settings.limits.dead_letter_exchange.clone(),
                settings.limits.dead_letter_routing_key.clone(),
            )
        };
        let Some(home) = self.home.upgrade() else {
            return DeadLettersRouted::default();
        };
        // Counted here once per death; at-least-once copies, which may be sent several
        // times, are counted by the quorum queue when they die (`crate::quorum`).
        if confirm.is_none() {
            let source = self.kind.dead_letter_source();
            let strategy = match dlx {
                Some(_) => DeadLetterStrategy::AtMostOnce,
                None => DeadLetterStrategy::Disabled,
            };
            for (_, reason) in &dead {
                home.dead_lettered().add(source, *reason, strategy, 1);
            }
        }
        home.route_dead_letters(
            &self.name,
            dead,
            dlx.as_ref(),
            dlx_routing_key.as_ref(),
            confirm,
        )
    }

    /// Re-runs dispatch after credit was freed somewhere.
    pub fn kick(self: &Arc<Self>) {
        self.kind.kick(self);
        self.note_change();
    }

    /// Settles deliveries: `acked` are done, `requeued` go back to their places (marked
    /// redelivered), `rejected` are dead-lettered.
    pub fn settle(
        self: &Arc<Self>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        self.kind.settle(self, acked, requeued, rejected);
        self.note_change();
    }

    /// Takes back the unacked deliveries of a channel that went away. A classic queue puts
    /// them back where their ids say (as any requeue); a quorum queue back at the head, where
    /// RabbitMQ returns a downed consumer's messages (a client's own requeue goes to the back).
    pub fn release(self: &Arc<Self>, messages: Vec<QueuedMessage>) {
        self.kind.release(self, messages);
        self.note_change();
    }

    /// See `QueueType::release_disconnected`.
    pub fn release_disconnected(self: &Arc<Self>, messages: Vec<QueuedMessage>) {
        self.kind.release_disconnected(self, messages);
        self.note_change();
    }

    /// Puts back messages that were handed to a connection but never reached the client
    /// (its channel closed first). They were not counted as unacked for no-ack consumers.
    pub fn return_undelivered(self: &Arc<Self>, messages: Vec<QueuedMessage>, were_unacked: bool) {
        self.kind.return_undelivered(self, messages, were_unacked);
        self.note_change();
    }

    /// The name of the vhost this queue is in, for error texts.
    pub(crate) fn vhost_name(&self) -> String {
        self.home
            .upgrade()
            .map_or_else(|| "/".to_owned(), |v| v.vhost_name().to_owned())
    }

    pub fn add_consumer(self: &Arc<Self>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        let added = self.kind.add_consumer(self, consumer);
        self.note_change();
        added
    }

    /// Removes a consumer by channel and tag. Returns it, and whether the queue is now an
    /// auto-delete queue that lost its last consumer (the caller deletes it).
    pub fn remove_consumer(
        &self,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        let removed = self.kind.remove_consumer(self, connection, channel, tag);
        self.note_change();
        removed
    }

    /// basic.get answered at once: the next ready message and how many remain (None for a
    /// queue that answers later, see `answers_get_later`).
    pub fn get(self: &Arc<Self>, no_ack: bool) -> Got {
        self.touch();
        let got = self.kind.get(self, no_ack);
        self.note_change();
        got
    }

    /// basic.get on a queue that answers it asynchronously (`answers_get_later`); None for
    /// an empty queue.
    pub async fn get_later(self: &Arc<Self>, no_ack: bool) -> Got {
        self.touch();
        let got = self.kind.get_later(self, no_ack).await;
        self.note_change();
        got
    }

    /// Drops every ready message; returns how many.
    pub fn purge(&self) -> u32 {
        let purged = self.kind.purge(self);
        self.note_change();
        purged
    }

    /// Marks the queue deleted and empties it; returns the consumers to notify and how many
    /// ready messages it held.
    pub fn mark_deleted(&self) -> (Vec<Arc<Consumer>>, u32) {
        self.deleted.store(true, Ordering::Release);
        let emptied = self.kind.mark_deleted(self);
        self.note_change();
        emptied
    }

    /// Set by a type whose record stops serving for good (a classic queue detached): the
    /// same as deleted for everyone holding it.
    pub(crate) fn set_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    /// This node stops serving the queue here (`VHost::set_serving`): no more deliveries
    /// from this record, and its local consumers are returned (to be told basic.cancel or
    /// attached again). Unlike `mark_deleted`, the queue's data stays: a classic queue's
    /// stored messages, a quorum queue's group; a remote record's consumers are cancelled at
    /// the serving node.
    pub(crate) fn detach(&self) -> Vec<Arc<Consumer>> {
        let consumers = self.kind.detach(self);
        self.note_change();
        consumers
    }

    /// Ready messages (expired ones leave first, as a client polling the count expects).
    pub fn message_count(self: &Arc<Self>) -> u32 {
        self.kind.message_count(self)
    }

    pub fn consumer_count(&self) -> u32 {
        self.kind.consumer_count()
    }

    pub fn unacked_count(&self) -> u32 {
        self.kind.unacked_count()
    }

    /// Counts and sizes for the monitoring endpoints (see [`QueueDepth`]).
    pub fn depth(&self) -> QueueDepth {
        self.kind.depth()
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Records use (consume, get, declare) for `x-expires`.
    pub fn touch(&self) {
        self.last_used_ms.store(monotonic_ms(), Ordering::Relaxed);
    }

    /// True when the queue has had no consumers and no use for its whole `x-expires`.
    pub fn expired(&self) -> bool {
        let Some(expires_ms) = self.expires_ms() else {
            return false;
        };
        let idle = monotonic_ms().saturating_sub(self.last_used_ms.load(Ordering::Relaxed));
        // Another node expires a queue it serves; its deletion reaches every node.
        idle >= expires_ms && self.kind.unused() == Some(true)
    }

    /// How long the queue may stay unused before it is deleted (`x-expires` / policy).
    pub fn expires_ms(&self) -> Option<u64> {
        self.settings.lock().limits.expires_ms
    }

    /// The limits the queue acts on now (arguments and policies combined).
    pub fn limits(&self) -> Arc<QueueLimits> {
        self.settings.lock().limits.clone()
    }

    /// The policies that apply to the queue (for the management API's `policy`,
    /// `operator_policy` and `effective_policy_definition`).
    pub fn policies(&self) -> AppliedPolicies {
        self.settings.lock().policies.clone()
    }

    pub fn effective_policy_definition(&self) -> Definition {
        self.settings.lock().policies.effective_definition()
    }

    /// Applies a (new) set of policies at once, as RabbitMQ does on a policy change: a
    /// lower length limit drops (dead-letters) the excess from the head under drop-head;
    /// a new `expires` counts from now; a new TTL, dead-letter target or overflow mode
    /// holds for what happens next (messages already queued keep the expiry they got when
    /// they arrived, as in RabbitMQ). Returns true when the policies changed.
    pub fn apply_policies(self: &Arc<Self>, policies: AppliedPolicies) -> bool {
        let limits = effective_queue_limits(&self.arguments, &policies);
        let limits = {
            let mut settings = self.settings.lock();
            if settings.policies == policies {
                return false;
            }
            if settings.limits.expires_ms != limits.expires_ms {
                self.touch();
            }
            // Priority and single-active-consumer are arguments only.
            settings.limits = QueueLimits {
                max_priority: settings.limits.max_priority,
                single_active_consumer: settings.limits.single_active_consumer,
                ..limits
            }
            .shared();
            settings.policies = policies.clone();
            settings.limits.clone()
        };
        self.kind.apply_policies(self, &limits, &policies);
        self.note_change();
        true
    }

    /// Drops from the queue the messages whose store writes failed (docs/STORAGE.md §11).
    pub fn forget_failed(&self, failed: &FailedPublishes) {
        self.kind.forget_failed(self, failed);
        self.note_change();
    }

    /// Gives the queue the messages the store recovered for it at start.
    pub fn restore(&self, recovered: RecoveredQueue) {
        self.kind.restore(self, recovered);
        self.note_change();
    }

    /// See `QueueType::undelivered_in_store`.
    pub fn undelivered_in_store(&self) -> Option<(QueueId, RoaringTreemap)> {
        self.kind.undelivered_in_store(self)
    }
}

/// Consumers whose serving side went (a quorum queue's leader moved or stopped leading here,
/// the link to the node serving the queue was lost): each is attached again where its queue's
/// type can (`QueueType::reattach`: a quorum queue's consumers stay attached, as RabbitMQ's
/// do, and get what they held redelivered by the new leader), else told basic.cancel
/// (consumer_cancel_notify): a consumer of a queue that is gone, of a classic queue whose home
/// node went, or one no client channel holds any more (a forwarding link's consumer on the
/// serving side: its peer attaches its own again, told by `Frame::Moved`).
pub(crate) fn reattach_or_cancel(consumers: Vec<Arc<Consumer>>) {
    for c in consumers {
        let queue = c.queue.upgrade().filter(|_| c.is_attached());
        let reattached = queue
            .as_ref()
            .is_some_and(|queue| queue.kind.reattach(queue, c.clone()));
        if !reattached {
            tracing::debug!(consumer = %c.tag, queue = ?queue.as_ref().map(|q| q.name.clone()), attached = c.is_attached(), "consumer cancelled: its queue is gone, cannot take it again, or refused it");
            let _ = c.send(ConnectionEvent::ConsumerCancelled {
                channel: c.channel,
                consumer_tag: c.tag.clone(),
            });
        }
    }
}

// ---- the handle sessions keep -------------------------------------------------------------

/// `QueueHandle`: what a protocol session keeps of a queue it takes messages from — for a
/// consumer (a 0-9-1 consumer, an AMQP 1.0 sending link) and for every delivery it has not
/// settled. Through it a session settles (ack, requeue, reject), gives back what it holds
/// (a channel that closed, deliveries that never reached the client), fetches for a draining
/// link, counts, and stops consuming (`Broker::stop_consuming`); it cannot declare, purge,
/// bind, delete or re-configure the queue, which sessions do through the vhost by name.
///
/// It is the queue's `Arc` and nothing more: holding a handle costs what holding the queue
/// did, and every call is the `Queue` call it names (one virtual call into the queue type).
#[derive(Debug, Clone)]
pub struct QueueHandle(Arc<Queue>);

impl QueueHandle {
    pub fn new(queue: Arc<Queue>) -> QueueHandle {
        QueueHandle(queue)
    }

    pub fn name(&self) -> &ShortStr {
        &self.0.name
    }

    /// The queue's message counters (delivered, acked, redelivered…), which the session
    /// counts into as it hands out and settles.
    pub fn stats(&self) -> &QueueStats {
        &self.0.stats
    }

    /// Both handles reach the same queue (a session groups settlements per queue).
    pub fn same_queue(&self, other: &QueueHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// `acked` are done, `requeued` go back (marked redelivered), `rejected` are
    /// dead-lettered (`Queue::settle`).
    pub fn settle(
        &self,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        self.0.settle(acked, requeued, rejected)
    }

    /// The unsettled deliveries of a channel or link that went away (`Queue::release`).
    pub fn release(&self, messages: Vec<QueuedMessage>) {
        self.0.release(messages)
    }

    /// Deliveries handed over that never reached the client (`Queue::return_undelivered`).
    pub fn return_undelivered(&self, messages: Vec<QueuedMessage>, were_unacked: bool) {
        self.0.return_undelivered(messages, were_unacked)
    }

    /// The next ready message, for a link that drains (`Queue::get`).
    pub fn get(&self, no_ack: bool) -> Got {
        self.0.get(no_ack)
    }

    /// Ready messages now. Taking the queue's lock, it also waits out a dispatch under way.
    pub fn message_count(&self) -> u32 {
        self.0.message_count()
    }

    /// The queue, for the broker's own rules about it (`Broker::stop_consuming`).
    pub(crate) fn queue(&self) -> &Arc<Queue> {
        &self.0
    }

    pub(crate) fn into_queue(self) -> Arc<Queue> {
        self.0
    }
}
