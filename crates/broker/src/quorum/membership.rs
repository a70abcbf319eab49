//! Quorum queues' group membership as the cluster changes, RabbitMQ's way: forgetting a node
//! removes it from every quorum queue group it is a member of (`forget_cluster_node` runs
//! `rabbit_quorum_queue:shrink_all`), and growing adds a node to every group below its size
//! (`rabbitmq-queues grow NODE all`; `warren ctl grow_quorum_queues NODE`).
//!
//! Each change is a Raft membership change (openraft `change_membership`) carried out by the
//! group's leader, reached through the members this node knows: this node's own member first
//! when it has one, else each known member, following the leader they name. Adding a member
//! blocks until it caught up as a learner, then makes it a voter, so commits never wait on an
//! empty member.
//!
//! Each change is also recorded in the definitions, through the metadata group
//! (`DefinitionOp::QueueSetMembers`): the group's members as declared are what a node that is
//! no member shows, what placement counts, and what every node starts the queue with after a
//! restart — a node grown onto a group it was not declared in would otherwise not start its
//! member at all. A removal is recorded once the group made it; an addition before the group
//! makes it (the added node starts its member on seeing it, for the leader to replicate to),
//! and recorded back without the node if the group does not make it.
//!
//! A group's size to grow to is its declaration's `x-quorum-initial-group-size` (3 by
//! default), as placement uses; RabbitMQ's `grow ... all` adds the node to every queue it is
//! not on, whatever the count.

use crate::quorum::QuorumQueue;
use std::time::Duration;

use tokio::time::Instant;

use warren_quorum::metadata::MemberChange;
use warren_quorum::network::{NodeTransport, RaftRequest, RaftResponse, Transport, TransportError};
use warren_quorum::types::{GroupId, NodeId};

