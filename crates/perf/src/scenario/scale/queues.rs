//! The queues sweep: durable classic queues declared up to each count in turn (1k, 4k, 16k,
//! ...; the queues of one step stay for the next), each step's new queues part one at a
//! time and part pipelined, then the broker's memory per queue and the HTTP API's timings
//! with that many queues: a page of /api/queues, /api/overview, /api/definitions and
//! Prometheus /metrics (time to the last byte, and size).

use super::in_flight;
use super::memory::{mib, per_object, MemorySource};
use super::Ctx;
use super::{broker_readers, first_node};
use crate::broker_http::BrokerHttp;
use crate::client::{Channel, QueueOptions};
use crate::report::{Metric, PlotSpec, Section, Table, Unit};
use crate::scenario::Target;
use anyhow::Result;
use std::time::Duration;

/// The most queues of a step declared one at a time: enough for a steady rate, few enough
/// that a slow broker's step does not take minutes.
pub const ONE_AT_A_TIME_MAX: u64 = 2000;
/// How long the broker is left after a step before its memory is read (queue processes
/// settle, RabbitMQ's hibernate).
pub const SETTLE: Duration = Duration::from_millis(500);

pub fn queue_name(i: u64) -> String {
    format!("scale-q-{i:07}")
}

/// The HTTP endpoints timed at every step: their column name and their path under the
/// management API (`Some`) or the Prometheus endpoint (`None`).
pub const HTTP_ENDPOINTS: &[(&str, Option<&str>)] = &[
    (
        "GET /api/queues page",
        Some("/api/queues?page=1&page_size=100"),
    ),
    ("GET /api/overview", Some("/api/overview")),
    ("GET /api/definitions", Some("/api/definitions")),
    ("GET /metrics", None),
];

/// One step's figures on one broker.
#[derive(Debug, Clone, Default)]
pub struct QueueStep {
    pub queues: u64,
    pub one_at_a_time_per_s: Option<f64>,
    pub pipelined_per_s: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub bytes_per_queue: Option<f64>,
    /// Per `HTTP_ENDPOINTS`: (ms, bytes) when the URL is known and the GET succeeded.
    pub http: Vec<Option<(f64, usize)>>,
}

/// The URL of an endpoint of `HTTP_ENDPOINTS` on this broker, when its base URL was given.
pub fn endpoint_url(target: &Target, path: Option<&str>) -> Option<String> {
    match path {
        Some(p) => Some(format!(
            "{}{p}",
            target.management_url.as_deref()?.trim_end_matches('/')
        )),
        None => {
            let base = target.prometheus_url.as_deref()?.trim_end_matches('/');
            Some(if base.ends_with("/metrics") {
                base.to_owned()
            } else {
                format!("{base}/metrics")
            })
        }
    }
}

async fn declare(channel: Channel, name: String) -> crate::client::Result<()> {
    let durable = QueueOptions {
        durable: true,
        ..Default::default()
    };
    channel.queue_declare(&name, &durable).await.map(drop)
}

async fn delete(channel: Channel, name: String) -> crate::client::Result<()> {
    channel.queue_delete(&name).await
}

/// Runs the sweep on one broker; `notes` gets what went wrong (an HTTP GET that failed).
pub async fn sweep(
    target: &Target,
    counts: &[u64],
    memory: &MemorySource,
    http: &BrokerHttp,
    notes: &mut Vec<String>,
) -> Result<Vec<QueueStep>> {
    let uri = first_node(&target.uri)?;
    let baseline = memory.settled_sample(http).await;
    let mut declared = 0u64;
    let mut steps = vec![];
    let result = async {
        for &count in counts {
            let new = count.saturating_sub(declared);
            let one_by_one = (new / 2).min(ONE_AT_A_TIME_MAX);
            let names = |from: u64, to: u64| (from..to).map(queue_name).collect::<Vec<_>>();
            eprintln!(
                "== scale queues: {declared} -> {count} on {} ({one_by_one} one at a time, {} pipelined)",
                target.label,
                new - one_by_one
            );
            let s1 = in_flight::one_at_a_time(&uri, names(declared, declared + one_by_one), declare)
                .await?;
            let s2 = in_flight::pipelined(&uri, names(declared + one_by_one, count), declare).await?;
            declared = count.max(declared);
            let rate = |n: u64, s: f64| (n > 0 && s > 0.0).then(|| n as f64 / s);
            tokio::time::sleep(SETTLE).await;
            let memory_bytes = memory.sample(http).await;
            let mut step = QueueStep {
                queues: count,
                one_at_a_time_per_s: rate(one_by_one, s1),
                pipelined_per_s: rate(new - one_by_one, s2),
                memory_bytes,
                bytes_per_queue: per_object(baseline, memory_bytes, count),
                http: vec![],
            };
            for (name, path) in HTTP_ENDPOINTS {
                let timed = match endpoint_url(target, *path) {
                    Some(url) => match http.get(&url).await {
                        Ok(f) => Some((f.ms, f.bytes)),
                        Err(e) => {
                            notes.push(format!("{} at {count} queues: {name}: {e}", target.label));
                            None
                        }
                    },
                    None => None,
                };
                step.http.push(timed);
            }
            eprintln!(
                "   one at a time {:.0}/s, pipelined {:.0}/s, memory {} ({} per queue); HTTP {:?}",
                step.one_at_a_time_per_s.unwrap_or(0.0),
                step.pipelined_per_s.unwrap_or(0.0),
                memory_bytes.map_or("unknown".into(), |b| format!("{} MiB", b >> 20)),
                step.bytes_per_queue.map_or("unknown".into(), |b| format!("{b:.0} B")),
                step.http
            );
            steps.push(step);
        }
        anyhow::Ok(())
    }
    .await;
    // The queues go whatever happened, so the next sweep and broker start clean.
    eprintln!(
        "== scale queues: deleting {declared} queues on {}",
        target.label
    );
    let deleted = in_flight::pipelined(&uri, (0..declared).map(queue_name).collect(), delete).await;
    result?;
    deleted?;
    Ok(steps)
}

