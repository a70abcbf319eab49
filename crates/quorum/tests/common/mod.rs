//! A quorum queue group of several members in one process, over [`InProcessNetwork`], for the
//! integration tests: start, stop and restart members from their data directories, find the
//! leader, propose through it with retries.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{Config, SnapshotPolicy};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use warren_quorum::machine::{Command, QueueConfig, QueueState, Reply};
use warren_quorum::network::InProcessNetwork;
use warren_quorum::node::{QueueGroup, QuorumError, QuorumNode};
use warren_quorum::storage::Applied;
use warren_quorum::types::NodeId;
use warren_quorum::wal::WalOptions;

pub const GROUP: u64 = 42;

/// Everything settles well within this on a loaded machine; tests fail only past it.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn raft_config() -> Config {
    Config {
        cluster_name: "test".into(),
        heartbeat_interval: 100,
        election_timeout_min: 800,
        election_timeout_max: 1600,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(100_000),
        max_in_snapshot_log_to_keep: 0,
        ..Config::default()
    }
}

pub struct Member {
    pub node: QuorumNode<InProcessNetwork>,
    pub group: QueueGroup,
    /// Effects of the commands this member applied.
    pub effects: UnboundedReceiver<Applied>,
}

pub struct Cluster {
    pub net: Arc<InProcessNetwork>,
    root: tempfile::TempDir,
    raft_config: Config,
    wal_options: WalOptions,
    pub members: BTreeMap<NodeId, Member>,
    /// How long one proposal attempt may take before it is retried (through whoever leads).
    pub attempt_timeout: Duration,
}

impl Cluster {
    /// Starts members `ids` of a new group and initialises it.
    pub async fn start(ids: &[NodeId], raft_config: Config, wal_options: WalOptions) -> Self {
        let mut cluster = Cluster {
            net: InProcessNetwork::new(),
            root: tempfile::tempdir().expect("tempdir"),
            raft_config,
            wal_options,
            members: BTreeMap::new(),
            attempt_timeout: Duration::from_secs(5),
        };
        for id in ids {
            cluster.start_member(*id).await;
        }
        cluster.members[&ids[0]]
            .group
            .initialize(ids)
            .await
            .expect("initialize");
        cluster
    }

    pub fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    /// Starts (or restarts from its directory) one member.
    pub async fn start_member(&mut self, id: NodeId) {
        let node = QuorumNode::open(
            id,
            &self.dir(id),
            self.wal_options.clone(),
            self.raft_config.clone(),
            self.net.clone(),
        )
        .expect("open node");
        let (sender, effects) = unbounded_channel();
        let group = node
            .start_group(GROUP, QueueConfig::default(), Some(sender))
            .await
            .expect("start group");
        self.net.add_node(id, node.registry());
        self.members.insert(
            id,
            Member {
                node,
                group,
                effects,
            },
        );
    }

    /// Stops a member as a crash would look to its peers: unreachable at once, then its groups
    /// and log shut down.
    pub async fn stop_member(&mut self, id: NodeId) {
        self.net.remove_node(id);
        if let Some(member) = self.members.remove(&id) {
            member.node.shutdown().await;
        }
    }

    pub fn group(&self, id: NodeId) -> &QueueGroup {
        &self.members[&id].group
    }

    /// The member that leads, as agreed by a majority of the running members.
    pub async fn leader(&self) -> NodeId {
        self.leader_among(&self.members.keys().copied().collect::<Vec<_>>())
            .await
    }

    /// The leader as seen by a majority of `voters` (members cut off from the rest excluded).
    pub async fn leader_among(&self, voters: &[NodeId]) -> NodeId {
        let started = Instant::now();
        loop {
            let mut votes: BTreeMap<NodeId, usize> = BTreeMap::new();
            for id in voters {
                if let Some(leader) = self.members[id].group.leader() {
                    *votes.entry(leader).or_default() += 1;
                }
            }
            if let Some((leader, _)) = votes.into_iter().find(|(leader, count)| {
                voters.contains(leader)
                    && *count * 2 > voters.len()
                    && self.members[leader].group.is_leader()
            }) {
                return leader;
            }
            assert!(started.elapsed() < DEADLINE, "no leader among {voters:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Proposes through whoever leads, retrying across elections. Give enqueues a publisher
    /// sequence so a retry of a command that did commit is recognised as a duplicate.
    pub async fn propose(&self, command: Command) -> Reply {
        let started = Instant::now();
        loop {
            let leader = self.leader().await;
            let attempt = tokio::time::timeout(
                self.attempt_timeout,
                self.group(leader).propose(command.clone()),
            )
            .await;
            match attempt {
                Ok(Ok(reply)) => return reply,
                Ok(Err(QuorumError::NotLeader { .. })) | Ok(Err(QuorumError::Raft(_))) | Err(_) => {
                }
                Ok(Err(e)) => panic!("propose failed: {e}"),
            }
            assert!(started.elapsed() < DEADLINE, "could not commit {command:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until member `id`'s copy of the queue satisfies `check`.
    pub async fn wait_for_queue(
        &self,
        id: NodeId,
        what: &str,
        check: impl Fn(&QueueState) -> bool,
    ) {
        let started = Instant::now();
        while !self.group(id).with_queue(&check) {
            assert!(
                started.elapsed() < DEADLINE,
                "member {id} never reached: {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.members.keys().copied().collect();
        for id in ids {
            self.stop_member(id).await;
        }
    }
}

pub fn enqueue(publisher: u64, seq: u64, body: Vec<u8>) -> Command {
    Command::Enqueue {
        publisher: Some(warren_quorum::machine::PublisherSeq { publisher, seq }),
        body: body.into(),
        ttl_ms: None,
    }
}
