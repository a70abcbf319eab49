//! Deterministic simulation of a quorum queue: three nodes running the real openraft group,
//! storage glue and queue state machine on turmoil's simulated hosts, network and clock, all
//! on one thread, under crashes of one node or all (unflushed writes lost, possibly a torn
//! record), slow flushes, partitions, lossy links, latency spikes that reorder messages, and
//! held-then-released links — every fault, delay and drop drawn from the seed.
//!
//! A client publishes with publisher sequence numbers, consumes (checkout, settle, return)
//! through whoever leads, and keeps books. Checked: no confirmed message is lost (settled, or
//! still in the queue once the cluster heals), no message is delivered again after its settle
//! was confirmed, every member applies the same effects at each log index, members that applied
//! up to the same entry hold equal queues, and a leader is elected and a publish commits within
//! a bound after healing.
//!
//! Each run prints nothing unless it fails; a failure names its seed, and
//! `WARREN_SIM_SEED=<n> cargo test -p warren-quorum --test sim` replays exactly that run
//! (same trace hash). `WARREN_SIM_SEEDS=<count>` runs that many seeds (default 50) from
//! `WARREN_SIM_FIRST_SEED` (default 1). `WARREN_SIM_LOG=<filter>` (a tracing filter such as
//! `openraft=debug,warren_quorum=debug`) prints the nodes' logs and every traced event to
//! stderr: what to read when a seed fails.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, SnapshotPolicy};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use warren_quorum::backend::SnapshotStore;
use warren_quorum::machine::{
    Command, ConsumerKey, Effect, PublisherSeq, QueueConfig, QueueState, Reply,
};
use warren_quorum::memlog::{MemDisk, MemLog};
use warren_quorum::network::{GroupRegistry, RaftRequest, RaftResponse, Transport, TransportError};
use warren_quorum::node::{QueueGroup, QuorumNode};
use warren_quorum::runtime::{seed_thread_rng, unseed_thread_rng};
use warren_quorum::storage::Applied;
use warren_quorum::types::{GroupId, LogId, NodeId};
use warren_quorum::wire::{WireRequest, WireResponse};

const NODES: [NodeId; 3] = [1, 2, 3];
const GROUP: GroupId = 42;
const PORT: u16 = 4369;
const PUBLISHER: u64 = 1;
const CONSUMER: ConsumerKey = 7;
const TICK_MS: u64 = 5;
/// Faults are injected for this long, then everything heals.
const CHAOS_MS: u64 = 12_000;
/// After healing, a leader and a committed publish within this (simulated) time.
const LIVENESS_MS: u64 = 10_000;
/// How long an RPC waits for its answer before the link counts as broken.
const RPC_TIMEOUT_MS: u64 = 500;
const DEFAULT_SEEDS: u64 = 50;

fn host(id: NodeId) -> String {
    format!("n{id}")
}

fn raft_config() -> Config {
    Config {
        cluster_name: "sim".into(),
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        // Small, so snapshots, log purging and snapshot installs happen in every run.
        snapshot_policy: SnapshotPolicy::LogsSinceLast(40),
        max_in_snapshot_log_to_keep: 8,
        purge_batch_size: 4,
        ..Config::default()
    }
}

fn queue_config() -> QueueConfig {
    // Unlimited redeliveries: a returned message stays until settled, so the books balance.
    QueueConfig {
        delivery_limit: None,
        ..QueueConfig::default()
    }
}

/// xorshift64* streams derived from the seed (one per purpose, so adding draws to one does
/// not shift the others).
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn sim_ms() -> u64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
}

/// A fingerprint of everything observable that happened, in order, for replay checks; the
/// last events are kept to show with a failure.
#[derive(Default)]
struct Trace {
    hasher: DefaultHasher,
    events: u64,
    recent: VecDeque<String>,
    /// Every event goes to stderr too (`WARREN_SIM_LOG` set).
    echo: bool,
}

