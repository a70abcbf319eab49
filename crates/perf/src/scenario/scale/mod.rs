//! `warren perf scenario scale` (issue 30, "cost as the work grows"): how a broker's costs
//! grow with the number of objects it holds. Each sweep raises one count step by step (1k,
//! 4k, 16k, ... up to `--scale-max`) and measures at each step; with `--compare` the whole
//! sweep runs on one broker, its objects are deleted, then it runs on the other (the two do
//! not hold their objects at once, so neither measures the other's load).
//!
//! The sweeps: `queues` (durable classic queues: declare rate one at a time and pipelined,
//! memory per queue, the HTTP API's timings), `bindings` (topic bindings with `*` and `#`:
//! route time per publish, memory per binding), `connections` (idle connections up to the
//! descriptor limits: memory per connection, and after they close) and `consumers` (blocked
//! consumers on 1k queues: consume rate, memory per consumer, a delivery's cost beside them). `targets` sets the
//! issue's target figures beside what was measured. Memory is read as `memory` says.

pub mod bindings;
pub mod connections;
pub mod consumers;
mod in_flight;
mod memory;
pub mod queues;
mod targets;

use super::{Ctx, Target};
use crate::broker_http::BrokerHttp;
use crate::client::{AmqpUri, BrokerUris};
use crate::report::Report;
use anyhow::{bail, Result};
use memory::MemorySource;

/// The sweeps, in the order they run.
pub const SWEEPS: &[&str] = &["queues", "bindings", "connections", "consumers"];

/// The counts of a sweep: 1k, 4k, 16k, ... while at most `max`, and `max` itself when the
/// ladder does not land on it (1M: 1k, 4k, 16k, 64k, 256k, 1M). `--quick`: 50 and 200.
pub fn counts(max: u64, quick: bool, steps: Option<&str>) -> Result<Vec<u64>> {
    if let Some(list) = steps {
        let mut out = vec![];
        for v in list.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            match v.parse::<u64>() {
                Ok(n) if n > 0 => out.push(n),
                _ => bail!("--steps: {v:?} is not a positive whole count"),
            }
        }
        out.sort_unstable();
        out.dedup();
        return Ok(out);
    }
    if quick {
        return Ok(vec![50, 200]
            .into_iter()
            .filter(|&n| n <= max.max(50))
            .collect());
    }
    let mut out = vec![];
    let mut n = 1000u64;
    while n <= max {
        out.push(n);
        n = n.saturating_mul(4);
    }
    if out.last() != Some(&max) && max > 0 {
        out.push(max);
    }
    Ok(out)
}

/// The first node of a URI list: the scale sweeps measure one broker.
pub(crate) fn first_node(uri: &str) -> Result<AmqpUri> {
    Ok(BrokerUris::parse(uri)
        .map_err(anyhow::Error::msg)?
        .first()
        .clone())
}

/// How a sweep reads a broker: its HTTP endpoints (with the URI's credentials) and its memory.
pub(crate) fn broker_readers(target: &Target) -> Result<(BrokerHttp, MemorySource)> {
    let node = first_node(&target.uri)?;
    Ok((
        BrokerHttp::new(&node.user, &node.password),
        MemorySource::for_target(target),
    ))
}

fn modes(ctx: &Ctx) -> Result<Vec<&'static str>> {
    let Some(list) = &ctx.args.modes else {
        return Ok(SWEEPS.to_vec());
    };
    let mut out = vec![];
    for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        match SWEEPS.iter().find(|s| **s == m) {
            Some(s) => out.push(*s),
            None => bail!("--modes: {m:?} is not one of {}", SWEEPS.join(", ")),
        }
    }
    Ok(out)
}

pub async fn run(ctx: &mut Ctx) -> Result<Report> {
    let counts = counts(
        ctx.args.scale_max,
        ctx.args.quick,
        ctx.args.steps.as_deref(),
    )?;
    let modes = modes(ctx)?;
    let mut sections = vec![];
    let mut measured = targets::Measured::default();
    let mut sources = vec![];
    for t in &ctx.targets {
        let memory = MemorySource::for_target(t);
        sources.push(format!("{}: {}", t.label, memory.describe()));
    }
    let memory_text = format!("Broker memory: {}.", sources.join("; "));
    for mode in &modes {
        match *mode {
            "queues" => {
                let (section, results) = queues::section(ctx, &counts, &memory_text).await?;
                measured.queues = Some(results);
                sections.push(section);
            }
            "bindings" => {
                let (section, results) = bindings::section(ctx, &counts, &memory_text).await?;
                measured.bindings = Some(results);
                sections.push(section);
            }
            "connections" => {
                let (section, results) = connections::section(ctx, &counts, &memory_text).await?;
                measured.connections = Some(results);
                sections.push(section);
            }
            "consumers" => {
                let (section, _) = consumers::section(ctx, &counts, &memory_text).await?;
                sections.push(section);
            }
            _ => unreachable!("modes() accepts SWEEPS only"),
        }
        ctx.commands.push(format!(
            "warren perf scenario scale --uri URI --modes {mode} --steps {}",
            counts
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    sections.insert(0, targets::section(&measured, &ctx.brokers()));
    Ok(Report {
        title: "warren perf scenario scale".into(),
        intro: "Issue 30, cost as the work grows: each sweep raises one object count step by \
                step and measures the broker at each step, one broker at a time (with \
                `--compare` the first broker's sweep runs to the end and its objects are \
                deleted before the second's starts). Plots use log axes where the figures \
                span more than ten times."
            .into(),
        sections,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::counts;

    #[test]
    fn counts_climb_by_four_to_the_maximum() {
        assert_eq!(
            counts(64_000, false, None).unwrap(),
            [1000, 4000, 16000, 64000]
        );
        assert_eq!(
            counts(1_000_000, false, None).unwrap(),
            [1000, 4000, 16000, 64000, 256000, 1_000_000]
        );
        assert_eq!(counts(5000, false, None).unwrap(), [1000, 4000, 5000]);
        assert_eq!(counts(500, false, None).unwrap(), [500]);
        assert_eq!(counts(64_000, true, None).unwrap(), [50, 200]);
        assert_eq!(
            counts(64_000, false, Some("300, 100,100")).unwrap(),
            [100, 300]
        );
        assert!(counts(64_000, false, Some("10,abc")).is_err());
        assert!(counts(64_000, false, Some("0")).is_err());
    }
}
