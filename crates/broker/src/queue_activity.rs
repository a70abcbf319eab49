//! Which queues of a vhost changed since a reader last looked, so that the monitoring
//! readers (the management API's sampler, Prometheus' `/metrics`) keep their totals and
//! rates by visiting those queues only: with a million idle queues a round that read every
//! queue cost a fifth of a core for nothing.
//!
//! A queue marks itself (`Queue::note_change`) whenever its counters or depth may have moved:
//! a publish, a settle, a get, a consumer coming or going, an expiry, a purge, a policy, its
//! declaration and its removal. The mark is one relaxed load of the queue's `changed` flag
//! on the hot path; only the first mark after a reader looked takes this module's lock and
//! adds the queue's name to every reader's set. A reader takes its set (`take`), and clears a
//! queue's flag before reading it (`Queue::begin_reading`), so a change made while it reads
//! marks the queue again for the next take.
//!
//! What the mark does not see — counters a session bumps after the queue handed a message
//! over (deliver, redeliver), what another node serves for a record here — happens only on
//! queues that have consumers, just changed or are such records
//! (`QueueType::counts_move_unmarked`); readers keep visiting those (`QueueActivity` leaves
//! that to them) until they are quiet again. A quorum queue marks itself as entries apply on
//! its member here, so a commit that lands after its publish marked it is marked again.

use crate::name_map::NameHasher;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use warren_codec::ShortStr;

/// Queue names, hashed as the vhost's own map hashes them.
pub type QueueNames = HashSet<ShortStr, NameHasher>;

/// One reader of every vhost's activity (made once per reader, e.g. per sampler).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReaderId(usize);

impl ReaderId {
    /// A reader no other holds.
    pub fn new() -> ReaderId {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        ReaderId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for ReaderId {
    fn default() -> Self {
        ReaderId::new()
    }
}

/// What changed in a vhost since the reader's last take.
#[derive(Debug)]
pub enum Changed {
    /// The reader's first take in this vhost: it has no baseline, and must read every queue
    /// (clearing each one's flag first) to make one.
    Everything,
    /// The queues marked since the last take (some may be gone: look them up by name).
    Queues(QueueNames),
}

/// One vhost's record of marked queues, per reader.
#[derive(Default)]
pub struct QueueActivity {
    readers: Mutex<Vec<(ReaderId, QueueNames)>>,
}

impl std::fmt::Debug for QueueActivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueActivity").finish_non_exhaustive()
    }
}

impl QueueActivity {
    /// Adds `queue` to every reader's set (a queue's first mark since a reader looked, its
    /// declaration or its removal).
    pub(crate) fn note(&self, queue: &ShortStr) {
        for (_, names) in self.readers.lock().iter_mut() {
            if !names.contains(queue) {
                names.insert(queue.clone());
            }
        }
    }

    /// `reader` reads no more (a forwarding link that closed): its marks are dropped, and no
    /// more kept for it.
    pub fn forget(&self, reader: ReaderId) {
        self.readers.lock().retain(|(id, _)| *id != reader);
    }

    /// The queues marked since `reader`'s last take, or `Everything` on its first.
    pub fn take(&self, reader: ReaderId) -> Changed {
        let mut readers = self.readers.lock();
        match readers.iter_mut().find(|(id, _)| *id == reader) {
            Some((_, names)) => Changed::Queues(std::mem::take(names)),
            None => {
                readers.push((reader, QueueNames::default()));
                Changed::Everything
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reader_gets_its_own_marks_after_a_first_full_read() {
        let activity = QueueActivity::default();
        let (a, b) = (ReaderId::new(), ReaderId::new());
        activity.note(&ShortStr::from("before-any-reader"));
        assert!(matches!(activity.take(a), Changed::Everything));
        activity.note(&ShortStr::from("q1"));
        assert!(matches!(activity.take(b), Changed::Everything));
        activity.note(&ShortStr::from("q2"));
        activity.note(&ShortStr::from("q2"));
        let names = |changed: Changed| match changed {
            Changed::Queues(names) => {
                let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
                names.sort();
                names
            }
            Changed::Everything => panic!("a second take is not a first"),
        };
        assert_eq!(names(activity.take(a)), ["q1", "q2"]);
        assert_eq!(names(activity.take(b)), ["q2"]);
        assert!(names(activity.take(a)).is_empty());
    }
}
