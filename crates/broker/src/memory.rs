//! `MemoryMonitor`: RabbitMQ's memory alarm. It raises `Alarm::Memory` when the broker's
//! memory use goes above the high watermark and clears it below 90 % of it, so the alarm
//! does not flap on every message.
//!
//! Two measures, because each alone misses something:
//! - *accounted bytes*: what queues hold, counted per message as it is enqueued (body,
//!   properties and a fixed per-message overhead). It moves with every message, so a burst of
//!   large bodies trips the alarm at once, between samples;
//! - *resident bytes*: the process's RSS, sampled every `SAMPLE_INTERVAL`. It sees everything
//!   the accounting does not: read buffers, per-connection state, a peer's garbage, the
//!   allocator's own overhead. While it grows, the sampler counts the growth of the last
//!   interval once more (where RSS will be at the next sample), so publishers are stopped
//!   before RSS crosses the watermark rather than one interval after.
//!
//! Between samples the resident figure moves with what queues accept: the last sample plus
//! the bytes queued since it (`resident_estimate_bytes`), checked as each message is
//! enqueued. A sample alone is only as timely as the sampler: on a busy machine its task
//! runs late, and a publisher of one-byte messages queues ~100 MB/s of them meanwhile
//! (issue 30: RSS peaked at 87 MiB against a 64 MiB watermark while a fuzzer ran beside
//! the broker on 2 cores). With the accepted bytes counted at once, the publish that
//! meets the watermark raises the alarm itself, however late the next sample is.
//!
//! The alarm is on while either is above the watermark. The allocator keeps freed memory
//! mapped, so once queues have given back a tenth of the watermark or more while RSS is
//! high, the sampler asks it to return free pages to the OS (`malloc_trim`, at most once a
//! second); otherwise RSS would never fall and publishers would stay blocked for good. Only
//! after queues shrank: trimming while nothing was consumed would let RSS dip under the low
//! watermark, unblock publishers, and ratchet real memory up past the watermark.

use crate::alarm::{Alarm, Alarms};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLE_INTERVAL: Duration = Duration::from_millis(20);
const TRIM_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct MemoryMonitor {
    queued_bytes: AtomicUsize,
    /// Last sampled resident set size plus its growth since the sample before (0 before the
    /// first sample, or where not available).
    resident_bytes: AtomicUsize,
    /// `queued_bytes` when `resident_bytes` was sampled: what queues took since then is
    /// resident too, although no sample shows it yet.
    queued_at_sample_bytes: AtomicUsize,
    /// Settable at runtime (`set_high_watermark_bytes`, rabbitmqctl's
    /// set_vm_memory_high_watermark).
    high_watermark_bytes: AtomicUsize,
    /// Publishers resume below this: 90 % of the high watermark.
    low_watermark_bytes: AtomicUsize,
    alarms: Arc<Alarms>,
}

impl MemoryMonitor {
    pub fn new(high_watermark_bytes: usize, alarms: Arc<Alarms>) -> MemoryMonitor {
        MemoryMonitor {
            queued_bytes: AtomicUsize::new(0),
            resident_bytes: AtomicUsize::new(0),
            queued_at_sample_bytes: AtomicUsize::new(0),
            high_watermark_bytes: AtomicUsize::new(high_watermark_bytes),
            low_watermark_bytes: AtomicUsize::new(low_watermark_for(high_watermark_bytes)),
            alarms,
        }
    }

    /// Moves the watermark (RabbitMQ's set_vm_memory_high_watermark): the alarm is raised
    /// or cleared at once against the new one, as RabbitMQ's memory monitor does.
    pub fn set_high_watermark_bytes(&self, bytes: usize) {
        self.low_watermark_bytes
            .store(low_watermark_for(bytes), Relaxed);
        self.high_watermark_bytes.store(bytes, Relaxed);
        tracing::info!(high_watermark_bytes = bytes, "memory high watermark set");
        self.evaluate();
    }

