//! The quorum queue type: a [`Queue`] whose messages live in a Raft group of
//! `warren-quorum` (rabbit_fifo-style state machine, the node's shared write-ahead log) instead
//! of the classic ready list and message store.
//!
//! The AMQP side talks to it through the same `Queue` methods as to a classic queue (publish,
//! add/remove consumer, settle, purge, delete, counts); each becomes a command proposed to the
//! group. Three tasks per queue do the asynchronous work, none per message:
//! - the proposer takes commands in arrival order, everything that waits at once in one log
//!   entry (`Command::Batch`: one append, one fsync and one apply for all of them), and hands
//!   it to openraft without waiting for the answer (`QueueGroup::propose_ff`);
//! - the completer awaits the answers in log order and settles publisher confirms
//!   ([`QueueAnswers`]): a confirm is an ack only once the group committed (fsync'd) the
//!   enqueue, a nack when the queue refused it (`reject-publish`) or the group failed;
//! - the effects task acts on what the applied commands produced: deliveries to consumers
//!   (where the consumer is attached: the leader's node; on one node that is this node)
//!   and dead-letters (from the leader only), routed to the queue's dead-letter exchange by
//!   the classic queue's own dead-lettering.
//!
//! Consumers are identified to the group by a key; which consumer holds which message id is
//! kept here so an ack, nack or reject (which names messages) becomes the group's settle,
//! return or discard for the right consumer.

pub mod cluster;
pub(crate) mod codec;
mod host;
pub mod join;
pub mod membership;
pub mod placement;
pub mod reconcile;
pub mod status;

pub use host::{LeaderChange, QuorumHost, LOCAL_NODE_ID};

use crate::churn::{DeadLetterSource, DeadLetterStrategy};
use crate::confirm::QueueAnswers;
use crate::confirm::RoutedConfirm;
use crate::consumer::ConnectionId;
use crate::consumer::{pipeline_cost, ConnectionEvent, Consumer, Delivery};
use crate::dead_letter::DeathReason;
use crate::error::{AmqpError, AmqpResult};
use crate::event_channel::event_channel;
use crate::message::Message;
use crate::policy::AppliedPolicies;
use crate::queue::{Enqueued, Queue, QueueLimits, QueuedMessage};
use crate::queue_type::{GetLater, QueueDepth, QueueType, Replicas};
use crate::remote::{ForwardPeers, RemoteQueue};
use crate::stats::MessageStats;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use warren_codec::FieldTable;
use warren_codec::FieldValue;
use warren_quorum::machine::{
    Command, ConsumerKey, DeadLetterReason, Effect, MsgId, Overflow, QueueConfig, Reply,
    DEFAULT_DELIVERY_LIMIT,
};
use warren_quorum::network::{RaftRequest, RaftResponse, Transport, TransportError};
use warren_quorum::node::QueueGroup;
use warren_quorum::storage::Applied;
use warren_quorum::types::{GroupId, NodeId, Proposal};
use warren_store::Appended;

/// How often the leader lets time pass (`Tick`) while the head of the queue can expire.
const TICK_INTERVAL: Duration = Duration::from_millis(200);

/// Checks in a row that found nothing to expire (or this member not leading) after which a
/// queue's tick sleeps until a command is proposed or its leader changes: 10,000 idle quorum
/// queues on a node must not wake 50,000 times a second.
const TICK_QUIET_ROUNDS: u32 = 5;

/// The longest a quiet tick sleeps without being woken (a backstop, not the mechanism).
const TICK_QUIET_INTERVAL: Duration = Duration::from_secs(5);

/// What the group's machine acts on: the queue's arguments combined with its policy and
/// operator policy as RabbitMQ 3.10 combines them for quorum queues
/// (`rabbit_quorum_queue:ra_machine_config`, checked against 3.10.8): `max-length`,
/// `max-length-bytes`, `delivery-limit` and `message-ttl` take the lower of argument and
/// policy; `overflow` takes the policy's over the argument (unlike a classic queue's). The
/// dead-letter target is read from the queue's limits when a message dies, not from here.
pub fn queue_config(args: &FieldTable, applied: &AppliedPolicies) -> QueueConfig {
    let argument = |key: &str| {
        args.get(key)
            .and_then(FieldValue::as_integer)
            .and_then(|n| u64::try_from(n).ok())
    };
    let policy = |key: &str| applied.get(key).and_then(|v| v.as_u64());
    let lower = |arg: &str, key: &str| match (argument(arg), policy(key)) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    };
    let overflow = applied
        .get("overflow")
        .and_then(|v| v.as_str().map(str::to_owned))
        .or_else(|| {
            args.get("x-overflow")
                .and_then(FieldValue::as_str)
                .map(str::to_owned)
        });
    QueueConfig {
        delivery_limit: Some(
            lower("x-delivery-limit", "delivery-limit").map_or(DEFAULT_DELIVERY_LIMIT, |n| {
                n.min(u64::from(u32::MAX)) as u32
            }),
        ),
        max_length: lower("x-max-length", "max-length"),
        max_length_bytes: lower("x-max-length-bytes", "max-length-bytes"),
        overflow: match overflow.as_deref() {
            Some("reject-publish") | Some("reject-publish-dlx") => Overflow::RejectPublish,
            _ => Overflow::DropHead,
        },
        message_ttl_ms: lower("x-message-ttl", "message-ttl"),
        single_active_consumer: args
            .get("x-single-active-consumer")
            .and_then(FieldValue::as_bool)
            .unwrap_or(false),
    }
}

/// Whether the queue dead-letters at least once, as RabbitMQ decides it for quorum queues:
/// `dead-letter-strategy` `at-least-once` (the argument over the policy), with `reject-publish`
/// overflow and a dead-letter exchange; otherwise at most once (RabbitMQ falls back the same
/// way: under drop-head a full queue would hold its dead messages without bound).
pub fn dead_letter_at_least_once(
    args: &FieldTable,
    applied: &AppliedPolicies,
    config: &QueueConfig,
    has_dead_letter_exchange: bool,
) -> bool {
    let strategy = args
        .get("x-dead-letter-strategy")
        .and_then(FieldValue::as_str)
        .map(str::to_owned)
        .or_else(|| {
            applied
                .get("dead-letter-strategy")
                .and_then(|v| v.as_str().map(str::to_owned))
        });
    strategy.as_deref() == Some("at-least-once")
        && config.overflow == Overflow::RejectPublish
        && has_dead_letter_exchange
}

/// How long at-least-once dead-lettering waits before sending again the copies that reached
/// no queue or that a target refused.
const DEAD_LETTER_RETRY: Duration = Duration::from_secs(3);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Proposed {
    command: Command,
    confirm: Option<Arc<QueueAnswers>>,
    /// Told once the group answered (committed and applied, or failed).
    answered: Option<oneshot::Sender<()>>,
}

/// An answer the group owes for one log entry (a command or a batch of them), and who
/// waits on each of its commands.
type InFlight = (
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<Reply>> + Send>>,
    Vec<Waiting>,
    tokio::sync::OwnedSemaphorePermit,
);

/// Log entries a queue has proposed and not yet seen answered. Few: while they are being
/// flushed, new commands wait and then go together into the next entry.
const MAX_ENTRIES_IN_FLIGHT: usize = 2;

type Waiting = (Option<Arc<QueueAnswers>>, Option<oneshot::Sender<()>>);

/// Most commands one log entry carries.
const MAX_BATCH: usize = 1024;

#[derive(Default)]
struct Consumers {
    by_key: HashMap<ConsumerKey, Arc<Consumer>>,
    /// Which consumer holds each delivered, unsettled message.
    held: HashMap<MsgId, ConsumerKey>,
    /// Consumers cancelled while the client still held messages of theirs: suspended in the
    /// group (no more deliveries) until those are settled, then cancelled there too.
    cancelled: HashSet<ConsumerKey>,
    /// basic.get in progress: the one-message consumer and where its message goes.
    gets: HashMap<ConsumerKey, oneshot::Sender<QueuedMessage>>,
}

impl Consumers {
    fn holds_any(&self, key: ConsumerKey) -> bool {
        self.held.values().any(|holder| *holder == key)
    }
}

/// One member of a queue's group as Raft sees it on this node (`quorum_status`).
#[derive(Clone, Debug)]
pub struct MemberStatus {
    pub node: NodeId,
    /// leader, follower, candidate or learner.
    pub state: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    /// The last entry this member applied (applied entries are committed ones).
    pub commit_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    /// On the leader: the last log index each member is known to hold.
    pub matched: std::collections::BTreeMap<NodeId, Option<u64>>,
}

