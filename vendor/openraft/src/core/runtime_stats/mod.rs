//! Runtime statistics collection.
//!
//! Everything here is reachable only through `Raft::runtime_stats`, which exists only under the
//! `runtime-stats` feature. With the feature off the whole module is legitimately unreachable, so
//! the allow below is conditioned on that rather than applied outright: with the feature on, dead
//! code here is real dead code and still warns.
#![cfg_attr(not(feature = "runtime-stats"), allow(dead_code))]

mod display_mode;
#[allow(clippy::module_inception)]
mod runtime_stats;
mod runtime_stats_display;

pub mod log_stage;

pub use self::display_mode::DisplayMode;
pub use self::runtime_stats::RuntimeStats;
pub use self::runtime_stats_display::RuntimeStatsDisplay;

/// Warren: the histogram type of the runtime statistics. They are read only through the
/// `runtime-stats` feature; without it they are written and never read, so they are
/// [`Unrecorded`]: nothing is kept (the 17 histograms of a Raft instance were ~10 KB of zeroed
/// buckets, and a Warren node holds an instance per quorum queue).
#[cfg(feature = "runtime-stats")]
pub type StatsHistogram = base2histogram::Histogram;
#[cfg(not(feature = "runtime-stats"))]
pub type StatsHistogram = Unrecorded;

/// Warren: a new histogram of the runtime statistics.
pub(crate) fn stats_histogram() -> StatsHistogram {
    #[cfg(feature = "runtime-stats")]
    return base2histogram::Histogram::with_log_scale(base2histogram::LogScale::DEFAULT_WIDTH, 1);
    #[cfg(not(feature = "runtime-stats"))]
    return Unrecorded;
}

/// Warren: the histogram of the runtime statistics without the `runtime-stats` feature:
/// recording keeps nothing, and reading it gives an empty histogram's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unrecorded;

impl Unrecorded {
    pub fn record(&mut self, _value: u64) {}

    pub fn record_n(&mut self, _value: u64, _count: u64) {}

    pub fn percentile_stats(&self) -> base2histogram::PercentileStats {
        base2histogram::Histogram::from(*self).percentile_stats()
    }
}

impl From<Unrecorded> for base2histogram::Histogram {
    fn from(_: Unrecorded) -> Self {
        base2histogram::Histogram::with_log_scale(1, 1)
    }
}