    /// A queue took a message of `bytes`: the message that meets the watermark, by either
    /// measure, raises the alarm here, so its publisher is blocked at its next content header.
    pub fn add(&self, bytes: usize) {
        let now = self.queued_bytes.fetch_add(bytes, Relaxed) + bytes;
        let used = now.max(self.resident_estimate_bytes());
        if used > self.high_watermark_bytes() && !self.alarm_on() {
            self.evaluate();
        }
    }

    pub fn sub(&self, bytes: usize) {
        let now = self
            .queued_bytes
            .fetch_sub(bytes, Relaxed)
            .wrapping_sub(bytes);
        if now < self.low_watermark_bytes.load(Relaxed) && self.alarm_on() {
            self.evaluate();
        }
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Relaxed)
    }

    pub fn resident_bytes(&self) -> usize {
        self.resident_bytes.load(Relaxed)
    }

    /// The last RSS sample (projected) plus what queues took since it.
    fn resident_estimate_bytes(&self) -> usize {
        let accepted = self
            .queued_bytes()
            .saturating_sub(self.queued_at_sample_bytes.load(Relaxed));
        self.resident_bytes() + accepted
    }

    /// Records a sample of RSS (`rss_bytes`, already projected) with the queued bytes it
    /// includes.
    fn store_sample(&self, rss_bytes: usize) {
        // Queued first: a message accepted between the two stores is then counted twice (in
        // the estimate, until the next sample) rather than not at all.
        self.queued_at_sample_bytes
            .store(self.queued_bytes(), Relaxed);
        self.resident_bytes.store(rss_bytes, Relaxed);
    }

    pub fn high_watermark_bytes(&self) -> usize {
        self.high_watermark_bytes.load(Relaxed)
    }

    fn alarm_on(&self) -> bool {
        self.alarms.local().contains(Alarm::Memory)
    }

    /// Sets or clears the alarm from both measures, with hysteresis.
    fn evaluate(&self) {
        let used = self.queued_bytes().max(self.resident_estimate_bytes());
        if used > self.high_watermark_bytes() {
            if !self.alarm_on() {
                tracing::warn!(
                    queued_bytes = self.queued_bytes(),
                    resident_bytes = self.resident_estimate_bytes(),
                    high_watermark_bytes = self.high_watermark_bytes(),
                    "memory alarm"
                );
            }
            self.alarms.set(Alarm::Memory, true);
        } else if used < self.low_watermark_bytes.load(Relaxed) {
            self.alarms.set(Alarm::Memory, false);
        }
    }

    /// Samples RSS until the monitor is the last holder of itself (the broker is gone), on
    /// a thread of its own rather than a task: a task waits its turn behind the connections
    /// it is there to hold back. With 50 publishers of one-byte messages keeping both
    /// runtime workers busy, the sampling task went 1.2 s without a sample while RSS grew
    /// from 16 to 94 MiB against a 64 MiB watermark (issue 30); a sleeping thread is woken
    /// by the kernel on time, and a sample costs it one read of /proc.
    pub fn spawn_sampler(self: &Arc<Self>) {
        let monitor = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("warren-memory".into())
            .spawn(move || sample_until_gone(&monitor));
        if let Err(e) = spawned {
            tracing::error!("could not start the memory sampler: {e}");
        }
    }
}

fn sample_until_gone(monitor: &std::sync::Weak<MemoryMonitor>) {
    let mut last_trim = Instant::now();
    // The growth of the first sample is counted from now, not from zero: from zero the
    // first reading would count the broker's whole idle RSS twice, and a watermark below
    // twice the idle RSS would raise a false alarm at boot.
    let mut rss_trend = RssTrend::starting_at(resident_set_bytes().unwrap_or(0));
    // The most queued since the last trim: a trim is worth it once queues gave back a tenth
    // of the watermark from there.
    let mut queued_peak = 0;
    loop {
        std::thread::sleep(SAMPLE_INTERVAL);
        let Some(monitor) = monitor.upgrade() else {
            return;
        };
        let Some(rss) = resident_set_bytes() else {
            return;
        };
        monitor.store_sample(rss_trend.projected(rss));
        let queued = monitor.queued_bytes();
        queued_peak = queued_peak.max(queued);
        if rss >= monitor.low_watermark_bytes.load(Relaxed)
            && queued_peak - queued >= monitor.high_watermark_bytes() / 10
            && last_trim.elapsed() >= TRIM_INTERVAL
        {
            last_trim = Instant::now();
            queued_peak = queued;
            release_free_memory();
            if let Some(rss) = resident_set_bytes() {
                rss_trend = RssTrend::starting_at(rss);
                monitor.store_sample(rss);
            }
        }
        monitor.evaluate();
    }
}

