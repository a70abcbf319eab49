//! When the definitions are written. The blob is the whole durable state (`Snapshot`), so
//! one write costs as much as the definitions are large: with 10,000 queues, writing it for
//! every declaration made each declaration cost O(queues) and declaring N queues O(N²). A
//! durable queue declared or deleted is now a journal record instead
//! (`definitions_journal.rs`); what a write records is the broker's business, this file only
//! decides when writes happen.
//!
//! Two ways bound how often:
//!
//! - **Group commit.** Every durable change takes a number (`requested`); a write covers every
//!   number taken before it started building its snapshot. A change whose number a finished
//!   or running write covers does not write again, so changes made side by side (sixteen
//!   declarations in flight) share one write. A caller of [`DefinitionsWriter::write_now`]
//!   returns once its change is in the store, as before.
//! - **In the background, in a cluster.** There the metadata log is the record of every
//!   change: a restarted node restores the metadata group's snapshot and replays the log after
//!   it (ops are idempotent), so a blob that lags the log loses nothing. A cluster node's
//!   changes are written by one thread, every change that came in the meantime at once
//!   ([`BACKGROUND_PAUSE`] after the first, or nine times the last write's duration when that
//!   is longer), off the metadata group's apply step, from before the node's member of that
//!   group starts (its start re-applies every change since the group's last snapshot). The one
//!   exception stays synchronous: creating a queue whose messages go to the message store, as
//!   recovery drops a stored queue the blob does not name, with its messages.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long the background writer lets changes gather after the first before it writes: a
/// burst of declarations costs a write per pause, not one per declaration. A pause is at
/// least nine times the last write, so writing takes at most a tenth of a core.
pub const BACKGROUND_PAUSE: Duration = Duration::from_millis(100);

thread_local! {
    /// Set while this thread runs a definitions change for a caller that fsyncs it after
    /// (`deferring_sync`)...
    static DEFERRING_SYNC: Cell<bool> = const { Cell::new(false) };
    /// ...and whether the change wrote something it left unsynced.
    static SYNC_DEFERRED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `change` (synchronous: nothing else runs on this thread meanwhile) so that the
/// durable changes it writes are not fsync'd before it returns; answers whether one was. The
/// caller then fsyncs them off the async thread (`Store::sync_metadata`) before it answers
/// for the change: declares in flight side by side share the fsync.
pub(crate) fn deferring_sync<T>(change: impl FnOnce() -> T) -> (T, bool) {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFERRING_SYNC.set(self.0);
        }
    }
    let _reset = Reset(DEFERRING_SYNC.replace(true));
    let outer_deferred = SYNC_DEFERRED.replace(false);
    let out = change();
    let deferred = SYNC_DEFERRED.replace(outer_deferred);
    (out, deferred)
}

/// A durable change was written: true when its fsync is left to a `deferring_sync` caller,
/// false when the writer must fsync it now.
pub(crate) fn defer_sync() -> bool {
    if DEFERRING_SYNC.get() {
        SYNC_DEFERRED.set(true);
        true
    } else {
        false
    }
}

/// How soon a durable change must be in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Before the caller goes on (a queue whose messages are stored was created).
    Now,
    /// Now on a single node; in the background where the metadata log holds the change.
    Soon,
}

/// Numbers durable changes and writes the definitions blob once for as many as it can.
pub struct DefinitionsWriter {
    /// Durable changes announced so far.
    requested: AtomicU64,
    /// The highest change number a written blob covers; held while writing, so writes never
    /// overlap and an older snapshot never overwrites a newer one.
    written: Mutex<u64>,
    /// The background writer's wake-up: whether a change is waiting for it.
    waiting: Mutex<bool>,
    wake: Condvar,
    /// Set once the background writer was asked for (a cluster node)...
    background: OnceLock<()>,
    /// ...and once its thread runs: until then every change is written at once.
    background_running: AtomicBool,
}

impl Default for DefinitionsWriter {
    fn default() -> Self {
        Self {
            requested: AtomicU64::new(0),
            written: Mutex::new(0),
            waiting: Mutex::new(false),
            wake: Condvar::new(),
            background: OnceLock::new(),
            background_running: AtomicBool::new(false),
        }
    }
}

