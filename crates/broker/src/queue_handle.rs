//! `QueueHandle`: what a protocol session keeps of a queue it takes messages from — for a
//! consumer (a 0-9-1 consumer, an AMQP 1.0 sending link) and for every delivery it has not
//! settled. Through it a session settles (ack, requeue, reject), gives back what it holds
//! (a channel that closed, deliveries that never reached the client), fetches for a draining
//! link, counts, and stops consuming (`Broker::stop_consuming`); it cannot declare, purge,
//! bind, delete or re-configure the queue, which sessions do through the vhost by name.
//!
//! It is the queue's `Arc` and nothing more: holding a handle costs what holding the queue
//! did, and every call is the `Queue` call it names (one virtual call into the queue type).

use crate::queue::Queue;
use crate::queue_type::Got;
use crate::queued_message::QueuedMessage;
use crate::stats::MessageStats;
use std::sync::Arc;
use warren_codec::ShortStr;

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
    pub fn stats(&self) -> &MessageStats {
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
