//! A steady-rate limiter: message n is due at `start + n / rate`. Producers ask how many
//! messages are due now and sleep until the next one is, so sends are spread evenly (at high
//! rates in sub-millisecond groups, the resolution of tokio's timer) instead of one burst per
//! second (or, on a producer thread of its own, `acquire_blocking` to the microsecond). A
//! producer that falls behind (a stalled broker) catches up by at most
//! `MAX_CATCH_UP` worth of messages; beyond that the schedule restarts, because a catch-up
//! burst would show up as latency the broker did not cause.

use std::time::{Duration, Instant};

const MAX_CATCH_UP: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct RateLimiter {
    rate_per_s: f64,
    start: Instant,
    issued: u64,
}

impl RateLimiter {
    pub fn new(rate_per_s: f64, now: Instant) -> RateLimiter {
        assert!(rate_per_s > 0.0, "rate must be positive");
        RateLimiter {
            rate_per_s,
            start: now,
            issued: 0,
        }
    }

    /// How many messages may be sent at `now` (at most `max_batch`); they count as issued.
    pub fn take_due(&mut self, now: Instant, max_batch: u64) -> u64 {
        let elapsed_s = now.saturating_duration_since(self.start).as_secs_f64();
        let allowed = (elapsed_s * self.rate_per_s).floor() as u64 + 1;
        let mut due = allowed.saturating_sub(self.issued);
        let catch_up_max = ((MAX_CATCH_UP.as_secs_f64() * self.rate_per_s) as u64).max(1);
        if due > catch_up_max {
            // Too far behind: restart the schedule here rather than burst.
            self.start = now;
            self.issued = 0;
            due = 1;
        }
        let n = due.min(max_batch);
        self.issued += n;
        n
    }

    /// When the next message is due.
    pub fn next_due(&self) -> Instant {
        self.start + Duration::from_secs_f64(self.issued as f64 / self.rate_per_s)
    }

    /// On a thread of the caller's own: sleeps until at least one message is due (to the
    /// microsecond, not to tokio's millisecond timer tick) and takes up to `max_batch` of
    /// them, or returns 0 after `max_wait` with none due.
    pub fn acquire_blocking(&mut self, max_batch: u64, max_wait: Duration) -> u64 {
        let n = self.take_due(Instant::now(), max_batch);
        if n > 0 {
            return n;
        }
        let wait = self.next_due().saturating_duration_since(Instant::now());
        std::thread::sleep(wait.min(max_wait));
        self.take_due(Instant::now(), max_batch)
    }

    /// Waits until at least one message is due and takes up to `max_batch` of them.
    pub async fn acquire(&mut self, max_batch: u64) -> u64 {
        loop {
            let n = self.take_due(Instant::now(), max_batch);
            if n > 0 {
                return n;
            }
            tokio::time::sleep_until(self.next_due().into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_messages_evenly() {
        let t0 = Instant::now();
        let mut rl = RateLimiter::new(1000.0, t0);
        assert_eq!(rl.take_due(t0, 100), 1);
        assert_eq!(rl.take_due(t0, 100), 0);
        assert_eq!(rl.next_due(), t0 + Duration::from_millis(1));
        // 10.5 ms later ten more are due, not a second's worth.
        assert_eq!(rl.take_due(t0 + Duration::from_micros(10_500), 100), 10);
        let mut total = 11;
        for ms in 11..=1000 {
            total += rl.take_due(t0 + Duration::from_millis(ms), 100);
        }
        assert_eq!(total, 1001);
    }

    #[test]
    fn blocking_acquire_sleeps_to_the_next_due_message() {
        let mut rl = RateLimiter::new(1000.0, Instant::now());
        assert_eq!(rl.acquire_blocking(10, Duration::from_secs(10)), 1);
        let before = Instant::now();
        // The next message is due 1 ms after the start: a sleep, then it is taken.
        let n = rl.acquire_blocking(10, Duration::from_secs(10));
        assert!(n >= 1);
        assert!(Instant::now() >= rl.start + Duration::from_millis(1));
        assert!(before.elapsed() < Duration::from_secs(10));
        // Nothing due within max_wait: 0, after at most about max_wait.
        let mut slow = RateLimiter::new(0.001, Instant::now());
        assert_eq!(slow.acquire_blocking(10, Duration::ZERO), 1);
        assert_eq!(slow.acquire_blocking(10, Duration::from_millis(1)), 0);
    }

    #[test]
    fn batch_cap_holds() {
        let t0 = Instant::now();
        let mut rl = RateLimiter::new(100_000.0, t0);
        rl.take_due(t0, 10);
        assert_eq!(rl.take_due(t0 + Duration::from_millis(1), 10), 10);
    }

    #[test]
    fn no_burst_after_a_stall() {
        let t0 = Instant::now();
        let mut rl = RateLimiter::new(1000.0, t0);
        rl.take_due(t0, 1000);
        // A 2 s stall: catching up would mean a 2000-message burst; we restart instead.
        assert_eq!(rl.take_due(t0 + Duration::from_secs(2), 10_000), 1);
        assert_eq!(rl.take_due(t0 + Duration::from_millis(2005), 10_000), 5);
    }

    #[test]
    fn small_lag_is_caught_up() {
        let t0 = Instant::now();
        let mut rl = RateLimiter::new(1000.0, t0);
        rl.take_due(t0, 1000);
        assert_eq!(rl.take_due(t0 + Duration::from_millis(50), 10_000), 50);
    }
}
