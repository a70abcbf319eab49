//! Leader failover driven by the node-level failure detector instead of per-group heartbeats.
//!
//! With openraft's own timers every group's leader sends a heartbeat to every follower per
//! `heartbeat_interval` and every follower runs an election timer: 10,000 idle queues on 3 nodes
//! would be tens of thousands of RPCs a second doing nothing. Groups started with
//! [`detector_driven_config`] turn both off (`enable_heartbeat = false`, `enable_elect = false`);
//! one [`FailoverDriver`] per node watches [`Liveness`] instead:
//!
//! - a group whose known leader is on a node the detector reports down gets an election from
//!   one of its live voters: the lowest-id live voter at once, the next after one `stagger`,
//!   and so on, each only if the group still has no live leader by then (no split votes in the
//!   common case, and progress when a candidate's log turns out to be behind);
//! - a group that has known no leader for `leaderless_after` (a split vote, a failed election)
//!   gets the same treatment, at once from a member that led it when its node stopped (a
//!   quick restart: the others still follow that node, back up, and wait for it);
//! - when a peer comes up, this node's leaders send that peer's groups one heartbeat, so a
//!   restarted node learns its leaders at once instead of electing itself.
//!
//! Replication itself is unchanged: entries still flow on writes, and commits still need a
//! majority. Idle groups cost next to nothing: [`detector_driven_config`] also turns openraft's
//! per-group tick off (with neither heartbeats nor election timers it had nothing left to do
//! but wake the group and republish its metrics, every 4.5 s per group), and the driver looks
//! at every group only on a liveness change and every `sweep_interval` (each group's server
//! metrics read in place through the registry, [`GroupRegistry::select`]); in between, once
//! per `check_interval`, only at the groups it is watching (no live leader seen yet).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use openraft::{Config, ServerState};

use crate::liveness::Liveness;
use crate::network::GroupRegistry;
use crate::types::{GroupId, NodeId, Raft, ServerMetrics};

/// Detector-driven groups' `heartbeat_interval` (no heartbeats are sent: openraft's bound for
/// the election timeouts, and the replication RPCs' time hint, which the network ignores).
const DETECTOR_HEARTBEAT_MS: u64 = 100;

/// Detector-driven groups' leader lease (their largest election timeout).
const DETECTOR_LEASE_MS: u64 = 300;

/// openraft settings for groups whose failures the node-level detector handles.
pub fn detector_driven_config(base: Config) -> Config {
    // The largest election timeout is also the leader lease: a follower refuses to vote (and
    // to pre-vote) while its leader's lease runs, so it bounds how soon a dead leader is
    // replaced once noticed — a kill -9 is noticed at once, by its connections' reset. It
    // once was 4 s, for openraft 0.9, which timed each AppendEntries out after
    // `heartbeat_interval` (fsync included) and so needed a long one; 0.10 leaves RPC time
    // to the network (the transport's `rpc_timeout`), so the lease can be short. What kept a
    // node that merely lost touch from deposing a live leader is Pre-Vote now, refused by any
    // member whose failure detector sees the leader alive (`GroupRegistry::handle`), not the
    // lease. An idle leader's own lease runs out as soon; it renews it before its next write
    // (`node::write_with_lease`), one round to a majority.
    //
    // The tick goes too: with neither heartbeats nor elections, all it still did per group
    // every 1.5 × `heartbeat_interval` was wake the group's core and republish its metrics
    // (waking whoever watches them), the main cost of an idle group. The one other thing it
    // did under openraft 0.9 — a leader that a membership change removed steps down — is a
    // watcher task's in 0.10, and does not arise anyway: Warren removes a node from its groups
    // only once it is down (forget_node's shrink), and the remaining voters elect through the
    // driver.
    Config {
        enable_tick: false,
        enable_heartbeat: false,
        enable_elect: false,
        heartbeat_interval: DETECTOR_HEARTBEAT_MS,
        election_timeout_min: DETECTOR_LEASE_MS - 100,
        election_timeout_max: DETECTOR_LEASE_MS,
        ..base
    }
}

