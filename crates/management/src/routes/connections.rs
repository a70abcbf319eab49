//! Connections, channels and consumers of every node (this node's from the broker's
//! registry, the others' through `cluster_view`): /api/connections
//! (list, one, DELETE closes it with a reason), /api/channels, /api/consumers and their
//! per-vhost and per-connection lists. Users who are not monitoring see only their own, and
//! only administrators close others' connections; another user's connection is refused with
//! 401, as RabbitMQ (is_authorized_user).

use super::rate_key;
use crate::auth::{Identity, NOT_OBJECT_USER};
use crate::cluster_view::{close_elsewhere, cluster_connections};
use crate::error::{ApiError, ApiResult};
use crate::json::{details, message_stats, table_to_json, CHANNEL_STATS};
use crate::list::{respond, respond_one, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Extension;
use serde_json::{json, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use warren_broker::registry::{ChannelInfo, ConnectionInfo, ConsumerInfo};

/// RabbitMQ's reason when DELETE carries no X-Reason header.
const DEFAULT_CLOSE_REASON: &str = "Closed via management plugin";

fn connection_json(api: &Api, c: &ConnectionInfo) -> Value {
    let rates = api.rates.get(&rate_key("connection", "", &c.name));
    let rate = |i: usize| {
        rates
            .as_ref()
            .and_then(|r| r.get(i))
            .copied()
            .unwrap_or(0.0)
    };
    json!({
        "name": c.name,
        "node": api.node,
        "type": "network",
        "protocol": c.protocol,
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "auth_mechanism": c.auth_mechanism,
        "client_properties": table_to_json(&c.client_properties.unpack()),
        "connected_at": c.connected_at_ms,
        "channels": c.channels().len(),
        "channel_max": c.channel_max,
        "frame_max": c.frame_max,
        "timeout": c.heartbeat_s,
        "state": c.state().name(),
        "ssl": c.tls,
        "ssl_protocol": null, "ssl_key_exchange": null, "ssl_cipher": null, "ssl_hash": null,
        "peer_cert_subject": null, "peer_cert_issuer": null, "peer_cert_validity": null,
        "recv_oct": c.recv_oct.load(Relaxed),
        "recv_oct_details": details(rate(0)),
        "recv_cnt": c.recv_cnt.load(Relaxed),
        "send_oct": c.send_oct.load(Relaxed),
        "send_oct_details": details(rate(1)),
        "send_cnt": c.send_cnt.load(Relaxed),
        "send_pend": 0,
    })
}

fn channel_name(c: &ConnectionInfo, ch: &ChannelInfo) -> String {
    format!("{} ({})", c.name, ch.number)
}

fn channel_json(api: &Api, c: &ConnectionInfo, ch: &ChannelInfo) -> Value {
    let rates = api
        .rates
        .get(&rate_key("channel", &c.name, &ch.number.to_string()));
    let blocked = c.state().name() == "blocked";
    json!({
        "name": channel_name(c, ch),
        "number": ch.number,
        "node": api.node,
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "connection_details": {"name": c.name, "peer_host": c.peer.ip().to_string(), "peer_port": c.peer.port()},
        "prefetch_count": ch.prefetch_count.load(Relaxed),
        "global_prefetch_count": ch.global_prefetch_count(),
        "confirm": ch.confirm.load(Relaxed),
        "transactional": ch.transactional.load(Relaxed),
        "messages_unacknowledged": ch.messages_unacknowledged.load(Relaxed),
        "messages_unconfirmed": ch.messages_unconfirmed.load(Relaxed),
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "consumer_count": ch.consumer_count(),
        "state": if blocked { "flow" } else { "running" },
        "message_stats": message_stats(&ch.stats.snapshot(), rates.as_deref(), CHANNEL_STATS),
    })
}

pub fn consumer_json(api: &Api, c: &ConnectionInfo, ch: &ChannelInfo, k: &ConsumerInfo) -> Value {
    json!({
        "consumer_tag": k.tag,
        "queue": {"name": k.queue, "vhost": c.vhost},
        "ack_required": k.ack_required,
        "exclusive": k.exclusive,
        "prefetch_count": k.prefetch_count,
        "arguments": table_to_json(&k.arguments),
        "active": true,
        "activity_status": "up",
        "channel_details": {
            "name": channel_name(c, ch),
            "number": ch.number,
            "connection_name": c.name,
            "peer_host": c.peer.ip().to_string(),
            "peer_port": c.peer.port(),
            "node": api.node,
            "user": c.user,
        },
    })
}

/// This node's connections, each with its channels and their consumers, as the API shows
/// them: `[{"connection", "channels": [{"channel", "consumers": [...]}]}]` (what
/// `cluster_view` gathers from every node).
pub fn connection_views(api: &Api) -> Vec<Value> {
    api.broker
        .registry
        .connections()
        .iter()
        .map(|c| {
            let channels: Vec<Value> = c
                .channels()
                .iter()
                .map(|ch| {
                    let consumers: Vec<Value> = ch
                        .consumers()
                        .iter()
                        .map(|k| consumer_json(api, c, ch, k))
                        .collect();
                    json!({"channel": channel_json(api, c, ch), "consumers": consumers})
                })
                .collect();
            json!({"connection": connection_json(api, c), "channels": channels})
        })
        .collect()
}

/// Whether `who` may see the connection of `view`: its own, or any for monitoring users.
fn sees(who: &Identity, view: &Value) -> bool {
    who.is_monitor() || view["connection"]["user"].as_str() == Some(who.name.as_str())
}

/// The connection views of every node that `who` sees, of one vhost or all.
pub(crate) async fn visible(api: &Api, who: &Identity, vhost: Option<&str>) -> Vec<Value> {
    cluster_connections(api, connection_views(api))
        .await
        .into_iter()
        .filter(|view| sees(who, view))
        .filter(|view| vhost.is_none_or(|v| view["connection"]["vhost"].as_str() == Some(v)))
        .collect()
}

pub(crate) fn channels_in(view: &Value) -> &[Value] {
    view["channels"].as_array().map_or(&[], Vec::as_slice)
}

pub(crate) fn consumers_in(channel: &Value) -> &[Value] {
    channel["consumers"].as_array().map_or(&[], Vec::as_slice)
}

/// Every consumer the user sees on any node, of one vhost or all, optionally of one queue.
pub async fn consumers_of(
    api: &Api,
    who: &Identity,
    vhost: Option<&str>,
    queue: Option<&str>,
) -> Vec<Value> {
    visible(api, who, vhost)
        .await
        .iter()
        .flat_map(|view| channels_in(view).iter().flat_map(consumers_in))
        .filter(|k| queue.is_none_or(|q| k["queue"]["name"].as_str() == Some(q)))
        .cloned()
        .collect()
}

pub async fn list(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let items = visible(&api, &who, None)
        .await
        .into_iter()
        .map(|mut view| view["connection"].take())
        .collect();
    respond(items, &query)
}

pub async fn in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    api.vhost_for(&who, &vhost)?;
    let items = visible(&api, &who, Some(&vhost))
        .await
        .into_iter()
        .map(|mut view| view["connection"].take())
        .collect();
    respond(items, &query)
}

/// The view of connection `name` on any node, if `who` may see it (another user's is
/// refused with 401, as RabbitMQ).
async fn find(api: &Api, who: &Identity, name: &str) -> ApiResult<Value> {
    let view = cluster_connections(api, connection_views(api))
        .await
        .into_iter()
        .find(|view| view["connection"]["name"].as_str() == Some(name))
        .ok_or_else(ApiError::not_found)?;
    match sees(who, &view) {
        true => Ok(view),
        false => Err(ApiError::not_authorised(NOT_OBJECT_USER)),
    }
}

pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let mut view = find(&api, &who, &name).await?;
    Ok(respond_one(view["connection"].take(), &query))
}

