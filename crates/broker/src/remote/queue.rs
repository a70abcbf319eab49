//! `RemoteQueue`: the record of a queue another node serves, and its `QueueType`: every call
//! forwarded over the link to the serving node (see the folder's index, `remote.rs`).

use super::link::ForwardLink;
use super::peers::{PeerLink, Record};
use super::SettleKind;
use crate::confirm::QueueAnswers;
use crate::confirm::RoutedConfirm;
use crate::consumer::{ConnectionEvent, ConnectionId, Consumer};
use crate::error::AmqpResult;
use crate::message::Message;
use crate::policy::AppliedPolicies;
use crate::queue::{Enqueued, Queue, QueueLimits, QueuedMessage};
use crate::queue_type::{GetLater, QueueDepth, QueueType};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering::Relaxed};
use std::sync::Arc;
use warren_store::Appended;

/// The remote-specific part of a [`Queue`](crate::queue::Queue): where it is served and
/// the link there.
#[derive(Debug)]
pub struct RemoteQueue {
    peer: Arc<PeerLink>,
    record: Arc<Record>,
    /// The serving queue's type (`classic`, `quorum`), for the API and `x-queue-type`.
    served_type: &'static str,
}

impl RemoteQueue {
    /// A record for queue `queue` of `vhost` served by `peer` (bound on its link at once
    /// when there is one, and on every later one). Each binding takes a number from `vias`
    /// (a fresh counter for a record of its own; a quorum queue's delegates share theirs), and
    /// what is delivered over it carries that number (`QueuedMessage::via`): a settle goes
    /// over the binding the message came by, or nowhere.
    pub fn new(
        peer: &Arc<PeerLink>,
        vhost: &str,
        queue: &str,
        served_type: &'static str,
        vias: Arc<AtomicU16>,
    ) -> RemoteQueue {
        let record = Arc::new(Record {
            vhost: vhost.to_owned(),
            queue: queue.to_owned(),
            counts: Arc::default(),
            bound: Mutex::new(None),
            vias,
            retired: AtomicBool::new(false),
        });
        peer.register(&record);
        if let Some(link) = peer.current() {
            let _ = record.bind_on(&link);
        }
        RemoteQueue {
            peer: peer.clone(),
            record,
            served_type,
        }
    }

    pub fn served_type(&self) -> &'static str {
        self.served_type
    }

    /// The serving node's name.
    pub fn node(&self) -> &str {
        self.peer.name()
    }

    pub fn peer(&self) -> &Arc<PeerLink> {
        &self.peer
    }

    /// Whether the serving node is reachable now (a live link to it).
    pub fn is_reachable(&self) -> bool {
        self.peer.is_up()
    }

    /// A classic queue whose home node the failure detector holds down: routing leaves it
    /// out (`VHost::route_keys`), so a mandatory publish to it alone is returned and every
    /// publish to it is confirmed as unroutable, as RabbitMQ does (its lookup finds no live
    /// queue record for a durable queue whose node is down). A link being re-dialled to a
    /// node that is up does not count: publishes then are nacked, never dropped.
    /// A live link wins over the detector's view (the two change at different moments: a
    /// node heard again may be linked before the view is told).
    pub fn home_is_down(&self) -> bool {
        self.served_type == "classic" && self.peer.node_down() && !self.peer.is_up()
    }

    /// The live link, this record's id on it and the binding's number.
    fn bound(&self) -> Option<(Arc<ForwardLink>, u64, u16)> {
        let link = self.peer.current()?;
        let (qid, via) = self.record.bind_on(&link)?;
        Some((link, qid, via))
    }

    /// The link the record is bound on now, if it is still live (what consumers and held
    /// messages were made on: after a reconnect they are gone), with the binding's number. A
    /// retired record keeps its last binding for settling what was delivered through it.
    fn bound_live(&self) -> Option<(Arc<ForwardLink>, u64, u16)> {
        self.record
            .bound
            .lock()
            .as_ref()
            .filter(|(link, _, _)| link.is_alive())
            .cloned()
    }

    pub fn publish(&self, message: &Message, confirm: Option<&Arc<QueueAnswers>>) -> Enqueued {
        match self.bound() {
            Some((link, qid, _)) => link.publish(qid, message, confirm),
            None => {
                // The serving node is unreachable: a confirmed publish is nacked.
                if let Some(c) = confirm {
                    c.expect_one();
                    c.answered(false);
                }
            }
        }
        Enqueued::Accepted
    }

    /// Registers the consumer at the serving node. A record that is unreachable or retired
    /// meanwhile (the link lost, the leader moved while the consumer was being moved there)
    /// gives it back: a classic queue's caller cancels it (its client consumes again), a
    /// quorum queue keeps it waiting for the leader's node (`QuorumQueue::add_consumer`).
    pub fn add_consumer(&self, consumer: Arc<Consumer>) -> Result<(), Arc<Consumer>> {
        match self.bound() {
            Some((link, qid, via)) => link.consume(qid, via, consumer),
            None => Err(consumer),
        }
    }

    pub fn remove_consumer(
        &self,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<Arc<Consumer>> {
        let (link, qid, _) = self.bound_live()?;
        link.cancel(qid, connection, channel, tag)
    }

    pub fn settle(
        &self,
        acked: &[QueuedMessage],
        requeued: &[QueuedMessage],
        rejected: &[QueuedMessage],
    ) {
        let Some((link, qid, via)) = self.bound_live() else {
            // The link the messages came over is gone: the serving node requeued them.
            return;
        };
        for (kind, messages) in [
            (SettleKind::Ack, acked),
            (SettleKind::Requeue, requeued),
            (SettleKind::Reject, rejected),
        ] {
            // Only what came over this binding: what came over an earlier link went back to
            // the queue when that link was lost, and may be held under the same id by another
            // consumer of this node now, whose hold a settle here would end.
            let ids: Vec<u64> = messages
                .iter()
                .filter(|m| m.via == via)
                .map(|m| m.id)
                .collect();
            if !ids.is_empty() {
                link.settle(qid, kind, ids);
            }
        }
    }

    /// Whether a settle through this record can still reach the messages it delivered (its
    /// last link is up).
    pub fn can_settle(&self) -> bool {
        self.bound_live().is_some()
    }

    /// Whether what is stamped `via` came over this record's binding, which is still up
    /// (a settle of it can reach the serving side holding it).
    pub fn delivered_via(&self, via: u16) -> bool {
        self.bound_live().is_some_and(|(_, _, bound)| bound == via)
    }

    pub async fn get(&self, no_ack: bool) -> Option<(QueuedMessage, u32)> {
        let (link, qid, via) = self.bound()?;
        link.get(qid, no_ack, via).await
    }

    /// Forwards the purge; answers the last reported count (as a quorum queue does).
    pub fn purge(&self) -> u32 {
        let count = self.record.counts.messages.swap(0, Relaxed);
        if let Some((link, qid, _)) = self.bound() {
            link.purge(qid);
        }
        count
    }

    /// The record goes (the queue was deleted, or this node now serves it): its consumers
    /// are cancelled on the serving node and returned to be notified here.
    pub fn mark_deleted(&self) -> (Vec<Arc<Consumer>>, u32) {
        // Retired, not forgotten: its binding stays for settles (`settle`), and it never binds
        // again (a consumer added through it after this is cancelled, never orphaned).
        let bound = self.record.retire();
        let consumers = match bound {
            Some((link, qid)) => link.unbind(qid),
            None => Vec::new(),
        };
        (consumers, self.message_count())
    }

    pub fn message_count(&self) -> u32 {
        self.record.counts.messages.load(Relaxed)
    }

    /// Consumers on every node (the serving queue counts the forwarded ones too).
    pub fn consumer_count(&self) -> u32 {
        self.record.counts.consumers.load(Relaxed)
    }

    pub fn has_consumers(&self) -> bool {
        self.consumer_count() > 0
    }

    /// The remote side of a queue record; None for another type.
    pub fn of(queue: &Queue) -> Option<&RemoteQueue> {
        queue.type_state::<RemoteQueue>()
    }
}

