//! Dead-lettering: the copy of a message that goes to a queue's `x-dead-letter-exchange`
//! when it is rejected, expires or overflows, with the history RabbitMQ 3.13 writes into its
//! headers, and RabbitMQ's rule for dropping copies that would go round a cycle. A message
//! published over AMQP 1.0 keeps its sections; an AMQP 1.0 consumer reads the history as
//! RabbitMQ 4's `x-opt-deaths` annotations (`warren_amqp10::convert`).
//!
//! History: `x-death` holds one table per (queue, reason), most recent first; entries a
//! message arrives with are kept only when complete, as RabbitMQ 3.13 keeps them. A death that
//! repeats one bumps its `count` and moves it to the front; the rest of the entry (`time`,
//! `exchange`, `routing-keys`, `original-expiration`) stays that of its first death.
//! `x-first-death-{queue,reason,exchange}` are written on a message's first death only,
//! `x-last-death-{queue,reason,exchange}` on every one (they appeared in RabbitMQ 3.13).
//!
//! Cycles: a copy is not delivered to a queue it already died in when every death since
//! then was automatic (expired, maxlen): such a message would loop forever with nobody
//! looking. A rejection anywhere in that stretch means a client is in the loop (a retry
//! queue), and the copy is delivered.

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
    /// A quorum queue returned the message more often than its `x-delivery-limit`.
    DeliveryLimit,
}

impl DeathReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::MaxLen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
}

fn text(s: &str) -> FieldValue {
    FieldValue::string(s)
}

fn field<'a>(entry: &'a FieldValue, key: &str) -> Option<&'a str> {
    match entry {
        FieldValue::Table(t) => t.get(key).and_then(|v| v.as_str()),
        _ => None,
    }
}

/// The routing keys a death records: the publish's and its `CC` header's (`BCC` ones are
/// never shown to consumers).
fn death_routing_keys(message: &Message, headers: &FieldTable) -> FieldValue {
    let mut keys = vec![text(message.routing_key())];
    if let Some(FieldValue::Array(cc)) = headers.get("CC") {
        keys.extend(cc.iter().filter(|k| k.as_str().is_some()).cloned());
    }
    FieldValue::Array(keys)
}

/// Whether a history entry a message arrived with is one RabbitMQ 3.13 keeps
/// (`mc_amqpl:recover_deaths`): a table with `exchange`, `queue`, `routing-keys`, a known
/// `reason`, `count` and an integer `time`. Others, such as the entries without `count` that
/// RabbitMQ wrote before 3.5.5, are dropped (RabbitMQ before 3.13 merged those instead).
fn is_complete_death(entry: &FieldValue) -> bool {
    let FieldValue::Table(t) = entry else {
        return false;
    };
    let known_reason = matches!(
        field(entry, "reason"),
        Some("rejected" | "expired" | "maxlen" | "delivery_limit")
    );
    known_reason
        && field(entry, "exchange").is_some()
        && field(entry, "queue").is_some()
        && matches!(t.get("routing-keys"), Some(FieldValue::Array(_)))
        && t.get("count").and_then(FieldValue::as_i64).is_some()
        && matches!(t.get("time"), Some(FieldValue::Timestamp(_)))
}

/// Keeps one entry per (queue, reason), the first (most recent), as RabbitMQ's map of deaths
/// keyed by the pair does.
fn one_per_queue_and_reason(deaths: &mut Vec<FieldValue>) {
    let key = |d: &FieldValue| {
        (
            field(d, "queue").map(str::to_owned),
            field(d, "reason").map(str::to_owned),
        )
    };
    let mut seen = Vec::with_capacity(deaths.len());
    deaths.retain(|d| {
        let k = key(d);
        let new = !seen.contains(&k);
        if new {
            seen.push(k);
        }
        new
    });
}