/// The quorum-specific part of a [`Queue`].
pub struct QuorumQueue {
    group_id: GroupId,
    host: Arc<QuorumHost>,
    /// The links to the other nodes of the vhost's cluster, for the delegate through which
    /// this node's clients reach the leader.
    forward_peers: Arc<ForwardPeers>,
    /// What the group's machine should act on (arguments and policies); a change is proposed
    /// to the group (`Command::SetConfig`) under this lock, so proposals follow updates.
    config: Mutex<QueueConfig>,
    /// Whether the group should dead-letter at least once (`dead_letter_at_least_once`);
    /// changed, like `config`, under `config`'s lock.
    dead_letter_at_least_once: AtomicBool,
    /// Held dead messages a `forward_dead_letters` task of this node is sending: one task per
    /// message, so a take-over while the first is still retrying sends no second copy.
    dead_letters_forwarding: Arc<Mutex<HashSet<MsgId>>>,
    commands: UnboundedSender<Proposed>,
    /// Taken by `start`.
    commands_rx: Mutex<Option<UnboundedReceiver<Proposed>>>,
    /// The group's members (node ids) as declared, the first of them the one that made the
    /// group; empty: this node alone (a single node, or a queue declared before groups
    /// spanned nodes). Changed when the group's membership is (`set_members`: forget and
    /// grow record the new set through the metadata group).
    members: Mutex<Vec<NodeId>>,
    /// Told when `members` changed: a node added to the group starts its member.
    members_changed: Arc<tokio::sync::Notify>,
    /// Set once this node's member of the group runs (never on a node that is not a member).
    group: OnceLock<Arc<QueueGroup>>,
    /// Told when `group` is set, so a basic.get on a queue still starting waits for it.
    group_started: tokio::sync::Notify,
    /// The group's leader as this node knows it: the seam through which the node serving the
    /// queue's clients follows the leader (`leader_events`).
    leader: tokio::sync::watch::Sender<Option<NodeId>>,
    /// Wakes the proposer when the leader changed, so a new leader takes over at once.
    leader_changed: Arc<tokio::sync::Notify>,
    /// The tick sleeps until woken (see [`TICK_QUIET_ROUNDS`]); a proposal or a leader change
    /// that finds it set clears it and wakes the tick through `tick_wake` — one atomic load per
    /// proposal otherwise.
    tick_asleep: AtomicBool,
    tick_wake: Arc<tokio::sync::Notify>,
    consumers: Mutex<Consumers>,
    /// While another node leads: the record through which this node's clients consume, get,
    /// settle and purge on the leader (`crate::remote`, the leader's serving side acting on
    /// its real queue), made when first needed and retired — its consumers cancelled — when
    /// the leader moves (`QuorumQueue::follow_leader`). This node's member keeps running.
    delegate: Mutex<Option<(NodeId, Arc<RemoteQueue>)>>,
    /// Delegates retired while their link was up, newest last, with when (at most
    /// `RETIRED_DELEGATES`, for `RETIRED_DELEGATE_KEEP`): a client may still ack, requeue or
    /// give back (a delivery that reached its consumer after the consumer was cancelled) a
    /// message delivered through one, and that settle goes to the serving side that
    /// delivered it, found by the number the delivery carries (`QueuedMessage::via`) — never
    /// through another delegate, whose serving side may hold the same message id for another
    /// consumer of this node (it was returned and delivered again since).
    retired_delegates: Mutex<Vec<(tokio::time::Instant, Arc<RemoteQueue>)>>,
    /// Where the delegates' binding numbers come from (`QueuedMessage::via`: each binding of
    /// each delegate on a link takes the next; never 0, "delivered here"). Shared by all of
    /// them so a number names one binding of one delegate; it wraps after 65,535 bindings,
    /// and the few that may be settled through at a time are always distinct.
    vias: Arc<AtomicU16>,
    next_consumer_key: AtomicU64,
    deleted: AtomicBool,
    /// The group's data removal has been started (exactly once).
    removal_started: AtomicBool,
}

impl std::fmt::Debug for QuorumQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumQueue")
            .field("group_id", &self.group_id)
            .finish()
    }
}

impl QuorumQueue {
    /// The quorum side of a queue record; None for another type.
    pub fn of(queue: &Queue) -> Option<&QuorumQueue> {
        queue.type_state::<QuorumQueue>()
    }

    pub fn new(
        host: Arc<QuorumHost>,
        forward_peers: Arc<ForwardPeers>,
        group_id: GroupId,
        config: QueueConfig,
        dead_letter_at_least_once: bool,
        members: Vec<NodeId>,
    ) -> QuorumQueue {
        let (commands, commands_rx) = unbounded_channel();
        // Keys of consumers of an earlier run may still be in the group's state (they are
        // cancelled at start); start this run's keys far from theirs.
        let first_key = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        QuorumQueue {
            group_id,
            host,
            forward_peers,
            config: Mutex::new(config),
            dead_letter_at_least_once: AtomicBool::new(dead_letter_at_least_once),
            dead_letters_forwarding: Arc::default(),
            commands,
            commands_rx: Mutex::new(Some(commands_rx)),
            members: Mutex::new(members),
            members_changed: Arc::new(tokio::sync::Notify::new()),
            group: OnceLock::new(),
            group_started: tokio::sync::Notify::new(),
            leader: tokio::sync::watch::Sender::new(None),
            leader_changed: Arc::new(tokio::sync::Notify::new()),
            tick_asleep: AtomicBool::new(false),
            tick_wake: Arc::new(tokio::sync::Notify::new()),
            consumers: Mutex::new(Consumers::default()),
            delegate: Mutex::new(None),
            retired_delegates: Mutex::new(Vec::new()),
            vias: Arc::new(AtomicU16::new(1)),
            next_consumer_key: AtomicU64::new(first_key),
            deleted: AtomicBool::new(false),
            removal_started: AtomicBool::new(false),
        }
    }

    pub fn group_id(&self) -> GroupId {
        self.group_id
    }

    /// Whether this node's member runs and leads the group.
    pub fn is_leading(&self) -> bool {
        self.group.get().is_some_and(|g| g.is_leader())
    }

    /// The members as declared (empty: this node alone); see [`QuorumQueue::member_ids`].
    pub fn members(&self) -> Vec<NodeId> {
        self.members.lock().clone()
    }

    /// The group's membership changed (a node forgotten, a node grown onto it), as recorded
    /// in the definitions (`DefinitionOp::QueueSetMembers`). A node that is now a member and
    /// ran none starts its member of the group, which waits for the leader to add it; a node
    /// no longer listed keeps what runs until it restarts (it was forgotten while down).
    pub fn set_members(&self, members: Vec<NodeId>) {
        let mut current = self.members.lock();
        if *current != members {
            *current = members;
            drop(current);
            self.members_changed.notify_one();
        }
    }

    /// The group's members: its voters as this node's member knows them, else as declared.
    pub fn member_ids(&self) -> Vec<NodeId> {
        if let Some(members) = self.group.get().map(|g| g.members()) {
            if !members.is_empty() {
                return members;
            }
        }
        let members = self.members();
        match members.is_empty() {
            true => vec![self.host.node_id()],
            false => members,
        }
    }

    /// The group's leader as this node knows it (None: not known yet, or this node is not a
    /// member and has not heard).
    pub fn leader(&self) -> Option<NodeId> {
        *self.leader.borrow()
    }

    /// Every change of [`QuorumQueue::leader`]: the node of the leader is the one that serves
    /// the queue's consumers.
    pub fn leader_events(&self) -> tokio::sync::watch::Receiver<Option<NodeId>> {
        self.leader.subscribe()
    }

