//! A node hosting queue groups (and the cluster's [`crate::metadata`] group): one shared
//! write-ahead log, one transport, one registry of running groups, and per group an openraft
//! instance over [`GroupLogStore`] and [`GroupStateMachine`].
//!
//! Proposing through [`QueueGroup::propose`] returns once the command is committed (a majority of
//! members has it fsync'd) and applied on the leader: that is what a publisher confirm means for
//! a quorum queue.
//!
//! Writes go through [`write_with_lease`] (or [`QueueGroup::propose_ff`]): openraft 0.10 refuses
//! a write on a leader that no majority acknowledged within its lease (`election_timeout_max`)
//! — a leader just elected, and any leader of an idle group, as the groups that the failure
//! detector drives send no heartbeats — and such a leader first renews its lease with one
//! round of heartbeats.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::error::RaftError;
use openraft::impls::ProgressResponder;
use openraft::{BasicNode, Config, SnapshotPolicy};
use tokio::sync::mpsc::UnboundedSender;

use crate::backend::{LogBackend, SnapshotDir, SnapshotStore};
pub use crate::error::QuorumError;
use crate::leader::{client_write_error, ensure_lease, raft_error, write_with_lease};
use crate::machine::{Command, QueueConfig, QueueState, Reply};
use crate::metadata::{MetadataGroup, MetadataMachine, MetadataState, METADATA_GROUP};
use crate::network::{GroupNetworkFactory, GroupRegistry, Transport};
use crate::node_log::NodeLog;
use crate::storage::{Applied, AppliedHook, GroupLogStore, GroupStateMachine};
use crate::types::{GroupId, LogId, MetricsWatch, NodeId, Proposal, Raft, ServerMetrics};
use crate::wal::{Wal, WalOptions};

/// Log entries between two snapshots of a group, by default.
pub const DEFAULT_SNAPSHOT_EVERY_LOGS: u64 = 4096;

/// Log entries kept behind a snapshot, by default (a follower that far behind catches up
/// from the log rather than by a snapshot install).
const SNAPSHOT_KEPT_LOGS: u64 = 256;

/// Log-stage timestamps openraft keeps per member and stage (see `checked`); openraft rounds a
/// ring's capacity up to its allocation's, so a few.
const LOG_STAGE_CAPACITY: u64 = 1;

/// Raft timings for queue groups. Generous by default: a busy 2-core machine must not see
/// spurious elections.
///
/// A heartbeat every 500 ms: openraft passes `heartbeat_interval` to the network as each
/// AppendEntries RPC's time budget too, and a follower answers only once the entries are
/// fsync'd — at 150 ms, 3 nodes on 2 loaded cores timed out hundreds of times a run under
/// openraft 0.9, which enforced it (issue 11's benchmark). The election timeouts stay three
/// heartbeats and more apart, and their maximum (also the leader's lease) stays below the
/// failure detector's `peer_down_after` (5 s).
pub fn default_raft_config() -> Config {
    raft_config(DEFAULT_SNAPSHOT_EVERY_LOGS)
}

/// The default timings with a snapshot every `snapshot_every_logs` entries (kept behind it:
/// at most as many, so a small value makes lagging members catch up by snapshot, as tests
/// of snapshot installs need).
pub fn raft_config(snapshot_every_logs: u64) -> Config {
    let snapshot_every_logs = snapshot_every_logs.max(1);
    Config {
        cluster_name: "warren-quorum".into(),
        heartbeat_interval: 500,
        election_timeout_min: 1500,
        election_timeout_max: 3000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every_logs),
        max_in_snapshot_log_to_keep: SNAPSHOT_KEPT_LOGS.min(snapshot_every_logs),
        purge_batch_size: 64.min(snapshot_every_logs),
        ..Config::default()
    }
}

