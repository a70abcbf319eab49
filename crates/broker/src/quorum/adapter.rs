//! The quorum queue as a queue type: each `QueueType` call on a quorum queue's record
//! becomes a command proposed to its group (or a read of its state).

use super::config::{dead_letter_at_least_once, queue_config};
use super::queue::{QuorumQueue, Requeued};
use crate::churn::DeadLetterSource;
use crate::confirm::RoutedConfirm;
use crate::connection_id::ConnectionId;
use crate::consumer::Consumer;
use crate::error::AmqpResult;
use crate::message::Message;
use crate::policy::AppliedPolicies;
use crate::queue::{Enqueued, Queue, QueueLimits, QueuedMessage};
use crate::queue_type::{GetLater, QueueDepth, QueueType, Replicas};
use crate::stats::MessageStats;
use std::sync::Arc;
use std::time::Instant;
use warren_store::Appended;

impl QueueType for QuorumQueue {
    fn type_name(&self) -> &'static str {
        "quorum"
    }

    fn served_here(&self) -> bool {
        self.is_leading()
    }

    /// Its counts are its member's state, which marks the queue as entries apply (see
    /// `group::start`), and its leader's consumers, which come and go through the log too.
    fn counts_move_unmarked(&self) -> bool {
        false
    }

    fn confirms_later(&self) -> bool {
        true
    }

    fn answers_get_later(&self) -> bool {
        true
    }

    /// RabbitMQ 3.10's quorum queues refuse a consumer on a channel with a global prefetch
    /// limit.
    fn supports_global_qos(&self) -> bool {
        false
    }

    /// Confirmed once the group committed it.
    fn enqueue(
        &self,
        queue: &Arc<Queue>,
        message: &Arc<Message>,
        _stored: Option<Appended>,
        confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued {
        MessageStats::add(&queue.stats.publish, 1);
        QuorumQueue::enqueue(self, message, confirm.map(RoutedConfirm::join));
        Enqueued::Accepted
    }

    fn settle(
        &self,
        _queue: &Arc<Queue>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        QuorumQueue::settle(self, &acked, &requeued, &rejected, Requeued::ByClient)
    }

    /// Back at the head, where RabbitMQ returns a downed consumer's messages.
    fn release(&self, _queue: &Arc<Queue>, messages: Vec<QueuedMessage>) {
        QuorumQueue::settle(self, &[], &messages, &[], Requeued::ChannelGone)
    }

    /// Back at the head, not counted as failed deliveries (their client's node went).
    fn release_disconnected(&self, _queue: &Arc<Queue>, messages: Vec<QueuedMessage>) {
        QuorumQueue::settle(self, &[], &messages, &[], Requeued::NeverReached)
    }

    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        QuorumQueue::add_consumer(self, queue, consumer)
    }

    /// Attached again through the new leader's node, or here until a leader is known.
    fn reattach(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> bool {
        !self.is_deleted() && QuorumQueue::add_consumer(self, queue, consumer).is_ok()
    }

    /// A quorum queue is never auto-delete.
    fn remove_consumer(
        &self,
        queue: &Queue,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        let consumer = QuorumQueue::remove_consumer(self, connection, channel, tag)?;
        queue.touch();
        Some((consumer, false))
    }

    fn get_later<'a>(&'a self, queue: &'a Arc<Queue>, no_ack: bool) -> GetLater<'a> {
        Box::pin(self.get(queue, no_ack))
    }

    fn purge(&self, _queue: &Queue) -> u32 {
        QuorumQueue::purge(self)
    }

    fn mark_deleted(&self, _queue: &Queue) -> (Vec<Arc<Consumer>>, u32) {
        QuorumQueue::mark_deleted(self)
    }

    fn detach(&self, _queue: &Queue) -> Vec<Arc<Consumer>> {
        self.detach_consumers()
    }

    fn message_count(&self, _queue: &Arc<Queue>) -> u32 {
        QuorumQueue::message_count(self)
    }

    fn consumer_count(&self) -> u32 {
        QuorumQueue::consumer_count(self)
    }

    fn unacked_count(&self) -> u32 {
        QuorumQueue::unacked_count(self)
    }

    /// A quorum queue's messages are all in memory (and in its log).
    fn depth(&self) -> QueueDepth {
        let ready = u64::from(QuorumQueue::message_count(self));
        let ready_bytes = self.ready_bytes();
        let unacked = QuorumQueue::unacked_count(self);
        let unacked_bytes = self.unacked_bytes();
        let consumers = QuorumQueue::consumer_count(self);
        QueueDepth {
            ready,
            ready_bytes,
            ready_in_memory: ready,
            ready_in_memory_bytes: ready_bytes,
            paged_out: 0,
            paged_out_bytes: 0,
            unacked: u64::from(unacked),
            unacked_bytes,
            // Every message of a quorum queue is in its log.
            persistent: ready + u64::from(unacked),
            persistent_bytes: ready_bytes + unacked_bytes,
            head_timestamp_s: None,
            consumers: u64::from(consumers),
            consumer_capacity: Some(match consumers {
                0 => 0.0,
                _ => self.consumer_use.lock().capacity_at(Instant::now()),
            }),
        }
    }

    fn unused(&self) -> Option<bool> {
        Some(!self.has_consumers())
    }

    fn apply_policies(
        &self,
        queue: &Arc<Queue>,
        limits: &Arc<QueueLimits>,
        policies: &AppliedPolicies,
    ) {
        let config = queue_config(&queue.arguments, policies);
        let at_least_once = dead_letter_at_least_once(
            &queue.arguments,
            policies,
            &config,
            limits.dead_letter_exchange.is_some(),
        );
        self.set_config(config, at_least_once);
    }

    fn dead_letter_source(&self) -> DeadLetterSource {
        DeadLetterSource::Quorum
    }

    /// RabbitMQ's `members` and `leader`: from the group's own view when this node is a
    /// member that runs, else as declared and last learned.
    fn replicas(&self) -> Option<Replicas> {
        let group = self.group_status();
        Some(Replicas {
            members: group.as_ref().map_or_else(
                || self.member_ids(),
                |g| g.members.iter().map(|m| m.node).collect(),
            ),
            leader: group.as_ref().and_then(|g| g.leader).or(self.leader()),
            group,
            commit_latency: self.commit_latency(),
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
