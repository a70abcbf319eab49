//! The connection's output buffer and the writer task that drains it. Producers append whole
//! frames under a short lock; the writer swaps the buffer out and writes it in one call, so
//! frames queued while a write is in flight are batched into the next syscall. A high-water
//! mark gives publishers backpressure (`wait_room`) instead of unbounded memory growth.

use bytes::BytesMut;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

/// Above this many buffered bytes publishers wait for the writer: big enough to keep the
/// socket busy, small enough that queued messages do not add noticeable latency.
const HIGH_WATER_BYTES: usize = 1 << 20;

pub(crate) struct Outbox {
    buf: Mutex<BytesMut>,
    wake: Notify,
    drained: Notify,
    closed: AtomicBool,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox {
            buf: Mutex::new(BytesMut::with_capacity(64 * 1024)),
            wake: Notify::new(),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Appends frames; wakes the writer only when the buffer was empty, since otherwise a
    /// wake-up is already pending or the writer will find the bytes when its write ends.
    pub fn write<R>(&self, f: impl FnOnce(&mut BytesMut) -> R) -> R {
        let mut buf = self.buf.lock();
        let was_empty = buf.is_empty();
        let r = f(&mut buf);
        drop(buf);
        if was_empty {
            self.wake.notify_one();
        }
        r
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
        self.drained.notify_waiters();
    }

    /// Waits until the buffer is below the high-water mark (or the connection is gone).
    pub async fn wait_room(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.buf.lock().len() < HIGH_WATER_BYTES || self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// The writer task: runs until the connection closes or the socket fails.
    pub async fn run_writer(&self, mut socket: OwnedWriteHalf) -> std::io::Result<()> {
        let mut spare = BytesMut::with_capacity(64 * 1024);
        loop {
            {
                let mut buf = self.buf.lock();
                std::mem::swap(&mut *buf, &mut spare);
            }
            if spare.is_empty() {
                self.drained.notify_waiters();
                if self.is_closed() {
                    let _ = socket.shutdown().await;
                    return Ok(());
                }
                self.wake.notified().await;
                continue;
            }
            socket.write_all(&spare).await?;
            spare.clear();
            self.drained.notify_waiters();
        }
    }
}