impl DefinitionsWriter {
    /// Takes a number for a change already made (so any snapshot built after this sees it).
    fn announce(&self) -> u64 {
        self.requested.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Writes unless a write covering change `wanted` has been made; returns when one has.
    fn write_covering(&self, wanted: u64, write: &dyn Fn()) {
        let mut written = self.written.lock();
        if *written >= wanted {
            return;
        }
        // Every change numbered up to here was made before the snapshot below is built.
        let covering = self.requested.load(Ordering::Acquire);
        write();
        *written = covering;
    }

    /// A change was made: it is written when this returns (true; durable once the store
    /// syncs its metadata), unless it is `Soon` and a background writer runs, which then
    /// writes it shortly (false).
    pub fn changed(&self, urgency: Urgency, write: &dyn Fn()) -> bool {
        let wanted = self.announce();
        if urgency == Urgency::Soon && self.background_running.load(Ordering::Acquire) {
            *self.waiting.lock() = true;
            self.wake.notify_one();
            return false;
        }
        self.write_covering(wanted, write);
        true
    }

    /// Writes whatever changes a write has not covered yet (at shutdown).
    pub fn flush(&self, write: &dyn Fn()) {
        let wanted = self.requested.load(Ordering::Acquire);
        if wanted > 0 {
            self.write_covering(wanted, write);
        }
    }

    /// Whether every change announced is in the store.
    pub fn is_flushed(&self) -> bool {
        *self.written.lock() >= self.requested.load(Ordering::Acquire)
    }

    /// Starts the background writer (once): `Soon` changes are written on its thread from now
    /// on, by `write`, until `write` answers false (its broker is gone).
    pub fn start_background(self: &Arc<Self>, write: impl Fn() -> bool + Send + 'static) {
        if self.background.set(()).is_err() {
            return;
        }
        let writer = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("warren-definitions".into())
            .spawn(move || {
                let mut last_write = Duration::ZERO;
                loop {
                    {
                        let Some(this) = writer.upgrade() else { return };
                        let mut waiting = this.waiting.lock();
                        while !*waiting {
                            // Woken by a change, or now and then to notice the broker is gone.
                            if this
                                .wake
                                .wait_for(&mut waiting, Duration::from_secs(1))
                                .timed_out()
                                && Arc::strong_count(&this) == 1
                            {
                                return;
                            }
                        }
                    }
                    // At most a tenth of a core on writing however large the blob grows (10,000
                    // queues: tens of milliseconds a write).
                    std::thread::sleep(BACKGROUND_PAUSE.max(last_write * 9));
                    let Some(this) = writer.upgrade() else { return };
                    *this.waiting.lock() = false;
                    let wanted = this.requested.load(Ordering::Acquire);
                    let alive = std::cell::Cell::new(true);
                    let started = std::time::Instant::now();
                    this.write_covering(wanted, &|| alive.set(write()));
                    last_write = started.elapsed();
                    if !alive.get() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => self.background_running.store(true, Ordering::Release),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the definitions writer; writing at once")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_change_covered_by_a_write_does_not_write_again() {
        let writer = DefinitionsWriter::default();
        let writes = AtomicUsize::new(0);
        let write = || {
            writes.fetch_add(1, Ordering::SeqCst);
        };
        let first = writer.announce();
        let second = writer.announce();
        writer.write_covering(first, &write);
        // The write for the first change took the second's number too.
        writer.write_covering(second, &write);
        assert_eq!(writes.load(Ordering::SeqCst), 1);
        assert!(writer.is_flushed());
        writer.changed(Urgency::Soon, &write);
        assert_eq!(
            writes.load(Ordering::SeqCst),
            2,
            "no background writer: at once"
        );
    }

    #[test]
    fn changes_side_by_side_share_writes() {
        let writer = Arc::new(DefinitionsWriter::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (writer, writes) = (writer.clone(), writes.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        writer.changed(Urgency::Now, &|| {
                            std::thread::sleep(Duration::from_millis(1));
                            writes.fetch_add(1, Ordering::SeqCst);
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(writer.is_flushed());
        assert!(writes.load(Ordering::SeqCst) <= 400);
    }

    #[test]
    fn the_background_writer_writes_soon_changes_and_now_ones_at_once() {
        let writer = Arc::new(DefinitionsWriter::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let counted = writes.clone();
        writer.start_background(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            true
        });
        let direct = AtomicUsize::new(0);
        let write = || {
            direct.fetch_add(1, Ordering::SeqCst);
        };
        for _ in 0..100 {
            writer.changed(Urgency::Soon, &write);
        }
        assert_eq!(direct.load(Ordering::SeqCst), 0, "left to the background");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !writer.is_flushed() {
            assert!(std::time::Instant::now() < deadline, "never written");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(writes.load(Ordering::SeqCst) >= 1);
        assert!(
            writes.load(Ordering::SeqCst) < 100,
            "the burst shared writes"
        );
        writer.changed(Urgency::Now, &write);
        assert_eq!(direct.load(Ordering::SeqCst), 1);
        assert!(writer.is_flushed());
    }
}
