//! The cluster: GET /api/cluster/status (members, metadata-group leader, term, each member's
//! matched index and lag), POST /api/cluster/nodes (add a running node), DELETE
//! /api/cluster/nodes/{name} (forget a node, RabbitMQ's forget_cluster_node: it leaves every
//! quorum queue's group too, and a running node is refused), POST
//! /api/queues/quorum/replicas/on/{node}/grow (RabbitMQ's route for `rabbitmq-queues grow NODE
//! all`: the node joins every quorum queue group below its size), and the other members'
//! entries of /api/nodes. A single node answers as a cluster of one.

use super::{body_json, no_content};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::Api;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::quorum::cluster::{ClusterMember, ClusterStatus};
use warren_broker::quorum::membership::quorum_groups;

fn member_json(member: &ClusterMember) -> Value {
    json!({
        "name": member.name,
        "id": member.id.to_string(),
        "address": member.address,
        "running": member.running,
        "voter": member.voter,
        "leader": member.leader,
        "matched_index": member.matched_index,
        "lag": member.lag,
    })
}

fn status_json(status: &ClusterStatus) -> Value {
    json!({
        "node": status.node,
        "node_id": status.node_id.to_string(),
        "leader": status.leader,
        "term": status.term,
        "state": status.state,
        "last_log_index": status.last_log_index,
        "last_applied_index": status.last_applied_index,
        "members": status.members.iter().map(member_json).collect::<Vec<_>>(),
    })
}

pub async fn status(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
) -> ApiResult<Json<Value>> {
    who.require_monitor()?;
    Ok(Json(match api.broker.cluster() {
        Some(cluster) => status_json(&cluster.status()),
        None => json!({
            "node": api.node,
            "node_id": null,
            "leader": api.node,
            "term": 0,
            "state": "single node",
            "last_log_index": null,
            "last_applied_index": null,
            "members": [{
                "name": api.node, "id": null, "address": null, "running": true,
                "voter": true, "leader": true, "matched_index": null, "lag": 0,
            }],
        }),
    }))
}

fn single_node() -> ApiError {
    ApiError::bad_request("this node is not a cluster node: start it with --cluster-port")
}

pub async fn add_node(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let cluster = api.broker.cluster().ok_or_else(single_node)?;
    let body = body_json(&body)?;
    let field = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| ApiError::bad_request(format!("{key} is required")))
    };
    let (name, address) = (field("name")?, field("address")?);
    cluster
        .add_node(&name, &address)
        .await
        .map_err(ApiError::unavailable)?;
    Ok(no_content())
}

pub async fn forget_node(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
) -> ApiResult {
    who.require_admin()?;
    let cluster = api.broker.cluster().ok_or_else(single_node)?;
    if name == cluster.name() {
        return Err(ApiError::bad_request(
            "a node cannot forget itself: run this against another member",
        ));
    }
    let groups = quorum_groups(&api.broker.vhosts());
    cluster
        .forget_node(&name, api.broker.as_ref(), &groups)
        .await
        .map_err(ApiError::unavailable)?;
    Ok(no_content())
}

/// The queues a grow changed: `[{"vhost", "name", "result": "ok" | the error}]`.
pub async fn grow_quorum_queues(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(node): Path<String>,
) -> ApiResult {
    who.require_admin()?;
    let cluster = api.broker.cluster().ok_or_else(single_node)?;
    let groups = quorum_groups(&api.broker.vhosts());
    let changes = cluster
        .grow_quorum_queues(&node, api.broker.as_ref(), &groups)
        .await
        .map_err(ApiError::unavailable)?;
    let listed: Vec<Value> = changes
        .iter()
        .map(|change| {
            json!({
                "vhost": change.vhost,
                "name": change.queue,
                "result": match &change.result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.clone(),
                },
            })
        })
        .collect();
    Ok(Json(Value::Array(listed)).into_response())
}

/// /api/nodes entries of the cluster's other members (RabbitMQ lists every node; what this
/// node cannot measure of another is left out).
pub fn other_members(api: &Api) -> Vec<Value> {
    let Some(cluster) = api.broker.cluster() else {
        return Vec::new();
    };
    cluster
        .status()
        .members
        .iter()
        .filter(|member| member.name != api.node)
        .map(|member| {
            let mut node = json!({"name": member.name, "type": "disc", "running": member.running});
            if let Some(up_for_ms) = member.up_for_ms {
                // RabbitMQ's `uptime`; here how long this node has seen the peer up.
                node["uptime"] = json!(up_for_ms);
            }
            add_raft_fields(&mut node, member);
            node
        })
        .collect()
}

/// The fields `add_raft_fields` sets.
pub const RAFT_FIELDS: [&str; 5] = [
    "cluster_address",
    "raft_voter",
    "raft_leader",
    "raft_matched_index",
    "raft_lag",
];

/// Warren's Raft fields on a node's /api/nodes entry.
pub fn add_raft_fields(node: &mut Value, member: &ClusterMember) {
    node["cluster_address"] = json!(member.address);
    node["raft_voter"] = json!(member.voter);
    node["raft_leader"] = json!(member.leader);
    node["raft_matched_index"] = json!(member.matched_index);
    node["raft_lag"] = json!(member.lag);
}

/// This node's own member entry, when clustered.
pub fn own_member(api: &Api) -> Option<(ClusterStatus, ClusterMember)> {
    let status = api.broker.cluster()?.status();
    let member = status
        .members
        .iter()
        .find(|member| member.name == api.node)?
        .clone();
    Some((status, member))
}
