//! The cluster's metadata group: one Raft group per cluster (id [`METADATA_GROUP`]) whose log
//! is an ordered list of opaque operations that the application applies through its
//! [`MetadataMachine`] — the broker's definitions (vhosts, users, permissions, policies,
//! exchanges, bindings, queues) in the same order on every node.
//!
//! It is a group like the queue groups: its log in the node's shared WAL, its Raft RPCs over the
//! node's transport, snapshots written before the log they cover is purged and sent whole to a
//! member that fell behind the purge, and its failures handled by the node-level failure
//! detector. What sets it apart:
//!
//! - [`MetadataGroup::propose`] works on any member: a follower forwards the operation to the
//!   leader over the transport ([`RaftRequest::ClientWrite`]) and returns once the operation is
//!   committed *and applied on this node*, so a caller sees its own change locally afterwards.
//! - Its membership is the cluster's: every member is recorded with its node name and cluster
//!   address ([`MemberInfo`]), so every node learns where the others listen from the log; nodes
//!   are added (as a learner that catches up, then a voter) and removed with
//!   [`MetadataGroup::add_member`] / [`MetadataGroup::remove_member`], also from any member.
//!
//! A proposal whose answer was lost (the leader died after committing it, before answering) is
//! retried on the next leader and then applied twice: operations should be idempotent, as
//! declaring or deleting a definition is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use std::any::Any;

use bytes::Bytes;
use openraft::{BasicNode, ServerState};

use crate::error::QuorumError;
pub use crate::leader::METADATA_OP_TIMEOUT;
use crate::leader::{raft_error, serve_here};
use crate::machine::{Command, Effect, Reply};
pub use crate::member::{MemberChange, MemberInfo};
use crate::network::{RaftRequest, RaftResponse, Transport, TransportError};
use crate::storage::{GroupMachine, GroupStateMachine};
use crate::types::{GroupId, LogId, NodeId, Proposal, Raft};

/// The metadata group's id on every node. Queue groups' ids are hashes of their names; one of
/// them being 0 has odds of 2^-64.
pub const METADATA_GROUP: GroupId = 0;

/// Between attempts while the group has no reachable leader.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The application's replicated state: what the metadata group's log means. Called on every
/// member in log order; `apply` must be deterministic (same operations, same state, same
/// answers) and must not block for long (it runs inside the group's apply step).
pub trait MetadataMachine: Send + Sync + 'static {
    /// Applies the operation committed at log position `index`; returns the proposer's answer.
    fn apply(&self, index: u64, op: &[u8]) -> Vec<u8>;
    /// The whole state, for a snapshot.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole state with a snapshot's (at start-up, or sent by the leader).
    fn restore(&self, snapshot: &[u8]) -> Result<(), String>;
}

/// The group machine over the application's [`MetadataMachine`].
pub struct MetadataState(Arc<dyn MetadataMachine>);

impl MetadataState {
    pub fn new(machine: Arc<dyn MetadataMachine>) -> Self {
        Self(machine)
    }
}

impl GroupMachine for MetadataState {
    fn apply(&mut self, log_id: LogId, _now_ms: u64, command: Command) -> (Reply, Vec<Effect>) {
        match command {
            Command::Metadata(op) => (
                Reply::Metadata(Bytes::from(self.0.apply(log_id.index, &op))),
                Vec::new(),
            ),
            // A queue command in the metadata log changes nothing.
            _ => (Reply::Rejected, Vec::new()),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0.restore(snapshot)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One member of the metadata group as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub node: NodeId,
    pub info: MemberInfo,
    /// A voter (false: a learner still catching up).
    pub voter: bool,
    /// The last log index the leader knows this member to have (only on the leader).
    pub matched_index: Option<u64>,
}

/// The metadata group as this node sees it, for `cluster_status` and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataStatus {
    pub node: NodeId,
    pub state: ServerState,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    pub members: Vec<MemberStatus>,
}

/// This node's member of the metadata group.
pub struct MetadataGroup<T> {
    node: NodeId,
    raft: Raft,
    machine: GroupStateMachine,
    transport: Arc<T>,
}

impl<T: Transport> MetadataGroup<T> {
    pub(crate) fn new(
        node: NodeId,
        raft: Raft,
        machine: GroupStateMachine,
        transport: Arc<T>,
    ) -> Self {
        Self {
            node,
            raft,
            machine,
            transport,
        }
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Whether this member has any state (a membership from the log, a snapshot or a vote):
    /// a node that has must never be initialized again.
    pub async fn is_initialized(&self) -> Result<bool, QuorumError> {
        self.raft.is_initialized().await.map_err(raft_error)
    }

    /// Makes `members` the first membership of a new metadata group; call on one node only,
    /// and only when [`MetadataGroup::is_initialized`] says it has no state.
    pub async fn initialize(&self, members: &[(NodeId, MemberInfo)]) -> Result<(), QuorumError> {
        let members: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|(id, info)| (*id, info.to_node()))
            .collect();
        self.raft.initialize(members).await.map_err(raft_error)
    }

    /// The leader this member knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// The log position this node applied up to.
    pub fn last_applied(&self) -> Option<LogId> {
        self.machine.last_applied()
    }

