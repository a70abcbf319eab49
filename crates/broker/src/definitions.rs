//! Durable definitions — exchanges, queues and bindings that survive a restart — encoded for
//! the store's definitions blob.
//!
//! The encoding is an AMQP field table (`{"exchanges": [...], "queues": [...], "bindings":
//! [...]}`), written with our own codec: arguments keep every field type exactly, and no
//! second serialization format is needed. docs/STORAGE.md describes the layout.

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

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Definitions {
    pub exchanges: Vec<ExchangeDefinition>,
    pub queues: Vec<QueueDefinition>,
    pub bindings: Vec<BindingDefinition>,
}

fn text(s: &str) -> FieldValue {
    FieldValue::string(s)
}

fn get_str(t: &FieldTable, key: &str) -> Option<ShortStr> {
    t.get(key)?.as_str().map(ShortStr::from)
}

fn get_bool(t: &FieldTable, key: &str) -> bool {
    t.get(key).and_then(FieldValue::as_bool).unwrap_or(false)
}

fn get_table(t: &FieldTable, key: &str) -> FieldTable {
    match t.get(key) {
        Some(FieldValue::Table(inner)) => inner.clone(),
        _ => FieldTable::new(),
    }
}

fn tables(t: &FieldTable, key: &str) -> Vec<FieldTable> {
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
        let exchanges = self
            .exchanges
            .iter()
            .map(|e| {
                let mut t = FieldTable::new();
                t.insert("name", text(&e.name));
                t.insert("type", text(&e.kind));
                t.insert("auto_delete", FieldValue::Bool(e.auto_delete));
                t.insert("internal", FieldValue::Bool(e.internal));
                t.insert("arguments", FieldValue::Table(e.arguments.clone()));
                FieldValue::Table(t)
            })
            .collect();
        let queues = self
            .queues
            .iter()
            .map(|q| {
                let mut t = FieldTable::new();
                t.insert("name", text(&q.name));
                t.insert("auto_delete", FieldValue::Bool(q.auto_delete));
                t.insert("arguments", FieldValue::Table(q.arguments.clone()));
                FieldValue::Table(t)
            })
            .collect();
        let bindings = self
            .bindings
            .iter()
            .map(|b| {
                let mut t = FieldTable::new();
                t.insert("source", text(&b.source));
                t.insert("destination", text(&b.destination));
                t.insert("to_exchange", FieldValue::Bool(b.to_exchange));
                t.insert("routing_key", text(&b.routing_key));
                t.insert("arguments", FieldValue::Table(b.arguments.clone()));
                FieldValue::Table(t)
            })
            .collect();
        let mut top = FieldTable::new();
        top.insert("version", FieldValue::I32(1));
        top.insert("exchanges", FieldValue::Array(exchanges));
        top.insert("queues", FieldValue::Array(queues));
        top.insert("bindings", FieldValue::Array(bindings));
        let mut out = BytesMut::new();
        Writer::new(&mut out).table(&top);
        out.freeze()
    }

    /// Decodes a blob written by `encode`; entries missing a name are skipped.
    pub fn decode(bytes: &[u8]) -> Result<Definitions, String> {
        let top = Reader::new(Bytes::copy_from_slice(bytes))
            .table()
            .map_err(|e| format!("definitions blob: {e}"))?;
        let exchanges = tables(&top, "exchanges")
            .iter()
            .filter_map(|t| {
                Some(ExchangeDefinition {
                    name: get_str(t, "name")?,
                    kind: get_str(t, "type")?.to_string(),
                    auto_delete: get_bool(t, "auto_delete"),
                    internal: get_bool(t, "internal"),
                    arguments: get_table(t, "arguments"),
                })
            })
            .collect();
        let queues = tables(&top, "queues")
            .iter()
            .filter_map(|t| {
                Some(QueueDefinition {
                    name: get_str(t, "name")?,
                    auto_delete: get_bool(t, "auto_delete"),
                    arguments: get_table(t, "arguments"),
                })
            })
            .collect();
        let bindings = tables(&top, "bindings")
            .iter()
            .filter_map(|t| {
                Some(BindingDefinition {
                    source: get_str(t, "source")?,
                    destination: get_str(t, "destination")?,
                    to_exchange: get_bool(t, "to_exchange"),
                    routing_key: get_str(t, "routing_key").unwrap_or_default(),
                    arguments: get_table(t, "arguments"),
                })
            })
            .collect();
        Ok(Definitions {
            exchanges,
            queues,
            bindings,
        })
    }
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
            }],
            bindings: vec![BindingDefinition {
                source: "ex".into(),
                destination: "q".into(),
                to_exchange: false,
                routing_key: "a.#".into(),
                arguments: args,
            }],
        };
        assert_eq!(Definitions::decode(&d.encode()).unwrap(), d);
        assert!(Definitions::decode(b"junk").is_err());
    }
}
