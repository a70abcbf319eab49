//! Export: the broker's users, vhosts, permissions, parameters, policies and topology as
//! RabbitMQ's `GET /api/definitions` (3.13's `rabbit_mgmt_wm_definitions`) writes them.
//!
//! As RabbitMQ, queues are those without an exclusive owner (durable or not), exchanges all
//! but the default and the `amq.*` ones, bindings those whose source is not the default
//! exchange and whose destination is an exported queue or an exchange.

use crate::field_json::table_to_json;
use crate::{components, PRODUCT_NAME, PRODUCT_VERSION, RABBITMQ_VERSION};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::sync::Arc;
use warren_broker::names::has_reserved_prefix;
use warren_broker::{Broker, VHost};

/// The whole broker's definitions (`GET /api/definitions`).
pub fn export(broker: &Broker) -> Value {
    let vhosts = broker.vhosts();
    let mut parameters = Vec::new();
    let mut policies = Vec::new();
    let mut queues = Vec::new();
    let mut exchanges = Vec::new();
    let mut bindings = Vec::new();
    for vhost in &vhosts {
        parameters.extend(vhost_parameters(broker, vhost));
        policies.extend(components::policies(vhost));
        let topology = topology(vhost);
        queues.extend(topology.queues);
        exchanges.extend(topology.exchanges);
        bindings.extend(topology.bindings);
    }
    let mut definitions = versions();
    definitions.insert("users".into(), Value::Array(users(broker)));
    definitions.insert(
        "vhosts".into(),
        Value::Array(vhosts.iter().map(|v| vhost_definition(v)).collect()),
    );
    definitions.insert("permissions".into(), Value::Array(permissions(broker)));
    definitions.insert(
        "topic_permissions".into(),
        Value::Array(topic_permissions(broker)),
    );
    definitions.insert("parameters".into(), Value::Array(parameters));
    definitions.insert(
        "global_parameters".into(),
        Value::Array(global_parameters(broker)),
    );
    definitions.insert("policies".into(), Value::Array(policies));
    definitions.insert("queues".into(), Value::Array(queues));
    definitions.insert("exchanges".into(), Value::Array(exchanges));
    definitions.insert("bindings".into(), Value::Array(bindings));
    Value::Object(definitions)
}

/// One vhost's definitions (`GET /api/definitions/VHOST`): its parameters, policies and
/// topology, without the `vhost` field; `None` when there is no such vhost.
pub fn export_vhost(broker: &Broker, vhost_name: &str) -> Option<Value> {
    let vhost = broker.vhost(vhost_name)?;
    let topology = topology(&vhost);
    let mut definitions = Map::new();
    definitions.insert("rabbit_version".into(), json!(RABBITMQ_VERSION));
    let strip = |items: Vec<Value>| -> Value {
        Value::Array(
            items
                .into_iter()
                .map(|mut item| {
                    if let Some(object) = item.as_object_mut() {
                        object.remove("vhost");
                    }
                    item
                })
                .collect(),
        )
    };
    definitions.insert("parameters".into(), strip(vhost_parameters(broker, &vhost)));
    definitions.insert("policies".into(), strip(components::policies(&vhost)));
    definitions.insert("queues".into(), strip(topology.queues));
    definitions.insert("exchanges".into(), strip(topology.exchanges));
    definitions.insert("bindings".into(), strip(topology.bindings));
    Some(Value::Object(definitions))
}

fn versions() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("rabbit_version".into(), json!(RABBITMQ_VERSION));
    m.insert("rabbitmq_version".into(), json!(RABBITMQ_VERSION));
    m.insert("product_name".into(), json!(PRODUCT_NAME));
    m.insert("product_version".into(), json!(PRODUCT_VERSION));
    m
}

fn users(broker: &Broker) -> Vec<Value> {
    broker
        .access
        .users()
        .iter()
        .map(|u| {
            json!({
                "name": u.name,
                "password_hash": u.password_hash,
                "hashing_algorithm": u.hashing_algorithm,
                "tags": u.tags,
                "limits": u.limits.to_json(),
            })
        })
        .collect()
}