impl Trace {
    fn record(&mut self, at_ms: u64, event: String) {
        let line = format!("{at_ms:>6}ms {event}");
        line.hash(&mut self.hasher);
        self.events += 1;
        if self.echo {
            eprintln!("TRACE {line}");
        }
        if self.recent.len() == 60 {
            self.recent.pop_front();
        }
        self.recent.push_back(line);
    }
}

/// Who applied a log index first, and how: every later application must match.
type FirstApplied = (NodeId, LogId, Vec<Effect>);

/// What the simulated world shares between the driver, the hosts and the client.
struct World {
    seed: u64,
    disks: BTreeMap<NodeId, Arc<MemDisk>>,
    /// The running incarnation of each node's group member.
    members: Mutex<BTreeMap<NodeId, Arc<QueueGroup>>>,
    boots: Mutex<BTreeMap<NodeId, u64>>,
    /// Per log index: the first member that applied it, with the log id and effects.
    applied: Mutex<BTreeMap<u64, FirstApplied>>,
    violations: Mutex<Vec<String>>,
    trace: Mutex<Trace>,
    healed: AtomicBool,
}

impl World {
    fn new(seed: u64) -> Self {
        Self {
            seed,
            disks: NODES.iter().map(|id| (*id, MemDisk::new())).collect(),
            members: Mutex::default(),
            boots: Mutex::default(),
            applied: Mutex::default(),
            violations: Mutex::default(),
            trace: Mutex::new(Trace {
                echo: std::env::var_os("WARREN_SIM_LOG").is_some(),
                ..Trace::default()
            }),
            healed: AtomicBool::new(false),
        }
    }

    /// Records an event of a host or the client (which run on simulated time).
    fn trace(&self, event: String) {
        self.trace.lock().record(sim_ms(), event);
    }

    /// Records an event of the driver (which runs between simulation steps).
    fn trace_at(&self, at_ms: u64, event: String) {
        self.trace.lock().record(at_ms, event);
    }

    fn violation(&self, what: String) {
        self.trace(format!("VIOLATION {what}"));
        self.violations
            .lock()
            .push(format!("at {}ms: {what}", sim_ms()));
    }

    /// The lowest-numbered running member that believes it leads.
    fn leader(&self) -> Option<(NodeId, Arc<QueueGroup>)> {
        self.members
            .lock()
            .iter()
            .find(|(_, group)| group.is_leader())
            .map(|(id, group)| (*id, group.clone()))
    }

    /// Members that applied the log up to the same entry must hold equal queues.
    fn check_agreement(&self) {
        let members: Vec<(NodeId, Arc<QueueGroup>)> = self
            .members
            .lock()
            .iter()
            .map(|(id, group)| (*id, group.clone()))
            .collect();
        let mut by_applied: BTreeMap<Option<LogId>, (NodeId, QueueState)> = BTreeMap::new();
        for (id, group) in members {
            let state = group.with_queue(|q| q.clone());
            match by_applied.get(&group.last_applied()) {
                Some((other, other_state)) if *other_state != state => {
                    let what = format!(
                        "n{id} and n{other} applied up to {:?} but hold different queues",
                        group.last_applied()
                    );
                    self.violation(what);
                }
                Some(_) => {}
                None => {
                    by_applied.insert(group.last_applied(), (id, state));
                }
            }
        }
    }

    /// Every member must compute the same effects for the same committed entry, in every boot
    /// (those that are replicated: `Effect::is_replicated`).
    fn check_applied(&self, node: NodeId, mut applied: Applied) {
        applied.effects.retain(Effect::is_replicated);
        let mut seen = self.applied.lock();
        match seen.get(&applied.log_id.index) {
            Some((first, log_id, effects)) => {
                if *log_id != applied.log_id || *effects != applied.effects {
                    let what = format!(
                        "n{node} applied index {} as {:?} with {:?}, n{first} as {log_id:?} with {effects:?}",
                        applied.log_id.index, applied.log_id, applied.effects
                    );
                    drop(seen);
                    self.violation(what);
                }
            }
            None => {
                seen.insert(
                    applied.log_id.index,
                    (node, applied.log_id, applied.effects),
                );
            }
        }
    }
}

