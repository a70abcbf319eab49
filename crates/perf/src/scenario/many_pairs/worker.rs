//! One worker's share of a many-pairs step: whole groups (a receiver, its queue and its
//! senders), each client its own AMQP connection with one channel, as the report's separate
//! client processes. A worker runs inside the tool's process or as a worker process of its own
//! (see `link`); either way it attaches its clients, sends on the shared schedule when told,
//! and hands back counts and its flight-time histogram.
//!
//! Receivers measure on the connection's reader task the moment a delivery is parsed (the
//! report's "time reading immediately after receiving"), then ack it: messages are not
//! pre-settled. Senders publish in confirm mode (unsettled), so "confirmed" is what the broker
//! took responsibility for.

use super::amqp10;
use super::counters::Counters;
use super::pacing::Wheel;
use crate::client::{
    encode_properties, AmqpUri, BrokerUris, Channel, ChannelHooks, Connection, Delivery,
    DeliveryHook, PublishTemplate, QueueOptions,
};
use crate::payload;
use crate::scenario::{Amqp10Address, Protocol};
use crate::stats::new_histogram;
use anyhow::{anyhow, Context, Result};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use warren_codec::BasicProperties;

/// Phases are spread over this many slots per period (1 ms at 10 msg/s).
const SLOTS_PER_PERIOD: usize = 100;
/// Groups attached at once: enough to hide round trips, few enough not to flood the
/// broker's accept queue.
const ATTACH_IN_FLIGHT: usize = 32;

/// What a worker is asked to do; crosses the pipe to a worker process as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub uri: String,
    /// Makes queue names unique to one step of one run.
    pub run_tag: String,
    /// The groups (receiver indexes) this worker owns.
    pub groups: Vec<u32>,
    /// Senders in the whole step (phases are spread over all of them) and per group.
    pub total_senders: u32,
    pub senders_per_receiver: u32,
    pub period_ms: u64,
    pub body_bytes: usize,
    pub prefetch: u16,
    pub attach_timeout_ms: u64,
    pub protocol: Protocol,
    /// How AMQP 1.0 links address the queues (resolved: never `Auto`).
    pub amqp10_address: Amqp10Address,
}

impl Plan {
    /// The senders of group `g`: global indexes `g*K .. min((g+1)*K, total)`.
    pub fn senders_of(&self, group: u32) -> std::ops::Range<u32> {
        let k = self.senders_per_receiver;
        (group * k).min(self.total_senders)..((group + 1) * k).min(self.total_senders)
    }
}

