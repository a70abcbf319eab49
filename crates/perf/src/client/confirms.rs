//! Publisher-confirm bookkeeping for one channel: which sequence numbers are outstanding and
//! when each was published, resolved by the broker's `basic.ack`/`basic.nack` (single or
//! `multiple`). Kept sorted by sequence number, so resolving is popping from the front in the
//! common case and a binary search otherwise.

use std::collections::VecDeque;

#[derive(Default)]
pub(crate) struct ConfirmTracker {
    /// The sequence number the next publish gets (1 after `confirm.select`).
    next_seq: u64,
    /// (sequence number, publish time in ns since the epoch), ascending.
    pending: VecDeque<(u64, u64)>,
}

impl ConfirmTracker {
    pub fn new() -> ConfirmTracker {
        ConfirmTracker {
            next_seq: 1,
            pending: VecDeque::new(),
        }
    }

    pub fn on_publish(&mut self, sent_ns: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.push_back((seq, sent_ns));
        seq
    }

    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// Resolves `tag` (and everything below it when `multiple`), calling `f(seq, sent_ns)` for
    /// each resolved publish. Unknown tags are ignored: a broker may not ack twice, and if one
    /// does the count must not go wrong.
    pub fn resolve(&mut self, tag: u64, multiple: bool, mut f: impl FnMut(u64, u64)) {
        if multiple {
            while let Some(&(seq, sent_ns)) = self.pending.front() {
                if seq > tag {
                    break;
                }
                self.pending.pop_front();
                f(seq, sent_ns);
            }
        } else if let Ok(at) = self.pending.binary_search_by_key(&tag, |&(seq, _)| seq) {
            let (seq, sent_ns) = self.pending.remove(at).expect("index from binary search");
            f(seq, sent_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_multiple_acks() {
        let mut t = ConfirmTracker::new();
        for i in 0..10 {
            assert_eq!(t.on_publish(i * 100), i + 1);
        }
        let mut got = vec![];
        t.resolve(3, false, |s, _| got.push(s));
        t.resolve(5, true, |s, _| got.push(s));
        t.resolve(5, true, |s, _| got.push(s));
        t.resolve(42, false, |s, _| got.push(s));
        assert_eq!(got, vec![3, 1, 2, 4, 5]);
        assert_eq!(t.outstanding(), 5);
    }
}
