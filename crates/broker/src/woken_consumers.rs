//! `WokenConsumers`: the consumers of one queue whose credit came back since the queue last
//! looked — how a `ConsumerSet` learns which of its blocked consumers to serve again without
//! looking at each of them on every delivery.
//!
//! A queue that finds a consumer without credit sets one of its `starved_*` flags and parks
//! it (`ConsumerSet::pick`). Whoever frees that credit clears the flag, notes the consumer
//! here, and only then kicks the queue (`Consumer::kick_queue`); the kick dispatches under
//! the queue's lock, after the note, so the dispatch that follows every wake-up sees it and
//! the parked consumer is served again: no wake-up is lost. A consumer noted twice, or noted
//! after it left, costs one look-up when the queue drains the notes.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};

/// Which consumer of a `ConsumerSet`: its priority and the order it joined in (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConsumerKey {
    pub priority: i64,
    pub joined: u64,
}

#[derive(Debug, Default)]
pub struct WokenConsumers {
    /// Set while `keys` may hold something: the queue checks this on every delivery, so the
    /// lock is taken only when a consumer was woken.
    pending: AtomicBool,
    keys: Mutex<Vec<ConsumerKey>>,
}

impl WokenConsumers {
    /// Waker side: the consumer `key` may have credit again.
    pub fn note(&self, key: ConsumerKey) {
        let mut keys = self.keys.lock();
        keys.push(key);
        self.pending.store(true, Release);
    }

    /// Queue side (under the queue's lock): the consumers woken since the last call.
    pub fn take(&self) -> Option<Vec<ConsumerKey>> {
        if !self.pending.load(Acquire) {
            return None;
        }
        let mut keys = self.keys.lock();
        self.pending.store(false, Release);
        Some(std::mem::take(&mut *keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_taken_once() {
        let woken = WokenConsumers::default();
        assert!(woken.take().is_none());
        let key = ConsumerKey {
            priority: 0,
            joined: 7,
        };
        woken.note(key);
        woken.note(key);
        assert_eq!(woken.take(), Some(vec![key, key]));
        assert!(woken.take().is_none());
    }
}
