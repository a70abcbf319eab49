//! Seed 004 (the Qpid Dispatch Router latency study) over AMQP 0-9-1, as the report ran it:
//! every sender and every receiver is a client of its own — one connection with one channel
//! (the report: a process with one connection and one link) — each receiver has its own
//! queue (its "address"), each sender sends 10 msg/s of 100-byte unsettled (confirmed)
//! messages with the send time in the body, and each receiver takes the flight time the
//! moment a message arrives. Senders start only once every client is attached (the report's
//! note on speed). N runs from 1,000 to 10,000 senders; by default as N sender-receiver pairs,
//! with `--senders-per-receiver 40` as the report's other setup.
//!
//! The parts: `pacing` (the senders' clock), `worker` (a share of the clients), `link` (a
//! worker in this process or in a worker process of its own, for the descriptor limit),
//! `step` (one N: sizing, attach, send, drain, accounting) and `amqp10` (the AMQP 1.0
//! clients of `--protocol amqp10`).

/// Public for the tests of the client against a live broker (tests/scenarios.rs).
pub mod amqp10;
mod counters;
mod link;
pub(crate) mod pacing;
pub mod step;
mod worker;

pub use counters::Counters;
pub use link::{worker_main, WORKER_ARG};
pub use step::{step, StepConfig, StepResult};

use super::{Amqp10Address, Ctx, Protocol};
use crate::report::{Metric, PlotSpec, Report, Section, Table, Unit};
use anyhow::Result;
use std::fmt::Write as _;
use std::time::Duration;

/// The report's N.
pub const REPORT_STEPS: &[f64] = &[
    1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0, 9000.0, 9500.0, 10000.0,
];
/// `--quick` (CI): a handful of connections.
const QUICK_STEPS: &[f64] = &[4.0, 16.0];
/// 10 msg/s per sender.
const SEND_PERIOD: Duration = Duration::from_millis(100);
const BODY_BYTES: usize = 100;
/// Deliveries in flight per receiver; at 10 msg/s per sender it is never reached unless the
/// receiver falls behind.
const PREFETCH: u16 = 100;

/// The step settings `warren perf scenario many-pairs` uses for N senders.
pub fn config(ctx: &Ctx, uri: &str, senders: u32) -> StepConfig {
    StepConfig {
        uri: uri.to_owned(),
        senders,
        senders_per_receiver: ctx.args.senders_per_receiver.max(1),
        duration: Duration::from_secs_f64(ctx.step_s),
        period: SEND_PERIOD,
        body_bytes: BODY_BYTES,
        prefetch: PREFETCH,
        workers: ctx.args.workers,
        worker_exe: None,
        attach_timeout: Duration::from_secs(30),
        confirm_wait: Duration::from_secs(30),
        drain_timeout: Duration::from_secs_f64(ctx.args.drain_timeout.unwrap_or(30.0)),
        protocol: ctx.args.protocol,
        amqp10_address: ctx.args.amqp10_address,
    }
}