    /// This node's member of the group as Raft sees it (None on a node that is not a member).
    pub fn raft_status(&self) -> Option<MemberStatus> {
        let group = self.group.get()?;
        let metrics = group.raft().metrics().borrow().clone();
        Some(MemberStatus {
            node: metrics.id,
            state: format!("{:?}", metrics.state).to_lowercase(),
            term: metrics.current_term,
            leader: metrics.current_leader,
            last_log_index: metrics.last_log_index,
            commit_index: metrics.last_applied.map(|id| id.index),
            snapshot_index: metrics.snapshot.map(|id| id.index),
            matched: metrics
                .replication
                .map(|replication| {
                    replication
                        .into_iter()
                        .map(|(node, matched)| (node, matched.map(|id| id.index)))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// This node stopped leading the group: its consumers forget what they held and are
    /// attached again through the new leader (`reattach_or_cancel`); the new leader returns
    /// those messages to the queue, redelivered (`take_over`), and answers any later ack of
    /// them as of an unknown message.
    fn lose_leadership(&self, queue: &Queue) {
        let cancelled: Vec<Arc<Consumer>> = {
            let mut consumers = self.consumers.lock();
            consumers.held.clear();
            consumers.cancelled.clear();
            consumers.gets.clear();
            consumers.by_key.drain().map(|(_, c)| c).collect()
        };
        if !cancelled.is_empty() {
            tracing::info!(
                queue = %queue.name,
                consumers = cancelled.len(),
                "quorum queue leadership moved away: attaching this node's consumers to the new leader"
            );
        }
        reattach_or_cancel(cancelled);
    }

    /// The leader this node forwards its clients to: None while this node leads, or no
    /// leader is known, or the leader's node has no name here (a single node). Made on first
    /// use after a leader change.
    fn delegate(&self, queue: &Queue) -> Option<Arc<RemoteQueue>> {
        let leader = self.leader()?;
        if leader == self.host.node_id() || self.is_deleted() {
            return None;
        }
        // Looked up and made under one lock: two callers at once (a consumer attaching, the
        // leader watch moving waiting ones) must not each make one, the second retiring the
        // first while its consumers already hold messages on the leader.
        let mut delegate = self.delegate.lock();
        if let Some((node, remote)) = &*delegate {
            if *node == leader {
                return Some(remote.clone());
            }
        }
        let name = self.host.member_name(leader)?;
        let home = queue.home()?;
        let peer = self.forward_peers.peer(&name);
        let remote = Arc::new(RemoteQueue::new(
            &peer,
            home.vhost_name(),
            &queue.name,
            "quorum",
            self.vias.clone(),
        ));
        let retired = delegate.replace((leader, remote.clone()));
        drop(delegate);
        if let Some((_, old)) = retired {
            reattach_or_cancel(self.retire_delegate(old));
        }
        Some(remote)
    }

    /// A delegate goes: its consumers are cancelled at the serving node (and returned, to be
    /// told basic.cancel here); it is kept a while for settling what it delivered.
    fn retire_delegate(&self, old: Arc<RemoteQueue>) -> Vec<Arc<Consumer>> {
        let (cancelled, _) = old.mark_deleted();
        let mut retired = self.retired_delegates.lock();
        if old.can_settle() {
            retired.push((tokio::time::Instant::now(), old));
        }
        let excess = retired.len().saturating_sub(RETIRED_DELEGATES);
        retired.drain(..excess);
        cancelled
    }

    /// The delegate that delivered what is stamped `via` over a binding still up: the
    /// current one, or a retired one still worth settling through (the others are dropped
    /// here). None when it is gone, or its link was lost since.
    fn settling_delegate(&self, via: u16) -> Option<Arc<RemoteQueue>> {
        if let Some(current) = self.current_delegate().filter(|r| r.delivered_via(via)) {
            return Some(current);
        }
        let mut retired = self.retired_delegates.lock();
        retired.retain(|(at, r)| at.elapsed() < RETIRED_DELEGATE_KEEP && r.can_settle());
        retired
            .iter()
            .find(|(_, r)| r.delivered_via(via))
            .map(|(_, r)| r.clone())
    }

    /// Moves waiting consumers to the leader once the link to its node is up; gives up after
    /// a while (the next leader change moves them too).
    fn await_link(&self, queue: &Arc<Queue>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(queue);
        runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + LINK_WAIT;
            while tokio::time::Instant::now() < deadline {
                tokio::time::sleep(FORWARD_RETRY).await;
                let Some(queue) = weak.upgrade() else { return };
                let Some(qq) = QuorumQueue::of(&queue) else {
                    return;
                };
                if qq.is_deleted() || qq.is_leading() || qq.attach_waiting(&queue) {
                    return;
                }
            }
        });
    }

    /// The delegate as it is now, without making one (counts).
    fn current_delegate(&self) -> Option<Arc<RemoteQueue>> {
        self.delegate.lock().as_ref().map(|(_, r)| r.clone())
    }

    /// Whether this node's clients of the queue are served here (it leads, or no other
    /// leader is known yet): the forwarding link's serving side acts only on such a queue,
    /// never forwarding again (two nodes each taking the other for the leader would loop).
    /// Whether this node's member of the group has not started yet (the queue was just
    /// declared, or is being recovered): commands proposed meanwhile wait, in order, for the
    /// group to lead here or for its leader to take them.
    pub fn is_starting(&self) -> bool {
        self.group.get().is_none()
    }

    pub fn serves_here(&self) -> bool {
        self.is_leading()
    }

    /// The leader moved (`watch_leader`): the one way the node serving this queue's clients
    /// changes. A delegate bound to a node that no longer leads is retired: its consumers are
    /// attached again through the new leader (`reattach_or_cancel`, no basic.cancel, as in
    /// RabbitMQ) and what they held goes back to the queue on the new leader, redelivered
    /// (its `take_over` cancels the old leader's consumers in the group). Consumers attached here while no
    /// leader was known (they hold nothing yet) move to the new leader's node.
    fn follow_leader(&self, queue: &Queue, leader: Option<NodeId>) {
        let Some(leader) = leader else {
            // An election: the old delegate's consumers are cancelled when its link goes,
            // or at the next known leader.
            return;
        };
        let retired = {
            let mut delegate = self.delegate.lock();
            let stale = delegate.as_ref().is_some_and(|(node, _)| *node != leader);
            if stale {
                delegate.take()
            } else {
                None
            }
        };
        if let Some((node, old)) = retired {
            let cancelled = self.retire_delegate(old);
            if !cancelled.is_empty() {
                tracing::info!(
                    queue = %queue.name,
                    old_leader = node,
                    new_leader = leader,
                    consumers = cancelled.len(),
                    "quorum queue leader moved: attaching the consumers forwarded to the old one to the new one"
                );
            }
            reattach_or_cancel(cancelled);
        }
        if leader == self.host.node_id() {
            return;
        }
        self.attach_waiting(queue);
    }

    /// Consumers attached here while this node could not forward them (no leader known, or
    /// no link to its node yet) go to the leader's node once it can; they hold nothing.
    fn attach_waiting(&self, queue: &Queue) -> bool {
        let Some(remote) = self.delegate(queue) else {
            return false;
        };
        if !remote.is_reachable() {
            return false;
        }
        let waiting: Vec<Arc<Consumer>> = {
            let mut consumers = self.consumers.lock();
            let idle: Vec<ConsumerKey> = consumers
                .by_key
                .keys()
                .copied()
                .filter(|key| !consumers.holds_any(*key))
                .collect();
            idle.iter()
                .filter_map(|key| consumers.by_key.remove(key))
                .collect()
        };
        let mut given_back = Vec::new();
        for c in waiting {
            if let Err(c) = remote.add_consumer(c) {
                given_back.push(c);
            }
        }
        if !given_back.is_empty() {
            // The link went as they were being moved: they wait here again.
            reattach_or_cancel(given_back);
            return false;
        }
        true
    }

    /// The group as this node's member sees it (None while the group is still starting);
    /// read from openraft's metrics, see [`status`].
    pub fn group_status(&self) -> Option<status::GroupStatus> {
        let group = self.group.get()?;
        let metrics = group.raft().metrics();
        let metrics = metrics.borrow();
        Some(status::GroupStatus::from_metrics(self.group_id, &metrics))
    }

    fn propose(&self, command: Command, confirm: Option<Arc<QueueAnswers>>) {
        self.propose_answered(command, confirm, None)
    }

    fn propose_answered(
        &self,
        command: Command,
        confirm: Option<Arc<QueueAnswers>>,
        answered: Option<oneshot::Sender<()>>,
    ) {
        tracing::trace!(group = self.group_id, ?command, "quorum proposal");
        if let Some(c) = &confirm {
            c.expect_one();
        }
        if let Err(refused) = self.commands.send(Proposed {
            command,
            confirm,
            answered,
        }) {
            // The queue's tasks are gone (deleted, shutting down): never leave a confirm
            // hanging.
            if let Some(c) = refused.0.confirm {
                c.answered(false);
            }
            return;
        }
        // A message with a TTL may be on its way to the head.
        self.wake_tick();
    }

    /// Wakes a tick that went to sleep on a quiet queue.
    fn wake_tick(&self) {
        if self.tick_asleep.load(Ordering::Relaxed)
            && self.tick_asleep.swap(false, Ordering::AcqRel)
        {
            self.tick_wake.notify_one();
        }
    }

    /// Proposes an enqueue; `confirm` is answered once the group committed it.
    pub fn enqueue(&self, message: &Message, confirm: Option<&Arc<QueueAnswers>>) {
        if self.deleted.load(Ordering::Acquire) {
            if let Some(c) = confirm {
                c.expect_one();
                c.answered(true);
            }
            return;
        }
        self.propose(
            Command::Enqueue {
                publisher: None,
                body: codec::encode(message),
                ttl_ms: message.expiration_ms,
            },
            confirm.cloned(),
        );
    }

    pub fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        let mut consumer = consumer;
        if let Some(remote) = self.delegate(queue) {
            match remote.add_consumer(consumer) {
                Ok(()) => return Ok(()),
                Err(given_back) => consumer = given_back,
            }
            // The link to the leader's node is not up (a node just started, a reconnect, the
            // link lost as the consumer was being moved there): the consumer waits here until
            // it is (the link's own dialling brings it), never cancelled for it.
            self.await_link(queue);
        }
        let key = {
            let mut consumers = self.consumers.lock();
            if self.deleted.load(Ordering::Acquire) {
                return Err(AmqpError::not_found(format!(
                    "no queue '{}' in vhost '{}'",
                    queue.name,
                    queue.vhost_name()
                )));
            }
            // No check of `exclusive`: RabbitMQ 3.10's quorum queues ignore the flag and take
            // any number of consumers beside (or as) an exclusive one (checked against 3.10.8;
            // `x-single-active-consumer` is their way to one consumer at a time).
            let key = self.next_consumer_key.fetch_add(1, Ordering::Relaxed);
            consumers.by_key.insert(key, consumer.clone());
            key
        };
        // A no-ack consumer has no prefetch: what it is handed is settled at once.
        let prefetch = if consumer.no_ack {
            0
        } else {
            consumer.prefetch_count
        };
        self.propose(
            Command::Checkout {
                consumer: key,
                prefetch,
            },
            None,
        );
        Ok(())
    }

    /// basic.cancel or a closing channel. As in RabbitMQ, what the client holds stays its
    /// own to ack or reject (a closing channel requeues it): the consumer is suspended in the
    /// group until then, and cancelled there — returning anything still checked out to it —
    /// once it holds nothing.
    pub fn remove_consumer(
        &self,
        connection: crate::consumer::ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<Arc<Consumer>> {
        let (key, consumer, holds) = {
            let mut consumers = self.consumers.lock();
            let key = consumers.by_key.iter().find_map(|(key, c)| {
                (c.connection == connection && c.channel == channel && c.tag.as_str() == tag)
                    .then_some(*key)
            });
            let Some(key) = key else {
                drop(consumers);
                // Attached through the delegate (the leader's node holds it).
                return self
                    .current_delegate()?
                    .remove_consumer(connection, channel, tag);
            };
            let consumer = consumers.by_key.remove(&key)?;
            let holds = consumers.holds_any(key);
            if holds {
                consumers.cancelled.insert(key);
            }
            (key, consumer, holds)
        };
        let command = match holds {
            true => Command::Suspend { consumer: key },
            false => Command::Cancel { consumer: key },
        };
        self.propose(command, None);
        Some(consumer)
    }

    /// Acks, requeues and rejects, as the group's settle, return (or release) and discard,
    /// per consumer that holds the messages. `requeued` go to the back of the queue when the
    /// client asked (nack/reject with requeue, recover), to the head when its channel went
    /// away (`released`), as in RabbitMQ 3.10.
    pub fn settle(
        &self,
        acked: &[QueuedMessage],
        requeued: &[QueuedMessage],
        rejected: &[QueuedMessage],
        released: bool,
    ) {
        // One command per run of messages of the same consumer, in the order the messages
        // came (delivery-tag order): requeued messages of several consumers (basic.get takes
        // one each) reach the back of the queue in that order.
        let mut by_consumer: Vec<((u8, ConsumerKey), Vec<MsgId>)> = Vec::new();
        let mut done = Vec::new();
        // Messages delivered through a delegate, by binding: the leader's node holds them.
        let mut forwarded: Vec<(u16, [Vec<QueuedMessage>; 3])> = Vec::new();
        {
            let mut consumers = self.consumers.lock();
            for (kind, messages) in [(0u8, acked), (1, requeued), (2, rejected)] {
                for m in messages {
                    if m.via != 0 {
                        let at = match forwarded.iter().position(|(via, _)| *via == m.via) {
                            Some(at) => at,
                            None => {
                                forwarded.push((m.via, Default::default()));
                                forwarded.len() - 1
                            }
                        };
                        forwarded[at].1[kind as usize].push(m.clone());
                    } else if let Some(key) = consumers.held.remove(&m.id) {
                        match by_consumer.last_mut() {
                            Some((run, ids)) if *run == (kind, key) => ids.push(m.id),
                            _ => by_consumer.push(((kind, key), vec![m.id])),
                        }
                    }
                    // Else delivered here by a consumer that is gone (this node stopped
                    // leading): the new leader returned it to the queue already.
                }
            }
            // Cancelled consumers whose last messages these were leave the group.
            let cancelled: Vec<ConsumerKey> = consumers.cancelled.iter().copied().collect();
            for key in cancelled {
                if !consumers.holds_any(key) {
                    consumers.cancelled.remove(&key);
                    done.push(key);
                }
            }
        }
        for ((kind, consumer), msg_ids) in by_consumer {
            let command = match kind {
                0 => Command::Settle { consumer, msg_ids },
                1 if released => Command::Release { consumer, msg_ids },
                1 => Command::Return { consumer, msg_ids },
                _ => Command::Discard { consumer, msg_ids },
            };
            self.propose(command, None);
        }
        for consumer in done {
            self.propose(Command::Cancel { consumer }, None);
        }
        for (via, [acks, requeues, rejects]) in forwarded {
            // Through the delegate that delivered them, the current one or one retired since,
            // over the link they came by, and no other. One that is gone (its link lost, or
            // retired long ago) delivered to consumers that were cancelled: the serving side
            // requeued what they held when the link went, or the new leader's take-over did
            // (`take_over`); the settle has nothing left to do.
            if let Some(remote) = self.settling_delegate(via) {
                remote.settle(&acks, &requeues, &rejects);
            }
        }
    }

    /// basic.get: a consumer of prefetch 1 checks out the next message and is suspended at
    /// once (so it takes at most that one); the message is then the channel's like any
    /// delivery (settled at once for no-ack). Returns it with the ready count, or None.
    async fn get(&self, queue: &Queue, no_ack: bool) -> Option<(QueuedMessage, u32)> {
        if let Some(remote) = self.delegate(queue) {
            return remote.get(no_ack).await;
        }
        let group = self.started_group().await?;
        // Only the leader's node serves gets: another node's go there.
        if known_leader(&group, LEADER_WAIT).await.0 != Some(self.host.node_id()) {
            return match self.delegate(queue) {
                Some(remote) => remote.get(no_ack).await,
                None => None,
            };
        }
        if self.is_deleted() {
            return None;
        }
        let key = self.next_consumer_key.fetch_add(1, Ordering::Relaxed);
        let (message_tx, message_rx) = oneshot::channel();
        self.consumers.lock().gets.insert(key, message_tx);
        self.propose(
            Command::Checkout {
                consumer: key,
                prefetch: 1,
            },
            None,
        );
        let (answered_tx, answered_rx) = oneshot::channel();
        self.propose_answered(Command::Suspend { consumer: key }, None, Some(answered_tx));
        let _ = answered_rx.await;
        let took = group
            .with_queue(|q| q.checked_out_ids(key))
            .unwrap_or_default();
        if took.is_empty() {
            self.consumers.lock().gets.remove(&key);
            self.propose(Command::Cancel { consumer: key }, None);
            return None;
        }
        // The effects task hands the delivery over (it may still be on its way).
        let message = tokio::time::timeout(Duration::from_secs(30), message_rx)
            .await
            .ok()?
            .ok()?;
        if no_ack {
            self.propose(
                Command::Settle {
                    consumer: key,
                    msg_ids: vec![message.id],
                },
                None,
            );
            self.propose(Command::Cancel { consumer: key }, None);
        } else {
            let mut consumers = self.consumers.lock();
            consumers.held.insert(message.id, key);
            consumers.cancelled.insert(key);
        }
        Some((message, self.message_count()))
    }

    /// The group once it runs here; a queue declared just now may still be starting it (what
    /// was published meanwhile waits in order, so a get must not answer "empty" before then).
    async fn started_group(&self) -> Option<Arc<QueueGroup>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            // Registered before the check: a `notify_waiters` in between still wakes it.
            let started = self.group_started.notified();
            if let Some(group) = self.group.get() {
                return Some(group.clone());
            }
            if self.is_deleted() {
                return None;
            }
            tokio::time::timeout_at(deadline, started).await.ok()?;
        }
    }

    /// Waits until `deadline` at most for this node's member of the group to run and to have
    /// applied every entry its log held when it started: before that its counts are not the
    /// queue's (a declare-ok would say 0 messages). A single node waits for this at boot,
    /// before it takes clients, as RabbitMQ recovers its queues first.
    pub async fn recovered(&self, deadline: tokio::time::Instant) {
        let Ok(Some(group)) = tokio::time::timeout_at(deadline, self.started_group()).await else {
            return;
        };
        let last = group.raft().metrics().borrow().last_log_index;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let _ = group
            .raft()
            .wait(Some(left))
            .applied_index_at_least(last, "the queue's log applied")
            .await;
    }

    /// A policy change: the group's machine takes the new config through its log (every
    /// replica applies it at the same point). Proposed in order with everything else, also
    /// while the group is still starting: a publish that follows the change must see it.
    pub fn set_config(&self, config: QueueConfig, dead_letter_at_least_once: bool) {
        let mut current = self.config.lock();
        // Under the lock: the proposals go out in the order of the changes.
        if *current != config {
            *current = config.clone();
            self.propose(Command::SetConfig(config), None);
        }
        if self
            .dead_letter_at_least_once
            .swap(dead_letter_at_least_once, Ordering::AcqRel)
            != dead_letter_at_least_once
        {
            self.propose(
                Command::SetDeadLetterAtLeastOnce(dead_letter_at_least_once),
                None,
            );
        }
    }

    /// Dead messages the group holds until their copies are safe (at-least-once
    /// dead-lettering; RabbitMQ's `messages_dlx`), as this member last applied.
    pub fn dead_letters_held(&self) -> usize {
        self.group
            .get()
            .map_or(0, |g| g.with_queue(|q| q.dead_letters_held().count()))
    }

    fn desired_config(&self) -> QueueConfig {
        self.config.lock().clone()
    }

    /// queue.purge: drops the ready messages; answers how many there were.
    pub fn purge(&self) -> u32 {
        let count = self.message_count();
        match self.current_delegate() {
            // A follower would only drop the purge: the leader carries it out.
            Some(remote) if !self.is_leading() => {
                let reported = remote.purge();
                if self.group.get().is_some() {
                    count
                } else {
                    reported
                }
            }
            _ => {
                self.propose(Command::Purge, None);
                count
            }
        }
    }

    pub fn message_count(&self) -> u32 {
        if self.group.get().is_none() {
            if let Some(remote) = self.current_delegate() {
                return remote.message_count();
            }
        }
        self.group.get().map_or(0, |g| {
            g.with_queue(|q| q.ready_count().min(u32::MAX as usize) as u32)
        })
    }

    pub fn unacked_count(&self) -> u32 {
        self.group.get().map_or(0, |g| {
            g.with_queue(|q| q.checked_out_count().min(u32::MAX as usize) as u32)
        })
    }

    /// Body bytes of the ready messages (as framed in the log).
    pub fn ready_bytes(&self) -> u64 {
        self.group
            .get()
            .map_or(0, |g| g.with_queue(|q| q.ready_bytes()))
    }

    /// This node's consumers; while another node leads, the leader's count (it counts every
    /// node's consumers, forwarded ones included).
    pub fn consumer_count(&self) -> u32 {
        let local = self.consumers.lock().by_key.len() as u32;
        match self.current_delegate() {
            Some(remote) if !self.is_leading() => remote.consumer_count().max(local),
            _ => local,
        }
    }

    pub fn has_consumers(&self) -> bool {
        self.consumer_count() > 0
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// queue.delete: no more commands; the group stops and its log and snapshot go.
    /// Returns the consumers to notify and the ready count.
    pub fn mark_deleted(&self) -> (Vec<Arc<Consumer>>, u32) {
        let count = self.message_count();
        let consumers = {
            let mut consumers = self.consumers.lock();
            self.deleted.store(true, Ordering::Release);
            consumers.held.clear();
            consumers.cancelled.clear();
            consumers.gets.clear();
            consumers.by_key.drain().map(|(_, c)| c).collect::<Vec<_>>()
        };
        let mut consumers = consumers;
        if let Some((_, remote)) = self.delegate.lock().take() {
            consumers.extend(remote.mark_deleted().0);
        }
        if let Some(group) = self.group.get() {
            self.remove_data(group.clone());
        }
        (consumers, count)
    }

    /// This node stops serving the queue (`VHost::set_serving`): its consumers here are
    /// taken (to be told basic.cancel); the group and its data stay.
    pub(crate) fn detach_consumers(&self) -> Vec<Arc<Consumer>> {
        let mut detached: Vec<Arc<Consumer>> = {
            let mut consumers = self.consumers.lock();
            consumers.held.clear();
            consumers.cancelled.clear();
            consumers.gets.clear();
            consumers.by_key.drain().map(|(_, c)| c).collect()
        };
        if let Some((_, remote)) = self.delegate.lock().take() {
            detached.extend(remote.mark_deleted().0);
        }
        detached
    }

    /// Removes the group's log and snapshot, once; the removal is registered with the host
    /// at once, so a queue declared again under the name waits for it.
    fn remove_data(&self, group: Arc<QueueGroup>) {
        if !self.removal_started.swap(true, Ordering::AcqRel) {
            self.host.remove_group(group);
        }
    }
}

/// Starts a quorum queue's group (recovering it from the log when it exists) and its
/// tasks. Commands proposed before the group leads wait in order.
pub(crate) fn start(queue: &Arc<Queue>) {
    let Some(qq) = QuorumQueue::of(queue) else {
        return;
    };
    let Some(commands) = qq.commands_rx.lock().take() else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!(queue = %queue.name, "no runtime to start the quorum queue on");
        return;
    };
    let weak = Arc::downgrade(queue);
    runtime.spawn(async move {
        if let Err(e) = run_group(weak.clone(), commands).await {
            tracing::error!(error = %e, "quorum queue group failed to start");
        }
    });
}

impl QueueType for QuorumQueue {
    fn type_name(&self) -> &'static str {
        "quorum"
    }

