//! A quorum queue's group at work: started once per queue (`start`), three tasks do the
//! asynchronous work, none per message — the proposer (`run_group`: commands in arrival
//! order, batched into one log entry), the completer (`complete`: publisher confirms in log
//! order once committed) and the effects task (`apply_effects`: deliveries and
//! dead-letters) — beside the leader watch, the tick that lets time pass for expiry, and
//! the probe that finds a group running elsewhere.

use super::dead_letters::forward_dead_letters;
use super::dead_letters::{dead_copy, dead_reason};
use super::host::{LeaderChange, QuorumHost};
use super::queue::{
    now_ms, Consumers, InFlight, Proposed, QuorumQueue, Waiting, FORWARD_RETRY, LEADER_WAIT,
    MAX_BATCH, MAX_ENTRIES_IN_FLIGHT,
};
use crate::churn::{DeadLetterSource, DeadLetterStrategy};
use crate::queue::Queue;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use warren_quorum::machine::{Command, ConsumerKey, DeadLetterReason, Effect, MsgId, Reply};
use warren_quorum::network::{RaftRequest, RaftResponse, Transport, TransportError};
use warren_quorum::node::QueueGroup;
use warren_quorum::storage::Applied;
use warren_quorum::types::{GroupId, NodeId, Proposal};

/// How often the leader lets time pass (`Tick`) while the head of the queue can expire.
const TICK_INTERVAL: Duration = Duration::from_millis(200);

/// Checks in a row that found nothing to expire (or this member not leading) after which a
/// queue's tick sleeps until a command is proposed or its leader changes: 10,000 idle quorum
/// queues on a node must not wake 50,000 times a second.
const TICK_QUIET_ROUNDS: u32 = 5;

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

async fn run_group(
    weak: Weak<Queue>,
    mut commands: UnboundedReceiver<Proposed>,
) -> Result<(), String> {
    let (host, group_id, config, name, members, commit_latency_us) = {
        let queue = weak.upgrade().ok_or("queue gone")?;
        let qq = QuorumQueue::of(&queue).ok_or("not a quorum queue")?;
        (
            qq.host.clone(),
            qq.group_id,
            qq.desired_config(),
            queue.name.clone(),
            qq.members(),
            qq.commit_latency_us.clone(),
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
    // The start-up's futures are boxed (here and below): this task lives as long as the queue,
    // and a future awaited inline keeps its size in the task for good, used or not (building
    // the Raft instance alone took ~5 KB of each idle queue's task).
    let group = Box::pin(
        host.node()
            .start_group(group_id, config.clone(), Some(effects_tx)),
    )
    .await
    .map_err(|e| e.to_string())?;
    let initialized = Box::pin(group.raft().is_initialized())
        .await
        .map_err(|e| e.to_string())?;
    // The first member makes the group; the others wait for it to contact them. A restarted
    // member finds its group (and its membership) in its log. A first member without a log
    // whose group runs on the other members is a node that was wiped, forgotten and joined
    // again: it waits to be added back (`grow_quorum_queues`) instead of making a second group.
    if !initialized
        && members.first().is_none_or(|first| *first == own)
        && !Box::pin(group_runs_elsewhere(&host, group_id, &members)).await
    {
        let initial = match members.is_empty() {
            true => vec![own],
            false => members.clone(),
        };
        Box::pin(group.initialize(&initial))
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
    // Every applied entry marks the queue for its readers (the monitoring samplers, the
    // forwarding links' count reports), so they need not poll idle quorum queues, and wakes a
    // quiet tick on the leader: an entry that came from another node's proposer (a forwarded
    // publish with a TTL) wakes it as one proposed here does.
    let marks = weak.clone();
    let leads = Arc::downgrade(&group);
    group.on_applied(Box::new(move || {
        let Some(queue) = marks.upgrade() else { return };
        queue.note_change();
        if leads.upgrade().is_some_and(|group| group.is_leader()) {
            if let Some(qq) = QuorumQueue::of(&queue) {
                qq.wake_tick();
            }
        }
    }));
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
                // Boxed: once per leadership, not worth its size in every idle queue's task.
                if Box::pin(take_over(&weak, &group)).await {
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
        let proposed_at = std::time::Instant::now();
        match group.propose_ff(proposal).await {
            Ok(answer) => {
                let latency_us = commit_latency_us.clone();
                let reply = Box::pin(async move {
                    let reply = answer.await.ok().map(|(_, reply)| reply);
                    if reply.is_some() {
                        let us = proposed_at
                            .elapsed()
                            .as_micros()
                            .min(u128::from(u64::MAX - 1));
                        latency_us.store(us as u64, Ordering::Relaxed);
                    }
                    reply
                });
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
pub(super) async fn known_leader(group: &QueueGroup, patience: Duration) -> (Option<NodeId>, u64) {
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
                // Where the queue is served from moved (and, here, its consumer count's
                // source): its readers look again.
                queue.note_change();
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
        // Gone with the leader that served them (they attach again through this one): not a
        // failed delivery of what they held (`Command::Disconnect`).
        complete &= write(Command::Disconnect { consumer: stale }).await.is_ok();
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
        // A quiet tick has no timer at all (10,000 idle queues' timers were a node's most
        // frequent wake-up): what can give the head of the queue an expiry wakes it — a
        // proposal here, an entry applied while this member leads, a leader change.
        tokio::select! {
            _ = tokio::time::sleep(TICK_INTERVAL), if !quiet => {}
            // Something was proposed or applied: check at the usual pace for a while (a
            // proposed entry may not have been applied yet when this runs).
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
                Effect::ConsumersFull(true) => qq.consumer_use.lock().inactive(),
                Effect::ConsumersFull(false) => qq.consumer_use.lock().active(),
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
                    if reason == DeadLetterReason::DeliveryLimit {
                        // Dropped unless the queue has a dead-letter exchange: an operator
                        // must be able to see it happen.
                        tracing::warn!(queue = %queue.name, msg_id = message.id, failed_deliveries = message.delivery_count, "quorum queue: a message reached the delivery limit and was dead-lettered");
                    }
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
        // Not failed deliveries (no client saw them): counted, a consumer whose removal had
        // not reached the group yet could bounce a message to the delivery limit in
        // milliseconds, and the limit drops it.
        for (consumer, mut msg_ids) in unattached {
            msg_ids.sort_unstable();
            tracing::debug!(queue = %queue.name, consumer, count = msg_ids.len(), "quorum queue: delivery to a consumer no longer attached here released");
            qq.propose(Command::ReleaseDisconnected { consumer, msg_ids }, None);
        }
        queue.dead_letter(dead);
        if !held_dead.is_empty() {
            tokio::spawn(forward_dead_letters(weak.clone(), held_dead));
        }
    }
}