impl QueueType for RemoteQueue {
    fn type_name(&self) -> &'static str {
        self.served_type
    }

    fn served_here(&self) -> bool {
        false
    }

    fn confirms_later(&self) -> bool {
        true
    }

    fn answers_get_later(&self) -> bool {
        true
    }

    fn home_node(&self) -> Option<&str> {
        Some(self.node())
    }

    fn is_reachable(&self) -> bool {
        RemoteQueue::is_reachable(self)
    }

    fn home_is_down(&self) -> bool {
        RemoteQueue::home_is_down(self)
    }

    /// Confirmed once the serving node's queue accepted it, and counted there.
    fn enqueue(
        &self,
        _queue: &Arc<Queue>,
        message: &Arc<Message>,
        _stored: Option<Appended>,
        confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued {
        self.publish(message, confirm.map(RoutedConfirm::join))
    }

    fn settle(
        &self,
        _queue: &Arc<Queue>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        RemoteQueue::settle(self, &acked, &requeued, &rejected)
    }

    /// The serving queue checks exclusivity; a refusal comes back as basic.cancel, and so
    /// does a link lost meanwhile (the client consumes again).
    fn add_consumer(&self, _queue: &Arc<Queue>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        if let Err(consumer) = RemoteQueue::add_consumer(self, consumer) {
            tracing::debug!(consumer = %consumer.tag, node = %self.node(), "consumer cancelled: no live link to the queue's node");
            let _ = consumer.send(ConnectionEvent::ConsumerCancelled {
                channel: consumer.channel,
                consumer_tag: consumer.tag.clone(),
            });
        }
        Ok(())
    }

    /// The serving node deletes an auto-delete queue that lost its last consumer.
    fn remove_consumer(
        &self,
        _queue: &Queue,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        let consumer = RemoteQueue::remove_consumer(self, connection, channel, tag)?;
        Some((consumer, false))
    }

    fn get_later<'a>(&'a self, _queue: &'a Arc<Queue>, no_ack: bool) -> GetLater<'a> {
        Box::pin(self.get(no_ack))
    }

    fn purge(&self, _queue: &Queue) -> u32 {
        RemoteQueue::purge(self)
    }

    fn mark_deleted(&self, _queue: &Queue) -> (Vec<Arc<Consumer>>, u32) {
        RemoteQueue::mark_deleted(self)
    }

    fn detach(&self, _queue: &Queue) -> Vec<Arc<Consumer>> {
        RemoteQueue::mark_deleted(self).0
    }

    fn message_count(&self, _queue: &Arc<Queue>) -> u32 {
        RemoteQueue::message_count(self)
    }

    fn consumer_count(&self) -> u32 {
        RemoteQueue::consumer_count(self)
    }

    /// Held on the serving node, which counts them.
    fn unacked_count(&self) -> u32 {
        0
    }

    /// Counted by the serving node.
    fn depth(&self) -> QueueDepth {
        QueueDepth::default()
    }

    /// The serving node expires the queue; its deletion reaches every node.
    fn unused(&self) -> Option<bool> {
        None
    }

    /// The serving node acts on the queue's policies.
    fn apply_policies(&self, _: &Arc<Queue>, _: &Arc<QueueLimits>, _: &AppliedPolicies) {}

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
