//! A definitions export taken from RabbitMQ 3.10.8 (`GET /api/definitions` after creating
//! users, vhosts, permissions, policies, an operator policy, a vhost limit and a topology
//! through its HTTP API) loads into Warren, its users log in with their RabbitMQ passwords,
//! and Warren's export of it says the same.

use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::access::AccessKind;
use warren_broker::Broker;

/// Runs an import to its end (with no replicator, its changes are made at once).
fn now<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

const FIXTURE: &str =
    include_str!("../../../tests/interop/fixtures/rabbitmq-3.10-definitions.json");

fn fixture() -> Value {
    serde_json::from_str(FIXTURE).unwrap()
}

fn loaded() -> Arc<Broker> {
    let broker = Broker::new(usize::MAX, None);
    let summary = now(warren_definitions::import(&broker, &fixture())).unwrap();
    assert_eq!(summary.users, 4);
    assert_eq!(summary.queues, 5);
    assert_eq!(summary.bindings, 5);
    broker
}

/// A section's entries as sorted JSON texts, for comparing regardless of order.
fn section(doc: &Value, key: &str, drop: &[&str]) -> Vec<String> {
    let mut items: Vec<String> = doc[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} missing"))
        .iter()
        .map(|item| {
            let mut item = item.clone();
            for k in drop {
                item.as_object_mut().unwrap().remove(*k);
            }
            item.to_string()
        })
        .collect();
    items.sort();
    items
}

#[test]
fn users_keep_their_rabbitmq_passwords_and_tags() {
    let broker = loaded();
    let alice = broker.access.authenticate("alice", "alice-secret").unwrap();
    assert_eq!(alice.tags, ["administrator"]);
    let bob = broker.access.authenticate("bob", "bob pw").unwrap();
    assert_eq!(bob.tags, ["monitoring", "policymaker"]);
    assert!(broker.access.authenticate("bob", "wrong").is_err());
    assert!(broker.access.authenticate("guest", "guest").is_ok());
    // A user exported with an empty hash has no password.
    assert!(broker.access.authenticate("nopass", "anything").is_err());
}

#[test]
fn permissions_and_topic_permissions_are_enforced() {
    let broker = loaded();
    let a = &broker.access;
    assert!(a.check_vhost("bob", "orders"));
    assert!(!a.check_vhost("bob", "/"));
    assert!(a.check("bob", "orders", AccessKind::Configure, "bob.q"));
    assert!(!a.check("bob", "orders", AccessKind::Configure, "orders.new"));
    assert!(a.check("bob", "orders", AccessKind::Write, "orders"));
    assert!(!a.check("bob", "orders", AccessKind::Write, "dlx"));
    assert!(a.check_topic("bob", "orders", "events", AccessKind::Write, "bob.x"));
    assert!(!a.check_topic("bob", "orders", "events", AccessKind::Write, "alice.x"));
}

