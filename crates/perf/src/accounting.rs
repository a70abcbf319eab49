//! Exact message accounting: which (producer, sequence) pairs were confirmed and which were
//! received, as one bitmap per producer, so "lost" means confirmed (or, without confirms,
//! sent) and never received once the run has drained — the oslo simulator's lost column —
//! and a message delivered twice counts as a duplicate, not as two receipts.

use parking_lot::Mutex;

#[derive(Default)]
struct Bits(Vec<u64>);

impl Bits {
    /// Sets bit `i`; returns whether it was already set.
    fn set(&mut self, i: u64) -> bool {
        let (word, bit) = ((i / 64) as usize, i % 64);
        if self.0.len() <= word {
            self.0.resize((word + 1).next_power_of_two(), 0);
        }
        let was = self.0[word] & (1 << bit) != 0;
        self.0[word] |= 1 << bit;
        was
    }

    fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

#[derive(Default)]
struct Marks {
    sent: u64,
    confirmed: Bits,
    received: Bits,
}

pub struct Accounting {
    producers: Vec<Mutex<Marks>>,
}

impl Accounting {
    pub fn new(producers: usize) -> Accounting {
        Accounting {
            producers: (0..producers)
                .map(|_| Mutex::new(Marks::default()))
                .collect(),
        }
    }

    pub fn set_sent(&self, producer: u32, sent: u64) {
        if let Some(m) = self.producers.get(producer as usize) {
            m.lock().sent = sent;
        }
    }

    pub fn confirmed(&self, producer: u32, seq: u64) {
        if let Some(m) = self.producers.get(producer as usize) {
            m.lock().confirmed.set(seq);
        }
    }

    /// Marks a receipt; false when it is a duplicate. Messages from producers this run does
    /// not have (a consumer-only run draining a queue) are receipts that cannot be checked.
    pub fn received(&self, producer: u32, seq: u64) -> bool {
        match self.producers.get(producer as usize) {
            Some(m) => !m.lock().received.set(seq),
            None => true,
        }
    }

    /// Confirmed-or-sent messages never received: with `confirms`, only confirmed ones count
    /// (an unconfirmed message was never promised).
    pub fn lost(&self, confirms: bool) -> u64 {
        let mut lost = 0;
        for m in &self.producers {
            let m = m.lock();
            for seq in 0..m.sent {
                let promised = !confirms || m.confirmed.get(seq);
                if promised && !m.received.get(seq) {
                    lost += 1;
                }
            }
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lost_and_duplicates() {
        let a = Accounting::new(2);
        a.set_sent(0, 100);
        a.set_sent(1, 10);
        for seq in 0..100 {
            if seq != 42 {
                assert!(a.received(0, seq));
            }
        }
        assert!(!a.received(0, 7), "second receipt is a duplicate");
        for seq in 0..10 {
            a.confirmed(1, seq);
        }
        assert!(a.received(1, 3));
        assert_eq!(a.lost(false), 1 + 9);
        // With confirms, only producer 1's confirmed-and-missing count.
        assert_eq!(a.lost(true), 9);
    }

    #[test]
    fn messages_from_other_runs_count_as_receipts() {
        // A consumer-only run (-x 0) drains what earlier producers left.
        let a = Accounting::new(0);
        assert!(a.received(3, 1));
        assert!(
            a.received(3, 1),
            "unknown producers cannot be checked for duplicates"
        );
    }
}
