//! JSON shapes the API shares: field tables as RabbitMQ converts them (warren-definitions'
//! `field_json`, one conversion for the API and definitions files), and the
//! `message_stats` object with its `*_details.rate` fields.

use serde_json::{Map, Number, Value};
use warren_broker::MessageCounts;
pub use warren_definitions::field_json::{json_to_table, table_to_json};

/// The counters each kind of object shows in `message_stats`, as RabbitMQ's.
pub const CHANNEL_STATS: &[&str] = &[
    "ack",
    "confirm",
    "deliver",
    "deliver_get",
    "deliver_no_ack",
    "drop_unroutable",
    "get",
    "get_empty",
    "get_no_ack",
    "publish",
    "redeliver",
    "return_unroutable",
];
pub const QUEUE_STATS: &[&str] = &[
    "ack",
    "deliver",
    "deliver_get",
    "deliver_no_ack",
    "get",
    "get_empty",
    "get_no_ack",
    "publish",
    "redeliver",
];
pub const EXCHANGE_STATS: &[&str] = &["publish_in", "publish_out"];

/// `message_stats`: each named counter with its `_details.rate` (messages per second over
/// the last sampling interval; 0.0 before the first two samples).
pub fn message_stats(counts: &MessageCounts, rates: Option<&[f64]>, which: &[&str]) -> Value {
    let mut out = Map::new();
    for (i, (name, value)) in counts.fields().iter().enumerate() {
        if !which.contains(name) {
            continue;
        }
        out.insert((*name).to_owned(), (*value).into());
        let rate = rates.and_then(|r| r.get(i)).copied().unwrap_or(0.0);
        out.insert(format!("{name}_details"), details(rate));
    }
    Value::Object(out)
}

/// `{"rate": r}`, RabbitMQ's `*_details` in basic rates mode.
pub fn details(rate: f64) -> Value {
    let mut m = Map::new();
    m.insert(
        "rate".into(),
        Number::from_f64(rate).map_or(Value::Null, Value::Number),
    );
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_stats_has_details() {
        let counts = MessageCounts {
            publish_in: 3,
            ..Default::default()
        };
        let v = message_stats(&counts, None, EXCHANGE_STATS);
        assert_eq!(v["publish_in"], 3);
        assert_eq!(v["publish_in_details"]["rate"], 0.0);
        assert!(v.get("publish").is_none());
    }
}