// ---- the network: Raft RPCs as UDP datagrams between simulated hosts ----

#[derive(Serialize, Deserialize)]
enum Datagram {
    Request {
        call: u64,
        from: NodeId,
        group: GroupId,
        request: WireRequest,
    },
    Response {
        call: u64,
        answer: WireResponse,
    },
}

type Waiting = Mutex<HashMap<u64, oneshot::Sender<WireResponse>>>;

/// A node's [`Transport`] over one simulated UDP socket: requests and answers are datagrams
/// matched by call number, so turmoil's drops, delays and partitions apply to each.
struct SimTransport {
    outgoing: mpsc::UnboundedSender<(NodeId, Vec<u8>)>,
    waiting: Arc<Waiting>,
    next_call: AtomicU64,
    /// Where incoming requests go: the node's groups, once the node exists.
    registry: Arc<Mutex<Option<GroupRegistry>>>,
}

impl SimTransport {
    /// Binds the node's socket and starts moving datagrams.
    async fn start() -> std::io::Result<Arc<Self>> {
        let registry: Arc<Mutex<Option<GroupRegistry>>> = Arc::default();
        let requests_to = registry.clone();
        let socket = Rc::new(turmoil::net::UdpSocket::bind(("0.0.0.0", PORT)).await?);
        let (outgoing, mut to_send) = mpsc::unbounded_channel::<(NodeId, Vec<u8>)>();
        let waiting: Arc<Waiting> = Arc::default();
        let sender = socket.clone();
        tokio::task::spawn_local(async move {
            while let Some((to, bytes)) = to_send.recv().await {
                // A datagram that cannot be sent is a lost one; the caller times out.
                let _ = sender.send_to(&bytes, (host(to), PORT)).await;
            }
        });
        let answers = outgoing.clone();
        let matched = waiting.clone();
        tokio::task::spawn_local(async move {
            let mut buffer = vec![0u8; 1 << 20];
            loop {
                let Ok((len, _)) = socket.recv_from(&mut buffer).await else {
                    continue;
                };
                match bincode::deserialize::<Datagram>(&buffer[..len]) {
                    Ok(Datagram::Request {
                        call,
                        from,
                        group,
                        request,
                    }) => {
                        let Some(registry) = requests_to.lock().clone() else {
                            continue;
                        };
                        let answers = answers.clone();
                        tokio::task::spawn_local(async move {
                            let answer = WireResponse::from_result(
                                registry.handle(group, request.into()).await,
                            );
                            let answer = Datagram::Response { call, answer };
                            if let Ok(bytes) = bincode::serialize(&answer) {
                                let _ = answers.send((from, bytes));
                            }
                        });
                    }
                    Ok(Datagram::Response { call, answer }) => {
                        if let Some(waiter) = matched.lock().remove(&call) {
                            let _ = waiter.send(answer);
                        }
                    }
                    Err(_) => {}
                }
            }
        });
        Ok(Arc::new(Self {
            outgoing,
            waiting,
            next_call: AtomicU64::new(1),
            registry,
        }))
    }

    fn deliver_to(&self, registry: GroupRegistry) {
        *self.registry.lock() = Some(registry);
    }
}

impl Transport for SimTransport {
    async fn send(
        &self,
        from: NodeId,
        to: NodeId,
        group: GroupId,
        request: RaftRequest,
    ) -> Result<RaftResponse, TransportError> {
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let datagram = Datagram::Request {
            call,
            from,
            group,
            request: request.into(),
        };
        let bytes = bincode::serialize(&datagram).map_err(|e| TransportError::Remote {
            node: to,
            reason: e.to_string(),
        })?;
        let (waiter, answer) = oneshot::channel();
        self.waiting.lock().insert(call, waiter);
        if self.outgoing.send((to, bytes)).is_err() {
            self.waiting.lock().remove(&call);
            return Err(TransportError::Unreachable(to));
        }
        let answer = tokio::time::timeout(Duration::from_millis(RPC_TIMEOUT_MS), answer).await;
        self.waiting.lock().remove(&call);
        match answer {
            Ok(Ok(answer)) => answer.into_result(to, group),
            _ => Err(TransportError::Unreachable(to)),
        }
    }
}

