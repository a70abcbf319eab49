//! Message counters as RabbitMQ's management `message_stats`: monotonically growing totals
//! kept by the object they describe (a channel, a queue, an exchange). Each is a relaxed
//! atomic bumped on the path that does the work — no lock, no allocation; readers (the HTTP
//! API, Prometheus) take snapshots and turn the differences into rates.
//!
//! `MessageStats` serves channels and exchanges, each filling the counters that apply to it
//! (channels: publish, confirm, return_unroutable, deliver…; exchanges: publish_in,
//! publish_out). A queue has `QueueStats`, only the counters a queue moves: a broker holds
//! up to millions of queues, and the six it never moves were 48 bytes in each.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters, owned by a channel, queue or exchange.
#[derive(Debug, Default)]
pub struct MessageStats {
    /// Messages published (channel: by its client; queue: routed to it).
    pub publish: AtomicU64,
    /// Messages routed into an exchange (publish_in) and routed out of it to a queue
    /// (publish_out).
    pub publish_in: AtomicU64,
    pub publish_out: AtomicU64,
    /// Publisher confirms sent (acks, counted per message).
    pub confirm: AtomicU64,
    /// Mandatory messages returned as unroutable.
    pub return_unroutable: AtomicU64,
    /// Unroutable messages dropped (not mandatory).
    pub drop_unroutable: AtomicU64,
    /// Deliveries to consumers that acknowledge, and to no-ack consumers.
    pub deliver: AtomicU64,
    pub deliver_no_ack: AtomicU64,
    /// basic.get answers with a message (acking and no-ack), and empty ones.
    pub get: AtomicU64,
    pub get_no_ack: AtomicU64,
    pub get_empty: AtomicU64,
    /// Deliveries (consume or get) of messages that were delivered before.
    pub redeliver: AtomicU64,
    /// Acknowledgements received.
    pub ack: AtomicU64,
}

/// A queue's counters (RabbitMQ's queue `message_stats`): messages routed to it, handed
/// out (consume or get), redelivered and acknowledged.
#[derive(Debug, Default)]
pub struct QueueStats {
    pub publish: AtomicU64,
    pub deliver: AtomicU64,
    pub deliver_no_ack: AtomicU64,
    pub get: AtomicU64,
    pub get_no_ack: AtomicU64,
    pub redeliver: AtomicU64,
    pub ack: AtomicU64,
}

impl QueueStats {
    pub fn snapshot(&self) -> MessageCounts {
        MessageCounts {
            publish: self.publish.load(Relaxed),
            deliver: self.deliver.load(Relaxed),
            deliver_no_ack: self.deliver_no_ack.load(Relaxed),
            get: self.get.load(Relaxed),
            get_no_ack: self.get_no_ack.load(Relaxed),
            redeliver: self.redeliver.load(Relaxed),
            ack: self.ack.load(Relaxed),
            ..MessageCounts::default()
        }
    }
}

/// Which counter a delivery to a consumer, or a basic.get answer, moves: the acking or the
/// no-ack one. Channels and queues count both, each in its own counters.
pub trait HandedOut {
    fn delivered(&self, no_ack: bool) -> &AtomicU64;
    fn got(&self, no_ack: bool) -> &AtomicU64;
}

/// Both kinds of counters name the four alike.
macro_rules! handed_out_by_field {
    ($($stats:ty),*) => {$(
        impl HandedOut for $stats {
            fn delivered(&self, no_ack: bool) -> &AtomicU64 {
                if no_ack {
                    &self.deliver_no_ack
                } else {
                    &self.deliver
                }
            }

            fn got(&self, no_ack: bool) -> &AtomicU64 {
                if no_ack {
                    &self.get_no_ack
                } else {
                    &self.get
                }
            }
        }
    )*};
}

handed_out_by_field!(MessageStats, QueueStats);

