//! Seed 002 (SoftwareMill mqperf, RabbitMQ section): N nodes × T threads of senders and
//! receivers on one durable queue with persistent messages. A sender thread publishes a batch
//! of 1…B messages (random size, as mqperf does) and waits until the whole batch is confirmed;
//! a receiver thread consumes with prefetch 100 and acks each message. Each node has one
//! connection for its senders and one for its receivers, one channel per thread.

use super::Ctx;
use crate::client::{encode_properties, BrokerUris, Channel, Connection, QueueOptions};
use crate::payload;
use crate::report::{Metric, PlotSpec, Report, Section, Table, Unit};
use anyhow::{anyhow, Result};
use rand::Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_codec::{BasicProperties, FieldTable};

const QUEUE: &str = "mqperf";
const BODY_BYTES: usize = 100;

#[derive(Debug, Clone, Default)]
pub struct MqResult {
    pub send_per_s: f64,
    pub receive_per_s: f64,
    pub sent: u64,
    pub received: u64,
}

struct Shared {
    stop: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
}

pub async fn step(
    uri: &str,
    nodes: usize,
    threads: usize,
    max_batch: usize,
    duration: Duration,
) -> Result<MqResult> {
    let uris = BrokerUris::parse(uri).map_err(|e| anyhow!(e))?;
    let admin = Connection::open_named(uris.first(), "mqperf-admin").await?;
    let ach = admin.channel().await?;
    ach.queue_declare(
        QUEUE,
        &QueueOptions {
            durable: true,
            arguments: FieldTable::new(),
            ..Default::default()
        },
    )
    .await?;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
    });
    let mut conns = vec![];
    let mut receivers = vec![];
    let mut senders = vec![];
    // Client node k receives through broker node k and sends through the next one.
    for k in 0..nodes {
        let rconn = Connection::open_named(uris.for_client(k), "mqperf-receiver").await?;
        let sconn = Connection::open_named(uris.for_client(k + 1), "mqperf-sender").await?;
        for t in 0..threads {
            let ch = rconn.channel().await?;
            ch.basic_qos(100, false).await?;
            let rx = ch
                .basic_consume(QUEUE, &format!("mqperf-{t}"), false)
                .await?;
            receivers.push(tokio::spawn(receive(ch, rx, shared.clone())));
            let sch = sconn.channel().await?;
            sch.confirm_select().await?;
            senders.push(sch);
        }
        conns.push(rconn);
        conns.push(sconn);
    }
    let started = Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|ch| tokio::spawn(send(ch, max_batch, shared.clone())))
        .collect();
    let elapsed_s = super::run_then_stop(duration, started, &shared.stop, tasks).await;
    let received_at_stop = shared.received.load(Ordering::Acquire);
    let sent = shared.sent.load(Ordering::Acquire);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && shared.received.load(Ordering::Acquire) < sent {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for c in &conns {
        c.close().await;
    }
    for r in receivers {
        let _ = r.await;
    }
    let _ = ach.queue_delete(QUEUE).await;
    admin.close().await;
    Ok(MqResult {
        send_per_s: sent as f64 / elapsed_s,
        receive_per_s: received_at_stop as f64 / elapsed_s,
        sent,
        received: shared.received.load(Ordering::Acquire),
    })
}

async fn send(ch: Channel, max_batch: usize, shared: Arc<Shared>) {
    let template = ch.publish_template("", QUEUE, false);
    let props = encode_properties(&BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    });
    let mut body = payload::new_body(BODY_BYTES);
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let batch = rand::thread_rng().gen_range(1..=max_batch);
        for _ in 0..batch {
            let now = payload::now_ns();
            payload::stamp(&mut body, now, 0, seq);
            if ch.publish(&template, &props, &body, now).is_err() {
                return;
            }
            seq += 1;
        }
        if ch.wait_confirms_below(1).await.is_err() {
            return;
        }
        shared.sent.fetch_add(batch as u64, Ordering::AcqRel);
    }
}

async fn receive(
    ch: Channel,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<crate::client::Delivery>,
    shared: Arc<Shared>,
) {
    while let Some(d) = rx.recv().await {
        shared.received.fetch_add(1, Ordering::AcqRel);
        ch.ack(d.delivery_tag, false);
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<Report> {
    let rows: Vec<(usize, usize, usize)> = if ctx.args.quick {
        vec![(1, 1, 10), (1, 5, 10), (2, 5, 100)]
    } else {
        vec![
            (1, 1, 10),
            (1, 5, 10),
            (1, 25, 10),
            (2, 25, 10),
            (4, 25, 10),
            (4, 5, 100),
            (4, 5, 1000),
        ]
    };
    let duration = Duration::from_secs_f64(ctx.step_s);
    let mut table = Table::new(
        &["Nodes", "Threads", "Notes"],
        &[
            Metric::higher("Send msgs/s", Unit::Count).headline(),
            Metric::higher("Receive msgs/s", Unit::Count).headline(),
        ],
    );
    for (i, (nodes, threads, batch)) in rows.into_iter().enumerate() {
        let mut values = vec![];
        for t in ctx.targets.clone() {
            eprintln!(
                "== mqperf nodes={nodes} threads={threads} max batch {batch} on {}",
                t.label
            );
            let r = step(&t.uri, nodes, threads, batch, duration).await?;
            eprintln!(
                "   send {:.0} msg/s receive {:.0} msg/s (sent {}, received {})",
                r.send_per_s, r.receive_per_s, r.sent, r.received
            );
            values.push(vec![Some(r.send_per_s), Some(r.receive_per_s)]);
        }
        table.push(
            vec![
                nodes.to_string(),
                threads.to_string(),
                format!("max batch {batch}"),
            ],
            (i + 1) as f64,
            values,
        );
    }
    ctx.commands.push(format!(
        "warren perf scenario mqperf --duration {}",
        ctx.step_s
    ));
    Ok(Report {
        title: "warren perf scenario mqperf".into(),
        intro: "Seed 002 (mqperf, RabbitMQ): durable queue, persistent 100-byte messages, senders publish batches of 1…max-batch messages and wait for the batch's publisher confirms; receivers use prefetch 100 and ack every message. Nodes are emulated as separate connection pairs on this machine.".into(),
        sections: vec![Section {
            heading: "Send and receive throughput".into(),
            text: String::new(),
            plots: vec![PlotSpec {
                file_stem: "mqperf_throughput".into(),
                title: "mqperf throughput by row".into(),
                x_label: "row".into(),
                y_label: "msg/s".into(),
                metric_indexes: vec![0, 1],
                x_max: None,
            }],
            table,
        }],
        ..Default::default()
    })
}
