//! `DefinitionOp`: one change of definitions (vhosts, users, permissions, policies,
//! parameters, exchanges, queues, bindings) as a value, and `Outcome`, what applying it
//! answers. Both encode to bytes (a versioned JSON envelope) because in a cluster an op is
//! proposed to the metadata Raft group, every node applies it in log order, and the
//! proposing node gets its result back as bytes (`replication.rs`).
//!
//! Ops are deterministic: whatever a node chooses (a server-named queue's name, a password's
//! salt) is chosen before the op is built and carried in it, so every node applying the
//! same op reaches the same state. Clear-text passwords never appear in an op: a user op
//! carries the hash.

use crate::access::{Permission, TopicPermission, UserLimits};
use crate::connection_id::ConnectionId;
use crate::error::AmqpError;
use crate::policy::PolicyKind;
use crate::vhost::{VHostLimits, VHostMetadata};
use base64::Engine;
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use warren_codec::{FieldTable, Reader, ReplyCode, ShortStr, Writer};

/// The encoding's version; a node refuses ops of a version it does not know (the op's
/// result then says so) rather than guessing.
pub const OP_VERSION: u32 = 1;

/// Which of a vhost's two policy lists an op is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyList {
    Policy,
    Operator,
}

impl PolicyList {
    pub fn of(kind: PolicyKind) -> PolicyList {
        match kind {
            PolicyKind::Policy => PolicyList::Policy,
            PolicyKind::Operator => PolicyList::Operator,
        }
    }

    pub fn kind(self) -> PolicyKind {
        match self {
            PolicyList::Policy => PolicyKind::Policy,
            PolicyList::Operator => PolicyKind::Operator,
        }
    }
}

