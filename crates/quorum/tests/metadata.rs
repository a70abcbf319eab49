//! The cluster's metadata group: operations proposed on a follower come back applied locally,
//! the group survives its leader's crash and a member's restart from the WAL, a new node joins
//! from a snapshot (the log it would need already purged) and is removed again, and the same
//! over the TCP transport with seeds known only by address.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{Config, SnapshotPolicy};
use parking_lot::Mutex;
use warren_quorum::metadata::{MemberInfo, MetadataGroup, MetadataMachine, METADATA_OP_TIMEOUT};
use warren_quorum::network::{InProcessNetwork, Transport};
use warren_quorum::node::QuorumNode;
use warren_quorum::tcp::{TcpTransport, TcpTransportConfig};
use warren_quorum::types::NodeId;
use warren_quorum::wal::WalOptions;

/// Everything settles well within this on a loaded machine; tests fail only past it.
const DEADLINE: Duration = Duration::from_secs(30);

/// A ledger of strings: the application's state in these tests.
#[derive(Default)]
struct Ledger {
    ops: Mutex<Vec<String>>,
    restores: AtomicUsize,
}

impl MetadataMachine for Ledger {
    fn apply(&self, index: u64, op: &[u8]) -> Vec<u8> {
        let mut ops = self.ops.lock();
        ops.push(String::from_utf8_lossy(op).into_owned());
        format!("applied at {index} as #{}", ops.len()).into_bytes()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.ops.lock().join("\n").into_bytes()
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|e| e.to_string())?;
        *self.ops.lock() = if text.is_empty() {
            Vec::new()
        } else {
            text.split('\n').map(str::to_string).collect()
        };
        self.restores.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Ledger {
    fn ops(&self) -> Vec<String> {
        self.ops.lock().clone()
    }
}

fn raft_config(snapshot_every: u64) -> Config {
    Config {
        cluster_name: "test".into(),
        heartbeat_interval: 100,
        election_timeout_min: 800,
        election_timeout_max: 1600,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..Config::default()
    }
}

fn info(id: NodeId) -> MemberInfo {
    MemberInfo {
        name: format!("warren-{id}@localhost"),
        addr: format!("127.0.0.1:{}", 25000 + id),
        incarnation: 1000 + id,
    }
}

#[test]
fn member_info_round_trips_and_reads_records_without_an_incarnation() {
    let member = info(3);
    assert_eq!(MemberInfo::from_node(&member.to_node()), member);
    let older = MemberInfo::from_node(&openraft::BasicNode::new("127.0.0.1:25003 n3"));
    assert_eq!(
        (older.addr.as_str(), older.name.as_str(), older.incarnation),
        ("127.0.0.1:25003", "n3", 0)
    );
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Member<T: Transport> {
    node: QuorumNode<T>,
    group: MetadataGroup<T>,
    ledger: Arc<Ledger>,
}

/// Nodes of one process over [`InProcessNetwork`].
struct LocalCluster {
    net: Arc<InProcessNetwork>,
    root: tempfile::TempDir,
    config: Config,
    members: BTreeMap<NodeId, Member<InProcessNetwork>>,
}

impl LocalCluster {
    fn new(config: Config) -> Self {
        Self {
            net: InProcessNetwork::new(),
            root: tempfile::tempdir().expect("tempdir"),
            config,
            members: BTreeMap::new(),
        }
    }

    fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    /// Starts (or restarts from its directory) a node with an empty ledger.
    async fn start(&mut self, id: NodeId) {
        let node = QuorumNode::open(
            id,
            &self.dir(id),
            WalOptions::default(),
            self.config.clone(),
            self.net.clone(),
        )
        .expect("open node");
        let ledger = Arc::new(Ledger::default());
        let group = node
            .start_metadata_group(ledger.clone())
            .await
            .expect("start the metadata group");
        self.net.add_node(id, node.registry());
        self.members.insert(
            id,
            Member {
                node,
                group,
                ledger,
            },
        );
    }

    /// A crash as the peers see it: unreachable at once, then shut down.
    async fn crash(&mut self, id: NodeId) {
        self.net.remove_node(id);
        if let Some(member) = self.members.remove(&id) {
            member.group.shutdown().await;
            member.node.shutdown().await;
        }
    }

    fn member(&self, id: NodeId) -> &Member<InProcessNetwork> {
        &self.members[&id]
    }

    /// The leader every running member agrees on.
    async fn leader(&self) -> NodeId {
        let mut agreed = None;
        eventually("an agreed leader", || {
            let leaders: Vec<Option<NodeId>> =
                self.members.values().map(|m| m.group.leader()).collect();
            agreed = leaders[0].filter(|leader| {
                self.members.contains_key(leader) && leaders.iter().all(|l| *l == Some(*leader))
            });
            agreed.is_some()
        })
        .await;
        agreed.expect("leader")
    }

    async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.members.keys().copied().collect();
        for id in ids {
            self.crash(id).await;
        }
    }
}

fn strings(ops: &[&str]) -> Vec<String> {
    ops.iter().map(|op| op.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_proposes_and_the_group_survives_a_leader_crash_and_a_restart() {
    let mut cluster = LocalCluster::new(raft_config(100_000));
    for id in [1, 2, 3] {
        cluster.start(id).await;
    }
    assert!(!cluster.member(1).group.is_initialized().await.unwrap());
    let members: Vec<(NodeId, MemberInfo)> = [1, 2, 3].map(|id| (id, info(id))).to_vec();
    cluster.member(1).group.initialize(&members).await.unwrap();
    let leader = cluster.leader().await;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();

    // Proposed on a follower: forwarded, answered by the machine, and applied here on return.
    let answer = cluster.member(follower).group.propose("vhost a").await;
    let answer = String::from_utf8(answer.expect("propose on a follower")).unwrap();
    assert!(answer.ends_with("as #1"), "{answer}");
    assert_eq!(cluster.member(follower).ledger.ops(), strings(&["vhost a"]));
    cluster
        .member(leader)
        .group
        .propose("vhost b")
        .await
        .unwrap();
    for id in [1, 2, 3] {
        let ledger = cluster.member(id).ledger.clone();
        eventually("every member applied both", || ledger.ops().len() == 2).await;
        assert_eq!(ledger.ops(), strings(&["vhost a", "vhost b"]));
    }
    // Every member knows every member's name and address from the log.
    let mut known = cluster.member(follower).group.members();
    known.sort_by_key(|(id, _)| *id);
    assert_eq!(known, members);

    // The leader crashes: the other two elect one and carry on, proposing from either.
    cluster.crash(leader).await;
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, leader);
    let survivor = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader && *id != new_leader)
        .unwrap();
    cluster
        .member(survivor)
        .group
        .propose("user c")
        .await
        .unwrap();
    assert_eq!(
        cluster.member(survivor).ledger.ops(),
        strings(&["vhost a", "vhost b", "user c"])
    );

    // The crashed node restarts from its WAL with an empty ledger: replay and catch-up
    // rebuild it, and it is not initialized again.
    cluster.start(leader).await;
    assert!(cluster.member(leader).group.is_initialized().await.unwrap());
    let ledger = cluster.member(leader).ledger.clone();
    eventually("the restarted node caught up", || ledger.ops().len() == 3).await;
    assert_eq!(ledger.ops(), strings(&["vhost a", "vhost b", "user c"]));
    cluster
        .member(leader)
        .group
        .propose("policy d")
        .await
        .unwrap();
    assert_eq!(ledger.ops().last().map(String::as_str), Some("policy d"));
    cluster.shutdown().await;
}

/// A leader cut off from the others cannot commit: a change proposed on it fails once the
/// operation's deadline passes (before the fix it waited until the partition healed), and it
/// never applies anywhere, while the majority elects a leader and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_majority_refuses_a_change_and_it_never_applies() {
    let mut cluster = LocalCluster::new(raft_config(100_000));
    for id in [1, 2, 3] {
        cluster.start(id).await;
    }
    let members: Vec<(NodeId, MemberInfo)> = [1, 2, 3].map(|id| (id, info(id))).to_vec();
    cluster.member(1).group.initialize(&members).await.unwrap();
    let old_leader = cluster.leader().await;
    cluster
        .member(old_leader)
        .group
        .propose("vhost a")
        .await
        .unwrap();

