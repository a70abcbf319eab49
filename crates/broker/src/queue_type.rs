//! The queue-type behaviour (RabbitMQ's `rabbit_queue_type`): what differs between queue
//! types, written once per type and reached through one [`Queue`] record. Classic queues
//! (`crate::classic`), quorum queues (`crate::quorum`) and the record of a queue another node
//! serves (`crate::remote`) implement [`QueueType`]; routing, channels, AMQP 1.0 sessions,
//! the HTTP API and Prometheus call the record's methods and never ask which type it is.
//!
//! A type gets the record it belongs to with each call: the record holds what every type
//! shares (name, flags, arguments, policies and limits, statistics, the vhost it is in), the
//! type holds where its messages live and who delivers them. A new type (a stream) is one
//! more implementation, with no branch to add anywhere else.

use crate::churn::DeadLetterSource;
use crate::confirm::RoutedConfirm;
use crate::consumer::{ConnectionId, Consumer};
use crate::error::AmqpResult;
use crate::message::Message;
use crate::policy::AppliedPolicies;
use crate::queue::{Queue, QueueLimits};
use crate::queued_message::QueuedMessage;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_quorum::status::GroupStatus;
use warren_quorum::types::NodeId;
use warren_store::{Appended, FailedPublishes, QueueId, RecoveredQueue, RoaringTreemap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Stored or handed to a consumer.
    Accepted,
    /// Refused by `x-overflow=reject-publish`: a confirming publisher gets a nack.
    Rejected,
}

/// What basic.get takes from a queue: the message and how many remain.
pub type Got = Option<(QueuedMessage, u32)>;

/// A basic.get answered asynchronously (`QueueType::get_later`).
pub type GetLater<'a> = Pin<Box<dyn Future<Output = Got> + Send + 'a>>;

/// Ready messages are split by where they are: in memory or only in the store (the paged
/// tail, RabbitMQ's "paged out"). One consistent reading for the monitoring endpoints
/// (Prometheus, the HTTP API); it expires nothing (a scrape must not change the queue), so
/// it may count messages whose TTL has passed but which nothing has dropped yet.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueDepth {
    pub ready: u64,
    pub ready_bytes: u64,
    /// Ready messages held in memory, and their body bytes.
    pub ready_in_memory: u64,
    pub ready_in_memory_bytes: u64,
    /// Ready messages on disk only (the paged tail), and their body bytes.
    pub paged_out: u64,
    pub paged_out_bytes: u64,
    /// Delivered to consumers and not yet acknowledged, and their body bytes.
    pub unacked: u64,
    pub unacked_bytes: u64,
    /// Persistent messages (ready and unacknowledged) of a durable queue, and their body
    /// bytes (RabbitMQ's `messages_persistent`: a transient queue keeps none).
    pub persistent: u64,
    pub persistent_bytes: u64,
    /// The head message's `timestamp` property in seconds, when the head is in memory and
    /// has one (RabbitMQ's `head_message_timestamp`).
    pub head_timestamp_s: Option<u64>,
    pub consumers: u64,
    /// The share of recent time the consumers had room for what was ready, 0 to 1, 0
    /// without consumers (`consumer_use.rs`); None where this node does not measure it.
    pub consumer_capacity: Option<f64>,
}

/// A replicated queue's members as this node knows them (RabbitMQ's `members`, `leader`),
/// and its Raft group as this node's member sees it (None while the group starts, and on a
/// node that is no member).
#[derive(Debug, Clone)]
pub struct Replicas {
    pub members: Vec<NodeId>,
    pub leader: Option<NodeId>,
    pub group: Option<GroupStatus>,
    /// How long the last entry this node's member proposed as leader took to commit (None
    /// before it led and committed one).
    pub commit_latency: Option<std::time::Duration>,
}

