//! Runs one PerfTest-style experiment: declares the topology, starts consumers then
//! producers (each with its own connection and channel, as PerfTest does), reports every
//! interval, stops on time or message counts, drains, and returns exact counts and latency.

use crate::accounting::Accounting;
use crate::broker_proc::{self, BrokerProcess};
use crate::client::{
    encode_properties, BrokerUris, Channel, ChannelHooks, Connection, Delivery, DeliveryHook,
    QueueOptions,
};
use crate::flags::PerfArgs;
use crate::output::{self, IntervalRecord, RunResult};
use crate::payload;
use crate::rate::RateLimiter;
use crate::stats::Stats;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_codec::{BasicProperties, FieldTable, FieldValue};

/// How the caller wants the run presented.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Print interval lines (PerfTest style) while running.
    pub print_intervals: bool,
    /// Delete the named queues at the end, so the next step starts clean.
    pub delete_queues: bool,
    /// Serve `--metrics-prometheus` on this port.
    pub prometheus_port: Option<u16>,
}

/// Everything the tasks of one run share.
pub(crate) struct Shared {
    pub stats: Stats,
    pub accounting: Accounting,
    pub stop: AtomicBool,
    pub producers_running: AtomicUsize,
    pub last_interval: Mutex<Option<IntervalRecord>>,
}

struct ProducerHooks {
    shared: Arc<Shared>,
    producer_id: u32,
}

impl ChannelHooks for ProducerHooks {
    fn on_confirm(&self, seq: u64, ack: bool, sent_ns: u64, received_ns: u64) {
        let s = &self.shared.stats;
        if ack {
            Stats::add(&s.confirmed, 1);
            // Confirm sequence numbers start at 1, message sequence numbers at 0.
            self.shared.accounting.confirmed(self.producer_id, seq - 1);
        } else {
            Stats::add(&s.nacked, 1);
        }
        s.record_confirm_us(payload::flight_us(sent_ns, received_ns));
    }

    fn on_return(&self, _reply_code: u16, _body: &Bytes) {
        Stats::add(&self.shared.stats.returned, 1);
    }
}

/// A consumer with no message count and no transactions: each delivery is recorded on the
/// connection's reader task as it is parsed, and acked from there too (every
/// `--multi-ack-every` deliveries, with `multiple` when that is above one), without a
/// hand-over through a channel to a consumer task: the load tool shares the broker's cores,
/// and that hop was a wake-up and a queue push per message.
struct HookConsumer {
    shared: Arc<Shared>,
    /// Manual acks: the channel to ack on and how often.
    acks: Option<HookAcks>,
}

struct HookAcks {
    channel: Channel,
    every: u64,
    /// Deliveries since the last ack. Only the connection's reader task calls the hook, so
    /// this is never contended (an atomic only because the hook is `Sync`).
    unacked: AtomicU64,
}

impl DeliveryHook for HookConsumer {
    fn on_delivery(&self, delivery: Delivery) {
        on_delivery(&delivery, &self.shared);
        if let Some(acks) = &self.acks {
            let unacked = acks.unacked.load(Ordering::Relaxed) + 1;
            if unacked >= acks.every {
                acks.channel.ack(delivery.delivery_tag, acks.every > 1);
                acks.unacked.store(0, Ordering::Relaxed);
            } else {
                acks.unacked.store(unacked, Ordering::Relaxed);
            }
        }
    }
}

/// The routing key every producer uses when no queue pattern gives one per queue.
fn default_routing_key(args: &PerfArgs, queues: &[String]) -> String {
    if let Some(k) = &args.routing_key {
        return k.clone();
    }
    match queues.first() {
        Some(q) => q.clone(),
        None => format!("perf-{:08x}", rand::random::<u32>()),
    }
}

/// Binding arguments for a headers exchange: match the one header producers set.
fn headers_binding(routing_key: &str) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-match", FieldValue::string("all"));
    t.insert("perf-key", FieldValue::string(routing_key));
    t
}

fn declares_exchange(name: &str) -> bool {
    !name.is_empty() && !name.starts_with("amq.")
}