/// `config` validated, with what every group here needs whatever the caller asked for: no
/// leader restore. openraft 0.10 by default lets a member that led before a restart lead again
/// in the same term without an election; but a leader's entries can be committed by its
/// followers' flushes before its own flush completes, and a crash then takes them off its log
/// (the log is durable only up to its last flush). Leading on in the same term, it would give
/// the next entry the log id of a committed one that the others hold — two different entries
/// under one log id, which Raft never repairs (the simulation's seed 39 diverged so). Elected
/// again instead, it takes a new term and the log of a majority first.
///
/// Pre-Vote too: a member whose election timer fires (the metadata group's) first asks whether
/// a majority would grant it the vote, so a node that was cut off or stalled does not come back
/// with a higher term that deposes a healthy leader.
///
/// And the smallest ring of log-stage timestamps openraft keeps per member (it defaults to
/// 1,024 entries for each of 6 stages, 147 KB reserved per group): they feed only openraft's
/// runtime statistics, which Warren does not read, and a node holds a member of every quorum
/// queue, idle or not.
fn checked(config: Config) -> Result<Config, QuorumError> {
    Config {
        enable_leader_restore: Some(false),
        enable_pre_vote: Some(true),
        log_stage_capacity: Some(LOG_STAGE_CAPACITY),
        ..config
    }
    .validate()
    .map_err(|e| QuorumError::Config(e.to_string()))
}

/// One node's quorum-queue host: its groups' logs in `L` (the shared [`Wal`] on a real node).
pub struct QuorumNode<T: Transport, L: LogBackend = Wal> {
    id: NodeId,
    snapshots: Arc<dyn SnapshotStore>,
    wal: Arc<L>,
    transport: Arc<T>,
    registry: GroupRegistry,
    /// The metadata group's settings (and, unless [`QuorumNode::with_queue_raft_config`] set
    /// others, the queue groups').
    raft_config: Arc<Config>,
    /// The queue groups' settings: on a cluster node `failover::detector_driven_config`, so
    /// thousands of idle queues cost no per-group heartbeats or election timers.
    queue_raft_config: Arc<Config>,
}

/// A node's data directory: its WAL in `wal/`, its groups' snapshots in `snapshots/`.
fn open_dir(
    dir: &Path,
    wal_options: WalOptions,
) -> Result<(Arc<Wal>, Arc<dyn SnapshotStore>), QuorumError> {
    let wal = Wal::open(&dir.join("wal"), wal_options)?;
    Ok((wal, Arc::new(SnapshotDir::open(&dir.join("snapshots"))?)))
}

impl<T: Transport> QuorumNode<T> {
    /// Opens the node's data directory (`wal/` and `snapshots/` inside `dir`).
    pub fn open(
        id: NodeId,
        dir: &Path,
        wal_options: WalOptions,
        raft_config: Config,
        transport: Arc<T>,
    ) -> Result<Self, QuorumError> {
        let (wal, snapshots) = open_dir(dir, wal_options)?;
        Self::with_storage(id, wal, snapshots, raft_config, transport)
    }

    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }
}

impl<T: Transport> QuorumNode<T, NodeLog> {
    /// As [`QuorumNode::open`], the WAL held as a [`NodeLog`]: the broker's host type, which
    /// its cluster simulation also runs in memory ([`QuorumNode::with_storage`]).
    pub fn open_disk(
        id: NodeId,
        dir: &Path,
        wal_options: WalOptions,
        raft_config: Config,
        transport: Arc<T>,
    ) -> Result<Self, QuorumError> {
        let (wal, snapshots) = open_dir(dir, wal_options)?;
        let log = Arc::new(NodeLog::Disk(wal));
        Self::with_storage(id, log, snapshots, raft_config, transport)
    }

    /// The node's log (on disk, or in memory in a simulation).
    pub fn log(&self) -> &Arc<NodeLog> {
        &self.wal
    }
}

impl<T: Transport, L: LogBackend> QuorumNode<T, L> {
    /// A node over a log and snapshot store of the caller's (the simulation's in-memory disk).
    pub fn with_storage(
        id: NodeId,
        log: Arc<L>,
        snapshots: Arc<dyn SnapshotStore>,
        raft_config: Config,
        transport: Arc<T>,
    ) -> Result<Self, QuorumError> {
        let raft_config = Arc::new(checked(raft_config)?);
        Ok(Self {
            id,
            snapshots,
            wal: log,
            transport,
            registry: GroupRegistry::new(id),
            queue_raft_config: raft_config.clone(),
            raft_config,
        })
    }