/// What every queue type does. Methods that can deliver get the record as `&Arc<Queue>`:
/// a delivery names the queue it came from.
pub trait QueueType: Send + Sync + std::fmt::Debug + 'static {
    /// The type's name as RabbitMQ's API and `x-queue-type` spell it.
    fn type_name(&self) -> &'static str;

    /// Whether this node serves the queue: its home for a classic queue, its group's leader
    /// for a quorum queue, never a record of a queue another node serves. Exactly one node
    /// serves a queue at a time, so per-node figures summed over the nodes (Prometheus)
    /// count each queue once, as RabbitMQ's do.
    fn served_here(&self) -> bool;

    /// Whether the queue's counts can move without it marking itself (`Queue::note_change`,
    /// read through `queue_activity.rs`): a record of a queue another node serves, whose
    /// counts arrive in that node's reports. Readers keep visiting such a queue; the others
    /// only when marked (a quorum queue marks itself on every applied entry and leader
    /// change, on whichever member).
    fn counts_move_unmarked(&self) -> bool {
        !self.served_here()
    }

    /// Whether a publisher confirm waits for the queue's own answer (it joins the publish's
    /// [`RoutedConfirm`]) rather than for the message store alone.
    fn confirms_later(&self) -> bool;

    /// Whether basic.get is answered asynchronously (`get_later`) rather than by `get`.
    fn answers_get_later(&self) -> bool;

    /// Whether a consumer may come from a channel with a global prefetch limit.
    fn supports_global_qos(&self) -> bool {
        true
    }

    /// The node that serves the queue when it is not this one (a record's home).
    fn home_node(&self) -> Option<&str> {
        None
    }

    /// False while the node that holds the queue's messages cannot be reached.
    fn is_reachable(&self) -> bool {
        true
    }

    /// The node that holds the queue's messages is down (a classic queue's home): a
    /// publish leaves it out, as RabbitMQ's routing does.
    fn home_is_down(&self) -> bool {
        false
    }

    /// Takes one routed message. `stored` is its append to the message store, if the publish
    /// made one for the queues that keep messages there; `confirm` is the publish's confirm
    /// when the publisher confirms, which a type that confirms on its own joins.
    fn enqueue(
        &self,
        queue: &Arc<Queue>,
        message: &Arc<Message>,
        stored: Option<Appended>,
        confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued;

    /// Settles deliveries: `acked` are done, `requeued` go back (marked redelivered),
    /// `rejected` are dead-lettered.
    fn settle(
        &self,
        queue: &Arc<Queue>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    );

    /// Takes back the unacked deliveries of a channel that went away.
    fn release(&self, queue: &Arc<Queue>, messages: Vec<QueuedMessage>) {
        self.settle(queue, Vec::new(), messages, Vec::new());
    }

    /// Takes back deliveries whose client's node went (a forwarding link lost): as
    /// `release`, but not failed deliveries where the type counts them toward a delivery
    /// limit (RabbitMQ's `noconnection`).
    fn release_disconnected(&self, queue: &Arc<Queue>, messages: Vec<QueuedMessage>) {
        self.release(queue, messages)
    }

    /// Takes back messages handed to a connection that never reached the client (its
    /// channel closed first); `were_unacked` is false for a no-ack consumer's, which a type
    /// that settles no-ack deliveries when it hands them over has already let go.
    fn return_undelivered(
        &self,
        queue: &Arc<Queue>,
        messages: Vec<QueuedMessage>,
        were_unacked: bool,
    ) {
        if were_unacked {
            self.release(queue, messages);
        }
    }

    /// Credit was freed somewhere: deliver what waits. (A type paced by its own prefetch
    /// ignores it.)
    fn kick(&self, _queue: &Arc<Queue>) {}

    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> AmqpResult<()>;

    /// Takes again a consumer whose serving side went (`queue::reattach_or_cancel`); false
    /// when the type cannot (the consumer is then told basic.cancel).
    fn reattach(&self, _queue: &Arc<Queue>, _consumer: Arc<Consumer>) -> bool {
        false
    }

    /// Removes a consumer by channel and tag. Returns it, and whether the queue is now an
    /// auto-delete queue that lost its last consumer (the caller deletes it).
    fn remove_consumer(
        &self,
        queue: &Queue,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)>;

    /// basic.get answered at once (None when empty, and for a type that answers later).
    fn get(&self, _queue: &Arc<Queue>, _no_ack: bool) -> Got {
        None
    }

    /// basic.get answered asynchronously (`answers_get_later`).
    fn get_later<'a>(&'a self, _queue: &'a Arc<Queue>, _no_ack: bool) -> GetLater<'a> {
        Box::pin(async { None })
    }

    /// Drops every ready message; returns how many.
    fn purge(&self, queue: &Queue) -> u32;

    /// The queue is deleted: empties it; returns the consumers to notify and how many ready
    /// messages it held.
    fn mark_deleted(&self, queue: &Queue) -> (Vec<Arc<Consumer>>, u32);

    /// This node stops serving the queue through this record: returns its local consumers
    /// (to be attached elsewhere or told basic.cancel). The queue's data stays.
    fn detach(&self, queue: &Queue) -> Vec<Arc<Consumer>>;

    /// Ready messages (expired ones leave first, as a client polling the count expects).
    fn message_count(&self, queue: &Arc<Queue>) -> u32;

    fn consumer_count(&self) -> u32;

    fn unacked_count(&self) -> u32;

    fn depth(&self) -> QueueDepth;

    /// Whether the queue has no consumers, for `x-expires`; None when another node decides
    /// its expiry.
    fn unused(&self) -> Option<bool>;

    /// The queue's policies changed: `limits` is what it acts on from now on.
    fn apply_policies(
        &self,
        queue: &Arc<Queue>,
        limits: &Arc<QueueLimits>,
        policies: &AppliedPolicies,
    );

    /// The counters its dead letters count under.
    fn dead_letter_source(&self) -> DeadLetterSource {
        DeadLetterSource::Classic
    }

    /// The members of a replicated queue.
    fn replicas(&self) -> Option<Replicas> {
        None
    }

    /// The store reports publishes whose records it could not write (docs/STORAGE.md §11).
    fn forget_failed(&self, _queue: &Queue, _failed: &FailedPublishes) {}

    /// The store recovered these messages for the queue at start.
    fn restore(&self, _queue: &Queue, _recovered: RecoveredQueue) {}

    /// At a clean stop: the queue's id in the store and the store ids of its messages that
    /// were never delivered, for the store's clean-shutdown record (a restart marks the
    /// others redelivered). None for a type that keeps no messages in the store.
    fn undelivered_in_store(&self, _queue: &Queue) -> Option<(QueueId, RoaringTreemap)> {
        None
    }

    /// For the type's own code (cluster and recovery) to reach its state through the
    /// record; nothing outside a type's own module asks.
    fn as_any(&self) -> &dyn Any;
}
