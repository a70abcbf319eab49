//! The bindings sweep: topic bindings on one exchange, added up to each count in turn, their
//! patterns a mix of `*` and `#` in every position (`kI.*.x`, `kI.#`, `*.kI.y`, `#.kI`,
//! spread over 100 queues). At each step a probe publishes at a fixed low rate with a routing
//! key that matches exactly one binding (`k0.a.x`, binding 0's), one message at a time in
//! confirm mode: publish→confirm time, median and p99, is the route time plus a fixed round
//! trip; the fixed part is measured once with that one binding alone, and the "over one
//! binding" column takes it off. Memory per binding is (memory at the step − memory with the
//! exchange and queues but no bindings) / bindings.

use super::in_flight;
use super::memory::{mib, per_object, MemorySource};
use super::Ctx;
use super::{broker_readers, first_node};
use crate::broker_http::BrokerHttp;
use crate::client::{Channel, Connection, QueueOptions};
use crate::report::{Metric, PlotSpec, Section, Table, Unit};
use crate::scenario::Target;
use anyhow::{Context, Result};
use std::time::{Duration, Instant};
use warren_codec::{BasicProperties, FieldTable, FieldValue};

pub const EXCHANGE: &str = "scale.topic";
/// Queues the bindings are spread over.
pub const QUEUES: u64 = 100;
/// The probe's rate: low enough that the broker is idle between probes, so each publish
/// measures routing and not queueing.
pub const PROBE_PER_S: u64 = 200;
/// The probe's key: binding 0's pattern `k0.*.x` matches it, no other binding does.
pub const PROBE_KEY: &str = "k0.a.x";
/// The probe's warm-up, not counted.
const WARM_UP: Duration = Duration::from_secs(1);

fn queue_name(j: u64) -> String {
    format!("scale-b-q-{j:03}")
}

/// Binding `i`'s pattern: the four shapes in turn, each with a word of its own.
pub fn pattern(i: u64) -> String {
    match i % 4 {
        0 => format!("k{i}.*.x"),
        1 => format!("k{i}.#"),
        2 => format!("*.k{i}.y"),
        _ => format!("#.k{i}"),
    }
}

/// Publish→confirm times of one step, in µs.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteTimes {
    pub median_us: f64,
    pub p99_us: f64,
}

#[derive(Debug, Clone, Default)]
pub struct BindingStep {
    pub bindings: u64,
    pub binds_per_s: Option<f64>,
    pub route: Option<RouteTimes>,
    pub memory_bytes: Option<u64>,
    pub bytes_per_binding: Option<f64>,
}

/// The sweep on one broker: its steps and the one-binding route time.
#[derive(Debug)]
pub struct BindingSweep {
    pub steps: Vec<BindingStep>,
    pub one_binding: Option<RouteTimes>,
}

async fn bind(channel: Channel, i: u64) -> crate::client::Result<()> {
    channel
        .queue_bind(
            &queue_name(i % QUEUES),
            EXCHANGE,
            &pattern(i),
            FieldTable::new(),
        )
        .await
}

