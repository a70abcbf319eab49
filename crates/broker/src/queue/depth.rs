//! `QueueDepth`: one consistent reading of a queue's counts and sizes, for the monitoring
//! endpoints (Prometheus, the HTTP API). Taken under the queue's lock once; it expires
//! nothing (a scrape must not change the queue), so it may count messages whose TTL has
//! passed but which no consumer, get or timer has dropped yet.

use super::Queue;

/// Ready messages are split by where they are: in memory (`ReadyList`) or only in the store
/// (the paged tail, RabbitMQ's "paged out").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub ready: u64,
    pub ready_bytes: u64,
    /// Ready messages held in memory, and their body bytes.
    pub ready_in_memory: u64,
    pub ready_in_memory_bytes: u64,
    /// Ready messages on disk only (the paged tail), and their body bytes.
    pub paged_out: u64,
    pub paged_out_bytes: u64,
    /// Delivered to consumers and not yet acknowledged.
    pub unacked: u64,
    pub consumers: u64,
}

impl Queue {
    pub fn depth(&self) -> QueueDepth {
        if let Some(qq) = self.quorum() {
            // A quorum queue's messages are all in memory (and in its log).
            let ready = u64::from(qq.message_count());
            let ready_bytes = qq.ready_bytes();
            return QueueDepth {
                ready,
                ready_bytes,
                ready_in_memory: ready,
                ready_in_memory_bytes: ready_bytes,
                paged_out: 0,
                paged_out_bytes: 0,
                unacked: u64::from(qq.unacked_count()),
                consumers: u64::from(qq.consumer_count()),
            };
        }
        let st = self.state.lock();
        let ready_in_memory = st.ready.len() as u64;
        let ready_in_memory_bytes = st.ready.bytes() as u64;
        let paged_out = st.tail.len();
        let paged_out_bytes = st.tail.bytes();
        QueueDepth {
            ready: ready_in_memory + paged_out,
            ready_bytes: ready_in_memory_bytes + paged_out_bytes,
            ready_in_memory,
            ready_in_memory_bytes,
            paged_out,
            paged_out_bytes,
            unacked: st.unacked as u64,
            consumers: st.consumers.len() as u64,
        }
    }
}