/// One definitions change. Names are as the client gave them (CR/LF already stripped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum DefinitionOp {
    /// Creates the vhost if missing (idempotent); a new one gives `grant_full_to` (the user
    /// who created it through the HTTP API, as RabbitMQ) every permission on it.
    VhostAdd {
        name: String,
        grant_full_to: Option<String>,
    },
    VhostSetMetadata {
        name: String,
        description: String,
        tags: Vec<String>,
    },
    VhostSetLimits {
        name: String,
        max_connections: Option<u32>,
        max_queues: Option<u32>,
    },
    /// Turns the vhost's firehose on or off (`rabbitmqctl trace_on`/`trace_off`, the HTTP
    /// API's `tracing`). RabbitMQ's flag is per node; as an op every node of a cluster
    /// applies, it is the cluster's. (Added after version 1's first ops: older logs simply
    /// hold none.)
    VhostSetTracing {
        name: String,
        tracing: bool,
    },
    /// Deletes the vhost with everything in it; each node closes its own connections to it.
    VhostDelete {
        name: String,
    },
    /// Creates or replaces a user. An empty hash is a user without a password.
    UserPut {
        name: String,
        password_hash: String,
        hashing_algorithm: String,
        tags: Vec<String>,
    },
    UserDelete {
        name: String,
    },
    /// Replaces a user's limits (`None`: no limit).
    UserSetLimits {
        name: String,
        max_connections: Option<u32>,
        max_channels: Option<u32>,
    },
    PermissionSet {
        vhost: String,
        user: String,
        configure: String,
        write: String,
        read: String,
    },
    PermissionClear {
        vhost: String,
        user: String,
    },
    TopicPermissionSet {
        vhost: String,
        user: String,
        exchange: String,
        write: String,
        read: String,
    },
    /// Clears the topic permission for `exchange`, or all of (vhost, user)'s when `None`.
    TopicPermissionClear {
        vhost: String,
        user: String,
        exchange: Option<String>,
    },
    /// Sets a policy from its JSON body (`pattern`, `definition`, `priority`, `apply-to`),
    /// validated again where it is applied (validation is deterministic).
    PolicySet {
        list: PolicyList,
        vhost: String,
        name: String,
        body_json: String,
    },
    PolicyClear {
        list: PolicyList,
        vhost: String,
        name: String,
    },
    ParameterSet {
        vhost: String,
        component: String,
        name: String,
        value_json: String,
    },
    ParameterClear {
        vhost: String,
        component: String,
        name: String,
    },
    GlobalParameterSet {
        name: String,
        value_json: String,
    },
    GlobalParameterClear {
        name: String,
    },
    /// Changes nothing. Committed through the metadata log, it tells its node that every
    /// change committed before it is applied here: a read barrier, before an answer that
    /// rests on something being absent (an HTTP DELETE's 404, which clients take as "already
    /// gone") — else a node behind the log would deny what another node acknowledged.
    Barrier,
    ExchangeDeclare {
        vhost: String,
        name: String,
        kind: String,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        #[serde(with = "table_base64")]
        arguments: FieldTable,
    },
    /// `if_unused` looks at the exchange's bindings, which are replicated: it is checked
    /// where the op is applied.
    ExchangeDelete {
        vhost: String,
        name: String,
        if_unused: bool,
    },
    /// A non-passive queue.declare. `server_named`: the `amq.gen-` name was chosen by the
    /// proposing node. `connection` is the declaring connection on the node that built the
    /// op, which only exclusive queues (never replicated: see `replication.rs`) look at; a
    /// replicated op carries 0, "no connection". `home`: the node that serves a new
    /// classic queue (chosen by the proposing node, `Broker::queue_home`); every other node
    /// holds a remote record of it. None (a single node, an op logged before homes) is "the
    /// node applying it".
    QueueDeclare {
        vhost: String,
        name: String,
        server_named: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        #[serde(with = "table_base64")]
        arguments: FieldTable,
        connection: ConnectionId,
        /// A quorum queue's Raft group members (node ids), chosen by the proposing node
        /// (`Broker::change`), the declaring node first; empty for other queues, on a single
        /// node, and in ops logged before groups spanned nodes (each node then runs a group
        /// of its own, as it did).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        members: Vec<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        home: Option<String>,
    },
    /// A quorum queue's Raft group members (node ids) after its group's membership changed:
    /// a forgotten node removed (`forget_cluster_node`), a node added (`grow_quorum_queues`).
    /// Recorded so every node's definitions, what the API shows on a node that is no member,
    /// and what a restarted node starts the queue with agree with the group; a node now
    /// listed that ran no member of the group starts one (`QuorumQueue::set_members`).
    QueueSetMembers {
        vhost: String,
        name: String,
        members: Vec<u64>,
    },
    /// Removes a queue. queue.delete's `if-unused`/`if-empty` look at the queue's live
    /// consumers and messages, which are node-local: they are checked before the op is
    /// built (`VHost::check_queue_delete`), not here.
    QueueDelete {
        vhost: String,
        name: String,
        connection: ConnectionId,
    },
    QueueBind {
        vhost: String,
        queue: String,
        exchange: String,
        routing_key: String,
        #[serde(with = "table_base64")]
        arguments: FieldTable,
        connection: ConnectionId,
    },
    QueueUnbind {
        vhost: String,
        queue: String,
        exchange: String,
        routing_key: String,
        #[serde(with = "table_base64")]
        arguments: FieldTable,
        connection: ConnectionId,
    },
    ExchangeBind {
        vhost: String,
        destination: String,
        source: String,
        routing_key: String,
        #[serde(with = "table_base64")]
        arguments: FieldTable,
    },
    ExchangeUnbind {
        vhost: String,
        destination: String,
        source: String,
        routing_key: String,
        #[serde(with = "table_base64")]
        arguments: FieldTable,
    },
}

/// What applying an op answers on success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Done,
    /// A create-or-replace: whether it created (the HTTP API's 201 rather than 204).
    Put {
        created: bool,
    },
    /// A delete or clear: whether there was something (the HTTP API's 404 when not).
    Removed {
        existed: bool,
    },
    /// queue.declare-ok's fields, as the applying node sees the queue, and whether the
    /// declaration created it.
    QueueDeclared {
        name: String,
        created: bool,
        message_count: u32,
        consumer_count: u32,
    },
    /// queue.delete-ok's message count.
    QueueDeleted {
        message_count: u32,
    },
}