// ---- a node ----

/// One boot of a node: its log recovered from its disk, a flusher playing the disk, the
/// transport, the group member. Runs until the simulation crashes the host.
async fn boot(world: Arc<World>, id: NodeId) -> turmoil::Result {
    let boot = {
        let mut boots = world.boots.lock();
        let count = boots.entry(id).or_default();
        *count += 1;
        *count
    };
    let disk = world.disks[&id].clone();
    let log = MemLog::recover(disk.clone());
    // The disk: a flush takes 0.1–4 ms, one in ten stalls for up to 80 ms, as the seed says.
    let mut disk_rng = Rng::new(world.seed, id * 1_000 + boot);
    let flusher = log.clone();
    tokio::task::spawn_local(async move {
        loop {
            flusher.wait_for_writes().await;
            let micros = if disk_rng.chance(10) {
                disk_rng.range(5_000, 80_000)
            } else {
                disk_rng.range(100, 4_000)
            };
            tokio::time::sleep(Duration::from_micros(micros)).await;
            flusher.flush();
        }
    });

    let transport = SimTransport::start().await?;
    let node = QuorumNode::with_storage(
        id,
        log,
        disk as Arc<dyn SnapshotStore>,
        raft_config(),
        transport.clone(),
    )?;
    transport.deliver_to(node.registry());
    let (effects_sender, mut effects) = mpsc::unbounded_channel();
    let group = node
        .start_group(GROUP, queue_config(), Some(effects_sender))
        .await?;
    if id == NODES[0] && boot == 1 {
        group.initialize(&NODES).await?;
    }
    let checker = world.clone();
    tokio::task::spawn_local(async move {
        while let Some(applied) = effects.recv().await {
            checker.check_applied(id, applied);
        }
    });
    world.trace(format!("n{id} boot {boot}"));
    world.members.lock().insert(id, Arc::new(group));
    std::future::pending::<()>().await;
    drop(node);
    Ok(())
}

// ---- the client ----

/// The client's books: what was confirmed, what it saw settled.
#[derive(Default)]
struct Books {
    next_seq: u64,
    confirmed: BTreeSet<u64>,
    /// Settles the leader confirmed (`Handled { count: 1 }`), with their log index.
    settled: BTreeMap<u64, u64>,
    /// Settles whose outcome the client never learnt (the leader went away meanwhile).
    maybe_settled: BTreeSet<u64>,
}

fn body_seq(body: &[u8]) -> u64 {
    body.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(u64::MAX)
}

/// One attempt through whoever leads; `None` when there is no answer (no leader, not the
/// leader any more, timed out).
async fn attempt(world: &World, command: &Command) -> Option<(u64, Reply)> {
    let Some((leader, group)) = world.leader() else {
        tokio::time::sleep(Duration::from_millis(20)).await;
        return None;
    };
    let result = tokio::time::timeout(
        Duration::from_millis(1_000),
        group.propose_at(sim_ms(), command.clone()),
    )
    .await;
    match result {
        Ok(Ok((log_id, reply))) => {
            world.trace(format!("n{leader} {command:?} -> {reply:?} at {log_id}"));
            Some((log_id.index, reply))
        }
        Ok(Err(e)) => {
            world.trace(format!("n{leader} {command:?} failed: {e}"));
            tokio::time::sleep(Duration::from_millis(20)).await;
            None
        }
        Err(_) => {
            world.trace(format!("n{leader} {command:?} timed out"));
            None
        }
    }
}

