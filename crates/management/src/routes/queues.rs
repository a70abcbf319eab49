//! /api/queues: list (all, per vhost) with message counts and rates, one (with its
//! consumers), PUT (declare), DELETE (`if-empty`, `if-unused`), DELETE …/contents (purge)
//! and POST …/get (fetch messages with an ack mode, as the console's "Get messages").
//! Declaring and deleting need configure on the queue, purging and getting read
//! (`acting`).

use super::{body_bool, body_json, connections};
use crate::acting::Report;
use crate::auth::Identity;
use crate::cluster_view::OtherStats;
use crate::error::{ApiError, ApiResult};
use crate::json::{details, json_to_table, message_stats, table_to_json, QUEUE_STATS};
use crate::list::{respond_named, respond_one, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::access::{required, AccessKind};
use warren_broker::policy::EntityKind;
use warren_broker::queue_type::Replicas;
use warren_broker::quorum::status::{GroupStatus, NodeId, NodeNames};
use warren_broker::vhost::TraceOrigin;
use warren_broker::{DefinitionOp, Queue, VHost};
use warren_codec::{BasicProperties, FieldTable, Reader};

/// messages (ready + unacknowledged), messages_ready, messages_unacknowledged.
pub use crate::queue_rates::message_totals;

/// The sums of `message_totals` over a vhost's queues, and how many queues there are.
pub fn vhost_totals(vhost: &VHost) -> ([u64; 3], usize) {
    let queues = vhost.queues();
    let mut totals = [0u64; 3];
    for q in &queues {
        for (total, n) in totals.iter_mut().zip(message_totals(q)) {
            *total += n;
        }
    }
    (totals, queues.len())
}

fn queue_json(api: &Api, names: &NodeNames, vhost: &VHost, q: &Arc<Queue>) -> Value {
    let applied = vhost.applied_policies(EntityKind::Queue, &q.name);
    let vhost = vhost.name.as_str();
    let rates = api.queue_rates.get(vhost, &q.name);
    let rate = |i: usize| {
        rates
            .as_ref()
            .and_then(|r| r.get(super::QUEUE_TOTALS_COLUMN + i))
            .copied()
            .unwrap_or(0.0)
    };
    let [messages, ready, unacked] = message_totals(q);
    let mut shown = json!({
        "name": q.name.as_str(),
        "vhost": vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner.is_some(),
        "arguments": table_to_json(&q.arguments),
        // The serving node: this one, or the home node a remote record forwards to.
        "node": q.home_node().unwrap_or(api.node.as_str()),
        "type": q.type_name(),
        "state": if q.is_reachable() { "running" } else { "down" },
        "consumers": q.consumer_count(),
        "messages": messages,
        "messages_details": details(rate(0)),
        "messages_ready": ready,
        "messages_ready_details": details(rate(1)),
        "messages_unacknowledged": unacked,
        "messages_unacknowledged_details": details(rate(2)),
        "policy": applied.policy_name(),
        "operator_policy": applied.operator_policy_name(),
        "effective_policy_definition": applied.effective_definition(),
        "exclusive_consumer_tag": null,
        "single_active_consumer_tag": null,
        "message_stats": message_stats(&q.stats.snapshot(), rates.as_deref(), QUEUE_STATS),
    });
    if q.served_here() {
        // RabbitMQ's byte and memory counts (what `rabbitmqctl list_queues message_bytes`
        // and the console's queue page show), from the serving node's queue.
        let d = q.depth();
        for (key, value) in [
            ("message_bytes", d.ready_bytes + d.unacked_bytes),
            ("message_bytes_ready", d.ready_bytes),
            ("message_bytes_unacknowledged", d.unacked_bytes),
            (
                "message_bytes_ram",
                d.ready_in_memory_bytes + d.unacked_bytes,
            ),
            ("message_bytes_persistent", d.persistent_bytes),
            ("messages_persistent", d.persistent),
            ("messages_ram", d.ready_in_memory + d.unacked),
            ("messages_ready_ram", d.ready_in_memory),
            ("messages_unacknowledged_ram", d.unacked),
            ("messages_paged_out", d.paged_out),
            ("message_bytes_paged_out", d.paged_out_bytes),
        ] {
            shown[key] = json!(value);
        }
        shown["head_message_timestamp"] = json!(d.head_timestamp_s);
        if let Some(capacity) = d.consumer_capacity {
            shown["consumer_capacity"] = json!(capacity);
            shown["consumer_utilisation"] = json!(capacity);
        }
    }
    if let Some(Replicas {
        members, leader, ..
    }) = q.replicas()
    {
        // RabbitMQ's quorum queue fields: the leader (also the queue's `node`), every member
        // and the members that are running, by node name (leader null while the group elects,
        // and on a node that is no member until it learns the leader).
        let running = |id: &&NodeId| names.is_running(**id);
        if let Some(leader) = leader {
            shown["node"] = json!(names.name(leader));
        }
        shown["leader"] = json!(leader.map(|id| names.name(id)));
        shown["members"] = json!(members.iter().map(|id| names.name(*id)).collect::<Vec<_>>());
        shown["online"] = json!(members
            .iter()
            .filter(running)
            .map(|id| names.name(*id))
            .collect::<Vec<_>>());
    }
    shown
}

/// Serves the queues of `vhosts` as the query asks, with the other nodes' stats added to
/// the ones served.
async fn respond_queues(api: &Api, vhosts: Vec<Arc<VHost>>, query: &Query) -> ApiResult {
    let others = OtherStats::gather(api).await;
    let names = api.broker.node_names();
    let vhosts = super::listed::<Queue>(vhosts);
    respond_named(&vhosts, query, |served| {
        let mut items: Vec<Value> = served
            .iter()
            .map(|(listed, q)| queue_json(api, &names, &listed.vhost, q))
            .collect();
        others.add_to_objects("queues", &mut items);
        items
    })
}

/// Warren's own `raft` object on one quorum queue's GET: the group as this node's member
/// sees it (what `warren ctl quorum_status` prints and the console's queue page shows), null
/// while the group starts. The one place the API shows Raft membership: RabbitMQ 3.10's API
/// has no quorum_status route (checked against 3.10.8: `GET …/{name}/quorum_status` is 400
/// there like any unknown path), only `leader`, `members` and `online`, which Warren also has.
fn raft_json(names: &NodeNames, status: &GroupStatus) -> Value {
    json!({
        "node": names.name(status.node),
        "state": status.state,
        "leader": status.leader.map(|id| names.name(id)),
        "term": status.term,
        "commit_index": status.commit_index,
        "last_applied_index": status.last_applied_index,
        "last_log_index": status.last_log_index,
        "snapshot_index": status.snapshot_index,
        "log_entries": status.log_entries,
        "members": status.members.iter().map(|m| json!({
            "name": names.name(m.node),
            "state": m.state,
            "voter": m.voter,
            "online": names.is_running(m.node),
            "matched_index": m.matched_index,
            "lag": m.lag,
        })).collect::<Vec<_>>(),
    })
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhosts = api.used_vhosts(&who);
    respond_queues(&api, vhosts, &query).await
}

pub async fn in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    respond_queues(&api, vec![vhost], &query).await
}