use super::cluster::ClusterNode;
use super::placement::initial_group_size;
use crate::definition_op::DefinitionOp;
use crate::vhost::VHost;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Where a group's new members are recorded: the definitions, through the metadata group
/// (the broker's `change`, which implements it). A narrow handle, so that membership changes
/// do not reach the whole broker.
pub trait MembersRecord: Send + Sync {
    /// Makes the definitions change `op` (a `QueueSetMembers`); an error's text on refusal.
    fn record(
        &self,
        op: DefinitionOp,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// How long one group's membership change keeps trying (elections, forwarding, a learner
/// catching up) before it is reported as failed.
const GROUP_CHANGE_TIMEOUT: Duration = Duration::from_secs(90);

/// Between attempts while no member answers as the leader.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// One quorum queue's group as this node knows it.
#[derive(Clone, Debug)]
pub struct QuorumGroup {
    pub vhost: String,
    pub queue: String,
    pub group: GroupId,
    /// Its voters as this node's member lists them, else as declared.
    pub members: Vec<NodeId>,
    /// The members as declared (the node that declared it first).
    pub declared: Vec<NodeId>,
    /// The size it was declared with.
    pub target_size: usize,
}

/// Every quorum queue group of every vhost of `vhosts` (the broker's).
pub fn quorum_groups(vhosts: &[Arc<VHost>]) -> Vec<QuorumGroup> {
    let mut groups = Vec::new();
    for vhost in vhosts {
        for queue in vhost.queues() {
            let Some(quorum) = QuorumQueue::of(&queue) else {
                continue;
            };
            groups.push(QuorumGroup {
                vhost: vhost.name.to_string(),
                queue: queue.name.to_string(),
                group: quorum.group_id(),
                members: quorum.member_ids(),
                declared: quorum.members(),
                target_size: initial_group_size(&queue.arguments)
                    .unwrap_or(super::placement::DEFAULT_INITIAL_GROUP_SIZE),
            });
        }
    }
    groups.sort_by(|a, b| (&a.vhost, &a.queue).cmp(&(&b.vhost, &b.queue)));
    groups
}

/// What happened to one queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupChange {
    pub vhost: String,
    pub queue: String,
    pub result: Result<(), String>,
}

/// Removes node `node` from every group of `groups` that lists it (as a voter or as
/// declared), recording each group's new members in `broker`'s definitions; one result per
/// group changed.
pub async fn shrink_all(
    cluster: &ClusterNode,
    broker: &dyn MembersRecord,
    groups: &[QuorumGroup],
    node: NodeId,
) -> Vec<GroupChange> {
    let mut changes = Vec::new();
    for group in groups {
        if !group.members.contains(&node) && !group.declared.contains(&node) {
            continue;
        }
        changes.push(GroupChange {
            vhost: group.vhost.clone(),
            queue: group.queue.clone(),
            result: shrink(cluster, broker, group, node).await,
        });
    }
    changes
}

/// Removes node `node` from `group` (which lists it) and records the group's new members.
pub(crate) async fn shrink(
    cluster: &ClusterNode,
    broker: &dyn MembersRecord,
    group: &QuorumGroup,
    node: NodeId,
) -> Result<(), String> {
    let reach: Vec<NodeId> = known_members(group)
        .into_iter()
        .filter(|m| *m != node)
        .collect();
    let mut result =
        change_group_members(cluster, group.group, &reach, MemberChange::Remove { node }).await;
    if result.is_ok() {
        let remaining: Vec<NodeId> = group
            .members
            .iter()
            .copied()
            .filter(|m| *m != node)
            .collect();
        result = record_members(broker, group, &remaining).await;
    }
    if let Err(e) = &result {
        tracing::warn!(vhost = %group.vhost, queue = %group.queue, node, error = %e, "removing a forgotten node from a quorum queue's group failed");
    } else {
        tracing::info!(vhost = %group.vhost, queue = %group.queue, node, "removed a forgotten node from the quorum queue's group");
    }
    result
}

/// Adds member `node` (its membership record) to every group of `groups` that does not list it
/// and has fewer members than its size, recording each group's new members in `broker`'s
/// definitions; one result per group changed.
pub async fn grow_all(
    cluster: &ClusterNode,
    broker: &dyn MembersRecord,
    groups: &[QuorumGroup],
    node: NodeId,
) -> Vec<GroupChange> {
    let mut changes = Vec::new();
    for group in groups {
        if group.members.contains(&node) || group.members.len() >= group.target_size {
            continue;
        }
        changes.push(GroupChange {
            vhost: group.vhost.clone(),
            queue: group.queue.clone(),
            result: grow(cluster, broker, group, node).await,
        });
    }
    changes
}

/// Adds cluster member `node` to `group` (which does not list it) and records the group's new
/// members: first recorded, so that the node starts its member of the group on seeing it
/// listed, then made a learner that catches up, then a voter; recorded back without it when
/// the group does not take it.
pub(crate) async fn grow(
    cluster: &ClusterNode,
    broker: &dyn MembersRecord,
    group: &QuorumGroup,
    node: NodeId,
) -> Result<(), String> {
    let Some(info) = cluster
        .metadata()
        .members()
        .into_iter()
        .find(|(id, _)| *id == node)
        .map(|(_, info)| info)
    else {
        return Err(format!("node {node} is not a member of the cluster"));
    };
    let change = MemberChange::Add { node, info };
    let mut grown = group.members.clone();
    grown.push(node);
    let mut result = record_members(broker, group, &grown).await;
    if result.is_ok() {
        result = change_group_members(cluster, group.group, &known_members(group), change).await;
        if result.is_err() {
            let _ = record_members(broker, group, &group.members).await;
        }
    }
    if let Err(e) = &result {
        tracing::warn!(vhost = %group.vhost, queue = %group.queue, node, error = %e, "adding a node to a quorum queue's group failed");
    } else {
        tracing::info!(vhost = %group.vhost, queue = %group.queue, node, "added a node to the quorum queue's group");
    }
    result
}

/// Records `members` (the group's voters after a change) as the queue's members in the
/// definitions, through the metadata group, in the order they were declared in (the first
/// declared member stays first while it is one), the others after.
async fn record_members(
    broker: &dyn MembersRecord,
    group: &QuorumGroup,
    members: &[NodeId],
) -> Result<(), String> {
    let mut ordered: Vec<NodeId> = group
        .declared
        .iter()
        .copied()
        .filter(|m| members.contains(m))
        .collect();
    for member in members {
        if !ordered.contains(member) {
            ordered.push(*member);
        }
    }
    let op = DefinitionOp::QueueSetMembers {
        vhost: group.vhost.clone(),
        name: group.queue.clone(),
        members: ordered,
    };
    broker
        .record(op)
        .await
        .map_err(|e| format!("recording the queue's members failed: {e}"))
}

/// The group's members as voters and as declared, voters first, without repeats.
fn known_members(group: &QuorumGroup) -> Vec<NodeId> {
    let mut members = group.members.clone();
    for node in &group.declared {
        if !members.contains(node) {
            members.push(*node);
        }
    }
    members
}

/// Carries out `change` in group `group` through its leader, asking `members` (and the leaders
/// they name) until one carries it out or the time is up. Already done (the node is no member
/// to remove, or already a voter) counts as done.
async fn change_group_members(
    cluster: &ClusterNode,
    group: GroupId,
    members: &[NodeId],
    change: MemberChange,
) -> Result<(), String> {
    let deadline = Instant::now() + GROUP_CHANGE_TIMEOUT;
    let transport = NodeTransport::Tcp(cluster.transport().clone());
    let own = cluster.id();
    let mut hint: Option<NodeId> = None;
    let mut last_error = String::from("no member of the group answered");
    while Instant::now() < deadline {
        let first = hint.take();
        let targets: Vec<NodeId> = first
            .into_iter()
            .chain(members.iter().copied().filter(|m| Some(*m) != first))
            .collect();
        for to in targets {
            let request = RaftRequest::ChangeMembers(change.clone());
            let answer = if to == own {
                cluster.registry().handle(group, request).await
            } else {
                transport.send(own, to, group, request).await
            };
            match answer {
                Ok(RaftResponse::MembersChanged { .. }) => return Ok(()),
                Ok(_) => last_error = "unexpected answer to a membership change".into(),
                Err(TransportError::NotLeader {
                    leader: Some(leader),
                    ..
                }) if leader != to => {
                    hint = Some(leader);
                    break;
                }
                Err(TransportError::Remote { reason, .. })
                    if reason.contains("is not a member")
                        || reason.contains("already a member") =>
                {
                    return Ok(());
                }
                Err(e) => last_error = e.to_string(),
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    Err(format!(
        "no leader carried out the change within {GROUP_CHANGE_TIMEOUT:?}: {last_error}"
    ))
}