#[derive(Clone, Debug)]
pub struct FailoverOptions {
    /// How often the groups being watched (no live leader seen) are checked.
    pub check_interval: Duration,
    /// How often every group is checked (also on every liveness change): how soon a group
    /// that lost its leader without any node going down is noticed.
    pub sweep_interval: Duration,
    /// Between the elections of successive candidates for one group.
    pub stagger: Duration,
    /// A group knowing no leader this long gets an election.
    pub leaderless_after: Duration,
}

impl Default for FailoverOptions {
    fn default() -> Self {
        Self {
            // A candidate whose Pre-Vote the dead leader's lease refused (at most
            // `DETECTOR_LEASE_MS` after its last entry) tries again this soon.
            check_interval: Duration::from_millis(100),
            sweep_interval: Duration::from_secs(5),
            stagger: Duration::from_millis(300),
            leaderless_after: Duration::from_secs(5),
        }
    }
}

/// One node's failover loop over its groups.
pub struct FailoverDriver {
    node: NodeId,
    registry: GroupRegistry,
    liveness: Arc<Liveness>,
    options: FailoverOptions,
    /// Since when each group has lacked a live leader, while it does.
    leaderless_since: HashMap<GroupId, Instant>,
    /// Groups whose election this leaderless spell was logged.
    reported: std::collections::HashSet<GroupId>,
    up: BTreeSet<NodeId>,
}

impl FailoverDriver {
    pub fn new(
        node: NodeId,
        registry: GroupRegistry,
        liveness: Arc<Liveness>,
        options: FailoverOptions,
    ) -> Self {
        Self {
            node,
            registry,
            liveness,
            options,
            leaderless_since: HashMap::new(),
            reported: std::collections::HashSet::new(),
            up: BTreeSet::new(),
        }
    }