pub fn queue_name(run_tag: &str, group: u32) -> String {
    format!("many-pairs-{run_tag}-{group}")
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Attached {
    /// Groups whose receiver and every sender attached.
    pub groups: Vec<u32>,
    pub receivers: u64,
    pub senders: u64,
    /// Why attaching stopped early (descriptor limit, refused or timed-out connections).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sent {
    pub published: u64,
    pub confirmed: u64,
    pub nacked: u64,
    /// Published but neither confirmed nor nacked when the confirm wait ended.
    pub unconfirmed: u64,
    pub publish_errors: u64,
    pub late: u64,
    pub skipped: u64,
    /// The most messages any one sender published.
    pub max_per_sender: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Closed {
    pub received: u64,
    /// The flight-time histogram as (µs, count) pairs.
    pub latency_us: Vec<(u64, u64)>,
}

struct Receiver {
    channel: Channel,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
}

impl DeliveryHook for Receiver {
    fn on_delivery(&self, delivery: Delivery) {
        if let Some(stamp) = payload::parse(&delivery.body) {
            self.latency
                .lock()
                .saturating_record(payload::flight_us(stamp.sent_ns, delivery.received_ns).max(1));
        }
        self.counters.received.fetch_add(1, Ordering::AcqRel);
        self.channel.ack(delivery.delivery_tag, false);
    }
}

struct ConfirmCounter(Arc<Counters>);

impl ChannelHooks for ConfirmCounter {
    fn on_confirm(&self, _seq: u64, ack: bool, _sent_ns: u64, _received_ns: u64) {
        let counter = if ack {
            &self.0.confirmed
        } else {
            &self.0.nacked
        };
        counter.fetch_add(1, Ordering::AcqRel);
    }
}

/// A client of either protocol; the rest of the worker does not tell them apart.
enum Client {
    Amqp091(Connection),
    Amqp10(amqp10::Client),
}

impl Client {
    async fn close(self) {
        match self {
            Client::Amqp091(c) => c.close().await,
            Client::Amqp10(c) => c.close().await,
        }
    }
}

/// Where a sender publishes: a confirm-mode channel, or an AMQP 1.0 sender link.
enum Publisher {
    Amqp091 {
        channel: Channel,
        template: PublishTemplate,
    },
    Amqp10(amqp10::Publisher),
}

struct Sender {
    publisher: Publisher,
    id: u32,
    seq: u64,
}

/// A group's clients, once all of them are up.
struct Group {
    id: u32,
    connections: Vec<Client>,
    senders: Vec<Sender>,
}

pub struct Worker {
    plan: Plan,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
    connections: Vec<Client>,
    senders: Vec<Sender>,
}

impl Worker {
    /// Attaches every group of the plan, up to the first that fails (the rest are not tried:
    /// a failure is almost always a descriptor or connection limit, which later groups would
    /// hit too). The step runs with the groups that attached.
    pub async fn attach(plan: Plan) -> (Worker, Attached) {
        let uris = match BrokerUris::parse(&plan.uri) {
            Ok(u) => u,
            Err(e) => {
                let worker = Worker::empty(plan);
                let attached = Attached {
                    error: Some(e),
                    ..Default::default()
                };
                return (worker, attached);
            }
        };
        let mut worker = Worker::empty(plan);
        let plan = Arc::new(worker.plan.clone());
        let failed = Arc::new(AtomicBool::new(false));
        let mut error = None;
        let mut pending = worker.plan.groups.clone().into_iter();
        let mut tasks = tokio::task::JoinSet::new();
        let mut attached = vec![];
        loop {
            while tasks.len() < ATTACH_IN_FLIGHT && !failed.load(Ordering::Acquire) {
                let Some(g) = pending.next() else { break };
                let (uris, plan, counters, latency) = (
                    uris.clone(),
                    plan.clone(),
                    worker.counters.clone(),
                    worker.latency.clone(),
                );
                tasks.spawn(async move { attach_group(&uris, &plan, g, counters, latency).await });
            }
            let Some(done) = tasks.join_next().await else {
                break;
            };
            match done {
                Ok(Ok(group)) => attached.push(group),
                Ok(Err(e)) => {
                    failed.store(true, Ordering::Release);
                    error.get_or_insert_with(|| format!("{e:#}"));
                }
                Err(e) => {
                    failed.store(true, Ordering::Release);
                    error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        attached.sort_by_key(|g| g.id);
        let mut report = Attached {
            error,
            ..Default::default()
        };
        for g in attached {
            report.groups.push(g.id);
            report.receivers += 1;
            report.senders += g.senders.len() as u64;
            worker.connections.extend(g.connections);
            worker.senders.extend(g.senders);
        }
        (worker, report)
    }

    fn empty(plan: Plan) -> Worker {
        Worker {
            plan,
            counters: Arc::default(),
            latency: Arc::new(Mutex::new(new_histogram())),
            connections: vec![],
            senders: vec![],
        }
    }

    /// Sends on the shared schedule from `start_ns` (ns since the epoch, the same instant in
    /// every worker) for `duration`, then waits up to `confirm_wait` for the last confirms.
    pub async fn send(
        &mut self,
        start_ns: u64,
        duration: Duration,
        confirm_wait: Duration,
    ) -> Sent {
        let now_ns = payload::now_ns();
        let start = Instant::now() + Duration::from_nanos(start_ns.saturating_sub(now_ns));
        let end = start + duration;
        let total = u64::from(self.plan.total_senders.max(1));
        let period = Duration::from_millis(self.plan.period_ms.max(1));
        let mut wheel = Wheel::new(SLOTS_PER_PERIOD, period, start);
        for s in self.senders.drain(..) {
            let slot = u64::from(s.id) * wheel.slots() as u64 / total;
            wheel.insert(slot as usize, s);
        }
        let props = encode_properties(&BasicProperties::default());
        let mut body = payload::new_body(self.plan.body_bytes);
        let mut published = 0u64;
        let mut publish_errors = 0u64;
        let counters = self.counters.clone();
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let next = wheel.run_due(now, |s| {
                let sent_ns = payload::now_ns();
                payload::stamp(&mut body, sent_ns, s.id, s.seq);
                let result = match &s.publisher {
                    Publisher::Amqp091 { channel, template } => channel
                        .publish(template, &props, &body, sent_ns)
                        .map(|_| ())
                        .map_err(|_| ()),
                    Publisher::Amqp10(p) => p.publish(&body).map_err(|_| ()),
                };
                match result {
                    Ok(()) => {
                        s.seq += 1;
                        published += 1;
                        counters.published.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => publish_errors += 1,
                }
            });
            tokio::time::sleep_until(next.min(end)).await;
        }
        let deadline = Instant::now() + confirm_wait;
        while self.settled() < published && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let confirmed = self.counters.confirmed.load(Ordering::Acquire);
        let nacked = self.counters.nacked.load(Ordering::Acquire);
        let (late, skipped) = (wheel.late, wheel.skipped);
        let mut max_per_sender = 0;
        for slot in 0..wheel.slots() {
            for s in wheel.take_slot(slot) {
                max_per_sender = max_per_sender.max(s.seq);
                self.senders.push(s);
            }
        }
        Sent {
            published,
            confirmed,
            nacked,
            unconfirmed: published.saturating_sub(confirmed + nacked),
            publish_errors,
            late,
            skipped,
            max_per_sender,
        }
    }

    /// What this worker's clients have counted so far (read while they send).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    fn settled(&self) -> u64 {
        self.counters.confirmed.load(Ordering::Acquire)
            + self.counters.nacked.load(Ordering::Acquire)
    }

    pub fn received(&self) -> u64 {
        self.counters.received.load(Ordering::Acquire)
    }

    /// Closes every connection (a receiver's unacked messages go back to its queue) and
    /// returns what the receivers got.
    pub async fn close(self) -> Closed {
        let mut tasks = tokio::task::JoinSet::new();
        for c in self.connections {
            tasks.spawn(async move { c.close().await });
            // Bounded: tens of thousands of close handshakes at once would only queue up.
            while tasks.len() >= 256 {
                let _ = tasks.join_next().await;
            }
        }
        while tasks.join_next().await.is_some() {}
        let latency = self.latency.lock();
        Closed {
            received: self.counters.received.load(Ordering::Acquire),
            latency_us: latency
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }
}

async fn attach_group(
    uris: &BrokerUris,
    plan: &Plan,
    group: u32,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
) -> Result<Group> {
    let timeout = Duration::from_millis(plan.attach_timeout_ms);
    let mut g = Group {
        id: group,
        connections: vec![],
        senders: vec![],
    };
    let attaching = async {
        match plan.protocol {
            Protocol::Amqp091 => attach_amqp091(uris, plan, &mut g, counters, latency).await,
            Protocol::Amqp10 => attach_amqp10(uris, plan, &mut g, counters, latency).await,
        }
    };
    let err = match tokio::time::timeout(timeout, attaching).await {
        Ok(Ok(())) => return Ok(g),
        Ok(Err(e)) => e,
        Err(_) => anyhow!("no answer within {} ms", plan.attach_timeout_ms),
    };
    let clients = g.connections.len();
    for c in g.connections {
        c.close().await;
    }
    Err(err).with_context(|| format!("attaching group {group} (client {} of it)", clients.max(1)))
}

/// The node a group's receiver connects to; with several nodes its senders connect to the
/// next ones (`sender_node`), so messages cross nodes as in the report's cluster runs.
fn receiver_node(uris: &BrokerUris, group: u32) -> &AmqpUri {
    uris.for_client(group as usize)
}

fn sender_node(uris: &BrokerUris, sender: u32) -> &AmqpUri {
    uris.for_client(sender as usize + 1)
}

/// The receiver declares its queue, then consumes with `prefetch`; senders publish in
/// confirm mode to the default exchange.
async fn attach_amqp091(
    uris: &BrokerUris,
    plan: &Plan,
    g: &mut Group,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
) -> Result<()> {
    let queue = queue_name(&plan.run_tag, g.id);
    let conn = Connection::open_named(receiver_node(uris, g.id), "many-pairs receiver").await?;
    g.connections.push(Client::Amqp091(conn.clone()));
    let ch = conn.channel().await?;
    ch.queue_declare(&queue, &QueueOptions::default()).await?;
    ch.basic_qos(plan.prefetch, false).await?;
    let hook = Arc::new(Receiver {
        channel: ch.clone(),
        counters: counters.clone(),
        latency,
    });
    ch.basic_consume_hook(&queue, "receiver", false, hook)
        .await?;
    for id in plan.senders_of(g.id) {
        let conn = Connection::open_named(sender_node(uris, id), "many-pairs sender").await?;
        g.connections.push(Client::Amqp091(conn.clone()));
        let ch = conn.channel().await?;
        ch.set_hooks(Arc::new(ConfirmCounter(counters.clone())));
        ch.confirm_select().await?;
        let template = ch.publish_template("", &queue, false);
        g.senders.push(Sender {
            publisher: Publisher::Amqp091 {
                channel: ch,
                template,
            },
            id,
            seq: 0,
        });
    }
    Ok(())
}

/// The queue is already declared (by the step, over 0-9-1: AMQP 1.0 has no declare); the
/// receiver and the senders attach links to its address (`/queues/<q>`, or RabbitMQ 3.x's
/// `/amq/queue/<q>`).
async fn attach_amqp10(
    uris: &BrokerUris,
    plan: &Plan,
    g: &mut Group,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
) -> Result<()> {
    let address = plan
        .amqp10_address
        .of_queue(&queue_name(&plan.run_tag, g.id));
    let receiver = amqp10::attach_receiver(
        receiver_node(uris, g.id),
        &address,
        plan.prefetch,
        counters.clone(),
        latency,
    )
    .await?;
    g.connections.push(Client::Amqp10(receiver));
    for id in plan.senders_of(g.id) {
        let (client, publisher) =
            amqp10::attach_sender(sender_node(uris, id), &address, counters.clone()).await?;
        g.connections.push(Client::Amqp10(client));
        g.senders.push(Sender {
            publisher: Publisher::Amqp10(publisher),
            id,
            seq: 0,
        });
    }
    Ok(())
}