/// Publishes `PROBE_KEY` messages one at a time at `PROBE_PER_S` for `duration`, each
/// waiting for its confirm.
async fn probe(channel: &Channel, duration: Duration) -> Result<RouteTimes> {
    let properties = crate::client::encode_properties(&BasicProperties::default());
    let template = channel.publish_template(EXCHANGE, PROBE_KEY, false);
    let mut times_ns = vec![];
    let mut tick = tokio::time::interval(Duration::from_secs(1) / PROBE_PER_S as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tick.tick().await;
        let sent = Instant::now();
        channel.publish(&template, &properties, b"route probe", 0)?;
        channel.wait_confirms_below(1).await?;
        times_ns.push(sent.elapsed().as_nanos() as u64);
    }
    times_ns.sort_unstable();
    let at = |q: f64| times_ns[((times_ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    anyhow::ensure!(!times_ns.is_empty(), "the probe sent nothing");
    Ok(RouteTimes {
        median_us: at(0.5),
        p99_us: at(0.99),
    })
}

pub async fn sweep(
    target: &Target,
    counts: &[u64],
    probe_time: Duration,
    memory: &MemorySource,
    http: &BrokerHttp,
) -> Result<BindingSweep> {
    let uri = first_node(&target.uri)?;
    let conn = Connection::open_named(&uri, "warren perf scenario scale: bindings")
        .await
        .with_context(|| format!("connecting to {}", uri.addr()))?;
    let control = conn.channel().await?;
    control
        .exchange_declare(EXCHANGE, "topic", false, false)
        .await?;
    // One message at most in each queue: the probe's messages do not add to the memory read.
    let mut arguments = FieldTable::new();
    arguments.insert("x-max-length", FieldValue::I64(1));
    let options = QueueOptions {
        arguments,
        ..Default::default()
    };
    for j in 0..QUEUES {
        control.queue_declare(&queue_name(j), &options).await?;
    }
    let prober = conn.channel().await?;
    prober.confirm_select().await?;
    let result = async {
        tokio::time::sleep(super::queues::SETTLE).await;
        let baseline = memory.settled_sample(http).await;
        bind(control.clone(), 0).await?;
        // A first probe warms the path (the channel's first confirms, the queue's first
        // messages) and is dropped: it ran several times slower than the ones after it.
        probe(&prober, WARM_UP.min(probe_time)).await?;
        let one_binding = Some(probe(&prober, probe_time).await?);
        let mut bound = 1u64;
        let mut steps = vec![];
        for &count in counts {
            eprintln!("== scale bindings: {bound} -> {count} on {}", target.label);
            let new: Vec<u64> = (bound..count.max(bound)).collect();
            let n = new.len() as u64;
            let seconds = in_flight::pipelined(&uri, new, bind).await?;
            bound = count.max(bound);
            tokio::time::sleep(super::queues::SETTLE).await;
            let memory_bytes = memory.sample(http).await;
            let route = probe(&prober, probe_time).await?;
            eprintln!(
                "   route median {:.1} µs p99 {:.1} µs; memory {}",
                route.median_us,
                route.p99_us,
                memory_bytes.map_or("unknown".into(), |b| format!("{} MiB", b >> 20))
            );
            steps.push(BindingStep {
                bindings: count,
                binds_per_s: (n > 0 && seconds > 0.0).then(|| n as f64 / seconds),
                route: Some(route),
                memory_bytes,
                bytes_per_binding: per_object(baseline, memory_bytes, count),
            });
        }
        anyhow::Ok(BindingSweep { steps, one_binding })
    }
    .await;
    // Deleting the exchange and the queues drops every binding.
    let cleanup = async {
        control.exchange_delete(EXCHANGE).await?;
        for j in 0..QUEUES {
            control.queue_delete(&queue_name(j)).await?;
        }
        crate::client::Result::Ok(())
    }
    .await;
    conn.close().await;
    let sweep = result?;
    cleanup?;
    Ok(sweep)
}

pub async fn section(
    ctx: &Ctx,
    counts: &[u64],
    memory_text: &str,
) -> Result<(Section, Vec<BindingSweep>)> {
    let metrics = [
        Metric::higher(
            &format!(
                "Binds/s, pipelined ({} in flight)",
                in_flight::PIPELINED_CONNECTIONS * in_flight::PIPELINED_CHANNELS
            ),
            Unit::Count,
        ),
        Metric::lower("Route median", Unit::Us).headline(),
        Metric::lower("Route p99", Unit::Us),
        Metric::lower("Route median over one binding", Unit::Us),
        Metric::lower("Memory per binding, bytes", Unit::Count).headline(),
        Metric::lower("Broker memory, MiB", Unit::MiB),
    ];
    let probe_time = Duration::from_secs_f64(ctx.step_s);
    let mut per_broker = vec![];
    for t in &ctx.targets {
        let (http, memory) = broker_readers(t)?;
        per_broker.push(sweep(t, counts, probe_time, &memory, &http).await?);
    }
    let mut table = Table::new(&["Bindings"], &metrics);
    for (i, &count) in counts.iter().enumerate() {
        let values = per_broker
            .iter()
            .map(|b| {
                let Some(s) = b.steps.get(i) else {
                    return vec![None; metrics.len()];
                };
                let route = s.route;
                vec![
                    s.binds_per_s,
                    route.map(|r| r.median_us),
                    route.map(|r| r.p99_us),
                    route
                        .zip(b.one_binding)
                        .map(|(r, one)| r.median_us - one.median_us),
                    s.bytes_per_binding,
                    mib(s.memory_bytes),
                ]
            })
            .collect();
        table.push(vec![count.to_string()], count as f64, values);
    }
    let one: Vec<String> = ctx
        .targets
        .iter()
        .zip(&per_broker)
        .map(|(t, b)| match b.one_binding {
            Some(r) => format!(
                "{} median {:.1} µs, p99 {:.1} µs",
                t.label, r.median_us, r.p99_us
            ),
            None => format!("{} not measured", t.label),
        })
        .collect();
    let text = format!(
        "Topic bindings on one exchange (`{EXCHANGE}`), added up to each count (the bindings of \
         one step stay for the next), pipelined; their patterns take the four shapes in turn, \
         `kI.*.x`, `kI.#`, `*.kI.y` and `#.kI`, spread over {QUEUES} queues. Route time: a \
         probe publishes `{PROBE_KEY}` (binding 0's pattern matches it, no other does) at \
         {PROBE_PER_S} msg/s for {:.0} s per step, one message at a time in confirm mode, and \
         times each publish to its confirm: the routing plus a fixed round trip. The fixed part, \
         with binding 0 alone: {}; \"over one binding\" subtracts it. Memory per binding is \
         (memory at the step − memory with the exchange and queues but no binding) / bindings. \
         {memory_text}",
        ctx.step_s,
        one.join("; ")
    );
    let section = Section {
        heading: "Topic bindings".into(),
        text,
        table,
        plots: vec![
            PlotSpec {
                file_stem: "scale_bindings_route".into(),
                title: "publish→confirm time through a topic exchange".into(),
                x_label: "bindings".into(),
                y_label: "µs".into(),
                metric_indexes: vec![1, 2],
                x_max: None,
            },
            PlotSpec {
                file_stem: "scale_bindings_memory".into(),
                title: "broker memory per binding".into(),
                x_label: "bindings".into(),
                y_label: "bytes per binding".into(),
                metric_indexes: vec![4],
                x_max: None,
            },
        ],
    };
    Ok((section, per_broker))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a topic pattern matches a routing key (AMQP 0-9-1 topic rules: `*` one word, `#`
    /// zero or more): to check the probe key matches binding 0's pattern alone.
    fn topic_matches(pattern: &str, key: &str) -> bool {
        fn go(p: &[&str], k: &[&str]) -> bool {
            match (p.first(), k.first()) {
                (None, None) => true,
                (Some(&"#"), _) => go(&p[1..], k) || (!k.is_empty() && go(p, &k[1..])),
                (Some(&"*"), Some(_)) => go(&p[1..], &k[1..]),
                (Some(w), Some(v)) if w == v => go(&p[1..], &k[1..]),
                _ => false,
            }
        }
        let p: Vec<&str> = pattern.split('.').collect();
        let k: Vec<&str> = key.split('.').collect();
        go(&p, &k)
    }

    #[test]
    fn the_probe_key_matches_binding_0_alone() {
        assert!(topic_matches(&pattern(0), PROBE_KEY));
        for i in 1..4000 {
            assert!(!topic_matches(&pattern(i), PROBE_KEY), "{}", pattern(i));
        }
        // The four shapes.
        assert_eq!(
            (0..4).map(pattern).collect::<Vec<_>>(),
            ["k0.*.x", "k1.#", "*.k2.y", "#.k3"]
        );
    }

    #[test]
    fn topic_matching_follows_the_amqp_rules() {
        assert!(topic_matches("a.*.c", "a.b.c"));
        assert!(!topic_matches("a.*.c", "a.c"));
        assert!(topic_matches("a.#", "a"));
        assert!(topic_matches("a.#", "a.b.c"));
        assert!(topic_matches("#.c", "c"));
        assert!(topic_matches("#", ""));
        assert!(!topic_matches("*", "a.b"));
    }
}
