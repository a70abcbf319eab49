//! Nodes talking over real loopback TCP for the transport tests: each node has its own tokio
//! runtime, write-ahead log and [`TcpTransport`], as separate processes would, and the test
//! drives them from its own runtime. Also a freezable TCP proxy that makes a node look stopped
//! (SIGSTOP) to its peers: connections stay open but no byte moves.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::Config;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;
use warren_quorum::machine::{Command, PublisherSeq, QueueConfig, QueueState, Reply};
use warren_quorum::node::{QueueGroup, QuorumError, QuorumNode};
use warren_quorum::tcp::{TcpTransport, TcpTransportConfig};
use warren_quorum::types::{GroupId, NodeId};
use warren_quorum::wal::WalOptions;

/// Everything settles well within this on a loaded machine; tests fail only past it.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub fn raft_config() -> Config {
    Config {
        cluster_name: "tcp-test".into(),
        heartbeat_interval: 150,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..Config::default()
    }
}

/// Transport timings for tests: a quick failure detector, still far above scheduling noise.
pub fn transport_config(node: NodeId, secret: &[u8]) -> TcpTransportConfig {
    TcpTransportConfig {
        heartbeat_interval: Duration::from_millis(200),
        peer_down_after: Duration::from_secs(5),
        handshake_timeout: Duration::from_secs(3),
        rpc_timeout: Duration::from_secs(5),
        reconnect_backoff_max: Duration::from_secs(1),
        ..TcpTransportConfig::new(node, "127.0.0.1:0".parse().expect("addr"), secret)
    }
}

pub fn enqueue(publisher: u64, seq: u64, body: Vec<u8>) -> Command {
    Command::Enqueue {
        publisher: Some(PublisherSeq { publisher, seq }),
        body: body.into(),
        ttl_ms: None,
    }
}

/// One node: its runtime, transport, quorum host and started groups.
pub struct Node {
    pub id: NodeId,
    runtime: Option<Runtime>,
    pub transport: Arc<TcpTransport>,
    pub quorum: Arc<QuorumNode<TcpTransport>>,
    pub groups: Mutex<HashMap<GroupId, Arc<QueueGroup>>>,
}