    fn served_here(&self) -> bool {
        self.is_leading()
    }

    fn confirms_later(&self) -> bool {
        true
    }

    fn answers_get_later(&self) -> bool {
        true
    }

    /// RabbitMQ 3.10's quorum queues refuse a consumer on a channel with a global prefetch
    /// limit.
    fn supports_global_qos(&self) -> bool {
        false
    }

    /// Confirmed once the group committed it.
    fn enqueue(
        &self,
        queue: &Arc<Queue>,
        message: &Arc<Message>,
        _stored: Option<Appended>,
        confirm: Option<&mut RoutedConfirm<'_>>,
    ) -> Enqueued {
        MessageStats::add(&queue.stats.publish, 1);
        QuorumQueue::enqueue(self, message, confirm.map(RoutedConfirm::join));
        Enqueued::Accepted
    }

    fn settle(
        &self,
        _queue: &Arc<Queue>,
        acked: Vec<QueuedMessage>,
        requeued: Vec<QueuedMessage>,
        rejected: Vec<QueuedMessage>,
    ) {
        QuorumQueue::settle(self, &acked, &requeued, &rejected, false)
    }

    /// Back at the head, where RabbitMQ returns a downed consumer's messages.
    fn release(&self, _queue: &Arc<Queue>, messages: Vec<QueuedMessage>) {
        QuorumQueue::settle(self, &[], &messages, &[], true)
    }

