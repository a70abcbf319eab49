//! Output held back until the metadata changes it answers are durable (`Change::Unsynced`):
//! a declare-ok must not reach the client before the store's fsync of the declaration, and
//! the connection reads on meanwhile, so pipelined declares share one fsync.
//!
//! What is held is a suffix of the output buffer, from where the first change's answer
//! begins. Bytes before it go out at once; bytes after it wait for a sync that covers the
//! changes written in them. Two waits at most: the `front` one, awaited, and the `back` one,
//! the latest change's (a later sync covers every earlier write, so each new change replaces
//! the back wait and keeps its start). When the front resolves, the output up to the back's
//! start goes out and the back becomes the front. A client that never stops sending changes
//! (no-wait declares) so still gets its output — the answers, and heartbeats — one sync after
//! another; with a single wait replaced by every new change, it got nothing until it paused,
//! and clients with heartbeats closed the connection after missing them for ~30 s.

use std::collections::VecDeque;

use warren_broker::DurableWait;

/// The held part of a connection's output.
#[derive(Default)]
pub struct Unsynced {
    /// Bytes taken out of the output buffer so far (written to the socket): output positions
    /// are counted from the connection's start, so they survive the buffer's advances.
    sent: u64,
    /// The front wait (and where its bytes start) then the back one; at most two.
    waits: VecDeque<(u64, DurableWait)>,
}

impl Unsynced {
    /// Holds the output from `from` (an offset in the output buffer now: where this change's
    /// answer begins) until `durable` resolves.
    pub fn hold(&mut self, from: usize, durable: DurableWait) {
        let start = self.sent + from as u64;
        match self.waits.len() {
            0 | 1 => self.waits.push_back((start, durable)),
            // The back wait covers this change too once replaced; its start stays earlier.
            _ => {
                if let Some(back) = self.waits.back_mut() {
                    back.1 = durable;
                }
            }
        }
    }

    /// Whether some output waits for a sync.
    pub fn is_holding(&self) -> bool {
        !self.waits.is_empty()
    }

    /// How many bytes at the head of an output buffer of `buffered` bytes may be written now.
    pub fn writable(&self, buffered: usize) -> usize {
        match self.waits.front() {
            Some((start, _)) => (start.saturating_sub(self.sent) as usize).min(buffered),
            None => buffered,
        }
    }

    /// `bytes` were taken out of the output buffer (written).
    pub fn wrote(&mut self, bytes: usize) {
        self.sent += bytes as u64;
    }

    /// `bytes` were put at the head of the output buffer, ahead of everything held (a
    /// heartbeat, while all the output waits for a sync): what is held starts that much later.
    pub fn put_ahead(&mut self, bytes: usize) {
        for (start, _) in &mut self.waits {
            *start += bytes as u64;
        }
    }

    /// Resolves when the front wait does (never while none is held), releasing its bytes.
    pub async fn front_synced(&mut self) {
        match self.waits.front_mut() {
            Some((_, durable)) => durable.as_mut().await,
            None => std::future::pending().await,
        }
        self.waits.pop_front();
    }

    /// Waits until nothing is held (before the connection writes everything: at its end).
    pub async fn all_synced(&mut self) {
        while self.is_holding() {
            self.front_synced().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A wait that resolves once `done` is set.
    fn wait(done: &Arc<AtomicBool>) -> DurableWait {
        let done = done.clone();
        Box::pin(async move {
            while !done.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
            }
        })
    }

    #[tokio::test]
    async fn output_goes_out_one_sync_after_another_while_changes_keep_coming() {
        let mut held = Unsynced::default();
        assert_eq!(held.writable(10), 10, "nothing held: everything goes");
        // 10 bytes buffered; the first change's answer starts at 4.
        let first = Arc::new(AtomicBool::new(false));
        held.hold(4, wait(&first));
        assert_eq!(held.writable(10), 4);
        held.wrote(4);
        assert_eq!(held.writable(6), 0, "the answer waits for its sync");
        // More changes while the first sync runs: answers at 8 and 12 (buffer offsets,
        // 4 bytes having gone out), held from the first of them until a later sync.
        let second = Arc::new(AtomicBool::new(false));
        let third = Arc::new(AtomicBool::new(false));
        held.hold(8, wait(&second));
        held.hold(12, wait(&third));
        first.store(true, Ordering::Release);
        held.front_synced().await;
        assert_eq!(
            held.writable(16),
            8,
            "the first sync releases up to the second change's answer"
        );
        held.wrote(8);
        // The back wait is the third's (it covers the second); the second's is never awaited.
        third.store(true, Ordering::Release);
        held.front_synced().await;
        assert!(!held.is_holding());
        assert_eq!(held.writable(8), 8);
    }

    #[tokio::test]
    async fn bytes_put_ahead_go_out_and_the_held_output_stays_held() {
        let mut held = Unsynced::default();
        let synced = Arc::new(AtomicBool::new(false));
        held.hold(0, wait(&synced));
        assert_eq!(held.writable(20), 0);
        held.put_ahead(8);
        assert_eq!(held.writable(28), 8, "the 8 bytes ahead go");
        held.wrote(8);
        assert_eq!(held.writable(20), 0, "the 20 behind still wait");
        synced.store(true, Ordering::Release);
        held.front_synced().await;
        assert_eq!(held.writable(20), 20);
    }
}
