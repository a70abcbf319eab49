//! What one worker's clients count as they go (messages received, publishes confirmed and
//! nacked), shared by the 0-9-1 and AMQP 1.0 clients' hooks; and what they add up to while
//! the senders run: the messages in flight (`InFlight`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Default)]
pub struct Counters {
    /// Messages the senders handed to their clients (sent, or waiting in the client).
    pub published: AtomicU64,
    pub received: AtomicU64,
    pub confirmed: AtomicU64,
    pub nacked: AtomicU64,
}

/// Messages on their way at one instant, summed over workers' counters: what a broker's
/// memory at that instant holds beyond its connections (a client that falls behind, on a
/// loaded machine, leaves its messages in the broker's queues and buffers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InFlight {
    /// Published and not yet confirmed (in the sending client, the socket, or the broker
    /// before its outcome).
    pub unconfirmed: u64,
    /// Confirmed and not yet received (in the broker's queues and buffers, the socket, or
    /// the receiving client before its handler).
    pub unreceived: u64,
}

impl InFlight {
    pub fn of(all: &[Arc<Counters>]) -> InFlight {
        let sum = |f: fn(&Counters) -> &AtomicU64| -> u64 {
            all.iter().map(|c| f(c).load(Ordering::Acquire)).sum()
        };
        // Received before confirmed, and confirms counted before publishes, are both
        // possible between two loads: neither count goes below zero.
        let received = sum(|c| &c.received);
        let settled = sum(|c| &c.confirmed) + sum(|c| &c.nacked);
        let published = sum(|c| &c.published);
        InFlight {
            unconfirmed: published.saturating_sub(settled),
            unreceived: sum(|c| &c.confirmed).saturating_sub(received),
        }
    }

    pub fn total(&self) -> u64 {
        self.unconfirmed + self.unreceived
    }

    /// The larger count of each kind.
    pub fn max(self, other: InFlight) -> InFlight {
        InFlight {
            unconfirmed: self.unconfirmed.max(other.unconfirmed),
            unreceived: self.unreceived.max(other.unreceived),
        }
    }
}