impl Outcome {
    /// False for a put or a queue declaration that found what it asked for already there.
    pub fn created(&self) -> bool {
        !matches!(
            self,
            Outcome::Put { created: false } | Outcome::QueueDeclared { created: false, .. }
        )
    }

    /// False for a removal that found nothing to remove.
    pub fn existed(&self) -> bool {
        !matches!(self, Outcome::Removed { existed: false })
    }
}

#[derive(Serialize, Deserialize)]
struct OpEnvelope {
    v: u32,
    #[serde(flatten)]
    op: DefinitionOp,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ResultEnvelope {
    Ok(Outcome),
    Err { code: u16, text: String },
}

impl DefinitionOp {
    /// A named, non-exclusive queue declared outside any connection (the HTTP API, a
    /// definitions import, the cluster simulation): its placement (members, home) is left to
    /// `Broker::change`.
    pub fn declare_named_queue(
        vhost: &str,
        name: &str,
        durable: bool,
        auto_delete: bool,
        arguments: FieldTable,
    ) -> DefinitionOp {
        DefinitionOp::QueueDeclare {
            vhost: vhost.to_owned(),
            name: name.to_owned(),
            server_named: false,
            durable,
            exclusive: false,
            auto_delete,
            arguments,
            connection: 0,
            members: Vec::new(),
            home: None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let envelope = OpEnvelope {
            v: OP_VERSION,
            op: self.clone(),
        };
        serde_json::to_vec(&envelope).expect("an op always serializes")
    }

    /// The op in `bytes`; an error (541, as a broker fault) for bytes that are not one or
    /// are of another version.
    pub fn decode(bytes: &[u8]) -> Result<DefinitionOp, AmqpError> {
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| internal(format!("undecodable definitions op: {e}")))?;
        match value.get("v").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(OP_VERSION) => {}
            other => {
                return Err(internal(format!(
                    "definitions op of unknown version {other:?} (this node knows {OP_VERSION})"
                )))
            }
        }
        let envelope: OpEnvelope = serde_json::from_value(value)
            .map_err(|e| internal(format!("undecodable definitions op: {e}")))?;
        Ok(envelope.op)
    }

    /// The vhost the op is about, when it is about one.
    pub fn vhost(&self) -> Option<&str> {
        use DefinitionOp::*;
        match self {
            VhostAdd { name, .. }
            | VhostSetMetadata { name, .. }
            | VhostSetLimits { name, .. }
            | VhostSetTracing { name, .. }
            | VhostDelete { name } => Some(name),
            PermissionSet { vhost, .. }
            | PermissionClear { vhost, .. }
            | TopicPermissionSet { vhost, .. }
            | TopicPermissionClear { vhost, .. }
            | PolicySet { vhost, .. }
            | PolicyClear { vhost, .. }
            | ParameterSet { vhost, .. }
            | ParameterClear { vhost, .. }
            | ExchangeDeclare { vhost, .. }
            | ExchangeDelete { vhost, .. }
            | QueueDeclare { vhost, .. }
            | QueueDelete { vhost, .. }
            | QueueSetMembers { vhost, .. }
            | QueueBind { vhost, .. }
            | QueueUnbind { vhost, .. }
            | ExchangeBind { vhost, .. }
            | ExchangeUnbind { vhost, .. } => Some(vhost),
            UserPut { .. } | UserDelete { .. } | UserSetLimits { .. } => None,
            GlobalParameterSet { .. } => None,
            GlobalParameterClear { .. } | Barrier => None,
        }
    }

    /// The op as another node applies it: the proposing node's connection id means nothing
    /// there (0 is "no connection").
    pub fn without_connection(mut self) -> DefinitionOp {
        use DefinitionOp::*;
        match &mut self {
            QueueDeclare { connection, .. }
            | QueueDelete { connection, .. }
            | QueueBind { connection, .. }
            | QueueUnbind { connection, .. } => *connection = 0,
            _ => {}
        }
        self
    }