fn vhost_definition(vhost: &VHost) -> Value {
    let metadata = vhost.metadata();
    json!({
        "name": vhost.name(),
        "description": metadata.description,
        "tags": metadata.tags,
        "metadata": {"description": metadata.description, "tags": metadata.tags},
    })
}

fn permissions(broker: &Broker) -> Vec<Value> {
    broker
        .access
        .permissions()
        .into_iter()
        .map(|(vhost, user, p)| {
            json!({
                "user": user, "vhost": vhost,
                "configure": p.configure, "write": p.write, "read": p.read,
            })
        })
        .collect()
}

fn topic_permissions(broker: &Broker) -> Vec<Value> {
    broker
        .access
        .topic_permissions()
        .into_iter()
        .map(|(vhost, user, p)| {
            json!({
                "user": user, "vhost": vhost, "exchange": p.exchange,
                "write": p.write, "read": p.read,
            })
        })
        .collect()
}

/// A stored JSON text back as JSON (it was stored from JSON, so it parses).
fn stored_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The vhost's runtime parameters as RabbitMQ lists them: the kept ones, its limits
/// (component `vhost-limits`, name `limits`) and its operator policies.
fn vhost_parameters(broker: &Broker, vhost: &VHost) -> Vec<Value> {
    let mut out: Vec<Value> = broker
        .parameters
        .list()
        .into_iter()
        .filter(|p| p.vhost == vhost.name())
        .map(|p| {
            json!({
                "vhost": p.vhost, "component": p.component, "name": p.name,
                "value": stored_json(&p.value_json),
            })
        })
        .collect();
    let limits = vhost.limits();
    let mut value = Map::new();
    if let Some(n) = limits.max_connections {
        value.insert(components::MAX_CONNECTIONS.into(), json!(n));
    }
    if let Some(n) = limits.max_queues {
        value.insert(components::MAX_QUEUES.into(), json!(n));
    }
    if !value.is_empty() {
        out.push(json!({
            "vhost": vhost.name(), "component": components::VHOST_LIMITS, "name": "limits",
            "value": value,
        }));
    }
    out.extend(components::operator_policies(vhost));
    out
}

fn global_parameters(broker: &Broker) -> Vec<Value> {
    broker
        .parameters
        .list_global()
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": stored_json(&value)}))
        .collect()
}

struct Topology {
    queues: Vec<Value>,
    exchanges: Vec<Value>,
    bindings: Vec<Value>,
}

fn topology(vhost: &Arc<VHost>) -> Topology {
    let vhost_name = vhost.name();
    let mut queues = vhost.queues();
    queues.retain(|q| q.exclusive_owner.is_none() && !q.is_deleted());
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let exported_queues: HashSet<&str> = queues.iter().map(|q| q.name.as_str()).collect();
    let mut exchanges = vhost.exchanges();
    exchanges.retain(|e| !e.name.is_empty());
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    let mut bindings = Vec::new();
    for e in &exchanges {
        for b in e.bindings() {
            let destination = b.destination.name().as_str();
            let (exported, destination_type) = match b.destination.is_queue() {
                true => (exported_queues.contains(destination), "queue"),
                false => (!destination.is_empty(), "exchange"),
            };
            if exported {
                bindings.push(json!({
                    "source": e.name.as_str(), "vhost": vhost_name,
                    "destination": destination, "destination_type": destination_type,
                    "routing_key": b.routing_key.as_str(),
                    "arguments": table_to_json(&b.arguments),
                }));
            }
        }
    }
    Topology {
        queues: queues
            .iter()
            .map(|q| {
                json!({
                    "name": q.name.as_str(), "vhost": vhost_name, "durable": q.durable,
                    "auto_delete": q.auto_delete, "arguments": table_to_json(&q.arguments),
                })
            })
            .collect(),
        exchanges: exchanges
            .iter()
            .filter(|e| !has_reserved_prefix(&e.name))
            .map(|e| {
                json!({
                    "name": e.name.as_str(), "vhost": vhost_name, "type": e.kind.as_str(),
                    "durable": e.durable, "auto_delete": e.auto_delete, "internal": e.internal,
                    "arguments": table_to_json(&e.arguments),
                })
            })
            .collect(),
        bindings,
    }
}
