//! The senders' clock: every sender sends once per period (100 ms for the report's 10 msg/s),
//! at a phase of its own, the phases spread evenly over the period. Senders sit in a wheel of
//! 1 ms slots; one task per worker wakes each millisecond and sends for the slots that came due.
//!
//! A sender never sends faster than its rate, and never catches up. A slot run within
//! `ON_TIME_SLOTS` of when it was due (the timer's own jitter) keeps its phase. A slot run
//! later (a loaded machine) sends now and moves its senders to the current slot, so their next
//! send is one period after this one instead of a burst to make up for lost time. A slot that
//! was due more than a whole period ago is skipped for that period. Consecutive sends of one
//! sender are therefore more than one period minus `ON_TIME_SLOTS + 1` slots (97 ms) apart;
//! what was late or skipped is counted, and the achieved rate shows it.

use std::time::Duration;
use tokio::time::Instant;

/// A slot run this many slots after it was due is still on time: tokio's timer wakes up to a
/// millisecond late on an idle machine, and re-phasing for that would only add jitter.
pub const ON_TIME_SLOTS: u64 = 2;

pub struct Wheel<T> {
    buckets: Vec<Vec<T>>,
    slot: Duration,
    start: Instant,
    /// The absolute slot number (slots since `start`) the next run begins at.
    next: u64,
    /// Sends made more than `ON_TIME_SLOTS` late (their senders re-phased).
    pub late: u64,
    /// Sends not made because their slot was more than a period overdue.
    pub skipped: u64,
}

impl<T> Wheel<T> {
    /// A wheel of `slots` slots per `period`, its slot 0 due at `start`.
    pub fn new(slots: usize, period: Duration, start: Instant) -> Wheel<T> {
        let slots = slots.max(1);
        Wheel {
            buckets: (0..slots).map(|_| Vec::new()).collect(),
            slot: period / slots as u32,
            start,
            next: 0,
            late: 0,
            skipped: 0,
        }
    }

    pub fn slots(&self) -> usize {
        self.buckets.len()
    }

    /// Puts a sender in slot `slot` (its phase: `slot` slots after the period starts).
    pub fn insert(&mut self, slot: usize, sender: T) {
        let n = self.buckets.len();
        self.buckets[slot % n].push(sender);
    }

    /// Takes the senders out of one slot (to hand them back when sending is over).
    pub fn take_slot(&mut self, slot: usize) -> Vec<T> {
        std::mem::take(&mut self.buckets[slot])
    }

    /// When absolute slot `k` is due.
    fn due_at(&self, k: u64) -> Instant {
        self.start + self.slot * k as u32
    }

    /// Calls `send` once for every sender whose slot came due by `now` (see the module
    /// comment for late and overdue slots); returns when the next slot is due.
    pub fn run_due(&mut self, now: Instant, mut send: impl FnMut(&mut T)) -> Instant {
        if now < self.start {
            return self.start;
        }
        let slot_ns = self.slot.as_nanos().max(1);
        let current = ((now - self.start).as_nanos() / slot_ns) as u64;
        if current < self.next {
            return self.due_at(self.next);
        }
        let n = self.buckets.len() as u64;
        // Slots more than a period overdue: their senders already get a run below, in the
        // slot of the same phase within the last period; these runs are dropped.
        let first = self.next.max((current + 1).saturating_sub(n));
        for k in self.next..first {
            self.skipped += self.buckets[(k % n) as usize].len() as u64;
        }
        let mut rephased = Vec::new();
        for k in first..=current {
            let index = (k % n) as usize;
            for sender in &mut self.buckets[index] {
                send(sender);
            }
            if k + ON_TIME_SLOTS < current {
                self.late += self.buckets[index].len() as u64;
                rephased.append(&mut self.buckets[index]);
            }
        }
        // The current slot has run: re-phased senders are next due one period from now.
        self.buckets[(current % n) as usize].append(&mut rephased);
        self.next = current + 1;
        self.due_at(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_millis(100);

    /// (sender, time of each send) for a wheel of `senders` spread over 100 slots, driven at
    /// the given wake-up times.
    fn drive(senders: usize, wakes: &[Duration]) -> (Vec<Vec<Duration>>, u64, u64) {
        let start = Instant::now();
        let mut wheel = Wheel::new(100, PERIOD, start);
        for s in 0..senders {
            wheel.insert(s * 100 / senders, s);
        }
        let mut sends = vec![vec![]; senders];
        for &w in wakes {
            wheel.run_due(start + w, |&mut s| sends[s].push(w));
        }
        (sends, wheel.late, wheel.skipped)
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn on_time_every_sender_sends_once_per_period_at_its_phase() {
        let wakes: Vec<Duration> = (0..1000).map(ms).collect();
        let (sends, late, skipped) = drive(50, &wakes);
        for (s, times) in sends.iter().enumerate() {
            assert_eq!(times.len(), 10, "sender {s}");
            assert_eq!(times[0], ms(s as u64 * 2));
            assert!(times.windows(2).all(|w| w[1] - w[0] == PERIOD));
        }
        assert_eq!((late, skipped), (0, 0));
    }

    #[test]
    fn a_stall_shorter_than_a_period_rephases_instead_of_bursting() {
        // The clock stalls from 10 ms to 60 ms, then runs on time again.
        let mut wakes: Vec<Duration> = (0..10).map(ms).collect();
        wakes.extend((60..1000).map(ms));
        let (sends, late, skipped) = drive(100, &wakes);
        let min_gap = ms(97);
        for times in &sends {
            assert!(
                times.windows(2).all(|w| w[1] - w[0] >= min_gap),
                "{times:?}"
            );
            assert!(times.len() <= 10);
        }
        // Senders of slots 10..57 sent late, at 60 ms, and next at 160 ms; slots 58 and 59
        // were within the timer's jitter and keep their phase.
        assert_eq!(sends[30][..2], [ms(60), ms(160)]);
        assert_eq!(sends[58][..2], [ms(60), ms(158)]);
        assert_eq!((late, skipped), (48, 0));
    }

    #[test]
    fn a_stall_longer_than_a_period_skips_whole_periods() {
        // Nothing runs between 5 ms and 350 ms.
        let mut wakes: Vec<Duration> = (0..5).map(ms).collect();
        wakes.extend((350..600).map(ms));
        let (sends, _late, skipped) = drive(100, &wakes);
        for times in &sends {
            assert!(times.windows(2).all(|w| w[1] - w[0] >= ms(97)), "{times:?}");
        }
        // Slots 5 to 250 were more than a period overdue at 350 ms: skipped.
        assert_eq!(skipped, 246);
        // Sender 3 sent at 3 ms, then each period from its slot in the last period.
        assert_eq!(sends[3][..2], [ms(3), ms(350)]);
        let total: usize = sends.iter().map(Vec::len).sum();
        assert!(total <= 100 * 6, "{total}");
    }
}
