//! Seed 003, the oslo.messaging simulator on RabbitMQ: RPC call (request, server reply,
//! round trip), cast (one-way to the server's topic queue) and notify (one-way to the
//! notifications queue), each with 50…500 concurrent senders. Like oslo.messaging, requests
//! go through the topic exchange `openstack` and replies through the default exchange to the
//! caller's reply queue, matched by correlation id. Cast and notify senders wait for a
//! publisher confirm per message, which models oslo's synchronous send and makes "lost"
//! exact: confirmed and never received.
//!
//! Message sizes follow a fixed mix in the spirit of the simulator's size distribution from
//! a 100-node cloud: 70% 100 B–1 KiB, 25% 1–5 KiB, 5% 5–20 KiB.

use super::Ctx;
use crate::accounting::Accounting;
use crate::broker_proc::{self, BrokerProcess};
use crate::client::{
    encode_properties, AmqpUri, BrokerUris, Channel, Connection, Delivery, DeliveryHook,
    PublishTemplate, QueueOptions,
};
use crate::payload;
use crate::report::{Metric, PlotSpec, Report, Section, Table, Unit};
use crate::stats::{new_histogram, Percentiles};
use anyhow::{anyhow, Result};
use parking_lot::Mutex;
use rand::Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use warren_codec::{BasicProperties, FieldTable};

const EXCHANGE: &str = "openstack";
const SERVER_QUEUE: &str = "oslo-perf-server";
const SERVER_KEY: &str = "perf_topic.server";
const NOTIFY_QUEUE: &str = "oslo-perf-notifications.info";
const NOTIFY_KEY: &str = "notifications.info";
const CHANNELS_PER_CONNECTION: usize = 100;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Call,
    Cast,
    Notify,
}

impl Mode {
    /// The modes `--modes` names (comma-separated call, cast, notify), all three without it.
    pub fn parse_list(list: Option<&str>) -> Result<Vec<Mode>> {
        let Some(list) = list else {
            return Ok(vec![Mode::Call, Mode::Cast, Mode::Notify]);
        };
        list.split(',')
            .map(|m| match m.trim() {
                "call" => Ok(Mode::Call),
                "cast" => Ok(Mode::Cast),
                "notify" => Ok(Mode::Notify),
                other => Err(anyhow!(
                    "--modes: unknown oslo-rpc mode {other:?} (call, cast or notify)"
                )),
            })
            .collect()
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Call => "RPC CALL",
            Mode::Cast => "RPC CAST",
            Mode::Notify => "NOTIFY",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct OsloResult {
    pub sent: u64,
    pub received: u64,
    pub round_trip: u64,
    pub lost: Option<u64>,
    pub throughput_per_s: f64,
    pub latency: Percentiles,
    pub broker_cpu_percent: Option<f64>,
}

fn message_size(rng: &mut impl Rng) -> usize {
    match rng.gen_range(0..100) {
        0..=69 => rng.gen_range(100..1024),
        70..=94 => rng.gen_range(1024..5120),
        _ => rng.gen_range(5120..20480),
    }
}

struct Shared {
    stop: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
    round_trip: AtomicU64,
    server_seen: Accounting,
    replies_seen: Accounting,
    latency: Mutex<hdrhistogram::Histogram<u64>>,
    reply_wakers: Vec<Notify>,
}

/// Runs one (mode, sender count) step against one broker. The callers run on a thread and
/// single-threaded runtime of their own, as the server does (`ServerThread`): in the simulator
/// client and server are separate processes, and on a work-stealing runtime the callers' two
/// worker threads spent more CPU parking and waking each other than on the calls (measured on
/// a quiet machine, 100 threads: 122k–142k round trips/s on the work-stealing runtime, 216k–218k
/// on a single thread, with the broker's CPU per round trip lower too, as more replies arrive
/// per read).
pub async fn step(uri: &str, mode: Mode, senders: usize, duration: Duration) -> Result<OsloResult> {
    let uri = uri.to_string();
    on_own_thread("oslo-clients", move || async move {
        clients_step(&uri, mode, senders, duration).await
    })?
    .await
    .map_err(|_| anyhow!("the oslo clients' thread ended without a result"))?
}

/// Runs `task` on a new OS thread with a single-threaded tokio runtime of its own; the
/// receiver gets its result.
fn on_own_thread<T, F, Fut>(
    name: &str,
    task: F,
) -> Result<tokio::sync::oneshot::Receiver<Result<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>>,
{
    let (done_tx, done) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(task()),
                Err(e) => Err(e.into()),
            };
            let _ = done_tx.send(result);
        })?;
    Ok(done)
}