#[test]
fn policies_limits_and_topology_take_effect() {
    let broker = loaded();
    let orders = broker.vhost("orders").unwrap();
    assert_eq!(orders.limits().max_connections, Some(100));
    let policy = orders.policy("limits").unwrap();
    assert_eq!(policy.priority, 5);
    assert_eq!(policy.definition["max-length"], json!(1000));
    assert!(orders.operator_policy("cap").is_some());
    let exchanges = ["orders", "dlx", "events", "hdr", "transient"];
    for name in exchanges {
        assert!(orders.exchange(name).is_some(), "exchange {name}");
    }
    assert!(!orders.exchange("transient").unwrap().durable);
    let new = orders.queue("orders.new").unwrap();
    assert!(new.durable);
    assert_eq!(
        new.arguments.get("x-max-priority").and_then(|v| v.as_i64()),
        Some(10)
    );
    // The topology routes: orders → (order.*) → events is an e2e binding; orders.new
    // gets order.created.x.
    let mut out = Vec::new();
    orders.route(
        &orders.exchange("orders").unwrap(),
        "order.created.x",
        None,
        &mut out,
    );
    let names: Vec<&str> = out.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["orders.new"]);
    let root = broker.vhost("/").unwrap();
    let mut out = Vec::new();
    root.route(&root.exchange("ex.main").unwrap(), "work", None, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn warren_exports_what_rabbitmq_exported() {
    let broker = loaded();
    let ours = warren_definitions::export(&broker);
    let theirs = fixture();
    for key in [
        "users",
        "permissions",
        "topic_permissions",
        "parameters",
        "global_parameters",
        "policies",
        "queues",
        "exchanges",
        "bindings",
    ] {
        assert_eq!(
            section(&ours, key, &[]),
            section(&theirs, key, &[]),
            "{key}"
        );
    }
    // RabbitMQ 3.10 writes vhosts with their name only; 3.13 (and Warren) add the metadata.
    assert_eq!(
        section(&ours, "vhosts", &["description", "tags", "metadata"]),
        section(&theirs, "vhosts", &[])
    );
    assert_eq!(ours["product_name"], "Warren");
    // And Warren's export imports into a fresh Warren with the same result.
    let again = Broker::new(usize::MAX, None);
    now(warren_definitions::import(&again, &ours)).unwrap();
    assert_eq!(warren_definitions::export(&again), ours);
}

#[test]
fn one_vhost_exports_and_imports_without_vhost_fields() {
    let broker = loaded();
    let orders = warren_definitions::export_vhost(&broker, "orders").unwrap();
    assert!(orders["queues"]
        .as_array()
        .unwrap()
        .iter()
        .all(|q| q.get("vhost").is_none()));
    assert_eq!(orders["queues"].as_array().unwrap().len(), 4);
    assert!(warren_definitions::export_vhost(&broker, "nope").is_none());
    let other = Broker::new(usize::MAX, None);
    other.add_vhost("copy").unwrap();
    let summary = now(warren_definitions::import_vhost(&other, "copy", &orders)).unwrap();
    assert_eq!(
        (summary.queues, summary.exchanges, summary.bindings),
        (4, 5, 4)
    );
    let copy = other.vhost("copy").unwrap();
    assert!(copy.queue("orders.dead").is_some());
    assert!(copy.policy("limits").is_some());
    assert!(now(warren_definitions::import_vhost(&other, "missing", &orders)).is_err());
}

#[test]
fn the_streamed_export_is_the_export_serialized() {
    let broker = loaded();
    // A few hundred queues and bindings more, so that the sections hold many items.
    let queues: Vec<Value> = (0..300)
        .map(|i| {
            json!({"name": format!("many.{i:03}"), "vhost": "orders", "durable": i % 2 == 0,
                        "auto_delete": false, "arguments": {"x-max-length": i}})
        })
        .collect();
    let bindings: Vec<Value> = (0..300)
        .map(|i| json!({"source": "events", "vhost": "orders", "destination": format!("many.{i:03}"),
                        "destination_type": "queue", "routing_key": format!("k.{i}"), "arguments": {}}))
        .collect();
    let more = json!({"queues": queues, "bindings": bindings});
    now(warren_definitions::import(&broker, &more)).unwrap();

    let mut streamed = Vec::new();
    warren_definitions::write_export(&broker, &mut streamed).unwrap();
    let whole = warren_definitions::export(&broker);
    assert_eq!(whole["queues"].as_array().unwrap().len(), 305);
    assert_eq!(
        String::from_utf8(streamed).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    for vhost in ["orders", "/"] {
        let mut streamed = Vec::new();
        assert!(warren_definitions::write_export_vhost(&broker, vhost, &mut streamed).unwrap());
        let whole = warren_definitions::export_vhost(&broker, vhost).unwrap();
        assert_eq!(
            String::from_utf8(streamed).unwrap(),
            serde_json::to_string(&whole).unwrap(),
            "{vhost}"
        );
    }
    let mut nothing = Vec::new();
    assert!(!warren_definitions::write_export_vhost(&broker, "no-such", &mut nothing).unwrap());
    assert!(nothing.is_empty());
}