fn find(api: &Api, who: &Identity, vhost: &str, name: &str) -> ApiResult<(Arc<VHost>, Arc<Queue>)> {
    let vhost = api.vhost_for(who, vhost)?;
    let q = vhost.queue(name).ok_or_else(ApiError::not_found)?;
    Ok((vhost, q))
}

pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    let (vhost, q) = find(&api, &who, &vhost, &name)?;
    let names = api.broker.node_names();
    let mut items = [queue_json(&api, &names, &vhost, &q)];
    OtherStats::gather(&api)
        .await
        .add_to_objects("queues", &mut items);
    let [mut body] = items;
    if let Some(replicas) = q.replicas() {
        body["raft"] = replicas
            .group
            .map_or(Value::Null, |status| raft_json(&names, &status));
    }
    body["consumer_details"] =
        Value::Array(connections::consumers_of(&api, &who, Some(&vhost.name), Some(&name)).await);
    Ok(respond_one(body, &query))
}

/// Declares a plain queue (no arguments, not durable) if it does not exist.
pub async fn declare_simple(api: &Api, vhost: &VHost, name: &str) -> ApiResult<()> {
    api.change(DefinitionOp::declare_named_queue(
        &vhost.name,
        name,
        false,
        false,
        FieldTable::new(),
    ))
    .await?;
    Ok(())
}