impl Node {
    pub async fn start(
        id: NodeId,
        dir: PathBuf,
        transport_config: TcpTransportConfig,
        raft_config: Config,
    ) -> Node {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("node-{id}"))
            .enable_all()
            .build()
            .expect("node runtime");
        let (transport, quorum) = runtime
            .spawn(async move {
                let transport = TcpTransport::bind(transport_config)
                    .await
                    .expect("bind the cluster port");
                let quorum = QuorumNode::open(
                    id,
                    &dir,
                    WalOptions::default(),
                    raft_config,
                    transport.clone(),
                )
                .expect("open the node");
                transport.serve(quorum.registry());
                (transport, Arc::new(quorum))
            })
            .await
            .expect("node start task");
        Node {
            id,
            runtime: Some(runtime),
            transport,
            quorum,
            groups: Mutex::default(),
        }
    }

    /// Runs `work` on this node's runtime.
    pub async fn run<R: Send + 'static>(
        &self,
        work: impl Future<Output = R> + Send + 'static,
    ) -> R {
        self.runtime
            .as_ref()
            .expect("running node")
            .spawn(work)
            .await
            .expect("node task")
    }

    pub async fn add_peer(&self, peer: NodeId, addr: SocketAddr) {
        let transport = self.transport.clone();
        self.run(async move { transport.add_peer(peer, addr) })
            .await;
    }

    pub async fn start_group(&self, group: GroupId) -> Arc<QueueGroup> {
        let quorum = self.quorum.clone();
        let started = self
            .run(async move {
                quorum
                    .start_group(group, QueueConfig::default(), None)
                    .await
                    .expect("start group")
            })
            .await;
        let started = Arc::new(started);
        self.groups.lock().insert(group, started.clone());
        started
    }

    pub fn group(&self, group: GroupId) -> Arc<QueueGroup> {
        self.groups.lock()[&group].clone()
    }

    pub async fn propose(&self, group: GroupId, command: Command) -> Result<Reply, QuorumError> {
        let member = self.group(group);
        self.run(async move { member.propose(command).await }).await
    }

    /// Stops the node as a shutdown would: groups, log, connections, runtime.
    pub async fn stop(mut self) {
        let quorum = self.quorum.clone();
        self.run(async move { quorum.shutdown().await }).await;
        self.transport.shutdown();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.transport.shutdown();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

pub struct TcpCluster {
    pub nodes: BTreeMap<NodeId, Node>,
    root: tempfile::TempDir,
}

impl TcpCluster {
    /// Starts nodes (each with its own secret and transport settings) without connecting them.
    pub async fn start_unwired(
        ids: &[NodeId],
        transport_config: impl Fn(NodeId) -> TcpTransportConfig,
        raft_config: Config,
    ) -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let mut nodes = BTreeMap::new();
        for id in ids {
            let dir = root.path().join(format!("node-{id}"));
            let node = Node::start(*id, dir, transport_config(*id), raft_config.clone()).await;
            nodes.insert(*id, node);
        }
        TcpCluster { nodes, root }
    }

    /// Starts nodes sharing one secret, each told every other's address.
    pub async fn start(ids: &[NodeId], raft_config: Config) -> Self {
        let cluster =
            Self::start_unwired(ids, |id| transport_config(id, b"test-cookie"), raft_config).await;
        cluster.wire(|_, to| cluster.addr(to)).await;
        cluster
    }

    pub fn addr(&self, id: NodeId) -> SocketAddr {
        self.nodes[&id].transport.local_addr()
    }

    /// Tells every node where every other listens, `addr(from, to)` deciding the address.
    pub async fn wire(&self, addr: impl Fn(NodeId, NodeId) -> SocketAddr) {
        for (from, node) in &self.nodes {
            for to in self.nodes.keys() {
                if to != from {
                    node.add_peer(*to, addr(*from, *to)).await;
                }
            }
        }
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    /// Starts a group's members on `members` and initialises it on the first.
    pub async fn create_group(&self, group: GroupId, members: &[NodeId]) {
        for id in members {
            self.nodes[id].start_group(group).await;
        }
        let first = self.nodes[&members[0]].group(group);
        let members = members.to_vec();
        self.nodes[&members[0]]
            .run(async move { first.initialize(&members).await })
            .await
            .expect("initialize");
    }

    /// The member of `group` that leads, as agreed by a majority of `voters`.
    pub async fn leader_among(&self, group: GroupId, voters: &[NodeId]) -> NodeId {
        let started = Instant::now();
        loop {
            let mut votes: BTreeMap<NodeId, usize> = BTreeMap::new();
            for id in voters {
                if let Some(leader) = self.nodes[id].group(group).leader() {
                    *votes.entry(leader).or_default() += 1;
                }
            }
            if let Some((leader, _)) = votes.into_iter().find(|(leader, count)| {
                voters.contains(leader)
                    && *count * 2 > voters.len()
                    && self.nodes[leader].group(group).is_leader()
            }) {
                return leader;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "group {group}: no leader among {voters:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn leader(&self, group: GroupId) -> NodeId {
        let voters: Vec<NodeId> = self.nodes.keys().copied().collect();
        self.leader_among(group, &voters).await
    }

    /// Proposes through whoever leads among `voters`, retrying across elections.
    pub async fn propose_among(
        &self,
        group: GroupId,
        voters: &[NodeId],
        command: Command,
    ) -> Reply {
        let started = Instant::now();
        loop {
            let leader = self.leader_among(group, voters).await;
            let attempt = tokio::time::timeout(
                Duration::from_secs(10),
                self.nodes[&leader].propose(group, command.clone()),
            )
            .await;
            match attempt {
                Ok(Ok(reply)) => return reply,
                Ok(Err(QuorumError::NotLeader { .. })) | Ok(Err(QuorumError::Raft(_))) | Err(_) => {
                }
                Ok(Err(e)) => panic!("propose failed: {e}"),
            }
            assert!(
                started.elapsed() < DEADLINE,
                "group {group}: could not commit {command:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn propose(&self, group: GroupId, command: Command) -> Reply {
        let voters: Vec<NodeId> = self.nodes.keys().copied().collect();
        self.propose_among(group, &voters, command).await
    }

    /// Waits until node `id`'s copy of `group`'s queue satisfies `check`.
    pub async fn wait_for_queue(
        &self,
        id: NodeId,
        group: GroupId,
        what: &str,
        check: impl Fn(&QueueState) -> bool,
    ) {
        let started = Instant::now();
        let member = self.nodes[&id].group(group);
        while !member.with_queue(&check) {
            assert!(
                started.elapsed() < DEADLINE,
                "node {id}, group {group} never reached: {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until node `id`'s failure detector says `peer` is `up`.
    pub async fn wait_for_peer(&self, id: NodeId, peer: NodeId, up: bool) {
        let started = Instant::now();
        loop {
            let status = self.nodes[&id].transport.peer_status(peer);
            if status.as_ref().is_some_and(|status| status.up == up) {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "node {id} never saw node {peer} {}: {status:?}",
                if up { "up" } else { "down" }
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops one node (its data stays in the cluster's directory).
    pub async fn stop_node(&mut self, id: NodeId) {
        if let Some(node) = self.nodes.remove(&id) {
            node.stop().await;
        }
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop_node(id).await;
        }
    }
}

/// A TCP proxy in front of one node that can be frozen: while frozen, its connections stay
/// open but carry nothing and new ones are accepted but not forwarded — what a SIGSTOPped
/// process looks like from the network.
pub struct FreezableProxy {
    pub addr: SocketAddr,
    frozen: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezableProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let addr = listener.local_addr().expect("proxy addr");
        let (frozen, _) = watch::channel(false);
        let frozen_for_task = frozen.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let frozen = frozen_for_task.subscribe();
                tokio::spawn(async move {
                    let mut thawed = frozen.clone();
                    if thawed.wait_for(|frozen| !*frozen).await.is_err() {
                        return;
                    }
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, frozen.clone()),
                        pump(server_read, client_write, frozen)
                    );
                });
            }
        });
        FreezableProxy { addr, frozen, task }
    }

    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if frozen.wait_for(|frozen| !*frozen).await.is_err() {
            return;
        }
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        // Bytes read just as the freeze began are held until the thaw.
        if frozen.wait_for(|frozen| !*frozen).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
