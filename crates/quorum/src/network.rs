//! How queue groups talk to their peers: a node-level [`Transport`] trait carrying Raft RPCs
//! tagged with the group id, the receiving side ([`GroupRegistry`], a node's running groups),
//! openraft's network traits on top of any transport, and [`InProcessNetwork`], a transport
//! between nodes in one process with crashes and partitions for tests.
//!
//! One transport per node rather than per group keeps connections (and, later, failure
//! detection) node-wide: 10,000 queues on 3 nodes need 2 peer links each, not 20,000.
//!
//! Besides Raft's own RPCs the transport carries two requests a follower forwards to its
//! group's leader: a client write ([`RaftRequest::ClientWrite`], how a metadata change made on
//! any node reaches the log) and a membership change ([`RaftRequest::ChangeMembers`]).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, OnceLock};

use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::vote::RaftLeaderId;
use openraft::{BasicNode, OptionalSend};
use parking_lot::{Mutex, RwLock};

use crate::liveness::Liveness;
use crate::machine::Reply;
use crate::member::MemberChange;
use crate::types::{
    GroupId, LogId, MetricsWatch, NodeId, Proposal, QueueRaft, Raft, ServerMetrics, Snapshot, Vote,
};

/// A Raft RPC for one group.
pub enum RaftRequest {
    AppendEntries(AppendEntriesRequest<QueueRaft>),
    Vote(VoteRequest<QueueRaft>),
    /// A whole snapshot, for a follower whose log the leader already purged.
    Snapshot {
        vote: Vote,
        snapshot: Snapshot,
    },
    /// A proposal forwarded by a follower, for the leader to commit.
    ClientWrite(Proposal),
    /// A membership change forwarded by a follower, for the leader to carry out.
    ChangeMembers(MemberChange),
    /// Would the member grant this vote (Raft's Pre-Vote)? Answered as a `Vote`, nothing
    /// persisted; see [`GroupRegistry::handle`] for when a live leader makes it a no.
    PreVote(VoteRequest<QueueRaft>),
}

pub enum RaftResponse {
    AppendEntries(AppendEntriesResponse<QueueRaft>),
    Vote(VoteResponse<QueueRaft>),
    Snapshot(SnapshotResponse<QueueRaft>),
    /// The forwarded proposal is committed at `log_id`; `reply` is the leader's answer.
    ClientWrite {
        log_id: LogId,
        reply: Reply,
    },
    /// The forwarded membership change is committed at `log_id`.
    MembersChanged {
        log_id: LogId,
    },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    #[error("node {0} is unreachable")]
    Unreachable(NodeId),
    #[error("group {group} is not running on node {node}")]
    NoSuchGroup { node: NodeId, group: GroupId },
    #[error("node {node} failed the request: {reason}")]
    Remote { node: NodeId, reason: String },
    #[error("unexpected response kind from node {0}")]
    BadResponse(NodeId),
    /// A forwarded write reached a member that does not lead (any more).
    #[error("node {node} does not lead the group; the leader is {leader:?}")]
    NotLeader {
        node: NodeId,
        leader: Option<NodeId>,
    },
    /// A membership change reached a node whose member of the group has no state: the node is
    /// in no cluster yet (what a node forming a cluster needs to hear from every seed).
    #[error("node {0} is in no cluster yet")]
    NotInitialized(NodeId),
}

/// Carries a group's RPC from one node to another and brings the answer back.
pub trait Transport: Send + Sync + 'static {
    fn send(
        &self,
        from: NodeId,
        to: NodeId,
        group: GroupId,
        request: RaftRequest,
    ) -> impl Future<Output = Result<RaftResponse, TransportError>> + Send;
}

