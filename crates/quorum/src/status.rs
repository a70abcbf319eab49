//! A queue's Raft group as one member sees it, for the management API, Prometheus, the
//! console and `warren ctl`: the leader, each member with its role and (as the leader sees
//! it) how far it has replicated, the term, and the log's commit, applied, written and
//! snapshot indexes.
//!
//! Everything is read from the member's openraft metrics (a watch channel openraft keeps up
//! to date anyway): no RPC to other members and nothing on the message path, so a scrape of
//! 10,000 queues costs 10,000 reads of an in-memory value. What a member cannot know from its
//! own metrics is left out rather than guessed: followers do not know the others' progress
//! (`matched_index`, `lag` are absent there), and the commit index is derived as it was under
//! openraft 0.9, which did not report one: the leader takes it from its voters' matched
//! indexes (the highest index a majority has) and a follower reports what it applied (which
//! trails its commit index only while it is applying).

use std::collections::BTreeSet;

use crate::types::{GroupId, Metrics, NodeId, ServerState};

/// One member of a queue's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub node: NodeId,
    /// `leader`, `follower`, `candidate` or `learner`: this member's own state for this
    /// node, and for the others what this node's view implies (the leader it knows of, a
    /// voter that is not it, a non-voter).
    pub state: &'static str,
    pub voter: bool,
    /// The last log index the leader knows this member has (on the leader only).
    pub matched_index: Option<u64>,
    /// Entries this member is behind the leader's log (on the leader only).
    pub lag: Option<u64>,
}

/// A queue's group as this node's member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    pub group: GroupId,
    /// This node's id in the group.
    pub node: NodeId,
    /// This member's state: `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: &'static str,
    pub leader: Option<NodeId>,
    pub term: u64,
    /// The last index written to this member's log.
    pub last_log_index: Option<u64>,
    /// See the module comment: derived on the leader, the applied index on a follower.
    pub commit_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    /// The last index the latest snapshot covers (None before the first snapshot).
    pub snapshot_index: Option<u64>,
    /// Entries this member keeps in its log: written minus those compacted away.
    pub log_entries: u64,
    pub members: Vec<MemberStatus>,
}

fn state_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// The highest index a majority of `voters` has, given each voter's matched index.
fn majority_index(mut matched: Vec<Option<u64>>) -> Option<u64> {
    if matched.is_empty() {
        return None;
    }
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched[matched.len() / 2]
}