/// A snapshot of `MessageStats`, in plain numbers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MessageCounts {
    pub publish: u64,
    pub publish_in: u64,
    pub publish_out: u64,
    pub confirm: u64,
    pub return_unroutable: u64,
    pub drop_unroutable: u64,
    pub deliver: u64,
    pub deliver_no_ack: u64,
    pub get: u64,
    pub get_no_ack: u64,
    pub get_empty: u64,
    pub redeliver: u64,
    pub ack: u64,
}

impl MessageStats {
    /// Adds `n` to one counter. Relaxed: a counter orders nothing, and readers only need each
    /// value to grow.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// `add` for a counter only its owner's task writes (a channel's, from its connection's
    /// task): a plain load and store instead of a locked read-modify-write, which costs tens
    /// of cycles per message on the hot path. Readers see each value grow as with `add`.
    #[inline]
    pub fn add_own(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub fn snapshot(&self) -> MessageCounts {
        MessageCounts {
            publish: self.publish.load(Relaxed),
            publish_in: self.publish_in.load(Relaxed),
            publish_out: self.publish_out.load(Relaxed),
            confirm: self.confirm.load(Relaxed),
            return_unroutable: self.return_unroutable.load(Relaxed),
            drop_unroutable: self.drop_unroutable.load(Relaxed),
            deliver: self.deliver.load(Relaxed),
            deliver_no_ack: self.deliver_no_ack.load(Relaxed),
            get: self.get.load(Relaxed),
            get_no_ack: self.get_no_ack.load(Relaxed),
            get_empty: self.get_empty.load(Relaxed),
            redeliver: self.redeliver.load(Relaxed),
            ack: self.ack.load(Relaxed),
        }
    }
}

impl MessageCounts {
    /// RabbitMQ's `deliver_get`: every message handed out, by consume or get.
    pub fn deliver_get(&self) -> u64 {
        self.deliver + self.deliver_no_ack + self.get + self.get_no_ack
    }

    /// Every counter by its RabbitMQ name, `deliver_get` included.
    pub fn fields(&self) -> [(&'static str, u64); 14] {
        [
            ("publish", self.publish),
            ("publish_in", self.publish_in),
            ("publish_out", self.publish_out),
            ("confirm", self.confirm),
            ("return_unroutable", self.return_unroutable),
            ("drop_unroutable", self.drop_unroutable),
            ("deliver", self.deliver),
            ("deliver_no_ack", self.deliver_no_ack),
            ("get", self.get),
            ("get_no_ack", self.get_no_ack),
            ("get_empty", self.get_empty),
            ("redeliver", self.redeliver),
            ("ack", self.ack),
            ("deliver_get", self.deliver_get()),
        ]
    }

    /// Sums two snapshots (totals over many objects).
    pub fn plus(&self, o: &MessageCounts) -> MessageCounts {
        MessageCounts {
            publish: self.publish + o.publish,
            publish_in: self.publish_in + o.publish_in,
            publish_out: self.publish_out + o.publish_out,
            confirm: self.confirm + o.confirm,
            return_unroutable: self.return_unroutable + o.return_unroutable,
            drop_unroutable: self.drop_unroutable + o.drop_unroutable,
            deliver: self.deliver + o.deliver,
            deliver_no_ack: self.deliver_no_ack + o.deliver_no_ack,
            get: self.get + o.get,
            get_no_ack: self.get_no_ack + o.get_no_ack,
            get_empty: self.get_empty + o.get_empty,
            redeliver: self.redeliver + o.redeliver,
            ack: self.ack + o.ack,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_sums_and_deliver_get() {
        let s = MessageStats::default();
        MessageStats::add(&s.deliver, 2);
        MessageStats::add(&s.get_no_ack, 3);
        MessageStats::add(&s.publish, 1);
        let c = s.snapshot();
        assert_eq!(c.deliver_get(), 5);
        let twice = c.plus(&c);
        assert_eq!(twice.publish, 2);
        assert_eq!(twice.deliver_get(), 10);
        assert!(c.fields().contains(&("deliver_get", 5)));
    }
}
