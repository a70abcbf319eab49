//! What became of appended records, as the store tells its waiters
//! (docs/STORAGE.md §7 and §11): [`DurableState`] on a `watch` channel for
//! async waiters (a broker's confirm loop), and [`FailedPublishes`] for the one
//! subscriber that must forget messages whose PUBLISH never became durable.
//!
//! Every record gets a sequence number; the writer *settles* records in
//! sequence order, each one either durable or failed (its batch, or the
//! records pending behind it, hit a write or fsync error). Settling is final: a
//! failed record is never reported durable later, whatever the disk does next.

use std::collections::HashMap;
use std::sync::Arc;

use crate::types::{MessageId, QueueId};

/// The fate of one record, by sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not settled yet: its batch is being written, or waits for the writer.
    Pending,
    /// On disk (per the sync policy).
    Durable,
    /// Never durable: its batch failed. A publisher confirm becomes a nack.
    Failed,
}

/// Settled records, as published to async waiters ([`crate::Store::durable_watch`]).
/// Cheap to clone (two `Arc`s).
#[derive(Debug, Clone, Default)]
pub struct DurableState {
    /// Every record with a sequence number ≤ this is settled: durable unless
    /// `failed` names it.
    pub seq: u64,
    /// The records that failed.
    pub failed: Arc<FailedSeqs>,
    /// Set while the store refuses appends because a write or fsync failed
    /// (a full disk, an I/O error): why. The writer retries, and clears it
    /// once a write succeeds again.
    pub outage: Option<Arc<str>>,
}

impl DurableState {
    /// What became of the record with sequence number `seq` (0, "nothing
    /// stored", is always durable).
    pub fn outcome(&self, seq: u64) -> Outcome {
        if seq > self.seq {
            Outcome::Pending
        } else if self.failed.contains(seq) {
            Outcome::Failed
        } else {
            Outcome::Durable
        }
    }
}

/// Sequence numbers of failed records: a few ranges, one per failure (the
/// records of a failed batch and those pending behind it are consecutive).
///
/// Memory is bounded: past [`FailedSeqs::MAX_RANGES`] ranges the oldest are
/// forgotten, and every sequence number up to the end of the forgotten ones
/// then counts as failed. Only a waiter that has not looked for thousands of
/// failures can meet that; it gets a nack for a record that may be durable,
/// which a publisher handles as it handles any nack (it publishes again).
#[derive(Debug, Clone, Default)]
pub struct FailedSeqs {
    /// Inclusive ranges, ascending, disjoint and not adjacent.
    ranges: Vec<(u64, u64)>,
    /// Sequence numbers 1..=this count as failed (see above).
    forgotten_through: u64,
}

impl FailedSeqs {
    /// Ranges kept before the oldest are forgotten.
    pub const MAX_RANGES: usize = 4096;

    /// Whether `seq` failed (0 never does).
    pub fn contains(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq <= self.forgotten_through {
            return true;
        }
        let at = self.ranges.partition_point(|&(first, _)| first <= seq);
        at > 0 && seq <= self.ranges[at - 1].1
    }

    /// Whether any record ever failed.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.forgotten_through == 0
    }

    /// Records `first..=last` as failed; ranges are added in ascending order.
    pub(crate) fn add(&mut self, first: u64, last: u64) {
        if first > last {
            return;
        }
        match self.ranges.last_mut() {
            Some(prev) if prev.1.saturating_add(1) >= first => prev.1 = prev.1.max(last),
            _ => self.ranges.push((first, last)),
        }
        if self.ranges.len() > Self::MAX_RANGES {
            let drop = self.ranges.len() - Self::MAX_RANGES;
            self.forgotten_through = self.ranges[drop - 1].1;
            self.ranges.drain(..drop);
        }
    }
}

/// The messages whose PUBLISH records failed in one failure, per queue: their
/// ids (ascending) and body sizes. A broker that keeps store ids of messages
/// that are on disk only (a paged-out queue tail) drops these: they are not on
/// disk and never will be. Sent to [`crate::Store::failed_publishes`].
#[derive(Debug, Default)]
pub struct FailedPublishes {
    /// Queue → (message id, body bytes) of its failed messages.
    pub queues: HashMap<QueueId, Vec<(MessageId, u32)>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_ranges_merge_and_answer_membership() {
        let mut f = FailedSeqs::default();
        assert!(f.is_empty());
        f.add(5, 7);
        f.add(8, 9); // adjacent: merged
        f.add(20, 20);
        assert_eq!(f.ranges, vec![(5, 9), (20, 20)]);
        for seq in [0, 1, 4, 10, 19, 21] {
            assert!(!f.contains(seq), "{seq}");
        }
        for seq in [5, 7, 9, 20] {
            assert!(f.contains(seq), "{seq}");
        }
        let state = DurableState {
            seq: 20,
            failed: Arc::new(f),
            outage: None,
        };
        assert_eq!(state.outcome(0), Outcome::Durable);
        assert_eq!(state.outcome(4), Outcome::Durable);
        assert_eq!(state.outcome(6), Outcome::Failed);
        assert_eq!(state.outcome(21), Outcome::Pending);
    }

    #[test]
    fn forgotten_ranges_count_as_failed() {
        let mut f = FailedSeqs::default();
        for i in 0..(FailedSeqs::MAX_RANGES as u64 + 2) {
            f.add(10 * i + 1, 10 * i + 2);
        }
        assert_eq!(f.ranges.len(), FailedSeqs::MAX_RANGES);
        assert_eq!(f.forgotten_through, 12);
        assert!(f.contains(3), "older than the kept ranges: failed");
        assert!(!f.contains(13));
        assert!(f.contains(21));
    }
}
