//! Seed 004 (Qpid Dispatch latency study) on AMQP: N receivers, each with its own queue
//! (its "address"), 40 senders per receiver at 10 msg/s each, 100-byte bodies with the send
//! timestamp in the body; mean and 99th percentile flight time, and the broker's RSS when it
//! is local. Senders start only once every receiver is attached (the seed's note on speed).
//!
//! At N = 10000 that is 400 000 senders, so a sender is not a task or a connection: it is a
//! slot in a timer wheel. Each sender connection runs one task that every 5 ms publishes for
//! the senders whose slot is due (each sender every 100 ms, phases spread evenly), over up to
//! `CHANNELS_PER_CONNECTION` channels; with more senders than channels, senders share
//! channels.

use super::Ctx;
use crate::broker_proc::BrokerProcess;
use crate::client::{
    encode_properties, AmqpUri, Channel, Connection, PublishTemplate, QueueOptions,
};
use crate::payload;
use crate::report::{PlotSpec, Report, Section, Table, Unit};
use crate::stats::{new_histogram, Percentiles};
use anyhow::{anyhow, Result};
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_codec::BasicProperties;

pub const SENDERS_PER_RECEIVER: usize = 40;
const SEND_PERIOD: Duration = Duration::from_millis(100);
const SLOTS: usize = 20;
const CHANNELS_PER_CONNECTION: usize = 500;
const MAX_SENDER_CHANNELS: usize = 2000;
const BODY_BYTES: usize = 100;

#[derive(Debug, Clone, Default)]
pub struct PairsResult {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub rate_per_s: f64,
    pub latency: Percentiles,
    pub broker_rss_bytes: Option<u64>,
}

struct Shared {
    stop: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
    latency: Mutex<hdrhistogram::Histogram<u64>>,
}

struct Sender {
    channel: usize,
    template: PublishTemplate,
    id: u32,
    seq: u64,
}

pub async fn step(uri: &str, receivers: usize, duration: Duration) -> Result<PairsResult> {
    let uri = AmqpUri::parse(uri).map_err(|e| anyhow!(e))?;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
        latency: Mutex::new(new_histogram()),
    });
    let queue = |i: usize| format!("pair-{i}");

    // Receivers first; all attached before any sender starts.
    let mut conns = vec![];
    let mut consumer_tasks = vec![];
    for first in (0..receivers).step_by(CHANNELS_PER_CONNECTION) {
        let conn = Connection::open_named(&uri, "pairs-receivers").await?;
        for i in first..(first + CHANNELS_PER_CONNECTION).min(receivers) {
            let ch = conn.channel().await?;
            ch.queue_declare(
                &queue(i),
                &QueueOptions {
                    auto_delete: true,
                    ..Default::default()
                },
            )
            .await?;
            ch.basic_qos(200, false).await?;
            let rx = ch.basic_consume(&queue(i), "pair", false).await?;
            consumer_tasks.push(tokio::spawn(receive(ch, rx, shared.clone())));
        }
        conns.push(conn);
    }

    // Senders: a wheel per connection.
    let senders = receivers * SENDERS_PER_RECEIVER;
    let channels = senders.min(MAX_SENDER_CHANNELS);
    let connections = channels.div_ceil(CHANNELS_PER_CONNECTION);
    let mut wheels = vec![];
    for c in 0..connections {
        let conn = Connection::open_named(&uri, "pairs-senders").await?;
        let first_ch = c * CHANNELS_PER_CONNECTION;
        let n_ch = CHANNELS_PER_CONNECTION.min(channels - first_ch);
        let mut chans = vec![];
        for _ in 0..n_ch {
            chans.push(conn.channel().await?);
        }
        // Senders are dealt to channels round-robin; this connection takes its channels' share.
        let mut slots: Vec<Vec<Sender>> = (0..SLOTS).map(|_| vec![]).collect();
        for s in (0..senders).filter(|s| (s % channels) / CHANNELS_PER_CONNECTION == c) {
            let local = (s % channels) - first_ch;
            let template =
                chans[local].publish_template("", &queue(s / SENDERS_PER_RECEIVER), false);
            slots[s % SLOTS].push(Sender {
                channel: local,
                template,
                id: s as u32,
                seq: 0,
            });
        }
        wheels.push(tokio::spawn(drive(chans, slots, shared.clone())));
        conns.push(conn);
    }

    let broker = uri
        .is_local()
        .then(|| BrokerProcess::find_by_port(uri.port))
        .flatten();
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    let rss = broker.and_then(|b| b.sample()).map(|s| s.rss_bytes);
    shared.stop.store(true, Ordering::Release);
    for w in wheels {
        let _ = w.await;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && shared.received.load(Ordering::Acquire) < shared.sent.load(Ordering::Acquire)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for c in &conns {
        c.close().await;
    }
    for t in consumer_tasks {
        let _ = t.await;
    }
    let sent = shared.sent.load(Ordering::Acquire);
    let received = shared.received.load(Ordering::Acquire);
    let latency = Percentiles::of(&shared.latency.lock());
    Ok(PairsResult {
        sent,
        received,
        lost: sent.saturating_sub(received),
        rate_per_s: received as f64 / elapsed_s,
        latency,
        broker_rss_bytes: rss,
    })
}

