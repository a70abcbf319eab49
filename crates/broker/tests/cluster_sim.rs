//! Deterministic simulation of the broker's cluster layer: three whole brokers (the metadata
//! group whose machine is their definitions, formation from one peer list naming every node,
//! quorum-queue placement, group start and stop, continuous membership reconciliation,
//! failover, forwarding links) on turmoil's simulated hosts, network and clock, each node's
//! quorum log on an in-memory disk that survives its crashes. Only the sockets differ from a
//! real node (`SimSockets`, turmoil's TCP behind the transport's `Sockets`).
//!
//! The nodes start at random moments within the first seconds, all given the same peer list
//! (themselves included), while a client declares quorum queues through random nodes, sets an
//! `ha-mode: all` policy and declares classic queues it matches (made replicated queues), from
//! the first millisecond on — as a compose file and an application's start-up do. Meanwhile
//! the seed draws partitions between pairs and crashes (a node's host dropped and booted
//! again on its disk). Then everything heals, and within a bound:
//!
//! - one cluster: every node lists the three nodes as voters of the metadata group;
//! - one truth per queue: every queue whose declaration was acknowledged exists on every
//!   node as a replicated queue, every node lists the same members, three of them (grown
//!   there by reconciliation when it was placed before the others joined), and names the same
//!   leader.
//!
//! Each run prints nothing unless it fails; a failure names its seed and the state each node
//! shows, and `WARREN_CLUSTER_SIM_SEED=<n> cargo test -p warren-broker --test cluster_sim`
//! replays that schedule: the same start times, faults and declarations, drawn from the seed,
//! with openraft's, the transport's and tokio's random draws seeded too (tokio's through
//! turmoil, under the `tokio_unstable` cfg that .cargo/config.toml sets), and every loop over
//! the node's groups in group order: a seed replays exactly, `a_seed_replays_exactly` runs one
//! twice and compares the hash of its trace (`WARREN_CLUSTER_SIM_VERBOSE=1` prints each run's).
//!
//! On the code before their fixes it finds the day-one splits: a quorum queue declared while
//! the cluster forms placed on a node alone (the declaring node not yet a voter), a queue made
//! replicated by an `ha-mode` policy at apply time on each node (each starting a group of its
//! own), and a peer list naming the node itself never forming a cluster. It also found a join
//! left half done (added as a learner, the promotion lost: the node stayed a learner for good)
//! and a growth interrupted between its record and its Raft change (the group stayed short). `WARREN_CLUSTER_SIM_SEEDS=<count>` runs that many seeds (default
//! 8) from `WARREN_CLUSTER_SIM_FIRST_SEED` (default 1); `WARREN_CLUSTER_SIM_LOG=<filter>`
//! prints the nodes' logs.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use warren_broker::definition_op::{DefinitionOp, PolicyList};
use warren_broker::quorum::cluster::{node_id, ClusterNode};
use warren_broker::quorum::{join, QuorumHost, QuorumQueue};
use warren_broker::remote::RemoteQueue;
use warren_broker::Broker;
use warren_codec::{FieldTable, FieldValue};
use warren_quorum::memlog::{MemDisk, MemLog};
use warren_quorum::node::DEFAULT_SNAPSHOT_EVERY_LOGS;
use warren_quorum::runtime::{seed_thread_rng, unseed_thread_rng};
use warren_quorum::sockets::{BoxedStream, PeerListener, Sockets};
use warren_quorum::tcp::{TcpTransport, TcpTransportConfig};
use warren_quorum::types::NodeId;

const NODES: [usize; 3] = [1, 2, 3];
const PORT: u16 = 25672;
const SECRET: &[u8] = b"simulated-cluster-secret";
/// Nodes start at random moments within this.
const START_SPREAD_MS: u64 = 3_000;
/// Faults are drawn for this long, then everything heals.
const CHAOS_MS: u64 = 15_000;
/// After healing, the cluster must agree on everything within this (reconciliation waits
/// 3 s for a node to settle, a failed change 30 s before it is tried again).
const LIVENESS_MS: u64 = 75_000;
/// A declaration not acknowledged by then is given up (and not checked).
const GIVE_UP_AFTER_HEAL_MS: u64 = 30_000;
const QUORUM_QUEUES: usize = 4;
const MIRRORED_QUEUES: usize = 2;
const DEFAULT_SEEDS: u64 = 8;

fn host(index: usize) -> String {
    format!("n{index}")
}

fn node_name(index: usize) -> String {
    format!("n{index}@n{index}")
}

