//! Churn counters: how many connections, channels and queues came and went since the broker
//! started, as RabbitMQ's `connection_churn_metrics` (what Prometheus shows as
//! `rabbitmq_connections_opened_total`, `rabbitmq_queues_created_total`, …). They move on
//! open, close, declare and delete — never per message — so a relaxed atomic each is all
//! they need. Live counts are the differences (opened − closed).
//!
//! `NodeCounters` gathers them with the publish counters: one per broker, shared by its
//! vhosts, so that the node's totals outlive a deleted vhost and never go backwards.

use crate::auth_attempts::AuthAttempts;
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
    pub auth_attempts: AuthAttempts,
}

/// Messages that left a queue dead, by the queue's type, the reason and the dead-letter
/// strategy — RabbitMQ's `messages_dead_lettered_*` global counters — and the at-least-once
/// ones whose copies were confirmed (`messages_dead_lettered_confirmed`).
#[derive(Debug, Default)]
pub struct DeadLettered {
    /// [queue type][reason][strategy]
    counts: [[[AtomicU64; 3]; 4]; 2],
    /// At-least-once dead letters whose copies every target confirmed (quorum queues).
    confirmed: AtomicU64,
}

/// The queue types RabbitMQ's dead-letter counters are labelled with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterSource {
    Classic,
    Quorum,
}

/// How a queue dead-letters (RabbitMQ's `dead_letter_strategy` label): `Disabled` without a
/// dead-letter exchange (the message is dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterStrategy {
    Disabled,
    AtMostOnce,
    AtLeastOnce,
}

impl DeadLettered {
    fn counter(
        &self,
        source: DeadLetterSource,
        reason: DeathReason,
        strategy: DeadLetterStrategy,
    ) -> &AtomicU64 {
        let by_type = &self.counts[source as usize];
        let by_reason = match reason {
            DeathReason::Rejected => &by_type[0],
            DeathReason::Expired => &by_type[1],
            DeathReason::MaxLen => &by_type[2],
            DeathReason::DeliveryLimit => &by_type[3],
        };
        &by_reason[strategy as usize]
    }

    pub fn add(
        &self,
        source: DeadLetterSource,
        reason: DeathReason,
        strategy: DeadLetterStrategy,
        n: u64,
    ) {
        add(self.counter(source, reason, strategy), n);
    }

    pub fn read(
        &self,
        source: DeadLetterSource,
        reason: DeathReason,
        strategy: DeadLetterStrategy,
    ) -> u64 {
        read(self.counter(source, reason, strategy))
    }

    pub fn add_confirmed(&self, n: u64) {
        add(&self.confirmed, n);
    }

    pub fn confirmed(&self) -> u64 {
        read(&self.confirmed)
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