async fn drive(chans: Vec<Channel>, mut slots: Vec<Vec<Sender>>, shared: Arc<Shared>) {
    let props = encode_properties(&BasicProperties::default());
    let mut body = payload::new_body(BODY_BYTES);
    let tick = SEND_PERIOD / SLOTS as u32;
    let mut next = tokio::time::Instant::now();
    let mut slot = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(next).await;
        next += tick;
        let mut n = 0;
        for s in &mut slots[slot] {
            let now = payload::now_ns();
            payload::stamp(&mut body, now, s.id, s.seq);
            if chans[s.channel]
                .publish(&s.template, &props, &body, now)
                .is_err()
            {
                return;
            }
            s.seq += 1;
            n += 1;
        }
        shared.sent.fetch_add(n, Ordering::AcqRel);
        slot = (slot + 1) % SLOTS;
        if let Some(ch) = chans.first() {
            ch.wait_room().await;
        }
    }
}

async fn receive(
    ch: Channel,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<crate::client::Delivery>,
    shared: Arc<Shared>,
) {
    while let Some(d) = rx.recv().await {
        let body: &Bytes = &d.body;
        if let Some(stamp) = payload::parse(body) {
            shared
                .latency
                .lock()
                .saturating_record(payload::flight_us(stamp.sent_ns, payload::now_ns()).max(1));
        }
        shared.received.fetch_add(1, Ordering::AcqRel);
        ch.ack(d.delivery_tag, false);
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<Report> {
    let ns = ctx.steps(
        &[100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0],
        &[5.0, 25.0],
    );
    let duration = Duration::from_secs_f64(ctx.step_s);
    let mut table = Table::new(
        &["Receivers (addresses)", "Senders"],
        &[
            ("Msg/s", Unit::Count),
            ("Mean", Unit::Ms),
            ("99th", Unit::Ms),
            ("Lost", Unit::Count),
            ("Broker RSS, MiB", Unit::MiB),
        ],
    );
    for &n in &ns {
        let mut values = vec![];
        for t in ctx.targets.clone() {
            eprintln!(
                "== many-pairs N={n} ({} senders) on {}",
                n as usize * SENDERS_PER_RECEIVER,
                t.label
            );
            let r = step(&t.uri, n as usize, duration).await?;
            eprintln!(
                "   sent {} received {} lost {} rate {:.0} msg/s mean {:.2} ms p99 {:.2} ms RSS {:?} MiB",
                r.sent,
                r.received,
                r.lost,
                r.rate_per_s,
                r.latency.mean_us / 1000.0,
                r.latency.p99_us as f64 / 1000.0,
                r.broker_rss_bytes.map(|b| b >> 20)
            );
            values.push(vec![
                Some(r.rate_per_s),
                Some(r.latency.mean_us / 1000.0),
                Some(r.latency.p99_us as f64 / 1000.0),
                Some(r.lost as f64),
                r.broker_rss_bytes.map(|b| b as f64 / (1 << 20) as f64),
            ]);
        }
        ctx.commands.push(format!(
            "warren perf scenario many-pairs --steps {n} --duration {}",
            ctx.step_s
        ));
        table.push(
            vec![
                format!("{n}"),
                format!("{}", n as usize * SENDERS_PER_RECEIVER),
            ],
            n,
            values,
        );
    }
    Ok(Report {
        title: "warren perf scenario many-pairs".into(),
        intro: "Seed 004 (message latency with many senders and receivers): N receivers, each with its own queue, 40 senders per receiver at 10 msg/s, 100-byte bodies with the send timestamp in the body; receivers ack every message (not pre-settled). Flight time from send to receipt.".into(),
        sections: vec![Section {
            heading: "Latency by number of sender-receiver groups".into(),
            text: String::new(),
            plot: Some(PlotSpec {
                file_stem: "many_pairs_latency".into(),
                title: "mean and 99th percentile flight time".into(),
                x_label: "receivers".into(),
                y_label: "ms".into(),
                metric_indexes: vec![1, 2],
                log_x: false,
            }),
            table,
        }],
        ..Default::default()
    })
}
