//! Queue families: depth, bytes, persistent messages, consumers, paging and the head's
//! timestamp per queue (`/metrics/per-object`, labels
//! `vhost` and `queue`) or summed over all queues (`/metrics`), plus the totals RabbitMQ
//! always reports (`rabbitmq_queues`, `rabbitmq_consumers`, …). Read from
//! `Queue::depth`, one lock per queue per scrape; nothing on the message path. `/metrics`
//! adds each reading into the sums as it is taken and keeps none: with 100,000 queues a
//! scrape walks them once and holds no per-queue data.

use crate::exposition::{Exposition, Kind};
use std::sync::Arc;
use warren_broker::queue::QueueDepth;
use warren_broker::{Broker, MessageCounts, Queue, VHost};

struct QueueReading {
    vhost: Arc<VHost>,
    queue: Arc<Queue>,
    depth: QueueDepth,
    counts: MessageCounts,
}

/// Every queue of every vhost, read once for the whole scrape.
pub struct QueueReadings {
    /// Whether the samples are per queue (`/metrics/per-object`, detailed) or sums.
    per_object: bool,
    /// Per object, every queue's reading; empty for `/metrics`.
    queues: Vec<QueueReading>,
    pub(crate) sums: Sums,
}

/// Each per-queue family's sum over the queues (what `/metrics` serves), by the same
/// reading functions as the per-queue samples.
#[derive(Default)]
pub(crate) struct Sums {
    pub queues: u64,
    pub part: Part,
    /// Consumer capacity over the queues that measure it.
    pub capacity: f64,
}

/// What one queue adds to the whole-number sums, or (added up) what many do: kept per queue
/// by `queue_totals.rs` to take a queue's old part away when it changes.
#[derive(Default, Clone, PartialEq, Eq, Debug)]
pub(crate) struct Part {
    consumers: u64,
    families: [u64; QUEUE_FAMILIES.len()],
    counters: [u64; QUEUE_COUNTERS.len()],
    published: u64,
}

impl Part {
    /// One queue's part.
    pub fn of(depth: &QueueDepth, counts: &MessageCounts) -> Part {
        Part {
            consumers: depth.consumers,
            families: std::array::from_fn(|i| (QUEUE_FAMILIES[i].4)(depth)),
            counters: std::array::from_fn(|i| (QUEUE_COUNTERS[i].2)(counts)),
            published: counts.publish,
        }
    }

    /// Adds `other` to this sum, or takes it away (`add` false; never below 0).
    pub fn add(&mut self, other: &Part, add: bool) {
        let apply = |sum: &mut u64, n: u64| {
            *sum = match add {
                true => sum.saturating_add(n),
                false => sum.saturating_sub(n),
            }
        };
        apply(&mut self.consumers, other.consumers);
        for (sum, n) in self.families.iter_mut().zip(other.families) {
            apply(sum, n);
        }
        for (sum, n) in self.counters.iter_mut().zip(other.counters) {
            apply(sum, n);
        }
        apply(&mut self.published, other.published);
    }

    pub fn is_zero(&self) -> bool {
        *self == Part::default()
    }

    pub fn consumers(&self) -> u64 {
        self.consumers
    }
}

impl Sums {
    fn add(&mut self, depth: &QueueDepth, counts: &MessageCounts) {
        self.queues += 1;
        self.part.add(&Part::of(depth, counts), true);
        self.capacity += depth.consumer_capacity.unwrap_or(0.0);
    }
}

impl QueueReadings {
    /// The queues this node serves (`Queue::served_here`): in a cluster every queue is
    /// reported by one node, its home or its group's leader, so sums over the nodes count it
    /// once (RabbitMQ's nodes report the queues whose process they run).
    ///
    /// `per_object`: the readings are sorted by vhost and name, the order the samples are
    /// written in (a stable order keeps consecutive scrapes comparable by eye); sums need
    /// no order.
    pub fn take(broker: &Broker, per_object: bool) -> QueueReadings {
        let mut queues = Vec::new();
        let mut sums = Sums::default();
        for vhost in broker.vhosts() {
            for queue in vhost.queues().into_iter().filter(|q| q.served_here()) {
                let (depth, counts) = (queue.depth(), queue.stats.snapshot());
                sums.add(&depth, &counts);
                if per_object {
                    queues.push(QueueReading {
                        vhost: vhost.clone(),
                        depth,
                        counts,
                        queue,
                    });
                }
            }
        }
        if per_object {
            queues.sort_by(|a, b| {
                (a.vhost.name.as_str(), a.queue.name.as_str()).cmp(&(&b.vhost.name, &b.queue.name))
            });
        }
        QueueReadings {
            per_object,
            queues,
            sums,
        }
    }

