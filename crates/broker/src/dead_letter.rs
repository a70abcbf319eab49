//! Dead-lettering: the copy of a message that goes to a queue's `x-dead-letter-exchange`
//! when it is rejected, expires or overflows, with the `x-death` history RabbitMQ writes.

use crate::message::Message;
use bytes::Bytes;
use std::time::{SystemTime, UNIX_EPOCH};
use warren_codec::{
    BasicProperties, ContentHeader, FieldTable, FieldValue, ShortStr, BASIC_CLASS_ID,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathReason {
    Rejected,
    Expired,
    MaxLen,
}

impl DeathReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::MaxLen => "maxlen",
        }
    }
}

fn text(s: &str) -> FieldValue {
    FieldValue::string(s)
}

fn entry_is(v: &FieldValue, key: &str, want: &str) -> bool {
    matches!(v, FieldValue::Table(t) if t.get(key).and_then(|x| x.as_str()) == Some(want))
}

/// The dead-lettered copy of `message` leaving `queue` with its new headers (for headers
/// exchanges), or None when sending it would loop
/// (it already died in this queue and no client rejected it on the way: RabbitMQ's cycle rule).
pub fn dead_lettered(
    message: &Message,
    queue: &str,
    reason: DeathReason,
    exchange: &ShortStr,
    routing_key: Option<&ShortStr>,
) -> Option<(Message, FieldTable)> {
    let header = ContentHeader {
        class_id: BASIC_CLASS_ID,
        body_size: message.body.len() as u64,
        properties: message.properties_raw.clone(),
    };
    let mut props: BasicProperties = header.properties().unwrap_or_default();
    let mut headers = props.headers.take().unwrap_or_default();
    let mut deaths = match headers.remove("x-death") {
        Some(FieldValue::Array(a)) => a,
        _ => Vec::new(),
    };
    let died_here_before = deaths.iter().any(|d| entry_is(d, "queue", queue));
    let ever_rejected = deaths.iter().any(|d| entry_is(d, "reason", "rejected"));
    if died_here_before && !ever_rejected && reason != DeathReason::Rejected {
        return None;
    }
    let existing = deaths
        .iter()
        .position(|d| entry_is(d, "queue", queue) && entry_is(d, "reason", reason.as_str()));
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let entry = match existing {
        Some(i) => {
            let FieldValue::Table(mut t) = deaths.remove(i) else {
                unreachable!("checked table")
            };
            let count = t.get("count").and_then(|c| c.as_i64()).unwrap_or(0);
            t.insert("count", FieldValue::I64(count + 1));
            t.insert("time", FieldValue::Timestamp(now_s));
            t
        }
        None => {
            let mut t = FieldTable::new();
            t.insert("count", FieldValue::I64(1));
            t.insert("reason", text(reason.as_str()));
            t.insert("queue", text(queue));
            t.insert("time", FieldValue::Timestamp(now_s));
            t.insert("exchange", text(&message.exchange));
            t.insert(
                "routing-keys",
                FieldValue::Array(vec![text(&message.routing_key)]),
            );
            if let Some(exp) = &props.expiration {
                t.insert("original-expiration", text(exp));
            }
            t
        }
    };
    deaths.insert(0, FieldValue::Table(entry));
    if headers.get("x-first-death-queue").is_none() {
        headers.insert("x-first-death-reason", text(reason.as_str()));
        headers.insert("x-first-death-queue", text(queue));
        headers.insert("x-first-death-exchange", text(&message.exchange));
    }
    headers.insert("x-death", FieldValue::Array(deaths));
    props.headers = Some(headers.clone());
    // The per-message TTL does not follow the message, or it would expire again at once.
    props.expiration = None;
    let properties_raw: Bytes = ContentHeader::new(BASIC_CLASS_ID, 0, &props).properties;
    let routing_key = routing_key
        .cloned()
        .unwrap_or_else(|| message.routing_key.clone());
    let copy = Message::new(
        exchange.clone(),
        routing_key,
        &props,
        properties_raw,
        message.body.clone(),
    );
    Some((copy, headers))
}
