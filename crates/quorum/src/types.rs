//! The openraft type configuration shared by every queue group: what a log entry carries, what
//! applying it answers, and how members and snapshots are represented.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::machine::{Command, Reply};

/// Identifies one Raft group (one quorum queue) on every node; the metadata layer maps queue
/// names to group ids.
pub type GroupId = u64;

/// Identifies a node of the cluster.
pub type NodeId = u64;

/// The payload of a normal log entry: a queue command and the time the proposer stamped on it.
/// The time travels in the log so every replica applies TTLs identically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub now_ms: u64,
    pub command: Command,
}

impl fmt::Display for Proposal {
    /// A short form for openraft's logs: the command's kind, not its payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.command {
            Command::Enqueue { .. } => "enqueue",
            Command::Checkout { .. } => "checkout",
            Command::Cancel { .. } => "cancel",
            Command::Settle { .. } => "settle",
            Command::Return { .. } => "return",
            Command::Discard { .. } => "discard",
            Command::Purge => "purge",
            Command::Tick => "tick",
            Command::PublisherDown { .. } => "publisher-down",
            Command::SetConfig(_) => "set-config",
            Command::Suspend { .. } => "suspend",
            Command::Batch(commands) => return write!(f, "batch of {}", commands.len()),
            Command::Release { .. } => "release",
            Command::Metadata(_) => "metadata",
            Command::SetDeadLetterAtLeastOnce(_) => "set-dead-letter-at-least-once",
            Command::SettleDeadLetters { .. } => "settle-dead-letters",
            Command::ReleaseDisconnected { .. } => "release-disconnected",
            Command::Disconnect { .. } => "disconnect",
        };
        f.write_str(kind)
    }
}

openraft::declare_raft_types!(
    /// The type configuration of queue groups (and of the metadata group).
    pub QueueRaft:
        D = Proposal,
        R = Reply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        AsyncRuntime = crate::runtime::QuorumRuntime,
);

pub type LogEntry = openraft::alias::EntryOf<QueueRaft>;
pub type LogId = openraft::alias::LogIdOf<QueueRaft>;
pub type Vote = openraft::alias::VoteOf<QueueRaft>;
pub use crate::storage::Raft;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<QueueRaft>;
/// A whole snapshot: its meta and the state machine's bytes.
pub type Snapshot = openraft::alias::SnapshotOf<QueueRaft, Vec<u8>>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<QueueRaft>;
pub type StorageError = openraft::StorageError<QueueRaft>;
/// What a member's openraft reports about its group (term, indexes, membership, and on the
/// leader each member's replication progress); read by the status views.
pub type Metrics = openraft::RaftMetrics<QueueRaft>;
/// A group's server metrics: vote, state, leader, membership (they change only with those).
pub type ServerMetrics = openraft::metrics::RaftServerMetrics<QueueRaft>;
/// A watch of a member's [`Metrics`] (or of a part of them).
pub type MetricsWatch<T> = crate::watch::OrderedWatchReceiver<T>;
pub use openraft::ServerState;
