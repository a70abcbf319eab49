//! The consumers sweep: consumers added up to each count in turn (1k, 4k, ... 100k) on
//! `QUEUES` queues, each consumer acking manually with prefetch 1 and left holding one
//! unacked message, so every one of them is at its prefetch limit — blocked, as the consumers
//! of a busy deployment mostly are. At each step: the basic.consume rate (every channel of
//! the pool consuming at once, one request outstanding per channel), the broker's memory per
//! consumer, and the dispatch cost: messages published to the probe queue, which holds a
//! tenth of the blocked consumers, go to one more consumer there that has room (no-ack), and
//! the rate they arrive at is timed. A broker that looks at each blocked consumer on each
//! delivery slows down as the step grows; one that keeps them apart does not.

use super::memory::{mib, per_object, MemorySource};
use super::Ctx;
use super::{broker_readers, first_node};
use crate::broker_http::BrokerHttp;
use crate::client::{encode_properties, Channel, Connection, Delivery, DeliveryHook};
use crate::report::{Metric, PlotSpec, Section, Table, Unit};
use crate::scenario::Target;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use warren_codec::BasicProperties;

/// Queues the consumers are spread over (the "on 1k queues").
pub const QUEUES: u64 = 1000;
/// The probe queue (queue 0) holds every `PROBE_SHARE`-th consumer.
const PROBE_SHARE: u64 = 10;
/// Connections and channels per connection the consumers are spread over.
const CONNECTIONS: usize = 8;
const CHANNELS: usize = 32;
/// Messages of one dispatch probe.
const PROBE_MESSAGES: u64 = 20_000;
/// Longest wait for deliveries (the blocked consumers' messages, a probe's).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

fn queue_name(j: u64) -> String {
    format!("scale-cq-{j:04}")
}

/// The queue consumer `i` consumes from: every `PROBE_SHARE`-th the probe queue, the others
/// spread over the rest.
fn queue_of(i: u64) -> u64 {
    if i % PROBE_SHARE == 0 {
        0
    } else {
        1 + i % (QUEUES - 1)
    }
}

/// Blocked consumers on the probe queue when `count` consume.
fn on_probe_queue(count: u64) -> u64 {
    count.div_ceil(PROBE_SHARE)
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerStep {
    pub consumers: u64,
    pub consumed_per_s: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub bytes_per_consumer: Option<f64>,
    /// Blocked consumers on the probe queue, and the rate the probe's messages arrived at.
    pub probe_blocked: u64,
    pub dispatched_per_s: Option<f64>,
}

/// Counts deliveries and wakes whoever waits for a count.
#[derive(Default)]
struct Counter {
    received: AtomicU64,
    changed: Notify,
}

impl DeliveryHook for Counter {
    fn on_delivery(&self, _delivery: Delivery) {
        self.received.fetch_add(1, Relaxed);
        self.changed.notify_waiters();
    }
}

impl Counter {
    async fn wait_for(&self, n: u64) -> Result<()> {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        while self.received.load(Relaxed) < n {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.received.load(Relaxed) >= n {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            anyhow::ensure!(
                !left.is_zero(),
                "{} of {n} deliveries after {DELIVERY_TIMEOUT:?}",
                self.received.load(Relaxed)
            );
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), changed).await;
        }
        Ok(())
    }
}