/// What was in flight when the broker's RSS was read, for the step's line: a figure read
/// while the clients lag behind includes their messages.
fn in_flight_note(r: &StepResult) -> String {
    match (r.in_flight_at_rss, r.peak_in_flight) {
        (Some(now), Some(peak)) => format!(
            " with {} messages in flight ({} unconfirmed, {} confirmed and not received; at most {} and {} before)",
            now.total(),
            now.unconfirmed,
            now.unreceived,
            peak.unconfirmed,
            peak.unreceived,
        ),
        _ => String::new(),
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<Report> {
    let k = ctx.args.senders_per_receiver.max(1);
    let ns = ctx.steps(REPORT_STEPS, QUICK_STEPS);
    let mut table = Table::new(
        &["N (senders asked)"],
        &[
            Metric::info("Senders", Unit::Count),
            Metric::info("Receivers", Unit::Count),
            Metric::info("Offered msg/s", Unit::Count),
            Metric::higher("Achieved msg/s", Unit::Count),
            Metric::lower("Mean", Unit::Ms).headline(),
            Metric::lower("99th", Unit::Ms).headline(),
            Metric::lower("Lost", Unit::Count),
            Metric::lower("Undelivered", Unit::Count),
            Metric::lower("Broker RSS, MiB", Unit::MiB).headline(),
        ],
    );
    let mut details = Table::new(
        &["N (senders asked)"],
        // The tool's bookkeeping: paced counts and the senders' own timing, no ratios.
        &[
            Metric::info("Worker processes", Unit::Count),
            Metric::info("Published", Unit::Count),
            Metric::info("Confirmed", Unit::Count),
            Metric::lower("Unconfirmed", Unit::Count),
            Metric::info("Received", Unit::Count),
            Metric::info("Late sends", Unit::Count),
            Metric::info("Skipped sends", Unit::Count),
            Metric::info("Max per sender", Unit::Count),
        ],
    );
    let mut notes = String::new();
    let mut limits = vec![];
    let mut addresses: Vec<String> = vec![];
    for &n in &ns {
        let mut values = vec![];
        let mut detail_values = vec![];
        for t in ctx.targets.clone() {
            eprintln!(
                "== many-pairs N={n} ({n} senders, {} per receiver) on {}",
                k, t.label
            );
            let r = step(&config(ctx, &t.uri, n as u32)).await?;
            eprintln!(
                "   {} senders, {} receivers; offered {:.0} msg/s, achieved {:.0} msg/s; published {} confirmed {} received {} undelivered {} lost {}{}; mean {:.3} ms p99 {:.3} ms; broker RSS {}{}",
                r.senders,
                r.receivers,
                r.offered_per_s,
                r.achieved_per_s,
                r.sent.published,
                r.sent.confirmed,
                r.received,
                r.undelivered,
                r.lost,
                if r.drained { "" } else { " (drain deadline)" },
                r.latency.mean_us / 1000.0,
                r.latency.p99_us as f64 / 1000.0,
                r.broker_rss_bytes
                    .map_or("unknown".to_owned(), |b| format!("{} MiB", b >> 20)),
                in_flight_note(&r)
            );
            for why in &r.capped {
                eprintln!("   capped: {why}");
                let _ = writeln!(
                    notes,
                    "- N={n} on {}: ran {} senders and {} receivers: {why}.",
                    t.label, r.senders, r.receivers
                );
            }
            if !r.drained {
                let _ = writeln!(
                    notes,
                    "- N={n} on {}: the queues were not empty when the drain deadline passed; what was still queued is counted as undelivered.",
                    t.label
                );
            }
            let limit = format!(
                "{}: the tool's open-files limit {}, the broker's {}",
                t.label,
                r.tool_fd_limit.map_or("unknown".into(), |l| l.to_string()),
                r.broker_fd_limit
                    .map_or("unknown (not a local process we can read)".into(), |l| l
                        .to_string())
            );
            if !limits.contains(&limit) {
                limits.push(limit);
            }
            if let Some(style) = r.amqp10_address {
                let used = format!(
                    "{}: {}",
                    t.label,
                    match style {
                        Amqp10Address::V1 => "v1, `/amq/queue/<q>`",
                        _ => "v2, `/queues/<q>`",
                    }
                );
                if !addresses.contains(&used) {
                    addresses.push(used);
                }
            }
            values.push(vec![
                Some(r.senders as f64),
                Some(r.receivers as f64),
                Some(r.offered_per_s),
                Some(r.achieved_per_s),
                Some(r.latency.mean_us / 1000.0),
                Some(r.latency.p99_us as f64 / 1000.0),
                Some(r.lost as f64),
                Some(r.undelivered as f64),
                r.broker_rss_bytes.map(|b| b as f64 / (1 << 20) as f64),
            ]);
            detail_values.push(vec![
                Some(f64::from(r.worker_processes)),
                Some(r.sent.published as f64),
                Some(r.sent.confirmed as f64),
                Some(r.sent.unconfirmed as f64),
                Some(r.received as f64),
                Some(r.sent.late as f64),
                Some(r.sent.skipped as f64),
                Some(r.sent.max_per_sender as f64),
            ]);
        }
        ctx.commands.push(format!(
            "warren perf scenario many-pairs --uri URI --steps {n} --senders-per-receiver {k} --duration {}{}",
            ctx.step_s,
            match ctx.args.protocol {
                Protocol::Amqp091 => "",
                Protocol::Amqp10 => " --protocol amqp10",
            }
        ));
        table.push(vec![format!("{n}")], n, values);
        details.push(vec![format!("{n}")], n, detail_values);
    }

    let setup = if k == 1 {
        "N senders and N receivers (pairs: each receiver's queue has one sender)".to_owned()
    } else {
        format!("N senders and N/{k} receivers ({k} senders per receiver's queue)")
    };
    let client = match ctx.args.protocol {
        Protocol::Amqp091 => "AMQP 0-9-1 connection with one channel",
        Protocol::Amqp10 => "AMQP 1.0 connection with one session and one link",
    };
    let mut text = format!(
        "Setup: {setup}. Every client is its own {client}. \
         Open-files limits (soft, after raising the tool's to its hard limit): {}.",
        limits.join("; ")
    );
    if !addresses.is_empty() {
        text += &format!(" AMQP 1.0 queue addresses: {}.", addresses.join("; "));
    }
    if notes.is_empty() {
        text += " No step was capped by a descriptor limit.";
    } else {
        text += "\n\nWhere N was capped:\n\n";
        text += &notes;
    }
    let mut plots = vec![PlotSpec {
        file_stem: "many_pairs_latency".into(),
        title: "mean and 99th percentile flight time, every N".into(),
        x_label: "N (senders)".into(),
        y_label: "ms".into(),
        metric_indexes: vec![4, 5],
        x_max: None,
    }];
    // The report's first graph leaves out its two largest N (9,500 and 10,000), which change
    // the scale: here, every N above 90% of the largest.
    let largest = ns.iter().cloned().fold(0.0, f64::max);
    let first = ns.iter().filter(|&&x| x <= largest * 0.9).count();
    if first >= 2 && first < ns.len() {
        plots.insert(
            0,
            PlotSpec {
                file_stem: "many_pairs_latency_first".into(),
                title: format!(
                    "mean and 99th percentile flight time, N up to {:.0}",
                    largest * 0.9
                ),
                x_label: "N (senders)".into(),
                y_label: "ms".into(),
                metric_indexes: vec![4, 5],
                x_max: Some(largest * 0.9),
            },
        );
    }
    Ok(Report {
        title: "warren perf scenario many-pairs".into(),
        intro: "Seed 004 (message latency with many senders and receivers), as the report ran it: \
                every sender and every receiver is a client of its own with one connection and one \
                channel (1.0: one session and one link), each receiver consumes its own queue, each sender sends 10 msg/s of 100-byte \
                messages unsettled (0-9-1: in confirm mode; 1.0: unsettled transfers, settled by the \
                broker's accepted) with the send time in the body, and receivers acknowledge each \
                message (0-9-1: basic.ack; 1.0: accepted). Flight time is taken by the receiver the moment a message arrives. \
                Senders start only once every client is attached; a sender never sends faster than \
                10 msg/s (a late sender re-phases instead of catching up), and the achieved rate is \
                shown next to the offered one. Lost = confirmed by the broker but neither received \
                nor still queued after a drain that checks every queue empty (passive declares); \
                messages still queued at the drain deadline are undelivered, not lost."
            .into(),
        sections: vec![
            Section {
                heading: "Flight time by N".into(),
                text,
                table,
                plots,
            },
            Section {
                heading: "Run details".into(),
                text: "Late sends ran more than 2 ms after their slot (the sender re-phased); skipped \
                       sends were more than a period overdue and were not made. Max per sender is the \
                       most messages any one sender published in the step."
                    .into(),
                table: details,
                plots: vec![],
            },
        ],
        ..Default::default()
    })
}