/// Retries until the command gets an answer; gives up (with a violation) only when the cluster
/// has been healed for longer than the liveness bound.
async fn commit(
    world: &World,
    command: Command,
    healed_at: &mut Option<u64>,
) -> Option<(u64, Reply)> {
    loop {
        if let Some(answer) = attempt(world, &command).await {
            return Some(answer);
        }
        if world.healed.load(Ordering::Relaxed) {
            let since = *healed_at.get_or_insert_with(sim_ms);
            if sim_ms() > since + LIVENESS_MS {
                world.violation(format!(
                    "{command:?} not committed within {LIVENESS_MS} ms of healing"
                ));
                return None;
            }
        }
    }
}

async fn publish(world: &World, books: &mut Books, healed_at: &mut Option<u64>) -> bool {
    books.next_seq += 1;
    let seq = books.next_seq;
    let command = Command::Enqueue {
        publisher: Some(PublisherSeq {
            publisher: PUBLISHER,
            seq,
        }),
        body: seq.to_le_bytes().to_vec().into(),
        ttl_ms: None,
    };
    match commit(world, command, healed_at)
        .await
        .map(|(_, reply)| reply)
    {
        Some(Reply::Enqueued { .. }) | Some(Reply::Duplicate) => {
            books.confirmed.insert(seq);
            true
        }
        Some(other) => {
            world.violation(format!("publish {seq} answered {other:?}"));
            false
        }
        None => false,
    }
}

async fn consume(world: &World, books: &mut Books, rng: &mut Rng, healed_at: &mut Option<u64>) {
    let Some((_, leader)) = world.leader() else {
        tokio::time::sleep(Duration::from_millis(20)).await;
        return;
    };
    // The member may lag (a leader that does not know yet it was deposed): only a state that
    // includes a settle can contradict it.
    let applied = leader.last_applied().map_or(0, |id| id.index);
    let held: Vec<(u64, u64)> = leader.with_queue(|q| {
        q.checked_out_messages(CONSUMER)
            .map(|m| (m.id, body_seq(&m.body)))
            .collect()
    });
    for (_, seq) in &held {
        if books.settled.get(seq).is_some_and(|at| *at <= applied) {
            world.violation(format!(
                "message {seq} delivered again after its settle (applied up to {applied})"
            ));
        }
    }
    if held.is_empty() {
        tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
        return;
    }
    if rng.chance(4) {
        // The consumer goes away (what it holds is returned) and subscribes again.
        let cancel = Command::Cancel { consumer: CONSUMER };
        let checkout = Command::Checkout {
            consumer: CONSUMER,
            prefetch: 4,
        };
        if commit(world, cancel, healed_at).await.is_some() {
            commit(world, checkout, healed_at).await;
        }
        return;
    }
    let (msg_id, seq) = held[rng.below(held.len() as u64) as usize];
    let settle = rng.chance(80);
    let command = if settle {
        Command::Settle {
            consumer: CONSUMER,
            msg_ids: vec![msg_id],
        }
    } else {
        Command::Return {
            consumer: CONSUMER,
            msg_ids: vec![msg_id],
        }
    };
    // Only the first attempt's outcome is unambiguous; a retry after no answer may find the
    // first attempt already applied.
    let first = attempt(world, &command).await;
    let reply = match first {
        Some(reply) => Some(reply),
        None => {
            if settle {
                books.maybe_settled.insert(seq);
            }
            commit(world, command.clone(), healed_at).await
        }
    };
    match reply {
        Some((at, Reply::Handled { count: 1 })) if settle => {
            if books.settled.insert(seq, at).is_some() {
                world.violation(format!("message {seq} settled twice"));
            }
        }
        // Not held any more (returned by a cancel whose answer was lost, say): nothing happened.
        Some((_, Reply::Handled { .. })) | Some((_, Reply::UnknownConsumer)) | None => {}
        Some((_, other)) => world.violation(format!("{command:?} answered {other:?}")),
    }
}