impl GroupStatus {
    /// The status of group `group` from its member's `metrics`.
    pub fn from_metrics(group: GroupId, metrics: &Metrics) -> GroupStatus {
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let leading = metrics.state == ServerState::Leader;
        let matched_of = |id: NodeId| -> Option<u64> {
            if id == metrics.id {
                return metrics.last_log_index;
            }
            metrics
                .replication
                .as_ref()
                .and_then(|replication| replication.get(&id))
                .and_then(|matched| matched.map(|log_id| log_id.index))
        };
        let members: Vec<MemberStatus> = membership
            .nodes()
            .map(|(id, _)| {
                let voter = voters.contains(id);
                let state = if *id == metrics.id {
                    state_name(metrics.state)
                } else if metrics.current_leader == Some(*id) {
                    "leader"
                } else if voter {
                    "follower"
                } else {
                    "learner"
                };
                let matched_index = leading.then(|| matched_of(*id)).flatten();
                MemberStatus {
                    node: *id,
                    state,
                    voter,
                    matched_index,
                    lag: leading.then(|| {
                        metrics
                            .last_log_index
                            .unwrap_or(0)
                            .saturating_sub(matched_index.unwrap_or(0))
                    }),
                }
            })
            .collect();
        let last_applied_index = metrics.last_applied.map(|log_id| log_id.index);
        let commit_index = if leading {
            let by_majority = majority_index(voters.iter().map(|id| matched_of(*id)).collect());
            by_majority.max(last_applied_index)
        } else {
            last_applied_index
        };
        let first_kept = metrics.purged.map_or(0, |log_id| log_id.index + 1);
        GroupStatus {
            group,
            node: metrics.id,
            state: state_name(metrics.state),
            leader: metrics.current_leader,
            term: metrics.current_term,
            last_log_index: metrics.last_log_index,
            commit_index,
            last_applied_index,
            snapshot_index: metrics.snapshot.map(|log_id| log_id.index),
            log_entries: metrics
                .last_log_index
                .map_or(0, |last| (last + 1).saturating_sub(first_kept)),
            members,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LogId, QueueRaft};
    use openraft::{BasicNode, Membership, StoredMembership};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    fn log_id(term: u64, node: NodeId, index: u64) -> LogId {
        openraft::testing::log_id::<QueueRaft>(term, node, index)
    }

    /// Metrics of node `me` in a group of voters 1, 2, 3 and learner 4, at term 4, with 10
    /// entries written, a snapshot up to 5 and the log purged up to 4.
    fn metrics(me: NodeId, state: ServerState, leader: NodeId) -> Metrics {
        let mut m = Metrics::new_initial(me);
        let voters: BTreeSet<NodeId> = [1, 2, 3].into();
        let nodes: BTreeMap<NodeId, BasicNode> =
            (1..=4).map(|id| (id, BasicNode::default())).collect();
        m.membership_config = Arc::new(StoredMembership::new(
            Some(log_id(1, 1, 0)),
            Membership::new(vec![voters], nodes).expect("a valid membership"),
        ));
        m.state = state;
        m.current_leader = Some(leader);
        m.current_term = 4;
        m.last_log_index = Some(10);
        m.last_applied = Some(log_id(4, leader, 7));
        m.snapshot = Some(log_id(4, leader, 5));
        m.purged = Some(log_id(4, leader, 4));
        m
    }

    #[test]
    fn the_leader_sees_every_members_progress_and_derives_the_commit_index() {
        let mut m = metrics(1, ServerState::Leader, 1);
        m.replication = Some(
            [
                (1, Some(log_id(4, 1, 10))),
                (2, Some(log_id(4, 1, 8))),
                (3, None),
                (4, Some(log_id(4, 1, 9))),
            ]
            .into(),
        );
        let status = GroupStatus::from_metrics(77, &m);
        assert_eq!(
            (status.group, status.node, status.state, status.leader),
            (77, 1, "leader", Some(1))
        );
        // Voters 1 and 2 have index 8: a majority of three. The learner does not count.
        assert_eq!(status.commit_index, Some(8));
        assert_eq!(status.last_applied_index, Some(7));
        assert_eq!(status.snapshot_index, Some(5));
        assert_eq!(status.log_entries, 6);
        let seen: Vec<_> = status
            .members
            .iter()
            .map(|m| (m.node, m.state, m.voter, m.matched_index, m.lag))
            .collect();
        assert_eq!(
            seen,
            vec![
                (1, "leader", true, Some(10), Some(0)),
                (2, "follower", true, Some(8), Some(2)),
                (3, "follower", true, None, Some(10)),
                (4, "learner", false, Some(9), Some(1)),
            ]
        );
    }

    #[test]
    fn a_follower_knows_the_leader_but_not_the_others_progress() {
        let status = GroupStatus::from_metrics(77, &metrics(3, ServerState::Follower, 2));
        assert_eq!((status.state, status.leader), ("follower", Some(2)));
        assert_eq!(status.commit_index, Some(7), "what it applied");
        let seen: Vec<_> = status
            .members
            .iter()
            .map(|m| (m.node, m.state, m.matched_index, m.lag))
            .collect();
        assert_eq!(
            seen,
            vec![
                (1, "follower", None, None),
                (2, "leader", None, None),
                (3, "follower", None, None),
                (4, "learner", None, None),
            ]
        );
    }

    #[test]
    fn a_majority_index_is_what_most_voters_have() {
        assert_eq!(majority_index(vec![Some(7)]), Some(7));
        assert_eq!(majority_index(vec![Some(9), Some(4), Some(7)]), Some(7));
        assert_eq!(majority_index(vec![Some(9), None, None]), None);
        assert_eq!(
            majority_index(vec![Some(3), Some(9), Some(5), Some(8), Some(1)]),
            Some(5)
        );
        // Four voters: three make a majority.
        assert_eq!(
            majority_index(vec![Some(3), Some(9), Some(5), Some(8)]),
            Some(5)
        );
        assert_eq!(majority_index(Vec::new()), None);
    }
}
