//! Where scenario scale reads a broker's memory: the RSS of its process from /proc when the
//! process is known (`--broker-pid`, or the local process listening on the URI's port), else
//! the management API's `/api/nodes` `mem_used` (which Warren and RabbitMQ both answer; for
//! RabbitMQ it is the Erlang VM's own count, close to but not the same as RSS). The report
//! says which one each broker's figures are.

use crate::broker_http::BrokerHttp;
use crate::broker_proc::BrokerProcess;
use crate::client::BrokerUris;
use crate::scenario::Target;

const SETTLE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// Samples in a row that must agree: a window longer than the period on which a broker gives
/// freed memory back by itself — Warren's idle trimmer looks every 5 s and trims after one
/// quiet look, so up to 10 s after the last work; RabbitMQ's garbage collection runs within
/// seconds. A shorter window read the memory before it fell and called that what is kept.
const SETTLE_WINDOW: usize = 12;
/// Samples taken at most before the last one is taken as it is.
const SETTLE_TRIES: usize = 40;
/// Samples this close (a fraction of the largest) count as settled.
const SETTLED_WITHIN: f64 = 0.01;

/// Whether memory moved less than `SETTLED_WITHIN` across `samples`.
fn settled(samples: &[u64]) -> bool {
    let (Some(low), Some(high)) = (samples.iter().min(), samples.iter().max()) else {
        return true;
    };
    (high - low) as f64 <= SETTLED_WITHIN * *high as f64
}

#[derive(Debug, Clone)]
pub enum MemorySource {
    Process(BrokerProcess),
    Management(String),
    Unknown,
}

impl MemorySource {
    pub fn for_target(target: &Target) -> MemorySource {
        if let Some(pid) = target.pid {
            return MemorySource::Process(BrokerProcess { pid });
        }
        let local = BrokerUris::parse(&target.uri)
            .ok()
            .map(|u| u.first().clone())
            .filter(|u| u.is_local())
            .and_then(|u| BrokerProcess::find_by_port(u.port));
        match (local, &target.management_url) {
            (Some(process), _) => MemorySource::Process(process),
            (None, Some(url)) => MemorySource::Management(url.clone()),
            (None, None) => MemorySource::Unknown,
        }
    }

    /// The process, when memory is read from /proc (its descriptor limit is read too).
    pub fn pid(&self) -> Option<u32> {
        match self {
            MemorySource::Process(p) => Some(p.pid),
            _ => None,
        }
    }

    /// Bytes in use now; None when unknown or the read failed.
    pub async fn sample(&self, http: &BrokerHttp) -> Option<u64> {
        match self {
            MemorySource::Process(p) => p.sample().map(|s| s.rss_bytes),
            MemorySource::Management(url) => http.mem_used(url).await.ok(),
            MemorySource::Unknown => None,
        }
    }

    /// Bytes in use once the figure stops moving: sampled each `SETTLE_EVERY` until the last
    /// `SETTLE_WINDOW` samples are within `SETTLED_WITHIN` of each other (at most
    /// `SETTLE_TRIES` samples). For the baselines and the after-close figure: a broker that has just deleted
    /// thousands of objects gives memory back for seconds (RabbitMQ's garbage collection), and
    /// a baseline read in that fall made the next sweep's per-object figures negative.
    pub async fn settled_sample(&self, http: &BrokerHttp) -> Option<u64> {
        let mut samples = vec![self.sample(http).await?];
        while samples.len() < SETTLE_TRIES {
            tokio::time::sleep(SETTLE_EVERY).await;
            samples.push(self.sample(http).await?);
            let window = &samples[samples.len().saturating_sub(SETTLE_WINDOW)..];
            if window.len() == SETTLE_WINDOW && settled(window) {
                break;
            }
        }
        samples.last().copied()
    }

    pub fn describe(&self) -> String {
        match self {
            MemorySource::Process(p) => format!("RSS of process {} (/proc)", p.pid),
            MemorySource::Management(_) => "`mem_used` from the management API's /api/nodes".into(),
            MemorySource::Unknown => {
                "unknown (not a local process; give --broker-pid or --management-url)".into()
            }
        }
    }
}

/// Bytes in MiB, for the tables' "Broker memory, MiB" columns.
pub fn mib(bytes: Option<u64>) -> Option<f64> {
    bytes.map(|b| b as f64 / (1u64 << 20) as f64)
}

/// Bytes per object between two memory samples; None when either is unknown. Can be negative
/// when the broker gave memory back in between (a garbage collection, the allocator).
pub fn per_object(before: Option<u64>, after: Option<u64>, objects: u64) -> Option<f64> {
    let (before, after) = (before?, after?);
    (objects > 0).then(|| (after as f64 - before as f64) / objects as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_within_one_percent_across_the_window() {
        assert!(settled(&[1000 << 20, 1005 << 20, 1002 << 20]));
        assert!(settled(&[1005 << 20, 1000 << 20]));
        assert!(!settled(&[919 << 20, 919 << 20, 543 << 20]));
        // A fall at the window's end (a trim after a quiet spell) is not settled yet.
        assert!(!settled(&[73 << 20, 73 << 20, 73 << 20, 40 << 20]));
        assert!(settled(&[0, 0]));
    }

    #[test]
    fn per_object_is_the_difference_over_the_count() {
        assert_eq!(per_object(Some(1000), Some(5000), 2), Some(2000.0));
        assert_eq!(per_object(Some(5000), Some(1000), 2), Some(-2000.0));
        assert_eq!(per_object(None, Some(1000), 2), None);
        assert_eq!(per_object(Some(1), Some(2), 0), None);
        assert_eq!(mib(Some(3 << 20)), Some(3.0));
    }
}