/// Publishers resume below 90 % of the high watermark, so the alarm does not flap.
fn low_watermark_for(high_watermark_bytes: usize) -> usize {
    high_watermark_bytes / 10 * 9
}

/// The machine's memory (Linux `/proc/meminfo`'s MemTotal), which a relative watermark
/// (RabbitMQ's `vm_memory_high_watermark.relative`) is a fraction of.
pub fn total_memory_bytes() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: usize = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The process's resident set size, from /proc (None where there is no /proc).
pub fn resident_set_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// Asks the allocator to return free pages to the OS.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// RSS one sample ahead: the latest reading plus its growth since the one before, so that
/// a broker growing fast is held back before it gets there.
struct RssTrend {
    last_bytes: usize,
}

impl RssTrend {
    fn starting_at(rss_bytes: usize) -> RssTrend {
        RssTrend {
            last_bytes: rss_bytes,
        }
    }

    fn projected(&mut self, rss_bytes: usize) -> usize {
        let growth = rss_bytes.saturating_sub(self.last_bytes);
        self.last_bytes = rss_bytes;
        rss_bytes + growth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sample_is_not_counted_twice() {
        let idle = 40 << 20;
        let mut trend = RssTrend::starting_at(idle);
        assert_eq!(trend.projected(idle), idle);
        // Growing 10 MiB a sample: the next one is expected 10 MiB further.
        assert_eq!(trend.projected(idle + (10 << 20)), idle + (20 << 20));
        assert_eq!(trend.projected(idle), idle);
    }

    #[test]
    fn accounted_bytes_raise_and_clear_with_hysteresis() {
        let alarms = Arc::new(Alarms::default());
        let m = MemoryMonitor::new(1000, alarms.clone());
        m.add(900);
        assert!(alarms.active().is_empty());
        m.add(200);
        assert!(alarms.active().contains(Alarm::Memory));
        m.sub(150); // 950: above the low watermark (900)
        assert!(alarms.active().contains(Alarm::Memory));
        m.sub(100); // 850
        assert!(alarms.active().is_empty());
    }

    #[test]
    fn resident_memory_alone_raises_the_alarm() {
        let alarms = Arc::new(Alarms::default());
        let m = MemoryMonitor::new(1000, alarms.clone());
        m.resident_bytes.store(5000, Relaxed);
        m.evaluate();
        assert!(alarms.active().contains(Alarm::Memory));
        m.resident_bytes.store(100, Relaxed);
        m.evaluate();
        assert!(alarms.active().is_empty());
    }

    #[test]
    fn what_queues_take_after_a_sample_counts_as_resident_at_once() {
        let alarms = Arc::new(Alarms::default());
        let m = MemoryMonitor::new(1000, alarms.clone());
        m.add(100);
        // Sampled at 700 with 100 queued (a late sample: nothing runs it in this test).
        m.store_sample(700);
        m.add(250); // 700 + 250: under the watermark
        assert!(alarms.active().is_empty());
        m.add(100); // 700 + 350 > 1000, although queued (450) and the sample (700) are not
        assert!(alarms.active().contains(Alarm::Memory));
        // Consumed back to the sample: 700, under the low watermark (900).
        m.sub(350);
        assert!(alarms.active().is_empty());
        // Below the sample's queued bytes the estimate is the sample itself, never less.
        m.sub(100);
        assert_eq!(m.resident_estimate_bytes(), 700);
    }

    #[test]
    fn rss_is_readable_here() {
        assert!(resident_set_bytes().unwrap() > 0);
    }
}