    cluster.net.isolate(old_leader);
    let refused = tokio::time::timeout(
        METADATA_OP_TIMEOUT + DEADLINE,
        cluster.member(old_leader).group.propose("vhost cut-off"),
    )
    .await
    .expect("a change on a cut-off leader must end, not wait for the partition to heal");
    let error = refused
        .expect_err("no majority: the change cannot be committed")
        .to_string();
    assert!(error.contains("no majority"), "{error}");

    let majority: Vec<NodeId> = [1, 2, 3]
        .into_iter()
        .filter(|id| *id != old_leader)
        .collect();
    eventually("a leader among the majority", || {
        let leaders: Vec<Option<NodeId>> = majority
            .iter()
            .map(|id| cluster.member(*id).group.leader())
            .collect();
        leaders[0].is_some_and(|l| l != old_leader) && leaders.iter().all(|l| *l == leaders[0])
    })
    .await;
    cluster
        .member(majority[0])
        .group
        .propose("vhost b")
        .await
        .unwrap();

    cluster.net.heal();
    for id in [1, 2, 3] {
        let ledger = cluster.member(id).ledger.clone();
        eventually("every member with what was committed", || {
            ledger.ops() == strings(&["vhost a", "vhost b"])
        })
        .await;
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_joins_from_a_snapshot_and_is_removed_again() {
    // A snapshot every 10 entries, the log purged behind it: a newcomer cannot replay from 1.
    let mut cluster = LocalCluster::new(raft_config(10));
    for id in [1, 2, 3] {
        cluster.start(id).await;
    }
    let members: Vec<(NodeId, MemberInfo)> = [1, 2, 3].map(|id| (id, info(id))).to_vec();
    cluster.member(1).group.initialize(&members).await.unwrap();
    let leader = cluster.leader().await;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let expected: Vec<String> = (0..40).map(|i| format!("op {i}")).collect();
    for op in &expected {
        cluster
            .member(leader)
            .group
            .propose(op.clone())
            .await
            .unwrap();
    }
    let raft = cluster.member(leader).group.raft().clone();
    eventually("the leader purged its log behind a snapshot", || {
        raft.metrics()
            .borrow()
            .purged
            .is_some_and(|purged| purged.index >= 10)
    })
    .await;

    // Node 4 starts empty and is added from a follower: learner, snapshot, voter.
    cluster.start(4).await;
    cluster
        .member(follower)
        .group
        .add_member(4, info(4))
        .await
        .expect("add node 4");
    let newcomer = cluster.member(4).ledger.clone();
    eventually("node 4 has every operation", || newcomer.ops().len() == 40).await;
    assert_eq!(newcomer.ops(), expected);
    assert!(
        newcomer.restores.load(Ordering::Relaxed) >= 1,
        "node 4 was restored from a snapshot"
    );
    let status = cluster.member(leader).group.status();
    assert_eq!(status.members.len(), 4);
    assert!(status.members.iter().all(|m| m.voter), "{status:?}");
    // Node 4 votes: proposals commit with it, and it applies them.
    cluster.member(4).group.propose("after join").await.unwrap();
    assert_eq!(
        newcomer.ops().last().map(String::as_str),
        Some("after join")
    );

    // Removed (asked of node 4 itself): three members remain and keep committing.
    cluster
        .member(4)
        .group
        .remove_member(4)
        .await
        .expect("remove node 4");
    cluster.crash(4).await;
    let leader = cluster.leader().await;
    eventually("membership back to three", || {
        cluster.member(leader).group.members().len() == 3
    })
    .await;
    cluster
        .member(follower)
        .group
        .propose("after removal")
        .await
        .unwrap();
    // Adding a member that is already one is refused.
    let again = cluster.member(leader).group.add_member(2, info(2)).await;
    assert!(again.is_err(), "{again:?}");
    cluster.shutdown().await;
}

async fn tcp_member(
    id: NodeId,
    dir: PathBuf,
    secret: &[u8],
) -> (Arc<TcpTransport>, Member<TcpTransport>) {
    let transport = TcpTransport::bind(TcpTransportConfig::new(
        id,
        "127.0.0.1:0".parse().unwrap(),
        secret,
    ))
    .await
    .expect("bind");
    let node = QuorumNode::open(
        id,
        &dir,
        WalOptions::default(),
        raft_config(100_000),
        transport.clone(),
    )
    .expect("open node");
    transport.serve(node.registry());
    let ledger = Arc::new(Ledger::default());
    let group = node
        .start_metadata_group(ledger.clone())
        .await
        .expect("start the metadata group");
    (
        transport,
        Member {
            node,
            group,
            ledger,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_seeds_known_by_address_form_one_group_and_an_intruder_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let mut transports = BTreeMap::new();
    let mut members = BTreeMap::new();
    for id in [11, 12, 13] {
        let (transport, member) = tcp_member(id, root.path().join(id.to_string()), b"cookie").await;
        transports.insert(id, transport);
        members.insert(id, member);
    }
    let addrs: BTreeMap<NodeId, SocketAddr> = transports
        .iter()
        .map(|(id, t)| (*id, t.local_addr()))
        .collect();
    // Every node learns the others' ids from their addresses alone.
    for (id, transport) in &transports {
        for (peer, addr) in &addrs {
            if peer != id {
                assert_eq!(transport.discover(*addr).await, Ok(*peer));
            }
        }
    }
    let initial: Vec<(NodeId, MemberInfo)> = addrs
        .iter()
        .map(|(id, addr)| {
            (
                *id,
                MemberInfo {
                    name: format!("n{id}"),
                    addr: addr.to_string(),
                    incarnation: 0,
                },
            )
        })
        .collect();
    members[&11].group.initialize(&initial).await.unwrap();
    eventually("a leader", || {
        members.values().all(|m| m.group.leader().is_some())
    })
    .await;
    let leader = members[&11].group.leader().unwrap();
    let follower = [11, 12, 13].into_iter().find(|id| *id != leader).unwrap();
    members[&follower].group.propose("over tcp").await.unwrap();
    assert_eq!(members[&follower].ledger.ops(), strings(&["over tcp"]));
    for member in members.values() {
        let ledger = member.ledger.clone();
        eventually("all applied", || ledger.ops().len() == 1).await;
    }

    // A node with another secret cannot even learn who listens there.
    let (intruder, member) = tcp_member(14, root.path().join("14"), b"intruder").await;
    let refused = intruder.discover(addrs[&11]).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(members[&11].group.members().iter().all(|(id, _)| *id != 14));
    member.group.shutdown().await;
    member.node.shutdown().await;
    intruder.shutdown();

    for (id, member) in members {
        member.group.shutdown().await;
        member.node.shutdown().await;
        transports[&id].shutdown();
    }
}
