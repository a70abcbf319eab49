//! `DiskMonitor`: RabbitMQ's disk alarm. It polls the free space of the filesystem holding
//! the data directory and raises `Alarm::Disk` while it is below the limit
//! (`--disk-free-limit-bytes`, 50 MB by default as RabbitMQ's `disk_free_limit`).
//!
//! The poll interval adapts as RabbitMQ's does: the closer free space is to the limit, the
//! more often it looks (every 100 ms when within the distance a fast writer covers in a
//! second, at most every 10 s when far away), so a filling disk is caught in time without
//! polling an idle one all day.

use crate::alarm::{Alarm, Alarms};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// RabbitMQ's default `disk_free_limit.absolute`.
pub const DEFAULT_DISK_FREE_LIMIT_BYTES: u64 = 50_000_000;

const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(10);
/// The write rate the interval is sized for: free space cannot fall by more than the margin
/// between two polls unless the disk fills faster than this.
const ASSUMED_WRITE_BYTES_PER_S: u64 = 250_000_000;

#[derive(Debug)]
pub struct DiskMonitor {
    path: PathBuf,
    /// The configured limit, or the one rabbitmqctl's set_disk_free_limit set since.
    limit_bytes: AtomicU64,
    /// Last measured free bytes (u64::MAX before the first measure).
    free_bytes: AtomicU64,
    alarms: Arc<Alarms>,
}

impl DiskMonitor {
    pub fn new(path: &Path, limit_bytes: u64, alarms: Arc<Alarms>) -> Arc<DiskMonitor> {
        Arc::new(DiskMonitor {
            path: path.to_owned(),
            limit_bytes: AtomicU64::new(limit_bytes),
            free_bytes: AtomicU64::new(u64::MAX),
            alarms,
        })
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes.load(Relaxed)
    }

    /// rabbitmqctl set_disk_free_limit: a new limit, checked against at once (the alarm is
    /// raised or cleared now). Not kept across a restart, as in RabbitMQ.
    pub fn set_limit_bytes(&self, limit_bytes: u64) {
        self.limit_bytes.store(limit_bytes, Relaxed);
        tracing::info!(limit_bytes, "disk free limit set");
        self.check();
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes.load(Relaxed)
    }

    /// Measures once, sets or clears the alarm, and says when to look again.
    pub fn check(&self) -> Duration {
        let Some(free) = free_bytes(&self.path) else {
            tracing::warn!(path = %self.path.display(), "cannot measure free disk space");
            return MAX_INTERVAL;
        };
        self.free_bytes.store(free, Relaxed);
        let limit_bytes = self.limit_bytes();
        let alarm = free < limit_bytes;
        if alarm && !self.alarms.local().contains(Alarm::Disk) {
            tracing::warn!(
                free_bytes = free,
                limit_bytes,
                path = %self.path.display(),
                "disk alarm: free space below the limit"
            );
        }
        self.alarms.set(Alarm::Disk, alarm);
        let margin = free.abs_diff(limit_bytes);
        let interval_ms = margin.saturating_mul(1000) / ASSUMED_WRITE_BYTES_PER_S;
        Duration::from_millis(interval_ms).clamp(MIN_INTERVAL, MAX_INTERVAL)
    }

    /// Checks now, then keeps polling on the tokio runtime while the monitor is alive.
    pub fn spawn(self: &Arc<Self>) {
        let first = self.check();
        let monitor = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut wait = first;
            loop {
                tokio::time::sleep(wait).await;
                let Some(monitor) = monitor.upgrade() else {
                    return;
                };
                wait = monitor.check();
            }
        });
    }
}

/// Bytes available to an unprivileged writer on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is a plain C struct of integers, for which all zero bytes is valid.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is NUL-terminated and stat is a valid out-pointer for the call.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarm_follows_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 0);
        let alarms = Arc::new(Alarms::default());
        let low = DiskMonitor::new(dir.path(), 1, alarms.clone());
        low.check();
        assert!(alarms.active().is_empty());
        let high = DiskMonitor::new(dir.path(), u64::MAX, alarms.clone());
        let wait = high.check();
        assert!(alarms.active().contains(Alarm::Disk));
        assert!(wait >= MIN_INTERVAL && wait <= MAX_INTERVAL);
        low.check();
        assert!(alarms.active().is_empty());
    }
}
