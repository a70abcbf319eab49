//! The broker's whole durable state as the store's one definitions blob: every vhost (its
//! metadata, limits and durable topology) and the user database (users with their password
//! hashes and tags, permissions, topic permissions). docs/STORAGE.md §2 describes the layout.
//!
//! Runtime parameters (vhost-scoped and global, the cluster name among them) are kept too; a
//! blob from before they were has none.
//!
//! A vhost's firehose flag is kept too, for the cluster's metadata snapshots (which are
//! these blobs): a node brought to one traces as the others do. A node's boot from its own
//! blob leaves tracing off, as RabbitMQ's does (`Broker::recover`).
//!
//! Version 1 blobs (before vhosts) held one vhost's `Definitions`; they decode as vhost "/"
//! with no user database, which the broker then treats as a first boot for users.

use crate::access::{Permission, TopicPermission, User, UserLimits};
use crate::definitions::{get_str, get_table, tables, text, Definitions};
use crate::parameters::Parameter;
use crate::vhost::{VHostLimits, VHostMetadata};
use bytes::{Bytes, BytesMut};
use warren_codec::{FieldTable, FieldValue, Reader, Writer};

const VERSION: i32 = 2;

#[derive(Debug, Clone, PartialEq)]
pub struct VHostSnapshot {
    pub name: String,
    pub metadata: VHostMetadata,
    pub limits: VHostLimits,
    /// The firehose is on (written only when it is, so blobs of untraced vhosts are those of
    /// before the flag existed).
    pub tracing: bool,
    pub definitions: Definitions,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccessSnapshot {
    pub users: Vec<User>,
    /// (vhost, user, permission)
    pub permissions: Vec<(String, String, Permission)>,
    /// (vhost, user, topic permission)
    pub topic_permissions: Vec<(String, String, TopicPermission)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub vhosts: Vec<VHostSnapshot>,
    /// None in a version 1 blob.
    pub access: Option<AccessSnapshot>,
    /// Vhost-scoped runtime parameters.
    pub parameters: Vec<Parameter>,
    /// Global runtime parameters as (name, JSON text).
    pub global_parameters: Vec<(String, String)>,
}

/// A text field at any length (descriptions, permission patterns and parameter values may be
/// longer than a short string's 255 bytes).
fn string(t: &FieldTable, key: &str) -> String {
    t.get(key)
        .and_then(FieldValue::as_str)
        .map(str::to_owned)
        .unwrap_or_default()
}

fn strings(t: &FieldTable, key: &str) -> Vec<String> {
    match t.get(key) {
        Some(FieldValue::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn string_array(items: &[String]) -> FieldValue {
    FieldValue::Array(items.iter().map(|s| text(s)).collect())
}

fn limit(t: &FieldTable, key: &str) -> Option<u32> {
    t.get(key)?.as_i64().and_then(|n| u32::try_from(n).ok())
}

fn table(entries: &[(&str, FieldValue)]) -> FieldValue {
    let mut t = FieldTable::new();
    for (k, v) in entries {
        t.insert(*k, v.clone());
    }
    FieldValue::Table(t)
}

impl Snapshot {
    /// The blob: written as it is made, each vhost's definitions one entity at a time
    /// (`Definitions::write_entries`), so that encoding a million queues does not first
    /// build a field table of them all.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        Writer::new(&mut out).table_with(|w| {
            w.entry("version", &FieldValue::I32(VERSION));
            w.array_entry("vhosts", |w| {
                for v in &self.vhosts {
                    w.table_value(|w| {
                        for (key, value) in Self::vhost_entries(v).iter() {
                            w.entry(key, value);
                        }
                        w.table_entry("definitions", |w| v.definitions.write_entries(w));
                    });
                }
            });
            for (key, value) in self.access_and_parameters().iter() {
                w.entry(key, value);
            }
        });
        out.freeze()
    }

    /// A vhost's entries in the blob but its definitions (written after them).
    fn vhost_entries(v: &VHostSnapshot) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("name", text(&v.name));
        t.insert("description", text(&v.metadata.description));
        t.insert("tags", string_array(&v.metadata.tags));
        if let Some(n) = v.limits.max_connections {
            t.insert("max_connections", FieldValue::I64(n.into()));
        }
        if let Some(n) = v.limits.max_queues {
            t.insert("max_queues", FieldValue::I64(n.into()));
        }
        if v.tracing {
            t.insert("tracing", FieldValue::Bool(true));
        }
        t
    }

