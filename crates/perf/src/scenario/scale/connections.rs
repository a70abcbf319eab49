//! The connections sweep: idle AMQP 0-9-1 connections (opened, no channel, no heartbeats)
//! added up to each count in turn, memory per connection at each step, then all closed and
//! the memory read again: what the broker keeps after its clients leave. Counts stop below
//! the descriptor limits (the tool's, raised to its hard limit, and a local broker's, read
//! from /proc); the report says where a count was capped.

use super::memory::{mib, per_object, MemorySource};
use super::Ctx;
use super::{broker_readers, first_node};
use crate::broker_http::BrokerHttp;
use crate::client::Connection;
use crate::fd_limit;
use crate::report::{Metric, PlotSpec, Section, Table, Unit};
use crate::scenario::Target;
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Descriptors the tool keeps for itself beyond its connections.
const TOOL_RESERVE_FDS: u64 = 64;
/// Descriptors left to the broker beyond the sweep's connections (listeners, store files).
const BROKER_RESERVE_FDS: u64 = 128;
/// Connections opened at once.
const OPENING_AT_ONCE: usize = 64;

#[derive(Debug, Clone, Default)]
pub struct ConnectionStep {
    /// Connections open at the step (the asked count, or fewer when capped).
    pub connections: u64,
    pub asked: u64,
    pub opened_per_s: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub bytes_per_connection: Option<f64>,
}

#[derive(Debug)]
pub struct ConnectionSweep {
    pub steps: Vec<ConnectionStep>,
    /// Memory once every client has closed, and its excess over the start per connection
    /// that was open at the largest step.
    pub after_close_bytes: Option<u64>,
    pub retained_per_connection: Option<f64>,
    /// Why counts were capped, when they were.
    pub capped: Option<String>,
}

/// The most connections this sweep may hold: under the tool's limit and a local broker's.
fn room(memory: &MemorySource) -> (u64, String) {
    let tool = fd_limit::raise_soft_to_hard().unwrap_or(1024);
    let tool_room = tool
        .saturating_sub(fd_limit::own_open().unwrap_or(0))
        .saturating_sub(TOOL_RESERVE_FDS);
    let mut why = format!("the tool's open-files limit {tool}");
    let mut room = tool_room;
    if let Some(pid) = memory.pid() {
        if let Some(limit) = fd_limit::limit_of(pid) {
            let broker_room = limit
                .saturating_sub(fd_limit::open_of_pid(pid).unwrap_or(0))
                .saturating_sub(BROKER_RESERVE_FDS);
            why += &format!(", the broker's {limit}");
            room = room.min(broker_room);
        }
    }
    (room, why)
}

pub async fn sweep(
    target: &Target,
    counts: &[u64],
    memory: &MemorySource,
    http: &BrokerHttp,
) -> Result<ConnectionSweep> {
    let uri = first_node(&target.uri)?;
    let (room, limits) = room(memory);
    let baseline = memory.settled_sample(http).await;
    let mut open: Vec<Connection> = vec![];
    let mut steps = vec![];
    let mut capped = None;
    let result = async {
        for &asked in counts {
            let count = asked.min(room);
            if count < asked {
                capped = Some(format!(
                    "{asked} asked, {count} opened: {limits} (descriptors left for the broker and the tool)"
                ));
            }
            let new = count.saturating_sub(open.len() as u64);
            eprintln!(
                "== scale connections: {} -> {count} on {}",
                open.len(),
                target.label
            );
            let started = Instant::now();
            let at_once = Arc::new(Semaphore::new(OPENING_AT_ONCE));
            let mut tasks = JoinSet::new();
            for _ in 0..new {
                let permit = at_once.clone().acquire_owned().await?;
                let uri = uri.clone();
                tasks.spawn(async move {
                    let opened = Connection::open_named(&uri, "warren perf scenario scale: idle").await;
                    drop(permit);
                    opened
                });
            }
            while let Some(opened) = tasks.join_next().await {
                open.push(opened?.with_context(|| {
                    format!("opening connection {} to {}", open.len() + 1, uri.addr())
                })?);
            }
            let seconds = started.elapsed().as_secs_f64();
            tokio::time::sleep(super::queues::SETTLE).await;
            let memory_bytes = memory.sample(http).await;
            steps.push(ConnectionStep {
                connections: count,
                asked,
                opened_per_s: (new > 0 && seconds > 0.0).then(|| new as f64 / seconds),
                memory_bytes,
                bytes_per_connection: per_object(baseline, memory_bytes, count),
            });
            if count < asked {
                break;
            }
        }
        anyhow::Ok(())
    }
    .await;
    let largest = open.len() as u64;
    for c in open.drain(..) {
        c.close().await;
    }
    result?;
    let after_close_bytes = memory.settled_sample(http).await;
    Ok(ConnectionSweep {
        steps,
        after_close_bytes,
        retained_per_connection: per_object(baseline, after_close_bytes, largest),
        capped,
    })
}

pub async fn section(
    ctx: &Ctx,
    counts: &[u64],
    memory_text: &str,
) -> Result<(Section, Vec<ConnectionSweep>)> {
    let metrics = [
        Metric::info("Connections open", Unit::Count),
        Metric::higher("Opened/s", Unit::Count),
        Metric::lower("Memory per connection, bytes", Unit::Count).headline(),
        Metric::lower("Broker memory, MiB", Unit::MiB),
    ];
    let mut per_broker = vec![];
    for t in &ctx.targets {
        let (http, memory) = broker_readers(t)?;
        per_broker.push(sweep(t, counts, &memory, &http).await?);
    }
    let mut table = Table::new(&["Connections asked"], &metrics);
    for (i, &count) in counts.iter().enumerate() {
        if per_broker.iter().all(|b| b.steps.get(i).is_none()) {
            break;
        }
        let values = per_broker
            .iter()
            .map(|b| match b.steps.get(i) {
                Some(s) => vec![
                    Some(s.connections as f64),
                    s.opened_per_s,
                    s.bytes_per_connection,
                    mib(s.memory_bytes),
                ],
                None => vec![None; metrics.len()],
            })
            .collect();
        table.push(vec![count.to_string()], count as f64, values);
    }
    let mut text = format!(
        "Idle AMQP 0-9-1 connections (opened, no channel, heartbeats off), added up to each \
         count ({OPENING_AT_ONCE} opening at once; the connections of one step stay for the \
         next). Memory per connection is (memory at the step − memory before the sweep) / \
         connections. {memory_text}\n\nAfter every client closed, once the broker's memory \
         settled (12 readings 1 s apart within 1%):"
    );
    for (t, b) in ctx.targets.iter().zip(&per_broker) {
        text += &format!(
            "\n- {}: broker memory {}, {} per connection of the largest step still held.",
            t.label,
            mib(b.after_close_bytes).map_or("unknown".into(), |m| format!("{m:.1} MiB")),
            b.retained_per_connection
                .map_or("unknown".into(), |r| format!("{r:.0} bytes")),
        );
        if let Some(why) = &b.capped {
            text += &format!(" Capped: {why}.");
        }
    }
    let section = Section {
        heading: "Idle connections".into(),
        text,
        table,
        plots: vec![PlotSpec {
            file_stem: "scale_connections_memory".into(),
            title: "broker memory per idle connection".into(),
            x_label: "connections".into(),
            y_label: "bytes per connection".into(),
            metric_indexes: vec![2],
            x_max: None,
        }],
    };
    Ok((section, per_broker))
}