    /// Runs until the liveness table is dropped; spawn it on the node's runtime.
    pub async fn run(mut self) {
        let mut changes = self.liveness.subscribe();
        let mut ticker = tokio::time::interval(self.options.check_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep: Option<Instant> = None;
        loop {
            let mut sweep = false;
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.on_liveness_change().await;
                    sweep = true;
                }
                _ = ticker.tick() => {}
            }
            let now = Instant::now();
            sweep |= last_sweep
                .is_none_or(|at| now.saturating_duration_since(at) >= self.options.sweep_interval);
            let added = self.registry.take_added();
            if sweep {
                last_sweep = Some(now);
                // Every group's metrics read in place; only those without a live leader are
                // handed to the check (a healthy group this driver was watching is checked,
                // and let go, at the next round of the watched ones).
                let peers = self.peers_up();
                let node = self.node;
                let leaderless = self
                    .registry
                    .select(|metrics| needs_election(node, metrics, &peers).is_some());
                self.check_groups(now, leaderless).await;
            } else if !self.leaderless_since.is_empty() || !added.is_empty() {
                let watched = self
                    .leaderless_since
                    .keys()
                    .chain(
                        added
                            .iter()
                            .filter(|g| !self.leaderless_since.contains_key(g)),
                    )
                    .filter_map(|group| Some((*group, self.registry.get(*group)?)))
                    .collect();
                self.check_groups(now, watched).await;
            }
        }
    }

    /// Leaders greet peers that just came up, so their groups learn who leads.
    async fn on_liveness_change(&mut self) {
        let up: BTreeSet<NodeId> = self
            .liveness
            .all()
            .into_iter()
            .filter(|peer| peer.up)
            .map(|peer| peer.node)
            .collect();
        let arrived: Vec<NodeId> = up.difference(&self.up).copied().collect();
        self.up = up;
        if arrived.is_empty() {
            return;
        }
        for (group, raft) in self.registry.all() {
            let metrics = raft.metrics().borrow().clone();
            let has_arrived_member = metrics
                .membership_config
                .membership()
                .nodes()
                .any(|(id, _)| arrived.contains(id));
            if metrics.state == ServerState::Leader && has_arrived_member {
                if let Err(e) = raft.trigger().heartbeat().await {
                    tracing::debug!(group, error = %e, "heartbeat to a returning peer failed");
                }
            }
        }
    }

    /// The peers' liveness, read once per round rather than a lock per group (a peer missing
    /// is not known to the detector).
    fn peers_up(&self) -> HashMap<NodeId, bool> {
        self.liveness
            .all()
            .into_iter()
            .map(|peer| (peer.node, peer.up))
            .collect()
    }

    /// Checks `groups` (on a sweep those without a live leader, else the watched ones): a group with a live
    /// leader is left alone (and no longer watched); one without is watched, and gets an
    /// election from this node when its turn comes.
    async fn check_groups(&mut self, now: Instant, groups: Vec<(GroupId, Raft)>) {
        // A watched group that stopped running is forgotten.
        self.leaderless_since
            .retain(|group, _| self.registry.get(*group).is_some());
        self.reported
            .retain(|group| self.leaderless_since.contains_key(group));
        let peers = self.peers_up();
        let is_up = |node: NodeId| peers.get(&node).copied();
        for (group, raft) in groups {
            let leaderless = needs_election(self.node, &raft.server_metrics().borrow(), &peers);
            let Some(Leaderless {
                leader,
                voters,
                led_before_restart,
            }) = leaderless
            else {
                self.leaderless_since.remove(&group);
                self.reported.remove(&group);
                continue;
            };
            let since = *self.leaderless_since.entry(group).or_insert(now);
            // A known leader on a down node is acted on at once; an unknown one only after a
            // grace period, in which a live leader's heartbeat or first entry would arrive.
            let grace = if leader.is_some() || led_before_restart {
                Duration::ZERO
            } else {
                self.options.leaderless_after
            };
            let candidates: Vec<NodeId> = voters
                .iter()
                .copied()
                .filter(|voter| {
                    Some(*voter) != leader
                        && (*voter == self.node || is_up(*voter).unwrap_or(false))
                })
                .collect();
            let rank = match led_before_restart {
                true => 0,
                false => candidates
                    .iter()
                    .position(|voter| *voter == self.node)
                    .unwrap_or(candidates.len()) as u32,
            };
            if now.saturating_duration_since(since) < grace + self.options.stagger * rank {
                continue;
            }
            // Said once per leaderless spell; the retries (every `check_interval` while the
            // dead leader's lease refuses) only at debug level.
            match self.reported.insert(group) {
                true => {
                    tracing::info!(group, ?leader, rank, "no live leader: starting an election")
                }
                false => tracing::debug!(group, ?leader, rank, "no live leader: election again"),
            }
            // Pre-Vote first: the election goes ahead only if a majority would grant it,
            // and a member that sees the leader alive does not (`GroupRegistry::handle`), so a
            // node that lost touch alone (cut off, stalled, just woken) bumps no term and
            // deposes no one.
            if let Err(e) = raft.trigger().elect(true).await {
                tracing::warn!(group, error = %e, "could not start an election");
            }
            // The next attempt, if this one fails, waits for the others' turns first.
            self.leaderless_since.insert(
                group,
                now + self.options.stagger * (candidates.len() as u32).saturating_sub(rank),
            );
        }
    }
}

/// A group without a live leader, as this member sees it.
struct Leaderless {
    /// The leader it knows (on a node the detector reports down), if any.
    leader: Option<NodeId>,
    voters: Vec<NodeId>,
    /// This member led the group when its node stopped (its committed vote is its own) and
    /// knows no leader since: the others still take its node, back up, for the leader, and
    /// would wait for it forever. It stands again at once (the others grant it: it is the
    /// leader they follow).
    led_before_restart: bool,
}

/// Whether `node`'s member of a group (its server metrics, which change only with the vote,
/// the leader or the membership) may need an election: not while it leads or is a learner,
/// knows a leader that is itself or a node `peers` does not report down, or is no voter.
fn needs_election(
    node: NodeId,
    metrics: &ServerMetrics,
    peers: &HashMap<NodeId, bool>,
) -> Option<Leaderless> {
    let leader = metrics.current_leader;
    let leader_alive =
        leader.is_some_and(|leader| leader == node || peers.get(&leader).copied().unwrap_or(true));
    let membership = &metrics.membership_config;
    if metrics.state == ServerState::Leader
        || metrics.state == ServerState::Learner
        || leader_alive
        || !membership.voter_ids().any(|voter| voter == node)
    {
        return None;
    }
    Some(Leaderless {
        leader,
        voters: membership.voter_ids().collect(),
        led_before_restart: leader.is_none()
            && metrics.vote.is_committed()
            && metrics.vote.leader_id().node_id == node,
    })
}
