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
use std::io::{self, Write};
use std::sync::Arc;
use warren_broker::names::has_reserved_prefix;
use warren_broker::{Broker, Exchange, Queue, VHost};

/// The keys of the whole export (`GET /api/definitions`), in the order a JSON object's keys
/// are written (serde_json's maps keep them sorted).
const BROKER_KEYS: &[&str] = &[
    "bindings",
    "exchanges",
    "global_parameters",
    "parameters",
    "permissions",
    "policies",
    "product_name",
    "product_version",
    "queues",
    "rabbit_version",
    "rabbitmq_version",
    "topic_permissions",
    "users",
    "vhosts",
];

/// The keys of one vhost's export (`GET /api/definitions/VHOST`), sorted likewise.
const VHOST_KEYS: &[&str] = &[
    "bindings",
    "exchanges",
    "parameters",
    "policies",
    "queues",
    "rabbit_version",
];

/// The whole broker's definitions (`GET /api/definitions`).
pub fn export(broker: &Broker) -> Value {
    Document::of_broker(broker).to_value()
}

/// `export` written as JSON into `out` item by item (byte for byte what serializing `export`
/// gives): with 100,000 queues the document is never held whole, as JSON values or as text.
pub fn write_export(broker: &Broker, out: &mut impl Write) -> io::Result<()> {
    Document::of_broker(broker).write(out)
}

/// One vhost's definitions (`GET /api/definitions/VHOST`): its parameters, policies and
/// topology, without the `vhost` field; `None` when there is no such vhost.
pub fn export_vhost(broker: &Broker, vhost_name: &str) -> Option<Value> {
    Some(Document::of_vhost(broker, vhost_name)?.to_value())
}

/// `export_vhost` written as JSON into `out` item by item; `Ok(false)` when there is no such
/// vhost (nothing written).
pub fn write_export_vhost(
    broker: &Broker,
    vhost_name: &str,
    out: &mut impl Write,
) -> io::Result<bool> {
    let Some(document) = Document::of_vhost(broker, vhost_name) else {
        return Ok(false);
    };
    document.write(out)?;
    Ok(true)
}

/// What an export reads, taken once: the vhosts with their queues and exchanges in order.
/// Each key's value is made by `section`, which both the `Value` and the streamed forms use.
struct Document<'a> {
    broker: &'a Broker,
    keys: &'static [&'static str],
    vhosts: Vec<Arc<VHost>>,
    topologies: Vec<Topology>,
    /// One vhost's export leaves the `vhost` field out of its items.
    strip_vhost: bool,
}

/// A key's value: one JSON value, or an array given item by item.
enum Section {
    Whole(Value),
    Items,
}

