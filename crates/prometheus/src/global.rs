//! RabbitMQ's global counters (3.9+, `rabbitmq_global_*`): node-wide totals since start,
//! by protocol and queue type, that never go backwards when a channel closes. The
//! registry keeps the counts of closed channels; the publish-side extras (size histogram,
//! messages expecting confirms) come from each vhost's `PublishCounters`.

use crate::exposition::{Exposition, Kind};
use warren_broker::churn::{DeadLetterSource, DeadLetterStrategy, DeadLettered};
use warren_broker::dead_letter::DeathReason;
use warren_broker::publish_counters::{PublishCounts, SIZE_BUCKET_BOUNDS_BYTES};
use warren_broker::MessageCounts;

const AMQP: (&str, &str) = ("protocol", "amqp091");
/// Warren's queues are classic queues: the only queue type its samples name.
const CLASSIC: (&str, &str) = ("queue_type", "rabbit_classic_queue");
const QUORUM: (&str, &str) = ("queue_type", "rabbit_quorum_queue");

/// What the global families are computed from.
pub struct GlobalReadings {
    /// Every channel's counts since start, closed channels included.
    pub messages: MessageCounts,
    pub published: PublishCounts,
    /// Channels open now that have published, and consumers open now.
    pub publishers: u64,
    pub consumers: u64,
}

pub fn families(out: &mut Exposition, g: &GlobalReadings) {
    let m = &g.messages;
    out.family(
        "rabbitmq_global_consumers",
        Kind::Gauge,
        "Current number of consumers",
    );
    out.sample("rabbitmq_global_consumers", &[AMQP], g.consumers);
    let per_queue_type: [(&str, &str, u64); 8] = [
        (
            "rabbitmq_global_messages_acknowledged_total",
            "Total number of messages acknowledged by consumers",
            m.ack,
        ),
        (
            "rabbitmq_global_messages_delivered_consume_auto_ack_total",
            "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
            m.deliver_no_ack,
        ),
        (
            "rabbitmq_global_messages_delivered_consume_manual_ack_total",
            "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
            m.deliver,
        ),
        (
            "rabbitmq_global_messages_delivered_get_auto_ack_total",
            "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
            m.get_no_ack,
        ),
        (
            "rabbitmq_global_messages_delivered_get_manual_ack_total",
            "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
            m.get,
        ),
        (
            "rabbitmq_global_messages_delivered_total",
            "Total number of messages delivered to consumers",
            m.deliver_get(),
        ),
        (
            "rabbitmq_global_messages_get_empty_total",
            "Total number of times basic.get operations fetched no message",
            m.get_empty,
        ),
        (
            "rabbitmq_global_messages_redelivered_total",
            "Total number of messages redelivered to consumers",
            m.redeliver,
        ),
    ];
    let unroutable = m.drop_unroutable + m.return_unroutable;
    let per_protocol: [(&str, &str, u64); 6] = [
        (
            "rabbitmq_global_messages_confirmed_total",
            "Total number of messages confirmed to publishers",
            m.confirm,
        ),
        (
            "rabbitmq_global_messages_received_confirm_total",
            "Total number of messages received from publishers expecting confirmations",
            g.published.expecting_confirm,
        ),
        (
            "rabbitmq_global_messages_received_total",
            "Total number of messages received from publishers",
            m.publish,
        ),
        (
            "rabbitmq_global_messages_routed_total",
            "Total number of messages routed to queues or streams",
            m.publish.saturating_sub(unroutable),
        ),
        (
            "rabbitmq_global_messages_unroutable_dropped_total",
            "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
            m.drop_unroutable,
        ),
        (
            "rabbitmq_global_messages_unroutable_returned_total",
            "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
            m.return_unroutable,
        ),
    ];
    for (name, help, value) in per_queue_type {
        out.family(name, Kind::Counter, help);
        out.sample(name, &[AMQP, CLASSIC], value);
    }
    for (name, help, value) in per_protocol {
        out.family(name, Kind::Counter, help);
        out.sample(name, &[AMQP], value);
    }
    out.family(
        "rabbitmq_global_publishers",
        Kind::Gauge,
        "Current number of publishers",
    );
    out.sample("rabbitmq_global_publishers", &[AMQP], g.publishers);
    message_sizes(out, &g.published);
}

