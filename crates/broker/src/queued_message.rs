//! One message as a queue holds it: the shared message, the queue's own id for it, its
//! delivery state and, when it is in the store for this queue, where. The ready list, the
//! consumers' deliveries and the queue all pass these around; they live here, apart from
//! `queue.rs`, so that those modules need not depend on the queue itself.

use crate::message::Message;
use std::sync::Arc;
use std::time::Instant;
use warren_store::{Location, MessageId};

/// Where a persisted message lives in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreRef {
    pub id: MessageId,
    pub location: Location,
}

#[derive(Debug, Clone)]
pub struct QueuedMessage {
    pub id: u64,
    pub message: Arc<Message>,
    pub redelivered: bool,
    /// Failed deliveries of this queue's copy: what an AMQP 1.0 consumer's header says as
    /// delivery-count. Per queued copy, as RabbitMQ 4's classic queue keeps it (a map from
    /// its sequence id to the count in `rabbit_variable_queue`), so a message routed to two
    /// queues counts twice separately. It grows when a delivery ends as failed — modified
    /// with delivery-failed, rejected (then the dead-lettered copy starts from it), or
    /// still unsettled when its consumer went (RabbitMQ's `requeue_and_run/3`) — not on a
    /// release or a 0-9-1 requeue. Sits in the padding after `redelivered`: no extra bytes.
    pub delivery_count: u32,
    /// The forwarding binding this copy came by — a remote queue record's, or a quorum queue
    /// delegate's, on one link to the serving node (`crate::remote`) — by its number within
    /// the queue; 0 for a copy this node's own queue delivered. A settle goes back over that
    /// binding only, never another one (whose serving side may hold the same message id for
    /// another consumer of this node). Sits with `redelivered` and `delivery_count` in one
    /// word: no extra bytes.
    pub via: u16,
    /// When the message expires (queue TTL or its own `expiration`, whichever is sooner).
    pub expires_at: Option<Instant>,
    /// Set when the message is in the store for this queue (persisted, or written to page
    /// a transient message out of memory); it leaves the store when it leaves the queue.
    pub store_ref: Option<StoreRef>,
}