impl<'a> Document<'a> {
    fn of_broker(broker: &'a Broker) -> Document<'a> {
        let vhosts = broker.vhosts();
        Document {
            broker,
            keys: BROKER_KEYS,
            topologies: vhosts.iter().map(Topology::of).collect(),
            vhosts,
            strip_vhost: false,
        }
    }

    fn of_vhost(broker: &'a Broker, vhost_name: &str) -> Option<Document<'a>> {
        let vhost = broker.vhost(vhost_name)?;
        Some(Document {
            broker,
            keys: VHOST_KEYS,
            topologies: vec![Topology::of(&vhost)],
            vhosts: vec![vhost],
            strip_vhost: true,
        })
    }

    /// The value of `key`: whole, or (`Section::Items`) each item of its array handed to
    /// `item` in order.
    fn section(
        &self,
        key: &str,
        item: &mut dyn FnMut(Value) -> io::Result<()>,
    ) -> io::Result<Section> {
        let broker = self.broker;
        let mut each = |items: Vec<Value>| items.into_iter().try_for_each(&mut *item);
        match key {
            "product_name" => return Ok(Section::Whole(json!(PRODUCT_NAME))),
            "product_version" => return Ok(Section::Whole(json!(PRODUCT_VERSION))),
            "rabbit_version" | "rabbitmq_version" => {
                return Ok(Section::Whole(json!(RABBITMQ_VERSION)))
            }
            "users" => each(users(broker))?,
            "vhosts" => each(self.vhosts.iter().map(|v| vhost_definition(v)).collect())?,
            "permissions" => each(permissions(broker))?,
            "topic_permissions" => each(topic_permissions(broker))?,
            "global_parameters" => each(global_parameters(broker))?,
            "parameters" => {
                for vhost in &self.vhosts {
                    each(vhost_parameters(broker, vhost))?;
                }
            }
            "policies" => {
                for vhost in &self.vhosts {
                    each(components::policies(vhost))?;
                }
            }
            "queues" => {
                for topology in &self.topologies {
                    topology.queues(&mut *item)?;
                }
            }
            "exchanges" => {
                for topology in &self.topologies {
                    topology.exchanges(&mut *item)?;
                }
            }
            "bindings" => {
                for topology in &self.topologies {
                    topology.bindings(&mut *item)?;
                }
            }
            _ => {}
        }
        Ok(Section::Items)
    }

    /// An item as this export shows it.
    fn shown(&self, mut item: Value) -> Value {
        if self.strip_vhost {
            if let Some(object) = item.as_object_mut() {
                object.remove("vhost");
            }
        }
        item
    }

    fn to_value(&self) -> Value {
        let mut definitions = Map::new();
        for key in self.keys {
            let mut items = Vec::new();
            let section = self.section(key, &mut |item| {
                items.push(self.shown(item));
                Ok(())
            });
            let value = match section {
                Ok(Section::Whole(value)) => value,
                // Collecting into a Vec cannot fail.
                Ok(Section::Items) | Err(_) => Value::Array(items),
            };
            definitions.insert((*key).into(), value);
        }
        Value::Object(definitions)
    }

    fn write(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(b"{")?;
        for (i, key) in self.keys.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut *out, key)?;
            out.write_all(b":")?;
            let mut first = true;
            let section = self.section(key, &mut |item| {
                out.write_all(if first { b"[" } else { b"," })?;
                first = false;
                serde_json::to_writer(&mut *out, &self.shown(item))?;
                Ok(())
            })?;
            match section {
                Section::Whole(value) => serde_json::to_writer(&mut *out, &value)?,
                Section::Items if first => out.write_all(b"[]")?,
                Section::Items => out.write_all(b"]")?,
            }
        }
        out.write_all(b"}")
    }
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

/// A vhost's exported queues and exchanges, each sorted by name.
struct Topology {
    vhost: Arc<VHost>,
    queues: Vec<Arc<Queue>>,
    exchanges: Vec<Arc<Exchange>>,
}

impl Topology {
    fn of(vhost: &Arc<VHost>) -> Topology {
        let mut queues = vhost.queues();
        queues.retain(|q| q.exclusive_owner.is_none() && !q.is_deleted());
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        let mut exchanges = vhost.exchanges();
        exchanges.retain(|e| !e.name.is_empty());
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        Topology {
            vhost: vhost.clone(),
            queues,
            exchanges,
        }
    }

    fn queues(&self, item: &mut dyn FnMut(Value) -> io::Result<()>) -> io::Result<()> {
        let vhost_name = self.vhost.name();
        self.queues.iter().try_for_each(|q| {
            item(json!({
                "name": q.name.as_str(), "vhost": vhost_name, "durable": q.durable,
                "auto_delete": q.auto_delete, "arguments": table_to_json(&q.arguments),
            }))
        })
    }

    fn exchanges(&self, item: &mut dyn FnMut(Value) -> io::Result<()>) -> io::Result<()> {
        let vhost_name = self.vhost.name();
        self.exchanges
            .iter()
            .filter(|e| !has_reserved_prefix(&e.name))
            .try_for_each(|e| {
                item(json!({
                    "name": e.name.as_str(), "vhost": vhost_name, "type": e.kind.as_str(),
                    "durable": e.durable, "auto_delete": e.auto_delete, "internal": e.internal,
                    "arguments": table_to_json(&e.arguments),
                }))
            })
    }

    fn bindings(&self, item: &mut dyn FnMut(Value) -> io::Result<()>) -> io::Result<()> {
        let vhost_name = self.vhost.name();
        let exported_queues: HashSet<&str> = self.queues.iter().map(|q| q.name.as_str()).collect();
        for e in &self.exchanges {
            for b in e.bindings() {
                let destination = b.destination.name().as_str();
                let (exported, destination_type) = match b.destination.is_queue() {
                    true => (exported_queues.contains(destination), "queue"),
                    false => (!destination.is_empty(), "exchange"),
                };
                if exported {
                    item(json!({
                        "source": e.name.as_str(), "vhost": vhost_name,
                        "destination": destination, "destination_type": destination_type,
                        "routing_key": b.routing_key.as_str(),
                        "arguments": table_to_json(&b.arguments),
                    }))?;
                }
            }
        }
        Ok(())
    }
}
