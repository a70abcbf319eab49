//! Each policy setting's effect on queues and exchanges that exist when it is set and on
//! those declared after, through the vhost as the server drives it.

use crate::connection_id::ConnectionId;
use crate::memory::MemoryMonitor;
use crate::policy::{Policy, PolicyKind};
use crate::queue::Enqueued;
use crate::{ExchangeDeclaration, Message, QueueDeclaration, VHost};
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use warren_codec::{BasicProperties, FieldTable, FieldValue, ShortStr};

const CONN: ConnectionId = 1;

fn vhost() -> Arc<VHost> {
    VHost::new(
        "/",
        Arc::new(MemoryMonitor::new(usize::MAX, Arc::default())),
        None,
        Arc::default(),
    )
}

fn policy(name: &str, pattern: &str, definition: Value) -> Policy {
    Policy::new(PolicyKind::Policy, "/", name, pattern, "all", 0, definition).unwrap()
}

fn operator_policy(name: &str, pattern: &str, definition: Value) -> Policy {
    Policy::new(
        PolicyKind::Operator,
        "/",
        name,
        pattern,
        "all",
        0,
        definition,
    )
    .unwrap()
}

fn declare_queue(v: &Arc<VHost>, name: &str, args: &[(&str, FieldValue)]) {
    v.declare_queue(
        QueueDeclaration {
            name: name.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: args.iter().map(|(k, a)| ((*k).into(), a.clone())).collect(),
        },
        CONN,
    )
    .unwrap();
}

fn declare_exchange(v: &Arc<VHost>, name: &str, kind: &str, args: &[(&str, FieldValue)]) {
    v.declare_exchange(ExchangeDeclaration {
        name: name.into(),
        kind: kind.into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments: args.iter().map(|(k, a)| ((*k).into(), a.clone())).collect(),
    })
    .unwrap();
}

fn message(body: &str) -> Arc<Message> {
    Arc::new(Message::new(
        ShortStr::from(""),
        ShortStr::from("rk"),
        &BasicProperties::default(),
        Bytes::new(),
        Bytes::copy_from_slice(body.as_bytes()),
    ))
}

fn publish(v: &Arc<VHost>, queue: &str, body: &str) -> Enqueued {
    v.queue(queue).unwrap().publish(message(body), None)
}

/// Publishes through an exchange, as a client would; returns how many queues it reached.
fn publish_to_exchange(v: &Arc<VHost>, exchange: &str, routing_key: &str, body: &str) -> usize {
    let ex = v.exchange(exchange).unwrap();
    let mut queues = Vec::new();
    v.route(&ex, routing_key, None, &mut queues);
    for q in &queues {
        q.publish(message(body), None);
    }
    queues.len()
}

fn count(v: &Arc<VHost>, queue: &str) -> u32 {
    v.queue(queue).unwrap().message_count()
}

fn bodies(v: &Arc<VHost>, queue: &str) -> Vec<String> {
    let q = v.queue(queue).unwrap();
    std::iter::from_fn(|| q.get(true))
        .map(|(m, _)| String::from_utf8_lossy(m.message.body()).into_owned())
        .collect()
}

#[test]
fn max_length_drops_the_head_of_existing_queues_and_limits_new_ones() {
    let v = vhost();
    declare_queue(&v, "limited.a", &[]);
    declare_queue(&v, "other", &[]);
    for i in 0..5 {
        publish(&v, "limited.a", &format!("m{i}"));
        publish(&v, "other", &format!("m{i}"));
    }
    v.set_policy(policy("cap", "^limited\\.", json!({"max-length": 2})))
        .unwrap();
    assert_eq!(bodies(&v, "limited.a"), ["m3", "m4"]);
    assert_eq!(count(&v, "other"), 5, "the pattern does not match 'other'");
    declare_queue(&v, "limited.b", &[]);
    for i in 0..4 {
        publish(&v, "limited.b", &format!("n{i}"));
    }
    assert_eq!(bodies(&v, "limited.b"), ["n2", "n3"]);
    let q = v.queue("limited.b").unwrap();
    assert_eq!(q.policies().policy_name(), Some("cap"));
    assert!(v.queue("other").unwrap().policies().policy_name().is_none());
}