/// The HTTP endpoints some broker has a URL for (the others would be columns of dashes).
fn timed_endpoints(ctx: &Ctx) -> Vec<usize> {
    (0..HTTP_ENDPOINTS.len())
        .filter(|&i| {
            ctx.targets
                .iter()
                .any(|t| endpoint_url(t, HTTP_ENDPOINTS[i].1).is_some())
        })
        .collect()
}

pub async fn section(
    ctx: &Ctx,
    counts: &[u64],
    memory_text: &str,
) -> Result<(Section, Vec<Vec<QueueStep>>)> {
    let endpoints = timed_endpoints(ctx);
    let mut metrics = vec![
        Metric::higher("Declares/s, one at a time", Unit::Count).headline(),
        Metric::higher(
            &format!(
                "Declares/s, pipelined ({} in flight)",
                in_flight::PIPELINED_CONNECTIONS * in_flight::PIPELINED_CHANNELS
            ),
            Unit::Count,
        )
        .headline(),
        Metric::lower("Memory per queue, bytes", Unit::Count).headline(),
        Metric::lower("Broker memory, MiB", Unit::MiB),
    ];
    for &e in &endpoints {
        let m = Metric::lower(HTTP_ENDPOINTS[e].0, Unit::Ms);
        metrics.push(if e == 0 { m.headline() } else { m });
    }
    for &e in &endpoints {
        metrics.push(Metric::info(
            &format!(
                "{} size, KiB",
                HTTP_ENDPOINTS[e].0.trim_start_matches("GET ")
            ),
            Unit::Count,
        ));
    }
    let mut per_broker = vec![];
    let mut notes = vec![];
    for t in &ctx.targets {
        let (http, memory) = broker_readers(t)?;
        per_broker.push(sweep(t, counts, &memory, &http, &mut notes).await?);
    }
    let mut table = Table::new(&["Queues"], &metrics);
    for (i, &count) in counts.iter().enumerate() {
        let values = per_broker
            .iter()
            .map(|steps| {
                let Some(s) = steps.get(i) else {
                    return vec![None; metrics.len()];
                };
                let mut v = vec![
                    s.one_at_a_time_per_s,
                    s.pipelined_per_s,
                    s.bytes_per_queue,
                    mib(s.memory_bytes),
                ];
                v.extend(
                    endpoints
                        .iter()
                        .map(|&e| s.http.get(e).copied().flatten().map(|h| h.0)),
                );
                v.extend(endpoints.iter().map(|&e| {
                    s.http
                        .get(e)
                        .copied()
                        .flatten()
                        .map(|h| (h.1 as f64 / 1024.0).round())
                }));
                v
            })
            .collect();
        table.push(vec![count.to_string()], count as f64, values);
    }
    let http_metrics: Vec<usize> = (4..4 + endpoints.len()).collect();
    let mut plots = vec![
        PlotSpec {
            file_stem: "scale_queues_declare_rate".into(),
            title: "durable classic queue declarations per second".into(),
            x_label: "queues".into(),
            y_label: "declarations/s".into(),
            metric_indexes: vec![0, 1],
            x_max: None,
        },
        PlotSpec {
            file_stem: "scale_queues_memory".into(),
            title: "broker memory per queue".into(),
            x_label: "queues".into(),
            y_label: "bytes per queue".into(),
            metric_indexes: vec![2],
            x_max: None,
        },
    ];
    if !http_metrics.is_empty() {
        plots.push(PlotSpec {
            file_stem: "scale_queues_http".into(),
            title: "HTTP API and /metrics response time".into(),
            x_label: "queues".into(),
            y_label: "ms".into(),
            metric_indexes: http_metrics,
            x_max: None,
        });
    }
    let mut text = format!(
        "Durable classic queues declared up to each count (the queues of one step stay for the \
         next). Of each step's new queues, up to {} are declared one at a time on one channel \
         (each waits for its declare-ok), the rest pipelined over {} connections × {} channels. \
         Memory per queue is (memory at the step − memory before the sweep) / queues. The HTTP \
         timings are one GET each at the step, to the body's last byte: a page of 100 queues, \
         /api/overview, /api/definitions (all of them) and Prometheus /metrics. {memory_text}",
        ONE_AT_A_TIME_MAX,
        in_flight::PIPELINED_CONNECTIONS,
        in_flight::PIPELINED_CHANNELS,
    );
    if endpoints.is_empty() {
        text += " No HTTP timings: no --management-url or --prometheus-url was given.";
    }
    if !notes.is_empty() {
        text += "\n\nFailed:\n\n";
        for n in &notes {
            text += &format!("- {n}\n");
        }
    }
    let section = Section {
        heading: "Queues".into(),
        text,
        table,
        plots,
    };
    Ok((section, per_broker))
}
