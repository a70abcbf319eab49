//! Channel and connection families, read from the broker's registry: per channel (label
//! `channel`, the channel's name as the HTTP API shows it, "peer -> local (n)") or summed
//! over the open channels (`/metrics`), as RabbitMQ's `channel_metrics`,
//! `channel_exchange_metrics`, `channel_queue_metrics` and `connection_*metrics`.
//!
//! Warren counts per channel, not per channel and exchange or channel and queue, so the
//! per-object samples carry `channel` and `vhost` where RabbitMQ adds `exchange` or
//! `queue`. Connection samples are labelled `channel` with the connection's name, as
//! RabbitMQ labels them (with the connection process).

use crate::exposition::{Exposition, Kind};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use warren_broker::{Broker, ChannelInfo, ConnectionInfo, MessageCounts};

/// One open channel, read once for the scrape.
struct ChannelReading {
    name: String,
    vhost: String,
    counts: MessageCounts,
    consumers: u64,
    unacked: u64,
    unconfirmed: u64,
    prefetch: u64,
    global_prefetch: u64,
}

pub struct ChannelReadings {
    connections: Vec<Arc<ConnectionInfo>>,
    channels: Vec<ChannelReading>,
}

impl ChannelReadings {
    pub fn take(broker: &Broker) -> ChannelReadings {
        let connections = broker.registry.connections();
        let mut channels = Vec::new();
        for connection in &connections {
            for channel in connection.channels() {
                channels.push(read_channel(connection, &channel));
            }
        }
        ChannelReadings {
            connections,
            channels,
        }
    }

    pub fn connection_count(&self) -> u64 {
        self.connections.len() as u64
    }

    pub fn channel_count(&self) -> u64 {
        self.channels.len() as u64
    }

    /// Channels that have published at least once (RabbitMQ's publishers).
    pub fn publishers(&self) -> u64 {
        self.channels
            .iter()
            .filter(|c| c.counts.publish > 0)
            .count() as u64
    }

    pub fn consumers(&self) -> u64 {
        self.channels.iter().map(|c| c.consumers).sum()
    }
}

fn read_channel(connection: &ConnectionInfo, channel: &ChannelInfo) -> ChannelReading {
    ChannelReading {
        name: format!("{} ({})", connection.name, channel.number),
        vhost: connection.vhost.clone(),
        counts: channel.stats.snapshot(),
        consumers: channel.consumer_count() as u64,
        unacked: u64::from(channel.messages_unacknowledged.load(Relaxed)),
        unconfirmed: u64::from(channel.messages_unconfirmed.load(Relaxed)),
        prefetch: u64::from(channel.prefetch_count.load(Relaxed)),
        global_prefetch: u64::from(channel.global_prefetch_count()),
    }
}

type ChannelRead = fn(&ChannelReading) -> u64;

/// Gauges per channel (RabbitMQ's `channel_metrics`), labelled `channel` only.
const CHANNEL_GAUGES: &[(&str, &str, ChannelRead)] = &[
    (
        "rabbitmq_channel_consumers",
        "Consumers on a channel",
        |c| c.consumers,
    ),
    (
        "rabbitmq_channel_messages_unacked",
        "Delivered but not yet acknowledged messages",
        |c| c.unacked,
    ),
    (
        "rabbitmq_channel_messages_unconfirmed",
        "Published but not yet confirmed messages",
        |c| c.unconfirmed,
    ),
    (
        "rabbitmq_consumer_prefetch",
        "Limit of unacknowledged messages for each consumer",
        |c| c.prefetch,
    ),
    (
        "rabbitmq_channel_prefetch",
        "Deprecated and will be removed in a future version",
        |c| c.global_prefetch,
    ),
];

const PUBLISHING: &[&str] = &["channel_exchange_metrics"];
const CONSUMING: &[&str] = &["channel_queue_metrics"];

