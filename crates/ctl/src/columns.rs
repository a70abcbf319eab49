//! The list commands' columns: rabbitmqctl's info items, their defaults, and where each one
//! is found in the management API's JSON.
//!
//! Warren has no Erlang pids; where rabbitmqctl shows one (`pid` of a connection or channel,
//! a consumer's `channel_pid`, a channel's `connection`), `warren ctl` shows the API's name
//! for that object instead, which is also what `close_connection` takes. Info items that the
//! HTTP API does not carry (a queue's `pid`, `slave_pids`, `disk_reads`…) are refused by name
//! rather than printed empty.

use crate::api::segment;
use crate::exit::CtlError;
use serde_json::Value;

/// Where a column's value comes from.
#[derive(Clone, Copy)]
pub enum Source {
    /// A JSON pointer into the API's object (`/queue/name`).
    Pointer(&'static str),
    /// The same text in every row (a binding's `source_kind` is always `exchange`).
    Constant(&'static str),
    /// An AMQP table at this pointer (arguments, client properties): printed in a table as
    /// rabbitmqctl prints one, as Erlang terms (`output::erlang_terms`), which scripts and
    /// test suites parse (the Java client's reads `{"connection_name","…"}`).
    Table(&'static str),
}

/// One list command: its API path, rabbitmqctl's banner, info items and default columns.
pub struct Listing {
    pub command: &'static str,
    /// Whether the list is per vhost (`-p`).
    pub per_vhost: bool,
    /// Info items in rabbitmqctl's order, each with where the API keeps it.
    pub columns: &'static [(&'static str, Source)],
    /// rabbitmqctl's info items that the HTTP API cannot show.
    pub unavailable: &'static [&'static str],
    pub defaults: &'static [&'static str],
    /// A vhost that is not there lists no rows and succeeds, as rabbitmqctl 3.10.8 does for
    /// queues, exchanges, bindings and consumers (checked side by side; its other list
    /// commands refuse it with 65).
    pub missing_vhost_lists_nothing: bool,
    /// Whether extra arguments name columns (list_users, list_permissions and
    /// list_policies take none, as in rabbitmqctl).
    pub selectable: bool,
}

use Source::{Constant, Pointer, Table};

pub const QUEUES: Listing = Listing {
    command: "list_queues",
    per_vhost: true,
    columns: &[
        ("name", Pointer("/name")),
        ("durable", Pointer("/durable")),
        ("auto_delete", Pointer("/auto_delete")),
        ("arguments", Table("/arguments")),
        ("policy", Pointer("/policy")),
        ("owner_pid", Pointer("/owner_pid_details/name")),
        ("exclusive", Pointer("/exclusive")),
        ("exclusive_consumer_tag", Pointer("/exclusive_consumer_tag")),
        ("messages_ready", Pointer("/messages_ready")),
        (
            "messages_unacknowledged",
            Pointer("/messages_unacknowledged"),
        ),
        ("messages", Pointer("/messages")),
        ("messages_ready_ram", Pointer("/messages_ready_ram")),
        (
            "messages_unacknowledged_ram",
            Pointer("/messages_unacknowledged_ram"),
        ),
        ("messages_ram", Pointer("/messages_ram")),
        ("messages_persistent", Pointer("/messages_persistent")),
        ("message_bytes", Pointer("/message_bytes")),
        ("message_bytes_ready", Pointer("/message_bytes_ready")),
        (
            "message_bytes_unacknowledged",
            Pointer("/message_bytes_unacknowledged"),
        ),
        ("message_bytes_ram", Pointer("/message_bytes_ram")),
        (
            "message_bytes_persistent",
            Pointer("/message_bytes_persistent"),
        ),
        ("head_message_timestamp", Pointer("/head_message_timestamp")),
        ("consumers", Pointer("/consumers")),
        ("consumer_utilisation", Pointer("/consumer_utilisation")),
        ("consumer_capacity", Pointer("/consumer_capacity")),
        ("memory", Pointer("/memory")),
        ("state", Pointer("/state")),
        ("type", Pointer("/type")),
        ("leader", Pointer("/leader")),
        ("members", Pointer("/members")),
        ("online", Pointer("/online")),
    ],
    unavailable: &[
        "pid",
        "exclusive_consumer_pid",
        "disk_reads",
        "disk_writes",
        "slave_pids",
        "synchronised_slave_pids",
    ],
    defaults: &["name", "messages"],
    selectable: true,
    missing_vhost_lists_nothing: true,
};