async fn workload(world: Arc<World>) -> turmoil::Result {
    let mut rng = Rng::new(world.seed, 77);
    let mut books = Books::default();
    let mut healed_at = None;
    let checkout = Command::Checkout {
        consumer: CONSUMER,
        prefetch: 4,
    };
    if commit(&world, checkout, &mut healed_at).await.is_none() {
        return Ok(());
    }
    while !world.healed.load(Ordering::Relaxed) {
        if rng.chance(55) {
            publish(&world, &mut books, &mut healed_at).await;
        } else {
            consume(&world, &mut books, &mut rng, &mut healed_at).await;
        }
        world.check_agreement();
    }
    let healed_at = *healed_at.get_or_insert_with(sim_ms);
    final_checks(&world, &mut books, healed_at).await;
    Ok(())
}

/// After healing: a leader and a committed publish within the bound, then every member's
/// queue equal and every confirmed message accounted for.
async fn final_checks(world: &World, books: &mut Books, healed_at: u64) {
    let deadline = healed_at + LIVENESS_MS;
    while world.leader().is_none() || world.members.lock().len() < NODES.len() {
        if sim_ms() > deadline {
            world.violation(format!("no leader within {LIVENESS_MS} ms of healing"));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut unused = Some(healed_at);
    if !publish(world, books, &mut unused).await {
        return;
    }
    // Members converge on the leader's last applied entry.
    let converged = loop {
        let members: Vec<Arc<QueueGroup>> = world.members.lock().values().cloned().collect();
        let applied: BTreeSet<Option<LogId>> = members.iter().map(|m| m.last_applied()).collect();
        if applied.len() == 1 && members.len() == NODES.len() {
            break members;
        }
        if sim_ms() > deadline + LIVENESS_MS {
            world.violation(format!("members never converged: applied {applied:?}"));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let states: Vec<_> = converged
        .iter()
        .map(|m| m.with_queue(|q| q.clone()))
        .collect();
    for (i, state) in states.iter().enumerate().skip(1) {
        if *state != states[0] {
            world.violation(format!("member {} ends with a different queue", i + 1));
        }
    }
    let queue = &states[0];
    let mut present: BTreeMap<u64, usize> = BTreeMap::new();
    for message in queue
        .ready_messages()
        .chain(queue.checked_out_messages(CONSUMER))
    {
        *present.entry(body_seq(&message.body)).or_default() += 1;
    }
    for (seq, count) in &present {
        if *seq == 0 || *seq > books.next_seq {
            world.violation(format!("unexpected message {seq} in the queue"));
        }
        if *count > 1 {
            world.violation(format!("message {seq} is in the queue {count} times"));
        }
        if books.settled.contains_key(seq) {
            world.violation(format!("message {seq} is in the queue after its settle"));
        }
    }
    let lost: Vec<u64> = books
        .confirmed
        .iter()
        .filter(|seq| {
            !present.contains_key(seq)
                && !books.settled.contains_key(seq)
                && !books.maybe_settled.contains(seq)
        })
        .copied()
        .collect();
    if !lost.is_empty() {
        world.violation(format!("confirmed messages lost: {lost:?}"));
    }
    world.trace(format!(
        "end: confirmed {} settled {} in queue {} (ready {}, held {})",
        books.confirmed.len(),
        books.settled.len(),
        present.len(),
        queue.ready_count(),
        queue.checked_out_count()
    ));
}

// ---- the driver: faults from the seed ----

struct Faults {
    rng: Rng,
    next_at: u64,
    /// Crashed nodes and when they come back.
    down: BTreeMap<NodeId, u64>,
    /// Severed or held links and when they heal.
    links: Vec<(NodeId, NodeId, u64)>,
    /// When a lossy or slow network is back to normal.
    network_normal_at: Option<u64>,
}

impl Faults {
    fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed, 1),
            next_at: 500,
            down: BTreeMap::new(),
            links: Vec::new(),
            network_normal_at: None,
        }
    }

    fn other(&mut self, id: NodeId) -> NodeId {
        let others: Vec<NodeId> = NODES.into_iter().filter(|n| *n != id).collect();
        others[self.rng.below(others.len() as u64) as usize]
    }

    fn step(&mut self, sim: &mut turmoil::Sim<'_>, world: &World, now: u64) {
        let due: Vec<NodeId> = self
            .down
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.down.remove(&id);
            world.trace_at(now, format!("restart n{id}"));
            sim.bounce(host(id));
        }
        let (healed, kept): (Vec<_>, Vec<_>) = self.links.iter().partition(|(_, _, at)| *at <= now);
        self.links = kept;
        for (a, b, _) in healed {
            world.trace_at(now, format!("heal n{a}-n{b}"));
            sim.release(host(a), host(b));
        }
        if self.network_normal_at.is_some_and(|at| at <= now) {
            self.network_normal_at = None;
            world.trace_at(now, "network normal".into());
            sim.set_fail_rate(0.0);
            sim.set_max_message_latency(Duration::from_millis(20));
        }
        if now < self.next_at {
            return;
        }
        self.next_at = now + self.rng.range(200, 1_500);
        let id = NODES[self.rng.below(NODES.len() as u64) as usize];
        let until = now + self.rng.range(200, 3_000);
        match self.rng.below(8) {
            0 | 1 => {
                // Mostly one node down at a time; sometimes two (no majority for a while).
                if self.down.contains_key(&id) || (!self.down.is_empty() && self.rng.chance(70)) {
                    return;
                }
                self.crash(sim, world, now, id, until);
            }
            6 => {
                // A power cut takes every node down at once; each comes back on its own.
                for id in NODES {
                    if !self.down.contains_key(&id) {
                        let until = now + self.rng.range(200, 2_000);
                        self.crash(sim, world, now, id, until);
                    }
                }
            }
            2 => {
                for other in NODES.into_iter().filter(|n| *n != id) {
                    sim.partition(host(id), host(other));
                    self.links.push((id, other, until));
                }
                world.trace_at(now, format!("isolate n{id} until {until}"));
            }
            3 => {
                let other = self.other(id);
                sim.partition(host(id), host(other));
                self.links.push((id, other, until));
                world.trace_at(now, format!("cut n{id}-n{other} until {until}"));
            }
            4 => {
                let other = self.other(id);
                sim.hold(host(id), host(other));
                self.links.push((id, other, until));
                world.trace_at(now, format!("hold n{id}-n{other} until {until}"));
            }
            _ => {
                let fail_rate = self.rng.range(2, 30) as f64 / 100.0;
                let latency_ms = self.rng.range(20, 400);
                sim.set_fail_rate(fail_rate);
                sim.set_max_message_latency(Duration::from_millis(latency_ms));
                self.network_normal_at = Some(until);
                world.trace_at(
                    now,
                    format!("lossy network {fail_rate} max latency {latency_ms}ms until {until}"),
                );
            }
        }
    }

    /// Power loss on one node: of its unflushed writes none, or (half the time) a prefix
    /// ending in a torn record, reach its disk.
    fn crash(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        world: &World,
        now: u64,
        id: NodeId,
        until: u64,
    ) {
        let torn = self.rng.chance(50);
        let mut cut = Rng::new(self.rng.next(), 0);
        world.disks[&id].power_loss(|unflushed| {
            if torn {
                cut.below(unflushed as u64 + 1) as usize
            } else {
                0
            }
        });
        world.members.lock().remove(&id);
        sim.crash(host(id));
        world.trace_at(now, format!("crash n{id} (torn {torn}) until {until}"));
        self.down.insert(id, until);
    }

    fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>, world: &World, now: u64) {
        for id in std::mem::take(&mut self.down).into_keys() {
            sim.bounce(host(id));
        }
        for a in NODES {
            for b in NODES.into_iter().filter(|b| *b > a) {
                sim.release(host(a), host(b));
            }
        }
        self.links.clear();
        sim.set_fail_rate(0.0);
        sim.set_max_message_latency(Duration::from_millis(20));
        world.trace_at(now, "healed".into());
        world.healed.store(true, Ordering::Relaxed);
    }
}