    fn add_consumer(&self, queue: &Arc<Queue>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        QuorumQueue::add_consumer(self, queue, consumer)
    }

    /// A quorum queue is never auto-delete.
    fn remove_consumer(
        &self,
        queue: &Queue,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        let consumer = QuorumQueue::remove_consumer(self, connection, channel, tag)?;
        queue.touch();
        Some((consumer, false))
    }

    fn get_later<'a>(&'a self, queue: &'a Arc<Queue>, no_ack: bool) -> GetLater<'a> {
        Box::pin(self.get(queue, no_ack))
    }

    fn purge(&self, _queue: &Queue) -> u32 {
        QuorumQueue::purge(self)
    }

    fn mark_deleted(&self, _queue: &Queue) -> (Vec<Arc<Consumer>>, u32) {
        QuorumQueue::mark_deleted(self)
    }

    fn detach(&self, _queue: &Queue) -> Vec<Arc<Consumer>> {
        self.detach_consumers()
    }

    fn message_count(&self, _queue: &Arc<Queue>) -> u32 {
        QuorumQueue::message_count(self)
    }

    fn consumer_count(&self) -> u32 {
        QuorumQueue::consumer_count(self)
    }

    fn unacked_count(&self) -> u32 {
        QuorumQueue::unacked_count(self)
    }

    /// A quorum queue's messages are all in memory (and in its log).
    fn depth(&self) -> QueueDepth {
        let ready = u64::from(QuorumQueue::message_count(self));
        let ready_bytes = self.ready_bytes();
        QueueDepth {
            ready,
            ready_bytes,
            ready_in_memory: ready,
            ready_in_memory_bytes: ready_bytes,
            paged_out: 0,
            paged_out_bytes: 0,
            unacked: u64::from(QuorumQueue::unacked_count(self)),
            consumers: u64::from(QuorumQueue::consumer_count(self)),
        }
    }

    fn unused(&self) -> Option<bool> {
        Some(!self.has_consumers())
    }

    fn apply_policies(&self, queue: &Arc<Queue>, limits: &QueueLimits, policies: &AppliedPolicies) {
        let config = queue_config(&queue.arguments, policies);
        let at_least_once = dead_letter_at_least_once(
            &queue.arguments,
            policies,
            &config,
            limits.dead_letter_exchange.is_some(),
        );
        self.set_config(config, at_least_once);
    }

    fn dead_letter_source(&self) -> DeadLetterSource {
        DeadLetterSource::Quorum
    }

