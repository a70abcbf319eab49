//! Continuous membership reconciliation of quorum queues, as RabbitMQ's
//! `quorum_queue.continuous_membership_reconciliation`: a group with fewer members than its
//! `x-quorum-initial-group-size` grows onto running cluster nodes it lacks (a queue declared
//! while its cluster was still forming, or placed while nodes were down), and a group that lists
//! a node the cluster no longer has shrinks off it (a forget whose shrink did not finish).
//!
//! Only the metadata group's leader reconciles, so two nodes never change one group at once,
//! and it makes one change at a time (each waits for a learner to catch up). A node joins a
//! group only once the failure detector has seen it up for [`SETTLED_FOR`], so a node that is
//! flapping or still starting is not given groups it cannot serve. A change that fails is
//! tried again for that group after [`RETRY_AFTER`], not at every pass.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use warren_quorum::types::{GroupId, NodeId};

use super::cluster::ClusterNode;
use super::membership::{grow, quorum_groups, shrink, QuorumGroup};
use crate::Broker;

/// Between two passes over every quorum queue.
const PASS_INTERVAL: Duration = Duration::from_secs(2);

/// How long a peer must have been seen up before groups grow onto it.
const SETTLED_FOR: Duration = Duration::from_secs(3);

/// How long a group whose change failed is left alone.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// One change a pass found to make.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Grow(NodeId),
    Shrink(NodeId),
}

/// Starts reconciling on `cluster` for as long as `broker` lives.
pub fn spawn(broker: &Arc<Broker>, cluster: Arc<ClusterNode>) {
    tokio::spawn(run(Arc::downgrade(broker), cluster));
}

async fn run(broker: Weak<Broker>, cluster: Arc<ClusterNode>) {
    let mut failed: HashMap<GroupId, Instant> = HashMap::new();
    let mut ticker = tokio::time::interval(PASS_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(live) = broker.upgrade() else {
            return;
        };
        let status = cluster.status();
        if status.leader.as_deref() != Some(cluster.name()) {
            continue;
        }
        let members: Vec<NodeId> = status.members.iter().map(|m| m.id).collect();
        let ready: Vec<NodeId> = status
            .members
            .iter()
            .filter(|m| {
                m.voter
                    && m.running
                    && (m.id == cluster.id()
                        || m.up_for_ms
                            .is_some_and(|ms| ms >= SETTLED_FOR.as_millis() as u64))
            })
            .map(|m| m.id)
            .collect();
        failed.retain(|_, at| at.elapsed() < RETRY_AFTER);
        let groups = quorum_groups(&live.vhosts());
        let mut load: HashMap<NodeId, usize> = HashMap::new();
        for group in &groups {
            for member in &group.members {
                *load.entry(*member).or_default() += 1;
            }
        }
        for group in &groups {
            if failed.contains_key(&group.group) {
                continue;
            }
            let Some(change) = next_change(group, &members, &ready, &load) else {
                continue;
            };
            let result = match change {
                Change::Grow(node) => grow(&cluster, live.as_ref(), group, node).await,
                Change::Shrink(node) => shrink(&cluster, live.as_ref(), group, node).await,
            };
            match result {
                Ok(()) => {
                    if let Change::Grow(node) = change {
                        *load.entry(node).or_default() += 1;
                    }
                }
                Err(_) => {
                    failed.insert(group.group, Instant::now());
                }
            }
            // The leadership may have moved while the change ran.
            if !cluster
                .status()
                .members
                .iter()
                .any(|m| m.leader && m.id == cluster.id())
            {
                break;
            }
        }
    }
}