    /// Queue groups started from now on run with `config` (the metadata group keeps the
    /// node's own settings).
    pub fn with_queue_raft_config(mut self, config: Config) -> Result<Self, QuorumError> {
        self.queue_raft_config = Arc::new(checked(config)?);
        Ok(self)
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// How this node reaches its peers (a follower forwards proposals to its leader on it).
    pub fn transport(&self) -> &Arc<T> {
        &self.transport
    }

    /// Where a transport hands this node's incoming RPCs.
    pub fn registry(&self) -> GroupRegistry {
        self.registry.clone()
    }

    /// Starts (or restarts, from the log and snapshot on disk) the node's member of a group.
    /// `config` is the queue's configuration when the group is new; a restarted group keeps
    /// what its snapshot and log say. Committed commands' effects go to `effects` (every
    /// member computes them; the owner acts on them while its member leads).
    pub async fn start_group(
        &self,
        group: GroupId,
        config: QueueConfig,
        effects: Option<UnboundedSender<Applied>>,
    ) -> Result<QueueGroup, QuorumError> {
        let machine =
            GroupStateMachine::open_queue(self.snapshots.clone(), group, config, effects)?;
        let raft = self
            .start_raft(group, self.queue_raft_config.clone(), machine.clone())
            .await?;
        Ok(QueueGroup {
            node: self.id,
            group,
            server_metrics: raft.server_metrics(),
            raft,
            machine,
        })
    }

    /// Starts (or restarts, from the log and snapshot on disk) the node's member of the
    /// cluster's metadata group over the application's `machine`, which starts empty: it gets
    /// the snapshot (if any) restored and the committed log replayed into it.
    pub async fn start_metadata_group(
        &self,
        machine: Arc<dyn MetadataMachine>,
    ) -> Result<MetadataGroup<T>, QuorumError> {
        let machine = GroupStateMachine::open_machine(
            self.snapshots.clone(),
            METADATA_GROUP,
            Box::new(MetadataState::new(machine)),
            None,
        )?;
        let raft = self
            .start_raft(METADATA_GROUP, self.raft_config.clone(), machine.clone())
            .await?;
        Ok(MetadataGroup::new(
            self.id,
            raft,
            machine,
            self.transport.clone(),
        ))
    }

    /// The Raft member of `group` over `machine`, registered to receive its RPCs.
    async fn start_raft(
        &self,
        group: GroupId,
        config: Arc<Config>,
        machine: GroupStateMachine,
    ) -> Result<Raft, QuorumError> {
        let raft = Raft::new(
            self.id,
            config,
            GroupNetworkFactory::new(self.transport.clone(), self.id, group),
            GroupLogStore::new(self.wal.clone(), group),
            machine,
        )
        .await
        .map_err(|e| QuorumError::Raft(e.to_string()))?;
        self.registry.insert(group, raft.clone());
        Ok(raft)
    }

    /// Stops the node's member of a group (its log and snapshot stay).
    pub async fn stop_group(&self, group: &QueueGroup) {
        self.registry.remove(group.group);
        group.shutdown().await;
    }

    /// Stops every group and closes the log, flushing what was submitted.
    pub async fn shutdown(&self) {
        for (group, raft) in self.registry.all() {
            self.registry.remove(group);
            if let Err(e) = raft.shutdown().await {
                tracing::warn!(group, error = %e, "queue group did not shut down cleanly");
            }
        }
        self.wal.close();
    }
}

/// A write handed to the group ([`QueueGroup::propose_ff`]): resolves to its log position and
/// the state machine's reply once committed and applied on this member.
pub type PendingWrite = Pin<Box<dyn Future<Output = Result<(LogId, Reply), QuorumError>> + Send>>;

/// This node's member of one queue group.
pub struct QueueGroup {
    node: NodeId,
    group: GroupId,
    raft: Raft,
    machine: GroupStateMachine,
    /// The group's server metrics (vote, state, leader, membership), held rather than asked
    /// of `raft` at every read: `Raft::server_metrics` clones a receiver (a lock and two
    /// reference counts), and the leader is read per queue by every periodic reader.
    server_metrics: MetricsWatch<ServerMetrics>,
}

impl QueueGroup {
    pub fn group(&self) -> GroupId {
        self.group
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Makes this the first member set of a new group; call on one member only.
    pub async fn initialize(&self, members: &[NodeId]) -> Result<(), QuorumError> {
        let members: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|id| (*id, BasicNode::default()))
            .collect();
        self.raft
            .initialize(members)
            .await
            .map_err(|e| QuorumError::Raft(e.to_string()))
    }

