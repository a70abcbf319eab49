//! Group commit for the metadata journals (docs/STORAGE.md §2.3): a queue registered or
//! deleted, or a definitions change journaled, is written at once but fsync'd later, once for
//! every change written meanwhile.
//!
//! Why: an fsync per durable declare capped a client at a few hundred declares a second
//! however many it had in flight; written at once and synced in groups, declares in flight
//! side by side (many channels, many connections) share one fsync. A write alone survives a
//! crash of the broker (the page cache keeps it); only the fsync makes it survive the
//! machine's, so what must survive that waits for `sync`:
//!
//! - whoever answers for the change (a declare-ok) waits until its ticket is durable;
//! - the message writer syncs the metadata written before a batch's records with the batch,
//!   before those messages count as durable: a confirmed message's queue is always in the
//!   durable queue table and definitions, so recovery never drops it as unknown.
//!
//! Tickets: every write takes the next number (`written`), under the metadata lock, after its
//! bytes are in the file. A sync reads `written`, then collects (under the metadata lock) the
//! journal files written since the last collection and fsyncs them: every write numbered up
//! to what it read was in a file it collected, or in one a sync finished before (syncs run one
//! at a time), so afterwards `durable` may move to that number.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The numbers of metadata writes made and made durable.
#[derive(Debug, Default)]
pub(crate) struct MetadataSync {
    /// The last metadata write's ticket.
    written: AtomicU64,
    /// Every write up to this ticket is fsync'd.
    durable: AtomicU64,
    /// Held while syncing: one sync at a time, and a waiter that got it after another sync
    /// often finds its ticket covered by that one.
    syncing: Mutex<()>,
}

impl MetadataSync {
    /// Numbers a write just made (call under the metadata lock, after the write).
    pub fn wrote(&self) -> u64 {
        self.written.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The last write's ticket: durable once `durable() >=` it.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Makes every write up to `ticket` durable: returns at once when a sync covered it,
    /// else runs `fsync_written`, which syncs the files written since the last call, and
    /// moves `durable` to the ticket read before it. Blocking (fsync).
    pub fn sync<E>(
        &self,
        ticket: u64,
        fsync_written: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        if self.durable() >= ticket {
            return Ok(());
        }
        let _one_at_a_time = self.syncing.lock();
        if self.durable() >= ticket {
            return Ok(());
        }
        let covering = self.written();
        fsync_written()?;
        self.durable.fetch_max(covering, Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn a_ticket_covered_by_a_sync_does_not_sync_again() {
        let sync = MetadataSync::default();
        let fsyncs = AtomicUsize::new(0);
        let fsync = || -> Result<(), ()> {
            fsyncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        let first = sync.wrote();
        let second = sync.wrote();
        sync.sync(first, fsync).unwrap();
        sync.sync(second, fsync).unwrap();
        assert_eq!(
            fsyncs.load(Ordering::SeqCst),
            1,
            "one fsync covered both writes"
        );
        assert_eq!(sync.durable(), second);
        let third = sync.wrote();
        assert!(sync.durable() < third);
        sync.sync(third, fsync).unwrap();
        assert_eq!(fsyncs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_failed_sync_leaves_the_ticket_not_durable() {
        let sync = MetadataSync::default();
        let ticket = sync.wrote();
        assert_eq!(sync.sync(ticket, || Err("disk full")), Err("disk full"));
        assert_eq!(sync.durable(), 0);
        sync.sync(ticket, || Ok::<(), ()>(())).unwrap();
        assert_eq!(sync.durable(), ticket);
    }

    #[test]
    fn writers_side_by_side_share_fsyncs() {
        let sync = Arc::new(MetadataSync::default());
        let fsyncs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (sync, fsyncs) = (sync.clone(), fsyncs.clone());
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        let ticket = sync.wrote();
                        sync.sync(ticket, || {
                            fsyncs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            Ok::<(), ()>(())
                        })
                        .unwrap();
                        assert!(sync.durable() >= ticket);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sync.durable(), 800);
        assert!(
            fsyncs.load(Ordering::SeqCst) < 800,
            "writes in flight side by side shared an fsync"
        );
    }
}