/// What `group` needs, if anything: off a node that is no cluster member (of `members`)
/// first; else, while it is below its size, onto the least loaded node of `ready` it lacks.
fn next_change(
    group: &QuorumGroup,
    members: &[NodeId],
    ready: &[NodeId],
    load: &HashMap<NodeId, usize>,
) -> Option<Change> {
    // A group with no member known (an old declaration) is left to its own start-up.
    if group.members.is_empty() {
        return None;
    }
    let listed = group.members.iter().chain(&group.declared);
    if let Some(gone) = listed.clone().find(|node| !members.contains(node)) {
        return Some(Change::Shrink(*gone));
    }
    // The voters this node's member lists that the definitions record too. A node left
    // holding a membership change that never committed (added as a learner, then the change
    // rolled back, the leader gone) lists itself in its own member forever, since the real
    // members no longer talk to it; counted as a member, its group would never grow onto it
    // again when the metadata group's leader is that node.
    let counted: Vec<NodeId> = group
        .members
        .iter()
        .copied()
        .filter(|m| group.declared.is_empty() || group.declared.contains(m))
        .collect();
    if counted.len() >= group.target_size {
        return None;
    }
    // A node the definitions record that the group lacks first: a growth interrupted between
    // its record and its Raft change (the node that made it crashed or lost its place).
    if let Some(recorded) = group
        .declared
        .iter()
        .find(|node| !counted.contains(node) && ready.contains(node))
    {
        return Some(Change::Grow(*recorded));
    }
    ready
        .iter()
        .filter(|node| !counted.contains(node) && !group.declared.contains(node))
        .min_by_key(|node| (load.get(node).copied().unwrap_or(0), **node))
        .map(|node| Change::Grow(*node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(members: &[NodeId], declared: &[NodeId], target_size: usize) -> QuorumGroup {
        QuorumGroup {
            vhost: "/".into(),
            queue: "q".into(),
            group: 9,
            members: members.to_vec(),
            declared: declared.to_vec(),
            target_size,
        }
    }

    #[test]
    fn a_group_below_its_size_grows_onto_the_least_loaded_ready_node() {
        let load = HashMap::from([(3, 5), (4, 1)]);
        let g = group(&[1, 2], &[1, 2], 3);
        assert_eq!(
            next_change(&g, &[1, 2, 3, 4], &[1, 2, 3, 4], &load),
            Some(Change::Grow(4))
        );
        // Node 4 not ready (down, or just up): node 3 then.
        assert_eq!(
            next_change(&g, &[1, 2, 3, 4], &[1, 2, 3], &load),
            Some(Change::Grow(3))
        );
        // Nobody to grow onto.
        assert_eq!(next_change(&g, &[1, 2, 3], &[1, 2], &load), None);
    }

    #[test]
    fn a_group_at_its_size_is_left_alone() {
        let g = group(&[1, 2, 3], &[1, 2, 3], 3);
        assert_eq!(
            next_change(&g, &[1, 2, 3, 4], &[1, 2, 3, 4], &HashMap::new()),
            None
        );
        let g = group(&[1], &[1], 1);
        assert_eq!(next_change(&g, &[1, 2], &[1, 2], &HashMap::new()), None);
    }

    #[test]
    fn a_forgotten_node_is_removed_first() {
        let g = group(&[1, 2, 5], &[1, 2, 5], 3);
        assert_eq!(
            next_change(&g, &[1, 2, 3], &[1, 2, 3], &HashMap::new()),
            Some(Change::Shrink(5))
        );
        // Listed only as declared (a grow recorded, not made) counts too.
        let g = group(&[1, 2], &[1, 2, 5], 3);
        assert_eq!(
            next_change(&g, &[1, 2, 3], &[1, 2, 3], &HashMap::new()),
            Some(Change::Shrink(5))
        );
    }

    #[test]
    fn a_growth_interrupted_after_its_record_is_finished() {
        // Node 3 recorded, the Raft change never made (found by the cluster simulation,
        // seed 117: the group stayed at two members for good).
        let g = group(&[1, 2], &[2, 1, 3], 3);
        let load = HashMap::from([(3, 9), (4, 0)]);
        assert_eq!(
            next_change(&g, &[1, 2, 3, 4], &[1, 2, 3, 4], &load),
            Some(Change::Grow(3))
        );
    }

    #[test]
    fn a_member_left_listing_itself_by_a_change_that_never_committed_is_not_counted() {
        // Node 3's own member lists it (a learner added, the change rolled back), the
        // definitions do not: the group has two members and grows onto 3 again.
        let g = group(&[1, 2, 3], &[1, 2], 3);
        assert_eq!(
            next_change(&g, &[1, 2, 3], &[1, 2, 3], &HashMap::new()),
            Some(Change::Grow(3))
        );
    }

    #[test]
    fn a_group_with_no_known_member_is_not_touched() {
        let g = group(&[], &[], 3);
        assert_eq!(
            next_change(&g, &[1, 2, 3], &[1, 2, 3], &HashMap::new()),
            None
        );
    }
}