/// The dead-lettered copy of `message` leaving `queue`, with its new headers (for routing by
/// a headers exchange and for `is_death_cycle`).
pub fn dead_lettered(
    message: &Message,
    queue: &str,
    reason: DeathReason,
    exchange: &ShortStr,
    routing_key: Option<&ShortStr>,
) -> (Message, FieldTable) {
    let header = ContentHeader {
        class_id: BASIC_CLASS_ID,
        body_size: message.body().len() as u64,
        properties: message.properties_bytes(),
    };
    let mut props: BasicProperties = header.properties().unwrap_or_default();
    let mut headers = props.headers.take().unwrap_or_default();
    let mut deaths: Vec<FieldValue> = match headers.remove("x-death") {
        Some(FieldValue::Array(a)) => a.into_iter().filter(is_complete_death).collect(),
        _ => Vec::new(),
    };
    let first_death = deaths.is_empty();
    one_per_queue_and_reason(&mut deaths);
    let same = deaths.iter().position(|d| {
        field(d, "queue") == Some(queue) && field(d, "reason") == Some(reason.as_str())
    });
    let entry = match same {
        Some(i) => {
            let FieldValue::Table(mut t) = deaths.remove(i) else {
                unreachable!("only tables are kept")
            };
            let count = t.get("count").and_then(|c| c.as_i64()).unwrap_or(0);
            t.insert("count", FieldValue::I64(count + 1));
            t
        }
        None => {
            let now_s = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let mut t = FieldTable::new();
            if let Some(exp) = &props.expiration {
                t.insert("original-expiration", text(exp));
            }
            t.insert("count", FieldValue::I64(1));
            t.insert("reason", text(reason.as_str()));
            t.insert("queue", text(queue));
            t.insert("time", FieldValue::Timestamp(now_s));
            t.insert("exchange", text(message.exchange()));
            t.insert("routing-keys", death_routing_keys(message, &headers));
            t
        }
    };
    deaths.insert(0, FieldValue::Table(entry));
    if first_death {
        headers.insert("x-first-death-reason", text(reason.as_str()));
        headers.insert("x-first-death-queue", text(queue));
        headers.insert("x-first-death-exchange", text(message.exchange()));
    }
    headers.insert("x-last-death-reason", text(reason.as_str()));
    headers.insert("x-last-death-queue", text(queue));
    headers.insert("x-last-death-exchange", text(message.exchange()));
    headers.insert("x-death", FieldValue::Array(deaths));
    props.headers = Some(headers.clone());
    // The per-message TTL does not follow the message, or it would expire again at once.
    props.expiration = None;
    let properties_raw: Bytes = ContentHeader::new(BASIC_CLASS_ID, 0, &props).properties;
    let routing_key = routing_key
        .cloned()
        .unwrap_or_else(|| message.routing_key_name());
    let mut copy = Message::new(
        exchange.clone(),
        routing_key,
        &props,
        properties_raw,
        message.body_bytes(),
    );
    // A message published over AMQP 1.0 keeps its sections (RabbitMQ 4 dead-letters the
    // message container itself): an AMQP 1.0 consumer of the dead-letter queue gets them
    // unchanged, with the death history as annotations; a 0-9-1 one gets the headers above.
    copy.amqp10 = message.amqp10.clone();
    copy.dead_lettered = true;
    (copy, headers)
}

