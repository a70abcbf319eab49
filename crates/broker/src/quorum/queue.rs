//! `QuorumQueue`: a quorum queue as this node holds it — its member of the Raft group (once
//! started), the commands it proposes, the consumers attached here and which message each
//! holds, and, while another node leads, the delegate through which this node's clients
//! reach the leader.

use super::group::known_leader;
use super::host::QuorumHost;
use super::{codec, status};
use crate::confirm::QueueAnswers;
use crate::consumer::Consumer;
use crate::consumer_use::ConsumerUse;
use crate::error::{AmqpError, AmqpResult};
use crate::message::Message;
use crate::queue::{Queue, QueuedMessage};
use crate::remote::{ForwardPeers, RemoteQueue};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use warren_quorum::machine::{Command, ConsumerKey, MsgId, QueueConfig, Reply};
use warren_quorum::node::QueueGroup;
use warren_quorum::types::{GroupId, NodeId};

/// How requeued messages come back to a quorum queue: which group command carries them, and
/// so whether each counts as a failed delivery toward the delivery limit (RabbitMQ 4 counts a
/// client's requeue and a consumer whose channel went, not a node that went).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeued {
    /// basic.nack/reject with requeue, recover: to the back, counted.
    ByClient,
    /// The client's channel went with them unacked: to the head, counted.
    ChannelGone,
    /// They never reached the client, or its node is gone: to the head, not counted.
    NeverReached,
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(super) struct Proposed {
    pub(super) command: Command,
    pub(super) confirm: Option<Arc<QueueAnswers>>,
    /// Told once the group answered (committed and applied, or failed).
    pub(super) answered: Option<oneshot::Sender<()>>,
}

/// An answer the group owes for one log entry (a command or a batch of them), and who
/// waits on each of its commands.
pub(super) type InFlight = (
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<Reply>> + Send>>,
    Vec<Waiting>,
    tokio::sync::OwnedSemaphorePermit,
);

/// Log entries a queue has proposed and not yet seen answered. Few: while they are being
/// flushed, new commands wait and then go together into the next entry.
pub(super) const MAX_ENTRIES_IN_FLIGHT: usize = 2;

/// `commit_latency_us` before this member committed anything it proposed.
pub(super) const NO_COMMIT_YET: u64 = u64::MAX;

pub(super) type Waiting = (Option<Arc<QueueAnswers>>, Option<oneshot::Sender<()>>);

/// Most commands one log entry carries.
pub(super) const MAX_BATCH: usize = 1024;