/// The groups running on one node: where a transport delivers incoming RPCs.
#[derive(Clone)]
pub struct GroupRegistry {
    node: NodeId,
    groups: Arc<RwLock<HashMap<GroupId, Registered>>>,
    /// The node's failure detector, once a transport that has one serves the registry: a
    /// member whose leader it sees up grants no Pre-Vote.
    liveness: Arc<OnceLock<Arc<Liveness>>>,
    /// Groups inserted since the failover driver last looked (`take_added`): a group started
    /// after a liveness change (a node restarting) is checked at the driver's next round, not
    /// only at its next sweep of every group.
    added: Arc<Mutex<Vec<GroupId>>>,
}

/// A group's Raft, and its server metrics held open: the failover driver's sweep reads every
/// group's, and `Raft::server_metrics` would clone a receiver (a lock, two reference counts)
/// for each.
struct Registered {
    raft: Raft,
    server_metrics: MetricsWatch<ServerMetrics>,
}

impl GroupRegistry {
    pub fn new(node: NodeId) -> Self {
        Self {
            node,
            groups: Arc::default(),
            liveness: Arc::default(),
            added: Arc::default(),
        }
    }

    /// The groups inserted since the last call.
    pub fn take_added(&self) -> Vec<GroupId> {
        std::mem::take(&mut *self.added.lock())
    }

    /// Judges Pre-Votes by `liveness` from now on (see [`GroupRegistry::handle`]).
    pub fn use_liveness(&self, liveness: Arc<Liveness>) {
        let _ = self.liveness.set(liveness);
    }

    /// Whether this member knows a leader that is alive and is not `candidate`: itself, or a
    /// node the failure detector sees up. Such a member grants no Pre-Vote: a candidate that lost touch with
    /// the leader (cut off, stalled, just woken) must not depose it while it serves a majority.
    fn follows_a_live_leader(&self, raft: &Raft, candidate: NodeId) -> bool {
        let Some(leader) = raft.metrics().borrow().current_leader else {
            return false;
        };
        // The leader asking for votes itself leads no more (it restarted, or stepped down).
        if leader == candidate {
            return false;
        }
        leader == self.node
            || self
                .liveness
                .get()
                .is_some_and(|liveness| liveness.is_up(leader))
    }

    pub fn insert(&self, group: GroupId, raft: Raft) {
        let server_metrics = raft.server_metrics();
        self.groups.write().insert(
            group,
            Registered {
                raft,
                server_metrics,
            },
        );
        // Only a cluster node (one with a failure detector) runs a driver that drains it.
        if self.liveness.get().is_some() {
            self.added.lock().push(group);
        }
    }

    pub fn remove(&self, group: GroupId) -> Option<Raft> {
        self.groups.write().remove(&group).map(|member| member.raft)
    }

    pub fn get(&self, group: GroupId) -> Option<Raft> {
        self.groups
            .read()
            .get(&group)
            .map(|member| member.raft.clone())
    }

    /// Every group, in group-id order: callers act on them in turn, and a fixed order keeps
    /// a seeded simulation's schedule the same from one run to the next.
    pub fn all(&self) -> Vec<(GroupId, Raft)> {
        let mut groups: Vec<(GroupId, Raft)> = self
            .groups
            .read()
            .iter()
            .map(|(group, member)| (*group, member.raft.clone()))
            .collect();
        groups.sort_unstable_by_key(|(group, _)| *group);
        groups
    }

    /// The groups whose server metrics `keep` keeps, in group-id order (as [`Self::all`]):
    /// every group's metrics read in place, only the kept ones' Rafts handed out.
    pub fn select(&self, mut keep: impl FnMut(&ServerMetrics) -> bool) -> Vec<(GroupId, Raft)> {
        let mut groups: Vec<(GroupId, Raft)> = self
            .groups
            .read()
            .iter()
            .filter(|(_, member)| keep(&member.server_metrics.borrow()))
            .map(|(group, member)| (*group, member.raft.clone()))
            .collect();
        groups.sort_unstable_by_key(|(group, _)| *group);
        groups
    }