pub const EXCHANGES: Listing = Listing {
    command: "list_exchanges",
    per_vhost: true,
    columns: &[
        ("name", Pointer("/name")),
        ("type", Pointer("/type")),
        ("durable", Pointer("/durable")),
        ("auto_delete", Pointer("/auto_delete")),
        ("internal", Pointer("/internal")),
        ("arguments", Table("/arguments")),
        ("policy", Pointer("/policy")),
    ],
    unavailable: &[],
    defaults: &["name", "type"],
    selectable: true,
    missing_vhost_lists_nothing: true,
};

pub const BINDINGS: Listing = Listing {
    command: "list_bindings",
    per_vhost: true,
    columns: &[
        ("source_name", Pointer("/source")),
        ("source_kind", Constant("exchange")),
        ("destination_name", Pointer("/destination")),
        ("destination_kind", Pointer("/destination_type")),
        ("routing_key", Pointer("/routing_key")),
        ("arguments", Table("/arguments")),
    ],
    unavailable: &[],
    defaults: &[
        "source_name",
        "source_kind",
        "destination_name",
        "destination_kind",
        "routing_key",
        "arguments",
    ],
    selectable: true,
    missing_vhost_lists_nothing: true,
};

pub const CONNECTIONS: Listing = Listing {
    command: "list_connections",
    per_vhost: false,
    columns: &[
        ("pid", Pointer("/name")),
        ("name", Pointer("/name")),
        ("port", Pointer("/port")),
        ("host", Pointer("/host")),
        ("peer_port", Pointer("/peer_port")),
        ("peer_host", Pointer("/peer_host")),
        ("ssl", Pointer("/ssl")),
        ("ssl_protocol", Pointer("/ssl_protocol")),
        ("ssl_key_exchange", Pointer("/ssl_key_exchange")),
        ("ssl_cipher", Pointer("/ssl_cipher")),
        ("ssl_hash", Pointer("/ssl_hash")),
        ("peer_cert_subject", Pointer("/peer_cert_subject")),
        ("peer_cert_issuer", Pointer("/peer_cert_issuer")),
        ("peer_cert_validity", Pointer("/peer_cert_validity")),
        ("state", Pointer("/state")),
        ("channels", Pointer("/channels")),
        ("protocol", Pointer("/protocol")),
        ("auth_mechanism", Pointer("/auth_mechanism")),
        ("user", Pointer("/user")),
        ("vhost", Pointer("/vhost")),
        ("timeout", Pointer("/timeout")),
        ("frame_max", Pointer("/frame_max")),
        ("channel_max", Pointer("/channel_max")),
        ("client_properties", Table("/client_properties")),
        ("recv_oct", Pointer("/recv_oct")),
        ("recv_cnt", Pointer("/recv_cnt")),
        ("send_oct", Pointer("/send_oct")),
        ("send_cnt", Pointer("/send_cnt")),
        ("send_pend", Pointer("/send_pend")),
        ("connected_at", Pointer("/connected_at")),
    ],
    unavailable: &[],
    defaults: &["user", "peer_host", "peer_port", "state"],
    selectable: true,
    missing_vhost_lists_nothing: false,
};

pub const CHANNELS: Listing = Listing {
    command: "list_channels",
    per_vhost: false,
    columns: &[
        ("pid", Pointer("/name")),
        ("connection", Pointer("/connection_details/name")),
        ("name", Pointer("/name")),
        ("number", Pointer("/number")),
        ("user", Pointer("/user")),
        ("vhost", Pointer("/vhost")),
        ("transactional", Pointer("/transactional")),
        ("confirm", Pointer("/confirm")),
        ("consumer_count", Pointer("/consumer_count")),
        (
            "messages_unacknowledged",
            Pointer("/messages_unacknowledged"),
        ),
        ("messages_uncommitted", Pointer("/messages_uncommitted")),
        ("acks_uncommitted", Pointer("/acks_uncommitted")),
        ("messages_unconfirmed", Pointer("/messages_unconfirmed")),
        ("prefetch_count", Pointer("/prefetch_count")),
        ("global_prefetch_count", Pointer("/global_prefetch_count")),
    ],
    unavailable: &[],
    defaults: &["pid", "user", "consumer_count", "messages_unacknowledged"],
    selectable: true,
    missing_vhost_lists_nothing: false,
};

