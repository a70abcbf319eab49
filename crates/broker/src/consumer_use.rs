//! A queue's consumer capacity (RabbitMQ's `consumer_capacity`, also `consumer_utilisation`):
//! the share of time its consumers could take messages at once, as a moving average with a
//! one-second half-life, as `rabbit_queue_consumers` keeps it. 1.0 is a queue whose consumers
//! always had room; below it, messages waited for consumers' prefetch or credit.
//!
//! The queue says when delivery found every consumer full with messages ready (`inactive`)
//! and when it could hand out everything again (`active`). Only a change of state reads the
//! clock, so a queue that stays in one state pays a branch per dispatch.

use std::time::Instant;

/// The half-life of the average, RabbitMQ's `?USE_AVG_HALF_LIFE` (1 s).
const HALF_LIFE_US: f64 = 1_000_000.0;

#[derive(Debug, Clone, Copy)]
enum State {
    /// Since `since`: consumers took what was ready.
    Active { since: Instant },
    /// Since `since`: messages waited; the active spell before it lasted `active_us`.
    Inactive { since: Instant, active_us: f64 },
}

#[derive(Debug, Clone, Copy)]
pub struct ConsumerUse {
    state: State,
    /// The average up to the last change of state.
    average: f64,
}

impl Default for ConsumerUse {
    fn default() -> Self {
        ConsumerUse::new(Instant::now())
    }
}

impl ConsumerUse {
    /// A queue starts active, at full capacity, as RabbitMQ's.
    pub fn new(now: Instant) -> ConsumerUse {
        ConsumerUse {
            state: State::Active { since: now },
            average: 1.0,
        }
    }

    /// Delivery handed out all that was ready (or nothing was ready).
    #[inline]
    pub fn active(&mut self) {
        if let State::Inactive { .. } = self.state {
            self.active_at(Instant::now());
        }
    }

    /// Delivery stopped with messages ready: every consumer is full.
    #[inline]
    pub fn inactive(&mut self) {
        if let State::Active { .. } = self.state {
            self.inactive_at(Instant::now());
        }
    }

    fn active_at(&mut self, now: Instant) {
        if let State::Inactive { since, active_us } = self.state {
            let inactive_us = micros(since, now);
            self.average = average(active_us, inactive_us, self.average);
            self.state = State::Active { since: now };
        }
    }

    fn inactive_at(&mut self, now: Instant) {
        if let State::Active { since } = self.state {
            self.state = State::Inactive {
                since: now,
                active_us: micros(since, now),
            };
        }
    }

    /// The capacity at `now`, between 0 and 1 (the caller reports 0 without consumers).
    pub fn capacity_at(&self, now: Instant) -> f64 {
        match self.state {
            State::Active { since } => average(micros(since, now), 0.0, self.average),
            State::Inactive { since, active_us } => {
                average(active_us, micros(since, now), self.average)
            }
        }
    }
}

fn micros(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e6
}

/// rabbit_misc:moving_average over a spell of `active_us` then `inactive_us`: the spell's
/// share of active time weighed against the old average by the spell's length.
fn average(active_us: f64, inactive_us: f64, old: f64) -> f64 {
    let spell_us = active_us + inactive_us;
    if spell_us <= 0.0 {
        return old;
    }
    let weight = (spell_us * 0.5f64.ln() / HALF_LIFE_US).exp();
    (active_us / spell_us) * (1.0 - weight) + old * weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_queue_whose_consumers_always_have_room_is_at_full_capacity() {
        let t0 = Instant::now();
        let used = ConsumerUse::new(t0);
        assert_eq!(used.capacity_at(t0 + Duration::from_secs(5)), 1.0);
    }

    #[test]
    fn capacity_falls_while_consumers_are_full_and_recovers_after() {
        let t0 = Instant::now();
        let mut used = ConsumerUse::new(t0);
        used.inactive_at(t0 + Duration::from_secs(1));
        // The spell so far: 1 s with room, then 1 s full, weighed over two half-lives.
        let even = used.capacity_at(t0 + Duration::from_secs(2));
        assert!((even - (0.5 * 0.75 + 0.25)).abs() < 1e-9, "{even}");
        // Ten seconds full after one with room: the spell's share (1/11) is nearly all.
        let low = used.capacity_at(t0 + Duration::from_secs(11));
        assert!((low - 1.0 / 11.0).abs() < 0.001, "{low}");
        used.active_at(t0 + Duration::from_secs(11));
        let back = used.capacity_at(t0 + Duration::from_secs(21));
        assert!(back > 0.999, "{back}");
    }

    #[test]
    fn a_repeated_state_changes_nothing() {
        let t0 = Instant::now();
        let mut used = ConsumerUse::new(t0);
        used.inactive_at(t0 + Duration::from_secs(1));
        used.inactive_at(t0 + Duration::from_secs(2));
        let at = t0 + Duration::from_secs(3);
        let expected = average(1e6, 2e6, 1.0);
        assert!((used.capacity_at(at) - expected).abs() < 1e-9);
    }
}
