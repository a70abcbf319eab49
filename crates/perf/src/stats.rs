//! Run-wide counters and latency histograms. Recorders write into the current interval's
//! HDR histogram (µs, 3 significant digits) under a short lock; once per interval the
//! reporter swaps it out, reads its percentiles and merges it into the run total. "Max 99th"
//! in the seed reports is the largest per-interval 99th percentile, so both are kept.

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Latencies above 10 minutes are clamped: nothing useful is measured there.
const MAX_LATENCY_US: u64 = 600_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Percentiles of one histogram, in µs.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub min_us: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p75_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            min_us: h.min(),
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.50),
            p75_us: h.value_at_quantile(0.75),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// A histogram for the current interval and one for the whole run.
pub struct LatencyWindow {
    interval: Histogram<u64>,
    total: Histogram<u64>,
}

impl Default for LatencyWindow {
    fn default() -> Self {
        LatencyWindow {
            interval: new_histogram(),
            total: new_histogram(),
        }
    }
}

impl LatencyWindow {
    pub fn record(&mut self, latency_us: u64) {
        self.interval
            .saturating_record(latency_us.clamp(1, MAX_LATENCY_US));
    }

    /// Ends the interval: returns its percentiles and folds it into the total.
    pub fn roll(&mut self) -> Percentiles {
        let p = Percentiles::of(&self.interval);
        self.total.add(&self.interval).expect("same bounds");
        self.interval.reset();
        p
    }

    pub fn total(&self) -> Percentiles {
        Percentiles::of(&self.total)
    }

    pub fn total_histogram(&self) -> &Histogram<u64> {
        &self.total
    }
}

#[derive(Default)]
pub struct Stats {
    pub sent: AtomicU64,
    pub confirmed: AtomicU64,
    pub nacked: AtomicU64,
    pub returned: AtomicU64,
    pub received: AtomicU64,
    pub duplicates: AtomicU64,
    latency: Mutex<LatencyWindow>,
    confirm_latency: Mutex<LatencyWindow>,
}

/// Counter values at one instant.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    pub received: u64,
    pub duplicates: u64,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn record_latency_us(&self, latency_us: u64) {
        self.latency.lock().record(latency_us);
    }

    pub fn record_confirm_us(&self, latency_us: u64) {
        self.confirm_latency.lock().record(latency_us);
    }

    pub fn counts(&self) -> Counts {
        Counts {
            sent: self.sent.load(Ordering::Relaxed),
            confirmed: self.confirmed.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            returned: self.returned.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
        }
    }

    /// Ends an interval for both histograms: (consumer latency, confirm latency).
    pub fn roll(&self) -> (Percentiles, Percentiles) {
        let l = self.latency.lock().roll();
        let c = self.confirm_latency.lock().roll();
        (l, c)
    }

    pub fn totals(&self) -> (Percentiles, Percentiles) {
        (
            self.latency.lock().total(),
            self.confirm_latency.lock().total(),
        )
    }

    pub fn latency_total_histogram(&self) -> Histogram<u64> {
        self.latency.lock().total_histogram().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolling_intervals_merges_into_the_total() {
        let mut w = LatencyWindow::default();
        let mut all = new_histogram();
        for i in 1..=1000u64 {
            w.record(i);
            all.record(i).unwrap();
        }
        let first = w.roll();
        assert_eq!(first.count, 1000);
        assert_eq!(first.min_us, 1);
        for i in 1..=1000u64 {
            w.record(i * 100);
            all.record(i * 100).unwrap();
        }
        let second = w.roll();
        assert!(second.p99_us > first.p99_us * 50);
        assert_eq!(w.total(), Percentiles::of(&all));
        assert_eq!(w.total().count, 2000);
        // An empty interval reads as zeros, not as a panic.
        assert_eq!(w.roll(), Percentiles::default());
    }

    #[test]
    fn percentiles_are_ordered() {
        let mut h = new_histogram();
        for i in 1..=10_000u64 {
            h.record(i).unwrap();
        }
        let p = Percentiles::of(&h);
        assert!(p.min_us <= p.p50_us && p.p50_us <= p.p75_us && p.p75_us <= p.p95_us);
        assert!(p.p95_us <= p.p99_us && p.p99_us <= p.p999_us && p.p999_us <= p.max_us);
        assert!((p.p50_us as i64 - 5000).abs() < 10);
    }
}