struct Outcome {
    trace_hash: u64,
    events: u64,
    violations: Vec<String>,
    recent: Vec<String>,
}

fn run(seed: u64) -> Outcome {
    let _log = std::env::var("WARREN_SIM_LOG").ok().map(|filter| {
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .finish(),
        )
    });
    seed_thread_rng(seed);
    let world = Arc::new(World::new(seed));
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_millis(CHAOS_MS + 4 * LIVENESS_MS))
        .tick_duration(Duration::from_millis(TICK_MS))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(20))
        .rng_seed(seed)
        .build();
    for id in NODES {
        let world = world.clone();
        sim.host(host(id), move || boot(world.clone(), id));
    }
    sim.client("client", workload(world.clone()));
    let mut faults = Faults::new(seed);
    loop {
        let now = sim.elapsed().as_millis() as u64;
        if now < CHAOS_MS {
            faults.step(&mut sim, &world, now);
        } else if !world.healed.load(Ordering::Relaxed) {
            faults.heal_all(&mut sim, &world, now);
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                world.violation(format!("simulation failed: {e}"));
                break;
            }
        }
    }
    drop(sim);
    unseed_thread_rng();
    let violations = world.violations.lock().clone();
    let trace = world.trace.lock();
    Outcome {
        trace_hash: trace.hasher.finish(),
        events: trace.events,
        violations,
        recent: trace.recent.iter().cloned().collect(),
    }
}