/// Counters per channel (RabbitMQ's `channel_exchange_metrics` and
/// `channel_queue_metrics`), labelled `channel` and `vhost`.
const CHANNEL_COUNTERS: &[(&[&str], &str, &str, ChannelRead)] = &[
    (
        PUBLISHING,
        "rabbitmq_channel_messages_published_total",
        "Total number of messages published into an exchange on a channel",
        |c| c.counts.publish,
    ),
    (
        PUBLISHING,
        "rabbitmq_channel_messages_confirmed_total",
        "Total number of messages published into an exchange and confirmed on the channel",
        |c| c.counts.confirm,
    ),
    (
        PUBLISHING,
        "rabbitmq_channel_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        |c| c.counts.return_unroutable,
    ),
    (
        PUBLISHING,
        "rabbitmq_channel_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        |c| c.counts.drop_unroutable,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_get_ack_total",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        |c| c.counts.get,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_get_total",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        |c| c.counts.get_no_ack,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_messages_delivered_ack_total",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        |c| c.counts.deliver,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_messages_delivered_total",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        |c| c.counts.deliver_no_ack,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
        |c| c.counts.redeliver,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_messages_acked_total",
        "Total number of messages acknowledged by consumers",
        |c| c.counts.ack,
    ),
    (
        CONSUMING,
        "rabbitmq_channel_get_empty_total",
        "Total number of times basic.get operations fetched no message",
        |c| c.counts.get_empty,
    ),
];

type ConnectionRead = fn(&ConnectionInfo) -> u64;

const CONNECTION_COARSE: &[&str] = &["connection_coarse_metrics"];
const CONNECTION: &[&str] = &["connection_metrics"];

/// Per connection (RabbitMQ's `connection_coarse_metrics` and `connection_metrics`).
const CONNECTION_FAMILIES: &[(&[&str], &str, Kind, &str, ConnectionRead)] = &[
    (
        CONNECTION_COARSE,
        "rabbitmq_connection_incoming_bytes_total",
        Kind::Counter,
        "Total number of bytes received on a connection",
        |c| c.recv_oct.load(Relaxed),
    ),
    (
        CONNECTION_COARSE,
        "rabbitmq_connection_outgoing_bytes_total",
        Kind::Counter,
        "Total number of bytes sent on a connection",
        |c| c.send_oct.load(Relaxed),
    ),
    (
        CONNECTION,
        "rabbitmq_connection_incoming_packets_total",
        Kind::Counter,
        "Total number of packets received on a connection",
        |c| c.recv_cnt.load(Relaxed),
    ),
    (
        CONNECTION,
        "rabbitmq_connection_outgoing_packets_total",
        Kind::Counter,
        "Total number of packets sent on a connection",
        |c| c.send_cnt.load(Relaxed),
    ),
    (
        CONNECTION,
        "rabbitmq_connection_channels",
        Kind::Gauge,
        "Channels on a connection",
        |c| c.channels().len() as u64,
    ),
];

pub fn families(out: &mut Exposition, readings: &ChannelReadings, per_object: bool) {
    out.group(Some(&["channel_metrics"]));
    for &(name, help, read) in CHANNEL_GAUGES {
        out.family(name, Kind::Gauge, help);
        if per_object {
            for c in &readings.channels {
                out.sample(name, &[("channel", &c.name)], read(c));
            }
        } else {
            out.sample(name, &[], readings.channels.iter().map(read).sum::<u64>());
        }
    }
    for &(group, name, help, read) in CHANNEL_COUNTERS {
        out.group(Some(group));
        out.family(name, Kind::Counter, help);
        if per_object {
            for c in &readings.channels {
                out.sample(name, &[("channel", &c.name), ("vhost", &c.vhost)], read(c));
            }
        } else {
            out.sample(name, &[], readings.channels.iter().map(read).sum::<u64>());
        }
    }
    for &(group, name, kind, help, read) in CONNECTION_FAMILIES {
        out.group(Some(group));
        out.family(name, kind, help);
        if per_object {
            for c in &readings.connections {
                out.sample(name, &[("channel", &c.name)], read(c));
            }
        } else {
            let sum: u64 = readings.connections.iter().map(|c| read(c)).sum();
            out.sample(name, &[], sum);
        }
    }
}