async fn clients_step(
    uri: &str,
    mode: Mode,
    senders: usize,
    duration: Duration,
) -> Result<OsloResult> {
    let uris = BrokerUris::parse(uri).map_err(|e| anyhow!(e))?;
    let admin = Connection::open_named(uris.first(), "oslo-admin").await?;
    let ach = admin.channel().await?;
    ach.exchange_declare(EXCHANGE, "topic", false, false)
        .await?;
    let (queue, key) = if mode == Mode::Notify {
        (NOTIFY_QUEUE, NOTIFY_KEY)
    } else {
        (SERVER_QUEUE, SERVER_KEY)
    };
    ach.queue_declare(queue, &QueueOptions::default()).await?;
    ach.queue_bind(queue, EXCHANGE, key, FieldTable::new())
        .await?;

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
        round_trip: AtomicU64::new(0),
        server_seen: Accounting::new(senders),
        replies_seen: Accounting::new(senders),
        latency: Mutex::new(new_histogram()),
        reply_wakers: (0..senders).map(|_| Notify::new()).collect(),
    });

    // The server: consumes the topic queue, replies to calls.
    let server = ServerThread::start(uris.first(), queue, mode, shared.clone()).await?;

    // The clients: senders spread over connections, one reply queue per connection.
    let mut conns = vec![];
    let mut sender_channels: Vec<(usize, Channel, Option<String>)> = vec![];
    // With several nodes the server consumes through the first and client connection c
    // connects through node c + 1, so calls and replies cross nodes.
    for (c, first) in (0..senders).step_by(CHANNELS_PER_CONNECTION).enumerate() {
        let conn = Connection::open_named(uris.for_client(c + 1), "oslo-client").await?;
        let reply_queue = if mode == Mode::Call {
            let rch = conn.channel().await?;
            let name = rch.declare_private_queue().await?;
            let hook = Arc::new(ReplyCollector {
                shared: shared.clone(),
            });
            rch.basic_consume_hook(&name, "oslo-replies", true, hook)
                .await?;
            Some(name)
        } else {
            None
        };
        for id in first..(first + CHANNELS_PER_CONNECTION).min(senders) {
            let ch = conn.channel().await?;
            if mode != Mode::Call {
                ch.confirm_select().await?;
            }
            sender_channels.push((id, ch, reply_queue.clone()));
        }
        conns.push(conn);
    }

    let broker = uris
        .first()
        .is_local()
        .then(|| BrokerProcess::find_by_port(uris.first().port))
        .flatten();
    let cpu_start = broker.and_then(|b| b.sample());
    let started = Instant::now();
    let tasks: Vec<_> = sender_channels
        .into_iter()
        .map(|(id, ch, reply_to)| tokio::spawn(send_loop(id, ch, reply_to, mode, shared.clone())))
        .collect();
    let elapsed_s = super::run_then_stop(duration, started, &shared.stop, tasks).await;
    let cpu_end = broker.and_then(|b| b.sample());

    // Drain: everything sent has arrived (and been answered), or 5 s of patience.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut drained = false;
    while Instant::now() < deadline {
        let sent = shared.sent.load(Ordering::Acquire);
        let done = match mode {
            Mode::Call => shared.round_trip.load(Ordering::Acquire) >= sent,
            _ => shared.received.load(Ordering::Acquire) >= sent,
        };
        if done {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !drained {
        // Whatever has not arrived after the drain timeout is lost.
        drained = true;
    }
    for c in &conns {
        c.close().await;
    }
    server.stop().await;
    let _ = ach.queue_delete(queue).await;
    admin.close().await;

    let sent = shared.sent.load(Ordering::Acquire);
    let received = shared.received.load(Ordering::Acquire);
    let round_trip = shared.round_trip.load(Ordering::Acquire);
    let lost = drained.then(|| match mode {
        Mode::Call => shared.replies_seen.lost(false),
        _ => shared.server_seen.lost(true),
    });
    let done = if mode == Mode::Call {
        round_trip
    } else {
        received
    };
    let latency = Percentiles::of(&shared.latency.lock());
    Ok(OsloResult {
        sent,
        received,
        round_trip,
        lost,
        throughput_per_s: done as f64 / elapsed_s,
        latency,
        broker_cpu_percent: match (cpu_start, cpu_end) {
            (Some(a), Some(b)) => Some(broker_proc::cpu_percent(&a, &b)),
            _ => None,
        },
    })
}

async fn send_loop(
    id: usize,
    ch: Channel,
    reply_to: Option<String>,
    mode: Mode,
    shared: Arc<Shared>,
) {
    let key = if mode == Mode::Notify {
        NOTIFY_KEY
    } else {
        SERVER_KEY
    };
    let template = ch.publish_template(EXCHANGE, key, false);
    let mut body = vec![b'x'; 20480];
    let mut rng = rand::rngs::StdRng::from_entropy();
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let size = message_size(&mut rng);
        let now = payload::now_ns();
        payload::stamp(&mut body, now, id as u32, seq);
        let props = BasicProperties {
            reply_to: reply_to.as_deref().map(Into::into),
            correlation_id: Some(format!("{id}.{seq}").into()),
            ..Default::default()
        };
        if ch
            .publish(&template, &encode_properties(&props), &body[..size], now)
            .is_err()
        {
            break;
        }
        seq += 1;
        shared.sent.fetch_add(1, Ordering::AcqRel);
        match mode {
            Mode::Call => {
                if tokio::time::timeout(CALL_TIMEOUT, shared.reply_wakers[id].notified())
                    .await
                    .is_err()
                {
                    continue; // timed out: counted as lost unless the reply still comes
                }
            }
            _ => {
                if ch.wait_confirms_below(1).await.is_err() {
                    break;
                }
                shared.server_seen.confirmed(id as u32, seq - 1);
            }
        }
    }
    shared.server_seen.set_sent(id as u32, seq);
    shared.replies_seen.set_sent(id as u32, seq);
}