/// DELETE /api/connections/NAME: connection.close 320 CONNECTION_FORCED with the
/// X-Reason header's text, on whichever node the connection is. Administrators close any
/// connection, others their own.
pub async fn close(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult {
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or(DEFAULT_CLOSE_REASON);
    let refused = || ApiError::not_authorised(NOT_OBJECT_USER);
    if let Some(c) = api.broker.registry.connection(&name) {
        if !who.is_admin() && c.user != who.name {
            return Err(refused());
        }
        c.request_close(reason.to_owned());
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let view = find(&api, &who, &name).await?;
    let connection = &view["connection"];
    if !who.is_admin() && connection["user"].as_str() != Some(who.name.as_str()) {
        return Err(refused());
    }
    let node = connection["node"].as_str().unwrap_or_default();
    match close_elsewhere(&api, node, &name, reason).await {
        true => Ok(StatusCode::NO_CONTENT.into_response()),
        false => Err(ApiError::not_found()),
    }
}

pub async fn channels_of(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let view = find(&api, &who, &name).await?;
    let items = channels_in(&view)
        .iter()
        .map(|ch| ch["channel"].clone())
        .collect();
    respond(items, &query)
}

async fn channels_where(api: &Api, who: &Identity, vhost: Option<&str>) -> Vec<Value> {
    visible(api, who, vhost)
        .await
        .iter()
        .flat_map(|view| channels_in(view).iter().map(|ch| ch["channel"].clone()))
        .collect()
}

pub async fn channels(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    respond(channels_where(&api, &who, None).await, &query)
}

pub async fn channels_in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    api.vhost_for(&who, &vhost)?;
    respond(channels_where(&api, &who, Some(&vhost)).await, &query)
}

/// GET /api/channels/NAME, NAME being "CONNECTION (NUMBER)".
pub async fn one_channel(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let (connection, number) = name
        .strip_suffix(')')
        .and_then(|n| n.rsplit_once(" ("))
        .ok_or_else(ApiError::not_found)?;
    let number: u16 = number.parse().map_err(|_| ApiError::not_found())?;
    let view = find(&api, &who, connection).await?;
    let channel = channels_in(&view)
        .iter()
        .find(|ch| ch["channel"]["number"] == number)
        .ok_or_else(ApiError::not_found)?;
    let mut body = channel["channel"].clone();
    body["consumer_details"] = Value::Array(consumers_in(channel).to_vec());
    Ok(respond_one(body, &query))
}

pub async fn consumers(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    respond(consumers_of(&api, &who, None, None).await, &query)
}

pub async fn consumers_in_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    // RabbitMQ checks no permission here: the list holds only what the user sees anyway.
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    respond(consumers_of(&api, &who, Some(&vhost), None).await, &query)
}