fn now_ms() -> u64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
}

/// A small deterministic generator (splitmix64), one per purpose, drawn from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        Rng(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low).max(1)
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
}

/// turmoil's TCP as the cluster transport's sockets.
struct SimSockets;

struct SimListener(turmoil::net::TcpListener);

impl Sockets for SimSockets {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'static, std::io::Result<Box<dyn PeerListener>>> {
        Box::pin(async move {
            let listener = turmoil::net::TcpListener::bind(addr).await?;
            Ok(Box::new(SimListener(listener)) as Box<dyn PeerListener>)
        })
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, std::io::Result<BoxedStream>> {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(stream) as BoxedStream)
        })
    }

    fn resolve(&self, addr: String) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            let (host, port) = addr
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
                .ok_or_else(|| std::io::Error::other(format!("not host:port: {addr}")))?;
            Ok(vec![SocketAddr::new(turmoil::lookup(host), port)])
        })
    }
}

impl PeerListener for SimListener {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn accept(&self) -> BoxFuture<'_, std::io::Result<(BoxedStream, SocketAddr)>> {
        Box::pin(async move {
            let (stream, remote) = self.0.accept().await?;
            Ok((Box::new(stream) as BoxedStream, remote))
        })
    }
}

/// What the client asks a node to do, run on the node's own host (its tasks and sockets are
/// that host's).
enum Request {
    Change(DefinitionOp),
}

/// A node as the checker and the client reach it during one boot.
#[derive(Clone)]
struct Running {
    broker: Arc<Broker>,
    cluster: Arc<ClusterNode>,
    requests: mpsc::UnboundedSender<(Request, oneshot::Sender<Result<(), String>>)>,
}

struct World {
    seed: u64,
    disks: BTreeMap<usize, Arc<MemDisk>>,
    running: Mutex<BTreeMap<usize, Running>>,
    boots: Mutex<BTreeMap<usize, u64>>,
    /// Queues whose declaration a node acknowledged: (name, how it was made).
    acknowledged: Mutex<Vec<(String, &'static str)>>,
    healed: AtomicBool,
    verdict: Mutex<Option<Result<(), String>>>,
    trace: Mutex<Vec<String>>,
    /// Every traced event, hashed: equal for two runs of one seed when the run is replayed
    /// exactly.
    trace_hash: Mutex<DefaultHasher>,
}

impl World {
    /// Records an event at the simulated time (the driver passes its own: the time the
    /// hosts read is not set on its thread).
    fn trace(&self, event: String) {
        self.trace_at(now_ms(), event);
    }