#[test]
fn max_length_bytes_applies_to_existing_queues() {
    let v = vhost();
    declare_queue(&v, "q", &[]);
    for body in ["aaaa", "bbbb", "cccc"] {
        publish(&v, "q", body);
    }
    v.set_policy(policy("bytes", "^q$", json!({"max-length-bytes": 8})))
        .unwrap();
    assert_eq!(bodies(&v, "q"), ["bbbb", "cccc"]);
}

#[test]
fn dead_letter_settings_route_dropped_messages() {
    let v = vhost();
    declare_exchange(&v, "dlx", "direct", &[]);
    declare_queue(&v, "dead", &[]);
    v.bind_queue("dead", "dlx", "to-dead".into(), FieldTable::new(), CONN)
        .unwrap();
    declare_queue(&v, "work", &[]);
    for i in 0..3 {
        publish(&v, "work", &format!("m{i}"));
    }
    v.set_policy(policy(
        "dl",
        "^work$",
        json!({"max-length": 1, "dead-letter-exchange": "dlx", "dead-letter-routing-key": "to-dead"}),
    ))
    .unwrap();
    assert_eq!(bodies(&v, "dead"), ["m0", "m1"]);
    assert_eq!(bodies(&v, "work"), ["m2"]);
}

#[test]
fn reject_publish_overflow_refuses_new_messages() {
    let v = vhost();
    declare_queue(
        &v,
        "q",
        &[("x-overflow", FieldValue::string("reject-publish"))],
    );
    publish(&v, "q", "kept");
    publish(&v, "q", "kept too");
    // A lower limit under reject-publish drops nothing, as in RabbitMQ: it refuses what
    // comes next.
    v.set_policy(policy("rp", "^q$", json!({"max-length": 1})))
        .unwrap();
    assert_eq!(publish(&v, "q", "refused"), Enqueued::Rejected);
    assert_eq!(bodies(&v, "q"), ["kept", "kept too"]);
    v.clear_policy("rp");
    v.set_policy(policy(
        "rp",
        "^q$",
        json!({"max-length": 1, "overflow": "reject-publish"}),
    ))
    .unwrap();
    assert_eq!(publish(&v, "q", "first"), Enqueued::Accepted);
    assert_eq!(publish(&v, "q", "second"), Enqueued::Rejected);
    assert_eq!(bodies(&v, "q"), ["first"]);
}

#[test]
fn message_ttl_applies_to_messages_published_after_it() {
    let v = vhost();
    declare_queue(&v, "q", &[]);
    publish(&v, "q", "before");
    v.set_policy(policy("ttl", "^q$", json!({"message-ttl": 0})))
        .unwrap();
    publish(&v, "q", "after");
    // TTL 0 with no consumer waiting: gone at once. The older message keeps the expiry it
    // was queued with (none), as in RabbitMQ.
    assert_eq!(bodies(&v, "q"), ["before"]);
    v.clear_policy("ttl");
    publish(&v, "q", "cleared");
    assert_eq!(bodies(&v, "q"), ["cleared"]);
}

#[tokio::test]
async fn expires_deletes_unused_existing_queues() {
    let v = vhost();
    declare_queue(&v, "idle", &[]);
    declare_queue(&v, "kept", &[]);
    v.set_policy(policy("exp", "^idle$", json!({"expires": 50})))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(v.queue("idle").is_none(), "expired by the policy");
    assert!(v.queue("kept").is_some());
    // Cleared before its time: the queue stays.
    declare_queue(&v, "idle", &[]);
    v.set_policy(policy("exp", "^idle$", json!({"expires": 300})))
        .unwrap();
    v.clear_policy("exp");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        v.queue("idle").is_some(),
        "no expiry once the policy is gone"
    );
}