    /// The blob's entries after its vhosts: the user database and the runtime parameters.
    fn access_and_parameters(&self) -> FieldTable {
        let mut top = FieldTable::new();
        if let Some(access) = &self.access {
            let users = access
                .users
                .iter()
                .map(|u| {
                    let mut t = FieldTable::new();
                    t.insert("name", text(&u.name));
                    t.insert("password_hash", text(&u.password_hash));
                    t.insert("hashing_algorithm", text(&u.hashing_algorithm));
                    t.insert("tags", string_array(&u.tags));
                    if let Some(n) = u.limits.max_connections {
                        t.insert("max_connections", FieldValue::I64(n.into()));
                    }
                    if let Some(n) = u.limits.max_channels {
                        t.insert("max_channels", FieldValue::I64(n.into()));
                    }
                    FieldValue::Table(t)
                })
                .collect();
            let permissions = access
                .permissions
                .iter()
                .map(|(vhost, user, p)| {
                    table(&[
                        ("vhost", text(vhost)),
                        ("user", text(user)),
                        ("configure", text(&p.configure)),
                        ("write", text(&p.write)),
                        ("read", text(&p.read)),
                    ])
                })
                .collect();
            let topic_permissions = access
                .topic_permissions
                .iter()
                .map(|(vhost, user, p)| {
                    table(&[
                        ("vhost", text(vhost)),
                        ("user", text(user)),
                        ("exchange", text(&p.exchange)),
                        ("write", text(&p.write)),
                        ("read", text(&p.read)),
                    ])
                })
                .collect();
            top.insert("users", FieldValue::Array(users));
            top.insert("permissions", FieldValue::Array(permissions));
            top.insert("topic_permissions", FieldValue::Array(topic_permissions));
        }
        let parameters = self
            .parameters
            .iter()
            .map(|p| {
                table(&[
                    ("vhost", text(&p.vhost)),
                    ("component", text(&p.component)),
                    ("name", text(&p.name)),
                    ("value", text(&p.value_json)),
                ])
            })
            .collect();
        let global_parameters = self
            .global_parameters
            .iter()
            .map(|(name, value)| table(&[("name", text(name)), ("value", text(value))]))
            .collect();
        top.insert("parameters", FieldValue::Array(parameters));
        top.insert("global_parameters", FieldValue::Array(global_parameters));
        top
    }

    pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
        Self::decode_versioned(bytes).map(|(snapshot, _)| snapshot)
    }

    /// As `decode`, and whether the blob is in the current version (one written by this
    /// build needs no rewrite at boot).
    pub fn decode_versioned(bytes: &[u8]) -> Result<(Snapshot, bool), String> {
        let top = Reader::new(Bytes::copy_from_slice(bytes))
            .table()
            .map_err(|e| format!("definitions blob: {e}"))?;
        let version = top.get("version").and_then(FieldValue::as_i64).unwrap_or(1);
        let current = version == i64::from(VERSION);
        Self::from_top(top, version).map(|snapshot| (snapshot, current))
    }

    fn from_top(top: FieldTable, version: i64) -> Result<Snapshot, String> {
        if version < 2 {
            return Ok(Snapshot {
                vhosts: vec![VHostSnapshot {
                    name: "/".into(),
                    metadata: VHostMetadata::default(),
                    limits: VHostLimits::default(),
                    tracing: false,
                    definitions: Definitions::from_table(&top),
                }],
                access: None,
                ..Snapshot::default()
            });
        }
        let vhosts = tables(&top, "vhosts")
            .iter()
            .filter_map(|t| {
                Some(VHostSnapshot {
                    name: get_str(t, "name")?.to_string(),
                    metadata: VHostMetadata {
                        description: string(t, "description"),
                        tags: strings(t, "tags"),
                    },
                    limits: VHostLimits {
                        max_connections: limit(t, "max_connections"),
                        max_queues: limit(t, "max_queues"),
                    },
                    tracing: matches!(t.get("tracing"), Some(FieldValue::Bool(true))),
                    definitions: Definitions::from_table(&get_table(t, "definitions")),
                })
            })
            .collect();
        let users = tables(&top, "users")
            .iter()
            .filter_map(|t| {
                Some(User {
                    name: get_str(t, "name")?.to_string(),
                    password_hash: string(t, "password_hash"),
                    hashing_algorithm: string(t, "hashing_algorithm"),
                    tags: strings(t, "tags"),
                    limits: UserLimits {
                        max_connections: limit(t, "max_connections"),
                        max_channels: limit(t, "max_channels"),
                    },
                })
            })
            .collect();
        let permissions = tables(&top, "permissions")
            .iter()
            .map(|t| {
                let p = Permission {
                    configure: string(t, "configure"),
                    write: string(t, "write"),
                    read: string(t, "read"),
                };
                (string(t, "vhost"), string(t, "user"), p)
            })
            .collect();
        let topic_permissions = tables(&top, "topic_permissions")
            .iter()
            .map(|t| {
                let p = TopicPermission {
                    exchange: string(t, "exchange"),
                    write: string(t, "write"),
                    read: string(t, "read"),
                };
                (string(t, "vhost"), string(t, "user"), p)
            })
            .collect();
        let parameters = tables(&top, "parameters")
            .iter()
            .map(|t| Parameter {
                vhost: string(t, "vhost"),
                component: string(t, "component"),
                name: string(t, "name"),
                value_json: string(t, "value"),
            })
            .collect();
        let global_parameters = tables(&top, "global_parameters")
            .iter()
            .map(|t| (string(t, "name"), string(t, "value")))
            .collect();
        Ok(Snapshot {
            vhosts,
            access: Some(AccessSnapshot {
                users,
                permissions,
                topic_permissions,
            }),
            parameters,
            global_parameters,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definitions::QueueDefinition;

    #[test]
    fn round_trip() {
        let snapshot = Snapshot {
            vhosts: vec![VHostSnapshot {
                name: "prod".into(),
                metadata: VHostMetadata {
                    description: "d".repeat(400),
                    tags: vec!["t".into()],
                },
                limits: VHostLimits {
                    max_connections: Some(3),
                    max_queues: None,
                },
                tracing: true,
                definitions: Definitions {
                    queues: vec![QueueDefinition {
                        name: "q".into(),
                        auto_delete: false,
                        arguments: FieldTable::new(),
                        members: Vec::new(),
                        home: Some("warren@elsewhere".into()),
                    }],
                    ..Definitions::default()
                },
            }],
            access: Some(AccessSnapshot {
                users: vec![User {
                    name: "u".into(),
                    password_hash: "h".into(),
                    hashing_algorithm: "rabbit_password_hashing_sha256".into(),
                    tags: vec!["administrator".into()],
                    limits: UserLimits {
                        max_connections: Some(3),
                        max_channels: None,
                    },
                }],
                permissions: vec![(
                    "prod".into(),
                    "u".into(),
                    Permission {
                        configure: format!("^({})$", ["queue"; 80].join("|")),
                        write: ".*".into(),
                        read: ".*".into(),
                    },
                )],
                topic_permissions: vec![(
                    "prod".into(),
                    "u".into(),
                    TopicPermission {
                        exchange: "amq.topic".into(),
                        write: "^a".into(),
                        read: "".into(),
                    },
                )],
            }),
            parameters: vec![Parameter {
                vhost: "prod".into(),
                component: "federation-upstream".into(),
                name: "up".into(),
                value_json: format!(r#"{{"uri":"amqp://{}"}}"#, "h".repeat(300)),
            }],
            global_parameters: vec![("cluster_name".into(), r#""east""#.into())],
        };
        assert_eq!(Snapshot::decode(&snapshot.encode()).unwrap(), snapshot);
    }

    #[test]
    fn version_1_blob_is_the_default_vhost() {
        let v1 = Definitions {
            queues: vec![QueueDefinition {
                name: "old".into(),
                auto_delete: false,
                arguments: FieldTable::new(),
                members: Vec::new(),
                home: None,
            }],
            ..Definitions::default()
        };
        let snapshot = Snapshot::decode(&v1.encode()).unwrap();
        assert_eq!(snapshot.vhosts.len(), 1);
        assert_eq!(snapshot.vhosts[0].name, "/");
        assert_eq!(snapshot.vhosts[0].definitions, v1);
        assert!(snapshot.access.is_none());
        assert!(snapshot.parameters.is_empty() && snapshot.global_parameters.is_empty());
    }
}
