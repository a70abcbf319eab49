//! The node's quorum-queue host: one [`QuorumNode`] (one shared write-ahead log under
//! `<data>/quorum`) for every quorum queue of every vhost, and the stable group id each queue's
//! Raft group has in it.
//!
//! A queue's group id is derived from its vhost and name, so a restart finds the group's log
//! and snapshot again without storing the id anywhere; deleting the queue drops both, so a
//! queue declared again under the same name starts empty.
//!
//! A single node runs its groups over an in-process network (each group's only member is the
//! node itself, id [`LOCAL_NODE_ID`]); a cluster node over the cluster's TCP transport, with its
//! id derived from its node name, and the cluster's metadata group on the same log.

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use warren_quorum::backend::SnapshotStore;
use warren_quorum::failover::detector_driven_config;
use warren_quorum::memlog::MemLog;
use warren_quorum::network::{InProcessNetwork, NodeTransport};
use warren_quorum::node::QueueGroup;
use warren_quorum::node::{raft_config, QuorumNode, DEFAULT_SNAPSHOT_EVERY_LOGS};
use warren_quorum::node_log::NodeLog;
use warren_quorum::tcp::TcpTransport;
use warren_quorum::types::{GroupId, NodeId};
use warren_quorum::wal::WalOptions;

/// This node's id in its queue groups when it runs alone: every group has this one member.
pub const LOCAL_NODE_ID: NodeId = 1;

/// Leader changes kept for slow subscribers of [`QuorumHost::leader_changes`]; one that lags
/// further is told so (and reads each queue's current leader again).
const LEADER_CHANGES_BUFFERED: usize = 1024;

/// A queue group's leader as this node now knows it (None: an election is under way). Only
/// the leader's node serves the queue's consumers; a node holding the queue's record
/// elsewhere forwards to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderChange {
    pub group: GroupId,
    pub leader: Option<NodeId>,
}

/// The quorum-queue side of a broker with a data directory.
pub struct QuorumHost {
    node: QuorumNode<NodeTransport, NodeLog>,
    /// Groups whose data is being removed (their queue was deleted); a queue declared again
    /// under the same name waits for that before it starts the group afresh.
    removing: Mutex<HashSet<GroupId>>,
    leaders: tokio::sync::broadcast::Sender<LeaderChange>,
    /// The cluster's membership (set once the node joined): names the leader's node, so a
    /// queue led elsewhere can forward its clients there (`QuorumQueue::delegate`).
    cluster: std::sync::OnceLock<std::sync::Weak<dyn MemberNames>>,
}

/// What names the cluster's nodes for this node's groups: the cluster membership
/// (`ClusterNode`), set once the node joined.
pub trait MemberNames: Send + Sync {
    /// The name of cluster node `id` (None for an unknown id).
    fn member_name(&self, id: NodeId) -> Option<String>;
}

impl std::fmt::Debug for QuorumHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumHost")
            .field("wal", &self.node.log().wal().map(|wal| wal.dir()))
            .finish()
    }
}

impl QuorumHost {
    /// Opens (or recovers) the shared log in `dir` for a single node. Groups come back one by
    /// one as their queues are recreated from the durable definitions.
    pub fn open(dir: &Path) -> std::io::Result<Arc<QuorumHost>> {
        let network = InProcessNetwork::new();
        // One member per group: no heartbeats to send and no one to elect, so openraft's own
        // timers stay (a restarted sole voter leads again at once).
        let node = QuorumNode::open_disk(
            LOCAL_NODE_ID,
            dir,
            WalOptions::default(),
            raft_config(DEFAULT_SNAPSHOT_EVERY_LOGS),
            Arc::new(NodeTransport::Local(network.clone())),
        )
        .map_err(std::io::Error::other)?;
        let host = Self::with_node(node);
        network.add_node(LOCAL_NODE_ID, host.node.registry());
        Ok(host)
    }

    /// Opens the shared log in `dir` for cluster node `id`, its groups answering peers over
    /// `transport` (which starts serving them here), each group (the metadata group too)
    /// snapshotting every `snapshot_every_logs` log entries.
    pub fn open_cluster(
        dir: &Path,
        id: NodeId,
        transport: Arc<TcpTransport>,
        snapshot_every_logs: u64,
    ) -> std::io::Result<Arc<QuorumHost>> {
        let node = QuorumNode::open_disk(
            id,
            dir,
            WalOptions::default(),
            raft_config(snapshot_every_logs),
            Arc::new(NodeTransport::Tcp(transport.clone())),
        )
        .map_err(std::io::Error::other)?;
        Self::cluster_host(node, snapshot_every_logs, transport)
    }