    /// Every member (voters and learners) with its name and address.
    pub fn members(&self) -> Vec<(NodeId, MemberInfo)> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, node)| (*id, MemberInfo::from_node(node)))
            .collect()
    }

    /// Resolves with the membership's log id once it differs from `seen` (what the caller
    /// got last time; None at first): a member added, promoted or removed.
    pub async fn membership_changed(&self, seen: Option<LogId>) -> Option<LogId> {
        let mut metrics = self.raft.metrics();
        loop {
            let now = *metrics.borrow().membership_config.log_id();
            if now != seen {
                return now;
            }
            if metrics.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    pub fn status(&self) -> MetadataStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, node)| MemberStatus {
                node: *id,
                info: MemberInfo::from_node(node),
                voter: voters.contains(id),
                matched_index: metrics.replication.as_ref().and_then(|replication| {
                    if *id == self.node {
                        metrics.last_log_index
                    } else {
                        replication
                            .get(id)
                            .and_then(|matched| matched.map(|log_id| log_id.index))
                    }
                }),
            })
            .collect();
        MetadataStatus {
            node: self.node,
            state: metrics.state,
            leader: metrics.current_leader,
            term: metrics.current_term,
            last_log_index: metrics.last_log_index,
            last_applied_index: metrics.last_applied.map(|log_id| log_id.index),
            members,
        }
    }

    /// Proposes an operation from any member; returns the machine's answer once the operation
    /// is committed and applied on this node.
    pub async fn propose(&self, op: impl Into<Bytes>) -> Result<Vec<u8>, QuorumError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let proposal = Proposal {
            now_ms,
            command: Command::Metadata(op.into()),
        };
        let deadline = Instant::now() + METADATA_OP_TIMEOUT;
        let response = self
            .at_leader(deadline, || RaftRequest::ClientWrite(proposal.clone()))
            .await?;
        let (log_id, reply) = match response {
            RaftResponse::ClientWrite { log_id, reply } => (log_id, reply),
            _ => return Err(QuorumError::Raft("unexpected answer to a proposal".into())),
        };
        self.applied_here(log_id, deadline).await?;
        match reply {
            Reply::Metadata(answer) => Ok(answer.to_vec()),
            other => Err(QuorumError::Raft(format!(
                "the metadata machine answered {other:?}"
            ))),
        }
    }

    /// Adds `node` to the cluster (from any member); returns once it is a voter and this node
    /// applied the change. The node must be running its (empty) metadata member.
    pub async fn add_member(&self, node: NodeId, info: MemberInfo) -> Result<(), QuorumError> {
        self.change_members(MemberChange::Add { node, info }).await
    }

    /// Removes `node` from the cluster (from any member, itself included: then this returns
    /// once the change is committed, and the node should stop its member).
    pub async fn remove_member(&self, node: NodeId) -> Result<(), QuorumError> {
        self.change_members(MemberChange::Remove { node }).await
    }

    async fn change_members(&self, change: MemberChange) -> Result<(), QuorumError> {
        // Adding waits for a learner to catch up: allow for that on top of finding the leader.
        let deadline = Instant::now() + METADATA_OP_TIMEOUT * 2;
        // A removed node is no longer replicated to: it never applies its own removal.
        let removes_self = change == MemberChange::Remove { node: self.node };
        match self
            .at_leader(deadline, || RaftRequest::ChangeMembers(change.clone()))
            .await?
        {
            RaftResponse::MembersChanged { .. } if removes_self => Ok(()),
            RaftResponse::MembersChanged { log_id } => self.applied_here(log_id, deadline).await,
            _ => Err(QuorumError::Raft(
                "unexpected answer to a membership change".into(),
            )),
        }
    }

    /// Waits until this node applied up to `log_id`.
    async fn applied_here(&self, log_id: LogId, deadline: Instant) -> Result<(), QuorumError> {
        self.raft
            .wait(Some(deadline.saturating_duration_since(Instant::now())))
            .applied_index_at_least(Some(log_id.index), "metadata change applied locally")
            .await
            .map(|_| ())
            .map_err(raft_error)
    }

    /// Has the current leader carry out `request` (here when this node leads, else forwarded),
    /// following leader changes until `deadline`.
    async fn at_leader(
        &self,
        deadline: Instant,
        request: impl Fn() -> RaftRequest,
    ) -> Result<RaftResponse, QuorumError> {
        let mut hint: Option<NodeId> = None;
        let mut last_error = String::from("no leader known");
        loop {
            if Instant::now() >= deadline {
                return Err(QuorumError::Raft(format!(
                    "the metadata change did not complete within {METADATA_OP_TIMEOUT:?}: \
                     {last_error}"
                )));
            }
            let leader = hint.take().or_else(|| self.leader());
            // Bounded by the deadline: a leader cut off from the majority never commits, and
            // its caller must hear so instead of waiting until the partition heals.
            let attempt = match leader {
                None => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Some(leader) if leader == self.node => {
                    tokio::time::timeout_at(deadline, serve_here(&self.raft, request())).await
                }
                Some(leader) => {
                    tokio::time::timeout_at(
                        deadline,
                        self.transport
                            .send(self.node, leader, METADATA_GROUP, request()),
                    )
                    .await
                }
            };
            let Ok(result) = attempt else {
                return Err(QuorumError::Raft(format!(
                    "the metadata change did not complete within {METADATA_OP_TIMEOUT:?}: no \
                     majority of the cluster confirmed it (is this node cut off from the others?)"
                )));
            };
            match result {
                Ok(response) => return Ok(response),
                Err(TransportError::NotLeader { leader, node }) => {
                    last_error = format!("node {node} no longer leads");
                    hint = leader.filter(|l| *l != node);
                    if hint.is_none() {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
                Err(e @ (TransportError::Unreachable(_) | TransportError::NoSuchGroup { .. })) => {
                    last_error = e.to_string();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) => return Err(QuorumError::Raft(e.to_string())),
            }
        }
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "metadata group did not shut down cleanly");
        }
    }
}