    /// The leader this member knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.server_metrics.borrow().current_leader
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node)
    }

    /// The group's voters as this member's membership lists them.
    pub fn members(&self) -> Vec<NodeId> {
        self.server_metrics
            .borrow()
            .membership_config
            .voter_ids()
            .collect()
    }

    /// Proposes a command stamped with the wall clock; see [`QueueGroup::propose_at`].
    pub async fn propose(&self, command: Command) -> Result<Reply, QuorumError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.propose_at(now_ms, command)
            .await
            .map(|(_, reply)| reply)
    }

    /// Proposes a command as happening at `now_ms`; returns once it is committed and applied
    /// here (the leader), with its log position and the state machine's reply.
    pub async fn propose_at(
        &self,
        now_ms: u64,
        command: Command,
    ) -> Result<(LogId, Reply), QuorumError> {
        let proposal = Proposal { now_ms, command };
        write_with_lease(&self.raft, || self.raft.client_write(proposal.clone()))
            .await
            .map(|response| (response.log_id, response.data))
    }

    /// Hands a proposal to this member, which must lead, without waiting for it: entries
    /// handed over one after the other are appended in that order (and openraft appends and
    /// flushes those that arrive together as one batch). The returned future resolves once the
    /// entry is committed and applied here. A leader whose lease may have run out renews it
    /// first, so a write is not refused for it.
    pub async fn propose_ff(&self, proposal: Proposal) -> Result<PendingWrite, QuorumError> {
        ensure_lease(&self.raft).await?;
        let (responder, answer) = ProgressResponder::complete_only();
        self.raft
            .client_write_ff(proposal, Some(responder))
            .await
            .map_err(raft_error)?;
        Ok(Box::pin(async move {
            match answer.await {
                Ok(Ok(response)) => Ok((response.log_id, response.data)),
                Ok(Err(e)) => Err(client_write_error(e)),
                Err(_) => Err(QuorumError::Raft("the group stopped".into())),
            }
        }))
    }

    /// Confirms that this member still leads — a majority answers a round of heartbeats — and
    /// that it applied everything committed before: what it reads from its queue then is
    /// current.
    pub async fn confirm_leadership(&self) -> Result<(), QuorumError> {
        self.raft
            .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                RaftError::APIError(openraft::error::LinearizableReadError::ForwardToLeader(
                    forward,
                )) => QuorumError::NotLeader {
                    leader: forward.leader_id,
                },
                other => QuorumError::Raft(other.to_string()),
            })
    }

    /// Reads this member's copy of the queue.
    /// Runs `hook` whenever this member's state moved; see [`GroupStateMachine::on_applied`].
    pub fn on_applied(&self, hook: AppliedHook) {
        self.machine.on_applied(hook);
    }

    pub fn with_queue<R>(&self, read: impl FnOnce(&QueueState) -> R) -> R {
        self.machine.with_queue(read)
    }

    pub fn last_applied(&self) -> Option<LogId> {
        self.machine.last_applied()
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(group = self.group, error = %e, "queue group did not shut down cleanly");
        }
    }
}

impl<T: Transport, L: LogBackend> QuorumNode<T, L> {
    /// Stops the node's member of a group and removes its data: the group's records in the
    /// shared log and its snapshot file (the queue was deleted). Durable once this returns.
    pub async fn remove_group(&self, group: &QueueGroup) -> Result<(), QuorumError> {
        self.stop_group(group).await;
        self.wal
            .drop_group(group.group)
            .await
            .map_err(|e| QuorumError::Raft(e.to_string()))?;
        group.machine.delete_snapshot()?;
        Ok(())
    }
}