    /// As [`QuorumHost::open_cluster`], over a log and snapshot store held in memory: a node
    /// of the deterministic cluster simulation (whose test flushes the log as its simulated
    /// disk says).
    pub fn open_cluster_in_memory(
        log: Arc<MemLog>,
        snapshots: Arc<dyn SnapshotStore>,
        id: NodeId,
        transport: Arc<TcpTransport>,
        snapshot_every_logs: u64,
    ) -> std::io::Result<Arc<QuorumHost>> {
        let node = QuorumNode::with_storage(
            id,
            Arc::new(NodeLog::Memory(log)),
            snapshots,
            raft_config(snapshot_every_logs),
            Arc::new(NodeTransport::Tcp(transport.clone())),
        )
        .map_err(std::io::Error::other)?;
        Self::cluster_host(node, snapshot_every_logs, transport)
    }

    fn cluster_host(
        node: QuorumNode<NodeTransport, NodeLog>,
        snapshot_every_logs: u64,
        transport: Arc<TcpTransport>,
    ) -> std::io::Result<Arc<QuorumHost>> {
        // Queue groups leave failure detection to the node-level detector (the cluster
        // transport's heartbeats) and elections to the `FailoverDriver` the node runs: with
        // openraft's own timers, every group's leader would heartbeat every follower twice a
        // second, and 10,000 idle queues on 3 nodes would keep the cores busy doing nothing.
        // The metadata group (one group) keeps openraft's timers.
        let node = node
            .with_queue_raft_config(detector_driven_config(raft_config(snapshot_every_logs)))
            .map_err(std::io::Error::other)?;
        let host = Self::with_node(node);
        transport.serve(host.node.registry());
        Ok(host)
    }

    fn with_node(node: QuorumNode<NodeTransport, NodeLog>) -> Arc<QuorumHost> {
        Arc::new(QuorumHost {
            node,
            removing: Mutex::default(),
            leaders: tokio::sync::broadcast::Sender::new(LEADER_CHANGES_BUFFERED),
            cluster: std::sync::OnceLock::new(),
        })
    }

    /// Whether this is a cluster node's host (opened with [`QuorumHost::open_cluster`]).
    pub fn is_cluster_node(&self) -> bool {
        matches!(**self.node.transport(), NodeTransport::Tcp(_))
    }

    pub fn node(&self) -> &QuorumNode<NodeTransport, NodeLog> {
        &self.node
    }

    /// Every leader change of this node's queue groups (also per queue:
    /// `QuorumQueue::leader_events`).
    pub fn leader_changes(&self) -> tokio::sync::broadcast::Receiver<LeaderChange> {
        self.leaders.subscribe()
    }

    pub(crate) fn announce_leader(&self, change: LeaderChange) {
        // Nobody subscribed: nothing to tell.
        let _ = self.leaders.send(change);
    }

    /// The cluster this node is a member of (the first call sticks).
    pub fn set_cluster<C: MemberNames + 'static>(&self, cluster: &Arc<C>) {
        let weak: std::sync::Weak<dyn MemberNames> = Arc::downgrade(cluster) as _;
        let _ = self.cluster.set(weak);
    }

    /// The name of cluster node `id` (None on a single node or for an unknown id).
    pub fn member_name(&self, id: NodeId) -> Option<String> {
        self.cluster.get()?.upgrade()?.member_name(id)
    }

    /// This node's id in its groups.
    pub fn node_id(&self) -> NodeId {
        self.node.id()
    }

    /// The group id of queue `queue` in vhost `vhost`: the first 8 bytes of a SHA-256 over
    /// both names, stable across restarts.
    pub fn group_id(vhost: &str, queue: &str) -> GroupId {
        let mut hasher = Sha256::new();
        hasher.update(vhost.as_bytes());
        hasher.update([0u8]);
        hasher.update(queue.as_bytes());
        let digest = hasher.finalize();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(id)
    }

    /// Stops the group and removes its log and snapshot (its queue was deleted), in a task;
    /// the removal counts as under way from this call on (see [`QuorumHost::removed`]).
    pub fn remove_group(self: &Arc<Self>, group: Arc<QueueGroup>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.removing.lock().insert(group.group());
        let host = self.clone();
        runtime.spawn(async move {
            if let Err(e) = host.node.remove_group(&group).await {
                tracing::warn!(group = group.group(), error = %e, "removing a quorum queue's data failed");
            }
            host.removing.lock().remove(&group.group());
        });
    }

    /// Waits until no removal of `group` is under way.
    pub async fn removed(&self, group: GroupId) {
        while self.removing.lock().contains(&group) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops every group and closes the log (what was submitted is flushed).
    pub async fn shutdown(&self) {
        self.node.shutdown().await;
    }
}