/// `rabbitmq_global_messages_dead_lettered_*_total`, as RabbitMQ labels them: classic queues
/// with the `at_most_once` strategy (a dead-letter exchange) or `disabled` (none: dropped);
/// quorum queues with those two and `at_least_once`, plus `delivery_limit` and the confirmed
/// at-least-once copies (`..._confirmed_total`).
pub fn dead_lettered(out: &mut Exposition, counts: &DeadLettered) {
    use DeadLetterStrategy::{AtLeastOnce, AtMostOnce, Disabled};
    let families = [
        (
            "rabbitmq_global_messages_dead_lettered_expired_total",
            "Total number of messages dead-lettered due to message TTL exceeded",
            DeathReason::Expired,
        ),
        (
            "rabbitmq_global_messages_dead_lettered_maxlen_total",
            "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx",
            DeathReason::MaxLen,
        ),
        (
            "rabbitmq_global_messages_dead_lettered_rejected_total",
            "Total number of messages dead-lettered due to basic.reject or basic.nack",
            DeathReason::Rejected,
        ),
        (
            "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
            "Total number of messages dead-lettered due to delivery-limit exceeded",
            DeathReason::DeliveryLimit,
        ),
    ];
    let strategy_name = |strategy| match strategy {
        Disabled => "disabled",
        AtMostOnce => "at_most_once",
        AtLeastOnce => "at_least_once",
    };
    for (name, help, reason) in families {
        out.family(name, Kind::Counter, help);
        // Classic queues have no delivery limit and only the two strategies.
        if reason != DeathReason::DeliveryLimit {
            for strategy in [AtMostOnce, Disabled] {
                out.sample(
                    name,
                    &[CLASSIC, ("dead_letter_strategy", strategy_name(strategy))],
                    counts.read(DeadLetterSource::Classic, reason, strategy),
                );
            }
        }
        for strategy in [AtLeastOnce, AtMostOnce, Disabled] {
            out.sample(
                name,
                &[QUORUM, ("dead_letter_strategy", strategy_name(strategy))],
                counts.read(DeadLetterSource::Quorum, reason, strategy),
            );
        }
    }
    let name = "rabbitmq_global_messages_dead_lettered_confirmed_total";
    out.family(
        name,
        Kind::Counter,
        "Total number of messages dead-lettered and confirmed by target queues",
    );
    out.sample(
        name,
        &[QUORUM, ("dead_letter_strategy", "at_least_once")],
        counts.confirmed(),
    );
}

/// `rabbitmq_message_size_bytes` (RabbitMQ 4.x): a histogram of body sizes, cumulative
/// buckets with RabbitMQ's bounds.
fn message_sizes(out: &mut Exposition, published: &PublishCounts) {
    let name = "rabbitmq_message_size_bytes";
    out.family(
        name,
        Kind::Histogram,
        "Size of messages received from publishers",
    );
    let mut cumulative = 0;
    for (i, count) in published.size_buckets.iter().enumerate() {
        cumulative += count;
        let le = match SIZE_BUCKET_BOUNDS_BYTES.get(i) {
            Some(&bound) => format_bound(bound),
            None => "+Inf".to_owned(),
        };
        out.sample(
            "rabbitmq_message_size_bytes_bucket",
            &[AMQP, ("le", &le)],
            cumulative,
        );
    }
    out.sample(
        "rabbitmq_message_size_bytes_sum",
        &[AMQP],
        published.body_bytes,
    );
    out.sample(
        "rabbitmq_message_size_bytes_count",
        &[AMQP],
        published.messages(),
    );
}

/// A bucket bound as RabbitMQ's Prometheus client prints it ("100.0", "1e+06"): the
/// Overview dashboard selects buckets by these exact strings.
fn format_bound(bound: u64) -> String {
    if bound < 1_000_000 {
        format!("{bound}.0")
    } else {
        let exponent = (bound as f64).log10().floor() as i32;
        let mantissa = bound as f64 / 10f64.powi(exponent);
        format!("{mantissa}e+{exponent:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_print_as_the_dashboard_selects_them() {
        let printed: Vec<String> = SIZE_BUCKET_BOUNDS_BYTES
            .iter()
            .map(|&b| format_bound(b))
            .collect();
        assert_eq!(
            printed,
            ["100.0", "1000.0", "10000.0", "100000.0", "1e+06", "1e+07", "5e+07", "1e+08"]
        );
    }
}