/// Consumes consumers `from..to`, each channel its share one after another, all channels
/// at once; returns the seconds it took.
async fn consume(channels: &[Channel], from: u64, to: u64, counter: &Arc<Counter>) -> Result<f64> {
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (c, channel) in channels.iter().enumerate() {
        let n = channels.len() as u64;
        let first = from + (c as u64 + n - from % n) % n;
        let (channel, counter) = (channel.clone(), counter.clone());
        tasks.spawn(async move {
            let mut i = first;
            while i < to {
                let hook: Arc<dyn DeliveryHook> = counter.clone();
                channel
                    .basic_consume_hook(&queue_name(queue_of(i)), &format!("c{i}"), false, hook)
                    .await?;
                i += n;
            }
            crate::client::Result::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Publishes one message per new consumer `from..to` to its queue: each takes one and is
/// then at its prefetch.
async fn fill(publisher: &Channel, from: u64, to: u64) -> Result<()> {
    let properties = encode_properties(&BasicProperties::default());
    for i in from..to {
        let template = publisher.publish_template("", &queue_name(queue_of(i)), false);
        publisher.publish(&template, &properties, b"hold", 0)?;
        publisher.wait_room().await;
    }
    Ok(())
}

/// One more consumer on the probe queue, no-ack (it always has room); `PROBE_MESSAGES`
/// published there; the rate they reach it at.
async fn probe(conn: &Connection, publisher: &Channel, step: usize) -> Result<f64> {
    let channel = conn.channel().await?;
    let counter = Arc::new(Counter::default());
    let tag = format!("probe-{step}");
    channel
        .basic_consume_hook(&queue_name(0), &tag, true, counter.clone())
        .await?;
    let properties = encode_properties(&BasicProperties::default());
    let template = publisher.publish_template("", &queue_name(0), false);
    let started = Instant::now();
    for _ in 0..PROBE_MESSAGES {
        publisher.publish(&template, &properties, b"probe", 0)?;
        publisher.wait_room().await;
    }
    counter.wait_for(PROBE_MESSAGES).await?;
    let seconds = started.elapsed().as_secs_f64();
    channel.basic_cancel(&tag).await?;
    Ok(PROBE_MESSAGES as f64 / seconds)
}

pub async fn sweep(
    target: &Target,
    counts: &[u64],
    memory: &MemorySource,
    http: &BrokerHttp,
) -> Result<Vec<ConsumerStep>> {
    let uri = first_node(&target.uri)?;
    let control_conn = Connection::open_named(&uri, "warren perf scenario scale: consumers")
        .await
        .with_context(|| format!("connecting to {}", uri.addr()))?;
    let control = control_conn.channel().await?;
    for j in 0..QUEUES {
        control
            .queue_declare(&queue_name(j), &Default::default())
            .await?;
    }
    let mut conns = vec![];
    let mut channels = vec![];
    for _ in 0..CONNECTIONS {
        let conn = Connection::open_named(&uri, "warren perf scenario scale: consumers").await?;
        for _ in 0..CHANNELS {
            let channel = conn.channel().await?;
            channel.basic_qos(1, false).await?;
            channels.push(channel);
        }
        conns.push(conn);
    }
    let counter = Arc::new(Counter::default());
    let mut consumed = 0u64;
    let mut steps = vec![];
    let result = async {
        tokio::time::sleep(super::queues::SETTLE).await;
        let baseline = memory.settled_sample(http).await;
        for (s, &count) in counts.iter().enumerate() {
            eprintln!(
                "== scale consumers: {consumed} -> {count} on {}",
                target.label
            );
            let seconds = consume(&channels, consumed, count, &counter).await?;
            let new = count.saturating_sub(consumed);
            tokio::time::sleep(super::queues::SETTLE).await;
            let memory_bytes = memory.sample(http).await;
            fill(&control, consumed, count).await?;
            counter.wait_for(count).await?;
            consumed = count.max(consumed);
            let dispatched_per_s = probe(&control_conn, &control, s).await?;
            let step = ConsumerStep {
                consumers: count,
                consumed_per_s: (new > 0 && seconds > 0.0).then(|| new as f64 / seconds),
                memory_bytes,
                bytes_per_consumer: per_object(baseline, memory_bytes, count),
                probe_blocked: on_probe_queue(count),
                dispatched_per_s: Some(dispatched_per_s),
            };
            eprintln!(
                "   consume {:.0}/s, memory {} ({} per consumer), probe {dispatched_per_s:.0} msg/s past {} blocked",
                step.consumed_per_s.unwrap_or(0.0),
                memory_bytes.map_or("unknown".into(), |b| format!("{} MiB", b >> 20)),
                step.bytes_per_consumer.map_or("unknown".into(), |b| format!("{b:.0} B")),
                step.probe_blocked,
            );
            steps.push(step);
        }
        anyhow::Ok(())
    }
    .await;
    // The consumers and queues go whatever happened, so the next sweep starts clean.
    eprintln!(
        "== scale consumers: closing {consumed} consumers, deleting {QUEUES} queues on {}",
        target.label
    );
    let closing = Instant::now();
    for c in conns.drain(..) {
        c.close().await;
    }
    eprintln!(
        "   consumers closed in {:.2} s",
        closing.elapsed().as_secs_f64()
    );
    for j in 0..QUEUES {
        control.queue_delete(&queue_name(j)).await?;
    }
    control_conn.close().await;
    result?;
    Ok(steps)
}

pub async fn section(
    ctx: &Ctx,
    counts: &[u64],
    memory_text: &str,
) -> Result<(Section, Vec<Vec<ConsumerStep>>)> {
    let metrics = [
        Metric::higher("Consumed/s", Unit::Count),
        Metric::lower("Memory per consumer, bytes", Unit::Count).headline(),
        Metric::lower("Broker memory, MiB", Unit::MiB),
        Metric::info("Blocked on the probe queue", Unit::Count),
        Metric::higher("Probe delivered, msg/s", Unit::Count).headline(),
    ];
    let mut per_broker = vec![];
    for t in &ctx.targets {
        let (http, memory) = broker_readers(t)?;
        per_broker.push(sweep(t, counts, &memory, &http).await?);
    }
    let mut table = Table::new(&["Consumers"], &metrics);
    for (i, &count) in counts.iter().enumerate() {
        let values = per_broker
            .iter()
            .map(|b| match b.get(i) {
                Some(s) => vec![
                    s.consumed_per_s,
                    s.bytes_per_consumer,
                    mib(s.memory_bytes),
                    Some(s.probe_blocked as f64),
                    s.dispatched_per_s,
                ],
                None => vec![None; metrics.len()],
            })
            .collect();
        table.push(vec![count.to_string()], count as f64, values);
    }
    let connections = CONNECTIONS * CHANNELS;
    let text = format!(
        "Consumers added up to each count on {QUEUES} classic queues (those of one step stay \
         for the next), over {CONNECTIONS} connections × {CHANNELS} channels with prefetch 1 \
         ({connections} basic.consume in flight), every one of them then given one message it \
         never acks: all are blocked at their prefetch. Consumed/s is the basic.consume rate \
         of the step's new consumers. Memory per consumer is (memory at the step, before the \
         held messages − memory before the sweep, with the queues and channels) / consumers. \
         The probe queue holds every {PROBE_SHARE}th consumer; {PROBE_MESSAGES} messages \
         published there go to one more consumer that has room (no-ack), and Probe \
         delivered is the rate they reached it at: what a delivery costs with that many \
         blocked consumers beside the one that takes it. {memory_text}"
    );
    let section = Section {
        heading: "Consumers".into(),
        text,
        table,
        plots: vec![
            PlotSpec {
                file_stem: "scale_consumers_dispatch".into(),
                title: "delivery rate past blocked consumers".into(),
                x_label: "consumers".into(),
                y_label: "msg/s".into(),
                metric_indexes: vec![4],
                x_max: None,
            },
            PlotSpec {
                file_stem: "scale_consumers_memory".into(),
                title: "broker memory per consumer".into(),
                x_label: "consumers".into(),
                y_label: "bytes per consumer".into(),
                metric_indexes: vec![1],
                x_max: None,
            },
        ],
    };
    Ok((section, per_broker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenth_of_the_consumers_are_on_the_probe_queue_the_rest_spread() {
        let on_probe = (0..10_000).filter(|&i| queue_of(i) == 0).count() as u64;
        assert_eq!(on_probe, on_probe_queue(10_000));
        let used: std::collections::BTreeSet<u64> = (0..10_000).map(queue_of).collect();
        assert_eq!(used.len() as u64, QUEUES);
    }
}