pub const CONSUMERS: Listing = Listing {
    command: "list_consumers",
    per_vhost: true,
    columns: &[
        ("queue_name", Pointer("/queue/name")),
        ("channel_pid", Pointer("/channel_details/name")),
        ("consumer_tag", Pointer("/consumer_tag")),
        ("ack_required", Pointer("/ack_required")),
        ("prefetch_count", Pointer("/prefetch_count")),
        ("active", Pointer("/active")),
        ("activity_status", Pointer("/activity_status")),
        ("arguments", Table("/arguments")),
    ],
    unavailable: &[],
    // rabbitmqctl leaves activity_status out of the defaults.
    defaults: &[
        "queue_name",
        "channel_pid",
        "consumer_tag",
        "ack_required",
        "prefetch_count",
        "active",
        "arguments",
    ],
    selectable: true,
    missing_vhost_lists_nothing: true,
};

pub const USERS: Listing = Listing {
    command: "list_users",
    per_vhost: false,
    columns: &[("user", Pointer("/name")), ("tags", Pointer("/tags"))],
    unavailable: &[],
    defaults: &["user", "tags"],
    selectable: false,
    missing_vhost_lists_nothing: false,
};

pub const VHOSTS: Listing = Listing {
    command: "list_vhosts",
    per_vhost: false,
    columns: &[
        ("name", Pointer("/name")),
        ("description", Pointer("/description")),
        ("tags", Pointer("/tags")),
        ("default_queue_type", Pointer("/default_queue_type")),
        ("tracing", Pointer("/tracing")),
        ("cluster_state", Pointer("/cluster_state")),
    ],
    unavailable: &[],
    defaults: &["name"],
    selectable: true,
    missing_vhost_lists_nothing: false,
};

pub const PERMISSIONS: Listing = Listing {
    command: "list_permissions",
    per_vhost: true,
    columns: &[
        ("user", Pointer("/user")),
        ("configure", Pointer("/configure")),
        ("write", Pointer("/write")),
        ("read", Pointer("/read")),
    ],
    unavailable: &[],
    defaults: &["user", "configure", "write", "read"],
    selectable: false,
    missing_vhost_lists_nothing: false,
};

pub const POLICIES: Listing = Listing {
    command: "list_policies",
    per_vhost: true,
    columns: &[
        ("vhost", Pointer("/vhost")),
        ("name", Pointer("/name")),
        ("pattern", Pointer("/pattern")),
        ("apply-to", Pointer("/apply-to")),
        ("definition", Pointer("/definition")),
        ("priority", Pointer("/priority")),
    ],
    unavailable: &[],
    defaults: &[
        "vhost",
        "name",
        "pattern",
        "apply-to",
        "definition",
        "priority",
    ],
    selectable: false,
    missing_vhost_lists_nothing: false,
};

impl Listing {
    /// The API path that lists these objects (in `vhost` when the list is per vhost).
    pub fn path(&self, vhost: &str) -> String {
        let collection = match self.command {
            "list_queues" => "queues",
            "list_exchanges" => "exchanges",
            "list_bindings" => "bindings",
            "list_connections" => return "/api/connections".into(),
            "list_channels" => return "/api/channels".into(),
            "list_consumers" => "consumers",
            "list_users" => return "/api/users".into(),
            "list_vhosts" => return "/api/vhosts".into(),
            "list_permissions" => return format!("/api/vhosts/{}/permissions", segment(vhost)),
            "list_policies" => "policies",
            other => unreachable!("no listing {other}"),
        };
        format!("/api/{collection}/{}", segment(vhost))
    }

    /// rabbitmqctl's banner line ("Listing queues for vhost / ...").
    pub fn banner(&self, vhost: &str) -> String {
        match self.command {
            "list_queues" => format!("Listing queues for vhost {vhost} ..."),
            "list_exchanges" => format!("Listing exchanges for vhost {vhost} ..."),
            "list_bindings" => format!("Listing bindings for vhost {vhost}..."),
            "list_connections" => "Listing connections ...".into(),
            "list_channels" => "Listing channels ...".into(),
            "list_consumers" => format!("Listing consumers in vhost {vhost} ..."),
            "list_users" => "Listing users ...".into(),
            "list_vhosts" => "Listing vhosts ...".into(),
            "list_permissions" => format!("Listing permissions for vhost \"{vhost}\" ..."),
            "list_policies" => format!("Listing policies for vhost \"{vhost}\" ..."),
            other => unreachable!("no listing {other}"),
        }
    }