    fn trace_at(&self, at_ms: u64, event: String) {
        let line = format!("{at_ms:>6} ms  {event}");
        line.hash(&mut *self.trace_hash.lock());
        let mut trace = self.trace.lock();
        trace.push(line);
        if trace.len() > 60 {
            trace.remove(0);
        }
    }
}

fn incarnation(seed: u64, index: usize) -> u64 {
    Rng::new(seed, 100 + index as u64).next() | 1
}

/// One boot of node `index`: a broker, its cluster transport on turmoil's network, its
/// quorum host on the node's in-memory disk, joined through a peer list naming every node.
async fn boot(world: Arc<World>, index: usize) -> turmoil::Result {
    let boot = {
        let mut boots = world.boots.lock();
        let count = boots.entry(index).or_default();
        *count += 1;
        *count
    };
    if boot == 1 {
        let delay = Rng::new(world.seed, index as u64).range(0, START_SPREAD_MS);
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    world.trace(format!("n{index} boots ({boot})"));
    let name = node_name(index);
    let id = node_id(&name);
    let broker = Broker::new(1 << 30, None);
    broker.name_node(&name);
    let transport = TcpTransport::bind(TcpTransportConfig {
        incarnation: incarnation(world.seed, index),
        name: name.clone(),
        sockets: Arc::new(SimSockets),
        ..TcpTransportConfig::new(id, (Ipv4Addr::UNSPECIFIED, PORT).into(), SECRET)
    })
    .await?;
    let disk = world.disks[&index].clone();
    let log = MemLog::recover(disk.clone());
    // The disk: a flush takes 0.2–3 ms.
    let flusher = log.clone();
    let mut disk_rng = Rng::new(world.seed, 1_000 * index as u64 + boot);
    tokio::spawn(async move {
        loop {
            flusher.wait_for_writes().await;
            tokio::time::sleep(Duration::from_micros(disk_rng.range(200, 3_000))).await;
            flusher.flush();
        }
    });
    let quorum = QuorumHost::open_cluster_in_memory(
        log,
        disk,
        id,
        transport.clone(),
        DEFAULT_SNAPSHOT_EVERY_LOGS,
    )?;
    join::spawn_failover(&quorum, &transport);
    broker.enable_quorum(quorum.clone());
    let seeds = NODES
        .iter()
        .map(|i| format!("{}:{PORT}", host(*i)))
        .collect();
    let advertised = format!("{}:{PORT}", host(index));
    let cluster = join::join(&broker, &quorum, transport, &name, &advertised, seeds).await?;
    let (requests, mut incoming) = mpsc::unbounded_channel();
    world.running.lock().insert(
        index,
        Running {
            broker: broker.clone(),
            cluster,
            requests,
        },
    );
    while let Some((request, reply)) = incoming.recv().await {
        let broker = broker.clone();
        tokio::spawn(async move {
            let Request::Change(op) = request;
            let outcome = broker.change(op).result().await;
            let _ = reply.send(outcome.map(|_| ()).map_err(|e| e.to_string()));
        });
    }
    Ok(())
}

fn quorum_declare(name: &str) -> DefinitionOp {
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type", FieldValue::string("quorum"));
    arguments.insert("x-quorum-initial-group-size", FieldValue::I32(3));
    declare(name, arguments)
}

fn declare(name: &str, arguments: FieldTable) -> DefinitionOp {
    DefinitionOp::declare_named_queue("/", name, true, false, arguments)
}

/// Sends `op` to a node (the seed picks which), trying the others while it is not running or
/// refuses; true once one acknowledged it.
async fn change(world: &World, rng: &mut Rng, what: &str, op: DefinitionOp) -> bool {
    let mut attempt = 0;
    while now_ms() < CHAOS_MS + GIVE_UP_AFTER_HEAL_MS {
        attempt += 1;
        let index = NODES[rng.range(0, NODES.len() as u64) as usize];
        let running = world.running.lock().get(&index).cloned();
        let Some(running) = running else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let (reply, answer) = oneshot::channel();
        if running
            .requests
            .send((Request::Change(op.clone()), reply))
            .is_err()
        {
            continue;
        }
        match tokio::time::timeout(Duration::from_secs(40), answer).await {
            Ok(Ok(Ok(()))) => {
                world.trace(format!(
                    "{what} acknowledged by n{index} (attempt {attempt})"
                ));
                return true;
            }
            Ok(Ok(Err(e))) => world.trace(format!("{what} refused by n{index}: {e}")),
            _ => world.trace(format!("{what}: n{index} did not answer")),
        }
        tokio::time::sleep(Duration::from_millis(rng.range(50, 500))).await;
    }
    false
}

/// The client: declarations from the first moment on, then the checks once healed.
async fn client(world: Arc<World>) -> turmoil::Result {
    let mut rng = Rng::new(world.seed, 7);
    let mut steps: Vec<(u64, &'static str, usize)> = Vec::new();
    for i in 0..QUORUM_QUEUES {
        steps.push((rng.range(0, CHAOS_MS / 2), "quorum", i));
    }
    let policy_at = rng.range(0, CHAOS_MS / 3);
    steps.push((policy_at, "policy", 0));
    for i in 0..MIRRORED_QUEUES {
        steps.push((policy_at + rng.range(1, CHAOS_MS / 2), "mirrored", i));
    }
    steps.sort();
    for (at, kind, i) in steps {
        let wait = at.saturating_sub(now_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        match kind {
            "quorum" => {
                let name = format!("qq{i}");
                if change(&world, &mut rng, &name, quorum_declare(&name)).await {
                    world.acknowledged.lock().push((name, kind));
                }
            }
            "policy" => {
                let op = DefinitionOp::PolicySet {
                    list: PolicyList::Policy,
                    vhost: "/".into(),
                    name: "ha-all".into(),
                    body_json: r#"{"pattern":"^ha\\.","definition":{"ha-mode":"all"}}"#.into(),
                };
                if !change(&world, &mut rng, "policy ha-all", op).await {
                    world.trace("policy ha-all never acknowledged".into());
                }
            }
            _ => {
                let name = format!("ha.{i}");
                if change(&world, &mut rng, &name, declare(&name, FieldTable::new())).await {
                    world.acknowledged.lock().push((name, kind));
                }
            }
        }
    }
    while !world.healed.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = now_ms() + LIVENESS_MS;
    let verdict = loop {
        let problems = problems(&world);
        if problems.is_empty() {
            break Ok(());
        }
        if now_ms() >= deadline {
            break Err(problems.join("\n  "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    *world.verdict.lock() = Some(verdict);
    Ok(())
}

/// A queue as one node shows it.
#[derive(Debug, PartialEq)]
enum Shown {
    /// Its group's members (node ids, sorted) and leader.
    Replicated(Vec<NodeId>, Option<NodeId>),
    /// A classic queue, served by the node named.
    Classic(String),
    Missing,
}

/// What keeps the cluster from agreeing, as each node shows it (empty: nothing).
fn problems(world: &World) -> Vec<String> {
    let running = world.running.lock().clone();
    let mut problems = Vec::new();
    if running.len() < NODES.len() {
        problems.push(format!("only {:?} running", running.keys()));
        return problems;
    }
    let ids: Vec<NodeId> = NODES.iter().map(|i| node_id(&node_name(*i))).collect();
    for (index, node) in &running {
        let status = node.cluster.metadata().status();
        let voters: Vec<NodeId> = status
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.node)
            .collect();
        if ids.iter().any(|id| !voters.contains(id)) || voters.len() != ids.len() {
            problems.push(format!(
                "n{index}: metadata voters {voters:?}, not the three nodes {ids:?}"
            ));
        }
    }
    let acknowledged = world.acknowledged.lock().clone();
    for (name, kind) in &acknowledged {
        let mut seen = Vec::new();
        for (index, node) in &running {
            let queue = node.broker.vhost("/").and_then(|vhost| vhost.queue(name));
            let shown = match &queue {
                Some(queue) => match (QuorumQueue::of(queue), RemoteQueue::of(queue)) {
                    (Some(qq), _) => {
                        let mut members = qq.member_ids();
                        members.sort();
                        Shown::Replicated(members, qq.leader())
                    }
                    (None, Some(remote)) => Shown::Classic(remote.node().to_owned()),
                    (None, None) => Shown::Classic(node_name(*index)),
                },
                None => Shown::Missing,
            };
            seen.push((*index, shown));
        }
        let first = &seen[0].1;
        let agreed = seen.iter().all(|(_, shown)| shown == first);
        // A queue the policy matched may stay classic (its node had not applied the policy
        // when it declared it), on every node alike.
        let complete = match first {
            Shown::Replicated(members, leader) => members.len() == 3 && leader.is_some(),
            Shown::Classic(_) => *kind == "mirrored",
            Shown::Missing => false,
        };
        if !agreed || !complete {
            problems.push(format!(
                "{kind} queue {name}: by node {seen:?}, expected one queue everywhere (three \
                 members and one leader when replicated)"
            ));
        }
    }
    problems
}

/// The seed's faults during the chaos phase: pairs partitioned and repaired, nodes crashed
/// and booted again on their disks.
struct Faults {
    rng: Rng,
    next_at: u64,
    /// (a, b, repair at)
    cuts: Vec<(usize, usize, u64)>,
    /// (node, boot again at)
    down: Vec<(usize, u64)>,
}

impl Faults {
    fn step(&mut self, sim: &mut turmoil::Sim<'_>, world: &World, now: u64) {
        let (repaired, kept): (Vec<_>, Vec<_>) =
            self.cuts.iter().partition(|(_, _, at)| *at <= now);
        self.cuts = kept;
        for (a, b, _) in repaired {
            sim.repair(host(a), host(b));
            world.trace_at(now, format!("repair n{a}-n{b}"));
        }
        let (up, still) = self.down.iter().partition(|(_, at)| *at <= now);
        self.down = still;
        for (index, _) in up {
            self.bounce(sim, world, index, now);
        }
        if now < self.next_at {
            return;
        }
        self.next_at = now + self.rng.range(500, 3_000);
        let a = NODES[self.rng.range(0, 3) as usize];
        let b = NODES[(NODES.iter().position(|n| *n == a).unwrap_or(0)
            + 1
            + self.rng.range(0, 2) as usize)
            % 3];
        if self.rng.chance(3) && self.down.is_empty() {
            let until = now + self.rng.range(300, 4_000);
            sim.crash(host(a));
            world.running.lock().remove(&a);
            world.disks[&a].power_loss(|_| 0);
            world.trace_at(now, format!("crash n{a} until {until}"));
            self.down.push((a, until));
        } else if !self
            .cuts
            .iter()
            .any(|(x, y, _)| (*x, *y) == (a, b) || (*x, *y) == (b, a))
        {
            let until = now + self.rng.range(300, 5_000);
            sim.partition(host(a), host(b));
            world.trace_at(now, format!("partition n{a}-n{b} until {until}"));
            self.cuts.push((a, b, until));
        }
    }

    fn bounce(&self, sim: &mut turmoil::Sim<'_>, world: &World, index: usize, now: u64) {
        sim.bounce(host(index));
        world.trace_at(now, format!("boot n{index} again"));
    }

    fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>, world: &World, now: u64) {
        for (a, b, _) in self.cuts.drain(..) {
            sim.repair(host(a), host(b));
        }
        let down: Vec<_> = self.down.drain(..).collect();
        for (index, _) in down {
            self.bounce(sim, world, index, now);
        }
        world.trace_at(now, "healed".into());
        world.healed.store(true, Ordering::Relaxed);
    }
}

/// One seed's run: its verdict and the hash of every event it traced.
struct Outcome {
    verdict: Result<(), String>,
    trace_hash: u64,
    recent: Vec<String>,
}

fn run(seed: u64) -> Outcome {
    let _log = std::env::var("WARREN_CLUSTER_SIM_LOG").ok().map(|filter| {
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .finish(),
        )
    });
    seed_thread_rng(seed);
    let world = Arc::new(World {
        seed,
        disks: NODES.iter().map(|i| (*i, MemDisk::new())).collect(),
        running: Mutex::default(),
        boots: Mutex::default(),
        acknowledged: Mutex::default(),
        healed: AtomicBool::new(false),
        verdict: Mutex::default(),
        trace: Mutex::default(),
        trace_hash: Mutex::default(),
    });
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_millis(CHAOS_MS + LIVENESS_MS + 60_000))
        .tick_duration(Duration::from_millis(5))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .tcp_capacity(1 << 16)
        .rng_seed(seed)
        .build();
    for index in NODES {
        let world = world.clone();
        sim.host(host(index), move || boot(world.clone(), index));
    }
    sim.client("client", client(world.clone()));
    let mut faults = Faults {
        rng: Rng::new(seed, 3),
        next_at: START_SPREAD_MS,
        cuts: Vec::new(),
        down: Vec::new(),
    };
    let outcome = loop {
        let now = sim.elapsed().as_millis() as u64;
        if now < CHAOS_MS {
            faults.step(&mut sim, &world, now);
        } else if !world.healed.load(Ordering::Relaxed) {
            faults.heal_all(&mut sim, &world, now);
        }
        match sim.step() {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(format!("simulation failed: {e}")),
        }
    };
    drop(sim);
    unseed_thread_rng();
    let verdict = world.verdict.lock().clone().unwrap_or_else(|| {
        Err(format!(
            "the client never reached its checks; at the end:\n  {}",
            problems(&world).join("\n  ")
        ))
    });
    let trace_hash = world.trace_hash.lock().finish();
    if std::env::var_os("WARREN_CLUSTER_SIM_VERBOSE").is_some() {
        eprintln!(
            "seed {seed}: trace {trace_hash:016x}, {} queues acknowledged",
            world.acknowledged.lock().len()
        );
    }
    let recent = world.trace.lock().clone();
    let verdict = outcome.and(verdict).map_err(|problems| {
        format!(
            "seed {seed}: {problems}\nlast events:\n  {}\nreplay: WARREN_CLUSTER_SIM_SEED={seed} \
             cargo test -p warren-broker --test cluster_sim",
            recent.join("\n  ")
        )
    });
    Outcome {
        verdict,
        trace_hash,
        recent,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn one_cluster_and_one_truth_per_queue_under_seeded_faults() {
    let seeds: Vec<u64> = match env_u64("WARREN_CLUSTER_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("WARREN_CLUSTER_SIM_FIRST_SEED").unwrap_or(1);
            let count = env_u64("WARREN_CLUSTER_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
            (first..first + count).collect()
        }
    };
    let failures: Vec<String> = seeds
        .into_iter()
        .filter_map(|seed| run(seed).verdict.err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} seed(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The replay promise: one seed, run twice, traces the same events in the same order at the
/// same simulated moments (the nodes' own random draws, openraft's and tokio's are all seeded).
#[test]
fn a_seed_replays_exactly() {
    let seed = env_u64("WARREN_CLUSTER_SIM_SEED").unwrap_or(9);
    let first = run(seed);
    let second = run(seed);
    assert_eq!(
        first.trace_hash,
        second.trace_hash,
        "seed {seed} ran differently twice; last events:\n  {}\n---\n  {}",
        first.recent.join("\n  "),
        second.recent.join("\n  ")
    );
}