/// PUT: declares the queue (201 when new, 204 when it existed and is equivalent; 400 for
/// different flags or arguments, as queue.declare's 406). As queue.declare, a new queue
/// with a dead-letter exchange also needs read on itself and write on that exchange.
pub async fn declare(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let vhost = api.vhost_for(&who, &vhost)?;
    let body = body_json(&body)?;
    let mut arguments =
        json_to_table(body.get("arguments"), "queue arguments").map_err(ApiError::bad_request)?;
    // 3.13's "type" field is x-queue-type; Warren's queues are all classic.
    if let Some(kind) = body.get("type").and_then(Value::as_str) {
        if arguments.get("x-queue-type").is_none() {
            arguments.insert("x-queue-type", warren_codec::FieldValue::string(kind));
        }
    }
    if name.is_empty() || name.len() > 255 {
        return Err(ApiError::bad_request(format!(
            "invalid queue name '{name}'"
        )));
    }
    let acting = api.acting(&who, &vhost.name, Report::Plain)?;
    let exists = vhost.queue(&name).is_some();
    acting.all(&required::queue_declare(&name, exists, &arguments))?;
    let outcome = api
        .change(DefinitionOp::declare_named_queue(
            &vhost.name,
            &name,
            body_bool(&body, "durable", false)?,
            body_bool(&body, "auto_delete", false)?,
            arguments,
        ))
        .await?;
    Ok(super::created_or_updated(!outcome.created()))
}

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    // Not found here: maybe not applied here yet (`Api::caught_up`).
    let (vhost, q) = match find(&api, &who, &vhost, &name) {
        Ok(found) => found,
        Err(_) => {
            api.caught_up().await?;
            find(&api, &who, &vhost, &name)?
        }
    };
    api.acting(&who, &vhost.name, Report::Plain)?
        .queue(AccessKind::Configure, &name)?;
    if query.get("if-unused").is_some_and(|v| v == "true") && q.consumer_count() > 0 {
        return Err(ApiError::bad_request(format!(
            "queue '{name}' in vhost '{}' in use",
            vhost.name
        )));
    }
    if query.get("if-empty").is_some_and(|v| v == "true") && q.message_count() > 0 {
        return Err(ApiError::bad_request(format!(
            "queue '{name}' in vhost '{}' is not empty",
            vhost.name
        )));
    }
    // if-unused and if-empty were judged above from this node's live queue; the removal
    // itself is a definitions change. Another connection's exclusive queue is refused
    // there (400, the locked queue's text), as RabbitMQ 3.10 refuses it.
    api.change(DefinitionOp::QueueDelete {
        vhost: vhost.name.clone(),
        name,
        connection: 0,
    })
    .await?;
    Ok(super::no_content())
}

pub async fn purge(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    let (vhost, q) = find(&api, &who, &vhost, &name)?;
    api.acting(&who, &vhost.name, Report::Plain)?
        .queue(AccessKind::Read, &name)?;
    q.purge();
    Ok(super::no_content())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum AckMode {
    Ack,
    RejectRequeue,
    Reject,
}

/// POST …/get: `{"count", "ackmode", "encoding", "truncate"}` → the messages, as RabbitMQ's.
/// Requeued messages go back only after all are taken, so `count` distinct messages come
/// back, each then marked redelivered.
pub async fn get_messages(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let (vhost, q) = find(&api, &who, &vhost, &name)?;
    api.acting(&who, &vhost.name, Report::Get)?
        .queue(AccessKind::Read, &name)?;
    let body = body_json(&body)?;
    let count = body
        .get("count")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .ok_or_else(|| ApiError::bad_request("count is required"))?;
    let mode = match body.get("ackmode").and_then(Value::as_str) {
        Some("ack_requeue_true") | Some("reject_requeue_true") => AckMode::RejectRequeue,
        Some("ack_requeue_false") => AckMode::Ack,
        Some("reject_requeue_false") => AckMode::Reject,
        _ => {
            return Err(ApiError::bad_request(
                "ackmode must be ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false",
            ))
        }
    };
    let base64_only = match body.get("encoding").and_then(Value::as_str) {
        Some("auto") | None => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "encoding must be auto or base64, not {other}"
            )))
        }
    };
    let truncate = body
        .get("truncate")
        .and_then(|t| {
            t.as_u64()
                .or_else(|| t.as_str().and_then(|s| s.parse().ok()))
        })
        .map(|t| t as usize);
    let mut taken = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let Some((m, remaining)) = q.get(false) else {
            break;
        };
        warren_broker::MessageStats::add(&q.stats.get, 1);
        if vhost.tracing() {
            vhost.trace_deliver(&q.name, &m, TraceOrigin::http_api(&who.name));
        }
        let msg = &m.message;
        let properties = BasicProperties::decode(&mut Reader::new(msg.properties_bytes()))
            .map(|p| super::exchanges::properties_to_json(&p))
            .unwrap_or_else(|_| json!({}));
        let full = msg.body();
        let shown = &full[..truncate.map_or(full.len(), |t| t.min(full.len()))];
        let (payload, encoding) = match std::str::from_utf8(shown) {
            Ok(s) if !base64_only => (s.to_owned(), "string"),
            _ => (
                base64::engine::general_purpose::STANDARD.encode(shown),
                "base64",
            ),
        };
        out.push(json!({
            "payload_bytes": full.len(),
            "redelivered": m.redelivered,
            "exchange": msg.exchange(),
            "routing_key": msg.routing_key(),
            "message_count": remaining,
            "properties": properties,
            "payload": payload,
            "payload_encoding": encoding,
        }));
        taken.push(m);
    }
    match mode {
        AckMode::Ack => {
            warren_broker::MessageStats::add(&q.stats.ack, taken.len() as u64);
            q.settle(taken, Vec::new(), Vec::new());
        }
        AckMode::RejectRequeue => q.settle(Vec::new(), taken, Vec::new()),
        AckMode::Reject => q.settle(Vec::new(), Vec::new(), taken),
    }
    Ok(Json(Value::Array(out)).into_response())
}