    /// The columns to show for the command's arguments: rabbitmqctl's defaults when there
    /// are none; otherwise each argument split on commas (`name,messages` and
    /// `name messages` both work, as in rabbitmqctl), duplicates dropped.
    pub fn select(&self, args: &[String]) -> Result<Vec<(&'static str, Source)>, CtlError> {
        if !self.selectable && !args.is_empty() {
            return Err(CtlError::usage(format!(
                "too many arguments: {} takes no columns",
                self.command
            )));
        }
        let mut keys: Vec<&str> = args
            .iter()
            .flat_map(|a| a.split(','))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .collect();
        if keys.is_empty() {
            keys = self.defaults.to_vec();
        }
        let mut selected: Vec<(&'static str, Source)> = Vec::new();
        let mut unsupported = Vec::new();
        let mut unavailable = Vec::new();
        for key in keys {
            match self.columns.iter().find(|(name, _)| *name == key) {
                Some(column) if !selected.iter().any(|(name, _)| *name == key) => {
                    selected.push(*column)
                }
                Some(_) => {}
                None if self.unavailable.contains(&key) => unavailable.push(key),
                None => unsupported.push(key),
            }
        }
        if !unsupported.is_empty() {
            // rabbitmqctl's wording and exit code (64) for unknown info keys.
            return Err(CtlError::usage(format!(
                "Info key(s) {} are not supported. {} columns: {}",
                unsupported.join(","),
                self.command,
                self.column_names().join(", ")
            )));
        }
        if !unavailable.is_empty() {
            return Err(CtlError::usage(format!(
                "Info key(s) {} are not available over the HTTP API",
                unavailable.join(",")
            )));
        }
        Ok(selected)
    }

    fn column_names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.columns.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names
    }
}

/// The value of one column in one object of the API's list (`Null` when absent).
pub fn extract(object: &Value, source: Source) -> Value {
    match source {
        Pointer(pointer) | Table(pointer) => {
            object.pointer(pointer).cloned().unwrap_or(Value::Null)
        }
        Constant(text) => Value::String(text.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitCode;
    use serde_json::json;

    fn names(columns: &[(&'static str, Source)]) -> Vec<&'static str> {
        columns.iter().map(|(name, _)| *name).collect()
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_are_rabbitmqctls() {
        assert_eq!(names(&QUEUES.select(&[]).unwrap()), ["name", "messages"]);
        assert_eq!(
            names(&CONNECTIONS.select(&[]).unwrap()),
            ["user", "peer_host", "peer_port", "state"]
        );
        assert!(!names(&CONSUMERS.select(&[]).unwrap()).contains(&"activity_status"));
    }

    #[test]
    fn columns_split_on_commas_and_spaces_without_duplicates() {
        let selected = QUEUES
            .select(&args(&["name,messages_ready", "consumers", "name"]))
            .unwrap();
        assert_eq!(names(&selected), ["name", "messages_ready", "consumers"]);
    }

    #[test]
    fn unknown_columns_are_a_usage_error_naming_them() {
        let err = QUEUES.select(&args(&["name", "bogus,nope"])).err().unwrap();
        assert_eq!(err.code, ExitCode::Usage);
        assert!(err
            .message
            .starts_with("Info key(s) bogus,nope are not supported"));
        let err = QUEUES.select(&args(&["pid"])).err().unwrap();
        assert!(err.message.contains("not available over the HTTP API"));
        let err = USERS.select(&args(&["user"])).err().unwrap();
        assert_eq!(err.code, ExitCode::Usage);
    }

    #[test]
    fn values_come_from_nested_fields_and_constants() {
        let consumer = json!({"queue": {"name": "q1", "vhost": "/"}, "consumer_tag": "c"});
        let (_, queue_name) = CONSUMERS.columns[0];
        assert_eq!(extract(&consumer, queue_name), json!("q1"));
        let binding = json!({"source": "x"});
        assert_eq!(extract(&binding, BINDINGS.columns[1].1), json!("exchange"));
        assert_eq!(extract(&binding, BINDINGS.columns[4].1), Value::Null);
    }

    #[test]
    fn paths_escape_the_vhost() {
        assert_eq!(QUEUES.path("/"), "/api/queues/%2F");
        assert_eq!(PERMISSIONS.path("a b"), "/api/vhosts/a%20b/permissions");
        assert_eq!(CONNECTIONS.path("/"), "/api/connections");
    }
}