#[derive(Default)]
pub(super) struct Consumers {
    pub(super) by_key: HashMap<ConsumerKey, Arc<Consumer>>,
    /// Which consumer holds each delivered, unsettled message.
    pub(super) held: HashMap<MsgId, ConsumerKey>,
    /// Consumers cancelled while the client still held messages of theirs: suspended in the
    /// group (no more deliveries) until those are settled, then cancelled there too.
    pub(super) cancelled: HashSet<ConsumerKey>,
    /// basic.get in progress: the one-message consumer and where its message goes.
    pub(super) gets: HashMap<ConsumerKey, oneshot::Sender<QueuedMessage>>,
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
    pub(super) group_id: GroupId,
    pub(super) host: Arc<QuorumHost>,
    /// The links to the other nodes of the vhost's cluster, for the delegate through which
    /// this node's clients reach the leader.
    pub(super) forward_peers: Arc<ForwardPeers>,
    /// What the group's machine should act on (arguments and policies); a change is proposed
    /// to the group (`Command::SetConfig`) under this lock, so proposals follow updates.
    pub(super) config: Mutex<QueueConfig>,
    /// Whether the group should dead-letter at least once (`dead_letter_at_least_once`);
    /// changed, like `config`, under `config`'s lock.
    pub(super) dead_letter_at_least_once: AtomicBool,
    /// Held dead messages a `forward_dead_letters` task of this node is sending: one task per
    /// message, so a take-over while the first is still retrying sends no second copy.
    pub(super) dead_letters_forwarding: Arc<Mutex<HashSet<MsgId>>>,
    pub(super) commands: UnboundedSender<Proposed>,
    /// Taken by `start`.
    pub(super) commands_rx: Mutex<Option<UnboundedReceiver<Proposed>>>,
    /// The group's members (node ids) as declared, the first of them the one that made the
    /// group; empty: this node alone (a single node, or a queue declared before groups
    /// spanned nodes). Changed when the group's membership is (`set_members`: forget and
    /// grow record the new set through the metadata group).
    pub(super) members: Mutex<Vec<NodeId>>,
    /// Told when `members` changed: a node added to the group starts its member.
    pub(super) members_changed: Arc<tokio::sync::Notify>,
    /// Set once this node's member of the group runs (never on a node that is not a member).
    pub(super) group: OnceLock<Arc<QueueGroup>>,
    /// Told when `group` is set, so a basic.get on a queue still starting waits for it.
    pub(super) group_started: tokio::sync::Notify,
    /// The group's leader as this node knows it: the seam through which the node serving the
    /// queue's clients follows the leader (`leader_events`).
    pub(super) leader: tokio::sync::watch::Sender<Option<NodeId>>,
    /// Wakes the proposer when the leader changed, so a new leader takes over at once.
    pub(super) leader_changed: Arc<tokio::sync::Notify>,
    /// The tick sleeps until woken (see [`TICK_QUIET_ROUNDS`]); a proposal or a leader change
    /// that finds it set clears it and wakes the tick through `tick_wake` — one atomic load per
    /// proposal otherwise.
    pub(super) tick_asleep: AtomicBool,
    /// How long the last entry this member proposed as leader took to commit (microseconds;
    /// `NO_COMMIT_YET` before the first): Ra's commit latency, which rabbitmq_prometheus
    /// reports per quorum queue. Written once per entry (a batch of publishes), not per
    /// message.
    pub(super) commit_latency_us: Arc<AtomicU64>,
    pub(super) tick_wake: Arc<tokio::sync::Notify>,
    /// How much of the time the group's consumers had room (`consumer_capacity`), fed by
    /// this member's `Effect::ConsumersFull`.
    pub(super) consumer_use: Mutex<ConsumerUse>,
    pub(super) consumers: Mutex<Consumers>,
    /// While another node leads: the record through which this node's clients consume, get,
    /// settle and purge on the leader (`crate::remote`, the leader's serving side acting on
    /// its real queue), made when first needed and retired — its consumers cancelled — when
    /// the leader moves (`QuorumQueue::follow_leader`). This node's member keeps running.
    pub(super) delegate: Mutex<Option<(NodeId, Arc<RemoteQueue>)>>,
    /// Delegates retired while their link was up, newest last, with when (at most
    /// `RETIRED_DELEGATES`, for `RETIRED_DELEGATE_KEEP`): a client may still ack, requeue or
    /// give back (a delivery that reached its consumer after the consumer was cancelled) a
    /// message delivered through one, and that settle goes to the serving side that
    /// delivered it, found by the number the delivery carries (`QueuedMessage::via`) — never
    /// through another delegate, whose serving side may hold the same message id for another
    /// consumer of this node (it was returned and delivered again since).
    pub(super) retired_delegates: Mutex<Vec<(tokio::time::Instant, Arc<RemoteQueue>)>>,
    /// Where the delegates' binding numbers come from (`QueuedMessage::via`: each binding of
    /// each delegate on a link takes the next; never 0, "delivered here"). Shared by all of
    /// them so a number names one binding of one delegate; it wraps after 65,535 bindings,
    /// and the few that may be settled through at a time are always distinct.
    pub(super) vias: Arc<AtomicU16>,
    pub(super) next_consumer_key: AtomicU64,
    pub(super) deleted: AtomicBool,
    /// The group's data removal has been started (exactly once).
    pub(super) removal_started: AtomicBool,
}

impl std::fmt::Debug for QuorumQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumQueue")
            .field("group_id", &self.group_id)
            .finish()
    }
}