#[test]
fn alternate_exchange_takes_unroutable_messages_and_the_argument_wins() {
    let v = vhost();
    declare_exchange(&v, "ae", "fanout", &[]);
    declare_exchange(&v, "ae-arg", "fanout", &[]);
    declare_queue(&v, "unrouted", &[]);
    declare_queue(&v, "unrouted-arg", &[]);
    v.bind_queue("unrouted", "ae", "".into(), FieldTable::new(), CONN)
        .unwrap();
    v.bind_queue("unrouted-arg", "ae-arg", "".into(), FieldTable::new(), CONN)
        .unwrap();
    declare_exchange(&v, "main", "direct", &[]);
    assert_eq!(publish_to_exchange(&v, "main", "nowhere", "lost"), 0);
    v.set_policy(policy("alt", "^main", json!({"alternate-exchange": "ae"})))
        .unwrap();
    assert_eq!(publish_to_exchange(&v, "main", "nowhere", "m1"), 1);
    assert_eq!(bodies(&v, "unrouted"), ["m1"]);
    declare_exchange(
        &v,
        "main-with-arg",
        "direct",
        &[("alternate-exchange", FieldValue::string("ae-arg"))],
    );
    assert_eq!(publish_to_exchange(&v, "main-with-arg", "nowhere", "m2"), 1);
    assert_eq!(bodies(&v, "unrouted-arg"), ["m2"]);
    assert_eq!(
        v.exchange("main-with-arg")
            .unwrap()
            .policies()
            .policy_name(),
        Some("alt")
    );
    v.clear_policy("alt");
    assert_eq!(publish_to_exchange(&v, "main", "nowhere", "m3"), 0);
}

#[test]
fn queue_arguments_beat_policy_as_rabbitmq() {
    let v = vhost();
    declare_exchange(&v, "arg-dlx", "fanout", &[]);
    declare_exchange(&v, "pol-dlx", "fanout", &[]);
    declare_queue(&v, "arg-dead", &[]);
    declare_queue(&v, "pol-dead", &[]);
    v.bind_queue("arg-dead", "arg-dlx", "".into(), FieldTable::new(), CONN)
        .unwrap();
    v.bind_queue("pol-dead", "pol-dlx", "".into(), FieldTable::new(), CONN)
        .unwrap();
    v.set_policy(policy(
        "p",
        "^q",
        json!({"max-length": 10, "dead-letter-exchange": "pol-dlx", "message-ttl": 60000}),
    ))
    .unwrap();
    // The argument's lower max-length holds, and its dead-letter exchange.
    declare_queue(
        &v,
        "q.low",
        &[
            ("x-max-length", FieldValue::I32(1)),
            ("x-dead-letter-exchange", FieldValue::string("arg-dlx")),
        ],
    );
    // A higher max-length argument does not lift the policy's limit: the lower one wins.
    declare_queue(&v, "q.high", &[("x-max-length", FieldValue::I32(100))]);
    for i in 0..3 {
        publish(&v, "q.low", &format!("l{i}"));
    }
    for i in 0..12 {
        publish(&v, "q.high", &format!("h{i}"));
    }
    assert_eq!(bodies(&v, "q.low"), ["l2"]);
    assert_eq!(bodies(&v, "arg-dead"), ["l0", "l1"]);
    assert_eq!(count(&v, "q.high"), 10);
    assert_eq!(count(&v, "pol-dead"), 2);
    let limits = v.queue("q.low").unwrap().limits();
    assert_eq!(limits.message_ttl_ms, Some(60000));
    assert_eq!(limits.max_length, Some(1));
}

#[test]
fn operator_policy_caps_limits_and_is_restricted() {
    let v = vhost();
    declare_queue(&v, "q", &[]);
    v.set_policy(policy(
        "user",
        ".*",
        json!({"max-length": 100, "dead-letter-exchange": "d"}),
    ))
    .unwrap();
    v.set_operator_policy(operator_policy("ops", ".*", json!({"max-length": 3})))
        .unwrap();
    for i in 0..5 {
        publish(&v, "q", &format!("m{i}"));
    }
    assert_eq!(count(&v, "q"), 3);
    let q = v.queue("q").unwrap();
    assert_eq!(q.policies().operator_policy_name(), Some("ops"));
    assert_eq!(
        Value::Object(q.effective_policy_definition()),
        json!({"max-length": 3, "dead-letter-exchange": "d"})
    );
    // A user policy handed in as an operator policy (or the other way) is refused.
    assert!(v
        .set_operator_policy(policy("sneaky", ".*", json!({"max-length": 1})))
        .is_err());
    assert!(v
        .set_policy(operator_policy("wrong", ".*", json!({"max-length": 1})))
        .is_err());
    assert!(v.clear_operator_policy("ops"));
    assert!(!v.clear_operator_policy("ops"));
    assert_eq!(v.queue("q").unwrap().limits().max_length, Some(100));
    assert_eq!(v.operator_policies().len(), 0);
    assert_eq!(v.policies().len(), 1);
}

