//! The openraft type configuration shared by every queue group: what a log entry carries, what
//! applying it answers, and how members and snapshots are represented.

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

openraft::declare_raft_types!(
    /// The type configuration of queue groups.
    pub QueueRaft:
        D = Proposal,
        R = Reply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<QueueRaft>,
        SnapshotData = Vec<u8>,
        AsyncRuntime = crate::runtime::QuorumRuntime,
);

pub type LogEntry = openraft::Entry<QueueRaft>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Raft = openraft::Raft<QueueRaft>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type StorageError = openraft::StorageError<NodeId>;
/// What a member's openraft reports about its group (term, indexes, membership, and on the
/// leader each member's replication progress); read by the status views.
pub type Metrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;
pub use openraft::ServerState;
