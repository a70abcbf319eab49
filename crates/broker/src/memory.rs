//! `MemoryMonitor`: bytes held in queues across the broker, and the high watermark above
//! which publishing connections stop reading their sockets (RabbitMQ's memory alarm). This is
//! the back-pressure that keeps memory bounded when producers outrun consumers.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use tokio::sync::watch;

#[derive(Debug)]
pub struct MemoryMonitor {
    queued_bytes: AtomicUsize,
    high_watermark_bytes: usize,
    /// Publishers resume below this, so the alarm does not flap on every message.
    low_watermark_bytes: usize,
    blocked: watch::Sender<bool>,
}

impl MemoryMonitor {
    pub fn new(high_watermark_bytes: usize) -> MemoryMonitor {
        MemoryMonitor {
            queued_bytes: AtomicUsize::new(0),
            high_watermark_bytes,
            low_watermark_bytes: high_watermark_bytes / 10 * 9,
            blocked: watch::channel(false).0,
        }
    }

    pub fn add(&self, bytes: usize) {
        let now = self.queued_bytes.fetch_add(bytes, Relaxed) + bytes;
        if now > self.high_watermark_bytes && !*self.blocked.borrow() {
            tracing::warn!(
                queued_bytes = now,
                high_watermark_bytes = self.high_watermark_bytes,
                "memory alarm: blocking publishers"
            );
            self.blocked.send_replace(true);
        }
    }

    pub fn sub(&self, bytes: usize) {
        let now = self
            .queued_bytes
            .fetch_sub(bytes, Relaxed)
            .wrapping_sub(bytes);
        if now < self.low_watermark_bytes && *self.blocked.borrow() {
            tracing::info!(queued_bytes = now, "memory alarm cleared");
            self.blocked.send_replace(false);
        }
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Relaxed)
    }

    /// A receiver that is true while publishers must wait.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.blocked.subscribe()
    }
}
