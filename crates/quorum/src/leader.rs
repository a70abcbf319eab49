//! What only a group's leader serves — client writes and membership changes — and the lease
//! a leader renews before it writes: the code the metadata group, a node's queue groups and a
//! forwarded request (`serve_here`) share.

use crate::error::QuorumError;
use crate::member::MemberChange;
use crate::network::{RaftRequest, RaftResponse, TransportError};
use crate::types::{LogId, NodeId, QueueRaft, Raft};
use openraft::error::{ClientWriteError, ForwardReason, ForwardToLeader, RaftError};
use openraft::rt::Instant as _;
use openraft::{ChangeMembers, LinearizerOption};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

/// How long `MetadataGroup::propose` and membership changes keep trying (through elections
/// and forwarding) before giving up.
pub const METADATA_OP_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a write refused for an expired lease is retried after renewing it.
const LEASE_RENEWALS: usize = 3;

pub(crate) fn raft_error(e: impl std::fmt::Display) -> QuorumError {
    QuorumError::Raft(e.to_string())
}

fn forward_error(forward: ForwardToLeader<QueueRaft>) -> QuorumError {
    QuorumError::NotLeader {
        leader: forward.leader_id,
    }
}

/// A write's refusal as the caller sees it: "not the leader" when it was not appended here (or
/// its entry was discarded by a new leader: the outcome is unknown, and the operations retried
/// on that answer are idempotent or answered as failed), else a failure.
pub(crate) fn client_write_error(e: ClientWriteError<QueueRaft>) -> QuorumError {
    match e {
        ClientWriteError::ForwardToLeader(forward)
        | ClientWriteError::LogEntryDiscarded(forward) => forward_error(forward),
        other => raft_error(other),
    }
}

/// Runs `write` (a client write or a membership change) on `raft`, which must lead; when
/// openraft refuses it because the leader's lease ran out, renews the lease and runs it again.
pub(crate) async fn write_with_lease<T, F, Fut>(raft: &Raft, mut write: F) -> Result<T, QuorumError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RaftError<QueueRaft, ClientWriteError<QueueRaft>>>>,
{
    let mut renewals = 0;
    loop {
        match write().await {
            Ok(done) => return Ok(done),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))
                if forward.reason == ForwardReason::LeaseExpired && renewals < LEASE_RENEWALS =>
            {
                renewals += 1;
                renew_lease(raft).await?;
            }
            Err(RaftError::APIError(e)) => return Err(client_write_error(e)),
            Err(e) => return Err(raft_error(e)),
        }
    }
}

/// Has a majority acknowledge this leader (one round of heartbeats, waited for up to the lease),
/// which renews its lease.
async fn renew_lease(raft: &Raft) -> Result<(), QuorumError> {
    raft.get_read_linearizer(LinearizerOption::new(None, true))
        .await
        .map(|_| ())
        .map_err(|e| match e {
            RaftError::APIError(openraft::error::LinearizableReadError::ForwardToLeader(
                forward,
            )) => forward_error(forward),
            // No majority answered within the lease: this leader cannot commit either.
            RaftError::APIError(e) => {
                tracing::debug!(error = %e, "a leader could not renew its lease");
                QuorumError::NotLeader { leader: None }
            }
            other => raft_error(other),
        })
}

/// Renews this leader's lease unless a majority acknowledged it within half the lease (or it
/// is its group's only voter, which needs no one's acknowledgement).
pub(crate) async fn ensure_lease(raft: &Raft) -> Result<(), QuorumError> {
    let fresh = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        if metrics.current_leader != Some(metrics.id) {
            return Err(QuorumError::NotLeader {
                leader: metrics.current_leader,
            });
        }
        let half_lease = Duration::from_millis(raft.config().election_timeout_max / 2);
        metrics.membership_config.voter_ids().count() == 1
            || metrics
                .last_quorum_acked
                .as_ref()
                .is_some_and(|acked| acked.elapsed() < half_lease)
    };
    if fresh {
        Ok(())
    } else {
        renew_lease(raft).await
    }
}

/// Carries out a membership change on `raft`, which must lead; returns the log position of
/// the final membership.
pub(crate) async fn change_members_here(
    raft: &Raft,
    change: MemberChange,
) -> Result<LogId, QuorumError> {
    match change {
        MemberChange::Add { node, info } => {
            let voters: BTreeSet<NodeId> = raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .voter_ids()
                .collect();
            if voters.contains(&node) {
                return Err(QuorumError::Raft(format!(
                    "node {node} ({}) is already a member",
                    info.name
                )));
            }
            // Blocking: returns once the learner's log caught up, so promoting it next does not
            // stall commits on a member that has nothing yet.
            let learner = tokio::time::timeout(
                METADATA_OP_TIMEOUT,
                write_with_lease(raft, || raft.add_learner(node, info.to_node(), true)),
            )
            .await
            .map_err(|_| {
                QuorumError::Raft(format!(
                    "node {node} ({}) did not catch up within {METADATA_OP_TIMEOUT:?}; is it \
                     running and reachable at {}?",
                    info.name, info.addr
                ))
            })?;
            learner?;
            write_with_lease(raft, || {
                raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([node])), false)
            })
            .await
            .map(|response| response.log_id)
        }
        MemberChange::Remove { node } => {
            let known = raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .nodes()
                .any(|(id, _)| *id == node);
            if !known {
                return Err(QuorumError::Raft(format!("node {node} is not a member")));
            }
            write_with_lease(raft, || {
                raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([node])), false)
            })
            .await
            .map(|response| response.log_id)
        }
    }
}

/// Serves a leader-only request on this node's member (what a forwarded request gets).
pub(crate) async fn serve_here(
    raft: &Raft,
    request: RaftRequest,
) -> Result<RaftResponse, TransportError> {
    let node = raft.metrics().borrow().id;
    match request {
        RaftRequest::ClientWrite(proposal) => {
            match write_with_lease(raft, || raft.client_write(proposal.clone())).await {
                Ok(response) => Ok(RaftResponse::ClientWrite {
                    log_id: response.log_id,
                    reply: response.data,
                }),
                Err(QuorumError::NotLeader { leader }) => {
                    Err(TransportError::NotLeader { node, leader })
                }
                Err(e) => Err(TransportError::Remote {
                    node,
                    reason: e.to_string(),
                }),
            }
        }
        // Said apart from "not the leader" (which an initialized follower without a leader
        // answers too): a node joining through this one learns it is in no cluster, and only
        // a node that heard that from every seed may form a cluster (see the broker's join).
        RaftRequest::ChangeMembers(_) if !raft.is_initialized().await.unwrap_or(true) => {
            Err(TransportError::NotInitialized(node))
        }
        RaftRequest::ChangeMembers(change) => match change_members_here(raft, change).await {
            Ok(log_id) => Ok(RaftResponse::MembersChanged { log_id }),
            Err(QuorumError::NotLeader { leader }) => {
                Err(TransportError::NotLeader { node, leader })
            }
            Err(e) => Err(TransportError::Remote {
                node,
                reason: e.to_string(),
            }),
        },
        _ => Err(TransportError::Remote {
            node,
            reason: "not a leader-only request".into(),
        }),
    }
}