fn report(seed: u64, outcome: &Outcome) -> String {
    let shown = outcome.violations.len().min(10);
    format!(
        "seed {seed} failed ({} events, trace {:016x}), {} violations:\n  {}\nlast events:\n  {}\nreplay: WARREN_SIM_SEED={seed} cargo test -p warren-quorum --test sim",
        outcome.events,
        outcome.trace_hash,
        outcome.violations.len(),
        outcome.violations[..shown].join("\n  "),
        outcome.recent.join("\n  ")
    )
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs the seeds on a few threads (each simulation is single-threaded and keeps its seeded
/// state in thread-locals); returns the failure reports, by seed.
fn run_seeds(seeds: Vec<u64>, verbose: bool) -> Vec<String> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    let queue = Arc::new(Mutex::new(seeds.into_iter()));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                loop {
                    let Some(seed) = queue.lock().next() else {
                        return failures;
                    };
                    match std::panic::catch_unwind(|| run(seed)) {
                        Ok(outcome) if !outcome.violations.is_empty() => {
                            failures.push((seed, report(seed, &outcome)))
                        }
                        Ok(outcome) if verbose => eprintln!(
                            "seed {seed}: {} events, trace {:016x}; last events:\n  {}",
                            outcome.events,
                            outcome.trace_hash,
                            outcome.recent.join("\n  ")
                        ),
                        Ok(_) => {}
                        Err(_) => failures.push((
                            seed,
                            format!("seed {seed} panicked\nreplay: WARREN_SIM_SEED={seed} cargo test -p warren-quorum --test sim"),
                        )),
                    }
                }
            })
        })
        .collect();
    let mut failures: Vec<(u64, String)> = workers
        .into_iter()
        .flat_map(|worker| worker.join().unwrap_or_default())
        .collect();
    failures.sort();
    failures.into_iter().map(|(_, report)| report).collect()
}

#[test]
fn quorum_queue_survives_seeded_faults() {
    let single = env_u64("WARREN_SIM_SEED");
    let seeds: Vec<u64> = match single {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("WARREN_SIM_FIRST_SEED").unwrap_or(1);
            let count = env_u64("WARREN_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
            (first..first.saturating_add(count)).collect()
        }
    };
    let failures = run_seeds(seeds, single.is_some());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_seed_replays_exactly() {
    let seed = env_u64("WARREN_SIM_SEED").unwrap_or(3);
    let first = run(seed);
    let second = run(seed);
    assert!(first.events > 100, "the run did something");
    assert_eq!(
        (first.trace_hash, first.events),
        (second.trace_hash, second.events),
        "seed {seed} ran differently twice; last events:\n{}\n---\n{}",
        first.recent.join("\n"),
        second.recent.join("\n")
    );
}