#[test]
fn higher_priority_policy_replaces_a_lower_one_on_existing_queues() {
    let v = vhost();
    declare_queue(&v, "q", &[]);
    v.set_policy(policy("wide", ".*", json!({"max-length": 5})))
        .unwrap();
    let narrow = Policy::new(
        PolicyKind::Policy,
        "/",
        "narrow",
        "^q$",
        "queues",
        10,
        json!({"queue-mode": "lazy", "delivery-limit": 3}),
    )
    .unwrap();
    v.set_policy(narrow).unwrap();
    let q = v.queue("q").unwrap();
    assert_eq!(q.policies().policy_name(), Some("narrow"));
    // One policy applies: the lower-priority max-length no longer does.
    assert_eq!(q.limits().max_length, None);
    assert!(q.limits().lazy);
    assert_eq!(
        Value::Object(q.effective_policy_definition()),
        json!({"queue-mode": "lazy", "delivery-limit": 3})
    );
}

#[test]
fn policies_are_part_of_the_durable_definitions() {
    let v = vhost();
    v.set_policy(policy("p", "^q", json!({"max-length": 1})))
        .unwrap();
    v.set_operator_policy(operator_policy("o", ".*", json!({"expires": 1000})))
        .unwrap();
    let defs = v.durable_definitions();
    assert_eq!(defs.policies.len(), 2);
    let back = crate::definitions::Definitions::decode(&defs.encode()).unwrap();
    assert_eq!(back.policies, defs.policies);
}

#[test]
fn a_policy_for_another_vhost_is_refused() {
    let v = vhost();
    let elsewhere = Policy::new(
        PolicyKind::Policy,
        "other",
        "p",
        ".*",
        "all",
        0,
        json!({"max-length": 1}),
    )
    .unwrap();
    assert!(v.set_policy(elsewhere).is_err());
}

#[test]
fn policies_come_back_after_a_restart_and_apply_to_recovered_entities() {
    use warren_store::{Store, StoreOptions};
    let dir = tempfile::tempdir().unwrap();
    // Durable changes reach the store through the broker that owns the vhost.
    {
        let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let broker = crate::Broker::new(usize::MAX, Some(store));
        broker.recover(recovered);
        let v = broker.vhost("/").unwrap();
        v.declare_queue(
            QueueDeclaration {
                name: "durable.q".into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
            CONN,
        )
        .unwrap();
        v.set_policy(policy("keep", "^durable", json!({"max-length": 2})))
            .unwrap();
        v.set_operator_policy(operator_policy("cap", ".*", json!({"message-ttl": 5000})))
            .unwrap();
        v.set_policy(policy(
            "ae",
            "^amq\\.direct$",
            json!({"alternate-exchange": "amq.fanout"}),
        ))
        .unwrap();
        v.clear_policy("never-there");
    }
    let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let broker = crate::Broker::new(usize::MAX, Some(store));
    broker.recover(recovered);
    let v = broker.vhost("/").unwrap();
    assert_eq!(v.policy("keep").unwrap().definition["max-length"], json!(2));
    assert_eq!(v.operator_policy("cap").unwrap().kind, PolicyKind::Operator);
    let q = v.queue("durable.q").unwrap();
    assert_eq!(q.policies().policy_name(), Some("keep"));
    assert_eq!(q.limits().max_length, Some(2));
    assert_eq!(q.limits().message_ttl_ms, Some(5000));
    // Built-in exchanges take recovered policies too.
    let direct = v.exchange("amq.direct").unwrap();
    assert_eq!(direct.alternate_exchange().as_deref(), Some("amq.fanout"));
}