    /// Hands an incoming RPC to the group's Raft.
    pub async fn handle(
        &self,
        group: GroupId,
        request: RaftRequest,
    ) -> Result<RaftResponse, TransportError> {
        let node = self.node;
        let raft = self
            .get(group)
            .ok_or(TransportError::NoSuchGroup { node, group })?;
        let remote = |reason: String| TransportError::Remote { node, reason };
        match request {
            RaftRequest::AppendEntries(rpc) => raft
                .append_entries(rpc)
                .await
                .map(RaftResponse::AppendEntries)
                .map_err(|e| remote(e.to_string())),
            RaftRequest::Vote(rpc) => raft
                .vote(rpc)
                .await
                .map(RaftResponse::Vote)
                .map_err(|e| remote(e.to_string())),
            // openraft's own answer (its leader lease, the logs), made a no while this member
            // follows a live leader: with no heartbeats in a queue group the lease alone
            // would let a node that merely lost touch win an election and depose it.
            RaftRequest::PreVote(rpc) => {
                let candidate = *rpc.vote.leader_id().node_id();
                let mut answer = raft
                    .pre_vote(rpc)
                    .await
                    .map_err(|e| remote(e.to_string()))?;
                if answer.vote_granted && self.follows_a_live_leader(&raft, candidate) {
                    answer.vote_granted = false;
                }
                Ok(RaftResponse::Vote(answer))
            }
            RaftRequest::Snapshot { vote, snapshot } => raft
                .install_full_snapshot(vote, snapshot)
                .await
                .map(RaftResponse::Snapshot)
                .map_err(|e| remote(e.to_string())),
            request @ (RaftRequest::ClientWrite(_) | RaftRequest::ChangeMembers(_)) => {
                crate::leader::serve_here(&raft, request).await
            }
        }
    }
}

/// openraft's network factory for one group over a node's transport.
pub struct GroupNetworkFactory<T> {
    transport: Arc<T>,
    from: NodeId,
    group: GroupId,
}

impl<T> GroupNetworkFactory<T> {
    pub fn new(transport: Arc<T>, from: NodeId, group: GroupId) -> Self {
        Self {
            transport,
            from,
            group,
        }
    }
}

impl<T: Transport> RaftNetworkFactory<QueueRaft> for GroupNetworkFactory<T> {
    type Network = GroupConnection<T>;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Self::Network {
        GroupConnection {
            transport: self.transport.clone(),
            from: self.from,
            to: target,
            group: self.group,
        }
    }
}

/// One group's link to one peer.
pub struct GroupConnection<T> {
    transport: Arc<T>,
    from: NodeId,
    to: NodeId,
    group: GroupId,
}

impl<T: Transport> GroupConnection<T> {
    async fn call(&self, request: RaftRequest) -> Result<RaftResponse, TransportError> {
        self.transport
            .send(self.from, self.to, self.group, request)
            .await
    }

    /// A vote or Pre-Vote request: both are answered with a vote response.
    async fn call_vote(
        &self,
        request: RaftRequest,
    ) -> Result<VoteResponse<QueueRaft>, RPCError<QueueRaft>> {
        match self.call(request).await {
            Ok(RaftResponse::Vote(response)) => Ok(response),
            Ok(_) => Err(RPCError::Unreachable(unreachable(
                &TransportError::BadResponse(self.to),
            ))),
            Err(e) => Err(RPCError::Unreachable(unreachable(&e))),
        }
    }
}

fn unreachable(e: &TransportError) -> Unreachable<QueueRaft> {
    Unreachable::new(e)
}