    /// `/metrics`' readings from sums kept elsewhere (`queue_totals.rs`).
    pub(crate) fn aggregated(sums: Sums) -> QueueReadings {
        QueueReadings {
            per_object: false,
            queues: Vec::new(),
            sums,
        }
    }

    pub fn count(&self) -> u64 {
        self.sums.queues
    }

    pub fn consumers(&self) -> u64 {
        self.sums.part.consumers
    }
}

type Read = fn(&QueueDepth) -> u64;

const COARSE: &[&str] = &["queue_coarse_metrics"];
/// RabbitMQ serves `rabbitmq_queue_consumers` for either group.
const CONSUMERS: &[&str] = &["queue_consumer_count", "queue_metrics"];
const METRICS: &[&str] = &["queue_metrics"];

/// (group, name, type, HELP, reading): RabbitMQ's `queue_coarse_metrics` and the part of
/// its `queue_metrics` Warren can tell truthfully.
const QUEUE_FAMILIES: &[(&[&str], &str, Kind, &str, Read)] = &[
    (
        COARSE,
        "rabbitmq_queue_messages_ready",
        Kind::Gauge,
        "Messages ready to be delivered to consumers",
        |d| d.ready,
    ),
    (
        COARSE,
        "rabbitmq_queue_messages_unacked",
        Kind::Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        |d| d.unacked,
    ),
    (
        COARSE,
        "rabbitmq_queue_messages",
        Kind::Gauge,
        "Sum of ready and unacknowledged messages - total queue depth",
        |d| d.ready + d.unacked,
    ),
    (
        CONSUMERS,
        "rabbitmq_queue_consumers",
        Kind::Gauge,
        "Consumers on a queue",
        |d| d.consumers,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_ready_ram",
        Kind::Gauge,
        "Ready messages stored in memory",
        |d| d.ready_in_memory,
    ),
    (
        // Unacknowledged messages stay in memory until settled.
        METRICS,
        "rabbitmq_queue_messages_unacked_ram",
        Kind::Gauge,
        "Unacknowledged messages stored in memory",
        |d| d.unacked,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_ram",
        Kind::Gauge,
        "Ready and unacknowledged messages stored in memory",
        |d| d.ready_in_memory + d.unacked,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_ready_bytes",
        Kind::Gauge,
        "Size in bytes of ready messages",
        |d| d.ready_bytes,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_ram_bytes",
        Kind::Gauge,
        "Size of ready and unacknowledged messages stored in memory",
        |d| d.ready_in_memory_bytes + d.unacked_bytes,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_persistent",
        Kind::Gauge,
        "Persistent messages",
        |d| d.persistent,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_persistent_bytes",
        Kind::Gauge,
        "Size in bytes of persistent messages",
        |d| d.persistent_bytes,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_bytes",
        Kind::Gauge,
        "Size in bytes of ready and unacknowledged messages",
        |d| d.ready_bytes + d.unacked_bytes,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_unacked_bytes",
        Kind::Gauge,
        "Size in bytes of all unacknowledged messages",
        |d| d.unacked_bytes,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_paged_out",
        Kind::Gauge,
        "Messages paged out to disk",
        |d| d.paged_out,
    ),
    (
        METRICS,
        "rabbitmq_queue_messages_paged_out_bytes",
        Kind::Gauge,
        "Size in bytes of messages paged out to disk",
        |d| d.paged_out_bytes,
    ),
];