pub async fn run(args: &PerfArgs, opts: &RunOptions) -> Result<RunResult> {
    let uris = BrokerUris::parse(&args.uri).map_err(|e| anyhow!(e))?;
    let uri = uris.first();
    let queues = args.queue_names();
    let routing_key = default_routing_key(args, &queues);
    let queue_args = args.queue_arguments().map_err(|e| anyhow!(e))?;
    let headers = args.exchange_type == "headers";
    let label = args.id.clone().unwrap_or_else(|| "perf".to_owned());

    // Topology, on a connection of its own.
    let admin = Connection::open_named(uri, "perf-admin")
        .await
        .with_context(|| format!("connecting to {uri}"))?;
    let ch = admin.channel().await?;
    if declares_exchange(&args.exchange) {
        // Durable, as PerfTest declares it: both tools then share a broker's exchange.
        ch.exchange_declare(&args.exchange, &args.exchange_type, true, false)
            .await?;
    }
    let queue_opts = QueueOptions {
        durable: args.persistent(),
        exclusive: false,
        auto_delete: args.auto_delete(),
        arguments: queue_args,
    };
    for q in &queues {
        if !args.predeclared {
            ch.queue_declare(q, &queue_opts)
                .await
                .with_context(|| format!("declaring queue {q}"))?;
        }
        if !args.exchange.is_empty() {
            let key = if args.queue_pattern.is_some() {
                q.as_str()
            } else {
                routing_key.as_str()
            };
            let bind_args = if headers {
                headers_binding(key)
            } else {
                FieldTable::new()
            };
            ch.queue_bind(q, &args.exchange, key, bind_args).await?;
        }
    }

    let shared = Arc::new(Shared {
        stats: Stats::default(),
        accounting: Accounting::new(args.producers),
        stop: AtomicBool::new(false),
        producers_running: AtomicUsize::new(args.producers),
        last_interval: Mutex::new(None),
    });
    let metrics_server = opts.prometheus_port.map(|port| {
        let tags = crate::prometheus::parse_tags(args.metrics_tags.as_deref().unwrap_or(""));
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::prometheus::serve(port, tags, shared).await {
                eprintln!("metrics endpoint on port {port}: {e}");
            }
        })
    });
    let broker = uri
        .is_local()
        .then(|| BrokerProcess::find_by_port(uri.port))
        .flatten();

    // Consumers first, so the first messages find them.
    let mut consumer_conns = vec![];
    let mut consumer_tasks = vec![];
    for i in 0..args.consumers {
        let conn =
            Connection::open_named(uris.for_client(i), &format!("perf-consumer-{i}")).await?;
        let ch = conn.channel().await?;
        let queue = if queues.is_empty() {
            let name = ch.declare_private_queue().await?;
            if !args.exchange.is_empty() {
                let bind_args = if headers {
                    headers_binding(&routing_key)
                } else {
                    FieldTable::new()
                };
                ch.queue_bind(&name, &args.exchange, &routing_key, bind_args)
                    .await?;
            }
            name
        } else {
            queues[i % queues.len()].clone()
        };
        if args.global_qos > 0 {
            ch.basic_qos(args.global_qos, true).await?;
        }
        if args.qos > 0 {
            ch.basic_qos(args.qos, false).await?;
        }
        if args.ctxsize > 0 {
            ch.tx_select().await?;
        }
        let task = if args.polling {
            tokio::spawn(poll_consumer(ch, queue, args.clone(), shared.clone()))
        } else if args.cmessages == 0 && args.ctxsize == 0 {
            let hook = Arc::new(HookConsumer {
                shared: shared.clone(),
                acks: (!args.autoack).then(|| HookAcks {
                    channel: ch.clone(),
                    every: args.multi_ack_every.max(1),
                    unacked: AtomicU64::new(0),
                }),
            });
            let tag = format!("perf-consumer-{i}");
            ch.basic_consume_hook(&queue, &tag, args.autoack, hook)
                .await?;
            // The hook lives with the channel, which the connection keeps until teardown.
            tokio::spawn(async move { drop(ch) })
        } else {
            let rx = ch
                .basic_consume(&queue, &format!("perf-consumer-{i}"), args.autoack)
                .await?;
            tokio::spawn(consume(ch, rx, args.clone(), shared.clone()))
        };
        consumer_tasks.push(task);
        consumer_conns.push(conn);
    }

    // Producers.
    let mut producer_conns = vec![];
    let mut producer_tasks = vec![];
    let mut producer_channels = vec![];
    for i in 0..args.producers {
        let conn = Connection::open_named(
            uris.for_client(args.consumers + i),
            &format!("perf-producer-{i}"),
        )
        .await?;
        let ch = conn.channel().await?;
        ch.set_hooks(Arc::new(ProducerHooks {
            shared: shared.clone(),
            producer_id: i as u32,
        }));
        if args.confirm_window().is_some() {
            ch.confirm_select().await?;
        }
        if args.ptxsize > 0 {
            ch.tx_select().await?;
        }
        let key = if args.queue_pattern.is_some() && !queues.is_empty() {
            queues[i % queues.len()].clone()
        } else {
            routing_key.clone()
        };
        producer_channels.push(ch.clone());
        producer_tasks.push((i, ch.clone(), key, conn.clone()));
        producer_conns.push(conn);
    }

    let cpu_start = broker.and_then(|b| b.sample());
    let self_cpu_start = broker_proc::self_cpu_s();
    let started = Instant::now();
    let producer_handles: Vec<_> = producer_tasks
        .into_iter()
        .map(|(i, ch, key, _conn)| {
            let (args, shared) = (args.clone(), shared.clone());
            tokio::spawn(async move {
                let r = produce(i as u32, ch, key, headers, &args, &shared).await;
                shared.producers_running.fetch_sub(1, Ordering::AcqRel);
                r
            })
        })
        .collect();

    // Interval reporting until the stop condition.
    let interval = Duration::from_secs_f64(args.interval.max(0.05));
    let deadline = args.time.map(|t| started + Duration::from_secs_f64(t));
    let mut intervals = vec![];
    let mut last_counts = shared.stats.counts();
    let mut last_at = started;
    let mut next_tick = started + interval;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        // Wake at least every 50 ms so message-count stops are noticed promptly.
        let mut wake = next_tick.min(Instant::now() + Duration::from_millis(50));
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = &mut ctrl_c => { shared.stop.store(true, Ordering::Release); }
        }
        let now = Instant::now();
        if now >= next_tick {
            let rec = roll_interval(
                &shared,
                now.duration_since(started),
                now.duration_since(last_at),
                &mut last_counts,
            );
            if opts.print_intervals {
                println!("{}", output::interval_line(&label, &rec));
            }
            *shared.last_interval.lock() = Some(rec.clone());
            intervals.push(rec);
            last_at = now;
            next_tick += interval;
        }
        let producers_done =
            args.producers == 0 || shared.producers_running.load(Ordering::Acquire) == 0;
        let consumers_done = args.cmessages == 0 || consumer_tasks.iter().all(|t| t.is_finished());
        let counts_limited = args.pmessages > 0 || args.cmessages > 0;
        let time_up = deadline.is_some_and(|d| now >= d);
        if time_up
            || shared.stop.load(Ordering::Acquire)
            || (counts_limited && producers_done && consumers_done)
        {
            break;
        }
    }
    shared.stop.store(true, Ordering::Release);
    let mut producer_errors = vec![];
    for h in producer_handles {
        if let Ok(Err(e)) = h.await {
            producer_errors.push(e.to_string());
        }
    }
    let send_elapsed = started.elapsed();
    let cpu_end = broker.and_then(|b| b.sample());
    let self_cpu_end = broker_proc::self_cpu_s();

    // Drain: wait for outstanding confirms and for deliveries to stop arriving.
    let drain_deadline = Instant::now() + Duration::from_secs_f64(args.drain_timeout.max(0.0));
    let mut drained = false;
    if args.producers > 0 {
        let mut last_received = shared.stats.counts().received;
        let mut quiet_since = Instant::now();
        while Instant::now() < drain_deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let c = shared.stats.counts();
            let confirms_done = producer_channels
                .iter()
                .all(|ch| ch.outstanding_confirms() == 0 || ch.is_closed());
            let everything_in = c.received + c.duplicates >= c.sent;
            if c.received != last_received {
                last_received = c.received;
                quiet_since = Instant::now();
            }
            let quiet = quiet_since.elapsed()
                >= Duration::from_millis(if args.consumers == 0 { 200 } else { 500 });
            if confirms_done && ((args.consumers > 0 && everything_in) || quiet) {
                drained = true;
                break;
            }
        }
    }
    let counts = shared.stats.counts();
    let (latency, confirm_latency) = {
        // Fold the partial last interval into the totals.
        shared.stats.roll();
        shared.stats.totals()
    };

    // Teardown.
    for conn in producer_conns.iter().chain(consumer_conns.iter()) {
        conn.close().await;
    }
    for t in consumer_tasks {
        let _ = t.await;
    }
    if opts.delete_queues && !args.predeclared {
        for q in &queues {
            let _ = ch.queue_delete(q).await;
        }
    }
    admin.close().await;
    if let Some(server) = metrics_server {
        server.abort();
    }

    // Lost only means something when both sides ran: without consumers nothing was meant to
    // be received, without producers nothing was sent by this run.
    let both_sides = args.producers > 0 && args.consumers > 0;
    let lost =
        (drained && both_sides).then(|| shared.accounting.lost(args.confirm_window().is_some()));
    let send_s = send_elapsed.as_secs_f64().max(1e-9);
    let steady: Vec<&IntervalRecord> = steady_intervals(&intervals);
    let broker_cpu_percent = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) => Some(broker_proc::cpu_percent(&a, &b)),
        _ => None,
    };
    let tool_cpu_percent = match (self_cpu_start, self_cpu_end) {
        (Some(a), Some(b)) => Some((b - a) / send_s * 100.0),
        _ => None,
    };
    Ok(RunResult {
        label,
        uri: uris.to_string(),
        duration_s: send_s,
        counts,
        lost,
        drained,
        send_rate_per_s: counts.sent as f64 / send_s,
        receive_rate_per_s: counts.received as f64 / send_s,
        confirm_rate_per_s: counts.confirmed as f64 / send_s,
        latency,
        confirm_latency,
        max_p75_us: steady
            .iter()
            .map(|r| r.latency.p75_us)
            .max()
            .unwrap_or(latency.p75_us),
        max_p95_us: steady
            .iter()
            .map(|r| r.latency.p95_us)
            .max()
            .unwrap_or(latency.p95_us),
        max_p99_us: steady
            .iter()
            .map(|r| r.latency.p99_us)
            .max()
            .unwrap_or(latency.p99_us),
        broker_cpu_percent,
        broker_rss_bytes: cpu_end.map(|s| s.rss_bytes),
        tool_cpu_percent,
        errors: producer_errors,
        intervals,
    })
}

