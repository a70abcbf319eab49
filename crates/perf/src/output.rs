//! What a run reports: PerfTest-style interval lines and summary on stdout, and the same data
//! machine-readable (`--json`, `--csv`).

use crate::stats::{Counts, Percentiles};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct IntervalRecord {
    pub elapsed_s: f64,
    pub sent_per_s: f64,
    pub confirmed_per_s: f64,
    pub nacked_per_s: f64,
    pub returned_per_s: f64,
    pub received_per_s: f64,
    /// Consumer-side flight time.
    pub latency: Percentiles,
    pub confirm_latency: Percentiles,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub label: String,
    pub uri: String,
    /// How long producers ran.
    pub duration_s: f64,
    pub counts: Counts,
    /// Confirmed (or sent, without confirms) and never received; None when the run did not
    /// drain within the drain timeout, since then it cannot be told apart from "in flight".
    pub lost: Option<u64>,
    pub drained: bool,
    pub send_rate_per_s: f64,
    pub receive_rate_per_s: f64,
    pub confirm_rate_per_s: f64,
    pub latency: Percentiles,
    pub confirm_latency: Percentiles,
    /// The largest per-interval percentile over the steady intervals ("Max 99th" in the seeds).
    pub max_p75_us: u64,
    pub max_p95_us: u64,
    pub max_p99_us: u64,
    /// Broker CPU over the run in % of one core, when the broker is local.
    pub broker_cpu_percent: Option<f64>,
    pub broker_rss_bytes: Option<u64>,
    /// This tool's own CPU in % of one core.
    pub tool_cpu_percent: Option<f64>,
    pub errors: Vec<String>,
    pub intervals: Vec<IntervalRecord>,
}

fn pct_line(p: &Percentiles) -> String {
    format!(
        "{}/{}/{}/{}/{}/{}/{}",
        p.min_us, p.p50_us, p.p75_us, p.p95_us, p.p99_us, p.p999_us, p.max_us
    )
}

pub fn interval_line(id: &str, r: &IntervalRecord) -> String {
    let mut line = format!(
        "id: {id}, time: {:.3}s, sent: {:.0} msg/s, received: {:.0} msg/s",
        r.elapsed_s, r.sent_per_s, r.received_per_s
    );
    if r.confirmed_per_s > 0.0 || r.nacked_per_s > 0.0 {
        line += &format!(
            ", confirmed: {:.0} msg/s, nacked: {:.0} msg/s",
            r.confirmed_per_s, r.nacked_per_s
        );
    }
    if r.returned_per_s > 0.0 {
        line += &format!(", returned: {:.0} msg/s", r.returned_per_s);
    }
    line += &format!(
        ", min/median/75th/95th/99th/99.9th/max consumer latency: {} µs",
        pct_line(&r.latency)
    );
    if r.confirm_latency.count > 0 {
        line += &format!(", confirm latency: {} µs", pct_line(&r.confirm_latency));
    }
    line
}

pub fn summary(r: &RunResult) -> String {
    let c = &r.counts;
    let mut s = format!(
        "id: {}, sending rate avg: {:.0} msg/s\nid: {}, receiving rate avg: {:.0} msg/s\n",
        r.label, r.send_rate_per_s, r.label, r.receive_rate_per_s
    );
    s += &format!(
        "id: {}, sent: {}, confirmed: {}, nacked: {}, returned: {}, received: {}, duplicates: {}, lost: {}\n",
        r.label,
        c.sent,
        c.confirmed,
        c.nacked,
        c.returned,
        c.received,
        c.duplicates,
        r.lost.map_or("n/a (not drained)".to_owned(), |l| l.to_string())
    );
    s += &format!(
        "id: {}, consumer latency min/median/75th/95th/99th/99.9th/max {} µs, mean {:.0} µs; max per-interval 75th/95th/99th {}/{}/{} µs\n",
        r.label,
        pct_line(&r.latency),
        r.latency.mean_us,
        r.max_p75_us,
        r.max_p95_us,
        r.max_p99_us
    );
    if r.confirm_latency.count > 0 {
        s += &format!(
            "id: {}, confirm latency min/median/75th/95th/99th/99.9th/max {} µs\n",
            r.label,
            pct_line(&r.confirm_latency)
        );
    }
    if let Some(cpu) = r.tool_cpu_percent {
        s += &format!("id: {}, warren perf CPU: {:.0}% of one core", r.label, cpu);
        if let Some(b) = r.broker_cpu_percent {
            s += &format!(", broker CPU: {b:.0}%");
        }
        if let Some(rss) = r.broker_rss_bytes {
            s += &format!(", broker RSS: {:.1} MiB", rss as f64 / (1 << 20) as f64);
        }
        s += "\n";
    }
    for e in &r.errors {
        s += &format!("id: {}, error: {e}\n", r.label);
    }
    s
}

pub fn write_json(path: &Path, r: &RunResult) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

pub fn write_csv(path: &Path, r: &RunResult) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        f,
        "time_s,sent_per_s,confirmed_per_s,nacked_per_s,returned_per_s,received_per_s,\
         latency_min_us,latency_p50_us,latency_p75_us,latency_p95_us,latency_p99_us,latency_p999_us,latency_max_us,\
         confirm_p50_us,confirm_p99_us"
    )?;
    for i in &r.intervals {
        let l = &i.latency;
        writeln!(
            f,
            "{:.3},{:.1},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{}",
            i.elapsed_s,
            i.sent_per_s,
            i.confirmed_per_s,
            i.nacked_per_s,
            i.returned_per_s,
            i.received_per_s,
            l.min_us,
            l.p50_us,
            l.p75_us,
            l.p95_us,
            l.p99_us,
            l.p999_us,
            l.max_us,
            i.confirm_latency.p50_us,
            i.confirm_latency.p99_us
        )?;
    }
    f.flush()
}