/// The per-queue families: one sample per queue, or (aggregated) one sum, present even
/// with no queues so that dashboards show 0 rather than "no data".
pub fn families(out: &mut Exposition, readings: &QueueReadings) {
    let per_object = readings.per_object;
    for (&(group, name, kind, help, read), sum) in
        QUEUE_FAMILIES.iter().zip(readings.sums.part.families)
    {
        out.group(Some(group));
        out.family(name, kind, help);
        per_queue(out, name, readings, "vhost", |q| read(&q.depth), sum);
    }
    // A sample for each queue whose head has a timestamp; a sum of timestamps means
    // nothing, so the aggregated endpoint has the family without samples.
    let name = "rabbitmq_queue_head_message_timestamp";
    out.group(Some(METRICS));
    out.family(
        name,
        Kind::Gauge,
        "Timestamp of the first message in the queue, if any",
    );
    if per_object {
        for q in &readings.queues {
            if let Some(seconds) = q.depth.head_timestamp_s {
                out.sample(
                    name,
                    &[("vhost", &q.vhost.name), ("queue", q.queue.name.as_str())],
                    seconds,
                );
            }
        }
    }
    // Consumer capacity where the queue measures it (RabbitMQ's two names for one value;
    // aggregated, RabbitMQ sums it over the queues).
    for (name, help) in [
        ("rabbitmq_queue_consumer_capacity", "Consumer capacity"),
        (
            "rabbitmq_queue_consumer_utilisation",
            "Same as consumer capacity",
        ),
    ] {
        out.family(name, Kind::Gauge, help);
        if per_object {
            let capacities = readings
                .queues
                .iter()
                .filter_map(|q| q.depth.consumer_capacity.map(|c| (q, c)));
            for (q, capacity) in capacities {
                let labels = [
                    ("vhost", q.vhost.name.as_str()),
                    ("queue", q.queue.name.as_str()),
                ];
                out.sample(name, &labels, capacity);
            }
        } else {
            out.sample(name, &[], readings.sums.capacity);
        }
    }
    out.group(Some(&["queue_delivery_metrics"]));
    for (&(name, help, read), sum) in QUEUE_COUNTERS.iter().zip(readings.sums.part.counters) {
        out.family(name, Kind::Counter, help);
        per_queue(out, name, readings, "vhost", |q| read(&q.counts), sum);
    }
    // RabbitMQ counts this per channel, queue and exchange and names the vhosts
    // `queue_vhost` and `exchange_vhost`; Warren counts per queue.
    let name = "rabbitmq_queue_messages_published_total";
    out.group(Some(&["channel_queue_exchange_metrics"]));
    out.family(
        name,
        Kind::Counter,
        "Total number of messages published into a queue through an exchange on a channel",
    );
    let published = readings.sums.part.published;
    per_queue(
        out,
        name,
        readings,
        "queue_vhost",
        |q| q.counts.publish,
        published,
    );
}

/// One sample per queue labelled `<vhost_label>` and `queue`, or their `sum`.
fn per_queue(
    out: &mut Exposition,
    name: &str,
    readings: &QueueReadings,
    vhost_label: &str,
    read: impl Fn(&QueueReading) -> u64,
    sum: u64,
) {
    if readings.per_object {
        for q in &readings.queues {
            out.sample(
                name,
                &[
                    (vhost_label, &q.vhost.name),
                    ("queue", q.queue.name.as_str()),
                ],
                read(q),
            );
        }
    } else {
        out.sample(name, &[], sum);
    }
}

type CountsRead = fn(&MessageCounts) -> u64;

/// RabbitMQ 4.x's `queue_delivery_metrics`: what consumers took from each queue.
const QUEUE_COUNTERS: &[(&str, &str, CountsRead)] = &[
    (
        "rabbitmq_queue_get_ack_total",
        "Total number of messages fetched from a queue with basic.get in manual acknowledgement mode",
        |c| c.get,
    ),
    (
        "rabbitmq_queue_get_total",
        "Total number of messages fetched from a queue with basic.get in automatic acknowledgement mode",
        |c| c.get_no_ack,
    ),
    (
        "rabbitmq_queue_messages_delivered_ack_total",
        "Total number of messages delivered from a queue to consumers in manual acknowledgement mode",
        |c| c.deliver,
    ),
    (
        "rabbitmq_queue_messages_delivered_total",
        "Total number of messages delivered from a queue to consumers in automatic acknowledgement mode",
        |c| c.deliver_no_ack,
    ),
    (
        "rabbitmq_queue_messages_redelivered_total",
        "Total number of messages redelivered from a queue to consumers",
        |c| c.redeliver,
    ),
    (
        "rabbitmq_queue_messages_acked_total",
        "Total number of messages acknowledged by consumers on a queue",
        |c| c.ack,
    ),
];

/// RabbitMQ's module name for a queue's type, as its `queue_type` label spells it.
fn rabbit_queue_type(queue: &Queue) -> &'static str {
    match queue.type_name() {
        "quorum" => "rabbit_quorum_queue",
        "stream" => "rabbit_stream_queue",
        _ => "rabbit_classic_queue",
    }
}

/// `rabbitmq_queue_info` (3.13+; per-object, and detailed with a queue group): a constant
/// 1 carrying the queue's type; every queue here is served here, so its membership is
/// `leader`.
pub fn info(out: &mut Exposition, readings: &QueueReadings) {
    out.group(Some(&[
        "queue_coarse_metrics",
        "queue_consumer_count",
        "queue_metrics",
    ]));
    out.family(
        "rabbitmq_queue_info",
        Kind::Gauge,
        "A metric with a constant '1' value and labels that provide some queue details",
    );
    for q in &readings.queues {
        out.sample(
            "rabbitmq_queue_info",
            &[
                ("vhost", &q.vhost.name),
                ("queue", q.queue.name.as_str()),
                ("queue_type", rabbit_queue_type(&q.queue)),
                ("membership", "leader"),
            ],
            1u64,
        );
    }
}