// Every failure is reported as "unreachable": openraft then backs off before retrying, which is
// right both for a dead peer and for a peer whose group is not (yet) running. How long an RPC
// may take is the transport's to bound (the TCP transport's `rpc_timeout`), as openraft 0.10
// leaves it to the network.
impl<T: Transport> RaftNetworkV2<QueueRaft> for GroupConnection<T> {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<QueueRaft>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<QueueRaft>, RPCError<QueueRaft>> {
        match self.call(RaftRequest::AppendEntries(rpc)).await {
            Ok(RaftResponse::AppendEntries(response)) => Ok(response),
            Ok(_) => Err(RPCError::Unreachable(unreachable(
                &TransportError::BadResponse(self.to),
            ))),
            Err(e) => Err(RPCError::Unreachable(unreachable(&e))),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<QueueRaft>,
        _option: RPCOption,
    ) -> Result<VoteResponse<QueueRaft>, RPCError<QueueRaft>> {
        self.call_vote(RaftRequest::Vote(rpc)).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<QueueRaft>,
        _option: RPCOption,
    ) -> Result<VoteResponse<QueueRaft>, RPCError<QueueRaft>> {
        self.call_vote(RaftRequest::PreVote(rpc)).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<QueueRaft>, StreamingError<QueueRaft>> {
        let call = self.call(RaftRequest::Snapshot { vote, snapshot });
        // Biased: which branch wins when both are ready must not depend on tokio's random
        // draw (the simulation replays runs exactly).
        tokio::select! {
            biased;
            closed = cancel => Err(StreamingError::Closed(closed)),
            result = call => match result {
                Ok(RaftResponse::Snapshot(response)) => Ok(response),
                Ok(_) => Err(StreamingError::Unreachable(unreachable(
                    &TransportError::BadResponse(self.to),
                ))),
                Err(e) => Err(StreamingError::Unreachable(unreachable(&e))),
            },
        }
    }
}

#[derive(Default)]
struct Links {
    nodes: HashMap<NodeId, GroupRegistry>,
    /// Nodes cut off from everyone.
    isolated: HashSet<NodeId>,
    /// Severed links, stored both ways.
    cut: HashSet<(NodeId, NodeId)>,
}

impl Links {
    fn reachable(&self, a: NodeId, b: NodeId) -> bool {
        self.nodes.contains_key(&a)
            && self.nodes.contains_key(&b)
            && !self.isolated.contains(&a)
            && !self.isolated.contains(&b)
            && !self.cut.contains(&(a, b))
    }
}

/// Nodes in one process, with crashes (a node removed) and partitions for tests.
#[derive(Default)]
pub struct InProcessNetwork {
    links: Mutex<Links>,
}

impl InProcessNetwork {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Makes a node reachable through its registry.
    pub fn add_node(&self, node: NodeId, registry: GroupRegistry) {
        self.links.lock().nodes.insert(node, registry);
    }

    /// The node is gone (crashed or stopped): RPCs to and from it fail.
    pub fn remove_node(&self, node: NodeId) {
        self.links.lock().nodes.remove(&node);
    }

    /// Cuts a node off from all others (it keeps running).
    pub fn isolate(&self, node: NodeId) {
        self.links.lock().isolated.insert(node);
    }

    /// Severs the link between two nodes, both ways.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        let mut links = self.links.lock();
        links.cut.insert((a, b));
        links.cut.insert((b, a));
    }

    /// Undoes every isolation and cut.
    pub fn heal(&self) {
        let mut links = self.links.lock();
        links.isolated.clear();
        links.cut.clear();
    }
}

impl Transport for InProcessNetwork {
    async fn send(
        &self,
        from: NodeId,
        to: NodeId,
        group: GroupId,
        request: RaftRequest,
    ) -> Result<RaftResponse, TransportError> {
        let registry = {
            let links = self.links.lock();
            if !links.reachable(from, to) {
                return Err(TransportError::Unreachable(to));
            }
            links.nodes.get(&to).cloned()
        }
        .ok_or(TransportError::Unreachable(to))?;
        let response = registry.handle(group, request).await?;
        // A partition that came up meanwhile loses the answer, as a real network would.
        if !self.links.lock().reachable(from, to) {
            return Err(TransportError::Unreachable(to));
        }
        Ok(response)
    }
}

pub use crate::transport::NodeTransport;