    pub fn permission_set(vhost: &str, user: &str, p: Permission) -> DefinitionOp {
        DefinitionOp::PermissionSet {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            configure: p.configure,
            write: p.write,
            read: p.read,
        }
    }

    pub fn topic_permission_set(vhost: &str, user: &str, p: TopicPermission) -> DefinitionOp {
        DefinitionOp::TopicPermissionSet {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            exchange: p.exchange,
            write: p.write,
            read: p.read,
        }
    }

    /// Sets a checked policy (its listing JSON is a body it validates from again).
    pub fn policy_set(policy: &crate::policy::Policy) -> DefinitionOp {
        DefinitionOp::PolicySet {
            list: PolicyList::of(policy.kind),
            vhost: policy.vhost.clone(),
            name: policy.name.clone(),
            body_json: policy.to_json().to_string(),
        }
    }

    pub fn vhost_set_limits(name: &str, limits: VHostLimits) -> DefinitionOp {
        DefinitionOp::VhostSetLimits {
            name: name.to_owned(),
            max_connections: limits.max_connections,
            max_queues: limits.max_queues,
        }
    }

    pub fn user_set_limits(name: &str, limits: UserLimits) -> DefinitionOp {
        DefinitionOp::UserSetLimits {
            name: name.to_owned(),
            max_connections: limits.max_connections,
            max_channels: limits.max_channels,
        }
    }

    pub fn vhost_set_metadata(name: &str, metadata: VHostMetadata) -> DefinitionOp {
        DefinitionOp::VhostSetMetadata {
            name: name.to_owned(),
            description: metadata.description,
            tags: metadata.tags,
        }
    }
}

/// Encodes what applying an op answered, for the proposing node.
pub fn encode_result(result: &Result<Outcome, AmqpError>) -> Vec<u8> {
    let envelope = match result {
        Ok(outcome) => ResultEnvelope::Ok(outcome.clone()),
        Err(e) => ResultEnvelope::Err {
            code: e.code as u16,
            text: e.text.clone(),
        },
    };
    serde_json::to_vec(&envelope).expect("a result always serializes")
}

/// The result in `bytes`: what the op answered, or a 541 when the bytes are not a result.
pub fn decode_result(bytes: &[u8]) -> Result<Outcome, AmqpError> {
    match serde_json::from_slice::<ResultEnvelope>(bytes) {
        Ok(ResultEnvelope::Ok(outcome)) => Ok(outcome),
        Ok(ResultEnvelope::Err { code, text }) => Err(AmqpError::new(
            reply_code(code).unwrap_or(ReplyCode::InternalError),
            text,
        )),
        Err(e) => Err(internal(format!("undecodable definitions op result: {e}"))),
    }
}

fn internal(text: String) -> AmqpError {
    AmqpError::new(ReplyCode::InternalError, text)
}

/// The reply code numbered `code`.
fn reply_code(code: u16) -> Option<ReplyCode> {
    use ReplyCode::*;
    [
        ReplySuccess,
        ContentTooLarge,
        NoRoute,
        NoConsumers,
        ConnectionForced,
        InvalidPath,
        AccessRefused,
        NotFound,
        ResourceLocked,
        PreconditionFailed,
        FrameError,
        SyntaxError,
        CommandInvalid,
        ChannelError,
        UnexpectedFrame,
        ResourceError,
        NotAllowed,
        NotImplemented,
        InternalError,
    ]
    .into_iter()
    .find(|c| *c as u16 == code)
}

/// A field table as base64 of its AMQP encoding: every field type survives (JSON has no
/// signed-byte or decimal), and the codec already has both directions.
mod table_base64 {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(table: &FieldTable, s: S) -> Result<S::Ok, S::Error> {
        let mut out = BytesMut::new();
        Writer::new(&mut out).table(table);
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&out))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<FieldTable, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        Reader::new(Bytes::from(bytes))
            .table()
            .map_err(serde::de::Error::custom)
    }
}

/// A name as the codec's short string (names in ops were short strings on the wire).
pub(crate) fn short(name: &str) -> ShortStr {
    ShortStr::from(name)
}

#[cfg(test)]
mod tests;
