//! The remote queue type: the record a node keeps for a queue another node serves (a
//! classic queue's home node, a quorum queue's leader), forwarding every operation to it.
//!
//! A client may connect to any node and use any queue. Definitions are the same on every
//! node, so every node has a [`Queue`] for every queue; on the serving node it is the real
//! queue, on the others its kind is [`QueueKind::Remote`](crate::queue::QueueKind): a
//! [`RemoteQueue`] that sends what the channel asks over the [`ForwardLink`] to the serving
//! node. The channel and publish paths see the same `Queue` methods as for the other types
//! (the queue-type interface); a remote queue answers them as a quorum queue does:
//! - publish: forwarded; with a publisher confirm, the confirm (the publish's
//!   `RoutedConfirm`, joined as a quorum queue joins it, so the channel keeps one kind of
//!   pending confirm) is answered when the serving queue accepted the
//!   message by its own rule — fsync'd for a durable queue's persistent message, committed
//!   for a quorum queue — and nacked when it refused it or the link is lost;
//! - consume: the serving node registers a consumer with the same prefetch, no-ack and
//!   exclusive flags; its deliveries come back and are handed to the local consumer as
//!   `ConnectionEvent::Deliver` (redelivered flag and headers as the serving queue set
//!   them), carrying the serving queue's message id, so ack / nack / reject name the
//!   serving node's message without a translation table;
//! - basic.get: answered asynchronously (`ConnectionEvent::QuorumGot`), as for quorum;
//! - purge, message and consumer counts: the serving node reports its counts over the link
//!   whenever they change (a declare-ok on a forwarding node shows them as of the last
//!   report); purge answers the last count and forwards.
//!
//! The serving side (`remote/serve.rs`) acts toward the real queue as a connection does:
//! its consumers are registered with the link's own connection id and an events channel the
//! link drains into frames, so the queue types need no notion of remote peers. The link
//! (`remote/link.rs`) is one connection per node pair, carrying both directions' requests
//! for all queues and consumers (`remote/frame.rs`).
//!
//! Failures: when the link is lost, local consumers of remote queues get basic.cancel
//! (`ConnectionEvent::ConsumerCancelled`, RabbitMQ's consumer_cancel_notify when a queue's
//! node goes down), unconfirmed publishes are nacked, acks of messages the client held
//! become no-ops — the serving node requeues those (redelivered) as a closing channel's are.
//! A serving queue deleted cancels its remote consumers the same way.

mod frame;
mod link;
mod serve;

pub use frame::{Frame, FrameError, SettleKind, MAX_FRAME_BYTES};
pub use link::{open, ForwardLink};

use crate::consumer::{ConnectionId, Consumer};
use crate::message::Message;
use crate::queue::{Enqueued, QueuedMessage};
use crate::quorum::QuorumConfirm;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// The serving queue's counts as last reported over the link.
#[derive(Debug, Default)]
pub struct RemoteCounts {
    messages: AtomicU32,
    consumers: AtomicU32,
}

/// The remote-specific part of a [`Queue`](crate::queue::Queue): where it is served and
/// the link there.
#[derive(Debug)]
pub struct RemoteQueue {
    link: Arc<ForwardLink>,
    /// The queue's id on the link.
    qid: u64,
    /// The serving queue's type (`classic`, `quorum`), for the API and `x-queue-type`.
    served_type: &'static str,
    counts: Arc<RemoteCounts>,
}

impl RemoteQueue {
    /// A record for queue `queue` of `vhost` served at the other end of `link`.
    pub fn new(
        link: &Arc<ForwardLink>,
        vhost: &str,
        queue: &str,
        served_type: &'static str,
    ) -> RemoteQueue {
        let counts = Arc::new(RemoteCounts::default());
        let qid = link.bind(vhost, queue, counts.clone());
        RemoteQueue {
            link: link.clone(),
            qid,
            served_type,
            counts,
        }
    }

    pub fn served_type(&self) -> &'static str {
        self.served_type
    }

    pub fn link(&self) -> &Arc<ForwardLink> {
        &self.link
    }

    pub fn publish(&self, message: &Message, confirm: Option<&Arc<QuorumConfirm>>) -> Enqueued {
        self.link.publish(self.qid, message, confirm);
        Enqueued::Accepted
    }

    pub fn add_consumer(&self, consumer: Arc<Consumer>) {
        self.link.consume(self.qid, consumer);
    }

    pub fn remove_consumer(
        &self,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<Arc<Consumer>> {
        self.link.cancel(self.qid, connection, channel, tag)
    }

    pub fn settle(
        &self,
        acked: &[QueuedMessage],
        requeued: &[QueuedMessage],
        rejected: &[QueuedMessage],
    ) {
        for (kind, messages) in [
            (SettleKind::Ack, acked),
            (SettleKind::Requeue, requeued),
            (SettleKind::Reject, rejected),
        ] {
            if !messages.is_empty() {
                let ids = messages.iter().map(|m| m.id).collect();
                self.link.settle(self.qid, kind, ids);
            }
        }
    }

    pub async fn get(&self, no_ack: bool) -> Option<(QueuedMessage, u32)> {
        self.link.get(self.qid, no_ack).await
    }

    /// Forwards the purge; answers the last reported count (as a quorum queue does).
    pub fn purge(&self) -> u32 {
        let count = self.counts.messages.swap(0, Relaxed);
        self.link.purge(self.qid);
        count
    }

    /// The record goes (the queue was deleted, or this node now serves it): its consumers
    /// are cancelled on the serving node and returned to be notified here.
    pub fn mark_deleted(&self) -> (Vec<Arc<Consumer>>, u32) {
        (self.link.unbind(self.qid), self.message_count())
    }

    pub fn message_count(&self) -> u32 {
        self.counts.messages.load(Relaxed)
    }

    /// Consumers on every node (the serving queue counts the forwarded ones too).
    pub fn consumer_count(&self) -> u32 {
        self.counts.consumers.load(Relaxed)
    }

    pub fn has_consumers(&self) -> bool {
        self.consumer_count() > 0
    }
}