use rand::SeedableRng;

/// The oslo server on an OS thread and runtime of its own. In the simulator it is a separate
/// process; sharing a runtime with hundreds of sender tasks would let the scheduler, not the
/// broker, decide how fast it consumes (one task among 500 in the run queue).
struct ServerThread {
    stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::sync::oneshot::Receiver<Result<()>>,
}

impl ServerThread {
    /// Returns once the server consumes.
    async fn start(uri: &AmqpUri, queue: &str, mode: Mode, shared: Arc<Shared>) -> Result<Self> {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let uri = uri.clone();
        let queue = queue.to_string();
        let done = on_own_thread("oslo-server", move || async move {
            let opened = async {
                let server = Connection::open_named(&uri, "oslo-server").await?;
                let ch = server.channel().await?;
                ch.basic_qos(100, false).await?;
                // Replies go out on a channel of their own: the hook runs while the consuming
                // channel's state is locked, and a publish takes that lock.
                let reply_ch = server.channel().await?;
                let hook = Arc::new(ServerHook {
                    ch: ch.clone(),
                    reply_ch,
                    mode,
                    shared,
                    reply_templates: Mutex::new(HashMap::new()),
                });
                ch.basic_consume_hook(&queue, "oslo-server", false, hook)
                    .await?;
                Ok::<_, anyhow::Error>(server)
            };
            match opened.await {
                Ok(server) => {
                    let _ = ready_tx.send(Ok(()));
                    let _ = stop_rx.await;
                    // Closing fails the channels, which drops the hook.
                    server.close().await;
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
            Ok(())
        })?;
        ready_rx
            .await
            .map_err(|_| anyhow!("the oslo server thread ended before it consumed"))??;
        Ok(ServerThread { stop, done })
    }

    /// Closes the server's connection and waits for its thread to finish.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.done.await;
    }
}

/// The oslo server's consumer, run on its connection's reader task as each request is parsed
/// (no hand-over to a task of its own: a wake-up less per call on the 2 cores the broker
/// shares): accounts the request, answers a call on the reply channel through the default
/// exchange to the caller's `reply_to` with its correlation id, and acks it (one ack per
/// message, as oslo.messaging's server).
struct ServerHook {
    ch: Channel,
    reply_ch: Channel,
    mode: Mode,
    shared: Arc<Shared>,
    /// The encoded `basic.publish` frame per reply queue (one per client connection).
    reply_templates: Mutex<HashMap<String, PublishTemplate>>,
}

impl DeliveryHook for ServerHook {
    fn on_delivery(&self, d: Delivery) {
        if let Some(stamp) = payload::parse(&d.body) {
            let shared = &self.shared;
            if shared.server_seen.received(stamp.producer_id, stamp.seq) {
                shared.received.fetch_add(1, Ordering::AcqRel);
            }
            if self.mode != Mode::Call {
                shared
                    .latency
                    .lock()
                    .saturating_record(payload::flight_us(stamp.sent_ns, d.received_ns).max(1));
            } else if let Some(props) = d.decode_properties() {
                if let Some(reply_to) = props.reply_to {
                    let reply_props = BasicProperties {
                        correlation_id: props.correlation_id,
                        ..Default::default()
                    };
                    let mut templates = self.reply_templates.lock();
                    if !templates.contains_key(reply_to.as_str()) {
                        let t = self.reply_ch.publish_template("", &reply_to, false);
                        templates.insert(reply_to.to_string(), t);
                    }
                    if let Some(t) = templates.get(reply_to.as_str()) {
                        // The reply echoes the stamp, so the caller measures the round trip.
                        let _ = self.reply_ch.publish(
                            t,
                            &encode_properties(&reply_props),
                            &d.body[..payload::MIN_BODY_BYTES],
                            0,
                        );
                    }
                }
            }
        }
        self.ch.ack(d.delivery_tag, false);
    }
}

/// The callers' reply consumer (auto-ack, one per client connection), on the connection's
/// reader task: records the round trip and wakes the caller whose reply it is.
struct ReplyCollector {
    shared: Arc<Shared>,
}

impl DeliveryHook for ReplyCollector {
    fn on_delivery(&self, d: Delivery) {
        let shared = &self.shared;
        if let Some(stamp) = payload::parse(&d.body) {
            if shared.replies_seen.received(stamp.producer_id, stamp.seq) {
                shared.round_trip.fetch_add(1, Ordering::AcqRel);
            }
            shared
                .latency
                .lock()
                .saturating_record(payload::flight_us(stamp.sent_ns, d.received_ns).max(1));
            if let Some(w) = shared.reply_wakers.get(stamp.producer_id as usize) {
                w.notify_one();
            }
        }
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<Report> {
    let threads = ctx.steps(&[50.0, 100.0, 250.0, 350.0, 500.0], &[10.0, 50.0]);
    let duration = Duration::from_secs_f64(ctx.step_s);
    let mut report = Report {
        title: "warren perf scenario oslo-rpc".into(),
        intro: "Seed 003, the oslo.messaging simulator: RPC call, cast and notify throughput with N concurrent senders (threads). Latency is the mean round trip for calls and the mean flight time (send to server receipt) for cast and notify. Broker CPU is in % of one core, when the broker is local.".into(),
        ..Default::default()
    };
    for mode in Mode::parse_list(ctx.args.modes.as_deref())? {
        // Counts over a step of fixed length: more sent and received is more work done.
        let count_metrics: Vec<Metric> = if mode == Mode::Call {
            vec![
                Metric::higher("sent, msg", Unit::Count),
                Metric::higher("received, msg", Unit::Count),
                Metric::higher("round-trip, msg", Unit::Count),
                Metric::lower("lost, msg", Unit::Count),
            ]
        } else {
            vec![
                Metric::higher("sent, msg", Unit::Count),
                Metric::higher("received, msg", Unit::Count),
                Metric::lower("lost, msg", Unit::Count),
            ]
        };
        let mut counts = Table::new(&["threads"], &count_metrics);
        let mut perf = Table::new(
            &["threads"],
            &[
                Metric::higher("throughput, msg/sec", Unit::Count).headline(),
                Metric::lower("latency, ms", Unit::Ms).headline(),
                Metric::lower("Broker CPU, %", Unit::Percent).headline(),
            ],
        );
        for &n in &threads {
            let mut count_values = vec![];
            let mut perf_values = vec![];
            for t in ctx.targets.clone() {
                eprintln!("== oslo-rpc {} threads={n} on {}", mode.name(), t.label);
                let r = step(&t.uri, mode, n as usize, duration).await?;
                eprintln!(
                    "   sent {} received {} round-trip {} lost {:?} throughput {:.0} msg/s latency mean {:.2} ms broker CPU {:?}",
                    r.sent,
                    r.received,
                    r.round_trip,
                    r.lost,
                    r.throughput_per_s,
                    r.latency.mean_us / 1000.0,
                    r.broker_cpu_percent.map(|c| c.round())
                );
                let mut c = vec![Some(r.sent as f64), Some(r.received as f64)];
                if mode == Mode::Call {
                    c.push(Some(r.round_trip as f64));
                }
                c.push(r.lost.map(|l| l as f64));
                count_values.push(c);
                perf_values.push(vec![
                    Some(r.throughput_per_s),
                    Some(r.latency.mean_us / 1000.0),
                    r.broker_cpu_percent,
                ]);
            }
            ctx.commands.push(format!(
                "warren perf scenario oslo-rpc --steps {n}  # {} step, {} s",
                mode.name(),
                ctx.step_s
            ));
            counts.push(vec![format!("{n}")], n, count_values);
            perf.push(vec![format!("{n}")], n, perf_values);
        }
        let stem = mode.name().to_lowercase().replace(' ', "_");
        report.sections.push(Section {
            heading: format!("{} Message count", mode.name()),
            text: String::new(),
            plots: vec![PlotSpec {
                file_stem: format!("{stem}_message_count"),
                title: format!("{} message count", mode.name()),
                x_label: "threads".into(),
                y_label: "messages".into(),
                metric_indexes: (0..counts.metrics.len() - 1).collect(),
                x_max: None,
            }],
            table: counts,
        });
        report.sections.push(Section {
            heading: format!(
                "{} throughput, latency and broker CPU utilization depending on thread count",
                mode.name()
            ),
            text: String::new(),
            plots: vec![PlotSpec {
                file_stem: format!("{stem}_throughput"),
                title: format!("{} throughput", mode.name()),
                x_label: "threads".into(),
                y_label: "msg/s".into(),
                metric_indexes: vec![0],
                x_max: None,
            }],
            table: perf.clone(),
        });
        report.sections.push(Section {
            heading: format!("{} latency", mode.name()),
            text: String::new(),
            plots: vec![PlotSpec {
                file_stem: format!("{stem}_latency"),
                title: format!("{} mean latency", mode.name()),
                x_label: "threads".into(),
                y_label: "ms".into(),
                metric_indexes: vec![0],
                x_max: None,
            }],
            table: Table {
                // The same figures as the table above, whose headline the summary quotes.
                metrics: vec![Metric {
                    headline: false,
                    ..perf.metrics[1].clone()
                }],
                rows: perf
                    .rows
                    .iter()
                    .map(|r| crate::report::Row {
                        keys: r.keys.clone(),
                        x: r.x,
                        values: r.values.iter().map(|v| vec![v[1]]).collect(),
                    })
                    .collect(),
                key_headers: perf.key_headers.clone(),
            },
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_flag_picks_the_named_modes_in_order() {
        assert_eq!(
            Mode::parse_list(None).unwrap(),
            vec![Mode::Call, Mode::Cast, Mode::Notify]
        );
        assert_eq!(Mode::parse_list(Some("call")).unwrap(), vec![Mode::Call]);
        assert_eq!(
            Mode::parse_list(Some("notify, call")).unwrap(),
            vec![Mode::Notify, Mode::Call]
        );
        assert!(Mode::parse_list(Some("call,rpc")).is_err());
    }
}