impl QuorumQueue {
    /// How long the last entry this member proposed as leader took to commit; None before
    /// it led and committed one.
    pub fn commit_latency(&self) -> Option<Duration> {
        match self.commit_latency_us.load(Ordering::Relaxed) {
            NO_COMMIT_YET => None,
            us => Some(Duration::from_micros(us)),
        }
    }

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
            commit_latency_us: Arc::new(AtomicU64::new(NO_COMMIT_YET)),
            tick_wake: Arc::new(tokio::sync::Notify::new()),
            consumer_use: Mutex::new(ConsumerUse::default()),
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
    pub(super) fn lose_leadership(&self, queue: &Queue) {
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
        crate::queue::reattach_or_cancel(cancelled);
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
            crate::queue::reattach_or_cancel(self.retire_delegate(old));
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
    pub(super) fn follow_leader(&self, queue: &Queue, leader: Option<NodeId>) {
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
            crate::queue::reattach_or_cancel(cancelled);
        }
        if leader == self.host.node_id() {
            return;
        }
        self.attach_waiting(queue);
    }

    /// Consumers attached here while this node could not forward them (no leader known, or
    /// no link to its node yet) go to the leader's node once it can; they hold nothing.
    pub(super) fn attach_waiting(&self, queue: &Queue) -> bool {
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
            crate::queue::reattach_or_cancel(given_back);
            return false;
        }
        true
    }

    /// The group as this node's member sees it, read from openraft's metrics (see
    /// [`status`]). None while the group is still starting here: no member runs yet, or it
    /// runs but has not yet received the membership from the leader. A follower can know the
    /// leader (from its vote or first heartbeat) before that entry arrives, and a status
    /// without members then would show the queue with none.
    pub fn group_status(&self) -> Option<status::GroupStatus> {
        let group = self.group.get()?;
        let metrics = group.raft().metrics();
        let metrics = metrics.borrow();
        let joined = metrics
            .membership_config
            .membership()
            .nodes()
            .next()
            .is_some();
        joined.then(|| status::GroupStatus::from_metrics(self.group_id, &metrics))
    }

    pub(super) fn propose(&self, command: Command, confirm: Option<Arc<QueueAnswers>>) {
        self.propose_answered(command, confirm, None)
    }

    pub(super) fn propose_answered(
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
    pub(super) fn wake_tick(&self) {
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
    /// away or they never reached it, as in RabbitMQ 3.10 (`Requeued`).
    pub fn settle(
        &self,
        acked: &[QueuedMessage],
        requeued: &[QueuedMessage],
        rejected: &[QueuedMessage],
        how: Requeued,
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
                1 => match how {
                    Requeued::ByClient => Command::Return { consumer, msg_ids },
                    Requeued::ChannelGone => Command::Release { consumer, msg_ids },
                    Requeued::NeverReached => Command::ReleaseDisconnected { consumer, msg_ids },
                },
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
    pub(super) async fn get(&self, queue: &Queue, no_ack: bool) -> Option<(QueuedMessage, u32)> {
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

    pub(super) fn desired_config(&self) -> QueueConfig {
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

    /// Body bytes of the messages checked out to consumers (as framed in the log).
    pub fn unacked_bytes(&self) -> u64 {
        self.group
            .get()
            .map_or(0, |g| g.with_queue(|q| q.checked_out_bytes()))
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
    pub(super) fn remove_data(&self, group: Arc<QueueGroup>) {
        if !self.removal_started.swap(true, Ordering::AcqRel) {
            self.host.remove_group(group);
        }
    }
}

/// How long a proposal waits for the group to know a leader (an election under way) before
/// it is refused (a publish then gets a nack).
pub(super) const LEADER_WAIT: Duration = Duration::from_secs(10);

/// Retired delegates a queue keeps for settling (`QuorumQueue::retired_delegates`): one per
/// leader change still being settled; their links going drops them sooner.
pub(super) const RETIRED_DELEGATES: usize = 4;

/// How long a retired delegate is settled through: its consumers' clients were told
/// basic.cancel and settle or give back what they hold soon after (a later settle of what it
/// delivered is dropped, so retired delegates are not kept for good).
pub(super) const RETIRED_DELEGATE_KEEP: Duration = Duration::from_secs(60);

/// How long a consumer attached while the link to the leader's node is down waits for it.
pub(super) const LINK_WAIT: Duration = Duration::from_secs(60);

/// Between attempts to forward publishes while no member answers as the leader.
pub(super) const FORWARD_RETRY: Duration = Duration::from_millis(50);
