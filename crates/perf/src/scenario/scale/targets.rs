//! The target figures beside what each broker measured: the report's first table,
//! so a run answers "are we there" at a glance. A figure measured below the target's scale
//! (64k queues where the target speaks of 1M) is projected or taken at the largest step,
//! and its cell says which.

use super::bindings::BindingSweep;
use super::connections::ConnectionSweep;
use super::queues::{QueueStep, HTTP_ENDPOINTS};
use crate::report::{Section, Table};
use std::fmt::Write as _;

/// What the sweeps measured, per broker in report order (None: the sweep did not run).
#[derive(Debug, Default)]
pub struct Measured {
    pub queues: Option<Vec<Vec<QueueStep>>>,
    pub bindings: Option<Vec<BindingSweep>>,
    pub connections: Option<Vec<ConnectionSweep>>,
}

const GIB: f64 = (1u64 << 30) as f64;

/// "met" or "missed" after a figure, against its target.
fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

/// One row's cell for one broker.
type Cell = Option<String>;

fn pipelined_rate(steps: &[QueueStep]) -> Cell {
    let rates: Vec<f64> = steps.iter().filter_map(|s| s.pipelined_per_s).collect();
    let low = rates.iter().copied().reduce(f64::min)?;
    let high = rates.iter().copied().fold(low, f64::max);
    Some(format!(
        "lowest {low:.0}/s, {:.2} of the highest step ({})",
        low / high,
        verdict(low >= 20_000.0)
    ))
}

fn queue_memory(steps: &[QueueStep]) -> Cell {
    let last = steps.last()?;
    let per_queue = last.bytes_per_queue?;
    let gib = per_queue * 1e6 / GIB;
    Some(format!(
        "{gib:.2} GiB ({per_queue:.0} B per queue at {} queues × 1M; {})",
        last.queues,
        verdict(gib <= 1.0)
    ))
}

fn http_at_largest(steps: &[QueueStep], endpoint: usize, target_ms: f64) -> Cell {
    let last = steps.last()?;
    let (ms, _) = last.http.get(endpoint).copied().flatten()?;
    Some(format!(
        "{ms:.1} ms at {} queues ({})",
        last.queues,
        verdict(ms <= target_ms)
    ))
}

fn route_time(sweep: &BindingSweep) -> Cell {
    let last = sweep.steps.last()?;
    let route = last.route?;
    let over = route.median_us - sweep.one_binding?.median_us;
    // Below one binding's time is noise around no cost at all.
    let cost = if over > 0.0 {
        format!("{over:.1} µs over one binding")
    } else {
        "no more than with one binding".to_owned()
    };
    Some(format!(
        "{cost} at {} bindings (publish→confirm median {:.1} µs; {})",
        last.bindings,
        route.median_us,
        verdict(over <= 5.0)
    ))
}

fn connection_memory(sweep: &ConnectionSweep) -> Cell {
    let last = sweep.steps.last()?;
    let per = last.bytes_per_connection?;
    Some(format!(
        "{per:.0} B at {} connections ({})",
        last.connections,
        verdict(per <= 4096.0)
    ))
}

/// A row's cells from one sweep's per-broker results; "not measured" without them.
fn each<T>(results: &Option<Vec<T>>, cell: impl Fn(&T) -> Cell) -> Vec<Cell> {
    match results {
        Some(all) => all.iter().map(cell).collect(),
        None => vec![],
    }
}

pub fn section(measured: &Measured, brokers: &[String]) -> Section {
    let per_broker = |f: &dyn Fn(&[QueueStep]) -> Cell| -> Vec<Cell> {
        match &measured.queues {
            Some(all) => all.iter().map(|steps| f(steps)).collect(),
            None => vec![None; brokers.len()],
        }
    };
    let endpoint = |name: &str| HTTP_ENDPOINTS.iter().position(|(n, _)| *n == name);
    let http_row = |name: &str, target_ms: f64| -> Vec<Cell> {
        match endpoint(name) {
            Some(e) => per_broker(&|s| http_at_largest(s, e, target_ms)),
            None => vec![None; brokers.len()],
        }
    };
    let rows: Vec<(&str, &str, Vec<Cell>)> = vec![
        (
            "Declare rate, pipelined",
            "≥ 20000/s, flat over the counts",
            per_broker(&pipelined_rate),
        ),
        ("Memory for 1M queues", "≤ 1 GiB", per_broker(&queue_memory)),
        (
            "Median route time at 1M bindings",
            "≤ 5 µs",
            each(&measured.bindings, route_time),
        ),
        (
            "Memory per idle connection",
            "≤ 4 KB (4096 B)",
            each(&measured.connections, connection_memory),
        ),
        (
            "GET /api/queues, one page",
            "≤ 50 ms",
            http_row("GET /api/queues page", 50.0),
        ),
        (
            "GET /api/overview",
            "≤ 20 ms",
            http_row("GET /api/overview", 20.0),
        ),
        (
            "GET /metrics at 100k queues",
            "≤ 50 ms",
            http_row("GET /metrics", 50.0),
        ),
    ];
    let mut text = String::from(
        "The issue's targets (one node). A figure the sweep did not reach is taken at its \
         largest step or projected from it, as its cell says; \"not measured\": that sweep or \
         URL was not part of this run.\n\n",
    );
    let _ = writeln!(text, "| Figure | Target | {} |", brokers.join(" | "));
    let _ = writeln!(text, "| :- | :- |{}", " :- |".repeat(brokers.len()));
    for (figure, target, cells) in rows {
        let cells: Vec<String> = (0..brokers.len())
            .map(|b| {
                cells
                    .get(b)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| "not measured".into())
            })
            .collect();
        let _ = writeln!(text, "| {figure} | {target} | {} |", cells.join(" | "));
    }
    Section {
        heading: "Targets".into(),
        text,
        table: Table::new(&[], &[]),
        plots: vec![],
    }
}
