//! Durable definitions — exchanges, queues and bindings that survive a restart — encoded for
//! the store's definitions blob.
//!
//! The encoding is an AMQP field table (`{"exchanges": [...], "queues": [...], "bindings":
//! [...]}`), written with our own codec: arguments keep every field type exactly, and no
//! second serialization format is needed. docs/STORAGE.md describes the layout.

use crate::policy::{Policy, PolicyKind};
use bytes::{Bytes, BytesMut};
use warren_codec::{FieldTable, FieldValue, Reader, ShortStr, Writer};

#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeDefinition {
    pub name: ShortStr,
    pub kind: String,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueDefinition {
    pub name: ShortStr,
    pub auto_delete: bool,
    pub arguments: FieldTable,
    /// A quorum queue's Raft group members (node ids) when its group spans nodes; empty
    /// otherwise (and in blobs written before it could).
    pub members: Vec<u64>,
    /// In a cluster, the node that serves a classic queue (its home): that node holds the
    /// queue, every other node a record forwarding there. None for quorum queues (their
    /// `members` say where they run), on a single node, and in blobs written before homes:
    /// "the node reading it".
    pub home: Option<String>,
}

impl QueueDefinition {
    /// The queue's entry in the definitions blob (and in a journaled change).
    pub fn to_table(&self) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("name", text(&self.name));
        t.insert("auto_delete", FieldValue::Bool(self.auto_delete));
        t.insert("arguments", FieldValue::Table(self.arguments.clone()));
        if !self.members.is_empty() {
            // Node ids are u64; the table keeps them as i64 bit for bit.
            let members = self.members.iter().map(|id| FieldValue::I64(*id as i64));
            t.insert("members", FieldValue::Array(members.collect()));
        }
        if let Some(home) = &self.home {
            t.insert("home", text(home));
        }
        t
    }

    /// The queue in an entry `to_table` wrote; None without a name.
    pub fn from_table(t: &FieldTable) -> Option<QueueDefinition> {
        Some(QueueDefinition {
            name: get_str(t, "name")?,
            auto_delete: get_bool(t, "auto_delete"),
            arguments: get_table(t, "arguments"),
            members: match t.get("members") {
                Some(FieldValue::Array(ids)) => ids
                    .iter()
                    .filter_map(|id| match id {
                        FieldValue::I64(id) => Some(*id as u64),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            },
            home: t
                .get("home")
                .and_then(FieldValue::as_str)
                .map(str::to_owned),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BindingDefinition {
    pub source: ShortStr,
    pub destination: ShortStr,
    /// True when the destination is an exchange (exchange-to-exchange binding).
    pub to_exchange: bool,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

impl ExchangeDefinition {
    /// The exchange's entry as the blob (and a journal record) holds it.
    pub fn to_table(&self) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("name", text(&self.name));
        t.insert("type", text(&self.kind));
        t.insert("auto_delete", FieldValue::Bool(self.auto_delete));
        t.insert("internal", FieldValue::Bool(self.internal));
        t.insert("arguments", FieldValue::Table(self.arguments.clone()));
        t
    }

    pub fn from_table(t: &FieldTable) -> Option<ExchangeDefinition> {
        Some(ExchangeDefinition {
            name: get_str(t, "name")?,
            kind: get_str(t, "type")?.to_string(),
            auto_delete: get_bool(t, "auto_delete"),
            internal: get_bool(t, "internal"),
            arguments: get_table(t, "arguments"),
        })
    }
}

impl BindingDefinition {
    /// The binding's entry as the blob (and a journal record) holds it.
    pub fn to_table(&self) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("source", text(&self.source));
        t.insert("destination", text(&self.destination));
        t.insert("to_exchange", FieldValue::Bool(self.to_exchange));
        t.insert("routing_key", text(&self.routing_key));
        t.insert("arguments", FieldValue::Table(self.arguments.clone()));
        t
    }

    pub fn from_table(t: &FieldTable) -> Option<BindingDefinition> {
        Some(BindingDefinition {
            source: get_str(t, "source")?,
            destination: get_str(t, "destination")?,
            to_exchange: get_bool(t, "to_exchange"),
            routing_key: get_str(t, "routing_key").unwrap_or_default(),
            arguments: get_table(t, "arguments"),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Definitions {
    pub exchanges: Vec<ExchangeDefinition>,
    pub queues: Vec<QueueDefinition>,
    pub bindings: Vec<BindingDefinition>,
    /// Policies and operator policies (`Policy::kind` tells which).
    pub policies: Vec<Policy>,
}

pub(crate) fn text(s: &str) -> FieldValue {
    FieldValue::string(s)
}

pub(crate) fn get_str(t: &FieldTable, key: &str) -> Option<ShortStr> {
    t.get(key)?.as_str().map(ShortStr::from)
}

fn get_bool(t: &FieldTable, key: &str) -> bool {
    t.get(key).and_then(FieldValue::as_bool).unwrap_or(false)
}

pub(crate) fn get_table(t: &FieldTable, key: &str) -> FieldTable {
    match t.get(key) {
        Some(FieldValue::Table(inner)) => inner.clone(),
        _ => FieldTable::new(),
    }
}

pub(crate) fn tables(t: &FieldTable, key: &str) -> Vec<FieldTable> {
    match t.get(key) {
        Some(FieldValue::Array(items)) => items
            .iter()
            .filter_map(|v| match v {
                FieldValue::Table(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Definitions {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        Writer::new(&mut out).table_with(|w| self.write_entries(w));
        out.freeze()
    }

    /// Decodes a blob written by `encode`; entries missing a name are skipped.
    pub fn decode(bytes: &[u8]) -> Result<Definitions, String> {
        let top = Reader::new(Bytes::copy_from_slice(bytes))
            .table()
            .map_err(|e| format!("definitions blob: {e}"))?;
        Ok(Definitions::from_table(&top))
    }

    /// The entries of the table `encode` writes (also one vhost's part of the broker
    /// snapshot), written as they are made: one entity's table at a time, not a table of
    /// every queue (~230 bytes a queue more while a million queues' blob was written).
    pub fn write_entries(&self, w: &mut Writer) {
        w.entry("version", &FieldValue::I32(1));
        w.array_entry("exchanges", |w| {
            for e in &self.exchanges {
                w.value(&FieldValue::Table(e.to_table()));
            }
        });
        w.array_entry("queues", |w| {
            for q in &self.queues {
                w.value(&FieldValue::Table(q.to_table()));
            }
        });
        w.array_entry("bindings", |w| {
            for b in &self.bindings {
                w.value(&FieldValue::Table(b.to_table()));
            }
        });
        w.entry("policies", &encode_policies(&self.policies));
    }

    /// The definitions in a table written by `write_entries`.
    pub fn from_table(top: &FieldTable) -> Definitions {
        let exchanges = tables(top, "exchanges")
            .iter()
            .filter_map(ExchangeDefinition::from_table)
            .collect();
        let queues = tables(top, "queues")
            .iter()
            .filter_map(QueueDefinition::from_table)
            .collect();
        let bindings = tables(top, "bindings")
            .iter()
            .filter_map(BindingDefinition::from_table)
            .collect();
        Definitions {
            exchanges,
            queues,
            bindings,
            policies: decode_policies(top),
        }
    }
}

/// RabbitMQ's runtime-parameter component names for the two kinds.
fn policy_component(kind: PolicyKind) -> &'static str {
    match kind {
        PolicyKind::Policy => "policy",
        PolicyKind::Operator => "operator_policy",
    }
}

/// Policies as an array of tables; the definition is kept as its JSON text, so every
/// value comes back with the JSON type it was set with.
fn encode_policies(policies: &[Policy]) -> FieldValue {
    let items = policies
        .iter()
        .map(|p| {
            let mut t = FieldTable::new();
            t.insert("component", text(policy_component(p.kind)));
            t.insert("vhost", text(&p.vhost));
            t.insert("name", text(&p.name));
            t.insert("pattern", text(&p.pattern));
            t.insert("apply-to", text(p.apply_to.as_str()));
            t.insert("priority", FieldValue::I64(p.priority));
            let definition = serde_json::Value::Object(p.definition.clone()).to_string();
            t.insert("definition", text(&definition));
            FieldValue::Table(t)
        })
        .collect();
    FieldValue::Array(items)
}

/// Policies back from `encode_policies`; one that no longer passes the checks (a newer
/// version stored a key this one does not know) is dropped with an error in the log.
fn decode_policies(top: &FieldTable) -> Vec<Policy> {
    tables(top, "policies")
        .iter()
        .filter_map(|t| {
            let field = |key: &str| t.get(key).and_then(FieldValue::as_str);
            let kind = match field("component")? {
                "operator_policy" => PolicyKind::Operator,
                _ => PolicyKind::Policy,
            };
            let name = field("name")?;
            let definition: serde_json::Value = serde_json::from_str(field("definition")?).ok()?;
            let body = serde_json::json!({
                "pattern": field("pattern")?,
                "apply-to": field("apply-to")?,
                "priority": t.get("priority").and_then(FieldValue::as_integer).unwrap_or(0),
                "definition": definition,
            });
            let vhost = field("vhost").unwrap_or("/");
            match Policy::from_json(kind, vhost, name, &body) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::error!(policy = %name, error = %e, "stored policy refused; dropped");
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut args = FieldTable::new();
        args.insert("x-max-length", FieldValue::I64(10));
        args.insert("x-dead-letter-exchange", text("dlx"));
        let d = Definitions {
            exchanges: vec![ExchangeDefinition {
                name: "ex".into(),
                kind: "topic".into(),
                auto_delete: false,
                internal: true,
                arguments: args.clone(),
            }],
            queues: vec![QueueDefinition {
                name: "q".into(),
                auto_delete: true,
                arguments: args.clone(),
                members: vec![7, u64::MAX],
                home: None,
            }, QueueDefinition {
                name: "classic-elsewhere".into(),
                auto_delete: false,
                arguments: FieldTable::new(),
                members: Vec::new(),
                home: Some("warren@node-2".into()),
            }],
            bindings: vec![BindingDefinition {
                source: "ex".into(),
                destination: "q".into(),
                to_exchange: false,
                routing_key: "a.#".into(),
                arguments: args,
            }],
            policies: vec![
                Policy::new(
                    PolicyKind::Policy,
                    "/",
                    "p",
                    "^q",
                    "queues",
                    3,
                    serde_json::json!({"max-length": 5, "dead-letter-exchange": "dlx", "delivery-limit": -1}),
                )
                .unwrap(),
                Policy::new(
                    PolicyKind::Operator,
                    "/",
                    "o",
                    ".*",
                    "all",
                    -2,
                    serde_json::json!({"message-ttl": 100}),
                )
                .unwrap(),
            ],
        };
        assert_eq!(Definitions::decode(&d.encode()).unwrap(), d);
        assert!(Definitions::decode(b"junk").is_err());
    }
}