/// Would delivering a copy that died for `reason` (its new `headers` from `dead_lettered`)
/// to `target` close a fully automatic cycle? True when `target` is in its `x-death` and no
/// death from the most recent back to `target`'s is a rejection.
pub fn is_death_cycle(target: &str, reason: DeathReason, headers: &FieldTable) -> bool {
    if reason == DeathReason::Rejected {
        return false;
    }
    let Some(FieldValue::Array(deaths)) = headers.get("x-death") else {
        return false;
    };
    for d in deaths {
        if field(d, "reason") == Some(DeathReason::Rejected.as_str()) {
            return false;
        }
        if field(d, "queue") == Some(target) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(headers: Option<FieldTable>) -> Message {
        let props = BasicProperties {
            headers,
            expiration: Some(ShortStr::from("60000")),
            ..Default::default()
        };
        let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &props).properties;
        Message::new(
            ShortStr::from("ex"),
            ShortStr::from("rk"),
            &props,
            raw,
            Bytes::from_static(b"body"),
        )
    }

    fn die(m: &Message, queue: &str, reason: DeathReason) -> (Message, FieldTable) {
        dead_lettered(m, queue, reason, &ShortStr::from("dlx"), None)
    }

    fn history(h: &FieldTable) -> Vec<(String, String, i64)> {
        let Some(FieldValue::Array(a)) = h.get("x-death") else {
            return Vec::new();
        };
        a.iter()
            .map(|d| {
                let FieldValue::Table(t) = d else { panic!() };
                (
                    field(d, "queue").unwrap().to_owned(),
                    field(d, "reason").unwrap().to_owned(),
                    t.get("count").unwrap().as_i64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn repeated_deaths_count_up_and_move_to_the_front() {
        let (m1, h1) = die(&message(None), "work", DeathReason::Rejected);
        assert_eq!(
            h1.get("x-first-death-queue").unwrap().as_str(),
            Some("work")
        );
        assert_eq!(
            h1.get("x-first-death-exchange").unwrap().as_str(),
            Some("ex")
        );
        assert!(m1.expiration_ms.is_none());
        let (m2, h2) = die(&m1, "retry", DeathReason::Expired);
        let (m3, h3) = die(&m2, "work", DeathReason::Rejected);
        assert_eq!(
            history(&h3),
            [
                ("work".into(), "rejected".into(), 2),
                ("retry".into(), "expired".into(), 1)
            ]
        );
        assert_eq!(history(&h2)[0], ("retry".into(), "expired".into(), 1));
        // First death kept, last death follows.
        assert_eq!(
            h3.get("x-first-death-queue").unwrap().as_str(),
            Some("work")
        );
        assert_eq!(
            h3.get("x-first-death-reason").unwrap().as_str(),
            Some("rejected")
        );
        assert_eq!(h3.get("x-last-death-queue").unwrap().as_str(), Some("work"));
        assert_eq!(
            h2.get("x-last-death-queue").unwrap().as_str(),
            Some("retry")
        );
        assert_eq!(
            h2.get("x-last-death-exchange").unwrap().as_str(),
            Some("dlx")
        );
        // The entry keeps its first death's fields.
        let FieldValue::Array(a) = h3.get("x-death").unwrap() else {
            panic!()
        };
        let FieldValue::Table(first) = &a[0] else {
            panic!()
        };
        assert_eq!(first.get("exchange").unwrap().as_str(), Some("ex"));
        assert_eq!(
            first.get("original-expiration").unwrap().as_str(),
            Some("60000")
        );
        assert_eq!(m3.exchange(), "dlx");
    }

    #[test]
    fn cycles_are_automatic_stretches_back_to_the_target() {
        // Expired in q and routed back to q: a cycle at once.
        let (_, h) = die(&message(None), "q", DeathReason::Expired);
        assert!(is_death_cycle("q", DeathReason::Expired, &h));
        assert!(!is_death_cycle("other", DeathReason::Expired, &h));
        // src (rejected) -> a (expired) -> b (expired) -> a: the a..b stretch is automatic.
        let (m, _) = die(&message(None), "src", DeathReason::Rejected);
        let (m, h) = die(&m, "a", DeathReason::Expired);
        assert!(!is_death_cycle("b", DeathReason::Expired, &h));
        assert!(!is_death_cycle("src", DeathReason::Expired, &h));
        let (_, h) = die(&m, "b", DeathReason::Expired);
        assert!(is_death_cycle("a", DeathReason::Expired, &h));
        // Back to src crosses the rejection: delivered.
        assert!(!is_death_cycle("src", DeathReason::Expired, &h));
        // A rejection is never a cycle.
        assert!(!is_death_cycle("a", DeathReason::Rejected, &h));
    }

    #[test]
    fn a_legacy_history_is_dropped_and_a_complete_one_kept() {
        // The Java client's XDeathHeaderGrowth.handlingOfXDeathHeadersFromEarlierVersions:
        // four entries per queue, q97 three times over, none with a count (RabbitMQ before
        // 3.5.5): 3.13 keeps none of them.
        let legacy = |queue: &str| {
            let mut t = FieldTable::new();
            t.insert("reason", FieldValue::string("expired"));
            t.insert("queue", FieldValue::string(queue));
            t.insert("exchange", FieldValue::string("fanout0"));
            FieldValue::Table(t)
        };
        let mut deaths = Vec::new();
        for queue in ["q97", "q97", "q97", "q98", "q99"] {
            deaths.extend(std::iter::repeat_with(|| legacy(queue)).take(4));
        }
        let mut headers = FieldTable::new();
        headers.insert("x-death", FieldValue::Array(deaths));
        let (_, h) = die(&message(Some(headers)), "q1", DeathReason::Expired);
        assert_eq!(history(&h), [("q1".to_owned(), "expired".to_owned(), 1)]);
        assert_eq!(
            h.get("x-first-death-queue").and_then(|v| v.as_str()),
            Some("q1")
        );
        // A complete entry (a message dead-lettered by a broker, republished) is kept.
        let (_, h2) = die(&message(Some(h)), "q2", DeathReason::Rejected);
        assert_eq!(
            history(&h2),
            [("q2", "rejected", 1), ("q1", "expired", 1)].map(|(q, r, n)| (
                q.to_owned(),
                r.to_owned(),
                n
            ))
        );
    }

    #[test]
    fn cc_keys_are_recorded() {
        let mut headers = FieldTable::new();
        headers.insert("CC", FieldValue::Array(vec![text("k2"), text("k3")]));
        let (_, h) = die(&message(Some(headers)), "q", DeathReason::MaxLen);
        let FieldValue::Array(a) = h.get("x-death").unwrap() else {
            panic!()
        };
        let FieldValue::Table(t) = &a[0] else {
            panic!()
        };
        let FieldValue::Array(keys) = t.get("routing-keys").unwrap() else {
            panic!()
        };
        let keys: Vec<_> = keys.iter().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(keys, ["rk", "k2", "k3"]);
    }
}
