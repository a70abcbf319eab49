//! Churn counters: how many connections, channels and queues came and went since the broker
//! started, as RabbitMQ's `connection_churn_metrics` (what Prometheus shows as
//! `rabbitmq_connections_opened_total`, `rabbitmq_queues_created_total`, …). They move on
//! open, close, declare and delete — never per message — so a relaxed atomic each is all
//! they need. Live counts are the differences (opened − closed).
//!
//! `NodeCounters` gathers them with the publish counters: one per broker, shared by its
//! vhosts, so that the node's totals outlive a deleted vhost and never go backwards.

use crate::dead_letter::DeathReason;
use crate::publish_counters::PublishCounters;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The broker's monitoring counters (RabbitMQ keeps these per node).
#[derive(Debug, Default)]
pub struct NodeCounters {
    pub connections: ConnectionChurn,
    pub queues: QueueChurn,
    pub published: PublishCounters,
    pub dead_lettered: DeadLettered,
}

/// Messages that left a queue dead (rejected, expired, dropped over a length limit), by
/// reason and by whether the queue had a dead-letter exchange — RabbitMQ's
/// `messages_dead_lettered` global counters with their `at_most_once` and `disabled`
/// strategies for classic queues.
#[derive(Debug, Default)]
pub struct DeadLettered {
    /// [reason][0: to a dead-letter exchange, 1: dropped (no exchange set)]
    counts: [[AtomicU64; 2]; 4],
}

impl DeadLettered {
    fn counter(&self, reason: DeathReason, to_exchange: bool) -> &AtomicU64 {
        let by_reason = match reason {
            DeathReason::Rejected => &self.counts[0],
            DeathReason::Expired => &self.counts[1],
            DeathReason::MaxLen => &self.counts[2],
            DeathReason::DeliveryLimit => &self.counts[3],
        };
        &by_reason[usize::from(!to_exchange)]
    }

    pub fn add(&self, reason: DeathReason, to_exchange: bool, n: u64) {
        add(self.counter(reason, to_exchange), n);
    }

    pub fn read(&self, reason: DeathReason, to_exchange: bool) -> u64 {
        read(self.counter(reason, to_exchange))
    }
}

/// Connections and channels.
#[derive(Debug, Default)]
pub struct ConnectionChurn {
    /// Connections that completed connection.open (RabbitMQ counts them once the vhost
    /// granted access), and those of them that have since closed.
    pub connections_opened: AtomicU64,
    pub connections_closed: AtomicU64,
    pub channels_opened: AtomicU64,
    pub channels_closed: AtomicU64,
}

/// Queues, in every vhost.
#[derive(Debug, Default)]
pub struct QueueChurn {
    /// Every non-passive queue.declare that passed the name checks, new queue or not.
    pub declared: AtomicU64,
    pub created: AtomicU64,
    /// Deleted by any means: queue.delete, auto-delete, x-expires, an exclusive owner's
    /// close.
    pub deleted: AtomicU64,
}

/// Adds one to a churn counter.
#[inline]
pub fn bump(counter: &AtomicU64) {
    add(counter, 1);
}

/// Adds `n` to a churn counter (a connection closing closes all its channels at once).
#[inline]
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}

/// Reads a churn counter.
#[inline]
pub fn read(counter: &AtomicU64) -> u64 {
    counter.load(Relaxed)
}