    /// RabbitMQ's `members` and `leader`: from the group's own view when this node is a
    /// member that runs, else as declared and last learned.
    fn replicas(&self) -> Option<Replicas> {
        let group = self.group_status();
        Some(Replicas {
            members: group.as_ref().map_or_else(
                || self.member_ids(),
                |g| g.members.iter().map(|m| m.node).collect(),
            ),
            leader: group.as_ref().and_then(|g| g.leader).or(self.leader()),
            group,
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Tells each consumer it was cancelled (basic.cancel, for clients that asked for
/// consumer_cancel_notify).
/// Consumers whose serving member went (this node stopped leading, the leader moved, the
/// link to the leader's node was lost) stay attached, as a RabbitMQ quorum queue's consumers
/// do (no basic.cancel): each is attached again, through the new leader's node or here until
/// a leader is known, and what it held comes back from the new leader, redelivered (its
/// take-over returns what the old leader's consumers held; the client's late acks of those
/// are no-ops). Cancelled instead (basic.cancel, consumer_cancel_notify): a consumer of a
/// queue that is gone or is not a quorum queue here (a classic queue whose home node went),
/// and one no client channel holds any more (a forwarding link's consumer on the serving
/// side: its peer attaches its own again, told by `Frame::Moved`).
pub(crate) fn reattach_or_cancel(consumers: Vec<Arc<Consumer>>) {
    for c in consumers {
        let queue = c.queue.upgrade().filter(|_| c.is_attached());
        let reattached = match &queue {
            Some(queue) => match QuorumQueue::of(queue) {
                Some(qq) if !qq.is_deleted() => qq.add_consumer(queue, c.clone()).is_ok(),
                _ => false,
            },
            None => false,
        };
        if !reattached {
            tracing::debug!(consumer = %c.tag, queue = ?queue.as_ref().map(|q| q.name.clone()), attached = c.is_attached(), "consumer cancelled: its queue is gone, is no quorum queue here, or refused it");
            let _ = c.send(ConnectionEvent::ConsumerCancelled {
                channel: c.channel,
                consumer_tag: c.tag.clone(),
            });
        }
    }
}

/// How long a proposal waits for the group to know a leader (an election under way) before
/// it is refused (a publish then gets a nack).
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// Retired delegates a queue keeps for settling (`QuorumQueue::retired_delegates`): one per
/// leader change still being settled; their links going drops them sooner.
const RETIRED_DELEGATES: usize = 4;

/// How long a retired delegate is settled through: its consumers' clients were told
/// basic.cancel and settle or give back what they hold soon after (a later settle of what it
/// delivered is dropped, so retired delegates are not kept for good).
const RETIRED_DELEGATE_KEEP: Duration = Duration::from_secs(60);

/// How long a consumer attached while the link to the leader's node is down waits for it.
const LINK_WAIT: Duration = Duration::from_secs(60);

/// Between attempts to forward publishes while no member answers as the leader.
const FORWARD_RETRY: Duration = Duration::from_millis(50);

async fn run_group(
    weak: Weak<Queue>,
    mut commands: UnboundedReceiver<Proposed>,
) -> Result<(), String> {
    let (host, group_id, config, name, members) = {
        let queue = weak.upgrade().ok_or("queue gone")?;
        let qq = QuorumQueue::of(&queue).ok_or("not a quorum queue")?;
        (
            qq.host.clone(),
            qq.group_id,
            qq.desired_config(),
            queue.name.clone(),
            qq.members(),
        )
    };
    let own = host.node_id();
    // A queue of this name deleted just before: its data must be gone first.
    host.removed(group_id).await;
    let (in_flight_tx, in_flight_rx) = unbounded_channel::<InFlight>();
    tokio::spawn(complete(in_flight_rx));
    let in_flight_entries = Arc::new(tokio::sync::Semaphore::new(MAX_ENTRIES_IN_FLIGHT));
    let mut members = members;
    if !members.is_empty() && !members.contains(&own) {
        // Not a member: this node's record of the queue forwards publishes to the group,
        // until the group grows onto this node (`QuorumQueue::set_members`).
        tracing::debug!(queue = %name, group = group_id, "quorum queue served by other nodes");
        tokio::spawn(probe_leader(weak.clone()));
        loop {
            let changed = {
                // The queue gone (deleted): nothing left to forward.
                let Some(queue) = weak.upgrade() else {
                    return Ok(());
                };
                let Some(qq) = QuorumQueue::of(&queue) else {
                    return Ok(());
                };
                members = qq.members();
                if members.is_empty() || members.contains(&own) {
                    break;
                }
                qq.members_changed.clone()
            };
            // (A change told between the look above and this wait is kept by `notify_one`.)
            let first = tokio::select! {
                first = commands.recv() => first,
                _ = changed.notified() => continue,
            };
            let Some(first) = first else {
                return Ok(());
            };
            let Ok(permit) = in_flight_entries.clone().acquire_owned().await else {
                return Ok(());
            };
            let batch = take_batch(first, &mut commands);
            forward_batch(
                &host,
                group_id,
                members.clone(),
                batch,
                permit,
                &in_flight_tx,
            );
        }
        tracing::info!(queue = %name, group = group_id, ?members, "this node is now a member of the quorum queue's group");
    }
    let (effects_tx, effects_rx) = unbounded_channel();
    let group = host
        .node()
        .start_group(group_id, config.clone(), Some(effects_tx))
        .await
        .map_err(|e| e.to_string())?;
    let initialized = group
        .raft()
        .is_initialized()
        .await
        .map_err(|e| e.to_string())?;
    // The first member makes the group; the others wait for it to contact them. A restarted
    // member finds its group (and its membership) in its log. A first member without a log
    // whose group runs on the other members is a node that was wiped, forgotten and joined
    // again: it waits to be added back (`grow_quorum_queues`) instead of making a second group.
    if !initialized
        && members.first().is_none_or(|first| *first == own)
        && !group_runs_elsewhere(&host, group_id, &members).await
    {
        let initial = match members.is_empty() {
            true => vec![own],
            false => members.clone(),
        };
        group
            .initialize(&initial)
            .await
            .map_err(|e| e.to_string())?;
    }
    let group = Arc::new(group);
    {
        let queue = weak.upgrade().ok_or("queue gone")?;
        let qq = QuorumQueue::of(&queue).ok_or("not a quorum queue")?;
        if qq.group.set(group.clone()).is_err() {
            return Ok(());
        }
        qq.group_started.notify_waiters();
        if qq.is_deleted() {
            // Deleted while starting: the delete may have found no group to remove.
            qq.remove_data(group.clone());
            return Ok(());
        }
    }
    tracing::info!(queue = %name, group = group_id, ?members, "quorum queue group started");
    tokio::spawn(apply_effects(weak.clone(), effects_rx));
    tokio::spawn(tick(weak.clone(), group.clone()));
    tokio::spawn(watch_leader(weak.clone(), group.clone()));
    // The term in which this member, leading, last took the queue over.
    let mut took_over_in: Option<u64> = None;
    // This member leads and its take-over has not completed yet: retried every
    // `TAKE_OVER_RETRY` even when no command comes (in a drain nothing else would wake it, and
    // the old leader's consumers would keep what they held for good).
    let mut take_over_pending = false;
    loop {
        let first = {
            let Some(queue) = weak.upgrade() else { break };
            let Some(qq) = QuorumQueue::of(&queue) else {
                break;
            };
            // `notify_one` keeps a permit when nobody waits: a change is never missed.
            let leader_changed = qq.leader_changed.clone();
            drop(queue);
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => Some(command),
                    None => break,
                },
                _ = leader_changed.notified() => None,
                _ = tokio::time::sleep(TAKE_OVER_RETRY), if take_over_pending => None,
            }
        };
        let (leader, term) = known_leader(&group, LEADER_WAIT).await;
        take_over_pending = false;
        if leader == Some(own) {
            if took_over_in != Some(term) {
                // Marked done only once it completed: a take-over that failed (the
                // leadership check timed out on a link still reconnecting, a write refused)
                // runs again, or the consumers of the old leader's node would never be
                // cancelled and the messages they held never come back.
                if take_over(&weak, &group).await {
                    took_over_in = Some(term);
                } else {
                    take_over_pending = true;
                }
            }
        } else {
            took_over_in = None;
        }
        let Some(first) = first else { continue };
        // Whatever arrived while the previous entry was being proposed goes into one entry:
        // one append, one fsync and one apply for many publishes (openraft batches the writes
        // that reach it together too, but each as an entry of its own).
        let Ok(permit) = in_flight_entries.clone().acquire_owned().await else {
            break;
        };
        let batch = take_batch(first, &mut commands);
        if leader != Some(own) {
            // A follower: publishes go to the leader; what else consumers do here waits
            // until this node leads (or is dropped: see `QuorumQueue::lose_leadership`).
            let mut targets: Vec<NodeId> = leader.into_iter().collect();
            targets.extend(group.members().into_iter().filter(|m| *m != own));
            forward_batch(&host, group_id, targets, batch, permit, &in_flight_tx);
            continue;
        }
        let (waiting, command) = into_entry(batch);
        let proposal = Proposal {
            now_ms: now_ms(),
            command,
        };
        match group.propose_ff(proposal).await {
            Ok(answer) => {
                let reply = Box::pin(async move { answer.await.ok().map(|(_, reply)| reply) });
                if let Err(lost) = in_flight_tx.send((reply, waiting, permit)) {
                    refuse(lost.0 .1);
                }
            }
            Err(e) => {
                tracing::warn!(queue = %name, error = %e, "quorum queue proposal failed");
                refuse(waiting);
            }
        }
    }
    Ok(())
}

/// Between attempts of a new leader to take the queue over (`take_over`) after one failed.
const TAKE_OVER_RETRY: Duration = Duration::from_millis(200);

/// How often a node that is no member of a queue's group asks the members for its leader.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// On a node that is no member of the group: learns the leader, so this node's clients of the
/// queue are forwarded there (`QuorumQueue::follow_leader`). Every `PROBE_INTERVAL` the known
/// leader (else each member in turn) is sent an empty proposal: a follower answers with the
/// leader it knows, the leader commits the empty entry (a no-op for the queue).
async fn probe_leader(weak: Weak<Queue>) {
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let (host, group, known, members) = {
            let Some(queue) = weak.upgrade() else { return };
            let Some(qq) = QuorumQueue::of(&queue) else {
                return;
            };
            // Deleted, or a member now (its member's metrics name the leader).
            if qq.is_deleted() || qq.group.get().is_some() {
                return;
            }
            (qq.host.clone(), qq.group_id, qq.leader(), qq.members())
        };
        let transport = host.node().transport().clone();
        let own = host.node_id();
        let mut learned = None;
        let mut targets: Vec<NodeId> = known.into_iter().collect();
        targets.extend(members.iter().copied().filter(|m| Some(*m) != known));
        for to in targets {
            let request = RaftRequest::ClientWrite(Proposal {
                now_ms: now_ms(),
                command: Command::Batch(Vec::new()),
            });
            match transport.send(own, to, group, request).await {
                Ok(RaftResponse::ClientWrite { .. }) => learned = Some(to),
                Err(TransportError::NotLeader {
                    leader: Some(leader),
                    ..
                }) => learned = Some(leader),
                _ => continue,
            }
            break;
        }
        let Some(leader) = learned else { continue };
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        let changed = qq.leader.send_if_modified(|current| {
            let changed = *current != Some(leader);
            *current = Some(leader);
            changed
        });
        if changed {
            tracing::info!(queue = %queue.name, group, leader, "quorum queue leader (asked as no member)");
            qq.follow_leader(&queue, Some(leader));
        } else {
            // Consumers that waited for the link to the leader's node move now.
            qq.attach_waiting(&queue);
        }
    }
}

/// Whether a member of `members` other than this node answers for the group with a leader:
/// the group exists without this node's member (an empty proposal, as `probe_leader` sends;
/// a member not initialized yet answers "no leader").
async fn group_runs_elsewhere(host: &QuorumHost, group: GroupId, members: &[NodeId]) -> bool {
    let transport = host.node().transport().clone();
    let own = host.node_id();
    for to in members.iter().copied().filter(|m| *m != own) {
        let request = RaftRequest::ClientWrite(Proposal {
            now_ms: now_ms(),
            command: Command::Batch(Vec::new()),
        });
        match transport.send(own, to, group, request).await {
            Ok(RaftResponse::ClientWrite { .. })
            | Err(TransportError::NotLeader {
                leader: Some(_), ..
            }) => {
                tracing::warn!(group, member = to, "this node's member of the quorum queue group has no log while the group runs on its other members: it waits to be added back (grow_quorum_queues)");
                return true;
            }
            _ => {}
        }
    }
    false
}

/// `first` and whatever else waits, up to a batch.
fn take_batch(first: Proposed, commands: &mut UnboundedReceiver<Proposed>) -> Vec<Proposed> {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match commands.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    batch
}

/// One log entry's command for a batch, and who waits on each of its commands.
fn into_entry(batch: Vec<Proposed>) -> (Vec<Waiting>, Command) {
    let mut waiting = Vec::with_capacity(batch.len());
    let mut batched = Vec::with_capacity(batch.len());
    for proposed in batch {
        waiting.push((proposed.confirm, proposed.answered));
        batched.push(proposed.command);
    }
    let command = match batched.len() {
        1 => batched.pop().expect("one command"),
        _ => Command::Batch(batched),
    };
    (waiting, command)
}

/// Nacks the confirms of commands that will not be carried out.
fn refuse(waiting: Vec<Waiting>) {
    for (confirm, _) in waiting {
        if let Some(c) = confirm {
            c.answered(false);
        }
    }
}

/// Sends a batch's publishes to the group's leader (tried at `targets` in order, following
/// "not the leader" answers), confirmed once the leader committed them. Consumer commands
/// are not forwarded: a queue's consumers are served on its leader's node.
fn forward_batch(
    host: &Arc<QuorumHost>,
    group: GroupId,
    targets: Vec<NodeId>,
    batch: Vec<Proposed>,
    permit: tokio::sync::OwnedSemaphorePermit,
    in_flight: &UnboundedSender<InFlight>,
) {
    let (enqueues, dropped): (Vec<Proposed>, Vec<Proposed>) = batch
        .into_iter()
        .partition(|p| matches!(p.command, Command::Enqueue { .. }));
    refuse(
        dropped
            .into_iter()
            .map(|p| (p.confirm, p.answered))
            .collect(),
    );
    if enqueues.is_empty() {
        return;
    }
    let (waiting, command) = into_entry(enqueues);
    let proposal = Proposal {
        now_ms: now_ms(),
        command,
    };
    let transport = host.node().transport().clone();
    let registry = host.node().registry();
    let own = host.node_id();
    let reply = Box::pin(async move {
        // Each target in turn (a hinted leader first), while the group elects or a link to
        // the leader's node comes up, for as long as a proposal waits for a leader. This
        // node may be the one elected meanwhile (its member is then named the leader): the
        // batch is then proposed to its own member, not held until the wait runs out.
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        let mut hint: Option<NodeId> = None;
        for attempt in 0.. {
            let to = match hint.take() {
                Some(leader) => leader,
                None => *targets.get(attempt % targets.len().max(1))?,
            };
            let request = RaftRequest::ClientWrite(proposal.clone());
            let answer = match to == own {
                true => registry.handle(group, request).await,
                false => transport.send(own, to, group, request).await,
            };
            match answer {
                Ok(RaftResponse::ClientWrite { reply, .. }) => return Some(reply),
                Err(TransportError::NotLeader {
                    leader: Some(leader),
                    ..
                }) if leader != to => hint = Some(leader),
                Ok(_) => {}
                Err(e) => tracing::debug!(group, to, error = %e, "forwarding publishes failed"),
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            if hint.is_none() {
                tokio::time::sleep(FORWARD_RETRY).await;
            }
        }
        None
    });
    if let Err(lost) = in_flight.send((reply, waiting, permit)) {
        refuse(lost.0 .1);
    }
}

/// The group's leader as this member knows it, with the term; waits up to `patience` while
/// none is known.
async fn known_leader(group: &QueueGroup, patience: Duration) -> (Option<NodeId>, u64) {
    let mut metrics = group.raft().metrics();
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let (leader, term) = {
            let m = metrics.borrow_and_update();
            (m.current_leader, m.current_term)
        };
        if leader.is_some() {
            return (leader, term);
        }
        match tokio::time::timeout_at(deadline, metrics.changed()).await {
            Ok(Ok(())) => continue,
            _ => return (None, term),
        }
    }
}

/// Publishes the leader this member knows (the queue's watch, the host's broadcast) and hands
/// the queue over when this node stops leading. Taking over runs in the proposer, ahead of
/// the commands waiting there.
async fn watch_leader(weak: Weak<Queue>, group: Arc<QueueGroup>) {
    // The server metrics change only with the vote, state, leader or membership; the whole
    // metrics change with every entry (and were republished on every openraft tick).
    let mut metrics = group.raft().server_metrics();
    let own = group.raft().metrics().borrow().id;
    let mut leading = false;
    loop {
        let (leader, is_leader) = {
            let m = metrics.borrow_and_update();
            (m.current_leader, m.state.is_leader())
        };
        {
            let Some(queue) = weak.upgrade() else { return };
            let Some(qq) = QuorumQueue::of(&queue) else {
                return;
            };
            if qq.is_deleted() {
                return;
            }
            let changed = qq.leader.send_if_modified(|known| {
                let changed = *known != leader;
                *known = leader;
                changed
            });
            if changed {
                tracing::info!(queue = %queue.name, group = group.group(), ?leader, "quorum queue leader");
                qq.host.announce_leader(LeaderChange {
                    group: group.group(),
                    leader,
                });
                qq.leader_changed.notify_one();
                qq.wake_tick();
            }
            if leading && !(is_leader && leader == Some(own)) {
                qq.lose_leadership(&queue);
            }
            if changed {
                qq.follow_leader(&queue, leader);
            }
        }
        leading = is_leader && leader == Some(own);
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// This member now leads: the queue's state is brought in line with this node before anything
/// else is proposed. The config follows the current policies; consumers the group knows that
/// are not attached here (they were on the old leader's node, or on this node before a
/// restart) are cancelled, which returns what they held to the queue, redelivered, as
/// RabbitMQ does when a consumer's node goes down; consumers attached here while another node
/// led start receiving. Answers whether all of that was done (false: to be tried again while
/// this member leads).
async fn take_over(weak: &Weak<Queue>, group: &Arc<QueueGroup>) -> bool {
    // A queue gone has nothing to take over.
    let Some(queue) = weak.upgrade() else {
        return true;
    };
    let Some(qq) = QuorumQueue::of(&queue) else {
        return true;
    };
    let write = |command: Command| group.propose_at(now_ms(), command);
    // A new leader may not have applied what the old one committed yet (a follower learns
    // the commit index late): the consumers the group knows are read once it has.
    if let Err(e) = group.confirm_leadership().await {
        tracing::info!(queue = %queue.name, error = %e, "quorum queue take-over: leadership not confirmed (retried)");
        return false;
    }
    // Consumers of this node the group no longer knows (another leader cancelled them while
    // this member did not lead, perhaps without the leader watch seeing it) hold nothing:
    // what this node remembers them holding is forgotten, or a later removal of one would
    // only suspend it, for good, waiting on settles of messages it no longer has.
    let known: HashSet<ConsumerKey> = group.with_queue(|q| q.consumer_keys().into_iter().collect());
    {
        let mut consumers = qq.consumers.lock();
        let Consumers {
            held, cancelled, ..
        } = &mut *consumers;
        held.retain(|_, key| known.contains(key));
        cancelled.retain(|key| known.contains(key));
    }
    let config = qq.desired_config();
    let mut complete = true;
    if group.with_queue(|q| q.config() != &config) {
        complete &= write(Command::SetConfig(config)).await.is_ok();
    }
    let at_least_once = qq.dead_letter_at_least_once.load(Ordering::Acquire);
    if group.with_queue(|q| q.dead_letters_at_least_once() != at_least_once) {
        complete &= write(Command::SetDeadLetterAtLeastOnce(at_least_once))
            .await
            .is_ok();
    }
    // Dead messages an earlier leader may not have delivered: sent again (at least once).
    let held: Vec<MsgId> = group.with_queue(|q| q.dead_letters_held().map(|(_, m)| m.id).collect());
    if !held.is_empty() {
        tokio::spawn(forward_dead_letters(weak.clone(), held));
    }
    let (local, mut attached): (HashSet<ConsumerKey>, Vec<(ConsumerKey, u32)>) = {
        let consumers = qq.consumers.lock();
        let local = consumers
            .by_key
            .keys()
            .chain(consumers.cancelled.iter())
            .chain(consumers.gets.keys())
            .copied()
            .collect();
        let attached = consumers
            .by_key
            .iter()
            .map(|(key, c)| (*key, if c.no_ack { 0 } else { c.prefetch_count }))
            .collect();
        (local, attached)
    };
    // In attach order (keys are handed out in increasing order): the group's service order,
    // which decides x-single-active-consumer's active one, must be the order the consumers
    // came in, whether their own Checkout or this one reaches the log first (`by_key` is a
    // hash map; in its order a second consumer could go ahead of the first).
    attached.sort_unstable_by_key(|(key, _)| *key);
    let mut stale: Vec<ConsumerKey> = known
        .iter()
        .copied()
        .filter(|key| !local.contains(key))
        .collect();
    stale.sort_unstable();
    for stale in stale {
        complete &= write(Command::Cancel { consumer: stale }).await.is_ok();
    }
    for (key, prefetch) in attached {
        if !known.contains(&key) {
            complete &= write(Command::Checkout {
                consumer: key,
                prefetch,
            })
            .await
            .is_ok();
        }
    }
    if !complete {
        tracing::info!(queue = %queue.name, "quorum queue take-over: a write failed (retried)");
        return false;
    }
    tracing::info!(queue = %queue.name, group = group.group(), "quorum queue leads here");
    true
}

/// Awaits the group's answers in log order and settles the confirms waiting on them.
async fn complete(mut in_flight: UnboundedReceiver<InFlight>) {
    while let Some((answer, waiting, _permit)) = in_flight.recv().await {
        let replies = match answer.await {
            Some(Reply::Batch(replies)) => replies.into_iter().map(Some).collect(),
            reply => vec![reply],
        };
        for (i, (confirm, answered)) in waiting.into_iter().enumerate() {
            let accepted = matches!(replies.get(i), Some(Some(r)) if !matches!(r, Reply::Rejected));
            if let Some(c) = confirm {
                c.answered(accepted);
            }
            if let Some(answered) = answered {
                let _ = answered.send(());
            }
        }
    }
}

/// Lets time pass in the group while the head of the queue has an expiry, so TTLs fire
/// without traffic. Only the time is proposed; the machine decides what expired.
async fn tick(weak: Weak<Queue>, group: Arc<QueueGroup>) {
    let mut quiet_rounds = 0u32;
    loop {
        let wake = {
            let Some(queue) = weak.upgrade() else { return };
            let Some(qq) = QuorumQueue::of(&queue) else {
                return;
            };
            let quiet = quiet_rounds >= TICK_QUIET_ROUNDS;
            // Set before sleeping: a proposal after this wakes the sleep below (`notify_one`
            // keeps the permit if it comes first).
            qq.tick_asleep.store(quiet, Ordering::Release);
            (qq.tick_wake.clone(), quiet)
        };
        let (tick_wake, quiet) = wake;
        let interval = if quiet {
            TICK_QUIET_INTERVAL
        } else {
            TICK_INTERVAL
        };
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            // Something was proposed: check at the usual pace for a while (the entry may not
            // have been applied yet when this runs).
            _ = tick_wake.notified() => quiet_rounds = 0,
        }
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        if qq.is_deleted() {
            return;
        }
        if !group.is_leader() {
            quiet_rounds = quiet_rounds.saturating_add(1);
            continue;
        }
        let now = now_ms();
        let head_expires_at_ms =
            group.with_queue(|q| q.ready_messages().next().and_then(|m| m.expires_at_ms));
        match head_expires_at_ms {
            Some(at) => {
                quiet_rounds = 0;
                if now > at {
                    qq.propose(Command::Tick, None);
                }
            }
            None => quiet_rounds = quiet_rounds.saturating_add(1),
        }
    }
}

/// Acts on what applied commands produced: deliveries and dead-letters.
async fn apply_effects(weak: Weak<Queue>, mut effects: UnboundedReceiver<Applied>) {
    while let Some(applied) = effects.recv().await {
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        // Every member computes the effects. A delivery is handed over wherever its consumer
        // is attached, which is only ever the node that led when the group checked the
        // message out to it: gating it on leading now would drop the deliveries of entries
        // applied while this member briefly did not lead (an election it won again, which the
        // leader watch may not even see), leaving the messages checked out to a consumer
        // that is still attached here and never gets them. Dead letters go once, from the
        // leader.
        let leading = qq.is_leading();
        // Under at-least-once the group holds its dead messages; they are sent from there.
        // Read from the group's state only when a dead letter comes (not per entry).
        let mut at_least_once = None;
        let mut held_dead = Vec::new();
        let mut dead = Vec::new();
        let mut auto_settle: HashMap<ConsumerKey, Vec<MsgId>> = HashMap::new();
        let mut unattached: HashMap<ConsumerKey, Vec<MsgId>> = HashMap::new();
        for effect in applied.effects {
            match effect {
                Effect::Deliver { consumer, message } => {
                    let id = message.id;
                    if !qq.deliver(&queue, consumer, message, &mut auto_settle) && leading {
                        unattached.entry(consumer).or_default().push(id);
                    }
                }
                Effect::DeadLetter { .. } if !leading => {}
                Effect::DeadLetter { message, reason }
                    if *at_least_once.get_or_insert_with(|| {
                        qq.group
                            .get()
                            .is_some_and(|g| g.with_queue(|q| q.dead_letters_at_least_once()))
                    }) =>
                {
                    if let Some(home) = queue.home() {
                        let (_, reason) = dead_reason(reason);
                        home.dead_lettered().add(
                            DeadLetterSource::Quorum,
                            reason,
                            DeadLetterStrategy::AtLeastOnce,
                            1,
                        );
                    }
                    held_dead.push(message.id);
                }
                Effect::DeadLetter { reason, message } => {
                    dead.extend(dead_copy(reason, message));
                }
            }
        }
        for (consumer, msg_ids) in auto_settle {
            qq.propose(Command::Settle { consumer, msg_ids }, None);
        }
        // Handed over by the group to a consumer no longer attached here: its removal was
        // already proposed, but when it held messages that was a `Suspend`, which keeps what
        // is checked out to it until the client settled everything it holds — which may
        // never happen (a settle lost with a forwarding link or a delegate change). Nobody
        // received these: they go back at once (in id order near the head, as a cancelled
        // consumer's), so no message stays checked out to a consumer nobody reads. Only the
        // leader proposes; a new leader's take-over cancels what other nodes' consumers hold.
        for (consumer, mut msg_ids) in unattached {
            msg_ids.sort_unstable();
            tracing::debug!(queue = %queue.name, consumer, count = msg_ids.len(), "quorum queue: delivery to a consumer no longer attached here released");
            qq.propose(Command::Release { consumer, msg_ids }, None);
        }
        queue.dead_letter(dead);
        if !held_dead.is_empty() {
            tokio::spawn(forward_dead_letters(weak.clone(), held_dead));
        }
    }
}

/// The group's reason as the dead-lettering code names it, and whether it is a rejection.
fn dead_reason(reason: DeadLetterReason) -> (bool, DeathReason) {
    match reason {
        DeadLetterReason::Rejected => (true, DeathReason::Rejected),
        DeadLetterReason::Expired => (false, DeathReason::Expired),
        DeadLetterReason::MaxLength => (false, DeathReason::MaxLen),
        DeadLetterReason::DeliveryLimit => (false, DeathReason::DeliveryLimit),
    }
}

/// A dead message of the group as the dead-lettering code takes it: decoded, with the failed
/// deliveries it brings along (`None`: a body that does not decode, which no publish makes).
fn dead_copy(
    reason: DeadLetterReason,
    message: warren_quorum::machine::Message,
) -> Option<(QueuedMessage, DeathReason)> {
    let decoded = codec::decode(message.body, 0, false)?;
    // The copy brings the failed deliveries along, as a classic queue's does; the rejection
    // that kills it is one (the group does not count a discard as a return).
    let (rejected, reason) = dead_reason(reason);
    let delivery_count = failed_deliveries(
        &decoded,
        message.delivery_count.saturating_add(u32::from(rejected)),
    );
    Some((
        QueuedMessage {
            id: message.id,
            message: Arc::new(decoded),
            redelivered: message.delivered_before,
            delivery_count,
            expires_at: None,
            via: 0,
            store_ref: None,
        },
        reason,
    ))
}

/// At-least-once dead-lettering (what RabbitMQ's `rabbit_fifo_dlx_worker` does): the leader
/// routes the copies of dead messages `ids` that the group holds with a confirm, waits until
/// every target has its copy (quorum and remote targets committed it, durable classic ones'
/// store write is durable), then lets the group drop them (`SettleDeadLetters`). Copies that
/// reached no queue, or that a target refused, are sent again every `DEAD_LETTER_RETRY`
/// while this member leads and the group still holds them; a new leader sends whatever is
/// still held (`take_over`), so a target may get a copy twice, never none.
async fn forward_dead_letters(weak: Weak<Queue>, mut ids: Vec<MsgId>) {
    /// The messages a task claimed, given back when it ends however it ends.
    struct Claim(Arc<Mutex<HashSet<MsgId>>>, Vec<MsgId>);
    impl Drop for Claim {
        fn drop(&mut self) {
            let mut forwarding = self.0.lock();
            for id in &self.1 {
                forwarding.remove(id);
            }
        }
    }
    let _claim = {
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        let forwarding = qq.dead_letters_forwarding.clone();
        {
            let mut claimed = forwarding.lock();
            ids.retain(|id| claimed.insert(*id));
        }
        Claim(forwarding, ids.clone())
    };
    ids.sort_unstable();
    loop {
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        let Some(group) = qq.group.get().cloned() else {
            return;
        };
        if !qq.is_leading() {
            return;
        }
        let (held, dead): (Vec<MsgId>, Vec<_>) = group.with_queue(|q| {
            q.dead_letters_held()
                .filter(|(_, m)| ids.binary_search(&m.id).is_ok())
                .filter_map(|(reason, m)| Some((m.id, dead_copy(reason, m.clone())?)))
                .unzip()
        });
        if held.is_empty() {
            return;
        }
        ids = held;
        let (wake, mut woken) = event_channel();
        let confirm = QueueAnswers::new(wake);
        let routed = queue.dead_letter_confirmed(dead, Some(&confirm));
        confirm.routed();
        drop(group);
        drop(queue);
        let accepted = loop {
            if let Some(accepted) = confirm.outcome() {
                break accepted;
            }
            if woken.recv().await.is_none() {
                break false;
            }
        };
        let durable = match routed.stored {
            Some((store, seq)) => store.wait_durable(seq).await.is_ok(),
            None => true,
        };
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        if accepted && durable && routed.all_routed {
            // The claim lasts until the group applied the settle: a take-over in between
            // must not see them still held and send them again.
            let (answered, settled) = oneshot::channel();
            qq.propose_answered(
                Command::SettleDeadLetters {
                    msg_ids: ids.clone(),
                },
                None,
                Some(answered),
            );
            if let Some(home) = queue.home() {
                home.dead_lettered().add_confirmed(ids.len() as u64);
            }
            drop(queue);
            let _ = settled.await;
            return;
        }
        tokio::time::sleep(DEAD_LETTER_RETRY).await;
    }
}

impl QuorumQueue {
    /// Hands a message the group checked out to consumer `key` over to it; false when no
    /// consumer (nor basic.get) of that key is attached here, so nobody received it.
    fn deliver(
        &self,
        queue: &Arc<Queue>,
        key: ConsumerKey,
        message: warren_quorum::machine::Message,
        auto_settle: &mut HashMap<ConsumerKey, Vec<MsgId>>,
    ) -> bool {
        let consumer = {
            let mut consumers = self.consumers.lock();
            if let Some(get) = consumers.gets.remove(&key) {
                drop(consumers);
                if let Some(decoded) = codec::decode(message.body, message.delivery_count, true) {
                    let _ = get.send(QueuedMessage {
                        id: message.id,
                        delivery_count: failed_deliveries(&decoded, message.delivery_count),
                        message: Arc::new(decoded),
                        redelivered: message.delivered_before,
                        expires_at: None,
                        via: 0,
                        store_ref: None,
                    });
                }
                return true;
            }
            let Some(consumer) = consumers.by_key.get(&key).cloned() else {
                // Handed over in the group just before the consumer's removal reached it (or
                // to a consumer of another node or an earlier run): the client never sees it.
                return false;
            };
            if !consumer.no_ack {
                consumers.held.insert(message.id, key);
            }
            consumer
        };
        if consumer.no_ack {
            auto_settle.entry(key).or_default().push(message.id);
        }
        let Some(decoded) = codec::decode(message.body, message.delivery_count, false) else {
            tracing::warn!(queue = %queue.name, "unreadable message in a quorum queue's log");
            return true;
        };
        let delivery_count = failed_deliveries(&decoded, message.delivery_count);
        let decoded = Arc::new(decoded);
        let cost = pipeline_cost(&decoded);
        consumer.take_credit(cost);
        let delivery = Delivery {
            consumer: consumer.clone(),
            queue: Some(queue.clone()),
            message: QueuedMessage {
                id: message.id,
                message: decoded,
                redelivered: message.delivered_before,
                delivery_count,
                expires_at: None,
                via: 0,
                store_ref: None,
            },
        };
        if consumer.send(ConnectionEvent::Deliver(delivery)).is_err() {
            // The connection is gone; its channel close cancels the consumer, which returns
            // the message.
            consumer.return_credit(cost);
        }
        true
    }
}

/// The AMQP 1.0 header's delivery-count for a message of the group: the returns the group
/// counted (the count 0-9-1 consumers see as `x-delivery-count` and the delivery limit
/// checks, as RabbitMQ 4's quorum queue maps its `delivery_count` into the header), on top
/// of what a dead-lettered copy brought along from the queue it died in.
fn failed_deliveries(message: &Message, returned: u32) -> u32 {
    message.inherited_delivery_count.saturating_add(returned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{EntityKind, Policies, Policy, PolicyKind};
    use serde_json::json;

    fn applied(user: serde_json::Value, operator: serde_json::Value) -> AppliedPolicies {
        let mut set = Policies::default();
        for (kind, definition) in [(PolicyKind::Policy, user), (PolicyKind::Operator, operator)] {
            if definition.as_object().is_some_and(|d| !d.is_empty()) {
                let p = Policy::new(kind, "/", "p", ".*", "queues", 0, definition).unwrap();
                set.set(p);
            }
        }
        set.applied(EntityKind::Queue, "q")
    }

    fn args(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries
            .iter()
            .map(|(k, v)| ((*k).into(), v.clone()))
            .collect()
    }

    #[test]
    fn limits_take_the_lower_and_the_policys_overflow_wins() {
        let declared = args(&[
            ("x-max-length", FieldValue::I32(5)),
            ("x-delivery-limit", FieldValue::I32(1)),
            ("x-overflow", FieldValue::string("drop-head")),
            ("x-single-active-consumer", FieldValue::Bool(true)),
        ]);
        let config = queue_config(
            &declared,
            &applied(
                json!({"max-length": 9, "delivery-limit": 3, "overflow": "reject-publish",
                       "message-ttl": 100}),
                json!({"max-length-bytes": 1000, "message-ttl": 50}),
            ),
        );
        assert_eq!(config.max_length, Some(5));
        assert_eq!(config.delivery_limit, Some(1));
        assert_eq!(config.overflow, Overflow::RejectPublish);
        assert_eq!(config.max_length_bytes, Some(1000));
        assert_eq!(config.message_ttl_ms, Some(50));
        assert!(config.single_active_consumer);
    }

    #[test]
    fn without_arguments_or_policies_the_defaults_hold() {
        let config = queue_config(&FieldTable::new(), &AppliedPolicies::default());
        assert_eq!(config, QueueConfig::default());
        let capped = queue_config(
            &FieldTable::new(),
            &applied(json!({}), json!({"delivery-limit": 0})),
        );
        assert_eq!(capped.delivery_limit, Some(0));
    }
}
