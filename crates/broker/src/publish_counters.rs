//! `PublishCounters`: what publishers sent into a vhost, for two of RabbitMQ's node-wide publish
//! metrics that no per-object counter gives: the message size histogram
//! (`rabbitmq_message_size_bytes`, RabbitMQ 4.x) and the messages published on channels in
//! confirm mode (`rabbitmq_global_messages_received_confirm_total`).
//!
//! It is written on the publish path, so it is sharded: a connection always writes the
//! shard its id picks, each shard on its own cache lines, so publishers on different cores
//! do not contend. Readers sum the shards; every counter only grows.

use crate::connection_id::ConnectionId;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds of the size buckets, in body bytes, as RabbitMQ's `rabbit_msg_size_metrics`
/// (a last bucket takes everything larger).
pub const SIZE_BUCKET_BOUNDS_BYTES: [u64; 8] = [
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
];
const BUCKETS: usize = SIZE_BUCKET_BOUNDS_BYTES.len() + 1;
const SHARDS: usize = 16;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    /// Messages per size bucket (not cumulative).
    buckets: [AtomicU64; BUCKETS],
    body_bytes: AtomicU64,
    expecting_confirm: AtomicU64,
}

#[derive(Debug)]
pub struct PublishCounters {
    shards: Box<[Shard]>,
}

impl Default for PublishCounters {
    fn default() -> Self {
        PublishCounters {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// A reading of `PublishCounters`, summed over its shards.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PublishCounts {
    /// Messages per size bucket, `SIZE_BUCKET_BOUNDS_BYTES` then the rest (not cumulative).
    pub size_buckets: [u64; BUCKETS],
    pub body_bytes: u64,
    pub expecting_confirm: u64,
}

impl PublishCounts {
    pub fn messages(&self) -> u64 {
        self.size_buckets.iter().sum()
    }

    pub fn plus(&self, o: &PublishCounts) -> PublishCounts {
        let mut size_buckets = self.size_buckets;
        for (mine, theirs) in size_buckets.iter_mut().zip(o.size_buckets) {
            *mine += theirs;
        }
        PublishCounts {
            size_buckets,
            body_bytes: self.body_bytes + o.body_bytes,
            expecting_confirm: self.expecting_confirm + o.expecting_confirm,
        }
    }
}

impl PublishCounters {
    /// Counts one message published by `connection`.
    #[inline]
    pub fn observe(&self, connection: ConnectionId, body_bytes: usize, expects_confirm: bool) {
        let shard = &self.shards[connection as usize % SHARDS];
        let size = body_bytes as u64;
        let bucket = SIZE_BUCKET_BOUNDS_BYTES
            .iter()
            .position(|&bound| size <= bound)
            .unwrap_or(BUCKETS - 1);
        shard.buckets[bucket].fetch_add(1, Relaxed);
        shard.body_bytes.fetch_add(size, Relaxed);
        if expects_confirm {
            shard.expecting_confirm.fetch_add(1, Relaxed);
        }
    }

    pub fn counts(&self) -> PublishCounts {
        let mut counts = PublishCounts::default();
        for shard in self.shards.iter() {
            for (total, bucket) in counts.size_buckets.iter_mut().zip(&shard.buckets) {
                *total += bucket.load(Relaxed);
            }
            counts.body_bytes += shard.body_bytes.load(Relaxed);
            counts.expecting_confirm += shard.expecting_confirm.load(Relaxed);
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_land_in_rabbitmqs_buckets() {
        let p = PublishCounters::default();
        p.observe(1, 0, false);
        p.observe(2, 100, true);
        p.observe(3, 101, false);
        p.observe(17, 50_000_001, true);
        p.observe(4, 200_000_000, false);
        let c = p.counts();
        assert_eq!(c.size_buckets, [2, 1, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(c.body_bytes, 100 + 101 + 50_000_001 + 200_000_000);
        assert_eq!(c.expecting_confirm, 2);
        assert_eq!(c.messages(), 5);
        assert_eq!(c.plus(&c).messages(), 10);
    }
}