/// The intervals the "Max" columns read: all but the first (connection set-up and the
/// first messages), when there are at least three.
pub fn steady_intervals(intervals: &[IntervalRecord]) -> Vec<&IntervalRecord> {
    let skip = usize::from(intervals.len() >= 3);
    intervals
        .iter()
        .skip(skip)
        .filter(|r| r.latency.count > 0)
        .collect()
}

pub(crate) fn roll_interval(
    shared: &Shared,
    elapsed: Duration,
    span: Duration,
    last: &mut crate::stats::Counts,
) -> IntervalRecord {
    let c = shared.stats.counts();
    let (latency, confirm_latency) = shared.stats.roll();
    let s = span.as_secs_f64().max(1e-9);
    let rate = |now: u64, before: u64| (now - before) as f64 / s;
    let rec = IntervalRecord {
        elapsed_s: elapsed.as_secs_f64(),
        sent_per_s: rate(c.sent, last.sent),
        confirmed_per_s: rate(c.confirmed, last.confirmed),
        nacked_per_s: rate(c.nacked, last.nacked),
        returned_per_s: rate(c.returned, last.returned),
        received_per_s: rate(c.received, last.received),
        latency,
        confirm_latency,
    };
    *last = c;
    rec
}

async fn produce(
    producer_id: u32,
    ch: Channel,
    routing_key: String,
    headers: bool,
    args: &PerfArgs,
    shared: &Shared,
) -> Result<()> {
    let mut props = BasicProperties::default();
    if args.persistent() {
        props.delivery_mode = Some(2);
    }
    if headers {
        let mut h = FieldTable::new();
        h.insert("perf-key", FieldValue::string(routing_key.as_str()));
        props.headers = Some(h);
    }
    let props = encode_properties(&props);
    let mut body = payload::new_body(args.size);
    let template = ch.message_template(
        &args.exchange,
        &routing_key,
        args.mandatory(),
        props,
        body.len(),
    );
    let mut limiter = args
        .rate_per_s()
        .map(|r| RateLimiter::new(r, Instant::now()));
    let window = args.confirm_window().filter(|w| *w > 0);
    let mut seq: u64 = 0;
    let result = async {
        while !shared.stop.load(Ordering::Relaxed) && (args.pmessages == 0 || seq < args.pmessages)
        {
            let batch = match limiter.as_mut() {
                Some(l) => {
                    // Wake at least every 100 ms to notice the stop flag at low rates.
                    let due =
                        tokio::time::timeout(Duration::from_millis(100), l.acquire(256)).await;
                    match due {
                        Ok(n) => n,
                        Err(_) => continue,
                    }
                }
                None => 64,
            };
            let batch = if args.pmessages > 0 {
                batch.min(args.pmessages - seq)
            } else {
                batch
            };
            // One clock reading per batch, not per message (the tool's CPU is taken from the
            // broker it measures): a batch is encoded in microseconds, so a stamp is early
            // by at most that (64 messages unlimited, ~20 µs; at a set rate a batch is the
            // few messages due at once). Read again after anything that waits.
            let mut now = payload::now_ns();
            for _ in 0..batch {
                if let Some(w) = window {
                    if ch.outstanding_confirms() >= w {
                        ch.wait_confirms_below(w).await?;
                        now = payload::now_ns();
                    }
                }
                payload::stamp(&mut body, now, producer_id, seq);
                ch.publish_message(&template, &body, now)?;
                seq += 1;
                if args.ptxsize > 0 && seq % args.ptxsize == 0 {
                    ch.tx_commit().await?;
                    now = payload::now_ns();
                }
            }
            Stats::add(&shared.stats.sent, batch);
            ch.wait_room().await;
            if limiter.is_none() {
                tokio::task::yield_now().await;
            }
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    shared.accounting.set_sent(producer_id, seq);
    result
}

/// Records one delivery: latency, receipt (or duplicate).
fn on_delivery(delivery: &Delivery, shared: &Shared) {
    match payload::parse(&delivery.body) {
        Some(stamp) => {
            if shared.accounting.received(stamp.producer_id, stamp.seq) {
                Stats::add(&shared.stats.received, 1);
            } else {
                Stats::add(&shared.stats.duplicates, 1);
            }
            shared
                .stats
                .record_latency_us(payload::flight_us(stamp.sent_ns, delivery.received_ns));
        }
        None => Stats::add(&shared.stats.received, 1),
    }
}

async fn consume(
    ch: Channel,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<crate::client::Delivery>,
    args: PerfArgs,
    shared: Arc<Shared>,
) {
    let mut unacked = 0u64;
    let mut acks_in_tx = 0u64;
    let mut got = 0u64;
    let every = args.multi_ack_every.max(1);
    while let Some(d) = rx.recv().await {
        on_delivery(&d, &shared);
        got += 1;
        if !args.autoack {
            unacked += 1;
            if unacked >= every {
                ch.ack(d.delivery_tag, every > 1);
                unacked = 0;
                acks_in_tx += 1;
                if args.ctxsize > 0 && acks_in_tx >= args.ctxsize {
                    acks_in_tx = 0;
                    if ch.tx_commit().await.is_err() {
                        return;
                    }
                }
            }
        }
        if args.cmessages > 0 && got >= args.cmessages {
            if unacked > 0 {
                ch.ack(d.delivery_tag, true);
            }
            let _ = ch.close().await;
            return;
        }
    }
}

async fn poll_consumer(ch: Channel, queue: String, args: PerfArgs, shared: Arc<Shared>) {
    let mut got = 0u64;
    // Runs until teardown closes the channel, so the drain phase still polls.
    loop {
        match ch.basic_get(&queue, args.autoack).await {
            Ok(Some(d)) => {
                on_delivery(&d, &shared);
                if !args.autoack {
                    ch.ack(d.delivery_tag, false);
                }
                got += 1;
                if args.cmessages > 0 && got >= args.cmessages {
                    return;
                }
            }
            Ok(None) => {
                tokio::time::sleep(Duration::from_millis(args.polling_interval.max(1))).await
            }
            Err(_) => return,
        }
    }
}

/// Percentiles in the seeds' unit (ms).
pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}
